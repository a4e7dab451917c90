"""Prove the package on the GPU it runs on, in one command: the whole ``gpu`` test lane, every
GPU benchmark and a paired bf16-vs-fp32 accuracy run, into one results file.

Parts, in this order (each in a child process of this one, with a time limit of its own; a part
that fails, or runs out of time and is ended with every process it started, does not stop the
next; a part that cannot run here says why):

1. ``environment``: the device, its driver, Python, torch, CUDA, cuDNN, timm, DomainBed;
2. ``lane_algorithms``: ``pytest -m gpu`` on ``tests/gpu/test_gpu_algorithms.py`` and
   ``test_gpu_bf16.py``, in parallel workers, one per algorithm; at the same time ``accuracy``:
   ERM and DMG trained by DomainBed's ``train.py`` on RotatedDigits in fp32 and in bf16 on every
   test domain and several trial seeds (the same seeds, so the same splits and initialisation,
   in both precisions), through ``local_parallel``; per algorithm, the test accuracy
   (training-domain validation) of each pair, and their mean difference with a 95% Student-t
   interval;
3. ``lane_launchers``: ``pytest -m gpu tests/gpu/test_gpu_launchers.py``, alone on the GPU (it
   counts the processes nvidia-smi lists). A lane ended for time reports what ``pytest -v`` had
   printed;
4. ``step_time``: ``step_time.py --quick --configs resnet50 --precision bf16``, every algorithm;
5. ``job_start``: ``job_start.py gpu --synthetic`` at 1, 2 and 4 jobs per GPU, ERM and DMG, fp32
   and bf16, on a synthetic PACS folder and random ResNet-50 weights: images/s per GPU, each
   job's wall time in phases, and the ``jobs_per_gpu`` they recommend;
6. ``sfmoe_cost``: ``sfmoe_cost.py --quick --configs cuda --precision bf16``.

``OUTPUT_DIR`` receives two files: ``gpu_proof.json`` (the device, driver, torch, CUDA, commit,
date, and every part's status and figures) and ``logs.tar.gz`` (every part's output, the test
lane's JUnit reports, the benchmarks' CSV files, the accuracy runs' records). The GPU tables of
docs/performance.md are generated from a copy of ``gpu_proof.json`` at ``docs/gpu_proof.json``
(``python docs/generate.py``); :func:`markdown` renders them, and this command prints them at its
end. The parts' limits add up to the budget, 8 minutes by default (``--budget_s``).

``--tiny`` runs the same parts at the smallest sizes that exercise them (RotatedDigits' MLP, a
few steps), on any machine: on one without CUDA, the CUDA-only parts (the lane, SF-MoE's cost)
are skipped, each with its reason, and the jobs per GPU run their waves on the CPU. Its figures
are not measurements; the docs refuse a tiny run's results.

Usage: ``python benchmarks/gpu_proof.py --output_dir OUT [--tiny] [--parts NAME ...]
[--budget_s S] [--commit SHA]``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
RESULTS_FILE = "gpu_proof.json"
LOGS_FILE = "logs.tar.gz"
FORMAT = 1
BUDGET_S = 480
PASSED, FAILED, SKIPPED, TIMED_OUT, NOT_RUN = "passed", "failed", "skipped", "timed out", "not run"
NO_CUDA = "no CUDA device here (torch.cuda.is_available() is False)"
LANE_ALGORITHMS = ("tests/gpu/test_gpu_algorithms.py", "tests/gpu/test_gpu_bf16.py")
LANE_LAUNCHERS = ("tests/gpu/test_gpu_launchers.py",)
ACCURACY_DATASET = "RotatedDigits"
COMPARED = ("ERM", "DMG")  # accuracy and jobs per GPU, in fp32 and bf16
JOBS_PER_GPU = (1, 2, 4)
JOB_STEPS = 20  # per job of job_start's waves (2 algorithms x 3 counts x 2 precisions)
JOB_START_MARGIN_S = 20  # of job_start's limit: writing the synthetic data, ending its last wave
END_GRACE_S = 10  # between SIGTERM and SIGKILL for a part out of time


class Skip(Exception):
    """The part cannot run here; the message says why."""


class Failed(Exception):
    """The part ran and failed; ``figures`` holds what it measured all the same."""

    def __init__(self, reason: str, figures: dict):
        super().__init__(reason)
        self.figures = figures


@dataclass(frozen=True)
class Settings:
    tiny: bool
    scratch: Path  # synthetic data and job folders, deleted at the end
    logs: Path  # what goes into logs.tar.gz
    limit_s: float = math.inf  # the running part's time limit, for a part that sizes itself


@dataclass(frozen=True)
class Part:
    name: str
    what: str  # one line, for the results and the docs
    run: Callable[[Settings], dict]
    limit_s: float  # its share of the default budget
    # what its log tells when it is ended for time (the figures it had not returned)
    read_log: Callable[[str], dict] | None = None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def nvidia_smi(query: str) -> str:
    """``nvidia-smi --query-gpu=QUERY`` of the first GPU; empty where it cannot tell."""
    try:
        answer = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = answer.stdout.strip().splitlines()
    return lines[0].strip() if lines else ""


def environment(settings: Settings) -> dict:
    import domainbed
    import timm
    import torch
    import torchvision

    import dmg_domainbed

    figures = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "package": dmg_domainbed.__version__,
        "domainbed": str(Path(domainbed.__file__).resolve().parents[1]),
        "domainbed_tested_commit": dmg_domainbed.TESTED_DOMAINBED_COMMIT[:7],
        "devices": [],
        "driver": nvidia_smi("driver_version"),
    }
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            figures["devices"].append(
                {
                    "name": properties.name,
                    "capability": f"{properties.major}.{properties.minor}",
                    "memory_gib": round(properties.total_memory / 2**30, 1),
                }
            )
    return figures


def junit_summary(report: Path) -> dict:
    """Counts and the failed and skipped tests of a pytest JUnit XML report."""
    passed, failed, skipped = 0, [], []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = next((e for e in case if e.tag in ("failure", "error")), None)
        skip = case.find("skipped")
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append({"test": name, "message": message[0][:300] if message else ""})
        elif skip is not None:
            skipped.append({"test": name, "reason": (skip.get("message") or "")[:300]})
        else:
            passed += 1
    return {
        "tests": passed + len(failed) + len(skipped),
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
    }


def lane(settings: Settings, name: str, files: Sequence[str], workers: int) -> dict:
    """``pytest -m gpu FILES`` in ``workers`` workers (0: in the pytest process)."""
    if not cuda_available():
        raise Skip(f"{NO_CUDA}: every test of the lane would skip")
    report = settings.logs / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-v", "-rfEs"]
    command += ["-n", str(workers), "--junitxml", str(report), *files]
    print("$", " ".join(command), flush=True)
    code = subprocess.run(command, cwd=ROOT).returncode
    figures = junit_summary(report) if report.exists() else {}
    figures["command"] = f"python -m pytest -m gpu -n {workers} {' '.join(files)}"
    if code != 0:
        failed = len(figures.get("failed", []))
        raise Failed(f"pytest exited with status {code}, {failed} test(s) failed", figures)
    return figures


# A test's outcome as ``pytest -v`` prints it, in one process or in pytest-xdist's workers.
VERBOSE_OUTCOME = re.compile(
    r"^(?:\[gw\d+\] \[ *\d+%\] (?P<a>[A-Z]+) (?P<x>tests/\S+)|(?P<y>tests/\S+) (?P<b>[A-Z]+))",
    re.MULTILINE,
)
# pytest's count of the lane's tests: "collected N items" in one process, "[N items]" in xdist's.
COLLECTED = re.compile(r"\[(?P<n>\d+) items?\]|collected (?P<m>\d+) items?")


def lane_progress(log: str) -> dict:
    """The outcomes ``pytest -v`` printed before the lane was ended for time."""
    outcomes: dict[str, list[str]] = {}
    for found in VERBOSE_OUTCOME.finditer(log):
        outcome = found.group("a") or found.group("b")
        test = (found.group("x") or found.group("y")).split("@")[0]  # xdist adds @group
        outcomes.setdefault(outcome, []).append(test)
    collected = COLLECTED.search(log)
    return {
        "tests": sum(map(len, outcomes.values())),  # those finished
        "collected": int(collected.group("n") or collected.group("m")) if collected else None,
        "passed": len(outcomes.get("PASSED", [])),
        "failed": [{"test": t, "message": ""} for t in outcomes.get("FAILED", [])],
        "skipped": [{"test": t, "reason": ""} for t in outcomes.get("SKIPPED", [])],
    }


def lane_algorithms(settings: Settings) -> dict:
    # One worker per algorithm's module-wide training (tests/conftest.py groups them).
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    return lane(settings, "lane_algorithms", LANE_ALGORITHMS, workers)


def lane_launchers(settings: Settings) -> dict:
    return lane(settings, "lane_launchers", LANE_LAUNCHERS, 0)


def numbers(row: dict) -> dict:
    """A CSV row with its numeric cells as numbers (and empty cells as None)."""

    def value(text: str):
        if text == "":
            return None
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() and "." not in text else number

    return {key: value(text) for key, text in row.items()}


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return [numbers(row) for row in csv.DictReader(handle)]


def step_time_part(settings: Settings) -> dict:
    import step_time

    if settings.tiny:
        argv = ["--quick", "--configs", "mlp", "--algorithms", "DMG", "CorGrad"]
    elif cuda_available():
        argv = ["--quick", "--configs", "resnet50"]
    else:
        raise Skip(f"{NO_CUDA}: the GPU figures are ResNet-50's on CUDA")
    argv += ["--precision", "bf16"]
    table = settings.logs / "step_time.csv"
    print("$ python benchmarks/step_time.py", " ".join(argv), flush=True)
    step_time.main([*argv, "--csv", str(table)])
    return {
        "command": " ".join(["python benchmarks/step_time.py", *argv]),
        "rows": read_csv(table),
        "bf16": read_csv(table.with_name("step_time_bf16.csv")),
    }


def sfmoe_part(settings: Settings) -> dict:
    import sfmoe_cost

    if not cuda_available():
        raise Skip(f"{NO_CUDA}: SF-MoE's cost is measured at the paper's 160 images a step")
    argv = ["--quick", "--configs", "cuda", "--precision", "bf16"]
    table = settings.logs / "sfmoe_cost.csv"
    print("$ python benchmarks/sfmoe_cost.py", " ".join(argv), flush=True)
    sfmoe_cost.main([*argv, "--csv", str(table)])
    return {
        "command": " ".join(["python benchmarks/sfmoe_cost.py", *argv]),
        "rows": read_csv(table),
        "bf16": read_csv(table.with_name("sfmoe_cost_bf16.csv")),
    }


def job_start_part(settings: Settings) -> dict:
    """Jobs per GPU and a job's phases: ``job_start.py gpu`` at 1, 2 and 4 jobs per GPU. Tiny:
    on the CPU where there is no GPU, RotatedDigits' MLP, 1 and 2 jobs at once (the code path:
    no GPU figure)."""
    import job_start

    from dmg_domainbed.launchers.local_parallel import visible_gpus

    on_gpu = cuda_available() and bool(visible_gpus())
    if not settings.tiny and not on_gpu:
        raise Skip(
            f"{NO_CUDA if not cuda_available() else 'nvidia-smi lists no GPU'}: jobs per GPU need "
            "a GPU that job_start.py can place its jobs on"
        )
    if settings.tiny:
        argv = ["gpu", "--dataset", ACCURACY_DATASET, "--jobs_per_gpu", "1", "2"]
        argv += ["--steps", "3", "--batch_size", "8", "--algorithms", "ERM"]
    else:
        argv = ["gpu", "--dataset", "PACS", "--jobs_per_gpu", *map(str, JOBS_PER_GPU)]
        argv += ["--steps", str(JOB_STEPS), "--batch_size", "32", "--algorithms", *COMPARED]
    argv += ["--precision", "bf16", "--synthetic"] + ([] if on_gpu else ["--device", "cpu"])
    # its waves start only while the longest so far, scaled to their jobs, fits in its limit
    budget = [] if settings.tiny else ["--budget_s", f"{settings.limit_s - JOB_START_MARGIN_S:.0f}"]
    waves = settings.logs / "job_start.json"
    print("$ python benchmarks/job_start.py", " ".join(argv), flush=True)
    jobs = settings.scratch / "jobs"
    job_start.main([*argv, *budget, "--json", str(waves), "--output_dir", str(jobs)])
    found = json.loads(waves.read_text())
    return {
        "command": " ".join(["python benchmarks/job_start.py", *argv]),
        "device": "cuda" if on_gpu else "cpu",
        "waves": found,
        "recommended": job_start.recommend(found),
    }


def accuracy(settings: Settings) -> dict:
    """ERM and DMG in fp32 and bf16 on RotatedDigits, paired by test domain and trial seed."""
    import job_start
    from domainbed import datasets

    from dmg_domainbed.launchers.local_parallel import Plan, usable_cores, visible_gpus
    from dmg_domainbed.reporting.comparisons import intervals
    from dmg_domainbed.reporting.jobs import sweep_jobs
    from dmg_domainbed.reporting.tables import ranked_runs, selected_frame, selection_methods

    dataset = datasets.get_dataset_class(ACCURACY_DATASET)
    if settings.tiny:
        test_envs, trials, steps, checkpoint_freq = [[0]], 2, 4, 2
    else:
        test_envs = [[env] for env in range(len(dataset.ENVIRONMENTS))]
        trials, steps, checkpoint_freq = 2, dataset.N_STEPS, dataset.CHECKPOINT_FREQ
    sweep = settings.scratch / "accuracy"
    commands = []
    for precision in ("fp32", "bf16"):
        hparams = {"precision": precision} if precision != "fp32" else None
        commands += job_start.sweep_commands(
            sweep,
            ACCURACY_DATASET,
            list(COMPARED),
            test_envs,
            steps,
            str(settings.scratch),
            trials=trials,
            checkpoint_freq=checkpoint_freq,
            hparams=hparams,
        )
    gpus = tuple(visible_gpus())
    at_once = min(len(commands), max(1, usable_cores() // 2) if gpus else usable_cores())
    plan = Plan(jobs=at_once, gpus=gpus, threads=1, loader_workers=1, warm=True)
    print(f"{len(commands)} jobs, {at_once} at a time, on {'GPU ' + gpus[0] if gpus else 'CPU'}")
    try:
        wall, _, _ = job_start.run_wave(commands, plan)
    finally:  # every run's records and log, for the record and for a failure's cause
        for job in sweep.iterdir():
            for name, suffix in (("results.jsonl", "jsonl"), ("launcher.log", "log")):
                if (job / name).exists():
                    kept = settings.logs / "accuracy" / f"{job.name}.{suffix}"
                    kept.parent.mkdir(exist_ok=True)
                    shutil.copy(job / name, kept)
    chosen = selected_frame(ranked_runs(sweep_jobs(sweep).records()))
    method = selection_methods()[0].name  # training-domain validation
    chosen = chosen[chosen["selection_method"] == method]
    cells = chosen.pivot(index=["test_env", "trial_seed"], columns="algorithm", values="accuracy")
    figures = {
        "command": f"{len(commands)} runs of DomainBed's train.py, {steps} steps",
        "dataset": ACCURACY_DATASET,
        "selection": method,
        "test_envs": len(test_envs),
        "trials": trials,
        "steps": steps,
        "wall_s": round(wall, 1),
        "algorithms": {},
    }
    for algorithm in COMPARED:
        pairs = cells[[algorithm, f"{algorithm} (bf16)"]].dropna()
        difference = pairs.iloc[:, 1] - pairs.iloc[:, 0]
        low, high, _ = intervals(len(pairs), difference.mean(), difference.std(ddof=1))
        figures["algorithms"][algorithm] = {
            "pairs": len(pairs),
            "fp32": float(pairs.iloc[:, 0].mean()),
            "bf16": float(pairs.iloc[:, 1].mean()),
            "difference": float(difference.mean()),
            "ci_low": float(low),
            "ci_high": float(high),
        }
    return figures


# The limits: their sum over the stages (parts that run together count once) is BUDGET_S. Each
# is sized from the H200's run at 48363ab/3a9f04e (docs/gpu_proof.json, gpu_proof_rerun.json):
# step_time took 49 s, sfmoe_cost 14 s, accuracy 149 s beside the algorithm lane, which had 34 of
# its 39 tests done at 178 s; the launcher lane's warm-against-new and two-per-GPU tests run
# RotatedDigits' MLP since (they had 18 ResNet-50 jobs), and job_start starts a wave only while
# it fits in its limit.
PARTS = (
    Part("environment", "device, driver, Python, torch, CUDA", environment, 10),
    Part("lane_algorithms", "gpu lane: every algorithm, bf16", lane_algorithms, 200, lane_progress),
    Part("accuracy", "bf16 vs fp32 test accuracy, paired", accuracy, 200),
    Part("lane_launchers", "gpu lane: local_parallel on CUDA", lane_launchers, 80, lane_progress),
    Part("step_time", "step time and memory, ResNet-50, fp32 and bf16", step_time_part, 60),
    Part("job_start", "jobs per GPU, ERM and DMG, fp32 and bf16", job_start_part, 100),
    Part("sfmoe_cost", "SF-MoE against dense DeiT-S, fp32 and bf16", sfmoe_part, 30),
)
# Parts that run at the same time: nothing in them is timed, and neither counts GPU processes.
TOGETHER = {"lane_algorithms": "accuracy"}


def stages(names: Sequence[str]) -> list[list[Part]]:
    """The chosen parts in order, those that run together in one stage."""
    chosen = [part for part in PARTS if part.name in names]
    found: list[list[Part]] = []
    for part in chosen:
        if found and TOGETHER.get(found[-1][0].name) == part.name:
            found[-1].append(part)
        else:
            found.append([part])
    return found


def finite(value):
    """``value`` with every NaN or infinity replaced by None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def run_in_child(part: Part, settings: Settings, result: Path) -> None:
    """In the part's process: its output to its log, its outcome to ``result``."""
    log = open(settings.logs / f"{part.name}.log", "w", buffering=1)
    os.dup2(log.fileno(), 1)  # what its own subprocesses print, too
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        outcome = {"status": PASSED, "figures": part.run(settings)}
    except Skip as skipped:
        outcome = {"status": SKIPPED, "reason": str(skipped)}
    except Failed as failed:
        outcome = {"status": FAILED, "reason": str(failed), "figures": failed.figures}
    except BaseException as error:  # a benchmark's sys.exit(message) too
        traceback.print_exc()
        outcome = {"status": FAILED, "reason": one_line(error)}
    result.write_text(json.dumps(finite(outcome)))
    log.flush()


def end_tree(pid: int) -> None:
    """End a process and every process it started: SIGTERM, then SIGKILL to what is left."""
    try:
        root = psutil.Process(pid)
        tree = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=END_GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def run_stage(parts: list[Part], settings: Settings, deadline: float, scale: float) -> dict:
    """Run ``parts`` at the same time, each in a child process within its limit."""
    context = multiprocessing.get_context("fork")
    running = []
    outcomes = {}
    for part in parts:
        limit = min(part.limit_s * scale, deadline - time.monotonic())
        if limit <= 0:
            outcomes[part.name] = {"status": NOT_RUN, "reason": "the time budget was spent"}
            continue
        result = settings.scratch / f"{part.name}.json"
        own = dataclasses.replace(settings, limit_s=limit)
        process = context.Process(target=run_in_child, args=(part, own, result))
        print(f"{part.name}: {part.what} (at most {limit:.0f} s)", flush=True)
        process.start()
        running.append((part, process, result, time.monotonic(), limit))
    for part, process, result, started, limit in running:
        process.join(max(0.0, started + limit - time.monotonic()))
        if process.is_alive():
            end_tree(process.pid)
            process.join()
            outcome = {"status": TIMED_OUT, "reason": f"not done after {limit:.0f} s; ended"}
            log = settings.logs / f"{part.name}.log"
            if part.read_log and log.exists():
                outcome["figures"] = part.read_log(log.read_text(errors="replace"))
            if result.exists():  # it finished as it was being ended
                outcome = json.loads(result.read_text())
        elif result.exists():
            outcome = json.loads(result.read_text())
        else:
            outcome = {
                "status": FAILED,
                "reason": f"its process ended with exit status {process.exitcode} "
                "without a result (see its log)",
            }
        outcome["seconds"] = round(time.monotonic() - started, 1)
        outcomes[part.name] = outcome
        note = f": {outcome['reason']}" if outcome.get("reason") else ""
        print(f"{part.name}: {outcome['status']} in {outcome['seconds']} s{note}", flush=True)
    return outcomes


def commit_of(given: str | None) -> str:
    """The commit measured: ``given``, else this checkout's (marked when files differ)."""
    if given:
        return given

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout: pass --commit)"
    return f"{commit} with uncommitted changes" if changed else commit


def device_line(results: dict) -> str:
    found = results["parts"].get("environment", {}).get("figures", {})
    devices = found.get("devices") or []
    if not devices:
        return "no CUDA device"
    first = devices[0]
    more = f" (and {len(devices) - 1} more)" if len(devices) > 1 else ""
    return f"{first['name']}{more}, compute capability {first['capability']}"


def run(args: argparse.Namespace) -> dict:
    output = Path(args.output_dir)
    started, deadline = time.monotonic(), time.monotonic() + args.budget_s
    scale = args.budget_s / BUDGET_S
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks, for the parts
    # The jobs are DomainBed's command lines, `python -m domainbed.scripts.train`: this Python.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    # Imported once here, shared by every part's process (none of these starts CUDA).
    import domainbed.algorithms  # noqa: F401
    import torch  # noqa: F401

    import dmg_domainbed

    dmg_domainbed.register()
    names = args.parts or [part.name for part in PARTS]
    results = {
        "format": FORMAT,
        "mode": "tiny" if args.tiny else "full",
        "command": shlex.join(["python", "benchmarks/gpu_proof.py", *args.argv]),
        "commit": commit_of(args.commit),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "budget_s": args.budget_s,
        "parts": {},
    }
    with tempfile.TemporaryDirectory(prefix="gpu_proof_") as scratch:
        settings = Settings(args.tiny, Path(scratch), Path(scratch) / "logs")
        settings.logs.mkdir()
        for stage in stages(names):
            results["parts"].update(run_stage(stage, settings, deadline, scale))
        found = results["parts"].get("environment", {}).get("figures", {})
        results.update(
            device=device_line(results),
            driver=found.get("driver", ""),
            torch=found.get("torch", ""),
            cuda=found.get("cuda"),
            seconds=round(time.monotonic() - started, 1),
        )
        output.mkdir(parents=True, exist_ok=True)
        with tarfile.open(output / LOGS_FILE, "w:gz") as archive:
            archive.add(settings.logs, arcname="logs")
    (output / RESULTS_FILE).write_text(json.dumps(finite(results), indent=1) + "\n")
    return results


# --- the tables of docs/performance.md, from a results file ----------------------------------

UNMEASURED = "unmeasured"


def _table(headers: Sequence[str], rows: list[Sequence]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _number(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _part(results: dict | None, name: str) -> tuple[dict | None, str]:
    """A part's figures, or why there are none."""
    if results is None:
        return None, f"{UNMEASURED}: `python benchmarks/gpu_proof.py --output_dir OUT` on a GPU"
    outcome = results["parts"].get(name)
    if outcome is None:
        return None, f"{UNMEASURED}: not among the parts run"
    if outcome["status"] == PASSED or (outcome["status"] == FAILED and outcome.get("figures")):
        return outcome.get("figures"), ""
    return None, f"{UNMEASURED}: {outcome['status']}: {outcome.get('reason', '')}".rstrip(": ")


def status_table(results: dict | None) -> str:
    if results is None:
        return (
            "No run of `benchmarks/gpu_proof.py` on a GPU is recorded for this code "
            "(`docs/gpu_proof.json` is absent): every table below is unmeasured."
        )
    head = (
        f"Run on {results['device']}, driver {results['driver'] or 'unknown'}, torch "
        f"{results['torch']}, CUDA {results['cuda']}, commit {results['commit']}, "
        f"{results['date']}: `{results['command']}`, {results['seconds']:.0f} s."
    )
    rows = []
    for part in PARTS:
        outcome = results["parts"].get(part.name, {"status": NOT_RUN})
        note = outcome.get("reason", "")
        figures = outcome.get("figures") or {}
        if "tests" in figures:
            note = (
                f"{figures['passed']} passed, {len(figures['failed'])} failed, "
                f"{len(figures['skipped'])} skipped of {figures['tests']}"
                + (
                    f" finished, {figures['collected']} collected"
                    if figures.get("collected") not in (None, figures["tests"])
                    else ""
                )
                + (
                    f": {', '.join(f['test'] for f in figures['failed'])}"
                    if figures["failed"]
                    else ""
                )
            )
        seconds = outcome.get("seconds")
        rows.append([part.name, part.what, outcome["status"], _number(seconds, 0), note])
    return f"{head}\n\n{_table(['part', 'what', 'status', 's', 'note'], rows)}"


def step_time_table(results: dict | None) -> str:
    figures, why = _part(results, "step_time")
    if figures is None:
        return why
    speedups = {row["algorithm"]: row for row in figures["bf16"]}
    rows = []
    for row in figures["rows"]:
        bf16 = speedups.get(row["algorithm"], {})
        floor = row.get("step_floor_ratio")
        rows.append(
            [
                row["algorithm"],
                _number(row["step_ms"], 1),
                _number(row["step_ratio"]),
                _number(row["step_ratio"] / floor) if floor else "",
                _number(row["peak_mb"], 0),
                _number(row["memory_ratio"]),
                _number(row["predict_ratio"]),
                _number(bf16.get("step_speedup")),
                _number(bf16.get("predict_speedup")),
                _number(bf16.get("memory_ratio")),
            ]
        )
    headers = ["algorithm", "step ms", "x ERM", "x its floor", "peak MB", "memory x ERM"]
    headers += ["predict x ERM", "bf16 step speed-up", "bf16 predict speed-up"]
    headers += ["bf16 / fp32 memory"]
    first = figures["rows"][0]
    where = f"{first['config']} on {first['device']}, {first['batch']} images per source domain"
    head = f"`{figures['command']}` ({where}):"
    return f"{head}\n\n{_table(headers, rows)}"


def sfmoe_table(results: dict | None) -> str:
    figures, why = _part(results, "sfmoe_cost")
    if figures is None:
        return why
    speedups = {row["algorithm"]: row for row in figures["bf16"]}
    rows = [
        [
            row["model"],
            row["batch"],
            _number(row["params_m"]),
            _number(row["step_ms"], 1),
            _number(row["step_ratio"]),
            _number(row["memory_ratio"]),
            _number(row["predict_ratio"]),
            _number(speedups.get(row["model"], {}).get("step_speedup")),
            _number(speedups.get(row["model"], {}).get("memory_ratio")),
        ]
        for row in figures["rows"]
    ]
    headers = ["model", "batch", "params M", "step ms", "step x dense", "memory x dense"]
    headers += ["predict x dense", "bf16 step speed-up", "bf16 / fp32 memory"]
    return f"`{figures['command']}`:\n\n{_table(headers, rows)}"


def job_start_table(results: dict | None) -> str:
    figures, why = _part(results, "job_start")
    if figures is None:
        return why
    waves = {(w["algorithm"], w["jobs_per_gpu"], w["precision"]): w for w in figures["waves"]}
    rows = []
    for algorithm, per_gpu in dict.fromkeys((a, j) for a, j, _ in waves):
        fp32, bf16 = (
            waves.get((algorithm, per_gpu, "fp32")),
            waves.get((algorithm, per_gpu, "bf16")),
        )
        speedup = (
            bf16["images_per_s_per_gpu"] / fp32["images_per_s_per_gpu"] if fp32 and bf16 else None
        )
        rows.append(
            [
                algorithm,
                per_gpu,
                _number(fp32 and fp32["images_per_s_per_gpu"], 0),
                _number(bf16 and bf16["images_per_s_per_gpu"], 0),
                _number(speedup),
                " / ".join(str(w["utilisation"]) for w in (fp32, bf16) if w),
                " / ".join(_number(w["memory_gb"], 1) for w in (fp32, bf16) if w),
                " / ".join(_number(w.get("first_step_s"), 1) for w in (fp32, bf16) if w),
                " / ".join(_number(w["wall"], 0) for w in (fp32, bf16) if w),
            ]
        )
    headers = ["algorithm", "jobs per GPU", "fp32 images/s per GPU", "bf16 images/s per GPU"]
    headers += ["bf16 speed-up", "GPU utilisation % fp32 / bf16", "peak GPU GB fp32 / bf16"]
    headers += ["step 0 s fp32 / bf16", "wave wall s fp32 / bf16"]
    chosen = figures.get("recommended")
    advice = (
        "\n\nRecommended `jobs_per_gpu` (job_start.py's `recommend`: from 1, each step up of "
        "packing taken while it adds at least 10% images/s per GPU): "
        + ", ".join(f"{precision} {count}" for precision, count in chosen.items())
        + "."
        if chosen
        else ""
    )
    return f"`{figures['command']}`:\n\n{_table(headers, rows)}{advice}"


PHASES = ("launch", "imports", "data", "network", "first_step", "steps", "evaluation", "end")


def job_phases_table(results: dict | None) -> str:
    figures, why = _part(results, "job_start")
    if figures is None:
        return why
    waves = [w for w in figures["waves"] if w.get("phases")]
    if not waves:
        return (
            f"{UNMEASURED}: this results file's jobs per GPU ran without the clock on their phases"
        )
    rows = [
        [w["algorithm"], w["precision"], w["jobs_per_gpu"]]
        + [_number(w["phases"][name], 1) for name in PHASES]
        + [_number(sum(w["phases"].values()), 1)]
        for w in waves
    ]
    headers = ["algorithm", "precision", "jobs per GPU", *PHASES, "job wall s"]
    head = (
        f"`{figures['command']}`, seconds of the mean job of each wave, from its start by "
        "local_parallel to its exit (the fork server's own start, before the first job, is "
        "in the first wave's wall time only):"
    )
    return f"{head}\n\n{_table(headers, rows)}"


def accuracy_table(results: dict | None) -> str:
    figures, why = _part(results, "accuracy")
    if figures is None:
        return why
    rows = [
        [
            algorithm,
            found["pairs"],
            _number(found["fp32"], 1),
            _number(found["bf16"], 1),
            _number(found["difference"]),
            f"{_number(found['ci_low'])} to {_number(found['ci_high'])}",
        ]
        for algorithm, found in figures["algorithms"].items()
    ]
    headers = ["algorithm", "pairs", "fp32 test %", "bf16 test %", "bf16 - fp32, points"]
    headers += ["95% interval"]
    head = (
        f"{figures['dataset']}, {figures['test_envs']} test domain(s) x {figures['trials']} trial "
        f"seeds, {figures['steps']} steps, {figures['selection']}, each pair the same splits and "
        "initial weights:"
    )
    return f"{head}\n\n{_table(headers, rows)}"


TABLES: dict[str, Callable[[dict | None], str]] = {
    "status": status_table,
    "step_time": step_time_table,
    "sfmoe_cost": sfmoe_table,
    "job_start": job_start_table,
    "job_phases": job_phases_table,
    "accuracy": accuracy_table,
}


def markdown(results: dict | None, table: str) -> str:
    """The Markdown of one GPU table (:data:`TABLES`) from a results file's ``results`` (None:
    no results file, every table unmeasured)."""
    return TABLES[table](results)


def unwritable(output: Path) -> str | None:
    """Why the results could not be written into ``output`` (made here if missing), found by
    writing a file there before any part runs; None when they can."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=output):
            pass
    except OSError as error:
        return (
            f"cannot write into --output_dir {output} ({error.strerror or error}): choose a "
            "folder this user can write to; nothing was run"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True, help=f"gets {RESULTS_FILE}, {LOGS_FILE}")
    parser.add_argument("--tiny", action="store_true", help="smallest sizes, any machine")
    parser.add_argument(
        "--parts", nargs="+", choices=[part.name for part in PARTS], help="default: all"
    )
    parser.add_argument(
        "--budget_s",
        type=float,
        default=BUDGET_S,
        help=f"seconds for the whole command (default {BUDGET_S}); the parts' limits scale",
    )
    parser.add_argument("--commit", help="the commit measured (default: this checkout's, from git)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        parser.error(
            f"--budget_s must be a finite number of seconds > 0; got {args.budget_s:g}: give "
            f"one, e.g. the default, --budget_s {BUDGET_S}"
        )
    found = [name for name in (RESULTS_FILE, LOGS_FILE) if (Path(args.output_dir) / name).exists()]
    if found:
        parser.error(
            f"{args.output_dir} already holds {', '.join(found)}: choose an empty output folder "
            "(nothing there is overwritten)"
        )
    if problem := unwritable(Path(args.output_dir)):
        parser.error(problem)
    results = run(args)
    print(f"\nwrote {Path(args.output_dir) / RESULTS_FILE} and {LOGS_FILE}\n")
    for table in TABLES:
        print(markdown(results, table), end="\n\n")
    trouble = [name for name, p in results["parts"].items() if p["status"] in (FAILED, TIMED_OUT)]
    return 1 if trouble else 0


if __name__ == "__main__":
    sys.exit(main())
