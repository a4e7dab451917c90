"""Paired comparisons of every algorithm with a reference, with 95% confidence intervals.

What is paired is what DomainBed pairs: runs of the same dataset, test domains and trial seed
train on the same data splits (train.py seeds the split of environment ``i`` with
``misc.seed_hash(trial_seed, i)``, whatever the algorithm), so split-to-split variation cancels
in the difference. For selection method ``m``, algorithm ``a`` and reference ``r``, with
``acc`` the test accuracy (%) ``m`` selects (:mod:`.selected`):

* per test domain ``e``: ``d_t = acc(a, e, t) - acc(r, e, t)`` over the trial seeds ``t``
  both have;
* over the dataset: ``D_t = mean_e d_t(e)`` over the trial seeds that have every test domain
  of the dataset for both (the per-trial average over test domains is how collect_results'
  "Averages" table treats a trial, so the two means are that table's numbers).

Interval: Student's t interval ``mean(d) +/- t_{0.975, n-1} s / sqrt(n)`` (``scipy.stats.
ttest_1samp``). Assumptions: the trials are independent replicates (new splits, new
initialisation, new hparams draw for random searches) and the paired differences are roughly
normal; test domains are fixed, not a sample. With three to five trials the t quantile (4.30
for 3 trials) makes the interval honest where a bootstrap of three values is far too narrow,
and averaging over test domains within a trial keeps the dependence between test domains of
one trial (they share splits) out of the error. Each interval is a 95% interval on its own,
not simultaneous over all comparisons.

Probability of beating the reference on a new trial: ``P(d_new > 0)`` under the same normal
model, from the posterior predictive distribution with the usual non-informative prior,
Student's t with ``n-1`` degrees of freedom, location ``mean(d)`` and scale
``s sqrt(1 + 1/n)`` (Gelman et al., *Bayesian Data Analysis*, Sec. 3.2).

"better" / "worse" are said only where the interval excludes zero; one trial gives a
difference but no interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

CONFIDENCE = 0.95
AVERAGE = "Avg"
BETTER, WORSE, UNCLEAR, ONE_TRIAL = "better", "worse", "unclear", "one trial"
DEFAULT_REFERENCE = "ERM"

COLUMNS = [
    "selection_method",
    "dataset",
    "algorithm",
    "reference",
    "test_env",
    "test_domain",
    "n_trials",
    "accuracy",
    "reference_accuracy",
    "difference",
    "ci_low",
    "ci_high",
    "p_beats",
    "verdict",
]


@dataclass(frozen=True)
class Interval:
    """A paired difference (percentage points) with its interval and the predictive
    probability that the algorithm beats the reference on a new trial; NaN with one trial."""

    n: int
    difference: float
    low: float
    high: float
    p_beats: float

    @property
    def verdict(self) -> str:
        if self.n < 2:
            return ONE_TRIAL
        if self.low > 0:
            return BETTER
        if self.high < 0:
            return WORSE
        return UNCLEAR


def paired_interval(differences: Sequence[float]) -> Interval:
    """:class:`Interval` of the paired ``differences`` (one per trial seed)."""
    from scipy import stats

    d = np.asarray(differences, dtype=float)
    n, mean = len(d), float(np.mean(d))
    if n < 2:
        return Interval(n, mean, math.nan, math.nan, math.nan)
    spread = float(np.std(d, ddof=1))
    if spread == 0:  # every trial gave the same difference: nothing to spread the interval
        return Interval(n, mean, mean, mean, float(mean > 0))
    low, high = stats.ttest_1samp(d, 0.0).confidence_interval(CONFIDENCE)
    predictive = stats.t(df=n - 1, loc=mean, scale=spread * math.sqrt(1 + 1 / n))
    return Interval(n, mean, float(low), float(high), float(predictive.sf(0.0)))


def compare(
    selected: pd.DataFrame, reference: str, algorithms: Sequence[str] | None = None
) -> pd.DataFrame:
    """Every algorithm against ``reference``, per selection method and dataset: one row per
    test domain and one (``test_env`` ``Avg``) over the dataset, columns :data:`COLUMNS`.

    ``selected``: one row per (selection method, dataset, algorithm, test env, trial seed)
    with the selected ``accuracy`` (%) and the ``test_domain`` name
    (:func:`.selected.selected_frame`). ``algorithms`` gives the row order (default: as they
    come). Datasets without runs of ``reference`` are left out.
    """
    names = list(algorithms) if algorithms is not None else list(selected["algorithm"].unique())
    rows: list[list] = []
    for (method, dataset), block in selected.groupby(["selection_method", "dataset"], sort=False):
        if reference not in set(block["algorithm"]):
            continue
        wide = block.pivot(
            index=["test_env", "trial_seed"], columns="algorithm", values="accuracy"
        ).sort_index()
        domains = block.drop_duplicates("test_env").set_index("test_env")["test_domain"]
        domains = domains.sort_index()
        for algorithm in names:
            if algorithm == reference or algorithm not in wide.columns:
                continue
            pair = wide[[algorithm, reference]]
            for env, domain in domains.items():
                both = pair.loc[env].dropna()
                rows.append(_row(method, dataset, algorithm, reference, env, domain, both))
            # Trials with every test domain for both; each one's mean over test domains.
            by_trial = pair.unstack("test_env").dropna()
            per_trial = by_trial.T.groupby(level="algorithm").mean().T
            rows.append(_row(method, dataset, algorithm, reference, AVERAGE, AVERAGE, per_trial))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["n_trials"] = frame["n_trials"].astype(int)
    return frame


def _row(method, dataset, algorithm, reference, env, domain, both: pd.DataFrame) -> list:
    if both.empty:
        nan = math.nan
        return [method, dataset, algorithm, reference, env, domain, 0, *[nan] * 6, "no pairs"]
    interval = paired_interval(both[algorithm] - both[reference])
    return [
        method,
        dataset,
        algorithm,
        reference,
        env,
        domain,
        interval.n,
        float(both[algorithm].mean()),
        float(both[reference].mean()),
        interval.difference,
        interval.low,
        interval.high,
        interval.p_beats,
        interval.verdict,
    ]


def interval_text(row: pd.Series) -> str:
    """``+1.2 [-0.3, +2.7]`` (difference and 95% interval, points), with the verdict where
    the interval excludes zero; the difference alone with one trial."""
    if row["n_trials"] == 0:
        return ""
    if row["n_trials"] < 2:
        return f"{row['difference']:+.1f} (one trial)"
    text = f"{row['difference']:+.1f} [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"
    return f"{text} {row['verdict']}" if row["verdict"] in (BETTER, WORSE) else text


def comparisons_markdown(comparisons: pd.DataFrame) -> str:
    """One table per selection method and dataset: algorithms down, test domains across,
    each cell the paired difference with its interval; the dataset's verdict and the
    probability of beating the reference on a new trial last."""
    from dmg_domainbed.reporting.tables import markdown_table

    parts = [
        "# Paired comparisons\n",
        "Test-accuracy difference (percentage points) of each algorithm minus the reference, "
        "paired on dataset, test domain and trial seed (the same data splits), with a 95% "
        "Student-t interval over trial seeds; `Avg`: the per-trial mean over test domains. "
        "better / worse: the interval excludes zero. P(new trial): the probability that the "
        "algorithm beats the reference on a new trial (t predictive distribution).\n",
    ]
    for (method, dataset), block in comparisons.groupby(
        ["selection_method", "dataset"], sort=False
    ):
        reference = block["reference"].iloc[0]
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
        for _, row in block.iterrows():
            lines.append(f"  {row['algorithm']} vs {row['reference']}: {_sentence(row)}")
    return "\n".join(lines)


def _sentence(row: pd.Series) -> str:
    n = row["n_trials"]
    if n == 0:
        return "no trial with every test domain for both"
    difference = f"{row['difference']:+.1f} points"
    if n < 2:
        return f"{difference} (one trial: no interval; run 2 or more trials)"
    verdict = {
        BETTER: "better",
        WORSE: "worse",
        UNCLEAR: "no clear difference (the interval includes 0)",
    }[row["verdict"]]
    return (
        f"{difference}, 95% CI [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}] over {n} "
        f"trials, beats {row['reference']} on a new trial with probability "
        f"{_percent(row['p_beats'])}: {verdict}"
    )
