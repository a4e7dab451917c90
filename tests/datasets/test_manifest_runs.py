"""A manifest dataset trains through DomainBed's own scripts wherever the job runs: jobs forked
by local_parallel from a sweep, and a train.py started in another folder; the sweep is then read
by ``report``. Each finds the manifest through DMG_DOMAINBED_DATASETS alone, read as DomainBed
is imported. 28x28 inputs select DomainBed's MNIST_CNN: no pretrained weights."""

import json
import re
import shutil

import pytest

from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE

from ..helpers import cli, domainbed_env, domainbed_script, fresh_domainbed, run_python
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


@pytest.mark.slow  # a sweep of new processes that train
def test_a_sweep_through_local_parallel_and_its_report(manifest, tmp_path, registered):
    """The command runs as a process of its own: local_parallel forks its jobs from one fork
    server per process, which reads the variable once, as it imports DomainBed."""
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


@pytest.fixture(scope="module")
def trained_run(manifest, tmp_path_factory):
    """One train.py run on the manifest, started in another folder, with DomainBed imported
    afresh in an environment that names the manifest, as a new process imports it; one
    data-loader worker per loader (an image folder's own 8 fork dozens of processes)."""
    folder = tmp_path_factory.mktemp("trained")
    args = ["--dataset", "TinyDomains", "--algorithm", "ERM", "--test_envs", "1"]
    args += ["--output_dir", str(folder / "run"), "--hparams", '{"batch_size": 4}']
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment(manifest, DMG_DOMAINBED_LOADER_WORKERS="1").items():
            patch.setenv(name, value)
        patch.chdir(folder)
        with fresh_domainbed():
            domainbed_script("train", *args)
    return folder / "run"


def test_train_py_started_in_another_folder_finds_the_manifest_through_the_variable(trained_run):
    lines = (trained_run / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [0, 2]  # the manifest's steps and checkpoint_freq
    assert records[0]["args"]["dataset"] == "TinyDomains"
    assert all(r["hparams"]["manifest_domains"] == ["indoor", "outdoor"] for r in records)
    # What the dataset was built from, for commands that rebuild it later to compare with.
    recorded = records[-1]["hparams"]
    assert (recorded["manifest_classes"], recorded["manifest_images"]) == (["cat", "dog"], [12, 12])
    assert re.fullmatch("[0-9a-f]{16}", recorded["manifest_files"])
    assert (trained_run / "done").is_file()


def test_a_run_is_refused_once_its_manifest_reorders_the_domains(
    manifest, trained_run, tmp_path, registered
):
    reordered = tmp_path / "tiny.toml"
    root = manifest.parent / "images"
    text = manifest.read_text().replace('root = "images"', f'root = "{root}"')
    reordered.write_text(f'{text}domains = ["outdoor", "indoor"]\n')
    registered(reordered)
    for command in (
        ("report", "--input_dir", str(trained_run.parent), "--output_dir", str(tmp_path / "r")),
        ("evaluate", "--run_dir", str(trained_run), "--output_dir", str(tmp_path / "e")),
    ):
        code, _, message = cli(*command)
        assert code == 2, command
        assert "trained on the domains indoor, outdoor of TinyDomains" in message, command
        assert "its manifest lists outdoor, indoor today" in message, command
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


def test_evaluate_refuses_a_data_dir_that_a_manifest_run_would_not_read(
    manifest, trained_run, tmp_path, registered
):
    registered(manifest)
    output = tmp_path / "e"
    given = ("--run_dir", str(trained_run), "--output_dir", str(output))
    code, _, message = cli("evaluate", *given, "--data_dir", str(tmp_path / "copy"))
    assert code == 2
    assert f"--data_dir '{tmp_path / 'copy'}' would not be read for ERM on TinyDomains" in message
    assert f"its manifest '{manifest}' says (root '{manifest.parent / 'images'}')" in message
    assert f"name it in {MANIFESTS_VARIABLE} instead" in message
    assert not output.exists()


def test_train_py_refuses_a_domain_smaller_than_one_batch_instead_of_waiting_for_ever(
    manifest, tmp_path
):
    """12 images a domain, half held out (train.py's --holdout_fraction 0.5): 6 to train on,
    fewer than a batch of 8 (with DomainBed's default 0.2 they would be 10, enough). DomainBed's
    loader would drop the incomplete batch and wait for ever; the test domain trains on none."""
    args = ["--dataset", "TinyDomains", "--algorithm", "ERM", "--test_envs", "1"]
    args += ["--output_dir", str(tmp_path / "run"), "--holdout_fraction", "0.5"]
    args += ["--hparams", '{"batch_size": 8}']
    env = environment(manifest)
    refused = run_python(
        "-m", "domainbed.scripts.train", *args, cwd=tmp_path, env=env, check=False, timeout=300
    )
    assert refused.returncode != 0
    printed = refused.stdout + refused.stderr  # train.py tees stderr into stdout
    assert (
        "domain 'indoor' of TinyDomains trains on 6 images (12 less 6 held out, holdout_fraction "
        "0.5): fewer than one batch of 8 (the run's hparam batch_size)"
    ) in printed
    assert "lower the hparam batch_size to at most 6" in printed
    assert "domain 'outdoor'" not in printed
    assert not (tmp_path / "run" / "results.jsonl").exists()


def rename_class(images):
    for domain in images.iterdir():
        (domain / "cat").rename(domain / "zebra")


def space_class(images):
    for domain in images.iterdir():
        (domain / "cat").rename(domain / "cat ")


def add_class(images):
    for domain in images.iterdir():
        shutil.copytree(domain / "cat", domain / "owl")


def add_image(images):
    shutil.copy(images / "indoor" / "cat" / "0.png", images / "indoor" / "cat" / "copy.png")


def swap_image(images):
    (images / "outdoor" / "dog" / "0.png").rename(images / "outdoor" / "dog" / "new.png")


@pytest.mark.parametrize(
    "edit, message",
    [
        pytest.param(None, None, id="unedited"),
        pytest.param(
            rename_class,
            "it trained on the classes 'cat', 'dog' (in label order), the dataset has 'dog', "
            "'zebra' today",
            id="class renamed",
        ),
        pytest.param(
            space_class,
            "class 0 was 'cat' and is 'cat ' today, which differ in white space at an end",
            id="class renamed with a space",
        ),
        pytest.param(add_class, "the dataset has 'cat', 'dog', 'owl' today", id="class added"),
        pytest.param(
            add_image,
            "its domains held indoor 12, outdoor 12 images, today indoor 13, outdoor 12",
            id="image added",
        ),
        pytest.param(
            swap_image,
            "the same classes and numbers of images, but other image files or labels",
            id="image renamed",
        ),
    ],
)
def test_a_run_is_refused_once_its_classes_or_images_change(
    manifest, trained_run, tmp_path, registered, edit, message
):
    """The run's data copied elsewhere evaluates as it was; edited, it is refused before its
    model is scored on other classes or other splits (a renamed class would swap the labels)."""
    images = tmp_path / "images"
    shutil.copytree(manifest.parent / "images", images)
    copy = tmp_path / "tiny.toml"
    copy.write_text(manifest.read_text().replace('root = "images"', f'root = "{images}"'))
    registered(copy)
    if edit is not None:
        edit(images)
    output = tmp_path / "evaluated"
    code, _, err = cli("evaluate", "--run_dir", str(trained_run), "--output_dir", str(output))
    if edit is None:
        assert code == 0, err
        return
    assert code == 2 and f"'{trained_run}' holds a run of TinyDomains whose data changed" in err
    assert message in err and not output.exists()
