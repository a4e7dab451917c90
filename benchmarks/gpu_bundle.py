"""Build, on a machine with the package registry, the folder a GPU machine without network needs
to run ``benchmarks/gpu_proof.py``, and print the one command to run there.

The GPU machine is expected to have Python 3.12 with torch, torchvision, timm, pandas, scipy,
pytest, pytest-xdist and tensorboard installed. The folder (``gpu_bundle/`` at the repository
root by default, ignored by git) holds:

* ``wheels/``: what the package, DomainBed and the tests import beyond those (:data:`WHEELS`,
  at the versions installed here, which the tests ran with), downloaded for Python 3.12
  (``pip download --no-deps --only-binary=:all:``; built here with ``pip wheel --no-deps`` for
  one published as source only), and this package's own wheel (``pip wheel --no-deps .``);
* ``DomainBed/``: DomainBed at the commit this package is tested against, from a local checkout
  (``git archive``);
* ``COMMIT``: this checkout's commit, which the results file records;
* ``run.sh``: on the GPU machine, installs the wheels of distributions missing there or at a
  version this package does not accept, and this package's (``pip install --no-index
  --no-deps``; the machine's own copies of the others stay), stops in
  seconds, naming them, where a distribution the package needs, directly or through another, is
  still missing (the GPU machine lacks one this list assumes), puts DomainBed on a ``.pth``
  file, keeps torch's and Hugging Face's caches under ``/tmp`` offline, and runs
  ``benchmarks/gpu_proof.py --output_dir OUTPUT_DIR`` from the repository root.

The folder and the working tree travel together to the GPU machine; there,
``bash gpu_bundle/run.sh OUTPUT_DIR`` (extra arguments go to ``gpu_proof.py``).

Usage: ``python benchmarks/gpu_bundle.py [--bundle DIR] [--domainbed CHECKOUT]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# What DomainBed (wilds and what it imports), the package and its tests need beyond what the GPU
# machine is expected to have (torch, torchvision, timm, pandas, scipy, pytest, pytest-xdist,
# tensorboard and what they require). The machine's own copies win: run.sh installs a wheel only
# where its distribution is missing there or at a version this package does not accept (a pytest
# too new for pytest-xdist's grouping: pyproject.toml), and this package's wheel always.
WHEELS = """
pytest wilds ogb outdated littleutils pytz flufl.lock atpublic scikit-posthocs submitit cloudpickle
parameterized hatchling pathspec tomlkit trove-classifiers tabulate psutil tqdm scikit-learn
joblib threadpoolctl matplotlib contourpy cycler fonttools kiwisolver pyparsing seaborn
statsmodels patsy formulaic interface-meta narwhals wrapt requests urllib3 idna certifi
charset-normalizer six
""".split()

RUN_SH = r"""#!/usr/bin/env bash
# Written by benchmarks/gpu_bundle.py. On a GPU machine without network, from anywhere:
#   bash gpu_bundle/run.sh OUTPUT_DIR [more arguments of benchmarks/gpu_proof.py]
# PYTHON chooses the interpreter (default python3).
set -euo pipefail
bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$bundle")"
output="${1:?usage: bash gpu_bundle/run.sh OUTPUT_DIR [gpu_proof.py arguments]}"
shift
python="${PYTHON:-python3}"

errors=/tmp/gpu_bundle_pip.err
install() {
  "$python" -m pip install --no-index --no-deps --quiet "$@" 2>"$errors" || {
    # An interpreter marked as managed by the system refuses plain installs.
    grep -q externally-managed "$errors" || { cat "$errors" >&2; exit 1; }
    "$python" -m pip install --no-index --no-deps --quiet --break-system-packages "$@"
  }
}
# A wheel whose distribution the machine already has, at a version the package accepts, is left
# out: its own copy stays.
mapfile -t wheels < <("$python" - "$bundle"/wheels/*.whl <<'PY'
import email
import importlib.metadata as metadata
import os
import sys
import zipfile

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename

wheels = {parse_wheel_filename(os.path.basename(wheel))[0]: wheel for wheel in sys.argv[1:]}
with zipfile.ZipFile(wheels["dmg-domainbed"]) as package:
    info = next(name for name in package.namelist() if name.endswith(".dist-info/METADATA"))
    requires = email.message_from_bytes(package.read(info)).get_all("Requires-Dist") or []
accepted = {}
for requirement in map(Requirement, requires):
    name = canonicalize_name(requirement.name)
    accepted[name] = accepted.get(name, SpecifierSet()) & requirement.specifier
for name, wheel in wheels.items():
    try:
        keep = metadata.version(name) in accepted.get(name, SpecifierSet())
    except metadata.PackageNotFoundError:
        keep = False
    if name == "dmg-domainbed" or not keep:
        print(wheel)
PY
)
install "${wheels[@]}"
site="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$bundle/DomainBed" > "$site/domainbed_checkout.pth"
"$python" - <<'PY'
# Every distribution the package requires, and what those require in turn (with DomainBed's,
# Slurm's and the tests' extras, ruff aside), is installed: checked before any GPU work, so that a
# missing one stops here in seconds.
import importlib.metadata as metadata
import sys

from packaging.requirements import Requirement

EXTRAS = ("domainbed", "slurm", "test")
missing, seen = [], set()


def walk(name: str, extras: tuple[str, ...]) -> None:
    try:
        requirements = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        missing.append(name)
        return
    for text in requirements:
        requirement = Requirement(text)
        marker = requirement.marker
        if requirement.name == "ruff" or (
            marker and not any(marker.evaluate({"extra": extra}) for extra in extras or ("",))
        ):
            continue
        key = (requirement.name.lower(), tuple(sorted(requirement.extras)))
        if key not in seen:
            seen.add(key)
            walk(requirement.name, key[1])


walk("dmg-domainbed", EXTRAS)
if missing:
    sys.exit(
        f"not installed here: {', '.join(sorted(set(missing)))}. Add them (and what they need) "
        "to WHEELS in benchmarks/gpu_bundle.py, build the bundle again and rerun; no GPU work "
        "was started."
    )
PY

# DomainBed's sweeps and the tests start `python`: make sure it is this interpreter.
if [ "$(command -v python || true)" != "$(command -v "$python")" ]; then
  mkdir -p /tmp/gpu_bundle_bin
  ln -sf "$(command -v "$python")" /tmp/gpu_bundle_bin/python
  export PATH="/tmp/gpu_bundle_bin:$PATH"
fi
export TORCH_HOME=/tmp/gpu_bundle_cache/torch HF_HOME=/tmp/gpu_bundle_cache/huggingface
export HF_HUB_OFFLINE=1
"$python" -c 'import domainbed.algorithms, dmg_domainbed, wilds; dmg_domainbed.register()'

cd "$root"
commit="$(cat "$bundle/COMMIT")"
exec "$python" benchmarks/gpu_proof.py --output_dir "$output" --commit "$commit" "$@"
"""


def run(command: Sequence[str], cwd: Path = ROOT) -> str:
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def pinned(name: str) -> str:
    """``name==VERSION`` as installed here, or ``name`` where it is not installed."""
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def download_wheels(wheels: Path) -> None:
    pip = [sys.executable, "-m", "pip"]
    platforms = [word for platform in PLATFORMS for word in ("--platform", platform)]
    for requirement in map(pinned, WHEELS):
        try:
            run(
                [
                    *pip,
                    *("download", "--no-deps", "--only-binary=:all:", "--dest", str(wheels)),
                    *("--python-version", PYTHON_VERSION, "--implementation", "cp"),
                    *platforms,
                    *("--platform", "any", requirement),
                ]
            )
        except subprocess.CalledProcessError:  # published as source only: build it here
            run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), requirement])
    run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)])


def extract_domainbed(checkout: Path, commit: str, bundle: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(checkout), "archive", commit], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(bundle / "DomainBed", filter="data")


def this_commit() -> str:
    commit = run(["git", "rev-parse", "--short", "HEAD"]).strip()
    changed = run(["git", "status", "--porcelain", "--untracked-files=no"]).strip()
    return f"{commit} with uncommitted changes" if changed else commit


def main(argv: Sequence[str] | None = None) -> int:
    from dmg_domainbed import TESTED_DOMAINBED_COMMIT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", default=str(ROOT / "gpu_bundle"), help="the folder to build")
    parser.add_argument(
        "--domainbed",
        default=None,
        help="a DomainBed git checkout holding the tested commit (default: the one imported)",
    )
    args = parser.parse_args(argv)
    bundle = Path(args.bundle)
    if bundle.exists():
        parser.error(f"{bundle} exists; it is left as it is: remove it, or pass another --bundle")
    checkout = args.domainbed
    if checkout is None:
        import domainbed

        checkout = str(Path(domainbed.__file__).resolve().parents[1])
    partial = bundle.with_name(f".{bundle.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "wheels").mkdir(parents=True)
    download_wheels(partial / "wheels")
    extract_domainbed(Path(checkout), TESTED_DOMAINBED_COMMIT, partial)
    (partial / "COMMIT").write_text(this_commit() + "\n")
    (partial / "run.sh").write_text(RUN_SH)
    partial.rename(bundle)  # whole or not at all
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file()) / 2**20
    print(f"\nbuilt {bundle} ({size:.1f} MiB). On the GPU machine, with this working tree:")
    print(
        f"  bash {bundle.relative_to(ROOT) if bundle.is_relative_to(ROOT) else bundle}/run.sh OUT"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
