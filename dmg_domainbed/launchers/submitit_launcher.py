"""``submitit``: every DomainBed job one task of a Slurm job array, submitted through submitit.

Settings come from environment variables (``dmg-domainbed sweep`` sets them from a sweep
file's ``[launcher]`` table; variables already set in the environment win):

========================================  =====================================================
``DMG_SUBMITIT_CLUSTER``                  ``slurm`` (default), ``local`` (processes on this
                                          machine, all at once; for testing) or ``debug`` (in
                                          this process, one after the other)
``DMG_SUBMITIT_PARTITION``                Slurm partition (default: the cluster's default)
``DMG_SUBMITIT_GPUS``                     GPUs per job (default 1)
``DMG_SUBMITIT_CPUS``                     CPU cores per job (default 8: DomainBed's image
                                          datasets load data with 8 worker processes)
``DMG_SUBMITIT_MEM_GB``                   memory per job in GB (default 32)
``DMG_SUBMITIT_TIME_MIN``                 time limit per job in minutes (default 1440)
``DMG_SUBMITIT_ARRAY_PARALLELISM``        array tasks running at once (default 256)
``DMG_SUBMITIT_MAX_ARRAY_SIZE``           tasks per array; larger sweeps are split into
                                          several arrays (default 1000: Slurm's default
                                          ``MaxArraySize`` is 1001)
``DMG_SUBMITIT_FOLDER``                   submitit's files and the Slurm logs (default:
                                          ``.submitit`` inside the sweep's output_dir)
``DMG_SUBMITIT_WAIT``                     wait for the jobs, fail if one fails (default: no for
                                          slurm, yes for local and debug)
========================================  =====================================================

Any other ``sbatch`` option can be given through Slurm's own input variables
(``SBATCH_ACCOUNT``, ``SBATCH_QOS``, ``SBATCH_CONSTRAINT``, ...). Each job folder gets links
``submitit.out`` and ``submitit.err`` to that job's Slurm logs. DomainBed's own ``out.txt`` and
``err.txt`` are written there by DomainBed as usual. A failed submission raises
:class:`~dmg_domainbed.errors.UserError`, so DomainBed's sweep exits non-zero.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
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
    Option("gpus", "DMG_SUBMITIT_GPUS", int, 1, minimum=0, help="GPUs per job"),
    Option("cpus", "DMG_SUBMITIT_CPUS", int, 8, minimum=1, help="CPU cores per job"),
    Option("mem_gb", "DMG_SUBMITIT_MEM_GB", float, 32.0, minimum=0, help="memory per job, GB"),
    Option(
        "time_min",
        "DMG_SUBMITIT_TIME_MIN",
        int,
        1440,
        minimum=1,
        help="time limit per job, minutes",
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
LINK_NAMES = {"stdout": "submitit.out", "stderr": "submitit.err"}
JOB_NAME = "domainbed"


def run_command(command: str) -> None:
    """What each array task runs: one DomainBed command, as DomainBed's ``local`` launcher does."""
    subprocess.run(command, shell=True, check=True)


def settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The launcher's settings from ``environ``; :class:`UserError` if one is invalid."""
    values = read_options(OPTIONS, environ)
    if values["wait"] is None or values["cluster"] == "debug":
        values["wait"] = values["cluster"] != "slurm"
    return values


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


def check(environ: Mapping[str, str]) -> str:
    """Validate the settings in ``environ`` before any job exists; describe how jobs will run."""
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
    return describe(values)


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
        gpus_per_node=values["gpus"],
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
            raise UserError(
                f"submitting {len(commands)} job(s) failed at job {start + 1}{done}: "
                f"{type(error).__name__}: {error}"
            ) from error
        _link_logs(submitted, part)
        jobs.extend(submitted)
    return jobs


def _wait(jobs: Sequence[Any], commands: Sequence[str]) -> None:
    failures = []
    for job, command in zip(jobs, commands, strict=True):
        try:
            job.result()
        except Exception as error:
            last_line = str(error).strip().splitlines()[-1:] or [type(error).__name__]
            failures.append(
                f"\n  {command}\n    {last_line[0]}\n    logs: {job.paths.stdout}, "
                f"{job.paths.stderr}"
            )
    if failures:
        raise UserError(f"{len(failures)} of {len(jobs)} job(s) failed:{''.join(failures)}")


def submitit_launcher(commands: list[str]) -> None:
    """Submit ``commands`` (DomainBed shell commands) as Slurm array tasks through submitit."""
    values = settings()
    if not commands:
        print("submitit: nothing to submit", flush=True)
        return
    folder = Path(values["folder"]).resolve() if values["folder"] else default_folder(commands)
    executor = _make_executor(values, folder)
    jobs = _submit(executor, commands, values["max_array_size"])
    arrays = sorted({str(job.job_id).split("_")[0] for job in jobs})
    ids = ", ".join(arrays[:5]) + (" ..." if len(arrays) > 5 else "")
    print(
        f"submitit: submitted {len(jobs)} job(s) to {describe(values)}; job ids {ids}; "
        f"logs in {folder}",
        flush=True,
    )
    if values["wait"]:
        _wait(jobs, commands)
        print(f"submitit: all {len(jobs)} job(s) finished", flush=True)


submitit_launcher.OPTIONS = OPTIONS
submitit_launcher.check = check
