"""How a job ended, in words, and what to change when it ran out of memory.

Read from the job's exit status and the end of what it printed, so that the same diagnosis
holds for jobs started fresh and for jobs forked warm. Stdlib only.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

TAIL_BYTES = 64 * 1024
# What torch and the CUDA libraries print when a GPU allocation fails.
GPU_OUT_OF_MEMORY = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
)
# What a DomainBed job prints when the kernel killed one of its data-loader workers.
WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")


def describe_exit(code: int) -> str:
    """``exit N``, or ``killed by SIGNAME`` for a negative status (as Popen reports it)."""
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"


def read_tail(path: Path | None, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of a log, as text ('' when there is none)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - size))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def memory_hint(code: int, output: str, gpu_setting: str | None, host_setting: str) -> str | None:
    """What to lower when a job that ended with ``code`` after printing ``output`` ran out of
    memory; None when nothing says it did.

    ``gpu_setting`` names the setting that sets how many jobs share a GPU (None when each job
    has a GPU to itself); ``host_setting`` the ones that set how much of the machine's memory
    the jobs take together.
    """
    if GPU_OUT_OF_MEMORY.search(output):
        if gpu_setting is None:
            return (
                "out of GPU memory with a GPU to itself: lower the batch size "
                "(hparam batch_size) or use a GPU with more memory"
            )
        return f"out of GPU memory: lower {gpu_setting}"
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL) or WORKER_KILLED.search(output):
        return (
            "killed by SIGKILL, which is what the kernel's out-of-memory killer sends (see "
            f"dmesg); if the machine ran out of memory, lower {host_setting}"
        )
    return None
