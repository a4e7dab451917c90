"""Paired comparisons of every algorithm with a reference, with 95% Student-t intervals.

Runs of one dataset, test domain and trial seed train on the same splits (train.py seeds them
from the trial seed), so the difference of the accuracies a selection method selects is paired
on them: per test domain, and over the dataset of the per-trial means over test domains (trials
with every domain for both). The probability of beating the reference on a new trial is the t
posterior predictive's (Gelman et al., *Bayesian Data Analysis*, Sec. 3.2). docs/reports.md gives
the formulas and their assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dmg_domainbed.reporting.tables import AVERAGE, markdown_table

CONFIDENCE = 0.95
BETTER, WORSE, UNCLEAR = "better", "worse", "unclear"
ONE_TRIAL = "one trial"
NO_INTERVAL = f"{ONE_TRIAL}: no interval"  # what a report says instead of drawing one
DEFAULT_REFERENCE = "ERM"

COLUMNS = "selection_method dataset algorithm reference test_env test_domain n_trials accuracy"
COLUMNS = f"{COLUMNS} reference_accuracy difference ci_low ci_high p_beats verdict".split()


def intervals(n, mean, spread) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 95% t interval and P(beats the reference on a new trial); NaN where ``n < 2``."""
    from scipy import stats

    n, mean, spread = (np.asarray(a, dtype=float) for a in (n, mean, spread))
    df = np.where(n >= 2, n - 1, np.nan)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, df) * spread / np.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        # A zero spread (every trial gave the same difference) leaves no doubt either way.
        z = mean / (spread * np.sqrt(1 + 1 / n))
    p_beats = np.where(spread > 0, stats.t.cdf(z, df), (mean > 0).astype(float))
    p_beats = np.where(n >= 2, p_beats, np.nan)
    return mean - half, mean + half, p_beats


def compare(
    selected: pd.DataFrame, reference: str, algorithms: Sequence[str] | None = None
) -> pd.DataFrame:
    """Every algorithm against ``reference`` per method, dataset and test domain, and ``Avg``."""
    names = list(algorithms) if algorithms is not None else list(selected["algorithm"].unique())
    cell = ["selection_method", "dataset", "test_env"]
    wide = selected.pivot(index=[*cell, "trial_seed"], columns="algorithm", values="accuracy")
    others = [name for name in names if name != reference and name in wide.columns]
    if reference not in wide.columns or not others:
        return pd.DataFrame(columns=COLUMNS)
    wide = wide[wide[reference].notna()]
    # The test domains each (method, dataset) has: a trial counts over the dataset only
    # when it has every one of them for both algorithms.
    n_domains = wide.reset_index().groupby(cell[:2])["test_env"].nunique()
    domains = selected.drop_duplicates(cell).set_index(cell)["test_domain"]
    frames = []
    for algorithm in others:
        pairs = wide[[algorithm, reference]].dropna()
        pairs.columns = ["accuracy", "reference_accuracy"]
        pairs = pairs.assign(difference=pairs["accuracy"] - pairs["reference_accuracy"])
        per_domain = _summaries(pairs, cell)
        per_domain["test_domain"] = domains.reindex(per_domain.index).to_numpy()
        by_trial = pairs.groupby([*cell[:2], "trial_seed"])
        trials = by_trial.mean().assign(count=by_trial.size())
        expected = n_domains.reindex(trials.index.droplevel("trial_seed")).to_numpy()
        complete = trials["count"].to_numpy() == expected
        overall = _summaries(trials[complete], cell[:2])
        overall["test_env"] = overall["test_domain"] = AVERAGE
        overall = overall.set_index("test_env", append=True)
        frames.append(pd.concat([per_domain, overall]).assign(algorithm=algorithm))
    rows = pd.concat(frames).reset_index()
    low, high, p_beats = intervals(rows["n_trials"], rows["difference"], rows["spread"])
    rows = rows.assign(reference=reference, ci_low=low, ci_high=high, p_beats=p_beats)
    # better / worse only where the interval excludes zero
    conditions = [rows["n_trials"].to_numpy() < 2, low > 0, high < 0]
    rows["verdict"] = np.select(conditions, [ONE_TRIAL, BETTER, WORSE], UNCLEAR)
    # Methods and datasets as they came; algorithms in the given order; domains, then Avg (NaN).
    order = {c: list(selected[c].unique()) for c in ("selection_method", "dataset")}
    order["algorithm"] = names
    rows["env_order"] = pd.to_numeric(rows["test_env"], errors="coerce")
    rows = rows.sort_values(
        ["selection_method", "dataset", "algorithm", "env_order"],
        key=lambda c: c.map(order[c.name].index) if c.name in order else c,
        ignore_index=True,
    )
    return rows[COLUMNS]


def flag_comparisons(comparisons: pd.DataFrame, selected: pd.DataFrame) -> pd.DataFrame:
    """``comparisons`` with ``diverged_runs``: how many of the runs each compares diverged."""
    cell = ["selection_method", "dataset"]
    broken = selected.loc[selected["diverged"] != "", [*cell, "algorithm", "test_env", "run"]]
    pairs = comparisons.reset_index(names="row").merge(broken, on=cell, suffixes=("", "_run"))
    of = pairs["algorithm_run"]
    compared = (of == pairs["algorithm"]) | (of == pairs["reference"])
    compared &= (pairs["test_env_run"] == pairs["test_env"]) | (pairs["test_env"] == AVERAGE)
    counts = pairs[compared].groupby("row")["run"].nunique()
    return comparisons.assign(diverged_runs=counts.reindex(comparisons.index, fill_value=0))


def _diverged(row: pd.Series) -> str:
    return " (diverged)" if row.get("diverged_runs", 0) else ""


def _summaries(pairs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group: number of pairs, mean accuracies and difference, its sample std (``spread``)."""
    groups = pairs.groupby(keys)
    summary = groups[["accuracy", "reference_accuracy", "difference"]].mean()
    summary["n_trials"] = groups.size()
    summary["spread"] = groups["difference"].std(ddof=1)
    return summary


def interval_text(row: pd.Series) -> str:
    """``+1.2 [-0.3, +2.7]`` (difference and 95% interval, points), with a clear verdict."""
    if row["n_trials"] < 2:
        return f"{row['difference']:+.1f} (one trial){_diverged(row)}"
    text = f"{row['difference']:+.1f} [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"
    text = f"{text} {row['verdict']}" if row["verdict"] in (BETTER, WORSE) else text
    return text + _diverged(row)


def markdown(comparisons: pd.DataFrame) -> str:
    """One table per selection method and dataset: algorithms down, test domains across."""
    parts = [
        "# Paired comparisons\n",
        "Test-accuracy difference (percentage points) of each algorithm minus the reference, "
        "paired on dataset, test domain and trial seed (the same data splits), with a 95% "
        f"Student-t interval over trial seeds ({NO_INTERVAL}); `Avg`: the per-trial "
        "mean over test domains. "
        "better / worse: the interval excludes zero. P(new trial): the probability that the "
        "algorithm beats the reference on a new trial (t predictive distribution).\n",
    ]
    for (method, dataset, reference), block in comparisons.groupby(
        ["selection_method", "dataset", "reference"], sort=False
    ):
        parts.append(f"## {dataset}, model selection: {method} (reference: {reference})\n")
        cells = block.assign(cell=block.apply(interval_text, axis=1))
        table = cells.pivot(index="algorithm", columns="test_domain", values="cell")
        table = table.loc[block["algorithm"].unique(), block["test_domain"].unique()]
        average = block[block["test_env"] == AVERAGE].set_index("algorithm")
        table["P(new trial)"] = average["p_beats"].map(_percent)
        table["verdict"] = average["verdict"]
        parts.append(markdown_table(table, "Algorithm"))
    return "\n".join(parts)


def _percent(p: float) -> str:
    return "" if math.isnan(p) else f"{100 * p:.0f}%"


def brief(comparisons: pd.DataFrame) -> str:
    """One line per algorithm, dataset and selection method: the dataset-level comparison."""
    lines = []
    average = comparisons[comparisons["test_env"] == AVERAGE]
    for (method, dataset), block in average.groupby(["selection_method", "dataset"], sort=False):
        lines.append(f"{dataset}, {method}:")
        lines += [
            f"  {row['algorithm']} vs {row['reference']}: {_sentence(row)}{_diverged(row)}"
            for _, row in block.iterrows()
        ]
    return "\n".join(lines)


def _sentence(row: pd.Series) -> str:
    n = row["n_trials"]
    difference = f"{row['difference']:+.1f} points"
    if n < 2:
        return f"{difference} ({NO_INTERVAL}; run 2 or more trials)"
    verdict = row["verdict"]
    verdict = {UNCLEAR: "no clear difference (the interval includes 0)"}.get(verdict, verdict)
    return (
        f"{difference}, 95% CI [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}] over {n} "
        f"trials, beats {row['reference']} on a new trial with probability "
        f"{_percent(row['p_beats'])}: {verdict}"
    )
