"""A Slurm job finds a manifest dataset through DMG_DOMAINBED_DATASETS, which sbatch exports with
the rest of the submitting environment: DomainBed's train job of a manifest dataset, submitted
by the submitit launcher from a folder that is neither the manifest's nor the job's, trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE

from ..datasets.conftest import write_domains
from ..datasets.test_manifest_runs import MANIFEST
from .conftest import job_environment
from .test_wait_on_slurm import LAUNCH


def test_a_slurm_job_trains_on_a_manifest_dataset(slurm_cluster, tmp_path):
    from domainbed.scripts.sweep import Job

    write_domains(tmp_path / "data" / "images", domains=("indoor", "outdoor"), per_class=6)
    manifest = tmp_path / "data" / "tiny.toml"
    manifest.write_text(MANIFEST)
    args = {
        "dataset": "TinyDomains",
        "algorithm": "ERM",
        "test_envs": [0],
        "holdout_fraction": 0.2,
        "hparams_seed": 0,
        "data_dir": ".",
        "task": "domain_generalization",
        "trial_seed": 0,
        "seed": 0,
        "hparams": json.dumps({"batch_size": 4}),
    }
    job = Job(args, str(tmp_path / "sweep"))
    os.makedirs(job.output_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = job_environment(slurm_cluster, cpus="1", mem_gb="1", wait="true")
    env[MANIFESTS_VARIABLE] = str(manifest)
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCH, json.dumps([job.command_str])],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr
    results = Path(job.output_dir) / "results.jsonl"
    assert [json.loads(line)["step"] for line in results.read_text().splitlines()] == [0, 2]
    assert (Path(job.output_dir) / "done").is_file()
