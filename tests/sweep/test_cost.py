"""A sweep's cost before it starts: its images counted from DomainBed's job list, its hours from
measured times (the user's smoke measures, the package's GPU table), every blocker listed, before
any command line."""

import json
import sys

import pytest

from dmg_domainbed.cli import main
from dmg_domainbed.sweep import cost

SWEEP = """
[sweep]
algorithms = ["ERM", "DMG"]
datasets = ["RotatedDigits"]
n_hparams = 1
n_trials = 2
steps = 250
checkpoint_freq = 100
single_test_envs = true
data_dir = "."
output_dir = "{output}"

[sweep.hparams]
batch_size = 8

[launcher]
name = "submitit"
"""


def smoke_results(path):
    """What `dmg-domainbed smoke --json` writes, with measures chosen for round numbers."""
    rows = [
        {
            "algorithm": algorithm,
            "dataset": "RotatedDigits",
            "train_args": {"test_envs": [0]},
            "batch_size": 8,
            "source_domains": 3,
            "status": "ok",
            "seconds_per_step": seconds_per_step,
            "start_seconds": 10.0,
            "eval_seconds_per_image": 0.001,
        }
        for algorithm, seconds_per_step in (("ERM", 0.24), ("DMG", 0.6))
    ]
    results = {"kind": "smoke", "command": "dmg-domainbed smoke FILE --json F", "rows": rows}
    path.write_text(json.dumps(results | {"date": "2026-12-03T00:00:00", "device": "cpu: 2 cores"}))
    return path


@pytest.mark.parametrize(
    "steps, freq, expected",
    [(5001, 300, 18), (250, 100, 4), (600, 100, 7), (101, 100, 2), (1, 1, 1), (3, 5, 2)],
)
def test_checkpoints_are_train_py_s_evaluations(steps, freq, expected):
    # train.py evaluates where step % freq == 0 and at step steps - 1:
    # 5001/300: 0, 300, ..., 4800 (17) and 5000; 600/100: 0..500 (6) and 599; 101/100: 0 and 100
    assert cost.checkpoints(steps, freq) == expected


def test_dry_run_costs_a_plan_counted_by_hand(tmp_path, capsys, monkeypatch):
    # 2 algorithms x 4 test domains (RotatedDigits) x 1 hparams seed x 2 trials = 16 jobs, 8 each.
    # A job: 250 steps x 8 images x 3 source domains = 6,000 training images; checkpoints at
    # steps 0, 100, 200 and 249 = 4, each evaluating all 1,797 images: 7,188 evaluation images.
    # Per algorithm: 48,000 training and 57,504 evaluation images.
    # The smoke measures: ERM 0.24 s a step of 24 images = 0.01 s an image; DMG 0.6 s = 0.025 s;
    # evaluation 0.001 s an image; 10 s a job to start and end. A job of ERM: 6,000 x 0.01 +
    # 7,188 x 0.001 + 10 = 77.188 s, 8 jobs 617.504 s = 0.172 hours; of DMG: 150 + 7.188 + 10
    # = 167.188 s, 8 jobs 1,337.504 s = 0.372 hours; total 1,955.008 s = 0.543 hours.
    sweep = tmp_path / "small.toml"
    sweep.write_text(SWEEP.format(output=tmp_path / "out"))
    measures = smoke_results(tmp_path / "smoke.json")
    monkeypatch.setitem(sys.modules, "submitit", None)  # as where it is not installed
    monkeypatch.delenv("DMG_SUBMITIT_CLUSTER", raising=False)

    assert main(["sweep", str(sweep), "--dry-run", "--cost-from", str(measures)]) == 0
    printed = capsys.readouterr().out

    lines = printed[printed.index("Cost of the jobs to launch") :].splitlines()
    erm = next(line for line in lines if line.strip().startswith("RotatedDigits  ERM"))
    dmg = next(line for line in lines if line.strip().startswith("RotatedDigits  DMG"))
    # jobs, training images, evaluation images, hours on the smoke's device, on the H200
    assert erm.split()[2:] == ["8", "48,000", "57,504", "0.172", "no", "figure"]
    assert dmg.split()[2:] == ["8", "48,000", "57,504", "0.372", "no", "figure"]
    assert "total: 16 jobs; 0.543 hours on cpu: 2 cores [1]" in printed
    assert (
        "no figure for DMG on RotatedDigits: mlp, fp32, 1 job(s) per GPU" in printed
    )  # the H200's table
    assert "needs submitit: pip install" in printed  # the launcher's blocker is listed
    # the cost, then the blockers; no command line unless asked for
    assert printed.index("total: 16 jobs") < printed.index("needs submitit")
    assert "python -m domainbed.scripts.train" not in printed
    assert not (tmp_path / "out").exists()

    assert main(["sweep", str(sweep), "--dry-run", "--commands"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("python -m domainbed.scripts.train") == 16
    assert printed.index("needs submitit") < printed.index("python -m domainbed.scripts.train")
    assert "dmg-domainbed smoke " in printed and "--cost-from SMOKE.json" in printed


def test_a_file_that_is_not_smoke_s_is_refused_before_any_check(tmp_path, capsys):
    sweep = tmp_path / "small.toml"
    sweep.write_text(SWEEP.format(output=tmp_path / "out"))
    (tmp_path / "other.json").write_text('{"format": 1}')
    assert main(["sweep", str(sweep), "--dry-run", "--cost-from", str(tmp_path / "other.json")])
    assert "not a results file of `dmg-domainbed smoke --json`" in capsys.readouterr().err
