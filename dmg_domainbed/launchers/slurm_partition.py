"""What a Slurm partition offers (``sinfo``), and per-job requests that fit it.

Slurm refuses some requests that cannot fit at submission (a GPU on a partition without GPUs,
more memory than a node has) and accepts others that then pend forever with no error (more CPUs
than any node has, a time limit over the partition's). Here every request is compared with the
partition before anything is submitted, and the settings a user left unset get defaults that
fit: a GPU only where the partition has GPUs, at most 8 CPUs and at most the node, at most
32 GB and at most the job's CPU share of the node's memory, at most the partition's time limit.

Stdlib only: the launcher runs inside DomainBed's sweep script.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmg_domainbed.errors import UserError

DEFAULT_CPUS = 8  # DomainBed's image datasets load data with 8 worker processes
DEFAULT_MEM_GB = 32.0
DEFAULT_TIME_MIN = 1440
SINFO_FIELDS = "%P|%a|%l|%B|%c|%m|%G|%D"
SINFO_TIMEOUT_S = 30
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


@dataclass(frozen=True)
class NodeKind:
    """Nodes of a partition that share one configuration."""

    count: int
    cpus: int
    memory_gb: float
    gpus: int

    def describe(self) -> str:
        gpus = f"{self.gpus} GPU" if self.gpus else "no GPU"
        return f"{self.count} node(s) of {self.cpus} CPUs, {self.memory_gb:.1f} GB, {gpus}"


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    state: str
    max_time_min: int | None  # None: no limit
    nodes: tuple[NodeKind, ...]

    def describe(self) -> str:
        limit = (
            "no time limit" if self.max_time_min is None else f"time limit {self.max_time_min} min"
        )
        kinds = "; ".join(kind.describe() for kind in self.nodes)
        state = "" if self.state == "up" else f"; {self.state}: no job starts until it is up"
        return f"partition {self.name} ({kinds}; {limit}{state})"


def parse_minutes(text: str) -> int | None:
    """Slurm's time limit (``infinite``, ``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``), in whole
    minutes rounded up; ``None`` for no limit."""
    text = text.strip()
    if text.lower() in {"infinite", "unlimited", "n/a", "none"}:
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        parts = [int(days) * 24 + parts[0], *parts[1:]] + [0] * (3 - len(parts))
    elif len(parts) == 1:
        parts = [0, parts[0], 0]
    elif len(parts) == 2:
        parts = [0, *parts]
    hours, minutes, seconds = parts
    return hours * 60 + minutes + math.ceil(seconds / 60)


def gpus_of(gres: str) -> int:
    """GPUs per node in a GRES string such as ``gpu:a100:4(S:0-1),shard:8``."""
    return sum(int(count) for count in _GPU_GRES.findall(gres))


def _gb(megabytes: int) -> float:
    """Megabytes as gigabytes, rounded down to 0.1 GB (so that a request of that size fits)."""
    return math.floor(megabytes / 1024 * 10) / 10


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``sinfo -h -e -o SINFO_FIELDS`` output: one line per partition and node configuration."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, state, limit, max_cpus, cpus, memory_mb, gres, count = line.split("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        node_cpus = int(cpus.rstrip("+"))
        if max_cpus.strip().isdigit():  # the partition's MaxCPUsPerNode
            node_cpus = min(node_cpus, int(max_cpus))
        entry = found.setdefault(
            name,
            {"default": default, "state": state, "limit": parse_minutes(limit), "nodes": []},
        )
        entry["nodes"].append(
            NodeKind(int(count), node_cpus, _gb(int(memory_mb.rstrip("+"))), gpus_of(gres))
        )
    return {
        name: Partition(name, e["default"], e["state"], e["limit"], tuple(e["nodes"]))
        for name, e in found.items()
    }


def read_partitions(environ: Mapping[str, str]) -> dict[str, Partition]:
    """Every partition of the cluster that ``sinfo`` (with ``environ``) reaches."""
    sinfo = shutil.which("sinfo", path=environ.get("PATH"))
    if sinfo is None:
        raise UserError(
            "sinfo is not on PATH: the submitit launcher reads what the partition offers with "
            "it. Submit from a Slurm login node, or set DMG_SUBMITIT_CLUSTER=local."
        )
    try:
        result = subprocess.run(
            [sinfo, "-h", "-e", "-o", SINFO_FIELDS],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=SINFO_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"sinfo did not answer within {SINFO_TIMEOUT_S} s: the Slurm controller cannot be "
            "reached from here. Check SLURM_CONF and that slurmctld is up, or set "
            "DMG_SUBMITIT_CLUSTER=local to run the jobs on this machine."
        ) from None
    if result.returncode != 0:
        said = " / ".join(result.stderr.strip().splitlines()[-2:])
        raise UserError(
            f"sinfo failed, so Slurm cannot be asked what its partitions offer ({said}). Check "
            "that this machine reaches the cluster (SLURM_CONF, slurmctld up), or set "
            "DMG_SUBMITIT_CLUSTER=local to run the jobs on this machine."
        )
    return parse_sinfo(result.stdout)


def choose(partitions: Mapping[str, Partition], name: str | None) -> Partition:
    """The named partition, or the cluster's default one."""
    listing = ", ".join(p.name + ("*" if p.default else "") for p in partitions.values())
    if name is None:
        defaults = [p for p in partitions.values() if p.default]
        if not defaults:
            raise UserError(
                f"the cluster has no default partition: set partition (DMG_SUBMITIT_PARTITION) "
                f"to one of: {listing or 'none found by sinfo'}"
            )
        return defaults[0]
    if name not in partitions:
        raise UserError(
            f"partition = {name!r} (DMG_SUBMITIT_PARTITION) does not exist on this cluster; "
            f"partitions (* the default): {listing or 'none found by sinfo'}. Set partition to "
            "one of them, or leave it unset for the default."
        )
    return partitions[name]


@dataclass(frozen=True)
class Request:
    """Resources of one job."""

    gpus: int
    cpus: int
    mem_gb: float
    time_min: int


def default_request(partition: Partition, given: Mapping[str, Any]) -> Request:
    """``given`` (``gpus``, ``cpus``, ``mem_gb``, ``time_min``; ``None`` where unset) with the
    unset ones chosen to fit ``partition``."""
    gpus = given["gpus"]
    if gpus is None:
        gpus = 1 if any(kind.gpus for kind in partition.nodes) else 0
    # The node the defaults are sized for: the one with the most CPUs among those that have the
    # GPUs (every node when the GPU request cannot fit: misfits() says so).
    candidates = [kind for kind in partition.nodes if kind.gpus >= gpus] or list(partition.nodes)
    node = max(candidates, key=lambda kind: (kind.cpus, kind.memory_gb))
    cpus = given["cpus"] if given["cpus"] is not None else min(DEFAULT_CPUS, node.cpus)
    mem_gb = given["mem_gb"]
    if mem_gb is None:
        share = node.memory_gb * min(cpus, node.cpus) / node.cpus
        mem_gb = min(DEFAULT_MEM_GB, math.floor(share * 10) / 10)
    time_min = given["time_min"]
    if time_min is None:
        limit = partition.max_time_min
        time_min = DEFAULT_TIME_MIN if limit is None else min(DEFAULT_TIME_MIN, limit)
    return Request(gpus, cpus, mem_gb, time_min)


def misfits(
    request: Request, partition: Partition, partitions: Mapping[str, Partition]
) -> list[tuple[str, str]]:
    """Why ``request`` cannot run on ``partition``: (setting, what to do) pairs; empty if it
    fits."""
    most_cpus = max(kind.cpus for kind in partition.nodes)
    most_memory = max(kind.memory_gb for kind in partition.nodes)
    problems = []
    most_gpus = max(kind.gpus for kind in partition.nodes)
    if request.gpus > most_gpus:
        with_gpus = [p.name for p in partitions.values() if any(k.gpus for k in p.nodes)]
        where = (
            f"partitions with GPUs: {', '.join(with_gpus)}"
            if with_gpus
            else "no partition of this cluster has GPUs"
        )
        has = f"at most {most_gpus} GPUs on a node" if most_gpus else "no GPUs"
        problems.append(
            (
                "gpus",
                f"the partition has {has} ({where}). Set gpus = 0 to run on CPUs, or "
                "choose a partition with GPUs",
            )
        )
    if request.cpus > most_cpus:
        problems.append(
            (
                "cpus",
                "more than any node has: Slurm would accept the jobs and leave them "
                f"pending forever. Set cpus to at most {most_cpus}",
            )
        )
    if request.mem_gb > most_memory:
        problems.append(
            ("mem_gb", f"more than any node has. Set mem_gb to at most {most_memory:.1f}")
        )
    limit = partition.max_time_min
    if limit is not None and request.time_min > limit:
        problems.append(
            (
                "time_min",
                "over the partition's time limit: the jobs would pend forever. Set "
                f"time_min to at most {limit}",
            )
        )
    if not problems and not any(
        kind.gpus >= request.gpus and kind.cpus >= request.cpus and kind.memory_gb >= request.mem_gb
        for kind in partition.nodes
    ):
        problems.append(
            (
                "cpus",
                f"no single node has {request.gpus} GPU, {request.cpus} CPUs and "
                f"{request.mem_gb:g} GB together. Lower gpus, cpus or mem_gb",
            )
        )
    return problems
