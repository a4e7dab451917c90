"""The sweep report draws an algorithm's curves from one run per choice of test domains."""

import re

import pytest

from dmg_domainbed.reporting.report import first_runs, picture_parts


def record(output_dir, test_envs, hparams_seed, trial_seed, step, algorithm="DMG"):
    args = {
        "algorithm": algorithm,
        "dataset": "D",
        "test_envs": test_envs,
        "output_dir": output_dir,
        "hparams_seed": hparams_seed,
        "trial_seed": trial_seed,
    }
    return {"args": args, "step": step}


def test_first_runs_pick_the_lowest_hparams_and_trial_seed_per_test_domains():
    records = [
        record("a", [0], 1, 0, 10),
        record("a", [0], 1, 0, 0),
        record("b", [0], 0, 2, 0),
        record("c", [0], 0, 1, 5),
        record("c", [0], 0, 1, 0),
        record("d", [1], 3, 0, 0),
        record("e", [1], 0, 0, 0, algorithm="ERM"),
    ]
    runs = first_runs(records, "D", "DMG")
    assert [[r["args"]["output_dir"] for r in run] for run in runs] == [["c", "c"], ["d"]]
    assert [r["step"] for r in runs[0]] == [0, 5]
    assert first_runs(records, "other", "DMG") == []


@pytest.mark.parametrize(
    "names, parts",
    [
        (["DMG", "ERM (bf16)"], ["dmg", "erm-bf16"]),
        (
            ["DMG (bf16, lr=0.05)", "DMG (lambda_overlap=1.0)"],
            ["dmg-bf16-lr-0.05", "dmg-lambda_overlap-1.0"],
        ),
        (["../../x"], ["x"]),  # neither a parent folder nor a hidden file
        # names that would share a file name, or leave none, get a hash of the name
        (["a b", "A-B", "a+b"], [r"a-b-[0-9a-f]{8}"] * 3),
        (["()", "DMG"], [r"x-[0-9a-f]{8}", "dmg"]),
    ],
)
def test_pictures_are_named_without_signs_a_shell_would_split(names, parts):
    found = list(picture_parts(names).values())
    assert len(set(found)) == len(names)
    assert all(re.fullmatch(pattern, part) for pattern, part in zip(parts, found, strict=True))
