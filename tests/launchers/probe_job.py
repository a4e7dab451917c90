"""A job for the launcher tests: ``python -m tests.launchers.probe_job MODE [ARG]``.

``report PATH`` writes what the job sees (ids, environment, threads, streams) to PATH as JSON,
``settings PATH`` only torch's threads, DomainBed's data-loader workers, multiprocessing's start
method and how a worker of DomainBed's data loader started; the other modes end the job in one
way each.
Like DomainBed's train.py, its top level imports torch and DomainBed, which the fork server of
warm jobs imports once.
"""

import json
import multiprocessing
import os
import signal
import sys

import torch
from domainbed import datasets
from domainbed.lib.fast_data_loader import InfiniteDataLoader


def report(path: str) -> None:
    state = {
        "name": __name__,
        "argv": sys.argv,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "sigint_handler": getattr(signal.getsignal(signal.SIGINT), "__name__", None),
        "stdin": sys.stdin.read(),
        "environ": {
            name: os.environ.get(name)
            for name in (
                "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS",
                "DMG_DOMAINBED_LOADER_WORKERS",
                "PROBE_MARK",
            )
        },
        "torch_threads": torch.get_num_threads(),
        "pacs_loader_workers": datasets.PACS.N_WORKERS,
    }
    print("probe: to stdout")
    print("probe: to stderr", file=sys.stderr)
    with open(path, "w") as out:
        json.dump(state, out)


class WorkerOrigin(torch.utils.data.Dataset):
    """One item: the pid of the process that started the worker reading it."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return os.getppid()


def loader_worker_parent() -> str:
    """Who started the worker of a DomainBed loader with one worker, as train.py builds its
    training loaders: this job (a fork of it) or another process (a fork server, spawn)."""
    loader = InfiniteDataLoader(WorkerOrigin(), None, batch_size=1, num_workers=1)
    parent = int(next(iter(loader))[0])
    return "this job" if parent == os.getpid() else "another process"


def settings(path: str) -> None:
    state = {
        "torch_threads": torch.get_num_threads(),
        "pacs_loader_workers": datasets.PACS.N_WORKERS,
        "loader_worker_parent": loader_worker_parent(),
        "start_method": multiprocessing.get_start_method(),
    }
    with open(path, "w") as out:
        json.dump(state, out)


def out_of_gpu_memory() -> None:
    # The message torch's CUDA caching allocator raises (no GPU here to exhaust).
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free."
    )


def main(mode: str, *args: str) -> None:
    if mode == "report":
        report(*args)
    elif mode == "settings":
        settings(*args)
    elif mode == "exit":
        sys.exit(int(args[0]))
    elif mode == "message":
        sys.exit(args[0])
    elif mode == "raise":
        raise RuntimeError(args[0])
    elif mode == "abort":
        os.abort()
    elif mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "oom":
        out_of_gpu_memory()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(*sys.argv[1:])
