"""``dmg-domainbed masks``: DMG's mask probabilities per domain and layer, IoU between domains."""

import numpy as np
import pandas as pd
import torch

from dmg_domainbed.algorithms.dmg import masks
from tests.helpers import cli, runs_of, snapshot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_masks_of_a_dmg_run(demo_sweep, tmp_path):
    run_dir = runs_of(demo_sweep)[("DMG", 0)]
    before = snapshot(run_dir)
    code, printed, _ = cli("masks", "--run_dir", str(run_dir), "--output_dir", str(tmp_path))
    assert code == 0
    assert snapshot(run_dir) == before
    assert (tmp_path / "masks.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "mean_hard_iou" in printed

    state = torch.load(run_dir / "model.pkl", weights_only=False)["model_dict"]
    probabilities = pd.read_csv(tmp_path / "masks_probabilities.csv")
    iou = pd.read_csv(tmp_path / "masks_iou.csv")
    layers = list(probabilities["layer"].unique())
    assert layers == ["featurizer.hiddens.0", "featurizer.output", "classifier"]
    domains = ["d0 = 30", "d1 = 60", "d2 = 90"]  # test domain 0 held out
    for i, layer in enumerate(layers):
        expected = torch.sigmoid(state[f"masks.logits.{i}"])
        rows = probabilities[probabilities["layer"] == layer]
        assert list(rows["domain"].unique()) == domains
        got = rows["probability"].to_numpy().reshape(expected.shape)
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-6)
        matrix = iou[iou["layer"] == layer]["hard_iou"].to_numpy().reshape(3, 3)
        hard = masks.pairwise_soft_iou(masks.hard_masks(expected)).numpy()
        np.testing.assert_allclose(matrix, hard, rtol=1e-6)
        np.testing.assert_allclose(np.diag(matrix), 1.0)


def test_masks_of_another_algorithm_names_dmg_runs_nearby(demo_sweep, tmp_path):
    runs = runs_of(demo_sweep)
    multihead = runs[("MultiHead", 0)]
    code, _, message = cli(
        "masks", "--run_dir", str(multihead), "--output_dir", str(tmp_path / "o")
    )
    assert code == 2
    assert f"'{multihead}' is a run of MultiHead, which draws nothing" in message
    assert "'masks' needs a run of" in message
    assert "DMG" in message and "ImportanceMask" in message
    assert str(runs[("DMG", 0)].parent) in message
    assert not (tmp_path / "o").exists()


def test_masks_of_a_missing_folder(tmp_path):
    code, _, message = cli("masks", "--run_dir", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in message
