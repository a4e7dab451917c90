"""In-domain Table 3: its layout, and which runs may share one table."""

import pandas as pd
import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.in_domain import check_comparable, logged_mismatches, table3
from dmg_domainbed.runs import Run

ARGS = {
    "algorithm": "DMG",
    "dataset": "RotatedDigits",
    "test_envs": [0],
    "trial_seed": 0,
    "holdout_fraction": 0.2,
}


def run(hparams=None, **args):
    record = {"args": {**ARGS, **args}, "hparams": hparams or {}}
    return Run(path=f"run{len(args)}{hparams}", records=(record,))


def test_runs_in_one_table_must_share_their_splits():
    check_comparable([run(), run(algorithm="MultiHead")])
    check_comparable([run(), run({"precision": "bf16"})])  # rows DMG and DMG (bf16)
    with pytest.raises(UserError, match="both runs of DMG on test envs"):
        check_comparable([run(), run(hparams_seed=3)])
    with pytest.raises(UserError, match="differ in test_envs, trial_seed"):
        check_comparable([run(), run(test_envs=[1], trial_seed=1)])


def test_table3_has_predictions_down_domains_across_and_their_average():
    frame = pd.DataFrame(
        {
            "prediction": ["DMG (predict)", "DMG (predict)", "DMG-KnownDomain", "DMG-KnownDomain"],
            "domain": ["30", "60", "30", "60"],
            "accuracy": [50.0, 70.0, 60.0, 81.0],
        }
    )
    table = table3(frame)
    assert list(table.index) == ["DMG (predict)", "DMG-KnownDomain"]
    assert list(table.columns) == ["30", "60", "Avg"]
    assert table.loc["DMG-KnownDomain", "Avg"] == 70.5


def test_only_rows_whose_accuracy_differs_from_the_logged_one_are_mismatches():
    frame = pd.DataFrame({"accuracy": [50.0, 60.0, 70.0], "logged": [50.0, None, 71.0]})
    mismatches = logged_mismatches(frame)
    assert mismatches["accuracy"].tolist() == [70.0]
