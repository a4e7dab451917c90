"""Hparam overrides are checked against what the algorithm has on the dataset."""

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight.hparams import checked_run


def test_overrides_update_the_defaults():
    hparams = checked_run("DMG", "PACS", {"resnet18": True, "lambda_overlap": 0.5}).hparams
    assert hparams["resnet18"] is True and hparams["lambda_overlap"] == 0.5
    assert hparams["mask_lr"] == checked_run("DMG", "PACS").hparams["mask_lr"]


@pytest.mark.parametrize(
    "algorithm, overrides, message",
    [
        (
            "DMG",
            {"lamda_overlap": 0.1},
            "DMG does not know hparam 'lamda_overlap' .*for DMG on PACS.*: .*lambda_overlap",
        ),
        ("Aggregate", {"lambda_overlap": 0.1}, "Aggregate does not know hparam"),
        ("ERM", {"lrr": 0.1}, r"ERM does not know hparam 'lrr' \(did you mean 'lr'\?\)"),
        (
            "ERM",
            {"resnet18": "yes"},
            "ERM hparam 'resnet18' on PACS = 'yes' is not valid: it must be true or false, not str",
        ),
        ("ERM", {"batch_size": 32.5}, "batch_size"),
        (
            "DMG",
            {"mask_init": "gaussian"},
            "mask_init' = 'gaussian' is not valid: it must be one of",
        ),
    ],
)
def test_unknown_names_and_wrong_types_are_rejected(algorithm, overrides, message):
    with pytest.raises(UserError, match=message):
        checked_run(algorithm, "PACS", overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"lr": 1e30}, r"ERM hparam 'lr' = 1e\+30 is not valid: it must be a number between"),
        ({"lr": float("nan")}, r"'lr' on PACS = nan is not valid"),
        ({"weight_decay": -1.0}, r"'weight_decay' = -1.0 is not valid"),
        ({"batch_size": 0}, r"'batch_size' = 0 is not valid: it must be an integer between 1"),
    ],
)
def test_values_no_run_can_train_with_are_refused(overrides, message):
    with pytest.raises(UserError, match=message):
        checked_run("ERM", "PACS", overrides)
