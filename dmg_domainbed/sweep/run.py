"""Running a planned sweep with DomainBed's own sweep code, after checking it can run.

The one way this package runs a sweep (``dmg-domainbed sweep`` and the demo alike): check that
the jobs could start, delete incomplete job folders when asked, launch each group of
:mod:`.plan` in a process of its own (:mod:`.launch`), report jobs as they finish, and stop
cleanly on Ctrl-C. Launcher settings from the sweep file become the launcher's environment
variables; a variable already set in the environment wins. Everything that can be checked
before job folders exist is checked first: DomainBed's ``Job.launch`` creates every job folder
before it calls the launcher.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable
from dmg_domainbed.launchers.lifetime import parent_death_hook
from dmg_domainbed.launchers.processes import ForkedProcess
from dmg_domainbed.launchers.warm import WarmStart
from dmg_domainbed.locks import FolderLock
from dmg_domainbed.preflight import requirements
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import SweepConfig, launcher_options
from dmg_domainbed.sweep.progress import DoneWatcher

Echo = Callable[[str], None]
STOP_GRACE_SECONDS = 2.0
_WARM_LAUNCH = WarmStart(plan.LAUNCH_MODULE)


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
    ones when ``delete_incomplete``), reporting each job as it finishes; the first non-zero
    exit status stops. What the launch processes print goes to ``log`` (appended) when given,
    else to the terminal.

    The sweep's folder is locked meanwhile (:class:`~dmg_domainbed.locks.FolderLock`): a second
    command on it stops with a message naming this one, before it deletes or launches
    anything. The launch processes end with this one, however it ends.
    """
    from domainbed.scripts.sweep import Job

    with contextlib.ExitStack() as stack:
        stack.enter_context(FolderLock(sweep.output_dir))
        # job states are read under the lock: no other command changes them meanwhile
        groups = [(group, plan.jobs(sweep, group)) for group in sweep.groups]
        everything = [job for _, group_jobs in groups for job in group_jobs]
        if delete_incomplete:
            refuse_deleting_queued_jobs(everything, env)
        output = stack.enter_context(open(log, "a")) if log else None
        with DoneWatcher(everything, echo, plan.describe_job):
            for group, group_jobs in groups:
                counts = plan.state_counts(group_jobs)
                actions = []
                if delete_incomplete and counts[Job.INCOMPLETE]:
                    actions.append("delete_incomplete")
                if counts[Job.NOT_LAUNCHED] or actions:
                    actions.append("launch")
                for action in actions:
                    command = plan.launch_command(sweep, group, action, launcher)
                    code = _run(command, env, output)
                    if code != 0:
                        echo(
                            f"{action} of {', '.join(group.algorithms)} exited with status "
                            f"{code}" + (f"; see {log}" if log else "")
                        )
                        return code
    return 0


def refuse_deleting_queued_jobs(jobs: list, env: Mapping[str, str]) -> None:
    """Stop before delete-incomplete removes the folder of a job that is still queued or
    running on Slurm (submitted by an earlier command that did not wait for it)."""
    from domainbed.scripts.sweep import Job

    from dmg_domainbed.launchers.submitit_launcher import still_queued

    incomplete = [Path(job.output_dir) for job in jobs if job.state == Job.INCOMPLETE]
    queued = still_queued(incomplete, env)
    if queued:
        listed = "\n  ".join(f"{folder} ({state})" for folder, state in sorted(queued.items()))
        raise UserError(
            f"{len(queued)} incomplete job(s) are still queued or running on Slurm; deleting "
            f"their folders would lose what they write:\n  {listed}\nWait until they end "
            "(squeue --me), or cancel them (scancel), then run the same command again; nothing "
            "was deleted or launched."
        )


def _run(command: list[str], env: Mapping[str, str], output: IO[str] | None) -> int:
    """Run one launch process; Ctrl-C lets it stop its jobs (see :func:`stop`)."""
    if output is not None:
        output.write(f"$ {plan.shell_line(command)}\n")
        output.flush()
    process = _start(command, env, output)
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop(process)
        raise


def _start(
    command: list[str], env: Mapping[str, str], output: IO[str] | None
) -> subprocess.Popen | ForkedProcess:
    """The launch process, forked from this one when it is fit to fork (it has imported torch
    and DomainBed and run none of their threads: :mod:`~dmg_domainbed.launchers.warm`), which
    saves the seconds a new process spends importing them before the first job starts; else a
    new process, with the reason in the log."""
    arguments = _WARM_LAUNCH.arguments(plan.shell_line(command))
    refusal = _WARM_LAUNCH.refusal(command[0], env) if arguments else "not a launch command"
    if refusal is None:
        return _WARM_LAUNCH.fork(arguments[1], env, Path(output.name) if output else None)
    if output is not None:
        output.write(f"(started as a new process: {refusal})\n")
        output.flush()
    return subprocess.Popen(
        command,
        env=dict(env),
        preexec_fn=parent_death_hook(),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
    )


def stop(process: subprocess.Popen | ForkedProcess) -> None:
    """Let a launch process stop its running jobs (its launcher handles Ctrl-C) and wait for it.

    A new process shares this one's process group, so a Ctrl-C at the terminal reaches it too;
    an interrupt sent to this process alone is passed on. A forked one has a session of its
    own: the interrupt is passed on at once. Killing it outright could leave jobs running on
    their own.
    """
    if isinstance(process, ForkedProcess):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT)
        process.wait()
        return
    try:
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        process.wait()
