"""What Slurm and the submitit launcher cost, measured on the tests' single-node cluster.

Starts the real cluster of ``tests/slurm/cluster.py`` (Debian's Slurm, installed with apt when
missing and this process is root) and measures, through the submitit launcher:

* cluster start, without accounting and with slurmdbd over MariaDB;
* the launcher's check before anything is submitted (``sinfo``, then ``sbatch --test-only``):
  for a request that fits, and for one Slurm refuses (then each setting is tried alone to name
  the one at fault), median of ``--repeats``;
* submit to start: from the launcher call to the first line of a one-job command, median of
  ``--repeats``;
* a 16-job array of ``sleep S`` (1 CPU each, as many at once as the node has CPUs): its
  makespan next to the ideal ``ceil(16 / CPUs) * S``, and the per-job overhead that follows;
* with ``--domainbed``: 16 real DomainBed jobs (RotatedDigits, ERM, Aggregate, MultiHead and DMG
  on each of its 4 test domains, ``--steps`` steps) through ``dmg-domainbed sweep`` as one
  Slurm array, next to the same sweep through ``local_parallel`` on the same cores.

Usage: ``python benchmarks/slurm_array.py [--sleep 5] [--repeats 5] [--domainbed]
[--steps 20]``. Prints a table; the machine's load average is printed with it, since other
work on the cores stretches every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slurm.cluster import SlurmCluster, start_cluster  # noqa: E402

N_JOBS = 16
SWEEP = """
[sweep]
algorithms = ["ERM", "Aggregate", "MultiHead", "DMG"]
datasets = ["RotatedDigits"]
n_hparams = 1
n_trials = 1
steps = {steps}
single_test_envs = true
data_dir = "{data}"
output_dir = "{output}"

[launcher]
name = "submitit"
cpus = 1
mem_gb = 1
wait = true
"""


def job_env(cluster: SlurmCluster, **settings: str) -> dict[str, str]:
    env = cluster.env()
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update({f"DMG_SUBMITIT_{k.upper()}": v for k, v in settings.items()})
    return env


def launch(env: dict[str, str], commands: list[str]) -> None:
    code = (
        "import json, sys\n"
        "from dmg_domainbed.launchers.submitit_launcher import submitit_launcher\n"
        "submitit_launcher(json.loads(sys.argv[1]))\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, json.dumps(commands)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def cluster_start(accounting: bool, folder: Path) -> tuple[SlurmCluster, float]:
    started = time.monotonic()
    cluster = start_cluster(folder / ("accounting" if accounting else "plain"), accounting)
    return cluster, time.monotonic() - started


def check_times(cluster: SlurmCluster, repeats: int) -> tuple[list[float], list[float]]:
    from dmg_domainbed.errors import UserError
    from dmg_domainbed.launchers.submitit_launcher import check

    fitting, refused = [], []
    for _ in range(repeats):
        started = time.monotonic()
        check(job_env(cluster, cpus="1", mem_gb="1"))
        fitting.append(time.monotonic() - started)
        started = time.monotonic()
        try:
            check(job_env(cluster, cpus="64"))
        except UserError:
            refused.append(time.monotonic() - started)
    return fitting, refused


def submit_to_start(cluster: SlurmCluster, folder: Path, repeats: int) -> list[float]:
    delays = []
    for i in range(repeats):
        stamp = folder / f"start_{i}"
        env = job_env(cluster, cpus="1", mem_gb="1", wait="true", folder=str(folder / "logs"))
        called = time.time()
        launch(env, [f"date +%s.%N > {stamp}"])
        delays.append(float(stamp.read_text()) - called)
    return delays


def sleep_array(cluster: SlurmCluster, folder: Path, seconds: float) -> float:
    env = job_env(cluster, cpus="1", mem_gb="1", wait="true", folder=str(folder / "logs"))
    started = time.monotonic()
    launch(env, [f"sleep {seconds}"] * N_JOBS)
    return time.monotonic() - started


def domainbed_sweep(cluster: SlurmCluster, folder: Path, steps: int, launcher: str) -> float:
    output = folder / f"sweep_{launcher}"
    sweep_file = folder / f"{launcher}.toml"
    sweep_file.write_text(SWEEP.format(steps=steps, data=folder / "data", output=output))
    env = job_env(cluster)
    env.pop("DMG_LOCAL_PARALLEL_JOBS", None)  # local_parallel: one job per core
    command = [sys.executable, "-m", "dmg_domainbed", "sweep", str(sweep_file)]
    started = time.monotonic()
    result = subprocess.run(
        [*command, "--launcher", launcher], env=env, capture_output=True, text=True
    )
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(
            f"{launcher} sweep failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    done = len(list(output.glob("*/done")))
    if done != N_JOBS:
        raise RuntimeError(f"{launcher}: {done} of {N_JOBS} jobs done")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each array job sleeps")
    parser.add_argument("--repeats", type=int, default=5, help="submit-to-start measurements")
    parser.add_argument("--domainbed", action="store_true", help="also 16 real DomainBed jobs")
    parser.add_argument("--steps", type=int, default=20, help="steps of each DomainBed job")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="slurm_bench_") as tmp:
        folder = Path(tmp)
        plain, plain_s = cluster_start(False, folder)
        plain.stop()
        cluster, accounting_s = cluster_start(True, folder)
        try:
            cpus = int(cluster.run("sinfo", "-h", "-N", "-o", "%c").split()[0])
            rows.append(("cluster start, no accounting", f"{plain_s:.1f} s"))
            rows.append(("cluster start, slurmdbd + MariaDB", f"{accounting_s:.1f} s"))
            kinds = ("a request that fits", "one Slurm refuses")
            for kind, times in zip(kinds, check_times(cluster, args.repeats)):
                rows.append(
                    (
                        f"check before submitting, {kind} ({args.repeats} runs)",
                        f"median {statistics.median(times) * 1000:.0f} ms "
                        f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})",
                    )
                )
            delays = submit_to_start(cluster, folder, args.repeats)
            rows.append(
                (
                    f"submit to start (launcher call to the command), {args.repeats} runs",
                    f"median {statistics.median(delays):.1f} s "
                    f"({min(delays):.1f}-{max(delays):.1f})",
                )
            )
            makespan = sleep_array(cluster, folder, args.sleep)
            rounds = math.ceil(N_JOBS / cpus)
            ideal = rounds * args.sleep
            rows.append(
                (
                    f"{N_JOBS} x sleep {args.sleep:g}, {cpus} at a time: makespan",
                    f"{makespan:.1f} s (ideal {ideal:g} s)",
                )
            )
            rows.append(("per-job overhead", f"{(makespan - ideal) / rounds:.1f} s"))
            if args.domainbed:
                for launcher in ("submitit", "local_parallel"):
                    elapsed = domainbed_sweep(cluster, folder, args.steps, launcher)
                    rows.append(
                        (
                            f"{N_JOBS} DomainBed jobs ({args.steps} steps), {launcher}",
                            f"{elapsed:.1f} s",
                        )
                    )
        finally:
            cluster.stop()

    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    print("-" * (width + 30))
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    print(f"\nload average (1, 5, 15 min) at the end: {os.getloadavg()}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
