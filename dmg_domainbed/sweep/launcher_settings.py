"""The launcher a sweep names and the settings its file gives it (``[launcher]``).

The launcher must be a registered DomainBed command launcher, and the file's settings must be
what it declares (its ``options``, :class:`~dmg_domainbed.launchers.common.Option`): both are
refused before anything runs (:func:`check_launcher`). The settings then reach the jobs as
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
from dmg_domainbed.rules import refuse_unknown_keys


def launcher_options(name: str) -> dict[str, Option]:
    """The settings a registered command launcher declares, by ``[launcher]`` key."""
    from domainbed import command_launchers

    declared = as_launcher(command_launchers.REGISTRY[name]).options
    return {option.name: option for option in declared}


def check_launcher(source: Path, name: str, settings: Mapping[str, Any] | None = None) -> None:
    """``name`` is a registered launcher, and ``settings`` (the file's, when they are for this
    launcher; ``source`` is the file) are its settings."""
    from domainbed import command_launchers

    if name not in command_launchers.REGISTRY:
        raise UserError(
            f"{source}: unknown launcher {name!r}; registered DomainBed command launchers: "
            f"{', '.join(sorted(command_launchers.REGISTRY))}"
        )
    if settings is None:
        return
    options = launcher_options(name)
    refuse_unknown_keys(source, f"[launcher] of {name}", settings, options)
    for key, value in settings.items():
        options[key].check(value, f"{source}: [launcher] {key}")


def launcher_environment(
    launcher: str,
    environ: Mapping[str, str],
    file_launcher: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The environment ``launcher`` runs the jobs with: ``environ``, the file's ``settings``
    (for ``file_launcher``) as its variables when it is that launcher (one already set wins, as
    the notes say), and this interpreter's folder first on PATH (DomainBed starts every job as
    ``python -m domainbed.scripts.train`` with the ``python`` found there)."""
    env = dict(environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    settings = settings or {}
    if launcher != file_launcher:
        unused = f"the file's [launcher] settings are for {file_launcher}: not used"
        return env, [unused] if settings else []
    notes, options = [], launcher_options(launcher)
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
