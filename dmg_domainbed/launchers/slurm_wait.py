"""Waiting for submitted Slurm array tasks until each has a verdict, in bounded time.

submitit learns job states from ``sacct``; on a cluster without accounting every state reads
UNKNOWN and a job that ends without writing its result (cancelled, timed out, pre-empted, its
node lost) is waited for forever. Here each task's verdict comes from its result file when
there is one, and otherwise from Slurm's controller (``squeue``, which lists ended jobs for
``MinJobAge`` seconds) or, for a job it no longer lists, from ``sacct`` where accounting is on:

* a result file: success or the job's error;
* cancelled: failed at once;
* any other end (or no longer known to Slurm) without a result file: failed after
  ``grace_s``, the time a shared file system may take to show a file written on a node;
* pending, running, requeued: still waited for.

A failed task is reported with its cause: the end of its DomainBed ``err.txt`` (or, for commands
without an output folder, of its Slurm error log).

Stdlib only: the launcher runs inside DomainBed's sweep script.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Job states after which Slurm runs nothing more for the job (``squeue``'s and ``sacct``'s).
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
POLL_FIRST_S = 1.0
POLL_MAX_S = 10.0
GRACE_S = 15.0
# Slurm unreachable this long ends the wait: nothing more can be learned.
SILENT_LIMIT_S = 600.0
TAIL_LINES = 6
DETAILED_FAILURES = 10
_SLURM_LOG_NOISE = ("submitit ", "srun: ", "slurmstepd")
QUERY_TIMEOUT_S = 60


@dataclass
class Task:
    """One submitted command: its Slurm id (``ARRAY_TASK``), its submitit files and the folder
    of its DomainBed run (``None`` when the command names no ``--output_dir``)."""

    job_id: str
    command: str
    result_file: Path
    slurm_stderr: Path
    output_dir: Path | None


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


def tail(path: Path | None, lines: int = TAIL_LINES) -> list[str]:
    """The last non-empty lines of a text file; none if it does not exist."""
    if path is None or not path.is_file():
        return []
    text = path.read_text(errors="replace").splitlines()
    return [line for line in text if line.strip()][-lines:]


def without_traceback_frames(lines: list[str]) -> list[str]:
    """The lines after a Python traceback's indented frames (the exception), if the lines end
    with a traceback; else all of them."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return lines
    after = lines[starts[-1] + 1 :]
    first = next((i for i, line in enumerate(after) if not line[:1].isspace()), len(after))
    return after[first:] or lines


def command_output(log_lines: list[str], launcher_error: str) -> list[str]:
    """What the command printed, out of its Slurm error log: without the lines of submitit,
    srun and slurmstepd, and without the traceback of the launcher's own ``launcher_error``
    (the verdict already says how the command ended)."""
    starts = [i for i, line in enumerate(log_lines) if line.startswith("Traceback (most recent")]
    if starts and any(launcher_error in line for line in log_lines[starts[-1] :]):
        log_lines = log_lines[: starts[-1]]
    return [line for line in log_lines if not line.startswith(_SLURM_LOG_NOISE)]


def cause(task: Task, launcher_error: str) -> list[str]:
    """What the job printed last on its error stream (DomainBed's err.txt, else what the command
    wrote to Slurm's log), from the exception on when it ends with a traceback."""
    lines = tail(task.output_dir / "err.txt", lines=200) if task.output_dir is not None else []
    if not lines:
        lines = command_output(tail(task.slurm_stderr, lines=200), launcher_error)
    return without_traceback_frames(lines)[-TAIL_LINES:]


def _query(command: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess | None:
    executable = shutil.which(command[0], path=environ.get("PATH"))
    if executable is None:
        return None
    try:
        return subprocess.run(
            [executable, *command[1:]],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None


def queue_states(job_ids: Sequence[str], environ: Mapping[str, str]) -> dict[str, str] | None:
    """State of each task ``squeue`` lists (ended ones included); ``None`` if it did not
    answer."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    result = _query(
        ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T"], environ
    )
    if result is None:
        return None
    if result.returncode != 0:
        # squeue fails when it knows none of the ids: all of them have left its list.
        return {} if "Invalid job id" in result.stderr else None
    states = {}
    for line in result.stdout.splitlines():
        job_id, _, state = line.partition("|")
        states[job_id.strip()] = state.strip()
    return states


def accounting_states(job_ids: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """State of each task ``sacct`` knows; empty where accounting is off."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    result = _query(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(arrays)], environ
    )
    if result is None or result.returncode != 0:
        return {}
    states = {}
    for line in result.stdout.splitlines():
        job_id, _, state = line.partition("|")
        states[job_id.strip()] = state.split()[0] if state.strip() else "UNKNOWN"
    return states


def result_verdict(task: Task, load: Callable[[Path], Any]) -> Verdict | None:
    """The verdict in the task's submitit result file, if it has one yet."""
    if not task.result_file.exists():
        return None
    outcome, value = load(task.result_file)
    if outcome == "success":
        return Verdict(True)
    lines = [line for line in str(value).splitlines() if line.strip()]
    if not lines:
        return Verdict(False, "the job raised an error")
    # "package.module.SomeError: message" -> "SomeError: message"
    return Verdict(False, re.sub(r"^(?:\w+\.)+(?=\w+: )", "", lines[-1].strip()))


def _refresh(folders: set[Path]) -> None:
    # A no-op chmod makes NFS clients drop their cached view of the folder (as submitit does).
    for folder in folders:
        try:
            folder.chmod(folder.stat().st_mode)
        except OSError:
            pass


def judge(
    waiting: Mapping[str, Task],
    states: Mapping[str, str],
    ended_at: dict[str, float],
    now: float,
    grace_s: float,
) -> dict[str, Verdict]:
    """Verdicts on tasks without a result file, from Slurm's ``states`` (tasks missing from it
    are no longer known to Slurm). ``ended_at`` remembers when each was first seen ended."""
    verdicts = {}
    for job_id in waiting:
        state = states.get(job_id)
        if state is not None and state not in ENDED:
            ended_at.pop(job_id, None)  # e.g. requeued after a pre-emption
        elif state == "CANCELLED":
            verdicts[job_id] = Verdict(False, "cancelled (Slurm state CANCELLED)")
        elif now - ended_at.setdefault(job_id, now) >= grace_s:
            verdicts[job_id] = Verdict(
                False,
                f"ended without a result (Slurm state {state})"
                if state is not None
                else "Slurm no longer knows the job (it ended more than MinJobAge ago, or the "
                "controller lost it) and it left no result",
            )
    return verdicts


def wait_for(
    tasks: Sequence[Task],
    environ: Mapping[str, str],
    load: Callable[[Path], Any],
    say: Callable[[str], None] = print,
    grace_s: float = GRACE_S,
) -> dict[str, Verdict]:
    """Wait until every task has a verdict; return them by job id.

    ``load`` reads a submitit result file into ``(outcome, value)``.
    """
    waiting = {task.job_id: task for task in tasks}
    verdicts: dict[str, Verdict] = {}
    ended_at: dict[str, float] = {}
    last_answer = time.monotonic()
    poll_s = POLL_FIRST_S
    shown = None
    while True:
        _refresh({task.result_file.parent for task in waiting.values()})
        for job_id, task in list(waiting.items()):
            verdict = result_verdict(task, load)
            if verdict is not None:
                verdicts[job_id] = verdict
                del waiting[job_id]
        if not waiting:
            return verdicts
        states = queue_states(list(waiting), environ)
        now = time.monotonic()
        if states is not None:
            last_answer = now
            unlisted = [job_id for job_id in waiting if job_id not in states]
            if unlisted:
                states.update(accounting_states(unlisted, environ))
            judged = judge(waiting, states, ended_at, now, grace_s)
            verdicts.update(judged)
            for job_id in judged:
                del waiting[job_id]
            counts = Counter(states.get(job_id, "UNKNOWN").lower() for job_id in waiting)
            summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            if waiting and summary != shown:
                say(f"submitit: waiting for {len(waiting)} of {len(tasks)} job(s): {summary}")
                shown = summary
        elif now - last_answer > SILENT_LIMIT_S:
            silent = Verdict(False, f"unknown: Slurm did not answer for {SILENT_LIMIT_S:.0f} s")
            return {**verdicts, **dict.fromkeys(waiting, silent)}
        if not waiting:
            return verdicts
        time.sleep(poll_s)
        poll_s = min(POLL_MAX_S, poll_s * 1.25)


def failure_report(
    tasks: Sequence[Task], verdicts: Mapping[str, Verdict], launcher_error: str
) -> str | None:
    """Every failed task: its command, why it ended and the end of its error stream (in full for
    the first ``DETAILED_FAILURES``, then counted by reason). ``launcher_error`` names the
    exception the launcher raises in a job whose command failed."""
    failed = [task for task in tasks if not verdicts[task.job_id].ok]
    if not failed:
        return None
    parts = [f"{len(failed)} of {len(tasks)} job(s) failed:"]
    for task in failed[:DETAILED_FAILURES]:
        parts.append(f"  job {task.job_id}: {verdicts[task.job_id].reason}")
        parts.append(f"    {task.command}")
        lines = cause(task, launcher_error)
        if lines:
            parts.append("    its error output ends with:")
            parts += [f"      {line}" for line in lines]
    rest = Counter(verdicts[task.job_id].reason for task in failed[DETAILED_FAILURES:])
    for reason, n in rest.most_common():
        parts.append(f"  and {n} more: {reason}")
    return "\n".join(parts)
