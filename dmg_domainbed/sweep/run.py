"""``dmg-domainbed sweep`` as one call: a sweep file read, checked, planned and launched.

:func:`run_sweep` takes what the command line was given (:class:`SweepRequest`) and calls down,
each step once, in this order: :mod:`.config` reads the file (its launcher first, then the rest
against its rules) and resolves its folders and launcher; :func:`check_and_plan` gives the
launcher chosen its environment (:mod:`.launcher_settings`, which refuses an unknown one),
checks the sweep (:mod:`.checks`, down through the preflight, the data check and the folders),
plans its jobs (:mod:`.plan`) and checks their command lines (:mod:`.command_line`); the plan
is shown, and :mod:`.launch` launches it. The demo builds its sweep in code and goes through the
same :func:`check_and_plan` and launch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep.checks import check_sweep
from dmg_domainbed.sweep.command_line import check_commands
from dmg_domainbed.sweep.config import Sweep, read_sweep
from dmg_domainbed.sweep.launch import execute
from dmg_domainbed.sweep.launcher_settings import launcher_environment
from dmg_domainbed.sweep.plan import Plan, plan_sweep


@dataclass(frozen=True)
class SweepRequest:
    """What ``dmg-domainbed sweep`` was given: the sweep file, the folders and the launcher that
    win over the file's (``None``: the file's), and its two switches."""

    file: str | Path
    data_dir: str | None = None
    output_dir: str | None = None
    launcher: str | None = None
    dry_run: bool = False
    delete_incomplete: bool = False


@dataclass(frozen=True)
class PlannedSweep:
    """A checked and planned sweep: ``env``, the environment its launcher runs the jobs with;
    ``notes`` to show; and, for this machine, either ``launcher`` (how the launcher will run
    the jobs) or ``problem`` (what would stop them)."""

    env: Mapping[str, str]
    plan: Plan
    notes: tuple[str, ...] = ()
    launcher: str | None = None
    problem: UserError | None = None


def check_and_plan(sweep: Sweep, environ: Mapping[str, str]) -> PlannedSweep:
    """The launcher's environment (the file's settings over ``environ``), the sweep's checks,
    its jobs, and whether their command lines can start. A mistake in the file raises
    :class:`UserError`; what would stop the jobs on this machine is the result's ``problem``."""
    env, notes = environ, []
    if sweep.launcher is not None:
        config = sweep.config
        env, notes = launcher_environment(
            config.path, sweep.launcher, environ, config.launcher, config.launcher_options
        )
    checked = check_sweep(sweep, env)
    planned = plan_sweep(sweep)
    problem = checked.problem
    try:
        check_commands(planned.unfinished, env)
    except UserError as too_long:
        problem = problem or too_long
    return PlannedSweep(env, planned, checked.notes + tuple(notes), checked.launcher, problem)


def run_sweep(request: SweepRequest, echo: Callable[[str], None] = print) -> int:
    """Read, check, plan and (unless a dry run) launch the sweep of ``request``, passing
    ``echo`` its summary, notes, jobs and progress lines; returns the exit status.
    :class:`UserError` before any job folder exists when the sweep cannot run."""
    sweep = read_sweep(request.file, request.data_dir, request.output_dir, request.launcher)
    if sweep.launcher is None and not request.dry_run:
        raise UserError(
            f'{sweep.config.path} names no launcher: add [launcher] name = "..." to it or pass '
            "--launcher NAME (e.g. local_parallel, submitit, local)"
        )
    planned = check_and_plan(sweep, os.environ)
    echo(planned.plan.summary())
    for note in planned.notes:
        echo(f"  note: {note}")
    if request.dry_run:
        launcher = sweep.launcher or "LAUNCHER"
        echo(f"Launcher: {launcher} (DomainBed's Job.launch, one launch per group)")
        new = [f"  {job.command_str}" for job in planned.plan.to_launch]
        echo("\n".join(["Jobs to launch:", *new, "Dry run: nothing was created or launched."]))
        if planned.problem is not None:
            echo(f"Launching it now would stop before any job: {planned.problem}")
        return 0
    if planned.problem is not None:
        raise planned.problem
    echo(f"  launcher: {planned.launcher}")
    incomplete = len(planned.plan.incomplete)
    if incomplete and not request.delete_incomplete:
        echo(
            f"  {incomplete} incomplete job(s) are left as they are (they may still be running)"
            "; once they have stopped, rerun with --delete-incomplete to launch them again"
        )
    return execute(sweep, sweep.launcher, planned.env, request.delete_incomplete, echo)
