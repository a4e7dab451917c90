"""Hparam values no run can train with are refused before any work: in the sweep preflight and
when train.py builds a plugin algorithm, for its own float hparams and DomainBed's shared ones."""

import math

import numpy as np
import pytest
from domainbed.lib import misc

from dmg_domainbed.errors import UserError
from dmg_domainbed.integration import ALGORITHM_GROUP, entry_points, load
from dmg_domainbed.preflight.hparams import checked_run

from ..helpers import domainbed_script
from .conftest import build

FLOAT_HPARAMS = [
    pytest.param(cls, h, id=f"{name}.{h.name}")
    for name in sorted(entry_points(ALGORITHM_GROUP))
    if (cls := load(ALGORITHM_GROUP, name)) is not None
    for h in cls.HPARAMS
    if h.rule.types == (float,)
]


@pytest.mark.parametrize("cls, hparam", FLOAT_HPARAMS)
def test_every_float_hparam_has_a_range_that_holds_its_search_space(cls, hparam):
    assert hparam.maximum is not None and math.isfinite(hparam.maximum)
    assert hparam.minimum is not None or hparam.validate is not None  # e.g. positive
    values = [hparam.default, *hparam.per_dataset.values()]
    values += [
        hparam.sample(np.random.RandomState(misc.seed_hash(s, hparam.name))) for s in range(50)
    ]
    assert [v for v in values if hparam.rule.problem(v) is not None] == []
    assert hparam.rule.problem(hparam.maximum * 2 + 1) == f"it must be {hparam.rule.allowed()}"


OVERFLOWING = r"'lambda_overlap' = 1e\+308 is not valid: it must be a number between 0 and 10000"
DIVERGING = r"DMG hparam 'lr' = 1e\+30 is not valid: it must be a number between 1e-10 and 10"


@pytest.mark.parametrize(
    "hparams, message", [({"lambda_overlap": 1e308}, OVERFLOWING), ({"lr": 1e30}, DIVERGING)]
)
def test_the_sweep_preflight_and_train_py_refuse_values_that_cannot_train(hparams, message):
    with pytest.raises(UserError, match=message):
        checked_run("DMG", "RotatedDigits", hparams)
    # train.py builds the algorithm from its hparams before the first step
    with pytest.raises(UserError, match=message):
        build("DMG", **hparams)


def test_domainbed_s_train_py_stops_before_its_first_step(tmp_path):
    hparams = '{"lr": 1e30}'
    given = ["--algorithm", "DMG", "--dataset", "RotatedDigits", "--hparams", hparams]
    with pytest.raises(UserError, match=DIVERGING):
        domainbed_script("train", *given, "--output_dir", str(tmp_path))
    assert not (tmp_path / "results.jsonl").exists() and not (tmp_path / "done").exists()
