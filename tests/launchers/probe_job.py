"""A job for the launcher tests: ``python -m tests.launchers.probe_job MODE [ARG]``.

``report PATH`` writes what the job sees (ids, environment, threads, streams) to PATH as JSON,
``settings PATH`` only torch's threads and DomainBed's data-loader workers; the other modes end
the job in one way each.
Like DomainBed's train.py, its top level imports torch and DomainBed, which the fork server of
warm jobs imports once.
"""

import json
import os
import signal
import sys

import torch
from domainbed import datasets


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


def settings(path: str) -> None:
    state = {
        "torch_threads": torch.get_num_threads(),
        "pacs_loader_workers": datasets.PACS.N_WORKERS,
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
