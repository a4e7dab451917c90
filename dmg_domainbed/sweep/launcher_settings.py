"""The launcher a sweep names and the settings its file gives it (``[launcher]``).

A file's ``[launcher]`` table names a registered DomainBed command launcher and gives it the
settings it declares (its ``options``, :class:`~dmg_domainbed.launchers.common.Option`): both
are refused before anything runs (:func:`launcher_table`). The settings then reach the jobs as
environment variables (:func:`launcher_environment`), where a variable already set wins, so a
cluster's own settings are not overridden by a file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import Option, as_launcher
from dmg_domainbed.rules import Rule, not_blank, refuse_unknown_keys


def launcher_options(source: Path, name: str) -> dict[str, Option]:
    """The settings the command launcher registered as ``name`` declares, by ``[launcher]``
    key (this package's launchers registered); :class:`UserError` if none is registered so
    (named in ``source``)."""
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
    """The launcher a file's ``[launcher]`` table (of ``source``) names, ``None`` if none, and
    the settings it gives it. The table names it with a non-blank ``name`` when it gives
    settings; with ``registered``, the name is that of a registered launcher and the settings
    are those it declares."""
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
    """The environment ``launcher`` (a registered one, chosen for the sweep of ``source``) runs
    the jobs with: ``environ``, the file's ``settings`` (for ``file_launcher``) as its variables
    when it is that launcher (one already set wins, as the notes say), and this interpreter's
    folder first on PATH (DomainBed starts every job as ``python -m domainbed.scripts.train``
    with the ``python`` found there)."""
    options = launcher_options(source, launcher)
    env = dict(environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
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
