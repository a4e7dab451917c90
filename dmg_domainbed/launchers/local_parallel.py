"""``local_parallel``: DomainBed's jobs N at a time on this machine, several per GPU if asked
(docs/sweeps.md tells the whole behaviour).

Each job sees one GPU, gets its share of the cores as threads and data-loader workers, writes
what it prints to ``DIR/launcher.log`` when its command names ``--output_dir DIR``, and leads a
process group of its own: Ctrl-C reaches the launcher alone, which stops every group (SIGTERM,
SIGKILL after :data:`STOP_GRACE_SECONDS`); a job dies with the launcher, however that dies
(Linux's ``PR_SET_PDEATHSIG`` for new processes, which no library offers). Failures are reported
once every job has ended, with what to lower when one ran out of memory.

DomainBed's train commands start warm: children of multiprocessing's fork server, which has
imported the train module and the launcher's ``__main__`` (a program that runs the launcher
needs the ``if __name__ == "__main__":`` guard), then run ``train.py`` as ``__main__`` as a new
process would (:func:`_run_warm`). Other commands run as new processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import math
import multiprocessing
import os
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import psutil

from dmg_domainbed.cores import usable_cores
from dmg_domainbed.errors import UserError
from dmg_domainbed.integration import LOADER_WORKERS_VARIABLE
from dmg_domainbed.launchers.common import (
    Failure,
    Launcher,
    Option,
    failure_report,
    folder_deleted,
    output_dir_of,
    read_options,
    signal_group,
    visible_gpus,
)
from dmg_domainbed.runs import folder_divergence
from dmg_domainbed.shortlist import shortlist

_JOBS, _PER_GPU = "DMG_LOCAL_PARALLEL_JOBS", "DMG_LOCAL_PARALLEL_JOBS_PER_GPU"
_HELP = {
    "jobs": "jobs run at the same time; default: GPUs x jobs_per_gpu, else the CPU cores",
    "jobs_per_gpu": "jobs sharing one GPU when jobs is not set",
    "gpus": "run the jobs on this machine's GPUs; false: on CPU cores only, every GPU hidden "
    "from them (small models, like the demo's, run faster on cores than queued on a GPU)",
    "workers": "data-loader worker processes per job, split over its training domains; default: "
    "the job's share of the CPU cores",
    "warm": "fork DomainBed's train jobs from a process that has imported them, not new processes",
}
OPTIONS = (
    Option("jobs", _JOBS, int, None, _HELP["jobs"], minimum=1),
    Option("jobs_per_gpu", _PER_GPU, int, 1, _HELP["jobs_per_gpu"], minimum=1),
    Option("gpus", "DMG_LOCAL_PARALLEL_GPUS", bool, True, _HELP["gpus"]),
    Option("loader_workers", LOADER_WORKERS_VARIABLE, int, None, _HELP["workers"], minimum=0),
    Option("warm", "DMG_LOCAL_PARALLEL_WARM", bool, True, _HELP["warm"]),
)
TRAIN_MODULE, LOG_NAME = "domainbed.scripts.train", "launcher.log"
STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1  # how soon the end of a job started as a new process is noticed
# What torch and CUDA print when a GPU allocation fails; DomainBed when a loader worker is killed.
GPU_OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
)
WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")
# Looked up here: a new process calls it between fork and exec, where loading is unsafe.
_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
_SERVER = multiprocessing.get_context("forkserver")
_server: dict[str, dict[str, str]] = {}  # "environ": the fork server's, once it is started
# Variables (and prefixes) the fork server's imports read once and keep, so a forked job keeps
# the server's values: huggingface_hub's cache and offline mode (timm imports it).
READ_AT_IMPORT = ("HF_", "HUGGINGFACE_", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class Plan:
    """How the commands run: N at a time, each slot's GPU, each job's share of the cores."""

    jobs: int
    gpus: tuple[str, ...]
    threads: int
    loader_workers: int
    warm: bool
    jobs_set: bool = False  # jobs given explicitly, rather than from jobs_per_gpu
    gpus_hidden: bool = False  # the jobs run on CPU cores even where GPUs are visible
    environ: Mapping[str, str] = field(default_factory=os.environ.copy, repr=False, compare=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Plan:
        values = read_options(OPTIONS, environ)
        gpus = tuple(visible_gpus(environ)) if values["gpus"] else ()
        jobs = values["jobs"] or len(gpus) * values["jobs_per_gpu"] or usable_cores()
        threads = max(1, usable_cores() // jobs)
        workers = threads if values["loader_workers"] is None else values["loader_workers"]
        jobs_set, hidden = values["jobs"] is not None, not values["gpus"]
        return cls(jobs, gpus, threads, workers, values["warm"], jobs_set, hidden, dict(environ))

    @property
    def jobs_per_gpu(self) -> int:
        return math.ceil(self.jobs / len(self.gpus)) if self.gpus else 0

    def job_environment(self, slot: int) -> dict[str, str]:
        env = dict(self.environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        elif self.gpus_hidden:
            env["CUDA_VISIBLE_DEVICES"] = ""  # CUDA then sees no device
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(variable, str(self.threads))
        env.setdefault(LOADER_WORKERS_VARIABLE, str(self.loader_workers))
        return env

    def memory_hint(self, code: int, output: str) -> str | None:
        """What to lower if a job that ended with ``code`` and ``output`` ran out of memory."""
        if GPU_OUT_OF_MEMORY.search(output):
            if self.jobs_per_gpu <= 1:
                return (
                    "out of GPU memory with a GPU to itself: lower the batch size "
                    "(hparam batch_size) or use a GPU with more memory"
                )
            if self.jobs_set:
                now = f"{self.jobs} on {len(self.gpus)} GPU(s)"
                return f"out of GPU memory: lower jobs ({_JOBS}, now {now})"
            return f"out of GPU memory: lower jobs_per_gpu ({_PER_GPU}, now {self.jobs_per_gpu})"
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) or WORKER_KILLED.search(output):
            return (
                "killed by SIGKILL, which is what the kernel's out-of-memory killer sends (see "
                f"dmesg); if the machine ran out of memory, lower jobs ({_JOBS}, now {self.jobs}) "
                f"or loader_workers ({LOADER_WORKERS_VARIABLE}, now {self.loader_workers})"
            )
        return None

    def describe(self) -> str:
        devices = (
            f"GPUs {','.join(self.gpus)} ({self.jobs_per_gpu} per GPU)" if self.gpus else "CPU"
        ) + (" (GPUs hidden from the jobs)" if self.gpus_hidden else "")
        return (
            f"{self.jobs} at a time on {devices}; per job {self.threads} thread(s) and "
            f"{self.loader_workers} data-loader worker(s); DomainBed's train jobs start "
            + ("warm" if self.warm else "as new processes")
        )


# A word a shell passes on as written but for its quotes (as ``shlex.quote`` writes them).
_LITERAL_WORD = r"""(?:[\w@%+=:,./-]|'[^']*'|"'")+"""
_PLAIN_COMMAND = re.compile(rf"[ \t]*{_LITERAL_WORD}(?:[ \t]+{_LITERAL_WORD})*[ \t]*", re.ASCII)


def plain_words(command: str) -> list[str] | None:
    """The words of ``command`` if a shell reads it as plain words and nothing else, else None.
    Spaces may repeat: DomainBed's sweep writes two after a flag without a value."""
    return shlex.split(command) if _PLAIN_COMMAND.fullmatch(command) else None


def module_arguments(command: str, module: str = TRAIN_MODULE) -> list[str] | None:
    """The arguments if ``command`` is ``python -m MODULE ARGUMENTS`` in plain words, else None."""
    words = plain_words(command) or []
    return words[3:] if words[:3] == ["python", "-m", module] else None


def warm_refusal(environ: Mapping[str, str]) -> str | None:
    """None if jobs with ``environ`` may run warm, else why not: the ``python`` on its PATH must
    be this interpreter in the same folder (a virtual environment's links to another), and
    :data:`READ_AT_IMPORT` must have the fork server's values."""
    if not sys.platform.startswith("linux"):
        return "warm jobs are forked, which this package supports on Linux only"
    found, here = shutil.which("python", path=environ.get("PATH")), sys.executable
    if not (found and Path(found).parent == Path(here).parent and os.path.samefile(found, here)):
        return (
            f"`python` on PATH ({found or 'none'}) is not this process's interpreter {here}; "
            f"put {os.path.dirname(here)} first on PATH to start jobs warm"
        )
    server = _server.get("environ", os.environ)
    names = {name for name in set(environ) | set(server) if name.startswith(READ_AT_IMPORT)}
    differ = sorted(name for name in names if environ.get(name) != server.get(name))
    if differ:
        return (
            f"the jobs' environment differs from the fork server's in {shortlist(differ)}"
            ", which the modules the server imported read at import; run the launcher "
            "in the jobs' environment to start them warm"
        )
    return None


def start_warm(
    module: str, arguments: Sequence[str], environ: Mapping[str, str], log: Path | None
) -> multiprocessing.Process:
    """Start ``python -m MODULE ARGUMENTS`` as a child of the fork server (started if need be,
    with this process's environment)."""
    _server.setdefault("environ", dict(os.environ))
    # read when the server starts; the last one waits for threads the others started
    _SERVER.set_forkserver_preload(["__main__", module, "dmg_domainbed.launchers.fork_server"])
    job = _SERVER.Process(target=_run_warm, args=(module, list(arguments), dict(environ), log))
    job.start()
    return job


def check_cuda_untouched(server_initialised_cuda: bool) -> None:
    """:class:`UserError` if the fork server had initialised CUDA (:mod:`.fork_server`): a warm
    job's ``CUDA_VISIBLE_DEVICES``, set after the fork, would be ignored."""
    if server_initialised_cuda:
        raise UserError(
            "local_parallel's fork server initialised CUDA before forking a warm job: the "
            "job's GPU (CUDA_VISIBLE_DEVICES, set after the fork) would be ignored. Something "
            "the server imports (the launcher's __main__ or DomainBed's train module) uses CUDA "
            'at import; move that use under `if __name__ == "__main__":`, or start the jobs '
            "as new processes: DMG_LOCAL_PARALLEL_WARM=false (warm = false in [launcher])."
        )


def _run_warm(module: str, arguments: list[str], environ: dict[str, str], log: Path | None) -> None:
    def end_with_launcher() -> None:
        wait([multiprocessing.parent_process().sentinel])  # closes when the launcher is gone
        os.killpg(0, signal.SIGTERM)

    server = sys.modules.get("dmg_domainbed.launchers.fork_server")
    check_cuda_untouched(getattr(server, "cuda_initialised", False))
    gc.freeze()  # the server's objects stay out of the job's collections, and their pages shared
    os.setsid()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # as a new interpreter has it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=end_with_launcher, name="launcher-watch", daemon=True).start()
    if log is not None:
        with open(log, "a") as output:
            for stream in (1, 2):
                os.dup2(output.fileno(), stream)
    os.environ.clear()
    os.environ.update(environ)
    # no default start method, as in a new interpreter: DomainBed's loader workers then start by
    # the platform's default, not through a second fork server importing everything again
    multiprocessing.set_start_method(None, force=True)
    threads = environ.get("OMP_NUM_THREADS", "").strip()
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdigit() and int(threads) > 0:  # as a new process sets them
        physical = psutil.cpu_count(logical=False) if torch.backends.mkl.is_available() else None
        torch.set_num_threads(min(int(threads), physical or int(threads)))  # MKL's: the cores
    if "domainbed.datasets" in sys.modules:
        from dmg_domainbed.integration import cap_loader_workers

        cap_loader_workers(sys.modules["domainbed.datasets"])
    sys.argv = [module, *arguments]  # runpy puts the module's file name first
    sys.modules.pop(module, None)  # imported by the server: run afresh as __main__
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Exception:  # ended as a new interpreter ends: sys.excepthook, then status 1
        sys.excepthook(*sys.exc_info())
        sys.exit(1)


@dataclass
class Outcome:
    """A job; ``returncode`` is None while it runs; a failed one keeps its log's end and a hint."""

    command: str
    log: Path | None
    slot: int
    process: subprocess.Popen | BaseProcess = field(repr=False)  # multiprocessing's: warm
    started: float = field(default_factory=time.monotonic)
    returncode: int | None = None
    seconds: float = 0.0
    hint: str | None = None
    output: str = ""

    @property
    def warm(self) -> bool:
        return isinstance(self.process, BaseProcess)

    @property
    def exit(self) -> str:
        """``exit N``, or ``killed by SIGNAME`` for a negative status."""
        code, names = self.returncode, {int(s): s.name for s in signal.Signals}
        return f"exit {code}" if code >= 0 else f"killed by {names.get(-code, f'signal {-code}')}"

    def ended(self, plan: Plan) -> bool:
        """Whether the job has ended (then what it left running in its group is killed)."""
        if self.returncode is None:
            self.returncode = self.process.exitcode if self.warm else self.process.poll()
            if self.returncode is None:
                return False
            self.seconds = time.monotonic() - self.started
            signal_group(self.process.pid)
            if self.returncode:  # its log's last 64 kB, if it has one
                with contextlib.suppress(OSError, TypeError), open(self.log, "rb") as log:
                    log.seek(max(0, log.seek(0, os.SEEK_END) - 65536))
                    self.output = log.read().decode(errors="replace")
                self.hint = folder_deleted(self.command) or plan.memory_hint(
                    self.returncode, self.output
                )
        return True


def _start(command: str, slot: int, plan: Plan, warm_module: str | None) -> Outcome:
    output_dir = output_dir_of(command)
    log = Path(output_dir) / LOG_NAME if output_dir else None
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    env = plan.job_environment(slot)
    arguments = module_arguments(command, warm_module) if warm_module else None
    if arguments is not None:
        return Outcome(command, log, slot, start_warm(warm_module, arguments, env, log))
    words = plain_words(command)
    plain = words and shutil.which(words[0], path=env.get("PATH"))
    with open(log, "a") if log else contextlib.nullcontext() as stream:
        process = subprocess.Popen(
            words if plain else command,
            shell=not plain,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stream,
            stderr=subprocess.STDOUT if stream else None,
            start_new_session=True,
            preexec_fn=functools.partial(_die_with_parent, os.getpid()),
        )
    return Outcome(command, log, slot, process)


def _die_with_parent(parent_pid: int) -> None:
    """SIGTERM for this new process when the launcher dies (at once if it is already gone)."""
    if _prctl is not None:
        _prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)


def run_commands(
    commands: list[str],
    plan: Plan,
    say: Callable[[str], None] = print,
    warm_module: str = TRAIN_MODULE,
) -> list[Outcome]:
    """Run ``commands`` as ``plan`` says, ``python -m WARM_MODULE ...`` warm where it may (else
    ``say`` hears why not), and wait for all; their outcomes in order. Any exception here
    (Ctrl-C included) stops the running jobs before it propagates."""
    module = warm_module if plan.warm else None
    if module and (refusal := warm_refusal(plan.environ)):
        say(f"local_parallel: {module} jobs start as new processes: {refusal}")
        module = None
    cold = [c for c in commands if module and module in c and module_arguments(c, module) is None]
    if cold:
        say(
            f"local_parallel: {len(cold)} command(s) naming {module} start as new processes: "
            f"only `python -m {module} ARGUMENTS` in plain words (quoted as shlex.quote "
            f"quotes, no other shell syntax) starts warm; the first: {cold[0]}"
        )
    pending, free_slots = deque(commands), deque(range(plan.jobs))
    started: list[Outcome] = []  # in the commands' order
    running: list[Outcome] = []
    try:
        while pending or running:
            while pending and free_slots:
                started.append(_start(pending.popleft(), free_slots.popleft(), plan, module))
                running.append(started[-1])
            wait([job.process.sentinel for job in running if job.warm], POLL_SECONDS)
            for job in [job for job in running if job.ended(plan)]:
                running.remove(job)
                free_slots.append(job.slot)
                say(_progress_line(job, len(started) - len(running), len(commands)))
    finally:  # what still runs (after an exception, Ctrl-C included) is stopped
        for job in running:
            signal_group(job.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline and not all(job.ended(plan) for job in running):
            time.sleep(POLL_SECONDS)
        for job in running:
            signal_group(job.process.pid)
            (job.process.join if job.warm else job.process.wait)()
    return started


def _progress_line(job: Outcome, finished: int, total: int) -> str:
    how = f"{'warm' if job.warm else 'new process'}, {job.seconds:.1f} s"
    status = f"FAILED ({job.exit}, {how})" if job.returncode else f"ok ({how})"
    if not job.returncode and job.log and (loss := folder_divergence(job.log.parent)):
        status = f"DIVERGED ({loss}; {how})"
    status += f": {job.hint}" if job.hint else ""
    where = job.log.parent if job.log else job.command
    return f"local_parallel: [{finished}/{total}] {status}: {where}"


def failures(outcomes: list[Outcome]) -> list[Failure]:
    """The jobs of ``outcomes`` that failed, for :func:`.common.failure_report`."""
    return [
        Failure(job.exit, job.command, "", job.hint, job.log, tuple(job.output.splitlines()[-5:]))
        for job in outcomes
        if job.returncode != 0
    ]


class LocalParallel(Launcher):
    """The ``local_parallel`` entry of DomainBed's launcher registry."""

    name = "local_parallel"
    options = OPTIONS

    def launch(self, commands: list[str], environ: Mapping[str, str]) -> None:
        """Run ``commands`` as ``environ`` says, with it as their environment; once all ended,
        :class:`UserError` naming each that failed."""
        plan = Plan.from_environment(environ)
        print(f"local_parallel: {len(commands)} job(s), {plan.describe()}", flush=True)
        outcomes = run_commands(commands, plan, functools.partial(print, flush=True))
        report = failure_report(failures(outcomes), len(outcomes))
        if report:
            raise UserError(report)

    def check(self, environ: Mapping[str, str]) -> str:
        return Plan.from_environment(environ).describe()


local_parallel_launcher = LocalParallel()
