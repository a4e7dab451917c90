"""What the start-up hook costs a Python process that never imports DomainBed.

Installing the package puts ``dmg_domainbed.pth`` in site-packages, so every Python process of
the environment runs the hook. This script builds throwaway virtual environments that see no
other site-packages and differ only in what their site-packages hold:

* ``plain venv``: nothing;
* ``any .pth hook``: a ``.pth`` file running ``import sys``, the floor of any start-up hook
  (site.py reads and executes each such line);
* ``the hook's mechanism, empty``: this package's ``.pth`` line importing an empty package's
  empty ``_startup`` module and calling its ``install()``, which does nothing: the floor of the
  mechanism itself;
* ``with package``: what installing the package puts there (the ``dmg_domainbed`` folder,
  byte-compiled as pip does, and the hook's files); also run with ``DMG_DOMAINBED_DISABLE=1``.

It runs ``python -c pass`` in each, in interleaved rounds (each round runs every configuration
once, in a rotating order) so that other work on the machine hits all of them alike. Per
configuration it prints the median CPU time (user + system, from the kernel's accounting of the
finished child), its difference from the plain venv, the median wall time, the number of modules
loaded at start-up, and the median time ``python -X importtime`` gives the hook's import (its
package and whatever it imports included). The children run without the caller's ``PYTHON*``
and ``DMG_*`` variables.

Usage: ``python benchmarks/startup_cost.py [--rounds N] [--source DIR]``. ``--source`` is the
tree whose ``dmg_domainbed/`` and ``startup/`` are installed (default: this checkout), e.g. an
older commit exported with ``git archive COMMIT | tar -x -C DIR``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
PLAIN = "plain venv"
ANY_HOOK = "any .pth hook (import sys)"
EMPTY_HOOK = "the hook's mechanism, empty"
WITH_PACKAGE = "with package"
DISABLED = "with package, DMG_DOMAINBED_DISABLE=1"
PACKAGE = "dmg_domainbed"
EMPTY_PACKAGE = "empty_package"
GOAL_MS = 1.0


@dataclass
class Samples:
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    hook_import_us: list[float] = field(default_factory=list)


def make_venv(folder: Path) -> tuple[Path, Path]:
    """A venv without pip or system site-packages: its python and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return python, Path(out.stdout.strip())


def install(source: Path, site: Path, python: Path) -> None:
    """What installing the package puts in site-packages, byte-compiled."""
    shutil.copytree(source / PACKAGE, site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    for hook in (source / "startup").iterdir():
        shutil.copy(hook, site)
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / PACKAGE)], check=True)


def install_empty_hook(source: Path, site: Path, python: Path) -> None:
    """The package's ``.pth`` line, pointed at an empty package with a no-op ``install()``."""
    (site / EMPTY_PACKAGE).mkdir()
    (site / EMPTY_PACKAGE / "__init__.py").write_text("")
    (site / EMPTY_PACKAGE / "_startup.py").write_text("def install():\n    pass\n")
    line = (source / "startup" / f"{PACKAGE}.pth").read_text()
    (site / f"{EMPTY_PACKAGE}.pth").write_text(line.replace(PACKAGE, EMPTY_PACKAGE))
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / EMPTY_PACKAGE)], check=True)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DMG_"))}
    return env | extra


def timed_run(python: Path, env: dict[str, str]) -> tuple[float, float]:
    """CPU and wall milliseconds of one ``python -c pass``."""
    start = time.perf_counter()
    pid = os.posix_spawn(str(python), [str(python), "-c", "pass"], env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{python} -c pass failed")
    return (usage.ru_utime + usage.ru_stime) * 1e3, wall * 1e3


def hook_import_us(python: Path, env: dict[str, str]) -> float:
    """Microseconds ``-X importtime`` gives the hook's import, with everything it imports (its
    package included); 0 without the hook."""
    result = subprocess.run(
        [str(python), "-X", "importtime", "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in result.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() in (
            f"{PACKAGE}._startup",
            f"{EMPTY_PACKAGE}._startup",
        ):
            return float(parts[1])
    return 0.0


def module_count(python: Path, env: dict[str, str]) -> int:
    code = "import sys; print(len(sys.modules))"
    out = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True)
    return int(out.stdout)


def measure(configs: dict[str, tuple[Path, dict[str, str]]], rounds: int) -> dict[str, Samples]:
    samples = {name: Samples() for name in configs}
    names = list(configs)
    for name in names:  # warm the page cache and the byte-code files
        for _ in range(3):
            timed_run(*configs[name])
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            python, env = configs[name]
            cpu, wall = timed_run(python, env)
            samples[name].cpu_ms.append(cpu)
            samples[name].wall_ms.append(wall)
            samples[name].hook_import_us.append(hook_import_us(python, env))
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="runs per configuration")
    parser.add_argument("--source", type=Path, default=CHECKOUT, help="tree to install")
    args = parser.parse_args(argv)

    source = args.source.resolve()
    with tempfile.TemporaryDirectory() as folder:
        plain, _ = make_venv(Path(folder) / "plain")
        any_hook, site = make_venv(Path(folder) / "any_hook")
        (site / "any_hook.pth").write_text("import sys\n")
        empty_hook, site = make_venv(Path(folder) / "empty_hook")
        install_empty_hook(source, site, empty_hook)
        hooked, site = make_venv(Path(folder) / "hooked")
        install(source, site, hooked)
        configs = {
            PLAIN: (plain, child_env()),
            ANY_HOOK: (any_hook, child_env()),
            EMPTY_HOOK: (empty_hook, child_env()),
            WITH_PACKAGE: (hooked, child_env()),
            DISABLED: (hooked, child_env(DMG_DOMAINBED_DISABLE="1")),
        }
        counts = {name: module_count(*config) for name, config in configs.items()}
        samples = measure(configs, args.rounds)

    print(
        f"python -c pass, {args.rounds} runs each, interleaved; Python {platform.python_version()}"
        f" ({sys.platform}), {os.cpu_count()} CPU cores; package from {args.source}"
    )
    plain_cpu = statistics.median(samples[PLAIN].cpu_ms)
    header = (
        f"{'configuration':<40} {'CPU ms':>7} {'+ plain':>7} {'wall ms':>7} {'modules':>7} "
        f"{'hook import us':>14}"
    )
    print(header)
    print("-" * len(header))
    for name, s in samples.items():
        cpu = statistics.median(s.cpu_ms)
        print(
            f"{name:<40} {cpu:7.2f} {cpu - plain_cpu:+7.2f} {statistics.median(s.wall_ms):7.2f} "
            f"{counts[name]:7d} {statistics.median(s.hook_import_us):14.0f}"
        )
    worst = max(statistics.median(samples[name].cpu_ms) for name in (WITH_PACKAGE, DISABLED))
    verdict = "pass" if worst - plain_cpu <= GOAL_MS else "MISS"
    print(
        f"\nthe package adds {worst - plain_cpu:+.2f} ms CPU to python -c pass "
        f"(goal <= {GOAL_MS:.0f} ms): {verdict}"
    )


if __name__ == "__main__":
    main()
