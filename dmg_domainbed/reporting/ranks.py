"""Algorithms ranked across tasks (a dataset and test domain, scored by collect_results' cell),
averaged over the tasks where every algorithm has a score (Demsar, JMLR 2006), with the
Friedman test (scipy) and Nemenyi's critical-difference diagram (scikit-posthocs) from
:data:`MIN_TASKS` tasks on; docs/reports.md says more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dmg_domainbed.drawing import colours, figure
from dmg_domainbed.reporting.tables import markdown_table

MIN_TASKS = 11
MIN_ALGORITHMS = 3
ALPHA = 0.05


@dataclass(frozen=True)
class Ranking:
    """The ranks of one selection method; the tests' fields None where left out (``note``)."""

    selection_method: str
    scores: pd.DataFrame
    average_ranks: pd.Series
    left_out_tasks: int
    statistic: float | None = None
    p_value: float | None = None
    nemenyi: pd.DataFrame | None = None
    critical_difference: float | None = None
    note: str | None = None

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def rank(method: str, scores: pd.DataFrame, left_out_tasks: int = 0) -> Ranking:
    """Average ranks of ``scores``' columns over its rows, and the tests where they apply."""
    from scipy import stats

    ranks = pd.DataFrame(stats.rankdata(-scores.to_numpy(), axis=1), columns=scores.columns)
    average = ranks.mean().sort_values()
    n_tasks, k = scores.shape
    if k < MIN_ALGORITHMS or n_tasks < MIN_TASKS:
        why = (
            f"the test compares {MIN_ALGORITHMS} or more algorithms"
            if k < MIN_ALGORITHMS
            else f"its chi-square p-value needs {MIN_TASKS} or more tasks (Demsar 2006); sweep "
            "more datasets"
        )
        note = f"Friedman test and critical-difference diagram left out: {why}."
        return Ranking(method, scores, average, left_out_tasks, note=note)
    import scikit_posthocs

    statistic, p_value = stats.friedmanchisquare(*scores.to_numpy().T)
    nemenyi = scikit_posthocs.posthoc_nemenyi_friedman(scores.to_numpy())
    nemenyi.index = nemenyi.columns = scores.columns
    q = stats.studentized_range.ppf(1 - ALPHA, k, np.inf) / math.sqrt(2)
    difference = q * math.sqrt(k * (k + 1) / (6 * n_tasks))
    tests = float(statistic), float(p_value), nemenyi, float(difference)
    return Ranking(method, scores, average, left_out_tasks, *tests)


def rankings(selected: pd.DataFrame, algorithms: Sequence[str] | None = None) -> list[Ranking]:
    """A :class:`Ranking` for every selection method with results, algorithms in that order."""
    found = []
    for method, rows in selected.groupby("selection_method", sort=False):
        # tasks down, algorithms across (in their order), the mean selected accuracy
        tasks = ["dataset", "test_domain"]
        scores = rows.pivot_table(index=tasks, columns="algorithm", values="accuracy", sort=False)
        order = algorithms if algorithms is not None else rows["algorithm"].unique()
        scores = scores[[name for name in order if name in set(scores.columns)]]
        if len(complete := scores.dropna()):
            found.append(rank(method, complete, len(scores) - len(complete)))
    return found


def ranks_frame(found: list[Ranking]) -> pd.DataFrame:
    """One row per selection method and algorithm: rank, tasks, Friedman statistic and p."""
    columns = "selection_method algorithm average_rank n_tasks friedman_statistic friedman_p"
    rows = [
        [r.selection_method, name, rank, len(r.scores), r.statistic, r.p_value]
        for r in found
        for name, rank in r.average_ranks.items()
    ]
    return pd.DataFrame(rows, columns=columns.split())


def ranks_markdown(found: list[Ranking]) -> str:
    """Average ranks per selection method, and what the Friedman test says."""
    parts = [
        "# Ranks across tasks\n",
        "Average rank (1 = best) over the tasks (dataset x test domain) where every "
        "algorithm has a result; each task's score is the mean test accuracy over trials.\n",
    ]
    for ranking in found:
        table = ranking.average_ranks.map(lambda r: f"{r:.2f}").to_frame("average rank")
        parts.append(f"## Model selection: {ranking.selection_method}\n")
        parts += [markdown_table(table, "Algorithm"), summary(ranking) + "\n"]
    return "\n".join(parts)


def summary(ranking: Ranking) -> str:
    """One line: the tasks, and the Friedman test's result or why it is left out."""
    tasks = f"{len(ranking.scores)} task(s) (dataset x test domain)"
    if ranking.left_out_tasks:
        tasks += f" ({ranking.left_out_tasks} left out: not every algorithm has a result)"
    if not ranking.tested:
        return f"{tasks}. {ranking.note}"
    verdict = "differ" if ranking.p_value < ALPHA else "do not differ detectably"
    return (
        f"{tasks}. Friedman chi-square {ranking.statistic:.2f}, p = {ranking.p_value:.3g}: "
        f"the ranks {verdict} at the 5% level; Nemenyi critical difference "
        f"{ranking.critical_difference:.2f} (ranks.png)."
    )


def ranks_figure(found: list[Ranking]) -> Figure | None:
    """The critical-difference diagram of every tested selection method; None without any."""
    import scikit_posthocs

    tested = [ranking for ranking in found if ranking.tested]
    if not tested:
        return None
    height = 0.45 * max(len(r.average_ranks) for r in tested) + 1.2
    fig = figure(8, height * len(tested))
    # The labels stand beside the axes: room for them left and right (inches).
    fig.get_layout_engine().set(w_pad=1.3)
    axes = fig.subplots(len(tested), 1, squeeze=False)[:, 0]
    for axis, r in zip(axes, tested, strict=True):
        style = dict(alpha=ALPHA, ax=axis, color_palette=colours(list(r.scores.columns)))
        scikit_posthocs.critical_difference_diagram(
            r.average_ranks, r.nemenyi, cd=r.critical_difference, **style
        )
        title = f"{r.selection_method}: average rank over {len(r.scores)} tasks\n"
        title += f"Friedman p = {r.p_value:.3g}; bars join what Nemenyi's test cannot separate"
        axis.set_title(title, fontsize=9, pad=28)
    return fig
