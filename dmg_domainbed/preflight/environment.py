"""Facts about the machine: where DomainBed is and at which commit, whether a fresh ``python``
process registers the plugins, and what torch sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    facts.update(domainbed=list(domainbed.__path__)[0], algorithms=list(algorithms.ALGORITHMS),
                 datasets=list(datasets.DATASETS), launchers=sorted(command_launchers.REGISTRY))
print({_PROBE_MARK!r} + json.dumps(facts))
"""


def git_commit(checkout: Path) -> str | None:
    """The commit checked out in ``checkout`` (``None`` where git cannot tell)."""
    command = ["git", "-C", str(checkout), "rev-parse", "--verify", "HEAD"]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return answer.stdout.strip() if answer.returncode == 0 else None


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
    algorithms: Sequence[str] = ()
    datasets: Sequence[str] = ()
    launchers: Sequence[str] = ()
    warnings: Sequence[str] = ()


def probe_fresh_process() -> ProbeResult:
    """Start the ``python`` the jobs will run (:func:`job_environment`), import DomainBed there
    and list what is registered."""
    env = job_environment()
    python = shutil.which("python", path=env["PATH"])
    if python is None:
        return ProbeResult(python=None, error="no `python` on PATH")
    command = [python, "-c", _PROBE]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return ProbeResult(python=python, error=f"{type(error).__name__}: {error}")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("dmg-domainbed:")]
    for line in done.stdout.splitlines():
        if line.startswith(_PROBE_MARK):
            facts = json.loads(line[len(_PROBE_MARK) :])
            return ProbeResult(python=python, warnings=warnings, **facts)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return ProbeResult(python=python, error=f"exit {done.returncode}: {tail}", warnings=warnings)


def torch_summary() -> list[str]:
    """torch and torchvision versions, CUDA build, the GPUs torch sees (DomainBed, which imports
    both, is importable)."""
    import torch
    import torchvision

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
    return lines
