"""Warm start: DomainBed's train jobs forked from a process that has already imported them.

A new ``python -m domainbed.scripts.train`` spends seconds on imports before its first step. A
warm job is a child of multiprocessing's fork server (one per launcher process), which has
imported the train module and the launcher's ``__main__`` (so a program that runs the launcher
needs multiprocessing's ``if __name__ == "__main__":`` guard) and let the threads those imports
started end (:mod:`.fork_server`). The child leads a session of its own and ends it once the
launcher is gone, writes to the job's log, takes the job's environment and applies what a new
process reads at import: torch's threads from ``OMP_NUM_THREADS`` (capped at the physical cores,
as torch built with MKL caps them) and :func:`~dmg_domainbed.integration.cap_loader_workers`;
CUDA is first touched by the job. Then it runs DomainBed's unmodified ``train.py`` as
``__main__``, which seeds every generator from ``--seed``: a warm job writes the results a new
process writes (a test compares them). Left different: the hash seed, the code (a source file
edited meanwhile reaches new processes only) and the process name atop an uncaught traceback.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import runpy
import shutil
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from multiprocessing.connection import wait
from pathlib import Path

import psutil

from dmg_domainbed.launchers.common import plain_words

TRAIN_MODULE = "domainbed.scripts.train"
_SERVER = multiprocessing.get_context("forkserver")


def module_arguments(command: str, module: str = TRAIN_MODULE) -> list[str] | None:
    """The arguments if ``command`` is ``python -m MODULE ARGUMENTS`` in plain words and
    nothing else, as DomainBed's sweep writes its train commands; else None."""
    words = plain_words(command) or []
    return words[3:] if words[:3] == ["python", "-m", module] else None


def refusal(environ: Mapping[str, str]) -> str | None:
    """None if jobs may run warm, in this interpreter and environment: the ``python`` on
    ``environ``'s PATH is the same file in the same folder (a virtual environment's ``python``
    links to its base interpreter, but is another environment); else why not."""
    if not sys.platform.startswith("linux"):
        return "warm jobs are forked, which this package supports on Linux only"
    found, here = shutil.which("python", path=environ.get("PATH")), sys.executable
    if found and Path(found).parent == Path(here).parent and os.path.samefile(found, here):
        return None
    return (
        f"`python` on PATH ({found or 'none'}) is not this process's interpreter {here}; put "
        f"{os.path.dirname(here)} first on PATH to start jobs warm"
    )


def start(
    module: str, arguments: Sequence[str], environ: Mapping[str, str], log: Path | None
) -> multiprocessing.Process:
    """Start ``python -m MODULE ARGUMENTS`` as a child of the fork server."""
    # read when the server starts; the last one waits for threads the others started
    _SERVER.set_forkserver_preload(["__main__", module, "dmg_domainbed.launchers.fork_server"])
    job = _SERVER.Process(target=_run, args=(module, list(arguments), dict(environ), log))
    job.start()
    return job


def _end_with_launcher() -> None:
    wait([multiprocessing.parent_process().sentinel])  # closes when the launcher is gone
    os.killpg(0, signal.SIGTERM)


def _run(module: str, arguments: list[str], environ: dict[str, str], log: Path | None) -> None:
    gc.freeze()  # the server's objects stay out of the job's collections, and their pages shared
    os.setsid()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # as a new interpreter has it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=_end_with_launcher, name="launcher-watch", daemon=True).start()
    if log is not None:
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
    os.environ.clear()
    os.environ.update(environ)
    threads = environ.get("OMP_NUM_THREADS", "").strip()
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        physical = psutil.cpu_count(logical=False) if torch.backends.mkl.is_available() else None
        torch.set_num_threads(min(int(threads), physical or int(threads)))
    if "domainbed.datasets" in sys.modules:
        from dmg_domainbed.integration import cap_loader_workers

        cap_loader_workers(sys.modules["domainbed.datasets"])
    sys.argv = [module, *arguments]  # runpy puts the module's file name first
    sys.modules.pop(module, None)  # imported by the server: run afresh as __main__
    runpy.run_module(module, run_name="__main__", alter_sys=True)
