"""``dmg-domainbed sweep`` as one call (:func:`run_sweep`): the file read and resolved
(:mod:`.config`), checked in its launcher's environment (:func:`.checks.check_sweep`), the
output folder locked unless nothing will launch, the jobs planned under that lock (:mod:`.plan`),
shown, and launched (:mod:`.launch`). The demo goes through the same check, lock, plan and
launch."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.locks import FolderLock
from dmg_domainbed.sweep import cost
from dmg_domainbed.sweep.checks import check_sweep
from dmg_domainbed.sweep.command_line import check_commands
from dmg_domainbed.sweep.config import Sweep, load_sweep, resolve
from dmg_domainbed.sweep.launch import execute
from dmg_domainbed.sweep.plan import Plan, job_costs, plan_sweep


@dataclass(frozen=True)
class SweepRequest:
    """What ``dmg-domainbed sweep`` was given (``None``: the file's)."""

    file: str | Path
    data_dir: str | None = None
    output_dir: str | None = None
    launcher: str | None = None
    dry_run: bool = False
    delete_incomplete: bool = False
    cost_from: str | None = None  # a smoke results file (smoke --json) the cost prefers
    commands: bool = False  # a dry run lists the jobs' command lines


def smoke_table(path: str) -> cost.CostTable:
    """The cost table of a smoke results file; :class:`UserError` if unreadable."""
    try:
        return cost.load_table(path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(
            f"--cost-from {path}: {error}. Give the file `dmg-domainbed smoke SWEEP_FILE --json "
            "FILE` wrote."
        ) from None


def sweep_cost(sweep: Sweep, plan: Plan, own: cost.CostTable | None, file) -> str:
    """The cost of the jobs to launch on ``own`` measures and the package's."""
    tables = [own] if own is not None else []
    packaged = cost.packaged_table()
    if packaged is not None:
        tables.append(packaged)
    jobs_per_gpu = int(sweep.config.launcher_options.get("jobs_per_gpu", 1))
    # search_once's stage 2, while it waits for stage 1, counted by its stand-ins
    launched = [job.train_args for job in plan.to_launch]
    costs = job_costs([*launched, *plan.stage_two_stand_ins], jobs_per_gpu)
    lines = cost.render(cost.estimate(costs, tables), tables, costs)
    if own is None:
        lines.append(
            f"  on this machine's device: dmg-domainbed smoke {file} --json SMOKE.json measures "
            "it; then add --cost-from SMOKE.json to this dry run"
        )
    return "\n".join(lines)


def run_sweep(request: SweepRequest, echo: Callable[[str], None] = print) -> int:
    """Read, check, plan and (unless a dry run) launch; returns the exit status.
    :class:`UserError` before any job folder exists when the sweep cannot run."""
    sweep = resolve(
        load_sweep(request.file), request.data_dir, request.output_dir, request.launcher
    )
    own = None if request.cost_from is None else smoke_table(request.cost_from)
    if sweep.launcher is None and not request.dry_run:
        raise UserError(
            f'{sweep.config.path} names no launcher: add [launcher] name = "..." to it or pass '
            "--launcher NAME (e.g. local_parallel, submitit, local)"
        )
    checked = check_sweep(sweep, os.environ)
    launching = not request.dry_run and checked.problem is None
    # Locked before the plan reads the job states: no other command changes them until the
    # launch ends. A dry run, or a sweep that cannot run here, creates nothing.
    with FolderLock(sweep.output_dir) if launching else contextlib.nullcontext():
        plan = plan_sweep(sweep)
        echo(plan.summary())
        for note in checked.notes:
            echo(f"  note: {note}")
        if request.dry_run:
            problems = [] if checked.problem is None else [checked.problem]
            try:
                check_commands(plan.unfinished, checked.env)
            except UserError as too_long:
                problems.append(too_long)
            echo(sweep_cost(sweep, plan, own, request.file))
            for problem in problems:
                echo(f"Launching it now would stop before any job: {problem}")
            launcher = sweep.launcher or "LAUNCHER"
            echo(f"Launcher: {launcher} (DomainBed's Job.launch, one launch per group)")
            listed = [f"\n  {job.command_str}" for job in plan.to_launch]
            new = f"{len(plan.to_launch)} (--commands lists their command lines)"
            echo("Jobs to launch:" + ("".join(listed) if request.commands else f" {new}"))
            echo("Dry run: nothing was created or launched.")
            return 0
        if checked.problem is not None:
            raise checked.problem
        echo(f"  launcher: {checked.launcher}")
        incomplete = len(plan.incomplete)
        if incomplete and not request.delete_incomplete:
            echo(
                f"  {incomplete} incomplete job(s) are left as they are (they may still be "
                "running); once they have stopped, rerun with --delete-incomplete to launch "
                "them again"
            )
        return execute(plan, sweep.launcher, checked.env, request.delete_incomplete, echo)
