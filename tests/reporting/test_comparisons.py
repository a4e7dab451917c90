"""Paired comparisons are honest: on sweeps with a known truth, the 95% intervals cover the true
difference about 95% of the time, an algorithm identical to the reference is seldom called
better, and pairing on the trial seed (the same data splits) removes split-to-split noise.

Each simulated sweep is one "dataset" of the selected-accuracy table the report builds
(:func:`dmg_domainbed.reporting.tables.selected_frame`), so thousands of sweeps are compared
in one call, without training."""

import re

import numpy as np
import pandas as pd
import pytest

from dmg_domainbed.reporting.comparisons import (
    AVERAGE,
    BETTER,
    ONE_TRIAL,
    UNCLEAR,
    WORSE,
    brief,
    compare,
    intervals,
    markdown,
)

pytestmark = pytest.mark.no_domainbed

MARGIN = 2.0  # points by which "Better" beats the reference on every trial


def simulated_sweeps(
    n_sweeps: int, n_trials: int, n_domains: int = 4, seed: int = 0, noise_sd: float = 1.0
) -> pd.DataFrame:
    """Selected accuracies of ``n_sweeps`` sweeps (one dataset each) of ERM, Better
    (ERM + MARGIN) and Same (ERM's equal), each trial with its own data splits.

    A trial's splits move every algorithm's accuracy on a test domain together (``split``);
    an algorithm's run adds its own noise, partly shared by the test domains of one trial
    (runs of one trial share the training domains' splits), partly per run.
    """
    rng = np.random.default_rng(seed)
    shape = (n_sweeps, n_trials, n_domains)
    base = 70 + rng.normal(0, 10, size=(n_sweeps, 1, n_domains))
    split = rng.normal(0, 5.0, size=shape)

    def run_noise():
        shared = rng.normal(0, noise_sd, size=(n_sweeps, n_trials, 1))
        return shared + rng.normal(0, noise_sd, size=shape)

    accuracies = {
        "ERM": base + split + run_noise(),
        "Better": base + split + MARGIN + run_noise(),
        "Same": base + split + run_noise(),
    }
    sweep, trial, domain = np.indices(shape).reshape(3, -1)
    frames = [
        pd.DataFrame(
            {
                "selection_method": "training-domain validation set",
                "dataset": sweep,
                "algorithm": name,
                "test_env": domain,
                "test_domain": domain.astype(str),
                "trial_seed": trial,
                "accuracy": values.reshape(-1),
            }
        )
        for name, values in accuracies.items()
    ]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def three_trials():
    return compare(simulated_sweeps(1000, 3), "ERM")


@pytest.mark.parametrize("n_trials", [3, 5])
def test_intervals_cover_the_true_difference_about_95_percent_of_the_time(n_trials, three_trials):
    comparisons = (
        three_trials if n_trials == 3 else compare(simulated_sweeps(1000, 5, seed=1), "ERM")
    )
    truth = comparisons["algorithm"].map({"Better": MARGIN, "Same": 0.0})
    covered = (comparisons["ci_low"] <= truth) & (truth <= comparisons["ci_high"])
    for level, rows in comparisons.groupby(comparisons["test_env"] == AVERAGE):
        where = "dataset" if level else "domain"
        for algorithm in ("Better", "Same"):
            coverage = covered[rows.index[rows["algorithm"] == algorithm]].mean()
            assert 0.93 <= coverage <= 0.97, (n_trials, where, coverage)
        # the figures docs/reports.md quotes (shown with pytest -s)
        each = covered[rows.index].groupby([rows["test_env"], rows["algorithm"]]).mean()
        print(f"{n_trials} trials, {where} interval: coverage {each.min():.3f}-{each.max():.3f}")


def test_an_algorithm_identical_to_the_reference_is_seldom_called_better(three_trials):
    same = three_trials[three_trials["algorithm"] == "Same"]
    # Two-sided 95% intervals: each side is wrong for about 2.5% of the sweeps.
    assert (same["verdict"] == BETTER).mean() < 0.04
    assert (same["verdict"] == WORSE).mean() < 0.04
    assert set(same["verdict"]) <= {BETTER, WORSE, UNCLEAR}
    # The probability of beating ERM on a new trial is a coin flip, on average.
    assert abs(same["p_beats"].mean() - 0.5) < 0.03


def test_pairing_on_the_trial_seed_removes_the_splits_noise():
    # Splits move accuracy by 5 points, runs by 0.3: paired on the splits, the 2-point
    # margin is found in nearly every sweep, and the algorithm is never called worse.
    sweeps = simulated_sweeps(200, 3, noise_sd=0.3)
    paired = compare(sweeps, "ERM")
    better = paired[(paired["algorithm"] == "Better") & (paired["test_env"] == AVERAGE)]
    assert (better["verdict"] == BETTER).mean() > 0.9
    assert (better["verdict"] == WORSE).sum() == 0
    assert better["p_beats"].median() > 0.9
    # Paired with the wrong trial, the same numbers give far wider intervals.
    shuffled = sweeps.copy()
    moved = shuffled["algorithm"] == "Better"
    shuffled.loc[moved, "trial_seed"] = (shuffled.loc[moved, "trial_seed"] + 1) % 3
    width = {}
    for name, rows in (("paired", paired), ("unpaired", compare(shuffled, "ERM"))):
        rows = rows[(rows["algorithm"] == "Better") & (rows["test_env"] != AVERAGE)]
        width[name] = (rows["ci_high"] - rows["ci_low"]).median()
    assert width["unpaired"] > 5 * width["paired"]


def test_interval_is_scipys_one_sample_t_interval():
    from scipy import stats

    differences = np.array([0.4, 2.9, 1.1, -0.3])
    low, high, p_beats = intervals(4, differences.mean(), differences.std(ddof=1))
    expected = stats.ttest_1samp(differences, 0.0).confidence_interval(0.95)
    assert (low, high) == pytest.approx((expected.low, expected.high))
    assert low < 0 < high and 0.5 < p_beats < 1


def test_dataset_level_uses_only_trials_with_every_test_domain_and_pairs_by_trial():
    from scipy import stats

    rows = []
    for trial, (erm, dmg) in enumerate([(60, 61), (70, 72), (80, 83)]):
        for env in (0, 1):
            rows.append(["m", "D", "ERM", env, f"env{env}", trial, erm + env])
            rows.append(["m", "D", "DMG", env, f"env{env}", trial, dmg + env])
    rows.append(["m", "D", "DMG", 0, "env0", 3, 99.0])  # a trial ERM lacks
    rows.append(["m", "D", "ERM", 0, "env0", 4, 10.0])  # a trial DMG lacks
    columns = ["selection_method", "dataset", "algorithm", "test_env", "test_domain"]
    frame = pd.DataFrame(rows, columns=[*columns, "trial_seed", "accuracy"])
    result = compare(frame, "ERM").set_index("test_env")
    assert list(result.index) == [0, 1, AVERAGE]
    assert (result["n_trials"] == 3).all()
    assert result.loc[AVERAGE, "difference"] == pytest.approx(2.0)
    assert result.loc[AVERAGE, "accuracy"] == pytest.approx(72.5)
    expected = stats.ttest_1samp([1, 2, 3], 0.0).confidence_interval(0.95)
    assert result.loc[AVERAGE, "ci_low"] == pytest.approx(expected.low)
    assert result.loc[0, "verdict"] == UNCLEAR


def test_one_trial_gives_a_difference_but_no_interval_and_no_verdict():
    one = compare(simulated_sweeps(1, 1), "ERM")
    assert (one["verdict"] == ONE_TRIAL).all()
    assert one["ci_low"].isna().all() and one["p_beats"].isna().all()
    assert one["difference"].notna().all()
    text = brief(one)
    assert "Better vs ERM: " in text and "one trial: no interval" in text
    assert "better" not in text.replace("Better", "")


def test_markdown_and_brief_say_better_only_where_the_interval_excludes_zero(three_trials):
    first = three_trials[three_trials["dataset"] == 0]
    text = markdown(first)
    assert "## 0, model selection: training-domain validation set (reference: ERM)" in text
    assert "| Algorithm | 0 | 1 | 2 | 3 | Avg | P(new trial) | verdict |" in re.sub(" +", " ", text)
    for _, row in first.iterrows():
        sure = row["ci_low"] > 0 or row["ci_high"] < 0
        assert (row["verdict"] in (BETTER, WORSE)) == sure
    for line in brief(three_trials).splitlines()[1:40]:
        if line.endswith(": better"):
            low = float(line.split("95% CI [")[1].split(",")[0])
            assert low > 0, line
