"""``local_parallel``: run several DomainBed jobs at once on one machine.

Like DomainBed's ``local`` launcher, each command is a shell command string run with the
``python`` found on PATH; unlike it, up to N run at the same time:

* ``DMG_LOCAL_PARALLEL_JOBS``: N. Default: the number of visible GPUs if there are any, else
  the number of CPU cores this process may use.
* GPUs are the ones listed in ``CUDA_VISIBLE_DEVICES`` (or all that ``nvidia-smi`` lists);
  each job gets one of them as its own ``CUDA_VISIBLE_DEVICES``, round robin over job slots.
* ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` are set to cores // N for each job (unless already
  set), so N jobs do not oversubscribe the cores.

A job whose command names ``--output_dir DIR`` writes what it prints to ``DIR/launcher.log``;
other commands print to the terminal. The launcher waits for every job and raises
:class:`~dmg_domainbed.errors.UserError` listing the failed ones, if any.
Ctrl-C stops the running jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import Option, output_dir_of, read_options

OPTIONS = (
    Option(
        "jobs",
        "DMG_LOCAL_PARALLEL_JOBS",
        int,
        None,
        minimum=1,
        help="jobs run at the same time; default: the number of GPUs, else of CPU cores",
    ),
)
LOG_NAME = "launcher.log"
_POLL_SECONDS = 0.2
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def visible_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """GPU ids jobs may use: ``CUDA_VISIBLE_DEVICES`` when set, else those nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def usable_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Plan:
    """How the commands will run: N at a time, the GPU of each slot, threads per job."""

    jobs: int
    gpus: tuple[str, ...]
    threads: int

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Plan:
        gpus = tuple(visible_gpus(environ))
        cores = usable_cores()
        jobs = read_options(OPTIONS, environ)["jobs"] or len(gpus) or cores
        return cls(jobs=jobs, gpus=gpus, threads=max(1, cores // jobs))

    def job_environment(self, slot: int, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        for variable in _THREAD_VARIABLES:
            env.setdefault(variable, str(self.threads))
        return env

    def describe(self) -> str:
        devices = f"GPUs {','.join(self.gpus)}" if self.gpus else "CPU"
        return f"{self.jobs} at a time on {devices}, {self.threads} thread(s) per job"


@dataclass
class _Running:
    index: int
    command: str
    slot: int
    process: subprocess.Popen
    log: Path | None


def _start(index: int, command: str, slot: int, plan: Plan, logs: ExitStack) -> _Running:
    output_dir = output_dir_of(command)
    log_path, stream = None, None
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(output_dir) / LOG_NAME
        stream = logs.enter_context(open(log_path, "a"))
    process = subprocess.Popen(
        command,
        shell=True,
        env=plan.job_environment(slot, os.environ),
        stdout=stream,
        stderr=subprocess.STDOUT if stream else None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return _Running(index, command, slot, process, log_path)


def _stop(running: list[_Running]) -> None:
    for job in running:
        try:
            os.killpg(job.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for job in running:
        job.process.wait()


def _tail(path: Path | None, lines: int = 5) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "".join(f"\n      {line}" for line in text)


def local_parallel_launcher(commands: list[str]) -> None:
    """Run ``commands`` (shell strings) N at a time on this machine and wait for all of them.

    Raises :class:`UserError` naming every command that exited non-zero, after all finished.
    """
    plan = Plan.from_environment()
    total = len(commands)
    print(f"local_parallel: {total} job(s), {plan.describe()}", flush=True)
    pending = list(enumerate(commands))
    free_slots = list(range(plan.jobs))
    running: list[_Running] = []
    failures: list[tuple[_Running, int]] = []
    finished = 0
    with ExitStack() as logs:
        try:
            while pending or running:
                while pending and free_slots:
                    index, command = pending.pop(0)
                    running.append(_start(index, command, free_slots.pop(0), plan, logs))
                time.sleep(_POLL_SECONDS)
                for job in [j for j in running if j.process.poll() is not None]:
                    running.remove(job)
                    free_slots.append(job.slot)
                    finished += 1
                    code = job.process.returncode
                    where = job.log.parent if job.log else job.command
                    status = "ok" if code == 0 else f"FAILED (exit {code})"
                    print(f"local_parallel: [{finished}/{total}] {status}: {where}", flush=True)
                    if code != 0:
                        failures.append((job, code))
        except BaseException:
            _stop(running)
            raise
    if failures:
        details = "".join(
            f"\n  exit {code}: {job.command}"
            + (f"\n    log: {job.log}{_tail(job.log)}" if job.log else "")
            for job, code in sorted(failures, key=lambda f: f[0].index)
        )
        raise UserError(f"{len(failures)} of {total} job(s) failed:{details}")


def check(environ: Mapping[str, str]) -> str:
    """Validate the settings in ``environ`` before any job exists; describe how jobs will run."""
    return Plan.from_environment(environ).describe()


local_parallel_launcher.OPTIONS = OPTIONS
local_parallel_launcher.check = check
