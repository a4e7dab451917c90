"""``submitit``: every DomainBed job one task of a Slurm job array, submitted through submitit.

Settings: ``OPTIONS`` (unset resources fit the partition's nodes, as ``sinfo`` shows them); other
``sbatch`` options come from Slurm's own variables (``SBATCH_ACCOUNT``, ...). Before anything is
submitted, Slurm judges the request with ``sbatch --test-only``, which refuses more CPUs than any
node has (a submission would pend forever); a time over the partition's limit, which it accepts
and leaves pending, is compared here. When Slurm refuses, the partition alone and then each
resource alone are tried, to name the setting at fault. When nothing could be submitted, the job
folders DomainBed's sweep made that are still empty are removed, so that the same sweep command
launches them next time. Each task runs :func:`run_command`, safe to run again after a requeue;
links ``submitit.out``/``submitit.err`` in its folder lead to its Slurm logs and tell
:func:`running_jobs` which Slurm job last ran there.

Job states come from ``squeue`` (every cluster has it; it lists ended jobs for ``MinJobAge``
seconds, and a job it no longer lists is GONE), not from submitit's watcher, which reads
``sacct``: without accounting every state reads UNKNOWN and ``job.result()`` waits forever for a
job that ended without a result. Such a job fails at once when cancelled, else after ``GRACE_S``
(a shared file system may show a node's file late; submitit waits that long for each job in
turn); ``SILENT_LIMIT_S`` without an answer ends the wait. Stdlib only at import: DomainBed's
sweep script loads every launcher, and the tasks run this module on the nodes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter, namedtuple
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import Option, output_dir_of, read_options


def _option(name: str, kind: type, default: Any, minimum: float | None, help: str, *choices):
    return Option(name, f"DMG_SUBMITIT_{name.upper()}", kind, default, help, minimum, *choices)


OPTIONS = (
    _option("cluster", str, "slurm", None, "where the jobs run", ("slurm", "local", "debug")),
    _option("partition", str, None, None, "Slurm partition; default: the cluster's default"),
    _option("gpus", int, None, 0, "GPUs per job; default: 1 if the partition has GPUs, else 0"),
    _option("cpus", int, None, 1, "CPU cores per job; default: 8, or the largest node's if fewer"),
    _option("mem_gb", float, None, 0, "memory per job, GB; default: 32 or a node's CPU share"),
    _option("time_min", int, None, 1, "minutes per job; default: 1440 or the partition's limit"),
    _option("array_parallelism", int, 256, 1, "array tasks running at the same time"),
    # Slurm's default MaxArraySize is 1001: larger sweeps become several arrays.
    _option("max_array_size", int, 1000, 1, "tasks per Slurm array"),
    _option(
        "folder", str, None, None, "Slurm logs, submitit's files; default: OUTPUT_DIR/.submitit"
    ),
    _option("wait", bool, None, None, "wait, fail if a job fails; default: not on Slurm"),
)
LINK_NAMES = {"stdout": "submitit.out", "stderr": "submitit.err"}
INTERRUPTED_PREFIX = "interrupted_attempt_"
KILLED_COMMAND_WAIT_S = 120  # for Slurm's next step after its SIGTERM: requeue or SIGKILL
_LOCAL = "or set DMG_SUBMITIT_CLUSTER=local to run the jobs on this machine"


DEFAULTS = {"cpus": 8, "mem_gb": 32.0, "time_min": 1440}
RESOURCES = ("gpus", "cpus", "mem_gb", "time_min")
SINFO = ["sinfo", "--noheader", "--exact", "--format=%P|%l|%B|%c|%m|%G"]
SQUEUE = ["squeue", "--noheader", "--array", "--format=%i|%T"]  # a line per array task
TIMEOUT_S = 60
FOREVER = "Slurm would accept the jobs and leave them pending forever"
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
_REACH = "Check SLURM_CONF and that slurmctld is up, or set DMG_SUBMITIT_CLUSTER=local"
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
Node = namedtuple("Node", "cpus memory_gb gpus")  # a node configuration; the largest is greatest
Partition = namedtuple("Partition", "name default max_time_min nodes")  # max_time_min None: none


class CommandFailed(RuntimeError):
    """A job's command failed (what it printed is in the job's error log)."""


def settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings in ``environ``, ``None`` where the cluster decides."""
    values = read_options(OPTIONS, environ)
    if values["wait"] is None or values["cluster"] == "debug":
        values["wait"] = values["cluster"] != "slurm"
    return values


def resolve(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings with each job's resources decided (on Slurm: to fit the partition, and
    judged by Slurm); :class:`UserError` if the jobs cannot run."""
    values = settings(environ)
    if importlib.util.find_spec("submitit") is None:
        raise UserError("the submitit launcher needs submitit: pip install 'dmg-domainbed[slurm]'")
    given = {name: values[name] for name in RESOURCES}
    if values["cluster"] != "slurm":
        from dmg_domainbed.launchers.local_parallel import visible_gpus

        defaults = {**DEFAULTS, "gpus": min(1, len(visible_gpus(environ)))}
        return {**values, **{k: defaults[k] if v is None else v for k, v in given.items()}}
    tools = ("sbatch", "srun", "sinfo", "squeue")
    if not all(shutil.which(tool, path=environ.get("PATH")) for tool in tools):
        raise UserError(
            f"no Slurm here ({', '.join(tools)} are not all on PATH). Submit from a Slurm login "
            f'node, {_LOCAL} (cluster = "local" in the sweep file).'
        )
    partition, request = fit(given, values["partition"], environ)
    return {**values, **request, "partition": partition}


def describe(values: Mapping[str, Any]) -> str:
    """One line: where and with which resources each job runs."""
    where = f"submitit's {values['cluster']} executor"
    if values["cluster"] == "slurm":
        where = f"Slurm partition {values['partition']}"
    return (
        f"{where}; per job {values['gpus']} GPU, {values['cpus']} CPU, {values['mem_gb']:g} GB, "
        f"{values['time_min']} min; {values['array_parallelism']} at a time"
    )


def check(environ: Mapping[str, str]) -> str:
    """Validate the settings against the cluster before any job exists; how the jobs will run."""
    return describe(resolve(environ))


def slurm(command: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess:
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
    parts = [int(p) for p in clock.split(":")]
    if days:
        hours, minutes, seconds = [int(days) * 24 + parts[0], *parts[1:], 0, 0][:3]
    else:
        hours, minutes, seconds = ([0, *parts, 0] if len(parts) == 1 else [0, 0, *parts])[-3:]
    return hours * 60 + minutes + math.ceil(seconds / 60)


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
    """``given`` (``RESOURCES``, ``None`` where unset) with the unset ones chosen to fit
    ``partition``, sized for its node with the most CPUs among those with the GPUs."""
    gpus = int(any(n.gpus for n in partition.nodes)) if given["gpus"] is None else given["gpus"]
    node = max([n for n in partition.nodes if n.gpus >= gpus] or partition.nodes)
    cpus = given["cpus"] or min(DEFAULTS["cpus"], node.cpus)
    share = math.floor(node.memory_gb * min(cpus, node.cpus) / node.cpus * 10) / 10
    mem_gb = min(DEFAULTS["mem_gb"], share) if given["mem_gb"] is None else given["mem_gb"]
    time_min = given["time_min"] or min(DEFAULTS["time_min"], partition.max_time_min or math.inf)
    return {"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "time_min": time_min}


def refusal(flags: list[str], environ: Mapping[str, str]) -> str | None:
    """What ``sbatch --test-only`` says against a job with ``flags``; ``None`` if it fits."""
    result = slurm(["sbatch", "--test-only", *flags, "--wrap", "true"], environ)
    return (result.stderr.strip().splitlines() or ["refused"])[-1] if result.returncode else None


def misfits(
    request: Mapping[str, Any], partition: Partition, environ: Mapping[str, str]
) -> tuple[list[tuple[str, str]], str | None]:
    """Why ``request`` cannot run on ``partition``, as (setting, what to do) pairs, and what
    Slurm said if it refused."""
    limit, problems = partition.max_time_min, []
    if limit is not None and request["time_min"] > limit:
        fix = f"over the partition's time limit: {FOREVER}. Set time_min to at most {limit}"
        problems.append(("time_min", fix))
    time_min = min(request["time_min"], limit or request["time_min"])
    alone = [f"--partition={partition.name}", f"--time={time_min}"]
    flags = {
        "gpus": [f"--gpus-per-node={request['gpus']}"] * bool(request["gpus"]),
        "cpus": [f"--cpus-per-task={request['cpus']}"],
        "mem_gb": [f"--mem={math.ceil(request['mem_gb'] * 1024)}M"],
    }
    said = refusal(alone + sum(flags.values(), []), environ)
    if said is None:
        return problems, None
    if refusal(alone, environ) is not None:
        suspects = ", ".join(["the partition", *sorted(v for v in environ if v[:7] == "SBATCH_")])
        return problems + [("partition", f"Slurm refuses any job there: check {suspects}")], said
    most = Node(*map(max, zip(*partition.nodes)))
    has = f"at most {most.gpus} GPUs a node" if most.gpus else "no GPUs"
    fixes = {
        "gpus": f"the partition has {has}. Set gpus = 0 to run on CPUs, or choose a partition "
        "with GPUs",
        "cpus": f"more than any node has: {FOREVER}. Set cpus to at most {most.cpus}",
        "mem_gb": f"more than any node has. Set mem_gb to at most {most.memory_gb:.1f}",
    }
    at_fault = [
        (name, fixes[name]) for name, f in flags.items() if f and refusal(alone + f, environ)
    ]
    together = (
        f"no single node has {request['gpus']} GPU, {request['cpus']} CPUs and "
        f"{request['mem_gb']:g} GB together. Lower gpus, cpus or mem_gb"
    )
    return problems + (at_fault or [("cpus", together)]), said


def fit(
    given: Mapping[str, Any], partition_name: str | None, environ: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    """The partition and each job's resources, ``given`` completed to fit; :class:`UserError`
    naming each setting at fault if the jobs cannot run there."""
    result = slurm(SINFO, environ)
    if result.returncode != 0:
        said = " / ".join(result.stderr.strip().splitlines()[-2:])
        raise UserError(f"sinfo failed, so Slurm cannot tell its partitions ({said}). {_REACH}.")
    partition = choose(parse_sinfo(result.stdout), partition_name)
    request = default_request(partition, given)
    problems, said = misfits(request, partition, environ)
    values, named = {**request, "partition": partition.name}, {**given, "partition": partition_name}
    lines = [
        f"\n  {name} = {values[name] if name == 'partition' else format(values[name], 'g')} "
        f"({f'DMG_SUBMITIT_{name.upper()}' if named[name] is not None else 'the default'}): {fix}"
        for name, fix in problems
    ]
    if lines:
        said = f" (sbatch --test-only: {said})" if said else ""
        raise UserError(
            f"the jobs cannot run on partition {partition.name}{said}:" + "".join(lines)
        )
    return partition.name, request


def _refused(error: object, commands: Sequence[str]) -> UserError:
    """``error``, once the job folders of ``commands`` that are still empty are removed."""
    removed = 0
    for output_dir in filter(None, map(output_dir_of, commands)):
        with contextlib.suppress(OSError):
            os.rmdir(output_dir)  # only ever removes an empty folder
            removed += 1
    return UserError(
        f"{error} The {removed} empty job folder(s) made for the jobs that were not submitted "
        "were removed: fix the cause and run the same sweep command again to launch them."
        if removed
        else f"{error} Fix the cause and run the same sweep command again."
    )


def _executor(values: Mapping[str, Any], commands: Sequence[str]) -> Any:
    import submitit

    output_dirs = [output_dir_of(command) for command in commands]
    if values["folder"] is None and None in output_dirs:
        raise UserError(
            "the submitit launcher could not tell where to write its logs: not every command "
            "names an --output_dir. Set DMG_SUBMITIT_FOLDER to a folder for submitit's files."
        )
    parents = [os.path.dirname(os.path.abspath(d)) for d in output_dirs if d]
    folder = values["folder"] or os.path.join(os.path.commonpath(parents), ".submitit")
    executor = submitit.AutoExecutor(folder=Path(folder).resolve(), cluster=values["cluster"])
    executor.update_parameters(
        name="domainbed",
        gpus_per_node=values["gpus"] or None,  # no --gpus-per-node line at all for CPU jobs
        cpus_per_task=values["cpus"],
        mem_gb=values["mem_gb"],
        timeout_min=values["time_min"],
        slurm_partition=values["partition"],
        slurm_array_parallelism=values["array_parallelism"],
    )
    return executor


def submitit_launcher(commands: list[str]) -> None:
    """Submit ``commands`` (DomainBed shell commands) as Slurm array tasks through submitit."""
    if not commands:
        print("submitit: nothing to submit", flush=True)
        return
    try:
        values = resolve(os.environ)
        executor = _executor(values, commands)
    except UserError as error:
        raise _refused(error, commands) from None
    jobs: list[Any] = []
    size = values["max_array_size"]
    for start in range(0, len(commands), size):
        try:
            jobs += executor.map_array(run_command, commands[start : start + size])
        except Exception as error:
            done = f"; the first {start} were submitted" if start else ""
            raise _refused(
                f"submitting {len(commands)} job(s) failed at job {start + 1}{done}: "
                f"{type(error).__name__}: {error}",
                commands[start:],
            ) from error
        for job, output_dir in zip(jobs[start:], map(output_dir_of, commands[start:])):
            for stream, name in LINK_NAMES.items() if output_dir else ():  # to the Slurm logs
                link = Path(output_dir, name)
                if link.is_symlink() or not link.exists():
                    link.unlink(missing_ok=True)
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(os.path.relpath(getattr(job.paths, stream), output_dir))
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    print(
        f"submitit: submitted {len(jobs)} job(s) to {describe(values)}; job ids "
        f"{', '.join(arrays[:5])}{' ...' * (len(arrays) > 5)}; logs in {executor.folder}",
        flush=True,
    )
    if values["wait"]:
        if values["cluster"] == "slurm":
            verdicts = wait_for(jobs)
        else:  # submitit's local executors know their processes: their own wait is bounded
            verdicts = {job.job_id: failure(job.exception()) for job in jobs}
        report = failure_report(jobs, commands, verdicts)
        if report is not None:
            raise UserError(report)
        print(f"submitit: all {len(jobs)} job(s) finished", flush=True)


def run_command(command: str) -> None:
    """What each array task runs: one DomainBed command, as DomainBed's ``local`` launcher does,
    unless its job is done; :class:`CommandFailed` if it fails. DomainBed appends to a job's
    ``results.jsonl``: what an interrupted attempt left in the folder (but the log links) moves
    into ``interrupted_attempt_N`` first. The command runs in a process group of its own,
    ignoring submitit's pre-emption signal (which is for this process); when Slurm stops it,
    Slurm's next step (requeue or SIGKILL) is waited for."""
    folder = Path(output_dir_of(command) or os.devnull)
    if (folder / "done").exists():
        print(f"{folder} is done: not run again", flush=True)
        return
    entries = list(folder.iterdir()) if folder.is_dir() else []
    attempts = [e for e in entries if e.name.startswith(INTERRUPTED_PREFIX)]
    leftovers = [e for e in entries if e not in attempts and e.name not in LINK_NAMES.values()]
    if leftovers:
        target = folder / f"{INTERRUPTED_PREFIX}{len(attempts) + 1}"
        target.mkdir()
        for entry in leftovers:
            entry.rename(target / entry.name)
        print(f"files of an interrupted attempt moved to {target}", flush=True)
    preemption = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
    process = subprocess.Popen(
        command,
        shell=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(preemption, signal.SIG_IGN),
    )
    try:
        code = process.wait()
    finally:  # what the command left running ends with it, and with this process
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    if code == 0:
        return
    killed_by = -code if code < 0 else code - 128 if code > 128 else None  # direct, or via sh
    if killed_by == signal.SIGTERM and "SLURM_JOB_ID" in os.environ:  # cancel, pre-emption, time
        time.sleep(KILLED_COMMAND_WAIT_S)
    how = f"was killed by signal {killed_by}" if killed_by else f"exited with status {code}"
    raise CommandFailed(f"the command {how}")


def parse_states(text: str) -> dict[str, str]:
    """``SQUEUE``'s answer: state by job id."""
    return dict(line.strip().split("|") for line in text.splitlines() if "|" in line)


def failure(error: BaseException | None) -> str | None:
    """``Name: message`` of a job's exception (the last in its traceback); None for success."""
    if error is None:
        return None
    return _EXCEPTION_LINE.findall(f"{type(error).__name__}: {error}")[-1]


def wait_for(jobs: Sequence[Any], say: Callable[[str], None] = print) -> dict[str, str | None]:
    """Every submitit Slurm job's verdict (``None``: success, else why it failed) by job id,
    once each has one. Its result, exception and logs come from submitit's Job API."""
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
    """The end of an error stream without the lines of submitit, srun and slurmstepd, and
    without the traceback of :class:`CommandFailed` (the verdict says it); from the exception
    on, without frames, when it ends with a traceback."""
    lines = [line for line in lines if line.strip() and not line.startswith(_SLURM_LOG_NOISE)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if starts and any(CommandFailed.__name__ in line for line in lines[starts[-1] :]):
        lines = lines[: starts.pop()]
    after = lines[starts[-1] + 1 :] if starts else []
    first = next((i for i, line in enumerate(after) if not line[:1].isspace()), len(after))
    return (after[first:] or lines)[-TAIL_LINES:]


def failure_report(
    jobs: Sequence[Any], commands: Sequence[str], verdicts: Mapping[str, str | None]
) -> str | None:
    """Every failed job: its command, why it ended and the end of its error stream (DomainBed's
    err.txt, else its Slurm log), in full for the first ``DETAILED_FAILURES``, then counted by
    reason."""
    failed = [(job, c) for job, c in zip(jobs, commands) if verdicts[job.job_id] is not None]
    parts = [f"{len(failed)} of {len(jobs)} job(s) failed:"]
    for job, command in failed[:DETAILED_FAILURES]:
        parts += [f"  job {job.job_id}: {verdicts[job.job_id]}", f"    {command}"]
        err_txt = Path(output_dir_of(command) or "/nonexistent", "err.txt")
        text = err_txt.read_text(errors="replace") if err_txt.is_file() else ""
        lines = error_tail((text.strip() or job.stderr() or "").splitlines())
        parts += ["    its error output ends with:"] * bool(lines) + [f"      {x}" for x in lines]
    rest = Counter(verdicts[job.job_id] for job, _ in failed[DETAILED_FAILURES:])
    parts += [f"  and {n} more: {reason}" for reason, n in rest.most_common()]
    return "\n".join(parts) if failed else None


def running_jobs(output_dirs: Sequence[Path], environ: Mapping[str, str]) -> dict[Path, str]:
    """The job folders whose Slurm job (named by the folder's ``submitit.err`` link to
    ``<id>_<task>_log.err``) still is pending or running, with its state."""
    links = [Path(folder, LINK_NAMES["stderr"]) for folder in output_dirs]
    logs = {link.parent: link.readlink().name for link in links if link.is_symlink()}
    jobs = {d: log.rsplit("_", 2)[0] for d, log in logs.items() if log.endswith("_log.err")}
    if not jobs or shutil.which("squeue", path=environ.get("PATH")) is None:
        return {}
    arrays = ",".join(sorted({job.split("_")[0] for job in jobs.values()}))
    answer = slurm([*SQUEUE, f"--jobs={arrays}"], environ)  # only unended ones
    if answer.returncode != 0 and "Invalid job id" not in answer.stderr:  # no id known: none
        raise UserError(
            f"{len(jobs)} incomplete job folder(s) were submitted to Slurm, and squeue did not "
            "answer whether those jobs still run, so none is deleted. Run the command again "
            "when Slurm answers, or without delete-incomplete."
        )
    states = parse_states(answer.stdout)
    return {folder: states[job] for folder, job in jobs.items() if job in states}


submitit_launcher.OPTIONS = OPTIONS
submitit_launcher.check = check
submitit_launcher.running_jobs = running_jobs
