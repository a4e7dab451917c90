"""Facts about the machine: where DomainBed is and at which commit, whether a fresh ``python``
process registers the plugins, and what torch sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_PROBE_MARK = "dmg-domainbed-probe:"
# Run by the ``python`` the jobs will run.
_PROBE = f"""
import json, sys
facts = {{"executable": sys.executable}}
try:
    import domainbed
    from domainbed import algorithms, command_launchers, datasets
except Exception as error:
    facts["error"] = f"{{type(error).__name__}}: {{error}}"
else:
    facts["domainbed"] = list(domainbed.__path__)[0]
    facts["algorithms"] = list(algorithms.ALGORITHMS)
    facts["datasets"] = list(datasets.DATASETS)
    facts["launchers"] = sorted(command_launchers.REGISTRY)
print({_PROBE_MARK!r} + json.dumps(facts))
"""


def git_commit(checkout: Path) -> str | None:
    """The commit checked out in ``checkout`` (``None`` where git cannot tell)."""
    try:
        answer = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = answer.stdout.strip()
    return commit if answer.returncode == 0 and commit else None


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the jobs this process starts: ``environ`` (default: this process's)
    with this interpreter's folder first on PATH, since DomainBed starts every job as
    ``python -m domainbed.scripts.train`` with the ``python`` found there."""
    env = dict(os.environ if environ is None else environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@dataclass
class ProbeResult:
    """What a fresh ``python`` process saw after importing DomainBed."""

    python: str | None
    executable: str | None = None
    error: str | None = None
    domainbed: str | None = None
    algorithms: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    launchers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def probe_fresh_process(timeout: float = 300) -> ProbeResult:
    """Start the ``python`` the jobs will run (:func:`job_environment`), import DomainBed there
    and list what is registered."""
    env = job_environment()
    python = shutil.which("python", path=env["PATH"])
    if python is None:
        return ProbeResult(python=None, error="no `python` on PATH")
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return ProbeResult(python=python, error=f"{type(error).__name__}: {error}")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("dmg-domainbed:")]
    for line in done.stdout.splitlines():
        if line.startswith(_PROBE_MARK):
            facts = json.loads(line[len(_PROBE_MARK) :])
            return ProbeResult(python=python, warnings=warnings, **facts)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return ProbeResult(python=python, error=f"exit {done.returncode}: {tail}", warnings=warnings)


def torch_summary() -> tuple[bool, list[str]]:
    """(importable, lines): torch and torchvision versions, CUDA build, the GPUs torch sees."""
    try:
        import torch
        import torchvision
    except Exception as error:  # a broken install raises more than ImportError
        return False, [f"torch/torchvision cannot be imported: {type(error).__name__}: {error}"]
    lines = [
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
        f"CUDA build {torch.version.cuda or 'none (CPU only)'}, Python {sys.version.split()[0]}"
    ]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            lines.append(f"GPU {i}: {props.name}, {props.total_memory / 2**30:.0f} GiB")
    else:
        lines.append("no GPU visible to torch: jobs run on the CPU")
    return True, lines
