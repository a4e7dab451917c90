"""Waiting for submitted Slurm jobs until each has a verdict, in bounded time, and the report of
those that failed. States come from ``squeue`` (a job it no longer lists is GONE), not from
submitit's watcher, whose ``sacct`` reads UNKNOWN without accounting. A job that ended without
a result fails at once when cancelled, else after ``GRACE_S`` (a shared file system may show a
node's file late); ``SILENT_LIMIT_S`` without an answer ends the wait. Results, exceptions and
logs are submitit's.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.array_task import CommandFailed
from dmg_domainbed.launchers.common import Failure, folder_deleted, output_dir_of
from dmg_domainbed.launchers.slurm_partition import slurm

SQUEUE = ["squeue", "--noheader", "--array", "--format=%i|%T"]  # a line per array task
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


def failure(error: BaseException | None) -> str | None:
    """``Name: message`` of a job's exception (the last in its traceback); None for success."""
    if error is None:
        return None
    return _EXCEPTION_LINE.findall(f"{type(error).__name__}: {error}")[-1]


def wait_for(jobs: Sequence[Any], say: Callable[[str], None] = print) -> dict[str, str | None]:
    """Every submitit Slurm job's verdict (``None``: success, else why it failed) by job id."""
    squeue = [*SQUEUE, "--states=all", f"--user={os.getuid()}"]
    waiting = {job.job_id: job for job in jobs}
    verdicts: dict[str, str | None] = {}
    ended_at: dict[str, float] = {}
    states = dict.fromkeys(waiting, "UNKNOWN")  # until squeue first answers
    answered_at, poll_s, shown = time.monotonic(), POLL_FIRST_S, ""
    while waiting:
        now = time.monotonic()
        with contextlib.suppress(OSError, UserError):  # Slurm busy: asked again next time
            answer = slurm(squeue, os.environ)
            if answer.returncode == 0:
                states, answered_at = parse_states(answer.stdout), now
        for job_id, job in list(waiting.items()):
            state = states.get(job_id, GONE)
            if job.paths.result_pickle.exists():
                verdicts[job_id] = failure(job.exception())
            elif state in ENDED and (
                state == "CANCELLED" or now - ended_at.setdefault(job_id, now) >= GRACE_S
            ):
                verdicts[job_id] = WITHOUT_RESULT.get(
                    state, f"ended without a result (Slurm state {state})"
                )
            else:
                continue
            del waiting[job_id]
        if now - answered_at > SILENT_LIMIT_S:
            silent = f"unknown: Slurm did not answer for {SILENT_LIMIT_S:.0f} s"
            return {**verdicts, **dict.fromkeys(waiting, silent)}
        counts = Counter(states.get(job_id, GONE).lower() for job_id in waiting)
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        if waiting and summary != shown:
            say(f"submitit: waiting for {len(waiting)} of {len(jobs)} job(s): {summary}")
            shown = summary
        time.sleep(poll_s * bool(waiting))
        poll_s = min(POLL_MAX_S, poll_s * 1.25)
    return verdicts


def error_tail(lines: list[str]) -> list[str]:
    """The end of an error stream without submitit's, srun's and slurmstepd's lines and
    :class:`CommandFailed`'s traceback; from the exception on when it ends with a traceback."""
    lines = [line for line in lines if line.strip() and not line.startswith(_SLURM_LOG_NOISE)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if starts and any(CommandFailed.__name__ in line for line in lines[starts[-1] :]):
        lines = lines[: starts.pop()]
    after = lines[starts[-1] + 1 :] if starts else []
    first = next((i for i, line in enumerate(after) if not line[:1].isspace()), len(after))
    return (after[first:] or lines)[-TAIL_LINES:]


def failures(
    jobs: Sequence[Any], commands: Sequence[str], verdicts: Mapping[str, str | None]
) -> list[Failure]:
    """Every failed job, the first ``DETAILED_FAILURES`` with the end of their error stream
    (DomainBed's err.txt, else the Slurm log; each read costs a file-system round trip)."""
    found = []
    for job, command in zip(jobs, commands):
        if verdicts[job.job_id] is None:
            continue
        lines: list[str] = []
        if len(found) < DETAILED_FAILURES:
            err_txt = Path(output_dir_of(command) or "/nonexistent", "err.txt")
            text = err_txt.read_text(errors="replace") if err_txt.is_file() else ""
            lines = error_tail((text.strip() or job.stderr() or "").splitlines())
        reason = verdicts[job.job_id]
        hint = folder_deleted(command)
        found.append(Failure(reason, command, f"job {job.job_id}", hint, tail=tuple(lines)))
    return found
