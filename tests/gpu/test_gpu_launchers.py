"""local_parallel on a CUDA GPU, through DomainBed's own train script, a few steps a job, on the
cheapest run that exercises each path: RotatedDigits' MLP (the embedded dataset) where the network
does not matter to the launcher (warm against new processes, two jobs on one GPU), a synthetic
PACS folder with random ResNet-50 weights (:mod:`dmg_domainbed.synthetic`) where it does (a
batch too large for the GPU):

* a warm job (forked from the fork server, its GPU set after the fork) writes what a new
  ``python -m domainbed.scripts.train`` process writes; an algorithm whose two new processes
  already differ on CUDA (its own nondeterminism, e.g. float atomics) is named as such, and
  its warm job must differ from a new process no more than two new processes differ;
* ``jobs_per_gpu = 2`` runs two jobs on one GPU at once, as ``nvidia-smi`` lists them;
* a job that runs out of GPU memory fails with a message that names the setting to lower;
* a fork server that initialised CUDA is refused by its warm jobs.

Run where CUDA is: ``python -m pytest tests/gpu -n 0``; elsewhere every test skips.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from dmg_domainbed import synthetic
from dmg_domainbed.errors import UserError
from dmg_domainbed.launchers.common import failure_report
from dmg_domainbed.launchers.local_parallel import (
    Plan,
    failures,
    local_parallel_launcher,
    run_commands,
    visible_gpus,
)
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.weight_files import Caches

from ..helpers import domainbed_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU: torch.cuda.is_available() is False",
    ),
]

ALGORITHMS = ("ERM", "DMG", "MultiHead", "Aggregate", "CorGrad", "ImportanceMask")
# Allowed to differ between two new processes on CUDA: CorGrad summed with float atomics
# (index_add_) when this lane last ran on a GPU; its sums have a fixed order since, not yet
# checked on a GPU (docs/performance.md).
NONDETERMINISTIC_ON_CUDA = {"CorGrad"}
BACKBONE = {"resnet18": False, "resnet50_augmix": True}  # DomainBed's default ResNet-50
ALGORITHM_HPARAMS = {
    "ImportanceMask": {"phase1_steps": 1, "freeze_step": 2, "unimportant_lr_half_life": 1}
}
CLASSES, BATCH_SIZE, HOLDOUT_FRACTION, STEPS = 2, 4, 0.5, 4
SMALL = "RotatedDigits"  # an MLP on 8x8 digits: the launcher's paths, not the network's
NOT_COMPARED = {"step_time", "mem_gb"}  # timings and memory


@pytest.fixture(scope="module")
def pacs(tmp_path_factory):
    """A synthetic PACS folder and a cache of random ResNet-50 weights; the jobs' environment."""
    root = tmp_path_factory.mktemp("gpu_pacs")
    caches = Caches.under(root / "cache")
    files, problems = needed_weights(BACKBONE, synthetic.IMAGE_SHAPE, caches)
    assert not problems
    synthetic.write_random_weights(files)
    per_domain = synthetic.images_needed(BATCH_SIZE, HOLDOUT_FRACTION, CLASSES)
    synthetic.write_image_dataset("PACS", root / "data", per_domain, CLASSES)
    env = domainbed_env(**caches.environment(), HF_HUB_OFFLINE="1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)  # the launcher decides
    return root, env


@pytest.fixture
def in_job_environment(pacs, monkeypatch):
    """This process (and so the fork server it starts) has the jobs' environment: warm jobs
    keep what the server's imports read of it (huggingface_hub its cache and offline mode)."""
    root, env = pacs
    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return root, env


def train_command(
    data_dir, output_dir, algorithm, steps=STEPS, seed=0, dataset="PACS", **overrides
) -> str:
    """DomainBed's train command, in the plain words its sweep writes (ResNet-50 on PACS)."""
    backbone = BACKBONE if dataset == "PACS" else {}
    hparams = {**backbone, "batch_size": BATCH_SIZE, **ALGORITHM_HPARAMS.get(algorithm, {})}
    hparams.update(overrides)
    words = ["python", "-m", "domainbed.scripts.train", "--algorithm", algorithm]
    words += ["--dataset", dataset, "--data_dir", str(data_dir), "--output_dir", str(output_dir)]
    words += ["--test_envs", "0", "--holdout_fraction", str(HOLDOUT_FRACTION), "--seed", str(seed)]
    words += ["--steps", str(steps), "--checkpoint_freq", "2", "--hparams", json.dumps(hparams)]
    return shlex.join(words)


def records(job_dir: Path) -> list[dict]:
    """The job's results.jsonl without timings and memory; each record ran on the GPU."""
    found = []
    for line in (job_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["mem_gb"] > 0, f"{job_dir} did not run on CUDA"
        for name in NOT_COMPARED:
            record.pop(name)
        record["args"].pop("output_dir")
        found.append(record)
    return found


def largest_difference(a: list[dict], b: list[dict]) -> float:
    """The largest absolute difference of a number between two runs' records (inf when they
    differ in anything else)."""
    if len(a) != len(b):
        return math.inf
    largest = 0.0
    for x, y in zip(a, b):
        if x.keys() != y.keys():
            return math.inf
        for key in x:
            if isinstance(x[key], float) and isinstance(y[key], float):
                largest = max(largest, abs(x[key] - y[key]))
            elif x[key] != y[key]:
                return math.inf
    return largest


def run_all(root: Path, env: dict, name: str, warm: bool) -> dict[str, list[dict]]:
    gpu = visible_gpus(env)[0]
    plan = Plan(len(ALGORITHMS), (gpu,), 2, 2, warm, environ=dict(os.environ))
    commands = [train_command(root / "data", root / name / a, a, dataset=SMALL) for a in ALGORITHMS]
    outcomes = run_commands(commands, plan, say=lambda line: None)
    assert [o.returncode for o in outcomes] == [0] * len(ALGORITHMS), failure_report(
        failures(outcomes), len(outcomes)
    )
    assert [o.warm for o in outcomes] == [warm] * len(ALGORITHMS)
    return {a: records(root / name / a) for a in ALGORITHMS}


def test_warm_jobs_write_what_new_processes_write_on_cuda(in_job_environment):
    root, env = in_job_environment
    fresh = run_all(root, env, "fresh", warm=False)
    again = run_all(root, env, "again", warm=False)
    warm = run_all(root, env, "warm", warm=True)
    verdicts = {
        a: (largest_difference(fresh[a], again[a]), largest_difference(fresh[a], warm[a]))
        for a in ALGORITHMS
    }
    print("\nalgorithm: |new - new|, |new - warm| (largest difference of a logged number)")
    for algorithm, (new_new, new_warm) in verdicts.items():
        print(f"  {algorithm}: {new_new:.3g}, {new_warm:.3g}")
    nondeterministic = {a for a, (new_new, _) in verdicts.items() if new_new != 0}
    assert nondeterministic <= NONDETERMINISTIC_ON_CUDA, verdicts
    for algorithm, (new_new, new_warm) in verdicts.items():
        if algorithm in nondeterministic:
            assert new_warm <= 10 * new_new + 1e-4, (algorithm, verdicts[algorithm])
        else:
            assert warm[algorithm] == fresh[algorithm], (algorithm, verdicts[algorithm])


def compute_pids() -> set[str]:
    """The processes nvidia-smi lists as computing on a GPU."""
    answer = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return {line.strip() for line in answer.stdout.splitlines() if line.strip().isdigit()}


def test_two_jobs_per_gpu_run_on_one_gpu_at_once(in_job_environment):
    root, env = in_job_environment
    gpu = visible_gpus(env)[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "DMG_LOCAL_PARALLEL_JOBS_PER_GPU": "2"}
    plan = Plan.from_environment(env)
    assert (plan.jobs, plan.gpus, plan.jobs_per_gpu) == (2, (gpu,), 2)
    before = compute_pids()
    most, stop = set(), threading.Event()

    def watch() -> None:
        nonlocal most
        while not stop.wait(0.1):
            now = compute_pids() - before
            most = now if len(now) > len(most) else most

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        commands = [
            train_command(
                root / "data", root / "pair" / str(seed), "ERM", steps=300, seed=seed, dataset=SMALL
            )
            for seed in (1, 2)
        ]
        local_parallel_launcher.launch(commands, env)
    finally:
        stop.set()
        watcher.join()
    for seed in (1, 2):
        records(root / "pair" / str(seed))  # both ran on CUDA
    assert len(most) == 2, f"nvidia-smi listed at most {len(most)} of the jobs at once: {most}"


def test_a_job_out_of_gpu_memory_names_the_setting_to_lower(in_job_environment, tmp_path):
    root, env = in_job_environment
    batch = 1024  # x 3 source domains of 224x224 images through ResNet-50: hundreds of GB
    per_domain = synthetic.images_needed(batch, 0.1, CLASSES)
    synthetic.write_image_dataset("PACS", tmp_path / "data", per_domain, CLASSES)
    command = train_command(tmp_path / "data", tmp_path / "job", "ERM", steps=2, batch_size=batch)
    command = command.replace(f"--holdout_fraction {HOLDOUT_FRACTION}", "--holdout_fraction 0.1")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible_gpus(env)[0]}
    with pytest.raises(UserError) as failed:
        local_parallel_launcher.launch([command], env)
    message = str(failed.value)
    assert "out of GPU memory with a GPU to itself: lower the batch size (hparam batch_size)" in (
        message
    )
    assert "OutOfMemoryError" in message


# A launcher whose warm module (preloaded by its new fork server) initialises CUDA at import.
LAUNCH_WARM_MODULE = """
import sys
from dmg_domainbed.launchers.common import failure_report
from dmg_domainbed.launchers.local_parallel import Plan, failures, run_commands

module = "tests.gpu.cuda_at_import"
plan = Plan(1, (sys.argv[2],), 1, 0, True)
command = f"python -m {module} --output_dir {sys.argv[1]}"
outcomes = run_commands([command], plan, warm_module=module)
print("started", "warm" if outcomes[0].warm else "as a new process")
print(failure_report(failures(outcomes), 1))
"""


def test_warm_jobs_refuse_a_fork_server_that_initialised_cuda(in_job_environment, tmp_path):
    root, env = in_job_environment
    ran = subprocess.run(
        [sys.executable, "-c", LAUNCH_WARM_MODULE, str(tmp_path / "job"), visible_gpus(env)[0]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )
    assert "started warm" in ran.stdout, ran.stdout + ran.stderr
    log = (tmp_path / "job" / "launcher.log").read_text()
    assert "initialised CUDA before forking a warm job" in log, log[-3000:]
    assert "ran on" not in log
