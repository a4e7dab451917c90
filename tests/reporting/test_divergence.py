"""A run diverged when a loss it logged is NaN or infinite, read as train.py writes it."""

import json
import math

import pytest

from dmg_domainbed.runs import divergence, folder_divergence

pytestmark = pytest.mark.no_domainbed


def test_the_first_non_finite_loss_is_named_and_other_numbers_are_not_losses():
    records = [
        {"step": 0, "loss": 2.3, "projection_ratio": math.nan},
        {"step": 100, "disc_loss": math.inf, "loss": math.nan, "env0_in_acc": 0.1},
    ]
    assert divergence(records[:1]) is None
    assert divergence(records) == "disc_loss inf at step 100"


def test_results_jsonl_as_train_py_writes_it_with_a_half_written_last_line(tmp_path):
    lines = [json.dumps({"step": s, "loss": v}) for s, v in ((0, 1.0), (300, -math.inf))]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + '\n{"step": 6')
    assert "-Infinity" in lines[1]  # json's own spelling
    assert folder_divergence(tmp_path) == "loss -inf at step 300"
    assert folder_divergence(tmp_path / "not_started") is None
