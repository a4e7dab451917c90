"""A sweep file's ``[launcher]``: a registered DomainBed command launcher and the settings it
declares, refused before anything runs, then given to the jobs as environment variables (one
already set wins)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import Option, as_launcher
from dmg_domainbed.preflight.environment import job_environment
from dmg_domainbed.rules import Rule, not_blank, refuse_unknown_keys


def launcher_options(source: Path, name: str) -> dict[str, Option]:
    """The settings launcher ``name`` declares, by key; :class:`UserError` if unknown."""
    import dmg_domainbed

    dmg_domainbed.register()
    from domainbed import command_launchers

    if name not in command_launchers.REGISTRY:
        raise UserError(
            f"{source}: unknown launcher {name!r}; registered DomainBed command launchers: "
            f"{', '.join(sorted(command_launchers.REGISTRY))}"
        )
    declared = as_launcher(command_launchers.REGISTRY[name]).options
    return {option.name: option for option in declared}


def launcher_table(
    source: Path, table: Any, registered: bool = True
) -> tuple[str | None, dict[str, Any]]:
    """The launcher ``[launcher]`` names (``None``: none) and its settings, checked against
    what it declares with ``registered``."""
    if not isinstance(table, dict):
        raise UserError(
            f'{source}: [launcher] must be a table with name = "LAUNCHER" and its settings'
        )
    settings = dict(table)
    name = settings.pop("name", None)
    if name is not None:
        Rule((str,), validate=not_blank).check(
            name, f"{source}: [launcher] name", "Name a DomainBed command launcher."
        )
    if settings and name is None:
        raise UserError(
            f'{source}: [launcher] has settings ({", ".join(settings)}) but no name = "..."'
        )
    if registered and name is not None:
        options = launcher_options(source, name)
        refuse_unknown_keys(source, f"[launcher] of {name}", settings, options)
        for key, value in settings.items():
            options[key].check(value, f"{source}: [launcher] {key}")
    return name, settings


def launcher_environment(
    source: Path,
    launcher: str,
    environ: Mapping[str, str],
    file_launcher: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The jobs' environment and notes: ``environ``, the file's ``settings`` for
    ``file_launcher`` when it is ``launcher`` (a variable already set wins), this interpreter's
    folder first on PATH (DomainBed starts jobs with the ``python`` found there)."""
    options = launcher_options(source, launcher)
    env = job_environment(environ)
    settings = settings or {}
    if launcher != file_launcher:
        unused = f"the file's [launcher] settings are for {file_launcher}: not used"
        return env, [unused] if settings else []
    notes = []
    for key, value in settings.items():
        variable = options[key].env
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if env.get(variable, "").strip():
            notes.append(
                f"{variable}={env[variable]} from the environment wins over {key} = {text} in "
                "the file"
            )
        else:
            env[variable] = text
    return env, notes
