"""Warm start: DomainBed's train jobs forked from a process that has already imported them.

A fresh ``python -m domainbed.scripts.train`` spends seconds importing torch, torchvision,
wilds and DomainBed before its first step; on small datasets that is most of a job. The
launcher runs inside DomainBed's sweep process, which has imported nearly all of it. Here that
process imports the rest of what ``train.py`` imports, once, and then forks one child per job.
The child makes itself what a new process would be and runs DomainBed's own, unmodified
``train.py`` as ``__main__`` (:mod:`runpy`) with the job's arguments:

* its own session and process group, tied to the launcher (:mod:`.lifetime`);
* the signal handlers, ``sys.excepthook``, ``atexit`` and faulthandler of a new interpreter;
* stdin from ``/dev/null``, stdout and stderr to the job's log, as new ``sys.stdout`` and
  ``sys.stderr`` objects;
* the job's environment (``CUDA_VISIBLE_DEVICES``, thread counts, data-loader workers). torch
  read its thread variables when the parent imported it, so the child also calls
  ``torch.set_num_threads``; the data-loader cap is re-applied by
  :func:`dmg_domainbed.integration.cap_loader_workers`;
* fresh random state: Python's and NumPy's global generators reseeded from the OS, torch's
  CPU generator seeded as this torch seeds a new process (from the OS, or with its fixed
  default in torch versions that use one). ``train.py`` then seeds all three from ``--seed``.

What a fork cannot give a child is a clean slate for native thread pools: a child of a process
that has run an OpenMP parallel region (a multi-threaded torch operation) hangs at its own
first one, and CUDA cannot be used in a child of a process that has touched it. DomainBed's
sweep process does neither, and neither does the launcher; :meth:`WarmStart.refusal` checks
both (a throw-away child runs a parallel region first) and falls back to fresh processes,
saying why, when the caller has. Python differences that remain: the hash seed is the parent's,
and modules are the ones the parent imported (a source file edited after the sweep started
reaches fresh jobs but not warm ones).
"""

from __future__ import annotations

import ast
import atexit
import faulthandler
import gc
import importlib
import importlib.util
import os
import random
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from dmg_domainbed.launchers.lifetime import die_with_parent
from dmg_domainbed.launchers.processes import ForkedProcess

TRAIN_MODULE = "domainbed.scripts.train"
# torch's ``default_rng_seed_val``: the CPU generator's seed in a new process of torch versions
# that do not seed it from the OS.
TORCH_FIXED_DEFAULT_SEED = 67280421310721
THREAD_WAIT_SECONDS = 10.0  # for threads still running imports' work, e.g. wilds' version check
CANARY_SECONDS = 10.0


def module_arguments(command: str, module: str = TRAIN_MODULE) -> tuple[str, list[str]] | None:
    """``(program, arguments)`` if ``command`` is ``PROGRAM -m MODULE ARGUMENTS`` and nothing
    else, as DomainBed's sweep writes its train commands; else None.

    A command a shell would read differently from plain words (variables, redirections,
    several commands, quoting other than :func:`shlex.quote`'s) is not one.
    """
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 3 or words[1:3] != ["-m", module] or shlex.join(words) != command:
        return None
    return words[0], words[3:]


def module_imports(module: str) -> list[str]:
    """The names that ``module``'s top level imports, in order (``from a import b`` gives ``a``
    and ``a.b``, which may be a submodule or a name defined in ``a``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module named {module!r}", name=module)
    names: list[str] = []
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def preload(module: str) -> None:
    """Import everything ``module``'s top level imports, so that a forked child does not."""
    for name in module_imports(module):
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules and hasattr(sys.modules[parent], child):
            continue
        if parent and importlib.util.find_spec(parent).submodule_search_locations is None:
            continue  # ``from module import function``
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:  # a missing dependency, not a name that is no module
                raise


def interpreter_mismatch(program: str, environ: Mapping[str, str]) -> str | None:
    """None if ``program`` (found on ``environ``'s PATH, as a shell would) is this interpreter
    in this environment; else what it is instead."""
    found = shutil.which(program, path=environ.get("PATH"))
    if found is None:
        return f"`{program}` is not on PATH"
    try:
        probe = subprocess.run(
            [found, "-c", "import sys; print(sys.executable); print(sys.prefix)"],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        executable, prefix = probe.stdout.splitlines()[-2:]
    except (OSError, subprocess.SubprocessError, ValueError):
        return f"`{program}` on PATH ({found}) did not say which interpreter it is"
    if (os.path.realpath(executable), prefix) != (os.path.realpath(sys.executable), sys.prefix):
        return (
            f"`{program}` on PATH is {executable} (environment {prefix}), not this process's "
            f"interpreter {sys.executable} (environment {sys.prefix}); put {sys.executable}'s "
            "folder first on PATH to start jobs warm"
        )
    return None


def _cuda_touched() -> bool:
    """Whether this process has initialised CUDA or loaded the CUDA driver."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        return "libcuda.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def _wait_for_threads(seconds: float) -> list[str]:
    """Wait up to ``seconds`` for this process's non-daemon threads; the names still running.

    A thread killed by a fork mid-way may leave a lock taken in the child; the ones that
    imports start (wilds' version check) end soon. Daemon threads (tqdm's monitor) sleep.
    """
    deadline = time.monotonic() + seconds
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    for thread in others:
        if not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in others if thread.is_alive() and not thread.daemon]


def _fork() -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking with threads; WarmStart.refusal has checked them.
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _canary_passes(seconds: float) -> bool:
    """Fork a child that runs one multi-threaded torch operation; False if it hangs or fails
    (this process has run OpenMP threads that a forked child would wait for forever)."""
    parent = os.getpid()
    pid = _fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            die_with_parent(parent)
            _redirect_standard_streams(os.devnull)
            import torch

            torch.set_num_threads(2)
            torch.ones(1 << 17).mul_(2).sum()
            code = 0
        finally:
            os._exit(code)
    canary = ForkedProcess(pid)
    deadline = time.monotonic() + seconds
    while canary.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if canary.returncode is None:
        os.kill(pid, signal.SIGKILL)
        canary.wait()
        return False
    return canary.returncode == 0


class WarmStart:
    """Forks the jobs of one module (DomainBed's train) from this process, once it has been
    found fit for it."""

    def __init__(self, module: str = TRAIN_MODULE) -> None:
        self.module = module
        self._verdicts: dict[tuple[str, str], str | None] = {}

    def arguments(self, command: str) -> tuple[str, list[str]] | None:
        """``(program, arguments)`` if ``command`` runs this module and nothing else."""
        return module_arguments(command, self.module)

    def refusal(self, program: str, environ: Mapping[str, str]) -> str | None:
        """None if jobs of ``program -m MODULE`` can be forked from this process; else why not.

        Decided once per program and PATH: the first call imports what the module imports,
        asks ``program`` which interpreter it is and checks the state of this process.
        """
        key = (program, environ.get("PATH", ""))
        if key not in self._verdicts:
            self._verdicts[key] = self._judge(program, environ)
        return self._verdicts[key]

    def _judge(self, program: str, environ: Mapping[str, str]) -> str | None:
        if not sys.platform.startswith("linux"):
            return "forking a process that has imported torch is supported on Linux only"
        try:
            preload(self.module)
        except Exception as error:
            return f"importing what {self.module} imports failed: {type(error).__name__}: {error}"
        mismatch = interpreter_mismatch(program, environ)
        if mismatch is not None:
            return mismatch
        if _cuda_touched():
            return "this process has initialised CUDA, which a forked job could not use"
        running = _wait_for_threads(THREAD_WAIT_SECONDS)
        if running:
            return f"threads of this process still run after {THREAD_WAIT_SECONDS:g} s: {running}"
        if "torch" in sys.modules and not _canary_passes(CANARY_SECONDS):
            return (
                "this process has run multi-threaded torch operations (OpenMP threads), which "
                "hang a forked job"
            )
        return None

    def fork(
        self, arguments: Sequence[str], environ: Mapping[str, str], log: Path | None
    ) -> ForkedProcess:
        """Start a child that runs ``python -m MODULE ARGUMENTS`` as a new process would."""
        parent = os.getpid()
        pid = _fork()
        if pid:
            return ForkedProcess(pid)
        status, kill_with = 1, None
        try:
            _become_new_process(parent, environ, log)
            status, kill_with = _run_as_main(self.module, arguments)
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        finally:
            _end(status, kill_with)


def _become_new_process(parent: int, environ: Mapping[str, str], log: Path | None) -> None:
    # The parent's objects stay out of the job's garbage collections: collecting them costs
    # a large process most of a second and copies every page they live on.
    gc.freeze()
    os.setsid()
    die_with_parent(parent)
    _reset_signals()
    _redirect_standard_streams(log)
    os.environ.clear()
    os.environ.update(environ)
    _apply_thread_count(environ)
    _apply_loader_workers()
    _reseed()
    atexit._clear()  # the parent's exit handlers are not the job's
    sys.excepthook = sys.__excepthook__
    faulthandler.disable()
    if environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()


def _reset_signals() -> None:
    """Python-level handlers of the parent back to a new interpreter's."""
    for number in signal.valid_signals():
        handler = signal.getsignal(number)
        if callable(handler) and handler is not signal.default_int_handler:
            signal.signal(number, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _redirect_standard_streams(log: Path | str | None) -> None:
    """stdin from /dev/null; stdout and stderr to ``log`` (appended) if given."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if log is not None:
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
    encoding = getattr(sys.__stdout__, "encoding", None)
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)
    # As Python's own: stdout block-buffered unless a terminal, stderr line-buffered.
    sys.stdout = sys.__stdout__ = open(1, "w", encoding=encoding, closefd=False)
    sys.stderr = sys.__stderr__ = open(
        2, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False
    )


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (hyper-threads counted once)."""
    cpus = os.sched_getaffinity(0)
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            cores.add((package, (topology / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return len(cores)


def _apply_thread_count(environ: Mapping[str, str]) -> None:
    """torch's intra-op threads as a new process with ``environ`` sets them: the requested
    number, which torch built with MKL caps at the physical cores as MKL does."""
    torch = sys.modules.get("torch")
    text = environ.get("OMP_NUM_THREADS", "").strip()
    if torch is None or not text.isdigit() or int(text) < 1:
        return
    threads = int(text)
    if torch.backends.mkl.is_available():
        threads = min(threads, physical_cores())
    torch.set_num_threads(threads)


def _apply_loader_workers() -> None:
    datasets = sys.modules.get("domainbed.datasets")
    if datasets is not None:
        from dmg_domainbed import integration

        integration.cap_loader_workers(datasets)


def _reseed() -> None:
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        generator = torch.random.default_generator
        if generator.initial_seed() == TORCH_FIXED_DEFAULT_SEED:
            generator.manual_seed(TORCH_FIXED_DEFAULT_SEED)
        else:
            generator.seed()


def _run_as_main(module: str, arguments: Sequence[str]) -> tuple[int, int | None]:
    """Run ``module`` as ``python -m`` would; (exit status, signal to end with or None)."""
    sys.argv = [module, *arguments]  # runpy puts the module's file name first
    if not sys.flags.safe_path and sys.path[:1] != [os.getcwd()]:
        sys.path.insert(0, os.getcwd())
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True).clear()
        return 0, None
    except SystemExit as exit:
        return _exit_status(exit.code), None
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        return 1, signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1, None
    finally:
        gc.collect()  # as at interpreter exit: loaders stop their workers, files are closed


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _end(status: int, kill_with: int | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if kill_with is not None:
        signal.signal(kill_with, signal.SIG_DFL)
        os.kill(os.getpid(), kill_with)
    os._exit(status)
