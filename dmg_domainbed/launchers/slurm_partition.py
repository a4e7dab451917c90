"""What a Slurm partition offers and whether Slurm accepts a job's request, before anything is
submitted.

Unset resources get defaults that fit the partition's nodes, as ``sinfo`` shows them (a GPU only
where the partition has GPUs, 8 CPUs or the largest node's, 32 GB or the job's CPU share of the
node's memory, 1,440 minutes or the partition's limit). Slurm then judges the request with
``sbatch --test-only``, which refuses more CPUs or memory than any node has (a submission would
pend forever) and reads Slurm's own ``SBATCH_*`` variables; a time over the partition's limit,
which it accepts and leaves pending, is compared here. When Slurm refuses, the partition alone
and then each resource alone are tried, to name the setting at fault.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections import namedtuple
from collections.abc import Mapping
from typing import Any

from dmg_domainbed.errors import UserError

DEFAULTS = {"cpus": 8, "mem_gb": 32.0, "time_min": 1440}
RESOURCES = ("gpus", "cpus", "mem_gb", "time_min")
SINFO = ["sinfo", "--noheader", "--exact", "--format=%P|%l|%B|%c|%m|%G"]
TIMEOUT_S = 60
FOREVER = "Slurm would accept the jobs and leave them pending forever"
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
_REACH = "Check SLURM_CONF and that slurmctld is up, or set DMG_SUBMITIT_CLUSTER=local"
Node = namedtuple("Node", "cpus memory_gb gpus")  # a node configuration; the largest is greatest
Partition = namedtuple("Partition", "name default max_time_min nodes")  # max_time_min None: none


def slurm(command: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess:
    """Run a Slurm client with ``environ``; :class:`UserError` if it does not answer."""
    try:
        return subprocess.run(
            command, env=dict(environ), capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"{command[0]} did not answer within {TIMEOUT_S} s. {_REACH}.") from None


def parse_minutes(text: str) -> int | None:
    """Slurm's time limit (``infinite``, ``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``) in whole
    minutes, rounded up; ``None`` for no limit."""
    if text.strip().lower() in {"infinite", "unlimited", "n/a", "none"}:
        return None
    days, _, clock = text.strip().rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:
        hours, minutes, seconds = [int(days) * 24 + parts[0], *parts[1:], 0, 0][:3]
    else:
        hours, minutes, seconds = ([0, *parts, 0] if len(parts) == 1 else [0, 0, *parts])[-3:]
    return hours * 60 + minutes + math.ceil(seconds / 60)


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``SINFO``'s answer by partition; a node's CPUs at most the partition's MaxCPUsPerNode,
    its memory rounded down to 0.1 GB."""
    partitions: dict[str, Partition] = {}
    for line in text.splitlines():
        name, limit, max_cpus, cpus, memory_mb, gres = line.split("|")
        cpus = min(int(cpus.rstrip("+")), int(max_cpus) if max_cpus.isdigit() else math.inf)
        memory_gb = math.floor(int(memory_mb.rstrip("+")) / 102.4) / 10
        node = Node(cpus, memory_gb, sum(int(n) for n in _GPU_GRES.findall(gres)))
        new = Partition(name.rstrip("*"), name.endswith("*"), parse_minutes(limit), [])
        partitions.setdefault(new.name, new).nodes.append(node)
    return partitions


def choose(partitions: Mapping[str, Partition], name: str | None) -> Partition:
    """The named partition, or the cluster's default one."""
    chosen = partitions.get(name) or next((p for p in partitions.values() if p.default), None)
    if chosen is not None and name in (None, chosen.name):
        return chosen
    listing = ", ".join(p.name + "*" * p.default for p in partitions.values()) or "none"
    what = f"partition = {name!r} (DMG_SUBMITIT_PARTITION) does not exist on this cluster"
    raise UserError(
        f"{'the cluster has no default partition' if name is None else what}; partitions (* the "
        f"default): {listing}. Set partition (DMG_SUBMITIT_PARTITION) to one of them"
        + (", or leave it unset for the default." if chosen else ".")
    )


def default_request(partition: Partition, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` (``RESOURCES``, ``None`` where unset) with the unset ones chosen to fit
    ``partition``, sized for its node with the most CPUs among those with the GPUs."""
    gpus = int(any(n.gpus for n in partition.nodes)) if given["gpus"] is None else given["gpus"]
    node = max([n for n in partition.nodes if n.gpus >= gpus] or partition.nodes)
    cpus = given["cpus"] or min(DEFAULTS["cpus"], node.cpus)
    share = math.floor(node.memory_gb * min(cpus, node.cpus) / node.cpus * 10) / 10
    mem_gb = min(DEFAULTS["mem_gb"], share) if given["mem_gb"] is None else given["mem_gb"]
    time_min = given["time_min"] or min(DEFAULTS["time_min"], partition.max_time_min or math.inf)
    return {"gpus": gpus, "cpus": cpus, "mem_gb": mem_gb, "time_min": time_min}


def refusal(flags: list[str], environ: Mapping[str, str]) -> str | None:
    """What ``sbatch --test-only`` says against a job with ``flags``; ``None`` if it fits."""
    result = slurm(["sbatch", "--test-only", *flags, "--wrap", "true"], environ)
    return (result.stderr.strip().splitlines() or ["refused"])[-1] if result.returncode else None


def misfits(
    request: Mapping[str, Any], partition: Partition, environ: Mapping[str, str]
) -> tuple[list[tuple[str, str]], str | None]:
    """Why ``request`` cannot run on ``partition``, as (setting, what to do) pairs, and what
    Slurm said if it refused."""
    limit, problems = partition.max_time_min, []
    if limit is not None and request["time_min"] > limit:
        fix = f"over the partition's time limit: {FOREVER}. Set time_min to at most {limit}"
        problems.append(("time_min", fix))
    time_min = min(request["time_min"], limit or request["time_min"])
    alone = [f"--partition={partition.name}", f"--time={time_min}"]
    flags = {
        "gpus": [f"--gpus-per-node={request['gpus']}"] * bool(request["gpus"]),
        "cpus": [f"--cpus-per-task={request['cpus']}"],
        "mem_gb": [f"--mem={math.ceil(request['mem_gb'] * 1024)}M"],
    }
    said = refusal(alone + sum(flags.values(), []), environ)
    if said is None:
        return problems, None
    if refusal(alone, environ) is not None:
        suspects = ", ".join(["the partition", *sorted(v for v in environ if v[:7] == "SBATCH_")])
        return problems + [("partition", f"Slurm refuses any job there: check {suspects}")], said
    most = Node(*map(max, zip(*partition.nodes)))
    has = f"at most {most.gpus} GPUs a node" if most.gpus else "no GPUs"
    fixes = {
        "gpus": f"the partition has {has}. Set gpus = 0 to run on CPUs, or choose a partition "
        "with GPUs",
        "cpus": f"more than any node has: {FOREVER}. Set cpus to at most {most.cpus}",
        "mem_gb": f"more than any node has. Set mem_gb to at most {most.memory_gb:.1f}",
    }
    at_fault = [
        (name, fixes[name]) for name, f in flags.items() if f and refusal(alone + f, environ)
    ]
    together = (
        f"no single node has {request['gpus']} GPU, {request['cpus']} CPUs and "
        f"{request['mem_gb']:g} GB together. Lower gpus, cpus or mem_gb"
    )
    return problems + (at_fault or [("cpus", together)]), said


def fit(
    given: Mapping[str, Any], partition_name: str | None, environ: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    """The partition and each job's resources, ``given`` completed to fit; :class:`UserError`
    naming each setting at fault if the jobs cannot run there."""
    result = slurm(SINFO, environ)
    if result.returncode != 0:
        said = " / ".join(result.stderr.strip().splitlines()[-2:])
        raise UserError(f"sinfo failed, so Slurm cannot tell its partitions ({said}). {_REACH}.")
    partition = choose(parse_sinfo(result.stdout), partition_name)
    request = default_request(partition, given)
    problems, said = misfits(request, partition, environ)
    values, named = {**request, "partition": partition.name}, {**given, "partition": partition_name}
    lines = [
        f"\n  {name} = {values[name] if name == 'partition' else format(values[name], 'g')} "
        f"({f'DMG_SUBMITIT_{name.upper()}' if named[name] is not None else 'the default'}): {fix}"
        for name, fix in problems
    ]
    if lines:
        said = f" (sbatch --test-only: {said})" if said else ""
        raise UserError(
            f"the jobs cannot run on partition {partition.name}{said}:" + "".join(lines)
        )
    return partition.name, request
