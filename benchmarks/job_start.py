"""How fast DomainBed jobs go through ``local_parallel``: new processes vs forked warm, and
several jobs per GPU.

``cpu``: the demo's jobs (ERM, Aggregate, MultiHead and DMG on each of RotatedDigits' 4 test
domains: 16 runs of DomainBed's own ``train.py`` with default hparams), launched as DomainBed's
sweep writes them, through ``local_parallel`` twice: as new processes
(``DMG_LOCAL_PARALLEL_WARM=0``) and warm, from multiprocessing's fork server. Per mode: wall
time, jobs per minute, the mean wall time of one job and the CPU time one job took (the jobs'
and, for warm jobs, the fork server's, whose one-time start is also printed on its own; other
work on the machine does not inflate CPU times as it does wall times); ``--steps 1`` measures
start-up alone. ``--rounds`` repeats both modes, alternating, and reports the median.

``gpu --data_dir DIR``: a PACS-shaped sweep on the GPUs: ERM with DomainBed's ResNet-50
(torchvision's, ``resnet50_augmix`` off; ``--resnet18``: its ResNet-18) on DomainBed's own PACS
loader reading ``DIR/PACS/<domain>/<class>/*.jpg``, with the weights file DomainBed loads in
torch's hub cache (random weights are enough: only speed is measured; ``dmg-domainbed doctor
--dataset PACS --hparams '{"resnet50_augmix": false}'`` names the file). ``--synthetic`` writes
both, random, into a temporary folder instead (``--data_dir`` is then not needed); ``--dataset``
names another dataset (``RotatedDigits``: the embedded one, no files). ``--device cpu`` runs the
same waves on the CPU (no GPU figures: the code path, and a job's phases on this machine). For
each number of jobs per GPU
(default 1, 2 and 4), one wave of that many jobs on every GPU, started together: images/s per
job (the batch of all training domains over DomainBed's mean step time after step 0, so data
loading included) and in total, the mean GPU utilisation while every job was training, the peak
memory nvidia-smi saw per GPU and the peak torch allocated per job. Every job runs under
:mod:`dmg_domainbed.smoke.clock`, and a second table breaks the mean job's wall time into its
phases (:data:`~dmg_domainbed.smoke.clock.BREAKDOWN`: the launch, imports, data, network,
step 0, the other steps, evaluation at the checkpoints, the end). The last line recommends a
``jobs_per_gpu`` per precision (:func:`recommend`). ``--algorithms`` runs
other algorithms than ERM on the same network, one after the other. With ``--precision bf16``
every wave runs twice, in fp32 and with the hparam ``precision = "bf16"``
(:mod:`dmg_domainbed.precision`), and a row per algorithm and jobs per GPU gives the speed-up
in images/s per GPU (bf16 / fp32). Without the flag, the output is as described above.
``--json PATH`` also writes every wave's figures there, one object per wave.

Usage: ``python benchmarks/job_start.py cpu [--steps 1 1500] [--jobs N] [--rounds R]`` or
``python benchmarks/job_start.py gpu --data_dir DIR [--jobs_per_gpu 1 2 4] [--steps 300]
[--algorithms ERM DMG] [--precision bf16] [--json PATH] [--device cpu] [--synthetic]
[--resnet18] [--dataset NAME] [--checkpoint_freq N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from domainbed import datasets
from domainbed.lib import misc
from domainbed.scripts.sweep import Job

from dmg_domainbed import precision as precisions
from dmg_domainbed import synthetic
from dmg_domainbed.datasets import input_shape
from dmg_domainbed.launchers.common import output_dir_of
from dmg_domainbed.launchers.local_parallel import Outcome, Plan, run_commands, usable_cores
from dmg_domainbed.launchers.local_parallel import visible_gpus as gpus_here
from dmg_domainbed.preflight.data import dataset_status
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.smoke import clock
from dmg_domainbed.weight_files import Caches

DEMO_ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG")
GPU_HPARAMS = {"resnet18": False, "resnet50_augmix": False}
CLOCK = "dmg_domainbed.smoke.clock"
CLOCK_FILE = "clock.json"  # in each job's folder
GAIN = 1.10  # the images/s per GPU one more step of packing must add to be recommended


def sweep_commands(
    output_dir: Path,
    dataset: str,
    algorithms: list[str],
    test_envs: list[list[int]],
    steps: int,
    data_dir: str,
    trials: int = 1,
    checkpoint_freq: int | None = None,
    hparams: dict | None = None,
) -> list[str]:
    """The commands DomainBed's sweep writes for these jobs (default hparams)."""
    commands = []
    for trial in range(trials):
        for algorithm in algorithms:
            for envs in test_envs:
                args = {
                    "dataset": dataset,
                    "algorithm": algorithm,
                    "test_envs": envs,
                    "holdout_fraction": 0.2,
                    "hparams_seed": 0,
                    "data_dir": data_dir,
                    "task": "domain_generalization",
                    "trial_seed": trial,
                    "seed": misc.seed_hash(dataset, algorithm, envs, 0, trial),
                    "steps": steps,
                }
                if checkpoint_freq is not None:
                    args["checkpoint_freq"] = checkpoint_freq
                if hparams:
                    args["hparams"] = json.dumps(hparams, sort_keys=True)
                commands.append(Job(args, str(output_dir)).command_str)
    return commands


def fork_server() -> psutil.Process | None:
    """multiprocessing's fork server, a child of this process once a warm job has started."""
    for child in psutil.Process().children():
        if "multiprocessing.forkserver" in " ".join(child.cmdline()):
            return child
    return None


def children_cpu_seconds() -> float:
    """CPU time of this process's ended children (the jobs started as new processes) and of
    the fork server with its ended children (the warm jobs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = fork_server()
    times = server.cpu_times() if server else None
    warm = sum(times[:4]) if times else 0.0  # user, system, children_user, children_system
    return usage.ru_utime + usage.ru_stime + warm


def run_wave(
    commands: list[str], plan: Plan, warm_module: str = "domainbed.scripts.train"
) -> tuple[float, float, list[Outcome]]:
    """Wall time, CPU time of the jobs and outcomes of the commands through local_parallel;
    stops on a failure."""
    start, cpu_start = time.monotonic(), children_cpu_seconds()
    outcomes = run_commands(commands, plan, say=lambda line: None, warm_module=warm_module)
    wall, cpu = time.monotonic() - start, children_cpu_seconds() - cpu_start
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        sys.exit(f"{len(failed)} job(s) failed, e.g. {failed[0].command}\n  log: {failed[0].log}")
    return wall, cpu, outcomes


def cpu_benchmark(args: argparse.Namespace, scratch: Path) -> None:
    jobs = args.jobs or usable_cores()
    threads = max(1, usable_cores() // jobs)
    n_envs = datasets.num_environments("RotatedDigits")
    test_envs = [[i] for i in range(n_envs)]
    header = (
        f"{'steps':>6} {'start':<12} {'jobs':>5} {'at once':>7} {'wall s':>8} {'jobs/min':>9} "
        f"{'x new':>6} {'job s':>7} {'CPU s/job':>9}"
    )
    count = len(args.algorithms) * n_envs
    print(f"{count} jobs per run; {jobs} at a time, {threads} thread(s) each")
    print(header)
    print("-" * len(header))
    for steps in args.steps:
        walls: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        job_seconds: dict[bool, list[float]] = {False: [], True: []}
        for round_index in range(args.rounds):
            for warm in (False, True):
                folder = scratch / f"steps{steps}_round{round_index}_{'warm' if warm else 'new'}"
                commands = sweep_commands(
                    folder, "RotatedDigits", args.algorithms, test_envs, steps, str(scratch)
                )
                plan = Plan(jobs=jobs, gpus=(), threads=threads, loader_workers=threads, warm=warm)
                wall, cpu, outcomes = run_wave(commands, plan)
                if warm and not all(outcome.warm for outcome in outcomes):
                    sys.exit("the jobs did not start warm here; see local_parallel's message")
                walls[warm].append(wall)
                cpus[warm].append(cpu / len(outcomes))
                job_seconds[warm] += [outcome.seconds for outcome in outcomes]
        fresh_wall = statistics.median(walls[False])
        for warm in (False, True):
            wall = statistics.median(walls[warm])
            count = len(job_seconds[warm]) // args.rounds
            print(
                f"{steps:>6} {'warm' if warm else 'new process':<12} {count:>5} {jobs:>7} "
                f"{wall:>8.1f} {60 * count / wall:>9.1f} {fresh_wall / wall:>6.2f} "
                f"{statistics.mean(job_seconds[warm]):>7.2f} {statistics.median(cpus[warm]):>9.2f}"
            )
    server = fork_server().cpu_times()
    print(f"fork server: started once, {server.user + server.system:.2f} s CPU of its own")


@dataclass
class GpuSample:
    gpu: str
    utilisation: float
    memory_mib: float


def nvidia_smi_samples() -> list[GpuSample]:
    """Utilisation and memory of every GPU now; none where nvidia-smi cannot tell."""
    try:
        listing = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,utilization.gpu,memory.used",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    samples = []
    for line in listing.splitlines():
        index, utilisation, memory = (field.strip() for field in line.split(","))
        samples.append(GpuSample(index, float(utilisation), float(memory)))
    return samples


class GpuSampler:
    """nvidia-smi once a second while a wave runs; utilisation kept only while every job of
    the wave is training (past its first checkpoint, not done)."""

    def __init__(self, job_dirs: list[Path], gpus: tuple[str, ...]) -> None:
        self.job_dirs = job_dirs
        self.gpus = set(gpus)
        self.training_utilisation: list[float] = []
        self.peak_memory_mib: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _all_training(self) -> bool:
        return all(
            (d / "results.jsonl").exists() and not (d / "done").exists() for d in self.job_dirs
        )

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            training = self._all_training()
            for sample in nvidia_smi_samples():
                if sample.gpu not in self.gpus:
                    continue
                peak = self.peak_memory_mib.get(sample.gpu, 0.0)
                self.peak_memory_mib[sample.gpu] = max(peak, sample.memory_mib)
                if training:
                    self.training_utilisation.append(sample.utilisation)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def clocked(command: str) -> str:
    """DomainBed's train command run under :mod:`dmg_domainbed.smoke.clock`, its marks written
    into the job's folder."""
    python, flag, module, *arguments = shlex.split(command)
    times = Path(output_dir_of(command)) / CLOCK_FILE
    return shlex.join([python, flag, CLOCK, str(times), *arguments])


def job_phases(outcome: Outcome) -> dict[str, float]:
    """The phases of a finished clocked job, from its marks and when it ended."""
    marks = json.loads((Path(output_dir_of(outcome.command)) / CLOCK_FILE).read_text())
    started = time.time() - (time.monotonic() - outcome.started)
    return clock.breakdown(started, started + outcome.seconds, marks)


def expected_wall(figures: list[dict], per_gpu: int) -> float:
    """A wave of ``per_gpu`` jobs per GPU, foreseen from those run: the longest so far, scaled
    as if the GPU were the bound (twice the jobs, twice the time); 0 before the first."""
    return max((w["wall"] * max(1.0, per_gpu / w["jobs_per_gpu"]) for w in figures), default=0.0)


def recommend(waves: list[dict], gain: float = GAIN) -> dict[str, int]:
    """Per precision, the jobs per GPU to run: from the fewest measured, one more step of
    packing is taken while it gives at least ``gain`` times the images/s per GPU, summed over
    the algorithms measured at every step (packing host-bound jobs fills the GPU's idle time;
    packing GPU-bound jobs only shares it)."""
    chosen = {}
    for precision in dict.fromkeys(w["precision"] for w in waves):
        own = [w for w in waves if w["precision"] == precision]
        counts = sorted({w["jobs_per_gpu"] for w in own})
        algorithms = [
            a
            for a in dict.fromkeys(w["algorithm"] for w in own)
            if {w["jobs_per_gpu"] for w in own if w["algorithm"] == a} == set(counts)
        ]

        totals = {
            count: sum(
                w["images_per_s_per_gpu"]
                for w in own
                if w["jobs_per_gpu"] == count and w["algorithm"] in algorithms
            )
            for count in counts
        }
        best = counts[0]
        for count in counts[1:]:
            if totals[count] < gain * totals[best]:
                break
            best = count
        chosen[precision] = best
    return chosen


def job_records(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]


@dataclass
class Wave:
    """One wave of jobs on the GPUs: what each job trained at and what the GPUs saw."""

    images_per_s_per_job: list[float]
    utilisation: str
    memory_gb: float
    torch_gb_per_job: float
    first_step_s: float  # DomainBed's step 0 (a checkpoint of its own), mean over the jobs
    wall: float
    phases: dict[str, float]  # clock.BREAKDOWN's seconds, mean over the jobs

    @property
    def images_per_s(self) -> float:
        return sum(self.images_per_s_per_job)


def gpu_wave(
    args: argparse.Namespace,
    folder: Path,
    algorithm: str,
    hparams: dict,
    jobs: int,
    gpus: tuple[str, ...],
    cores: int,
    training_domains: int,
) -> Wave:
    """``jobs`` jobs of ``algorithm`` on PACS started together on ``gpus``."""
    commands = sweep_commands(
        folder,
        args.dataset,
        [algorithm],
        [[0]],
        args.steps,
        args.data_dir,
        trials=jobs,
        checkpoint_freq=args.checkpoint_freq or args.steps,
        hparams=hparams,
    )
    threads = max(1, cores // jobs)
    plan = Plan(jobs=jobs, gpus=gpus, threads=threads, loader_workers=threads, warm=args.warm)
    job_dirs = [Path(output_dir_of(command)) for command in commands]
    with GpuSampler(job_dirs, gpus) as sampler:
        wall, _, outcomes = run_wave([clocked(c) for c in commands], plan, warm_module=CLOCK)
    records = [job_records(d) for d in job_dirs]
    phases = [job_phases(outcome) for outcome in outcomes]
    utilisation = (
        f"{statistics.mean(sampler.training_utilisation):.0f}"
        if sampler.training_utilisation
        else "-"
    )
    return Wave(
        [args.batch_size * training_domains / r[-1]["step_time"] for r in records],
        utilisation,
        max(sampler.peak_memory_mib.values(), default=float("nan")) / 1024,
        max(r[-1]["mem_gb"] for r in records),
        statistics.mean(r[0]["step_time"] for r in records),
        wall,
        {name: statistics.mean(p[name] for p in phases) for name in clock.BREAKDOWN},
    )


def write_synthetic(args: argparse.Namespace, hparams: dict, scratch: Path) -> None:
    """Random weights where the jobs read them and a synthetic folder of ``args.dataset``
    holding enough images for a batch of every split, under ``scratch``."""
    caches = Caches.under(scratch / "cache")
    os.environ.update(caches.environment())  # the jobs read the random weights from here
    files, problems = needed_weights(hparams, input_shape(args.dataset), caches)
    if problems:
        sys.exit(f"gpu: cannot place the weights DomainBed loads: {problems}")
    synthetic.write_random_weights(files)
    if args.dataset not in synthetic.LAYOUTS:
        args.data_dir = str(scratch)  # an embedded dataset: no folder
        return
    classes = len(synthetic.LAYOUTS[args.dataset].classes)
    per_domain = 2 * synthetic.images_needed(args.batch_size, 0.2, classes=classes)
    args.data_dir = str(scratch / "data")
    synthetic.write_image_dataset(args.dataset, args.data_dir, images_per_domain=per_domain)


def gpu_benchmark(args: argparse.Namespace, scratch: Path) -> None:
    gpus = tuple(gpus_here()) if args.device == "cuda" else ()
    if args.device == "cuda" and not gpus:
        sys.exit("gpu: no GPU here (nvidia-smi lists none and CUDA_VISIBLE_DEVICES names none)")
    dataset = datasets.get_dataset_class(args.dataset)
    resnet = tuple(input_shape(args.dataset)) == (3, 224, 224)
    hparams = {"batch_size": args.batch_size}
    if resnet:
        hparams.update(GPU_HPARAMS, resnet18=args.resnet18)
    if args.synthetic:
        write_synthetic(args, hparams, scratch)
    if args.data_dir is None:
        sys.exit("gpu: give --data_dir DIR (the dataset's folder), or --synthetic")
    found = dataset_status(
        args.dataset, dataset.__module__, len(dataset.ENVIRONMENTS), args.data_dir
    )
    if not found.ok:
        sys.exit(f"gpu: {args.dataset} data not found under --data_dir: {found.detail}")
    files, problems = needed_weights(hparams, input_shape(args.dataset))
    missing = [str(f.path) for f in files if not f.present] + problems
    if missing:
        sys.exit(f"gpu: the weights DomainBed loads are not cached: {', '.join(missing)}")
    cores = usable_cores()
    devices = max(1, len(gpus))  # the CPU counts as one
    training_domains = len(dataset.ENVIRONMENTS) - 1
    compare = args.precision != precisions.FP32
    precisions_run = (precisions.FP32, args.precision) if compare else (None,)
    columns = f"{'algorithm':<15} {'precision':<9} " if compare else ""
    header = (
        f"{columns}{'jobs/GPU':>8} {'jobs':>5} {'img/s/job':>10} {'img/s':>8} {'GPU util %':>10} "
        f"{'GPU mem GB':>10} {'torch GB/job':>12} {'step 0 s':>8} {'wall s':>7}"
    )
    network = ("ResNet-18" if args.resnet18 else "ResNet-50") if resnet else "DomainBed's"
    print(
        f"{', '.join(args.algorithms)}, {network} network (random weights), {args.dataset} "
        f"{'x'.join(map(str, input_shape(args.dataset)))}, {args.batch_size} images x "
        f"{training_domains} domains a step, {args.steps} steps; "
        f"{'GPUs ' + ','.join(gpus) if gpus else 'on the CPU'}; {cores} CPU cores"
    )
    print(header)
    print("-" * len(header))
    speedups, figures = [], []
    deadline = time.monotonic() + args.budget_s
    skipped = []
    for algorithm in args.algorithms:
        for per_gpu in args.jobs_per_gpu:
            jobs = per_gpu * devices
            waves = {}
            for precision in precisions_run:
                if time.monotonic() + expected_wall(figures, per_gpu) > deadline:
                    skipped.append(f"{algorithm} {precision or ''} {per_gpu} per GPU".strip())
                    continue
                name = f"{algorithm}_per_gpu{per_gpu}" if compare else f"per_gpu{per_gpu}"
                folder = scratch / (f"{name}_{precision}" if compare else name)
                wave_hparams = dict(hparams)
                if precision not in (None, precisions.FP32):
                    wave_hparams[precisions.HPARAM] = precision
                wave = gpu_wave(
                    args, folder, algorithm, wave_hparams, jobs, gpus, cores, training_domains
                )
                waves[precision] = wave
                figures.append(
                    {
                        "algorithm": algorithm,
                        "precision": precision or precisions.FP32,
                        "jobs_per_gpu": per_gpu,
                        "gpus": len(gpus),
                        "images_per_s_per_gpu": wave.images_per_s / devices,
                        **asdict(wave),
                    }
                )
                label = f"{algorithm:<15} {precision:<9} " if compare else ""
                print(
                    f"{label}{per_gpu:>8} {jobs:>5} "
                    f"{statistics.mean(wave.images_per_s_per_job):>10.0f} "
                    f"{wave.images_per_s:>8.0f} {wave.utilisation:>10} {wave.memory_gb:>10.1f} "
                    f"{wave.torch_gb_per_job:>12.1f} {wave.first_step_s:>8.1f} {wave.wall:>7.0f}",
                    flush=True,
                )
            if compare and len(waves) == 2:
                speedups.append((algorithm, per_gpu, waves[precisions.FP32], waves[args.precision]))
    if compare:
        header = (
            f"{'algorithm':<15} {'jobs/GPU':>8} {'fp32 img/s/GPU':>14} "
            f"{args.precision + ' img/s/GPU':>14} {'speed-up':>8}"
        )
        print(f"\n{args.precision} against fp32 (images/s per GPU, same jobs, same machine)")
        print(header)
        print("-" * len(header))
        for algorithm, per_gpu, fp32, lower in speedups:
            fp32_per_gpu, lower_per_gpu = (w.images_per_s / devices for w in (fp32, lower))
            print(
                f"{algorithm:<15} {per_gpu:>8} {fp32_per_gpu:>14.0f} {lower_per_gpu:>14.0f} "
                f"{lower_per_gpu / fp32_per_gpu:>8.2f}"
            )
    if skipped:
        print(
            f"\nnot run, the longest wave so far would not fit in --budget_s {args.budget_s:g}: "
            + "; ".join(skipped)
        )
    print_phases(figures)
    chosen = recommend(figures)
    print(
        "\nrecommended jobs_per_gpu (the most images/s per GPU, each step up adding at least "
        f"{GAIN - 1:.0%}): " + ", ".join(f"{p} {n}" for p, n in chosen.items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


def print_phases(figures: list[dict]) -> None:
    """Where the mean job of each wave spent its wall time."""
    names = ("algorithm", "precision", "jobs/GPU", *clock.BREAKDOWN, "wall")
    header = " ".join(f"{name:>11}" for name in names)
    print("\nseconds of the mean job of each wave, in phases (smoke/clock.py's)")
    print(header)
    print("-" * len(header))
    for wave in figures:
        phases = wave["phases"]
        cells = [wave["algorithm"], wave["precision"], str(wave["jobs_per_gpu"])]
        cells += [f"{phases[name]:.2f}" for name in clock.BREAKDOWN]
        cells.append(f"{sum(phases.values()):.2f}")
        print(" ".join(f"{cell:>11}" for cell in cells))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    cpu = modes.add_parser("cpu", help="the demo's jobs on CPU, new processes vs warm")
    cpu.add_argument("--steps", type=int, nargs="+", default=[1, 1500])
    cpu.add_argument("--jobs", type=int, default=None, help="at once (default: CPU cores)")
    cpu.add_argument("--rounds", type=int, default=1)
    cpu.add_argument("--algorithms", nargs="+", default=list(DEMO_ALGORITHMS))
    gpu = modes.add_parser("gpu", help="a PACS-shaped sweep at several jobs per GPU")
    gpu.add_argument("--data_dir", help="holds PACS/<domain>/<class>/*.jpg")
    gpu.add_argument(
        "--synthetic", action="store_true", help="random images and weights, in a temporary folder"
    )
    gpu.add_argument("--dataset", default="PACS", help="default: PACS")
    gpu.add_argument("--resnet18", action="store_true", help="DomainBed's ResNet-18, not 50")
    gpu.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    gpu.add_argument(
        "--checkpoint_freq", type=int, help="evaluate every N steps (default: step 0 and the last)"
    )
    gpu.add_argument("--jobs_per_gpu", type=int, nargs="+", default=[1, 2, 4])
    gpu.add_argument("--steps", type=int, default=300)
    gpu.add_argument("--batch_size", type=int, default=32, help="per training domain")
    gpu.add_argument("--new_processes", dest="warm", action="store_false")
    gpu.add_argument(
        "--algorithms", nargs="+", default=["ERM"], help="each on the same network, in turn"
    )
    gpu.add_argument(
        "--precision",
        choices=precisions.CHOICES,
        default=precisions.FP32,
        help="bf16: every wave in fp32 and in bf16, and the speed-up per algorithm",
    )
    gpu.add_argument("--json", help="also write every wave's figures to this file")
    gpu.add_argument(
        "--budget_s",
        type=float,
        default=math.inf,
        help="start a wave only if the longest so far, scaled to its jobs, still fits",
    )
    for mode in (cpu, gpu):
        mode.add_argument("--output_dir", help="keep the job folders here (default: deleted)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.output_dir or scratch)
        (cpu_benchmark if args.mode == "cpu" else gpu_benchmark)(args, folder)


if __name__ == "__main__":
    main()
