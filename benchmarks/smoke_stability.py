"""Is ``smoke``'s step time stable, and is it what a real job of the sweep logs?

Runs ``dmg-domainbed smoke SWEEP --algorithms ... --json`` twice, back to back, then, for each
algorithm, the sweep's job that smoke stood for (its train arguments, the dataset's own number
of steps and checkpoints) through DomainBed's ``train.py`` in a fresh process, and reads the
``step_time`` of its records (each the mean of the steps since the checkpoint before; the
record of step 0, step 0 alone, is left out) and their median. It prints one row per
algorithm: each smoke run's seconds per step (the median after its warm-up), the real job's,
and the ratios. The goal: within 20% of each other and of the real job on a quiet machine.

All three run alike: one at a time, in fresh processes, with ``--threads`` torch threads
(``OMP_NUM_THREADS``) and ``DMG_DOMAINBED_LOADER_WORKERS=1``, as ``local_parallel`` runs the demo's
jobs on a 2-core machine. The machine's load average is printed before and after: on a busy
machine every figure moves.

Usage: ``python benchmarks/smoke_stability.py [--sweep sweeps/demo.toml] [--algorithms ERM DMG]
[--threads 1] [--data_dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tabulate import tabulate

CHECKOUT = Path(__file__).resolve().parents[1]
GOAL = 0.20


def smoke(sweep: Path, algorithms: list[str], results: Path, env: dict) -> dict:
    """One smoke run's measures, by algorithm."""
    command = [sys.executable, "-m", "dmg_domainbed", "smoke", str(sweep), "--algorithms"]
    subprocess.run([*command, *algorithms, "--json", str(results)], env=env, check=True)
    rows = json.loads(results.read_text())["rows"]
    return {row["algorithm"]: row for row in rows}


def real_job(train_args: dict, output: Path, env: dict) -> float:
    """The median ``step_time`` a job of the sweep logs, its records after step 0's."""
    args = {**train_args, "output_dir": str(output)}
    command = [sys.executable, "-m", "domainbed.scripts.train"]
    for key, value in sorted(args.items()):
        values = value if isinstance(value, list) else [value]
        command += [f"--{key}", *map(str, values)]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    return statistics.median(record["step_time"] for record in records[1:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, default=CHECKOUT / "sweeps" / "demo.toml")
    parser.add_argument("--algorithms", nargs="+", default=["ERM", "DMG"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data_dir", default=".", help="the sweep's data (default: %(default)s)")
    args = parser.parse_args(argv)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "DMG_DOMAINBED_LOADER_WORKERS": "1",
    }
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="smoke-stability-") as root:
        runs = [
            smoke(args.sweep.resolve(), args.algorithms, Path(root) / f"smoke{i}.json", env)
            for i in (1, 2)
        ]
        data_dir = os.path.abspath(args.data_dir)
        table = []
        for algorithm in args.algorithms:
            first, second = runs[0][algorithm], runs[1][algorithm]
            train_args = {**first["train_args"], "data_dir": data_dir}
            logged = real_job(train_args, Path(root) / f"job_{algorithm}", env)
            a, b = first["seconds_per_step"], second["seconds_per_step"]
            table.append(
                [algorithm, a, b, logged, b / a, a / logged, b / logged]
                + [max(abs(b / a - 1), abs(a / logged - 1), abs(b / logged - 1)) <= GOAL]
            )
    load_after = os.getloadavg()
    headers = [
        "algorithm",
        "smoke 1 s/step",
        "smoke 2 s/step",
        "real job s/step",
        "smoke 2 / 1",
        "smoke 1 / job",
        "smoke 2 / job",
        f"within {GOAL:.0%}",
    ]
    print(tabulate(table, headers, floatfmt=".4f"))
    print(
        f"{args.sweep.name}, {args.threads} thread(s) a job, one job at a time; "
        f"{os.cpu_count()} cores, load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after"
    )


if __name__ == "__main__":
    main()
