"""Launching a planned sweep's jobs with DomainBed's own ``Job.launch``, group by group, in
this process: jobs reported as they write their ``done`` file, Ctrl-C stopping cleanly. The
launcher is asked only through :class:`~dmg_domainbed.launchers.common.Launcher`, the sweep's
environment passed to it, never swapped into this process's."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import Launcher, as_launcher
from dmg_domainbed.runs import DONE_FILE
from dmg_domainbed.sweep.command_line import check_commands
from dmg_domainbed.sweep.plan import Plan, describe_job


def is_done(job) -> bool:
    """Whether a DomainBed ``Job`` has finished (its ``done`` file exists)."""
    return (Path(job.output_dir) / DONE_FILE).exists()


@contextlib.contextmanager
def watch_done(
    jobs: Sequence, report: Callable[[str], None], interval: float = 1.0
) -> Iterator[None]:
    """While inside, ``report(line)`` each time one of ``jobs`` finishes (from a daemon thread,
    and once more on leaving); jobs done before are counted, not reported."""
    pending = [job for job in jobs if not is_done(job)]
    start, stop = time.monotonic(), threading.Event()

    def check() -> None:
        for job in [job for job in pending if is_done(job)]:
            pending.remove(job)
            finished, seconds = f"{len(jobs) - len(pending)}/{len(jobs)}", time.monotonic() - start
            report(f"[{finished}] done: {describe_job(job)} ({seconds:.0f} s)")

    def watch() -> None:
        while not stop.wait(interval):
            check()

    thread = threading.Thread(target=watch, name="done-watcher", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        check()


def execute(
    plan: Plan,
    launcher: str,
    env: Mapping[str, str],
    delete_incomplete: bool,
    echo: Callable[[str], None] = print,
    log: Path | None = None,
) -> int:
    """Launch the jobs of ``plan`` not launched yet (and the incomplete ones, deleted first,
    with ``delete_incomplete``), ``echo`` told as each finishes and ``log`` given what the
    launches print; returns 1 when a launch fails. The caller holds the output folder's lock and
    made ``plan`` under it. Ctrl-C stops the jobs and exits with 130, saying how to resume."""
    from domainbed import command_launchers
    from domainbed.scripts.sweep import Job

    chosen, jobs = as_launcher(command_launchers.REGISTRY[launcher]), plan.jobs
    launch = functools.partial(chosen.launch, environ=env)  # as DomainBed calls a launcher
    incomplete = list(plan.incomplete)
    check_commands(plan.unfinished, env)
    try:
        with contextlib.ExitStack() as stack:
            if delete_incomplete:
                refuse_deleting_other_than_folders(incomplete)
                refuse_deleting_running(incomplete, chosen, env)
            stack.enter_context(watch_done(jobs, echo))
            if log is not None:
                output = stack.enter_context(open(log, "a"))
                stack.enter_context(contextlib.redirect_stdout(_ThisThread(output, sys.stdout)))
                stack.enter_context(contextlib.redirect_stderr(_ThisThread(output, sys.stderr)))
            if delete_incomplete and incomplete:
                Job.delete(incomplete)
            # the jobs never launched, and the incomplete ones once their folders are deleted
            states = {Job.NOT_LAUNCHED} | ({Job.INCOMPLETE} if delete_incomplete else set())
            for group, group_jobs in plan.jobs_by_group:
                new = [job for job in group_jobs if job.state in states]
                names = ", ".join(group.algorithms)
                print(f"{len(group_jobs)} jobs of {names}: {len(new)} to launch", flush=True)
                try:
                    if new:
                        Job.launch(new, launch)
                except UserError as error:
                    print(f"dmg-domainbed: error: {error}", file=sys.stderr, flush=True)
                    echo(f"launch of {names} failed" + (f"; see {log}" if log else ""))
                    return 1
    except KeyboardInterrupt:
        done = sum(map(is_done, jobs))
        again = "" if delete_incomplete else " with --delete-incomplete"
        print(
            f"Interrupted: the sweep's running jobs were stopped; {done} of {len(jobs)} jobs "
            f"are done and kept in {plan.sweep.output_dir}. Run the same command{again} to "
            "resume.",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    return 0


def refuse_deleting_other_than_folders(incomplete: Sequence) -> None:
    """Stop before delete-incomplete at a job folder that is a link or no folder: DomainBed's
    ``shutil.rmtree`` would fail there after deleting the folders before it."""
    refused = []
    for path in (Path(job.output_dir) for job in incomplete):
        if path.is_symlink():
            refused.append(f"{path} is a symbolic link (to {os.readlink(path)})")
        elif not path.is_dir():
            refused.append(f"{path} is not a folder")
    if refused:
        listed = "\n  ".join(refused)
        raise UserError(
            "--delete-incomplete deletes the folder of each incomplete job, and DomainBed's "
            f"delete removes folders only:\n  {listed}\nPut the folder a link points to in the "
            "link's place, or remove the link or file yourself, then run the same command "
            "again; nothing was deleted or launched."
        )


def refuse_deleting_running(incomplete: Sequence, launcher: Launcher, env: Mapping) -> None:
    """Stop before delete-incomplete removes the folder of a job the launcher says still runs."""
    folders = [Path(job.output_dir) for job in incomplete]
    running = launcher.running_jobs(folders, env) if folders else {}
    if running:
        listed = "\n  ".join(f"{folder} ({state})" for folder, state in sorted(running.items()))
        raise UserError(
            f"{len(running)} incomplete job(s) are still queued or running; deleting their "
            f"folders would lose what they write:\n  {listed}\nWait until they end, or cancel "
            "them, then run the same command again; nothing was deleted or launched."
        )


class _ThisThread(io.TextIOBase):
    """While launching, this thread's output (the launch) goes to ``log``, others' to ``other``."""

    def __init__(self, log: IO[str], other: IO[str]) -> None:
        self.log, self.other, self.thread = log, other, threading.get_ident()

    def write(self, text: str) -> int:
        return (self.log if threading.get_ident() == self.thread else self.other).write(text)

    def flush(self) -> None:
        self.log.flush()
        self.other.flush()
