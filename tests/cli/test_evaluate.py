"""``dmg-domainbed evaluate``: train.py's splits, predict vs known-domain (paper Table 3)."""

import re

import pandas as pd
import torch
from domainbed.lib import misc
from domainbed.lib.fast_data_loader import FastDataLoader
from torch.utils.data import Subset

from dmg_domainbed.reporting import in_domain
from dmg_domainbed.runs import load_algorithm, load_dataset, read_run, rebuild_splits
from tests.helpers import cli, runs_of, snapshot


def test_evaluate_table3_on_train_py_held_out_splits(demo_sweep, tmp_path):
    runs = runs_of(demo_sweep)
    chosen = [runs[("MultiHead", 1)], runs[("DMG", 1)]]
    before = [snapshot(run) for run in chosen]
    code, printed, _ = cli(
        "evaluate", "--run_dir", *map(str, chosen), "--output_dir", str(tmp_path)
    )
    assert code == 0
    assert [snapshot(run) for run in chosen] == before

    frame = pd.read_csv(tmp_path / "in_domain.csv")
    assert list(frame["prediction"].unique()) == [
        "MultiHead (predict)",
        "MultiHead-KnownDomain, own head",
        "DMG (predict)",
        "DMG-KnownDomain, soft masks",
        "DMG-KnownDomain, hard masks",
    ]
    # Source domains of test env 1 (domain "30"): environments 0, 2, 3.
    assert sorted(frame["env"].unique()) == [0, 2, 3]
    predict = frame[frame["prediction"].str.endswith("(predict)")]
    # Accuracy of predict on the rebuilt splits is what train.py logged on its own splits.
    assert (predict["accuracy"] - predict["logged"]).abs().max() < 1e-9
    assert "the splits are train.py's" in printed
    table = re.sub(" +", " ", (tmp_path / "in_domain.md").read_text())
    assert "| Prediction | 0 | 60 | 90 | Avg |" in table
    assert "| DMG-KnownDomain, hard masks |" in table


def test_rebuilt_splits_are_train_py_splits_for_every_environment(demo_sweep):
    run = read_run(runs_of(demo_sweep)[("DMG", 3)])
    algorithm = load_algorithm(run, "cpu")
    dataset = load_dataset(run)
    last = run.records[-1]
    for split in rebuild_splits(dataset, run.args):
        env = dataset[split.env]
        assert sorted(split.in_keys + split.out_keys + split.uda_keys) == list(range(len(env)))
        assert len(split.out_keys) == int(len(env) * run.args["holdout_fraction"])
        for part, keys in (("in", split.in_keys), ("out", split.out_keys)):
            loader = FastDataLoader(dataset=Subset(env, keys), batch_size=64, num_workers=0)
            accuracy = misc.accuracy(algorithm, loader, None, "cpu")
            assert accuracy == last[f"env{split.env}_{part}_acc"], (split.env, part)


def test_known_domain_prediction_differs_from_predict_only_where_masks_differ(copied_run):
    run_dir = copied_run("DMG", 0)
    soft = "DMG-KnownDomain, soft masks"
    checkpoint_path = run_dir / "model.pkl"
    checkpoint = torch.load(checkpoint_path, weights_only=False)
    logits = [k for k in checkpoint["model_dict"] if k.startswith("masks.logits.")]
    probs = torch.sigmoid(checkpoint["model_dict"][logits[0]])
    assert not torch.allclose(probs[0], probs[1])

    learned = in_domain.evaluate_run(read_run(run_dir), device="cpu")
    assert learned.loc[learned["prediction"] == soft, "changed"].max() > 0

    for key in logits:  # every source domain gets domain 0's mask
        tensor = checkpoint["model_dict"][key]
        checkpoint["model_dict"][key] = tensor[:1].expand_as(tensor).clone()
    torch.save(checkpoint, checkpoint_path)
    shared = in_domain.evaluate_run(read_run(run_dir), device="cpu")
    rows = shared[shared["prediction"] == soft]
    assert (rows["changed"] == 0).all()
    predict = shared[shared["prediction"] == "DMG (predict)"]
    assert rows["accuracy"].tolist() == predict["accuracy"].tolist()


def test_evaluate_without_model_fails_and_leaves_the_run_alone(copied_run, tmp_path):
    run_dir = copied_run("DMG", 0)
    (run_dir / "model.pkl").unlink()
    before = snapshot(run_dir)
    code, _, message = cli(
        "evaluate", "--run_dir", str(run_dir), "--output_dir", str(tmp_path / "o")
    )
    assert code == 2
    assert f"run '{run_dir}' has no model.pkl" in message and "done" in message
    assert snapshot(run_dir) == before and not (tmp_path / "o").exists()


def test_evaluate_refuses_runs_with_different_test_domains(demo_sweep, tmp_path):
    runs = runs_of(demo_sweep)
    code, _, message = cli(
        "evaluate",
        "--run_dir",
        str(runs[("DMG", 0)]),
        str(runs[("DMG", 1)]),
        "--output_dir",
        str(tmp_path / "o"),
    )
    assert code == 2 and "differ in test_envs" in message


def test_runs_with_different_test_domains_are_refused_before_the_output_folder(
    demo_sweep, tmp_path
):
    """What is wrong with the runs given is said first, whatever the output folder holds."""
    runs, output = runs_of(demo_sweep), tmp_path / "o"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    given = [str(runs[("DMG", 0)]), str(runs[("DMG", 1)])]
    code, _, message = cli("evaluate", "--run_dir", *given, "--output_dir", str(output))
    assert code == 2 and "differ in test_envs" in message
    assert (output / "notes.txt").read_text() == "mine"


def test_evaluate_of_a_sweep_folder_names_a_run_inside(demo_sweep):
    code, _, message = cli("evaluate", "--run_dir", str(demo_sweep))
    assert code == 2
    assert "is not a DomainBed training run" in message and "--run_dir " in message


def test_a_run_saved_with_a_name_nothing_read_is_still_evaluated(copied_run, tmp_path):
    # A run trained before the names rule, with a misspelt hparam it trained without.
    run_dir = copied_run("DMG", 0)
    checkpoint = torch.load(run_dir / "model.pkl", weights_only=False)
    checkpoint["model_hparams"]["lamda_overlap"] = 0.5
    torch.save(checkpoint, run_dir / "model.pkl")

    out = tmp_path / "out"
    code, _, errors = cli("evaluate", "--run_dir", str(run_dir), "--output_dir", str(out))
    assert code == 0, errors
    assert "DMG-KnownDomain, soft masks" in (out / "in_domain.csv").read_text()
