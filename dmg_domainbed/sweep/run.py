"""Running a planned sweep with DomainBed's own sweep code, after checking it can run.

The one way this package runs a sweep (``dmg-domainbed sweep`` and the demo alike): check that
the jobs could start, lock the output folder (:class:`~dmg_domainbed.locks.FolderLock`), delete
incomplete job folders when asked (DomainBed's ``Job.delete``) unless the launcher says one
still runs, launch each group of :mod:`.plan` with DomainBed's ``Job.launch`` in this process
(which has imported DomainBed already), report jobs as they finish, and stop cleanly on Ctrl-C.
Launcher settings from the sweep file become the launcher's environment variables; a variable
already set in the environment wins. Everything that can be checked before job folders exist is
checked first: ``Job.launch`` creates every job folder before it calls the launcher.

A launcher is asked about its own jobs through attributes of the launcher function, never
imported here: ``check(environ)`` before anything, and ``running_jobs(output_dirs, environ)``
(folder -> state, for the folders whose job still runs) before delete-incomplete.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable
from dmg_domainbed.locks import FolderLock
from dmg_domainbed.preflight import requirements
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import SweepConfig, launcher_options
from dmg_domainbed.sweep.progress import is_done, watch_done

Echo = Callable[[str], None]


def _as_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def launcher_environment(
    config: SweepConfig, launcher: str, environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The environment of the sweep's processes, and notes on variables that win over the file.

    This interpreter's folder goes first on PATH: DomainBed starts every job as
    ``python -m domainbed.scripts.train`` with the ``python`` found there.
    """
    env = dict(environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
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

    check_creatable(Path(sweep.output_dir), "the sweep's output_dir")

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
    launcher: str,
    env: Mapping[str, str],
    delete_incomplete: bool,
    echo: Echo = print,
    log: Path | None = None,
) -> int:
    """Launch every group's jobs that have not been launched (after deleting the incomplete
    ones when ``delete_incomplete``), reporting each job as it finishes; a failed launch stops
    with status 1. What the launches print goes to ``log`` (appended) when given, else to the
    terminal; ``echo`` gets the progress lines.

    The sweep's folder is locked meanwhile: a second command on it stops with a message naming
    this one, before it deletes or launches anything. On Ctrl-C the launcher stops its jobs,
    the lock is released, and one line says what was stopped and how to resume; the process
    then exits with status 130.
    """
    try:
        return _execute(sweep, launcher, env, delete_incomplete, echo, log)
    except KeyboardInterrupt:
        jobs = [job for group in sweep.groups for job in plan.jobs(sweep, group)]
        again = "" if delete_incomplete else " with --delete-incomplete"
        print(
            f"Interrupted: the sweep's running jobs were stopped; {sum(map(is_done, jobs))} of "
            f"{len(jobs)} jobs are done and kept in {sweep.output_dir}. Run the same command"
            f"{again} to resume.",
            file=sys.stderr,
        )
        raise SystemExit(130) from None


def _execute(
    sweep: plan.Sweep,
    launcher: str,
    env: Mapping[str, str],
    delete_incomplete: bool,
    echo: Echo,
    log: Path | None,
) -> int:
    from domainbed import command_launchers
    from domainbed.scripts.sweep import Job

    launch = command_launchers.REGISTRY[launcher]
    with contextlib.ExitStack() as stack:
        stack.enter_context(FolderLock(sweep.output_dir))
        # job states are read under the lock: no other command changes them meanwhile
        everything = [job for group in sweep.groups for job in plan.jobs(sweep, group)]
        if delete_incomplete:
            refuse_deleting_running_jobs(everything, launch, env)
        stack.enter_context(_environment(env))  # DomainBed gives a launcher nothing else
        stack.enter_context(watch_done(everything, echo, plan.describe_job))
        if log is not None:
            output = stack.enter_context(open(log, "a"))
            stack.enter_context(contextlib.redirect_stdout(_ThisThread(output, sys.stdout)))
            stack.enter_context(contextlib.redirect_stderr(_ThisThread(output, sys.stderr)))
        for group in sweep.groups:
            incomplete = [job for job in plan.jobs(sweep, group) if job.state == Job.INCOMPLETE]
            if delete_incomplete and incomplete:
                Job.delete(incomplete)
            jobs = plan.jobs(sweep, group)
            to_launch = [job for job in jobs if job.state == Job.NOT_LAUNCHED]
            print(f"{len(jobs)} jobs of {', '.join(group.algorithms)}: {len(to_launch)} to launch")
            if not to_launch:
                continue
            try:
                Job.launch(to_launch, launch)
            except UserError as error:
                print(f"dmg-domainbed: error: {error}", file=sys.stderr, flush=True)
                echo(
                    f"launch of {', '.join(group.algorithms)} failed"
                    + (f"; see {log}" if log else "")
                )
                return 1
    return 0


def refuse_deleting_running_jobs(
    jobs: Sequence, launcher: Callable, env: Mapping[str, str]
) -> None:
    """Stop before delete-incomplete removes the folder of a job that still runs, as the
    launcher's ``running_jobs`` says (e.g. a Slurm job submitted by an earlier command that did
    not wait for it); launchers without it run nothing beyond the command that started them."""
    from domainbed.scripts.sweep import Job

    running_jobs = getattr(launcher, "running_jobs", None)
    incomplete = [Path(job.output_dir) for job in jobs if job.state == Job.INCOMPLETE]
    running = running_jobs(incomplete, env) if running_jobs and incomplete else {}
    if running:
        listed = "\n  ".join(f"{folder} ({state})" for folder, state in sorted(running.items()))
        raise UserError(
            f"{len(running)} incomplete job(s) are still queued or running; deleting their "
            f"folders would lose what they write:\n  {listed}\nWait until they end, or cancel "
            "them, then run the same command again; nothing was deleted or launched."
        )


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class _ThisThread(io.TextIOBase):
    """A stream for ``sys.stdout``/``sys.stderr`` that sends what this thread writes (the
    launch) to ``log`` and what other threads write (the progress lines) to ``other``."""

    def __init__(self, log: IO[str], other: IO[str]) -> None:
        self.log, self.other, self.thread = log, other, threading.get_ident()

    def write(self, text: str) -> int:
        return (self.log if threading.get_ident() == self.thread else self.other).write(text)

    def flush(self) -> None:
        self.log.flush()
        self.other.flush()
