"""Waiting for submitted Slurm jobs through submitit's Job API until each has a verdict, in
bounded time, and the report of the failed ones.

submitit's Slurm watcher reads job states from accounting (``sacct``): without it every state
reads UNKNOWN, and ``job.result()`` waits forever for a job that ended without writing its
result (cancelled, timed out, its node lost). :class:`QueueWatcher` is a submitit watcher that
asks Slurm's controller instead (``squeue``: every cluster has it, and it lists ended jobs for
``MinJobAge`` seconds); a job it no longer lists is GONE. A job with a result file
(``job.done()``) has the verdict ``job.exception()`` gives. One that ended without a result
fails at once when cancelled, else after ``GRACE_S``, the time a shared file system may take to
show a file written on a node (submitit waits that long for each job in turn: hours for
thousands). Slurm silent for ``SILENT_LIMIT_S`` ends the wait, as nothing more can be learned.
A failed job is reported with the end of its DomainBed ``err.txt``, or for a command without an
output folder, what it wrote to its Slurm error log.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from submitit.slurm.slurm import SlurmInfoWatcher

from dmg_domainbed.launchers.common import output_dir_of

# squeue, one line per array task: ID|STATE
SQUEUE = ["squeue", "--noheader", "--array", "--format=%i|%T"]
GONE = "GONE"
# States after which Slurm runs nothing more for the job (PREEMPTED awaits its requeue).
ENDED = {GONE, "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL"}
ENDED |= {"OUT_OF_MEMORY", "REVOKED", "TIMEOUT"}
WITHOUT_RESULT = {
    "CANCELLED": "cancelled (Slurm state CANCELLED)",
    GONE: "Slurm no longer knows the job (it ended more than MinJobAge ago, or the controller "
    "lost it) and it left no result",
}
POLL_FIRST_S, POLL_MAX_S, GRACE_S, SILENT_LIMIT_S = 1.0, 10.0, 15.0, 600.0
TAIL_LINES, DETAILED_FAILURES = 6, 10
_SLURM_LOG_NOISE = ("submitit ", "srun: ", "slurmstepd")
_EXCEPTION_LINE = re.compile(r"^(?:\w+\.)*(\w+:.*)$", re.MULTILINE)


def parse_states(text: str) -> dict[str, str]:
    """``SQUEUE``'s answer: state by job id."""
    return dict(line.strip().split("|") for line in text.splitlines() if "|" in line)


class QueueWatcher(SlurmInfoWatcher):
    """submitit's Slurm watcher, with the states of this user's jobs from ``squeue`` (a listing
    that does not fail when Slurm has forgotten every job asked about)."""

    def __init__(self) -> None:
        super().__init__(delay_s=int(POLL_MAX_S))
        self.answered_at = time.monotonic()

    def _make_command(self) -> list[str] | None:
        waiting = self._registered - self._finished
        return [*SQUEUE, "--states=all", f"--user={os.getuid()}"] if waiting else None

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        self.answered_at = time.monotonic()
        states = parse_states(string if isinstance(string, str) else string.decode())
        return {job: {"State": states.get(job, GONE)} for job in self._registered - self._finished}

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id, mode=mode) in ENDED


def failure(error: BaseException | None) -> str | None:
    """``Name: message`` of the exception a job raised (the last in its traceback); ``None``
    for success."""
    found = _EXCEPTION_LINE.findall(f"{type(error).__name__}: {error}")
    return None if error is None else found[-1]


def verdict(job: Any) -> str | None:
    if job.paths.result_pickle.exists():
        return failure(job.exception())
    return WITHOUT_RESULT.get(job.state, f"ended without a result (Slurm state {job.state})")


def wait_for(jobs: Sequence[Any], say: Callable[[str], None] = print) -> dict[str, str | None]:
    """Wait until every submitit Slurm job has a verdict (``None``: success, else why it
    failed); return them by job id."""
    watcher = QueueWatcher()
    for job in jobs:
        job.watcher = watcher
        watcher.register_job(job.job_id)
    waiting = {job.job_id: job for job in jobs}
    verdicts: dict[str, str | None] = {}
    ended_at: dict[str, float] = {}
    poll_s, shown = POLL_FIRST_S, ""
    while waiting:
        watcher.update()  # one squeue for all jobs; done() and state below read its answer
        now = time.monotonic()
        for job_id, job in list(waiting.items()):
            if job.done() and (
                job.paths.result_pickle.exists()
                or job.state == "CANCELLED"
                or now - ended_at.setdefault(job_id, now) >= GRACE_S
            ):
                verdicts[job_id] = verdict(waiting.pop(job_id))
        if now - watcher.answered_at > SILENT_LIMIT_S:
            silent = f"unknown: Slurm did not answer for {SILENT_LIMIT_S:.0f} s"
            return {**verdicts, **dict.fromkeys(waiting, silent)}
        counts = Counter(watcher.get_state(job_id, mode="cache").lower() for job_id in waiting)
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        if waiting and summary != shown:
            say(f"submitit: waiting for {len(waiting)} of {len(jobs)} job(s): {summary}")
            shown = summary
        time.sleep(poll_s * bool(waiting))
        poll_s = min(POLL_MAX_S, poll_s * 1.25)
    return verdicts


def error_tail(lines: list[str], launcher_error: str) -> list[str]:
    """The end of an error stream without the lines of submitit, srun and slurmstepd, and
    without the traceback of the launcher's own ``launcher_error`` (the verdict says it); from
    the exception on, without frames, when it ends with a traceback."""
    lines = [line for line in lines if line.strip() and not line.startswith(_SLURM_LOG_NOISE)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if starts and any(launcher_error in line for line in lines[starts[-1] :]):
        lines = lines[: starts.pop()]
    after = lines[starts[-1] + 1 :] if starts else []
    first = next((i for i, line in enumerate(after) if not line[:1].isspace()), len(after))
    return (after[first:] or lines)[-TAIL_LINES:]


def failure_report(
    jobs: Sequence[Any],
    commands: Sequence[str],
    verdicts: Mapping[str, str | None],
    launcher_error: str,
) -> str | None:
    """Every failed job: its command, why it ended and the end of its error stream (DomainBed's
    err.txt, else its Slurm log), in full for the first ``DETAILED_FAILURES``, then counted by
    reason. ``launcher_error`` names the exception a job raises when its command failed."""
    failed = [(job, c) for job, c in zip(jobs, commands) if verdicts[job.job_id] is not None]
    parts = [f"{len(failed)} of {len(jobs)} job(s) failed:"]
    for job, command in failed[:DETAILED_FAILURES]:
        parts += [f"  job {job.job_id}: {verdicts[job.job_id]}", f"    {command}"]
        err_txt = Path(output_dir_of(command) or "/nonexistent", "err.txt")
        text = err_txt.read_text(errors="replace") if err_txt.is_file() else ""
        lines = error_tail((text.strip() or job.stderr() or "").splitlines(), launcher_error)
        parts += ["    its error output ends with:"] * bool(lines) + [f"      {x}" for x in lines]
    rest = Counter(verdicts[job.job_id] for job, _ in failed[DETAILED_FAILURES:])
    parts += [f"  and {n} more: {reason}" for reason, n in rest.most_common()]
    return "\n".join(parts) if failed else None
