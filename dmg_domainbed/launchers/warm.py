"""Warm start: DomainBed's train jobs forked from a process that has already imported them.

A new ``python -m domainbed.scripts.train`` spends seconds importing torch, torchvision, wilds
and DomainBed before its first step; on small datasets that is most of a job. Warm jobs come
from multiprocessing's fork server instead: a clean process, started once per launcher, that
imports the train module (its top level is imports only) and the launcher's ``__main__``, and
forks one child per job. The child runs DomainBed's own, unmodified ``train.py`` as
``__main__`` (:mod:`runpy`) with the job's arguments, after making itself what a new process
would be:

* its own session and process group, which a thread of the job ends when the launcher is gone
  (multiprocessing's pipe from the launcher closes; the fork server is not the job's guard: it
  lives until its children end); stdin from ``/dev/null``, stdout and stderr into the log;
* the job's environment. What a new process reads at import is applied again: torch's
  intra-op threads from ``OMP_NUM_THREADS`` (capped, as torch built with MKL caps them, at the
  machine's physical cores) and the data-loader cap of
  :func:`dmg_domainbed.integration.cap_loader_workers`. CUDA is first touched by the job, so
  its ``CUDA_VISIBLE_DEVICES`` holds.

``train.py`` seeds Python's, NumPy's and torch's generators from ``--seed`` before drawing
anything, so a warm job writes the same results as a new process (a test compares them).
What remains different: the hash seed is the fork server's, and so is the code (a source file
edited after the server started reaches new processes only).
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import shlex
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import wait
from pathlib import Path

import psutil

TRAIN_MODULE = "domainbed.scripts.train"
_SERVER = multiprocessing.get_context("forkserver")


def module_arguments(command: str, module: str = TRAIN_MODULE) -> list[str] | None:
    """The arguments if ``command`` is ``python -m MODULE ARGUMENTS`` and nothing else, as
    DomainBed's sweep writes its train commands; else None (a command a shell would read
    otherwise than as plain words is not one)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:3] != ["python", "-m", module] or shlex.join(words) != command:
        return None
    return words[3:]


def refusal(environ: Mapping[str, str]) -> str | None:
    """None if ``python -m MODULE`` jobs may run warm; else why they run as new processes.

    A warm job runs in this interpreter and environment, so the ``python`` a shell finds on
    ``environ``'s PATH must be that one: the same file in the same folder (a virtual
    environment's ``python`` links to its base interpreter but is another environment).
    """
    if not sys.platform.startswith("linux"):
        return "warm jobs are forked, which this package supports on Linux only"
    found, here = shutil.which("python", path=environ.get("PATH")), sys.executable
    if (
        found is None
        or Path(found).parent != Path(here).parent
        or not os.path.samefile(found, here)
    ):
        return (
            f"`python` on PATH ({found or 'none'}) is not this process's interpreter {here}; put "
            f"{os.path.dirname(here)} first on PATH to start jobs warm"
        )
    return None


def start(
    module: str, arguments: Sequence[str], environ: Mapping[str, str], log: Path | None
) -> multiprocessing.Process:
    """Start ``python -m MODULE ARGUMENTS`` as a child of the fork server."""
    _SERVER.set_forkserver_preload(["__main__", module])  # read when the server starts
    job = _SERVER.Process(target=_run, args=(module, list(arguments), dict(environ), log))
    job.start()
    return job


def _end_with_launcher() -> None:
    """End this job's process group once the launcher that started it is gone (its side of
    the pipe multiprocessing keeps open to every child closes)."""
    wait([multiprocessing.parent_process().sentinel])
    os.killpg(0, signal.SIGTERM)


def _run(module: str, arguments: list[str], environ: dict[str, str], log: Path | None) -> None:
    os.setsid()
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
    datasets = sys.modules.get("domainbed.datasets")
    if datasets is not None:
        from dmg_domainbed.integration import cap_loader_workers

        cap_loader_workers(datasets)
    sys.argv = [module, *arguments]  # runpy puts the module's file name first
    sys.modules.pop(module, None)  # imported by the server: run afresh as __main__
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()  # as the interpreter reports an uncaught exception
        raise SystemExit(1) from None
