"""Facts about the machine: whether a fresh ``python`` process registers the plugins, what torch
sees, and whether torch and torchvision match."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
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


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with this interpreter's folder first on PATH, where
    DomainBed finds the ``python`` it starts every job with."""
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
    """What the ``python`` the jobs will run finds registered when it imports DomainBed."""
    env = job_environment()
    python = shutil.which("python", path=env["PATH"])
    if python is None:
        return ProbeResult(None, error="no `python` on PATH")
    command = [python, "-c", _PROBE]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return ProbeResult(python, error=f"{type(error).__name__}: {error}")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("dmg-domainbed:")]
    for line in done.stdout.splitlines():
        if line.startswith(_PROBE_MARK):
            facts = json.loads(line[len(_PROBE_MARK) :])
            return ProbeResult(python=python, warnings=warnings, **facts)
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return ProbeResult(python=python, error=f"exit {done.returncode}: {tail}", warnings=warnings)


def torch_summary() -> list[str]:
    """torch's and torchvision's versions, CUDA build, the GPUs torch sees."""
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


#: Where PyTorch publishes each build's wheels of torch and torchvision together.
PYTORCH_INDEX = "https://download.pytorch.org/whl"
#: torchvision 0.(m + 15).p is built for torch 2.m.p (torchvision's compatibility table, from
#: torch 2.1 / torchvision 0.16 on, the oldest this package supports).
TORCHVISION_MINOR_OFFSET = 15


@dataclass(frozen=True)
class Build:
    """An installed torch or torchvision, read from its files (importing is what fails when the
    two do not match): its version, build label (after ``+``: ``cpu``, ``cu124``; may be empty)
    and, for torchvision, the torch version its metadata pins."""

    name: str
    version: str
    label: str
    pinned_torch: str | None = None


def installed_build(name: str) -> Build | None:
    """The installed ``name`` (``torch`` or ``torchvision``); ``None``: not installed."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    version = _version_in_file(Path(dist.locate_file(f"{name}/version.py"))) or dist.version
    public, _, label = version.partition("+")
    pinned = None
    for requirement in dist.requires or []:
        if found := re.match(r"torch\s*\(?\s*==\s*([^\s,;)]+)", requirement):
            pinned = found.group(1).partition("+")[0]
    return Build(name, public, label, pinned)


def _version_in_file(path: Path) -> str | None:
    """The ``__version__ = '...'`` a package's ``version.py`` assigns (read, not imported)."""
    try:
        found = re.search(
            r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.M
        )
    except (OSError, ValueError):
        return None
    return found.group(1) if found else None


def torch_pair_problem(
    torch: Build | None = None, torchvision: Build | None = None
) -> list[str] | None:
    """Why the installed torch and torchvision cannot work together (a CPU torch with a CUDA
    torchvision, or versions of different releases: importing torchvision then fails, e.g.
    ``operator torchvision::nms does not exist``), ending with the pip command that installs a
    matching pair from one index; ``None`` where they match (or one is missing)."""
    torch = torch or installed_build("torch")
    torchvision = torchvision or installed_build("torchvision")
    if torch is None or torchvision is None:
        return None
    expected = _torchvision_for(torch)
    problems = []
    if torch.label != torchvision.label:
        problems.append(
            f"torch {torch.version}+{torch.label or '(no label)'} and torchvision "
            f"{torchvision.version}+{torchvision.label or '(no label)'} are different builds "
            "(from different package indexes, e.g. a CPU torch and a CUDA torchvision)"
        )
    if expected is not None and _release(torchvision.version)[:2] != _release(expected)[:2]:
        problems.append(
            f"torch {torch.version} goes with torchvision {expected}, not {torchvision.version}"
        )
    elif torchvision.pinned_torch and torchvision.pinned_torch != torch.version:
        problems.append(
            f"torchvision {torchvision.version} is built for torch {torchvision.pinned_torch}, "
            f"not {torch.version}"
        )
    if not problems:
        return None
    pair = f"torch=={torch.version} torchvision" + (f"=={expected}" if expected else "")
    index = f"{PYTORCH_INDEX}/{torch.label}" if torch.label else "https://pypi.org/simple"
    pip = f"{shlex.quote(sys.executable)} -m pip install --force-reinstall"
    fixes = [f"install a matching pair from one index: {pip} --no-deps {pair} --index-url {index}"]
    if torch.label:  # PyTorch's index out of reach: the main index's builds (CUDA, a few GB more)
        fixes.append(
            f"where {index} cannot be reached, the same pair from the main index (CUDA builds, "
            f"which run on a CPU too): {pip} {pair} --index-url https://pypi.org/simple"
        )
    return [*problems, *fixes]


def _torchvision_for(torch: Build) -> str | None:
    """The torchvision release built for ``torch`` (torch 2.x), or ``None`` where unknown."""
    release = _release(torch.version)
    if len(release) < 2 or release[0] != 2:
        return None
    patch = release[2] if len(release) > 2 else 0
    return f"0.{release[1] + TORCHVISION_MINOR_OFFSET}.{patch}"


def _release(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])
