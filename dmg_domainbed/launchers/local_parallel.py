"""``local_parallel``: run several DomainBed jobs at once on one machine.

Like DomainBed's ``local`` launcher it runs the commands DomainBed's sweep gives it; unlike it,
up to N at the same time, several per GPU if asked, and DomainBed's train jobs start warm:

* ``DMG_LOCAL_PARALLEL_JOBS``: N. Default: GPUs x jobs per GPU if there are GPUs, else the
  number of CPU cores this process may use.
* ``DMG_LOCAL_PARALLEL_JOBS_PER_GPU`` (default 1): jobs that share one GPU. GPUs are the ones
  listed in ``CUDA_VISIBLE_DEVICES`` (or all that ``nvidia-smi`` lists); each job gets one of
  them as its own ``CUDA_VISIBLE_DEVICES``, round robin over job slots.
* Each job gets ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` = cores // N and
  ``DMG_DOMAINBED_LOADER_WORKERS`` = cores // N (data-loader workers per job, split over its
  training domains; see :func:`dmg_domainbed.integration.cap_loader_workers`), unless set.
* ``DMG_LOCAL_PARALLEL_WARM`` (default on): a command that is exactly DomainBed's
  ``python -m domainbed.scripts.train ...`` starts warm (:mod:`.warm`); every other command,
  and every command when it is off, runs as a new process (directly when it is plain words,
  else by ``sh -c``).

Every job leads a process group of its own and ends with the launcher (:mod:`.lifetime`);
what a job leaves running in its group is killed when it ends. A job whose command names
``--output_dir DIR`` writes what it prints to ``DIR/launcher.log``; other commands print to
the terminal. The launcher waits for every job and raises
:class:`~dmg_domainbed.errors.UserError` listing the failed ones, if any, with what to lower
when one ran out of memory. Ctrl-C (or any error here) stops the running jobs: SIGTERM to each
group, SIGKILL after :data:`STOP_GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.integration import LOADER_WORKERS_VARIABLE
from dmg_domainbed.launchers import warm
from dmg_domainbed.launchers.common import Option, output_dir_of, read_options
from dmg_domainbed.launchers.lifetime import die_with_parent, signal_group

OPTIONS = (
    Option(
        "jobs",
        "DMG_LOCAL_PARALLEL_JOBS",
        int,
        None,
        minimum=1,
        help="jobs run at the same time; default: GPUs x jobs_per_gpu, else the CPU cores",
    ),
    Option(
        "jobs_per_gpu",
        "DMG_LOCAL_PARALLEL_JOBS_PER_GPU",
        int,
        1,
        minimum=1,
        help="jobs sharing one GPU when jobs is not set",
    ),
    Option(
        "loader_workers",
        LOADER_WORKERS_VARIABLE,
        int,
        None,
        minimum=0,
        help="data-loader worker processes per job, split over its training domains; "
        "default: the job's share of the CPU cores",
    ),
    Option(
        "warm",
        "DMG_LOCAL_PARALLEL_WARM",
        bool,
        True,
        help="fork DomainBed's train jobs from a process that has imported them instead of "
        "starting new processes",
    ),
)
LOG_NAME = "launcher.log"
STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1  # how soon the end of a job started as a new process is noticed
TAIL_BYTES = 64 * 1024
# What torch and the CUDA libraries print when a GPU allocation fails, and what a DomainBed
# job prints when the kernel killed one of its data-loader workers.
GPU_OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
)
WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")


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
    """How the commands will run: N at a time, the GPU of each slot, each job's share of the
    cores (threads and data-loader workers), warm or as new processes."""

    jobs: int
    gpus: tuple[str, ...]
    threads: int
    loader_workers: int
    warm: bool
    jobs_set: bool = False  # jobs given explicitly, rather than from jobs_per_gpu

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Plan:
        values = read_options(OPTIONS, environ)
        gpus = tuple(visible_gpus(environ))
        jobs = values["jobs"] or len(gpus) * values["jobs_per_gpu"] or usable_cores()
        threads = max(1, usable_cores() // jobs)
        workers = values["loader_workers"]
        return cls(
            jobs, gpus, threads, threads if workers is None else workers, values["warm"],
            jobs_set=values["jobs"] is not None,
        )  # fmt: skip

    @property
    def jobs_per_gpu(self) -> int:
        return math.ceil(self.jobs / len(self.gpus)) if self.gpus else 0

    def job_environment(self, slot: int, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(variable, str(self.threads))
        env.setdefault(LOADER_WORKERS_VARIABLE, str(self.loader_workers))
        return env

    def memory_hint(self, code: int, log: Path | None) -> str | None:
        """What to lower when a job that ended with ``code`` ran out of memory, as the end of
        its log or its exit status says; None when nothing says it did."""
        output = read_tail(log)
        if GPU_OUT_OF_MEMORY.search(output):
            if self.jobs_per_gpu <= 1:
                return (
                    "out of GPU memory with a GPU to itself: lower the batch size "
                    "(hparam batch_size) or use a GPU with more memory"
                )
            if self.jobs_set:
                now = f"jobs (DMG_LOCAL_PARALLEL_JOBS, now {self.jobs} on {len(self.gpus)} GPU(s))"
            else:
                now = f"jobs_per_gpu (DMG_LOCAL_PARALLEL_JOBS_PER_GPU, now {self.jobs_per_gpu})"
            return f"out of GPU memory: lower {now}"
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) or WORKER_KILLED.search(output):
            return (
                "killed by SIGKILL, which is what the kernel's out-of-memory killer sends (see "
                f"dmesg); if the machine ran out of memory, lower jobs (DMG_LOCAL_PARALLEL_JOBS, "
                f"now {self.jobs}) or loader_workers ({LOADER_WORKERS_VARIABLE}, now "
                f"{self.loader_workers})"
            )
        return None

    def describe(self) -> str:
        if self.gpus:
            devices = f"GPUs {','.join(self.gpus)} ({self.jobs_per_gpu} per GPU)"
        else:
            devices = "CPU"
        start = "warm" if self.warm else "as new processes"
        return (
            f"{self.jobs} at a time on {devices}; per job {self.threads} thread(s) and "
            f"{self.loader_workers} data-loader worker(s); DomainBed's train jobs start {start}"
        )


def read_tail(path: Path | None, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of a log, as text ('' when there is none)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - size))
            return log.read().decode(errors="replace")
    except (OSError, TypeError):
        return ""


def describe_exit(code: int) -> str:
    """``exit N``, or ``killed by SIGNAME`` for a negative status (as Popen reports it)."""
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


@dataclass
class Outcome:
    """One finished job."""

    index: int
    command: str
    log: Path | None
    warm: bool
    returncode: int
    seconds: float


@dataclass
class _Job:
    """A running job: a :class:`subprocess.Popen`, or a warm job's
    :class:`multiprocessing.Process`."""

    index: int
    command: str
    slot: int
    log: Path | None
    process: subprocess.Popen | BaseProcess
    started: float = field(default_factory=time.monotonic)

    @property
    def warm(self) -> bool:
        return not isinstance(self.process, subprocess.Popen)

    def poll(self) -> int | None:
        """The exit status once the job has ended (its group's leftovers killed), else None."""
        code = self.process.exitcode if self.warm else self.process.poll()
        if code is not None:
            signal_group(self.process.pid, signal.SIGKILL)
        return code


class _Starter:
    """Starts each command warm or as a new process; says once why a warm one cannot be."""

    def __init__(self, plan: Plan, say: Callable[[str], None], warm_module: str) -> None:
        self.plan, self.say, self.warm_module = plan, say, warm_module
        self.refusals: dict[str, str | None] = {}

    def start(self, index: int, command: str, slot: int) -> _Job:
        output_dir = output_dir_of(command)
        log = None
        if output_dir is not None:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            log = Path(output_dir) / LOG_NAME
        env = self.plan.job_environment(slot, os.environ)
        found = warm.module_arguments(command, self.warm_module) if self.plan.warm else None
        if found is not None and self._may_start_warm(found[0], env):
            return _Job(index, command, slot, log, warm.start(self.warm_module, found[1], env, log))
        words = _plain_words(command, env.get("PATH"))
        with open(log, "a") if log else contextlib.nullcontext() as stream:
            process = subprocess.Popen(
                words or command,
                shell=words is None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stream,
                stderr=subprocess.STDOUT if stream else None,
                start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
        return _Job(index, command, slot, log, process)

    def _may_start_warm(self, program: str, env: Mapping[str, str]) -> bool:
        if program not in self.refusals:
            self.refusals[program] = warm.refusal(program, env)
            if self.refusals[program] is not None:
                self.say(
                    f"local_parallel: {self.warm_module} jobs start as new processes: "
                    f"{self.refusals[program]}"
                )
        return self.refusals[program] is None


def _plain_words(command: str, path: str | None) -> list[str] | None:
    """The command's words if a shell would only split it into them and run a program."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or shlex.join(words) != command or shutil.which(words[0], path=path) is None:
        return None
    return words


def _wait(running: list[_Job], seconds: float) -> None:
    """Return when a warm job has ended (its sentinel is ready), or after ``seconds``."""
    wait([job.process.sentinel for job in running if job.warm], seconds)


def run_commands(
    commands: list[str],
    plan: Plan,
    say: Callable[[str], None] = print,
    warm_module: str = warm.TRAIN_MODULE,
) -> list[Outcome]:
    """Run ``commands`` as ``plan`` says and wait for all of them; their outcomes in order.

    The commands ``python -m WARM_MODULE ...`` start warm when the plan says so. Any exception
    here (Ctrl-C included) stops the running jobs before it propagates.
    """
    starter = _Starter(plan, say, warm_module)
    pending = deque(enumerate(commands))
    free_slots = deque(range(plan.jobs))
    running: list[_Job] = []
    outcomes: list[Outcome] = []
    try:
        while pending or running:
            while pending and free_slots:
                index, command = pending.popleft()
                running.append(starter.start(index, command, free_slots.popleft()))
            _wait(running, POLL_SECONDS)
            for job in list(running):
                code = job.poll()
                if code is None:
                    continue
                running.remove(job)
                free_slots.append(job.slot)
                seconds = time.monotonic() - job.started
                outcomes.append(Outcome(job.index, job.command, job.log, job.warm, code, seconds))
                say(_progress_line(outcomes[-1], len(outcomes), len(commands), plan))
    except BaseException:
        _stop(running)
        raise
    return sorted(outcomes, key=lambda outcome: outcome.index)


def _stop(running: list[_Job]) -> None:
    """SIGTERM to every job's group, SIGKILL to those still running after the grace period."""
    for job in running:
        signal_group(job.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and any(job.poll() is None for job in running):
        _wait(running, POLL_SECONDS)
    for job in running:
        if job.poll() is None:
            signal_group(job.process.pid, signal.SIGKILL)
            (job.process.join if job.warm else job.process.wait)()


def _progress_line(outcome: Outcome, finished: int, total: int, plan: Plan) -> str:
    how = f"{'warm' if outcome.warm else 'new process'}, {outcome.seconds:.1f} s"
    if outcome.returncode == 0:
        status = f"ok ({how})"
    else:
        status = f"FAILED ({describe_exit(outcome.returncode)}, {how})"
        hint = plan.memory_hint(outcome.returncode, outcome.log)
        if hint:
            status += f": {hint}"
    where = outcome.log.parent if outcome.log else outcome.command
    return f"local_parallel: [{finished}/{total}] {status}: {where}"


def failure_report(outcomes: list[Outcome], plan: Plan) -> str | None:
    """The message for the jobs that failed, or None if none did."""
    failed = [outcome for outcome in outcomes if outcome.returncode != 0]
    if not failed:
        return None
    details = ""
    for outcome in failed:
        details += f"\n  {describe_exit(outcome.returncode)}: {outcome.command}"
        hint = plan.memory_hint(outcome.returncode, outcome.log)
        if hint:
            details += f"\n    {hint}"
        if outcome.log:
            tail = read_tail(outcome.log).splitlines()[-5:]
            details += f"\n    log: {outcome.log}" + "".join(f"\n      {line}" for line in tail)
    return f"{len(failed)} of {len(outcomes)} job(s) failed:{details}"


def local_parallel_launcher(commands: list[str]) -> None:
    """Run ``commands`` (shell strings) N at a time on this machine and wait for all of them.

    Raises :class:`UserError` naming every command that failed, after all finished.
    """
    plan = Plan.from_environment()
    print(f"local_parallel: {len(commands)} job(s), {plan.describe()}", flush=True)
    outcomes = run_commands(commands, plan, say=lambda line: print(line, flush=True))
    report = failure_report(outcomes, plan)
    if report:
        raise UserError(report)


def check(environ: Mapping[str, str]) -> str:
    """Validate the settings in ``environ`` before any job exists; describe how jobs will run."""
    return Plan.from_environment(environ).describe()


local_parallel_launcher.OPTIONS = OPTIONS
local_parallel_launcher.check = check
