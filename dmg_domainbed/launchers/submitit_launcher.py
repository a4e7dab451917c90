"""``submitit``: every DomainBed job one task of a Slurm job array, submitted through submitit.

Settings come from environment variables (``dmg-domainbed sweep`` sets them from a sweep
file's ``[launcher]`` table; variables already set in the environment win):

========================================  =====================================================
``DMG_SUBMITIT_CLUSTER``                  ``slurm`` (default), ``local`` (processes on this
                                          machine, all at once; for testing) or ``debug`` (in
                                          this process, one after the other)
``DMG_SUBMITIT_PARTITION``                Slurm partition (default: the cluster's default)
``DMG_SUBMITIT_GPUS``                     GPUs per job (default: 1 if the partition has GPUs,
                                          else 0)
``DMG_SUBMITIT_CPUS``                     CPU cores per job (default: 8, DomainBed's image
                                          datasets load data with 8 worker processes, or the
                                          largest node's cores if fewer)
``DMG_SUBMITIT_MEM_GB``                   memory per job in GB (default: 32, or the job's CPU
                                          share of the node's memory if less)
``DMG_SUBMITIT_TIME_MIN``                 time limit per job in minutes (default: 1440, or
                                          the partition's limit if lower)
``DMG_SUBMITIT_ARRAY_PARALLELISM``        array tasks running at once (default 256)
``DMG_SUBMITIT_MAX_ARRAY_SIZE``           tasks per array; larger sweeps are split into
                                          several arrays (default 1000: Slurm's default
                                          ``MaxArraySize`` is 1001)
``DMG_SUBMITIT_FOLDER``                   submitit's files and the Slurm logs (default:
                                          ``.submitit`` inside the sweep's output_dir)
``DMG_SUBMITIT_WAIT``                     wait for the jobs, fail if one fails (default: no for
                                          slurm, yes for local and debug)
========================================  =====================================================

Before anything is submitted the request is compared with what the partition offers
(:mod:`.slurm_partition`); a request that cannot run raises
:class:`~dmg_domainbed.errors.UserError` naming the setting. DomainBed's sweep makes every job
folder before it calls the launcher: when nothing could be submitted, the folders it was handed
that are still empty are removed again, so the same sweep command launches them next time.

Any other ``sbatch`` option can be given through Slurm's own input variables
(``SBATCH_ACCOUNT``, ``SBATCH_QOS``, ``SBATCH_CONSTRAINT``, ...). Each job folder gets links
``submitit.out`` and ``submitit.err`` to that job's Slurm logs. DomainBed's own ``out.txt`` and
``err.txt`` are written there by DomainBed as usual.

A pre-empted job is requeued by submitit and runs again: a job whose DomainBed ``done`` file
exists is not run again, and the files of an attempt that did not finish are moved into
``interrupted_attempt_N`` inside its folder (DomainBed's ``results.jsonl`` is appended to, so
the new attempt must start from an empty one). Waiting (:mod:`.slurm_wait`) ends in bounded
time even without Slurm accounting, and reports each failed job with the end of its ``err.txt``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import slurm_partition, slurm_wait
from dmg_domainbed.launchers.common import Option, output_dir_of, read_options

OPTIONS = (
    Option(
        "cluster",
        "DMG_SUBMITIT_CLUSTER",
        str,
        "slurm",
        choices=("slurm", "local", "debug"),
        help="where the jobs run",
    ),
    Option(
        "partition",
        "DMG_SUBMITIT_PARTITION",
        str,
        None,
        help="Slurm partition; default: the cluster's default partition",
    ),
    Option(
        "gpus",
        "DMG_SUBMITIT_GPUS",
        int,
        None,
        minimum=0,
        help="GPUs per job; default: 1 if the partition has GPUs, else 0",
    ),
    Option(
        "cpus",
        "DMG_SUBMITIT_CPUS",
        int,
        None,
        minimum=1,
        help="CPU cores per job; default: 8, or the largest node's if fewer",
    ),
    Option(
        "mem_gb",
        "DMG_SUBMITIT_MEM_GB",
        float,
        None,
        minimum=0,
        help="memory per job, GB; default: 32, or the job's CPU share of a node's if less",
    ),
    Option(
        "time_min",
        "DMG_SUBMITIT_TIME_MIN",
        int,
        None,
        minimum=1,
        help="time limit per job, minutes; default: 1440, or the partition's limit if lower",
    ),
    Option(
        "array_parallelism",
        "DMG_SUBMITIT_ARRAY_PARALLELISM",
        int,
        256,
        minimum=1,
        help="array tasks running at the same time",
    ),
    Option(
        "max_array_size",
        "DMG_SUBMITIT_MAX_ARRAY_SIZE",
        int,
        1000,
        minimum=1,
        help="tasks per Slurm array",
    ),
    Option(
        "folder",
        "DMG_SUBMITIT_FOLDER",
        str,
        None,
        help="folder of submitit's files and Slurm logs; default: OUTPUT_DIR/.submitit",
    ),
    Option(
        "wait",
        "DMG_SUBMITIT_WAIT",
        bool,
        None,
        help="wait for the jobs and fail if one fails; default: only for local and debug",
    ),
)
_NO_SUBMITIT = "the submitit launcher needs submitit: pip install 'dmg-domainbed[slurm]'"
_ENV_OF = {option.name: option.env for option in OPTIONS}
LINK_NAMES = {"stdout": "submitit.out", "stderr": "submitit.err"}
INTERRUPTED_PREFIX = "interrupted_attempt_"
JOB_NAME = "domainbed"
# How long a job whose command got Slurm's SIGTERM waits for Slurm's next step (requeue, or the
# kill of the whole job) before it reports the command as failed.
KILLED_COMMAND_WAIT_S = 120


class CommandFailed(RuntimeError):
    """A job's command exited with an error (what it printed is in the job's error log)."""


def _preemption_signal() -> signal.Signals:
    # submitit's own choice of signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default).
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def set_aside_interrupted_attempt(folder: Path) -> Path | None:
    """Move what an earlier, unfinished attempt of a job left in its folder into
    ``interrupted_attempt_N``; the log links stay. Returns that folder, if anything moved."""
    if not folder.is_dir():
        return None
    leftovers = [
        entry
        for entry in folder.iterdir()
        if entry.name not in LINK_NAMES.values() and not entry.name.startswith(INTERRUPTED_PREFIX)
    ]
    if not leftovers:
        return None
    attempt = 1 + sum(entry.name.startswith(INTERRUPTED_PREFIX) for entry in folder.iterdir())
    target = folder / f"{INTERRUPTED_PREFIX}{attempt}"
    target.mkdir()
    for entry in leftovers:
        entry.rename(target / entry.name)
    return target


def run_command(command: str) -> None:
    """What each array task runs: one DomainBed command, as DomainBed's ``local`` launcher does.

    A requeued job finds its folder as its earlier attempt left it: done work is kept, an
    unfinished attempt is set aside. The command ignores submitit's pre-emption signal, which
    is for this process (it requeues the job); when Slurm kills the command itself, Slurm's next
    step (a requeue, or the end of the job) is waited for instead of reporting a failure.
    """
    output_dir = output_dir_of(command)
    if output_dir is not None:
        folder = Path(output_dir)
        if (folder / "done").exists():
            print(f"{folder} is done: not run again", flush=True)
            return
        moved = set_aside_interrupted_attempt(folder)
        if moved is not None:
            print(f"files of an interrupted attempt moved to {moved}", flush=True)
    preemption = _preemption_signal()
    # A process group of its own: whatever ends this process (a requeue, Ctrl-C) ends the whole
    # command, not only the shell that runs it.
    process = subprocess.Popen(
        command,
        shell=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(preemption, signal.SIG_IGN),
    )
    try:
        code = process.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    if code == 0:
        return
    killed_by = -code if code < 0 else code - 128 if code > 128 else None  # direct, or via sh
    if killed_by == signal.SIGTERM and "SLURM_JOB_ID" in os.environ:
        # Slurm stops a job with SIGTERM (cancel, pre-emption, time limit): its next step
        # follows (SIGKILL, or submitit's requeue on the pre-emption signal).
        time.sleep(KILLED_COMMAND_WAIT_S)
    how = f"was killed by signal {killed_by}" if killed_by else f"exited with status {code}"
    raise CommandFailed(f"the command {how}")


def settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The launcher's settings from ``environ``, as given (``None`` where unset and decided by
    the cluster); :class:`UserError` if one is invalid."""
    values = read_options(OPTIONS, environ)
    if values["wait"] is None or values["cluster"] == "debug":
        values["wait"] = values["cluster"] != "slurm"
    return values


def resolve(values: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """``values`` with the job's resources decided: on Slurm checked against the partition,
    unset ones chosen to fit it; :class:`UserError` if the request cannot run there."""
    resolved = dict(values)
    given = {key: values[key] for key in ("gpus", "cpus", "mem_gb", "time_min")}
    if values["cluster"] != "slurm":
        from dmg_domainbed.launchers.local_parallel import visible_gpus

        defaults = {
            "gpus": min(1, len(visible_gpus(environ))),
            "cpus": slurm_partition.DEFAULT_CPUS,
            "mem_gb": slurm_partition.DEFAULT_MEM_GB,
            "time_min": slurm_partition.DEFAULT_TIME_MIN,
        }
        resolved.update({k: defaults[k] if v is None else v for k, v in given.items()})
        return resolved
    partitions = slurm_partition.read_partitions(environ)
    partition = slurm_partition.choose(partitions, values["partition"])
    request = slurm_partition.default_request(partition, given)
    problems = slurm_partition.misfits(request, partition, partitions)
    if problems:
        lines = []
        for name, fix in problems:
            value = getattr(request, name)
            origin = _ENV_OF[name] if given[name] is not None else "the default"
            lines.append(f"{name} = {value:g} ({origin}): {fix}")
        raise UserError(f"the jobs cannot run on {partition.describe()}:\n  " + "\n  ".join(lines))
    resolved.update(
        partition=partition.name,
        gpus=request.gpus,
        cpus=request.cpus,
        mem_gb=request.mem_gb,
        time_min=request.time_min,
    )
    return resolved


def describe(values: Mapping[str, Any]) -> str:
    """One line: where and with which resources each job runs."""
    if values["cluster"] == "slurm":
        where = f"Slurm partition {values['partition'] or '(default)'}"
    else:
        where = f"submitit's {values['cluster']} executor"
    return (
        f"{where}; per job {values['gpus']} GPU, {values['cpus']} CPU, {values['mem_gb']:g} GB, "
        f"{values['time_min']} min; {values['array_parallelism']} at a time"
    )


def _prepare(environ: Mapping[str, str]) -> dict[str, Any]:
    values = settings(environ)
    if importlib.util.find_spec("submitit") is None:
        raise UserError(_NO_SUBMITIT)
    if values["cluster"] == "slurm":
        path = environ.get("PATH")
        if not all(shutil.which(tool, path=path) for tool in ("sbatch", "srun")):
            raise UserError(
                "no Slurm here (sbatch and srun are not both on PATH). Submit from a Slurm login "
                'node, or set DMG_SUBMITIT_CLUSTER=local (cluster = "local" in the sweep '
                "file) to run the jobs on this machine."
            )
    return resolve(values, environ)


def check(environ: Mapping[str, str]) -> str:
    """Validate the settings in ``environ`` against the cluster before any job exists; describe
    how the jobs will run."""
    return describe(_prepare(environ))


def default_folder(commands: Sequence[str]) -> Path:
    """``.submitit`` inside the folder that holds every job's ``--output_dir``."""
    output_dirs = [output_dir_of(c) for c in commands]
    if not output_dirs or None in output_dirs:
        raise UserError(
            "the submitit launcher could not tell where to write its logs: not every command "
            "names an --output_dir. Set DMG_SUBMITIT_FOLDER to a folder for submitit's files."
        )
    parents = [os.path.dirname(os.path.abspath(d)) for d in output_dirs]
    return Path(os.path.commonpath(parents)) / ".submitit"


def remove_empty_job_folders(commands: Sequence[str]) -> int:
    """Remove the ``--output_dir`` of each command if it exists and is empty (DomainBed made it
    just before calling the launcher); a folder that holds anything stays. Returns how many."""
    removed = 0
    for command in commands:
        output_dir = output_dir_of(command)
        if output_dir is None:
            continue
        try:
            os.rmdir(output_dir)  # only ever removes an empty folder
        except OSError:
            continue
        removed += 1
    return removed


def slurm_job_of(output_dir: Path) -> str | None:
    """The Slurm id (``ARRAY_TASK``) of the job that last ran in a DomainBed job folder, read
    from the ``submitit.err`` link's target (submitit names it ``<id>_<task>_log.err``);
    ``None`` when the folder was never submitted through this launcher."""
    link = Path(output_dir) / LINK_NAMES["stderr"]
    if not link.is_symlink():
        return None
    name = os.readlink(link).rsplit("/", 1)[-1]
    if not name.endswith("_log.err"):
        return None
    return name[: -len("_log.err")].rsplit("_", 1)[0]


def still_queued(output_dirs: Sequence[Path], environ: Mapping[str, str]) -> dict[Path, str]:
    """Job folders whose Slurm job is still pending or running, with its state (e.g.
    ``RUNNING``): deleting them would pull the folder from under a job that still writes it.

    Without ``squeue`` on the PATH (no Slurm here) nothing is queued; a Slurm that does not
    answer is an error, since then nothing can be known.
    """
    jobs = {Path(d): job for d in output_dirs if (job := slurm_job_of(Path(d))) is not None}
    if not jobs or shutil.which("squeue", path=environ.get("PATH")) is None:
        return {}
    states = slurm_wait.queue_states(sorted(set(jobs.values())), environ)
    if states is None:
        raise UserError(
            f"{len(jobs)} incomplete job folder(s) were submitted to Slurm, and squeue did not "
            "answer whether those jobs still run, so none is deleted. Run the command again "
            "when Slurm answers, or without delete-incomplete."
        )
    return {
        folder: states[job]
        for folder, job in jobs.items()
        if job in states and states[job] not in slurm_wait.ENDED
    }


def _refused(error: UserError, commands: Sequence[str], submitted: int = 0) -> UserError:
    removed = remove_empty_job_folders(commands[submitted:])
    if removed:
        fix = (
            f" The {removed} empty job folder(s) made for the jobs that were not submitted were "
            "removed: fix the cause and run the same sweep command again to launch them."
        )
    else:
        fix = " Fix the cause and run the same sweep command again."
    return UserError(f"{error}{fix}")


def _make_executor(values: Mapping[str, Any], folder: Path):
    try:
        import submitit
    except ImportError as error:
        raise UserError(f"{_NO_SUBMITIT} ({error})") from error
    try:
        executor = submitit.AutoExecutor(folder=str(folder), cluster=values["cluster"])
    except RuntimeError as error:
        raise UserError(
            f"submitit cannot use the '{values['cluster']}' cluster here: {error}. Run the sweep "
            "on a Slurm login node, or set DMG_SUBMITIT_CLUSTER=local to run the jobs on this "
            "machine."
        ) from error
    executor.update_parameters(
        name=JOB_NAME,
        nodes=1,
        tasks_per_node=1,
        # No --gpus-per-node line at all for CPU jobs.
        gpus_per_node=values["gpus"] or None,
        cpus_per_task=values["cpus"],
        mem_gb=values["mem_gb"],
        timeout_min=values["time_min"],
        slurm_partition=values["partition"],
        slurm_array_parallelism=values["array_parallelism"],
    )
    return executor


def _link_logs(jobs: Sequence[Any], commands: Sequence[str]) -> None:
    """Links in each job folder to that job's Slurm logs (they exist once the job starts)."""
    for job, command in zip(jobs, commands, strict=True):
        output_dir = output_dir_of(command)
        if output_dir is None:
            continue
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        for stream, name in LINK_NAMES.items():
            link = Path(output_dir) / name
            if link.is_symlink():
                link.unlink()
            elif link.exists():
                continue
            link.symlink_to(os.path.relpath(getattr(job.paths, stream), link.parent))


def _submit(executor, commands: Sequence[str], chunk: int) -> list[Any]:
    jobs: list[Any] = []
    for start in range(0, len(commands), chunk):
        part = list(commands[start : start + chunk])
        try:
            submitted = executor.map_array(run_command, part)
        except Exception as error:
            done = f"; the first {len(jobs)} were submitted" if jobs else ""
            message = (
                f"submitting {len(commands)} job(s) failed at job {start + 1}{done}: "
                f"{type(error).__name__}: {error}"
            )
            raise _refused(UserError(message), commands, len(jobs)) from error
        _link_logs(submitted, part)
        jobs.extend(submitted)
    return jobs


def _tasks(jobs: Sequence[Any], commands: Sequence[str]) -> list[slurm_wait.Task]:
    tasks = []
    for job, command in zip(jobs, commands, strict=True):
        output_dir = output_dir_of(command)
        tasks.append(
            slurm_wait.Task(
                job_id=str(job.job_id),
                command=command,
                result_file=job.paths.result_pickle,
                slurm_stderr=job.paths.stderr,
                output_dir=Path(output_dir) if output_dir else None,
            )
        )
    return tasks


def _local_verdicts(jobs: Sequence[Any]) -> dict[str, slurm_wait.Verdict]:
    """submitit's local executors know their processes: their own wait is bounded."""
    verdicts = {}
    for job in jobs:
        try:
            job.result()
        except Exception as error:
            lines = str(error).strip().splitlines() or [type(error).__name__]
            verdicts[str(job.job_id)] = slurm_wait.Verdict(False, lines[-1])
        else:
            verdicts[str(job.job_id)] = slurm_wait.Verdict(True)
    return verdicts


def _wait(values: Mapping[str, Any], jobs: Sequence[Any], commands: Sequence[str]) -> None:
    tasks = _tasks(jobs, commands)
    if values["cluster"] == "slurm":
        from submitit.core.utils import pickle_load

        verdicts = slurm_wait.wait_for(tasks, os.environ, pickle_load)
    else:
        verdicts = _local_verdicts(jobs)
    report = slurm_wait.failure_report(tasks, verdicts, CommandFailed.__name__)
    if report is not None:
        raise UserError(report)


def submitit_launcher(commands: list[str]) -> None:
    """Submit ``commands`` (DomainBed shell commands) as Slurm array tasks through submitit."""
    if not commands:
        print("submitit: nothing to submit", flush=True)
        return
    try:
        values = _prepare(os.environ)
        folder = Path(values["folder"]).resolve() if values["folder"] else default_folder(commands)
        executor = _make_executor(values, folder)
    except UserError as error:
        raise _refused(error, commands) from None
    jobs = _submit(executor, commands, values["max_array_size"])
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    ids = ", ".join(arrays[:5]) + (" ..." if len(arrays) > 5 else "")
    print(
        f"submitit: submitted {len(jobs)} job(s) to {describe(values)}; job ids {ids}; "
        f"logs in {folder}",
        flush=True,
    )
    if values["wait"]:
        _wait(values, jobs, commands)
        print(f"submitit: all {len(jobs)} job(s) finished", flush=True)


submitit_launcher.OPTIONS = OPTIONS
submitit_launcher.check = check
