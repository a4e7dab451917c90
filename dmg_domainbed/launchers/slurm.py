"""What the submitit launcher asks Slurm. Before anything is submitted: unset resources get
defaults that fit the partition's nodes (``sinfo``), then ``sbatch --test-only`` judges the
request, its words passed on beside the request and what the nodes offer; a time over the
partition's limit, which Slurm accepts and leaves pending, is compared here. After: every job
waited for until it has a verdict, in bounded time, and the report of those that failed. States
come from ``squeue`` (a job it no longer lists is GONE), not from submitit's watcher, whose
``sacct`` reads UNKNOWN without accounting. A job that ended without a result fails at once when
cancelled, else after ``GRACE_S`` (a shared file system may show a node's file late);
``SILENT_LIMIT_S`` without an answer ends the wait. Results, exceptions and logs are submitit's.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import time
from collections import Counter, namedtuple
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.array_task import CommandFailed
from dmg_domainbed.launchers.common import DETAILED_FAILURES, Failure, folder_deleted, output_dir_of

DEFAULTS = {"cpus": 8, "mem_gb": 32.0, "time_min": 1440}
RESOURCES = ("gpus", "cpus", "mem_gb", "time_min")
SINFO = ["sinfo", "--noheader", "--exact", "--format=%P|%l|%B|%c|%m|%G"]
TIMEOUT_S = 60
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
_REACH = "Check SLURM_CONF and that slurmctld is up, or set DMG_SUBMITIT_CLUSTER=local"
Node = namedtuple("Node", "cpus memory_gb gpus")  # a node configuration; the largest is greatest
Partition = namedtuple("Partition", "name default max_time_min nodes")  # max_time_min None: none
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
TAIL_LINES = 6
_SLURM_LOG_NOISE = ("submitit ", "srun: ", "slurmstepd")
_EXCEPTION_LINE = re.compile(r"^(?:\w+\.)*(\w+:.*)$", re.MULTILINE)


def ask(command: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess:
    """Run a Slurm client with ``environ``; :class:`UserError` if it does not answer."""
    try:
        return subprocess.run(
            command, env=dict(environ), capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"{command[0]} did not answer within {TIMEOUT_S} s. {_REACH}.") from None


def parse_minutes(text: str) -> int | None:
    """Slurm's time limit (``infinite``, ``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``) in whole
    minutes, rounded up; ``None`` for no limit."""
    if text.strip().lower() in {"infinite", "unlimited", "n/a", "none"}:
        return None
    days, _, clock = text.strip().rpartition("-")
    parts = [int(p) for p in clock.split(":")]  # D-H[:M[:S]], else M, M:S or H:M:S
    parts = [*parts, 0, 0][:3] if days else [0, *parts, 0] if len(parts) == 1 else [0, 0, *parts]
    hours, minutes, seconds = parts[-3:]
    return (int(days or 0) * 24 + hours) * 60 + minutes + math.ceil(seconds / 60)


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``SINFO``'s answer by partition; a node's CPUs at most the partition's MaxCPUsPerNode,
    its memory rounded down to 0.1 GB."""
    partitions: dict[str, Partition] = {}
    for line in text.splitlines():
        name, limit, max_cpus, cpus, memory_mb, gres = line.split("|")
        cpus = min(int(cpus.rstrip("+")), int(max_cpus) if max_cpus.isdigit() else math.inf)
        memory_gb = math.floor(int(memory_mb.rstrip("+")) / 102.4) / 10
        node = Node(cpus, memory_gb, sum(int(n) for n in _GPU_GRES.findall(gres)))
        new = Partition(name.rstrip("*"), name.endswith("*"), parse_minutes(limit), [])
        partitions.setdefault(new.name, new).nodes.append(node)
    return partitions


def choose(partitions: Mapping[str, Partition], name: str | None) -> Partition:
    """The named partition, or the cluster's default one."""
    chosen = partitions.get(name) or next((p for p in partitions.values() if p.default), None)
    if chosen is not None and name in (None, chosen.name):
        return chosen
    listing = ", ".join(p.name + "*" * p.default for p in partitions.values()) or "none"
    what = f"partition = {name!r} (DMG_SUBMITIT_PARTITION) does not exist on this cluster"
    raise UserError(
        f"{'the cluster has no default partition' if name is None else what}; partitions (* the "
        f"default): {listing}. Set partition (DMG_SUBMITIT_PARTITION) to one of them"
        + (", or leave it unset for the default." if chosen else ".")
    )


def default_request(partition: Partition, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` (``RESOURCES``, ``None`` where unset) completed to fit ``partition``'s node
    with the most CPUs among those with the GPUs."""
    gpus = int(any(n.gpus for n in partition.nodes)) if given["gpus"] is None else given["gpus"]
    node = max([n for n in partition.nodes if n.gpus >= gpus] or partition.nodes)
    cpus = given["cpus"] or min(DEFAULTS["cpus"], node.cpus)
    share = math.floor(node.memory_gb * min(cpus, node.cpus) / node.cpus * 10) / 10
    mem_gb = min(DEFAULTS["mem_gb"], share) if given["mem_gb"] is None else given["mem_gb"]
    time_min = given["time_min"] or min(DEFAULTS["time_min"], partition.max_time_min or math.inf)
    return {"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "time_min": time_min}


def fit(
    given: Mapping[str, Any], partition_name: str | None, environ: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    """The partition and each job's resources, ``given`` completed to fit; :class:`UserError`
    if the jobs cannot run there."""
    result = ask(SINFO, environ)
    if result.returncode != 0:
        said = " / ".join(result.stderr.strip().splitlines()[-2:])
        raise UserError(f"sinfo failed, so Slurm cannot tell its partitions ({said}). {_REACH}.")
    partition = choose(parse_sinfo(result.stdout), partition_name)
    request, limit, problems = default_request(partition, given), partition.max_time_min, []
    named = {k: "the default" if given[k] is None else f"DMG_SUBMITIT_{k.upper()}" for k in given}
    if limit is not None and request["time_min"] > limit:
        problems.append(
            f"time_min = {request['time_min']} ({named['time_min']}) is over the partition's "
            "time limit: Slurm would accept the jobs and leave them pending forever. Set "
            f"time_min to at most {limit}"
        )
    time_min = min(request["time_min"], limit or math.inf)
    flags = [f"--partition={partition.name}", f"--time={time_min}"]
    flags += [f"--gpus-per-node={request['gpus']}"] * bool(request["gpus"])
    flags += [f"--cpus-per-task={request['cpus']}", f"--mem={math.ceil(request['mem_gb'] * 1024)}M"]
    answer = ask(["sbatch", "--test-only", *flags, "--wrap", "true"], environ)
    if answer.returncode:
        said = (answer.stderr.strip().splitlines() or ["refused"])[-1]
        asked = ", ".join(f"{k} = {request[k]:g} ({named[k]})" for k in RESOURCES[:3])
        most = Node(*map(max, zip(*partition.nodes)))
        own = sorted(name for name in environ if name.startswith("SBATCH_"))
        problems.append(
            f"Slurm refuses the jobs (sbatch --test-only: {said}): per job {asked}, and its "
            f"nodes have at most {most.gpus} GPUs, {most.cpus} CPUs, {most.memory_gb:.1f} GB. "
            "Lower what is over that, or choose another partition (DMG_SUBMITIT_PARTITION)"
            + (f"; Slurm's own variables are set too: {', '.join(own)}" if own else "")
        )
    if problems:
        listed = "".join(f"\n  {problem}" for problem in problems)
        raise UserError(f"the jobs cannot run on partition {partition.name}:{listed}")
    return partition.name, request


def parse_states(text: str) -> dict[str, str]:
    """``SQUEUE``'s answer: state by job id."""
    return dict(line.strip().split("|") for line in text.splitlines() if "|" in line)


def failure(error: BaseException | None) -> str | None:
    """``Name: message`` of a job's exception (the last in its traceback); None for success."""
    return (
        None if error is None else _EXCEPTION_LINE.findall(f"{type(error).__name__}: {error}")[-1]
    )


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
            answer = ask(squeue, os.environ)
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
        if (reason := verdicts[job.job_id]) is None:
            continue
        lines: list[str] = []
        if len(found) < DETAILED_FAILURES:
            err_txt = Path(output_dir_of(command) or "/nonexistent", "err.txt")
            text = err_txt.read_text(errors="replace") if err_txt.is_file() else ""
            lines = error_tail((text.strip() or job.stderr() or "").splitlines())
        tail, hint = tuple(lines), folder_deleted(command)
        found.append(Failure(reason, command, f"job {job.job_id}", hint, tail=tail))
    return found
