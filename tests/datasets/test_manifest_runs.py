"""A manifest dataset trains through DomainBed's own scripts wherever the job runs: jobs forked
by local_parallel from a sweep, and a train.py started as a new process in another folder; the
sweep is then read by ``report``. Every process finds the manifest through
DMG_DOMAINBED_DATASETS alone. 28x28 inputs select DomainBed's MNIST_CNN: no pretrained
weights."""

import json
import re

import pytest

from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE

from ..helpers import cli, domainbed_env, run_domainbed, run_python
from ..slurm.test_sweep_on_slurm import domainbed_script
from .conftest import write_domains

MANIFEST = """
name = "TinyDomains"
root = "images"
input_size = 28
steps = 3
checkpoint_freq = 2
"""
SWEEP = """
[sweep]
algorithms = ["ERM"]
datasets = ["TinyDomains"]
n_hparams = 1
n_trials = 1
single_test_envs = true
data_dir = "."
output_dir = "{output}"

[sweep.hparams]
batch_size = 4
"""


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    folder = tmp_path_factory.mktemp("manifest")
    write_domains(folder / "images", domains=("indoor", "outdoor"), per_class=6)
    (folder / "tiny.toml").write_text(MANIFEST)
    return folder / "tiny.toml"


def environment(manifest, **extra):
    return domainbed_env(**{MANIFESTS_VARIABLE: str(manifest), **extra})


def test_a_sweep_through_local_parallel_and_its_report(manifest, tmp_path, registered):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sweep_file = elsewhere / "sweep.toml"
    sweep_file.write_text(SWEEP.format(output=tmp_path / "sweep"))
    env = environment(manifest, DMG_LOCAL_PARALLEL_JOBS="2")
    run = ("-m", "dmg_domainbed", "sweep", str(sweep_file), "--launcher", "local_parallel")
    out = run_python(*run, cwd=elsewhere, env=env).stdout
    assert re.search(r"TinyDomains +ERM +2 +0 +0", out)
    assert out.count("(warm, ") == 2  # both jobs forked by local_parallel
    # report in this process, with the manifest registered as importing DomainBed registers it.
    registered(manifest)
    report = tmp_path / "report"
    code, out, _ = cli(
        "report", "--input_dir", str(tmp_path / "sweep"), "--output_dir", str(report)
    )
    assert code == 0
    assert "| Algorithm | indoor | outdoor | Avg |" in re.sub(" +", " ", out)
    assert (report / "accuracy_TinyDomains.png").is_file()
    # DomainBed's own collect_results prints the datasets DomainBed lists: this one too.
    collected = domainbed_script("collect_results", "--input_dir", str(tmp_path / "sweep"))
    assert "Dataset: TinyDomains" in collected


def test_train_py_in_a_new_process_started_in_another_folder(manifest, tmp_path):
    output = tmp_path / "run"
    args = ["--dataset", "TinyDomains", "--algorithm", "ERM", "--test_envs", "1"]
    args += ["--output_dir", str(output), "--hparams", '{"batch_size": 4}']
    run_domainbed("train", *args, cwd=tmp_path, env=environment(manifest))
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 2]  # the manifest's steps and checkpoint_freq
    assert records[0]["args"]["dataset"] == "TinyDomains"
    assert (output / "done").is_file()
