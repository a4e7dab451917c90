"""``submitit``: every DomainBed job one task of a Slurm job array, submitted through submitit
(docs/sweeps.md). The request is fitted to the partition and judged by Slurm first
(:mod:`.slurm`); each task runs :func:`.array_task.run_command`; links in its folder lead to its
Slurm logs and tell :func:`running_jobs` its job; :mod:`.slurm` waits. Stdlib
only at import: DomainBed's sweep script loads every launcher.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers import slurm
from dmg_domainbed.launchers.array_task import LINK_NAMES, run_command
from dmg_domainbed.launchers.common import (
    Launcher,
    Option,
    environment_changes,
    failure_report,
    not_launched,
    output_dir_of,
    read_options,
    visible_gpus,
)
from dmg_domainbed.shortlist import shortlist


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


def settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The settings in ``environ``, ``None`` where the cluster decides."""
    values = read_options(OPTIONS, environ)
    if values["wait"] is None or values["cluster"] == "debug":
        values["wait"] = values["cluster"] != "slurm"
    return values


def resolve(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings with each job's resources decided; :class:`UserError` if they cannot run."""
    values = settings(environ)
    if importlib.util.find_spec("submitit") is None:
        raise UserError("the submitit launcher needs submitit: pip install 'dmg-domainbed[slurm]'")
    given = {name: values[name] for name in slurm.RESOURCES}
    if values["cluster"] != "slurm":
        defaults = {**slurm.DEFAULTS, "gpus": min(1, len(visible_gpus(environ)))}
        return {**values, **{k: defaults[k] if v is None else v for k, v in given.items()}}
    tools = ("sbatch", "srun", "sinfo", "squeue")
    if not all(shutil.which(tool, path=environ.get("PATH")) for tool in tools):
        raise UserError(
            f"no Slurm here ({', '.join(tools)} are not all on PATH). Submit from a Slurm login "
            "node, or set DMG_SUBMITIT_CLUSTER=local to run the jobs on this machine (cluster = "
            '"local" in the sweep file).'
        )
    partition, request = slurm.fit(given, values["partition"], environ)
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
    """The settings judged against the cluster before any job exists; how the jobs will run."""
    return describe(resolve(environ))


def submit(commands: list[str], environ: Mapping[str, str] = os.environ) -> None:
    """Submit ``commands`` as Slurm array tasks with the settings in ``environ``; what it sets
    otherwise than this process's environment (which sbatch hands the tasks) is set on the node."""
    if not commands:
        print("submitit: nothing to submit", flush=True)
        return
    output_dirs = [output_dir_of(command) for command in commands]
    try:
        values = resolve(environ)
        if values["folder"] is None and None in output_dirs:
            raise UserError(
                "the submitit launcher could not tell where to write its logs: not every command "
                "names an --output_dir. Set DMG_SUBMITIT_FOLDER to a folder for submitit's files."
            )
    except UserError as error:
        raise not_launched(error, commands) from None
    import submitit

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
    jobs: list[Any] = []
    size = values["max_array_size"]
    task = functools.partial(run_command, environ=environment_changes(environ))
    for start in range(0, len(commands), size):
        try:
            jobs += executor.map_array(task, commands[start : start + size])
        except Exception as error:
            done = f"; the first {start} were submitted" if start else ""
            raise not_launched(
                f"submitting {len(commands)} job(s) failed at job {start + 1}{done}: "
                f"{type(error).__name__}: {error}",
                commands[start:],
            ) from error
        for job, output_dir in zip(jobs[start:], output_dirs[start:]):
            for stream, name in LINK_NAMES.items() if output_dir else ():  # to the Slurm logs
                link = Path(output_dir, name)
                if link.is_symlink() or not link.exists():
                    link.unlink(missing_ok=True)
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(os.path.relpath(getattr(job.paths, stream), output_dir))
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    print(
        f"submitit: submitted {len(jobs)} job(s) to {describe(values)}; job ids "
        f"{shortlist(arrays)}; logs in {executor.folder}",
        flush=True,
    )
    if values["wait"]:
        if values["cluster"] == "slurm":
            verdicts = slurm.wait_for(jobs)
        else:  # submitit's local executors know their processes: their own wait is bounded
            verdicts = {job.job_id: slurm.failure(job.exception()) for job in jobs}
        failed = slurm.failures(jobs, commands, verdicts)
        report = failure_report(failed, len(jobs))
        if report is not None:
            raise UserError(report)
        print(f"submitit: all {len(jobs)} job(s) finished", flush=True)


def running_jobs(output_dirs: Sequence[Path], environ: Mapping[str, str]) -> dict[Path, str]:
    """The job folders whose Slurm job (the folder's ``submitit.err`` link names its log
    ``<id>_<task>_log.err``) still is pending or running, with its state."""
    links = [Path(folder, LINK_NAMES["stderr"]) for folder in output_dirs]
    logs = {link.parent: link.readlink().name for link in links if link.is_symlink()}
    jobs = {d: log.rsplit("_", 2)[0] for d, log in logs.items() if log.endswith("_log.err")}
    if not jobs or shutil.which("squeue", path=environ.get("PATH")) is None:
        return {}
    arrays = ",".join(sorted({job.split("_")[0] for job in jobs.values()}))
    answer = slurm.ask([*slurm.SQUEUE, f"--jobs={arrays}"], environ)  # only unended ones
    if answer.returncode != 0 and "Invalid job id" not in answer.stderr:  # no id known: none
        raise UserError(
            f"{len(jobs)} incomplete job folder(s) were submitted to Slurm, and squeue did not "
            "answer whether those jobs still run, so none is deleted. Run the command again "
            "when Slurm answers, or without delete-incomplete."
        )
    states = slurm.parse_states(answer.stdout)
    return {folder: states[job] for folder, job in jobs.items() if job in states}


class SubmititLauncher(Launcher):
    """The ``submitit`` entry of DomainBed's launcher registry: the functions above."""

    name, options = "submitit", OPTIONS
    launch = staticmethod(submit)
    check = staticmethod(check)
    running_jobs = staticmethod(running_jobs)


submitit_launcher = SubmititLauncher()
