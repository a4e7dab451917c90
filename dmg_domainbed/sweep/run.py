"""Running a planned sweep through DomainBed's own sweep script, after checking it can run.

Launcher settings from the sweep file become the launcher's environment variables for the
DomainBed sweep process; a variable already set in the environment wins. Everything that can be
checked before DomainBed creates job folders is checked first: DomainBed's ``Job.launch``
creates every job folder before it calls the launcher.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import requirements
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import SweepConfig, launcher_options


def _as_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def launcher_environment(
    config: SweepConfig, launcher: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The environment of DomainBed's sweep process, and notes on variables that win over
    the file."""
    env = dict(environ)
    notes = []
    if launcher != config.launcher:
        if config.launcher_options:
            notes.append(f"the file's [launcher] settings are for {config.launcher}: not used")
        return env, notes
    for option in launcher_options(launcher):
        if option.name not in config.launcher_options:
            continue
        file_value = _as_text(config.launcher_options[option.name])
        if env.get(option.env, "").strip():
            notes.append(
                f"{option.env}={env[option.env]} from the environment wins over "
                f"{option.name} = {file_value} in the file"
            )
        else:
            env[option.env] = file_value
    return env, notes


def check_ready(sweep: plan.Sweep, launcher: str, env: Mapping[str, str]) -> str:
    """Raise :class:`UserError` if the jobs could not start; describe the launcher's plan."""
    from domainbed import command_launchers

    if shutil.which("python", path=env.get("PATH")) is None:
        raise UserError(
            "no `python` on PATH: DomainBed's sweep starts every job as "
            "`python -m domainbed.scripts.train`. Activate the environment that has DomainBed "
            "and this package, or put its python first on PATH."
        )
    # The doctor and the smoke check give the same answer: requirements.missing.
    missing: dict[str, None] = {}
    for algorithm in sweep.config.algorithms:
        for dataset in sweep.config.datasets:
            overrides = sweep.config.hparams_of(algorithm)
            missing.update(
                dict.fromkeys(requirements.missing(algorithm, dataset, sweep.data_dir, overrides))
            )
    if missing:
        raise UserError(
            "the jobs would fail before their first step:\n  "
            + "\n  ".join(missing)
            + "\nFix it with the commands above, or pass --data_dir with the folder that holds "
            "the data."
        )
    check = getattr(command_launchers.REGISTRY[launcher], "check", None)
    if check is None:
        return launcher
    try:
        return f"{launcher}: {check(env)}"
    except UserError as error:
        raise UserError(f"launcher {launcher}: {error}") from None


def execute(
    sweep: plan.Sweep,
    groups: Sequence[tuple[plan.Group, Sequence[Any]]],
    launcher: str,
    env: Mapping[str, str],
    delete_incomplete: bool,
    say: Callable[[str], None] = print,
) -> int:
    """Run DomainBed's sweep script for each group; the first non-zero exit status stops."""
    from domainbed.scripts.sweep import Job

    for group, group_jobs in groups:
        counts = plan.state_counts(group_jobs)
        actions = []
        if delete_incomplete and counts[Job.INCOMPLETE]:
            actions.append("delete_incomplete")
        if counts[Job.NOT_LAUNCHED] or actions:
            actions.append("launch")
        for action in actions:
            args = plan.domainbed_sweep_args(sweep, group, action, launcher)
            say(f"$ {plan.shell_line('python', args)}")
            code = subprocess.call([sys.executable, *args], env=dict(env))
            if code != 0:
                say(f"DomainBed's sweep {action} exited with status {code}")
                return code
    return 0
