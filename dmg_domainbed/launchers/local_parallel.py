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
  ``python -m domainbed.scripts.train ...`` is forked from this process, which imports
  torch and DomainBed once (:mod:`.warm`); every other command, and every command when it is
  off, runs as a new process (a command with no shell syntax is executed directly, others by
  ``sh -c``).

Every job runs in a process group of its own that ends with this process (:mod:`.lifetime`).
A job whose command names ``--output_dir DIR`` writes what it prints to ``DIR/launcher.log``;
other commands print to the terminal. The launcher waits for every job and raises
:class:`~dmg_domainbed.errors.UserError` listing the failed ones, if any, with what to lower
when one ran out of memory. Ctrl-C (or any error here) stops the running jobs.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.errors import UserError
from dmg_domainbed.integration import LOADER_WORKERS_VARIABLE
from dmg_domainbed.launchers import job_status, processes
from dmg_domainbed.launchers.common import Option, output_dir_of, read_options
from dmg_domainbed.launchers.lifetime import parent_death_hook
from dmg_domainbed.launchers.warm import WarmStart

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
        help="fork DomainBed's train jobs from the launcher instead of starting new processes",
    ),
)
LOG_NAME = "launcher.log"
STOP_GRACE_SECONDS = 10.0
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
    """How the commands will run: N at a time, the GPU of each slot, each job's share of the
    cores (threads and data-loader workers), warm or fresh."""

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
        cores = usable_cores()
        jobs = values["jobs"] or len(gpus) * values["jobs_per_gpu"] or cores
        threads = max(1, cores // jobs)
        loader_workers = values["loader_workers"]
        return cls(
            jobs=jobs,
            gpus=gpus,
            threads=threads,
            loader_workers=threads if loader_workers is None else loader_workers,
            warm=values["warm"],
            jobs_set=values["jobs"] is not None,
        )

    @property
    def jobs_per_gpu(self) -> int:
        return math.ceil(self.jobs / len(self.gpus)) if self.gpus else 0

    def job_environment(self, slot: int, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        for variable in _THREAD_VARIABLES:
            env.setdefault(variable, str(self.threads))
        env.setdefault(LOADER_WORKERS_VARIABLE, str(self.loader_workers))
        return env

    def gpu_setting(self) -> str | None:
        """The setting that puts several jobs on one GPU, with its value; None if none does."""
        if self.jobs_per_gpu <= 1:
            return None
        if self.jobs_set:
            return f"jobs (DMG_LOCAL_PARALLEL_JOBS, now {self.jobs} on {len(self.gpus)} GPU(s))"
        return f"jobs_per_gpu (DMG_LOCAL_PARALLEL_JOBS_PER_GPU, now {self.jobs_per_gpu})"

    def host_setting(self) -> str:
        return (
            f"jobs (DMG_LOCAL_PARALLEL_JOBS, now {self.jobs}) or loader_workers "
            f"({LOADER_WORKERS_VARIABLE}, now {self.loader_workers})"
        )

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
class _Running:
    index: int
    command: str
    slot: int
    log: Path | None
    warm: bool
    started: float
    process: processes.JobProcess


def _plain_words(command: str, path: str | None) -> list[str] | None:
    """The command's words if a shell would only split it into them and run a program."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or shlex.join(words) != command or shutil.which(words[0], path=path) is None:
        return None
    return words


def start_fresh(command: str, env: Mapping[str, str], log: Path | None) -> processes.FreshProcess:
    """Start ``command`` as a new process in a session of its own, tied to this process."""
    words = _plain_words(command, env.get("PATH"))
    stream = open(log, "a") if log is not None else None
    try:
        popen = subprocess.Popen(
            words or command,
            shell=words is None,
            env=dict(env),
            stdout=stream,
            stderr=subprocess.STDOUT if stream else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=parent_death_hook(),
        )
    finally:
        if stream is not None:
            stream.close()
    return processes.FreshProcess(popen)


class _Starter:
    """Starts each command warm or fresh, and says once why train jobs do not start warm."""

    def __init__(self, plan: Plan, say: Callable[[str], None], warm_start: WarmStart) -> None:
        self.plan = plan
        self.say = say
        self.warm_start = warm_start
        self._explained = False

    def start(self, index: int, command: str, slot: int) -> _Running:
        output_dir = output_dir_of(command)
        log = None
        if output_dir is not None:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            log = Path(output_dir) / LOG_NAME
        env = self.plan.job_environment(slot, os.environ)
        train = self.warm_start.arguments(command) if self.plan.warm else None
        refusal = None if train is None else self.warm_start.refusal(train[0], env)
        if refusal is not None and not self._explained:
            module = self.warm_start.module
            self.say(f"local_parallel: {module} jobs start as new processes: {refusal}")
            self._explained = True
        started = time.monotonic()
        if train is not None and refusal is None:
            process = self.warm_start.fork(train[1], env, log)
        else:
            process = start_fresh(command, env, log)
        warm = train is not None and refusal is None
        return _Running(index, command, slot, log, warm, started, process)


def run_commands(
    commands: list[str],
    plan: Plan,
    say: Callable[[str], None] = print,
    warm_start: WarmStart | None = None,
) -> list[Outcome]:
    """Run ``commands`` as ``plan`` says and wait for all of them; their outcomes in order.

    ``warm_start`` forks the commands of its module (default: DomainBed's train). Any
    exception here (Ctrl-C included) stops the running jobs before it propagates.
    """
    starter = _Starter(plan, say, warm_start or WarmStart())
    pending = deque(enumerate(commands))
    free_slots = deque(range(plan.jobs))
    running: list[_Running] = []
    outcomes: list[Outcome] = []
    try:
        while pending or running:
            while pending and free_slots:
                index, command = pending.popleft()
                running.append(starter.start(index, command, free_slots.popleft()))
            processes.wait_for_an_end([job.process for job in running], timeout=1.0)
            for job in [j for j in running if j.process.poll() is not None]:
                running.remove(job)
                free_slots.append(job.slot)
                outcome = Outcome(
                    job.index,
                    job.command,
                    job.log,
                    job.warm,
                    job.process.returncode,
                    time.monotonic() - job.started,
                )
                outcomes.append(outcome)
                say(_progress_line(outcome, len(outcomes), len(commands), plan))
    except BaseException:
        processes.stop([job.process for job in running], STOP_GRACE_SECONDS)
        raise
    return sorted(outcomes, key=lambda outcome: outcome.index)


def _progress_line(outcome: Outcome, finished: int, total: int, plan: Plan) -> str:
    how = f"{'warm' if outcome.warm else 'new process'}, {outcome.seconds:.1f} s"
    if outcome.returncode == 0:
        status = f"ok ({how})"
    else:
        status = f"FAILED ({job_status.describe_exit(outcome.returncode)}, {how})"
        hint = _memory_hint(outcome, plan)
        if hint:
            status += f": {hint}"
    where = outcome.log.parent if outcome.log else outcome.command
    return f"local_parallel: [{finished}/{total}] {status}: {where}"


def _memory_hint(outcome: Outcome, plan: Plan) -> str | None:
    return job_status.memory_hint(
        outcome.returncode,
        job_status.read_tail(outcome.log),
        plan.gpu_setting(),
        plan.host_setting(),
    )


def _tail(path: Path | None, lines: int = 5) -> str:
    text = job_status.read_tail(path).splitlines()[-lines:]
    return "".join(f"\n      {line}" for line in text)


def failure_report(outcomes: list[Outcome], plan: Plan) -> str | None:
    """The message for the jobs that failed, or None if none did."""
    failed = [outcome for outcome in outcomes if outcome.returncode != 0]
    if not failed:
        return None
    details = ""
    for outcome in failed:
        details += f"\n  {job_status.describe_exit(outcome.returncode)}: {outcome.command}"
        hint = _memory_hint(outcome, plan)
        if hint:
            details += f"\n    {hint}"
        if outcome.log:
            details += f"\n    log: {outcome.log}{_tail(outcome.log)}"
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
