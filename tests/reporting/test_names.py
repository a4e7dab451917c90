"""The names the reports give runs: precision, protocol and the fixed hparams (train.py's --hparams)
keep runs apart that DomainBed's grouping would pool; the random search's hparams do not."""

import json
from pathlib import Path

import pytest

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting.jobs import names_notes, reported_names


def last_record(fixed=None, algorithm="DMG", dataset="D", hparams_seed=0):
    """A run's last record: ``fixed`` its --hparams (a ``precision`` there is its precision)."""
    hparams = {"lr": 0.01 * (hparams_seed + 1), **(fixed or {})}
    args = {"algorithm": algorithm, "dataset": dataset, "hparams_seed": hparams_seed}
    args["hparams"] = json.dumps(fixed) if fixed is not None else None
    return {"args": args, "hparams": hparams}


@pytest.mark.parametrize(
    "runs, names",
    [
        # the random search: other hparams seeds, the same fixed hparams, pooled
        ([{}, {"hparams_seed": 3}], ["DMG", "DMG"]),
        ([{"fixed": {"lr": 0.05}}, {"fixed": {"lr": 0.05}, "hparams_seed": 3}], ["DMG", "DMG"]),
        # a sweep file changed and run again into the same folder
        ([{"fixed": {"lr": 0.001}}, {"fixed": {"lr": 0.05}}], ["DMG (lr=0.001)", "DMG (lr=0.05)"]),
        ([{}, {"fixed": {"lr": 0.05}}], ["DMG", "DMG (lr=0.05)"]),
        (
            [{"fixed": {"lr": 0.05, "resnet18": True}}, {"fixed": {"lr": 0.05}}],
            ["DMG (resnet18=true)", "DMG"],
        ),
        # precision is named on its own, whether or not it differs
        ([{"fixed": {"precision": "bf16"}}, {}], ["DMG (bf16)", "DMG"]),
        ([{"fixed": {"precision": "bf16"}}], ["DMG (bf16)"]),
        (
            [{"fixed": {"precision": "bf16", "lr": 0.05}}, {"fixed": {"lr": 0.001}}],
            ["DMG (bf16, lr=0.05)", "DMG (lr=0.001)"],
        ),
        # so is a search_once sweep's protocol, never pooled with DomainBed's
        ([{"fixed": {"protocol": "search_once"}}, {}], ["DMG (search_once)", "DMG"]),
        ([{"fixed": {"protocol": "search_once"}}], ["DMG (search_once)"]),
        (
            [{"fixed": {"protocol": "search_once", "precision": "bf16", "lr": 0.05}}, {}],
            ["DMG (bf16, search_once, lr=0.05)", "DMG"],
        ),
        # hparams set per dataset are not a conflict; once they differ on one dataset, every
        # run of the algorithm is named by them
        (
            [{"fixed": {"lr": 0.05}}, {"fixed": {"lr": 0.001}, "dataset": "E"}],
            ["DMG", "DMG"],
        ),
        (
            [
                {"fixed": {"lr": 0.05}},
                {"fixed": {"lr": 0.001}},
                {"fixed": {"lr": 0.001}, "dataset": "E"},
            ],
            ["DMG (lr=0.05)", "DMG (lr=0.001)", "DMG (lr=0.001)"],
        ),
        # other algorithms' fixed hparams are theirs
        ([{"fixed": {"lr": 0.05}}, {"fixed": {"lr": 0.001}, "algorithm": "ERM"}], ["DMG", "ERM"]),
    ],
)
def test_runs_are_named_by_the_fixed_hparams_in_which_they_differ(runs, names):
    last = {Path(f"run{i}"): last_record(**run) for i, run in enumerate(runs)}
    assert list(reported_names(last).values()) == names
    differing = any("=" in name for name in names)
    assert any(note.startswith("Fixed hparams: ") for note in names_notes(last)) == differing


@pytest.mark.parametrize("given", ["lr=0.05", "[0.05]", "null", 5])
def test_fixed_hparams_that_train_py_could_not_have_read_are_refused(given):
    record = last_record()
    record["args"]["hparams"] = given
    with pytest.raises(UserError, match=r"'run0' records --hparams .* not a JSON object"):
        reported_names({Path("run0"): record})
