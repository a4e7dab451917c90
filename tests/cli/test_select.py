"""``dmg-domainbed select``: the paper's model selection (best known-domain hard-mask accuracy
on the source validation splits, over every saved checkpoint) on a run of DomainBed's own
train.py in the paper's protocol, from a sweep file (the authors' inverse lr schedule, every
checkpoint's model saved)."""

import json
import os
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from domainbed import algorithms, datasets
from domainbed.lib import misc

from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.checks import check_file
from dmg_domainbed.sweep.config import load_sweep, resolve
from tests.helpers import cli, domainbed_script, snapshot

HARD = "DMG-KnownDomain, hard masks"


SWEEP_FILE = """
[sweep]
algorithms = ["DMG"]
datasets = ["RotatedDigits"]
n_hparams = 1
n_trials = 1
steps = 21
checkpoint_freq = 10
save_model_every_checkpoint = true
single_test_envs = true

[sweep.hparams]
lr_schedule = "inverse"
lr = 1e-3
batch_size = 16

[sweep.algorithm_hparams.DMG]
mask_lr = 0.05
"""


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    """One job of a sweep file in the paper's protocol, run with the exact command DomainBed's
    launchers get: DMG on RotatedDigits, test domain 0, a model saved at steps 0, 10 and 20."""
    root = tmp_path_factory.mktemp("select")
    (root / "paper.toml").write_text(SWEEP_FILE)
    config = load_sweep(root / "paper.toml")
    check_file(config)
    sweep = resolve(config, str(root / "data"), str(root / "sweep"))
    (job,) = [
        j
        for j in plan.jobs(sweep, plan.groups(sweep.config)[0])
        if j.train_args["test_envs"] == [0]
    ]
    assert "--save_model_every_checkpoint  --seed" in job.command_str  # a bare switch
    os.makedirs(job.output_dir)
    python, option, module, *args = shlex.split(job.command_str)  # as the launchers' shell does
    assert [python, option, module] == ["python", "-m", "domainbed.scripts.train"]
    domainbed_script("train", *args)  # here: the run, not its process, is what is tested
    return Path(sweep.output_dir), Path(job.output_dir)


def hard_mask_accuracy(run_dir, step):
    """The authors' in-domain accuracy written out: each source domain's held-out split as
    train.py cuts it, classified with that domain's hard mask (m_d > 0.5)."""
    checkpoint = torch.load(run_dir / f"model_step{step}.pkl", weights_only=False)
    dmg = algorithms.get_algorithm_class("DMG")(
        checkpoint["model_input_shape"],
        checkpoint["model_num_classes"],
        checkpoint["model_num_domains"],
        checkpoint["model_hparams"],
    )
    dmg.load_state_dict(checkpoint["model_dict"])
    dmg.eval()
    dataset = datasets.get_dataset_class("RotatedDigits")("unused", [0], {})
    accuracies = {}
    for domain, env in enumerate([1, 2, 3]):
        out, _ = misc.split_dataset(
            dataset[env], int(len(dataset[env]) * 0.2), misc.seed_hash(0, env)
        )
        x = torch.stack([out[i][0] for i in range(len(out))])
        y = torch.tensor([out[i][1] for i in range(len(out))])
        with torch.no_grad():
            predicted = dmg.predict_known_domain(x, domain, "hard").argmax(1)
        accuracies[env] = (predicted == y).double().mean().item()
    return accuracies


def test_selection_by_known_domain_hard_masks_over_every_checkpoint(paper_run, tmp_path):
    sweep, run_dir = paper_run
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 10, 20]
    # the authors' InvLR on both optimisers, applied inside update under train.py
    assert records[-1]["lr"] < 1e-3 and records[-1]["mask_lr"] < 0.05
    assert records[-1]["lr"] / 1e-3 == pytest.approx(records[-1]["mask_lr"] / 0.05)
    before = snapshot(sweep)

    code, printed, _ = cli("select", "--input_dir", str(sweep), "--output_dir", str(tmp_path))

    assert code == 0 and snapshot(sweep) == before
    assert "the splits are train.py's" in printed
    evaluations = pd.read_csv(tmp_path / "checkpoints.csv")
    expected = {step: hard_mask_accuracy(run_dir, step) for step in (0, 10, 20)}
    for step, per_env in expected.items():
        rows = evaluations[(evaluations["prediction"] == HARD) & (evaluations["step"] == step)]
        assert dict(zip(rows["env"], rows["accuracy"] / 100)) == pytest.approx(per_env)
    best = max(expected, key=lambda step: np.mean(list(expected[step].values())))
    selection = pd.read_csv(tmp_path / "selection.csv")
    chosen = selection[(selection["prediction"] == HARD) & (selection["test_env"] == "0")]
    assert chosen["accuracy"].item() == pytest.approx(100 * records[best // 10]["env0_in_acc"])
    # predict's row is collect_results' training-domain validation: best mean env<i>_out_acc
    by_predict = max(records, key=lambda r: np.mean([r[f"env{e}_out_acc"] for e in (1, 2, 3)]))
    predicted = selection[
        (selection["prediction"] == "DMG (predict)") & (selection["test_env"] == "0")
    ]
    assert predicted["accuracy"].item() == pytest.approx(100 * by_predict["env0_in_acc"])
    assert f"| {HARD} |" in (tmp_path / "selection.md").read_text()


def test_runs_without_checkpoint_models_are_refused_with_the_fix(paper_run, tmp_path):
    lonely = tmp_path / "sweep" / "run"
    lonely.mkdir(parents=True)
    (lonely / "results.jsonl").write_text((paper_run[1] / "results.jsonl").read_text())
    code, _, error = cli("select", "--input_dir", str(tmp_path / "sweep"))
    assert code == 2
    assert "saved its checkpoints' models" in error
    assert "save_model_every_checkpoint = true" in error
