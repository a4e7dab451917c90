"""``dmg-domainbed smoke``: a sweep's algorithms and datasets through DomainBed's own train in
fresh processes, a table of what ran; missing data and weights named as the doctor and the
sweep name them; nothing written into the sweep's folder or the user's caches."""

import json
import re

import pytest
from huggingface_hub import constants

from dmg_domainbed import synthetic
from dmg_domainbed.cli import main
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import doctor, environment
from dmg_domainbed.sweep import config
from tests.helpers import fresh_process_that_registers_erm_and_pacs, machine_check

SWEEP = """
[sweep]
algorithms = ["ERM", "DMG"]
datasets = ["PACS"]
n_hparams = 2
n_trials = 1
single_test_envs = true
holdout_fraction = 0.5
output_dir = "{output}"

[sweep.hparams]
resnet18 = true
resnet50_augmix = false
batch_size = 2
"""


@pytest.fixture
def user(monkeypatch, tmp_path):
    """Empty weight caches standing for the user's; one thread and one data-loader worker per
    loader in each job (PACS's own 8 workers per loader fork dozens of processes)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "user_cache" / "torch"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "user_cache" / "hf"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("DMG_DOMAINBED_LOADER_WORKERS", "1")
    monkeypatch.delenv("DMG_DOMAINBED_DISABLE", raising=False)
    sweep_file = tmp_path / "pacs.toml"
    sweep_file.write_text(SWEEP.format(output=tmp_path / "sweep"))
    return sweep_file


def smoke(capsys, *args):
    code = main(["smoke", *args])
    return code, capsys.readouterr().out


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow  # a job that trains at 224x224
def test_smoke_runs_a_sweep_s_job_through_train_on_a_pacs_shaped_folder(user, tmp_path, capsys):
    data = tmp_path / "data"
    synthetic.write_image_dataset("PACS", data, images_per_domain=3, classes=2)
    before = snapshot(data)

    code, out = smoke(
        capsys,
        str(user),
        "--algorithms",
        "DMG",
        "--data_dir",
        str(data),
        "--steps",
        "1",
        "--synthetic",
        "--json",
        str(tmp_path / "measures.json"),
    )

    assert code == 0, out
    row = next(line for line in out.splitlines() if line.startswith("DMG "))
    # 8 of the sweep's 16 jobs are DMG's: 2 hparams seeds x 4 test domains.
    # s/step, start s, eval ms/image, peak GB; jobs; their estimated hours
    number = r" +[\d.]+"
    assert re.match(rf"DMG +PACS +3x2 +ok \(random weights\){number * 4} +8{number}$", row)
    assert "device: cpu" in out and "3 warm-up and 1 timed steps a job" in out
    (measured,) = json.loads((tmp_path / "measures.json").read_text())["rows"]
    assert measured["algorithm"] == "DMG" and measured["status"] == "ok"
    assert all(measured[key] > 0 for key in ("seconds_per_step", "start_seconds"))
    assert measured["eval_seconds_per_image"] > 0
    # the arguments of the sweep's job it stands for, not smoke's shortened run
    assert "steps" not in measured["train_args"] and measured["train_args"]["hparams_seed"] == 0
    assert "random weights (not pretrained) in " in out and "your caches are untouched" in out
    assert "PACS: a sample of " in out
    assert "Every job ran, with random weights standing in" in out
    assert not (tmp_path / "sweep").exists()
    assert not (tmp_path / "user_cache").exists()
    assert snapshot(data) == before


def test_missing_data_and_weights_are_named_alike_by_smoke_doctor_and_sweep(
    user, tmp_path, capsys, monkeypatch
):
    data = tmp_path / "data"
    checkpoint = tmp_path / "user_cache" / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    expected = [
        f"expected {data / 'PACS'}/ with 4 domain folders",
        f"download_pacs('{data}')",
        f"not found at {checkpoint}",
        f"to get it: TORCH_HOME={tmp_path / 'user_cache' / 'torch'} python -c",
    ]

    code, out = smoke(capsys, str(user), "--data_dir", str(data), "--algorithms", "ERM")
    assert code == 1
    (line,) = [line for line in out.splitlines() if line.startswith("[1/1] ERM on PACS: not run:")]
    assert all(text in line for text in expected), line
    assert "NOT READY: 1 job(s) did not run: ERM on PACS" in out

    sweep_config = config.load_sweep(user)
    sweep = config.resolve(sweep_config, str(data), None)
    with pytest.raises(UserError) as refused:
        machine_check(sweep)
    assert all(text in str(refused.value) for text in expected), refused.value

    registered = fresh_process_that_registers_erm_and_pacs()
    monkeypatch.setattr(environment, "probe_fresh_process", lambda: registered)
    checks = doctor.diagnose("ERM", "PACS", str(data), sweep_config.hparams_of("ERM"))
    report = doctor.render(checks, "ERM", "PACS")
    assert all(text in report for text in expected), report
    assert not doctor.is_ready(checks)
    assert not data.exists() and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "name a sweep file"),
        (["--algorithms", "DMG"], "both --algorithms and --datasets"),
        (["--algorithms", "DGM", "--datasets", "PACS"], "unknown algorithm(s) DGM; valid"),
        (
            ["--algorithms", "DMG", "--datasets", "PACS", "--hparams", '{"lamda_overlap": 1}'],
            "--hparams: DMG does not know hparam 'lamda_overlap'",
        ),
        (
            ["--algorithms", "DMG", "--datasets", "PACS", "--steps", "0"],
            "--steps must be at least 1",
        ),
        *(
            (
                ["--algorithms", "DMG", "--datasets", "PACS", "--timeout", given],
                f"--timeout must be a finite number of seconds > 0, the most one job may take; "
                f"got {given}",
            )
            for given in ("nan", "inf", "0", "-5")
        ),
    ],
)
def test_bad_requests_stop_before_any_work(args, message, capsys, tmp_path):
    assert main(["smoke", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_sweep_file_narrowed_to_names_it_does_not_have(user, capsys):
    assert main(["smoke", str(user), "--datasets", "VLCS"]) == 2
    assert "datasets VLCS not in " in capsys.readouterr().err
