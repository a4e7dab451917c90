"""The CPU cores this process may run on: what the launchers split over their jobs and the
data check over its decoding workers. Stdlib only (launchers run on cluster nodes)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (Linux,
    a Slurm allocation, ``taskset``), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
