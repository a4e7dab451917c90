"""Which of a report's numbers to flag, next to the number (never instead of it).

collect_results prints a cell's mean over whatever trials have records, and a run still
training (or one that stopped half-way) takes part with the checkpoints it reached, so a sweep
that is not done gives numbers that later change, with no mark. A run whose loss diverged
(:mod:`.divergence`) takes part like any other. Each cell (selection method, dataset,
algorithm, test domain) of :func:`.tables.results_frame` gets

* ``partial``: it has fewer trials than the dataset's fullest cell of that selection method,
  or holds records of a job that is not done (:mod:`.jobs`). Cells of an algorithm without runs
  on the dataset, and test domains no run held out, are not counted as lacking trials: the
  sweep did not plan them;
* ``diverged_runs``: how many runs in it diverged;

and the averages (over test domains, over datasets) carry their cells' flags. The numbers
themselves stay collect_results' to the digit; :func:`.tables.marked_text` writes the flags
after them in the Markdown.
"""

from __future__ import annotations

import pandas as pd

from dmg_domainbed.reporting.jobs import SweepJobs
from dmg_domainbed.reporting.tables import AVERAGE


def flag_results(results: pd.DataFrame, jobs: SweepJobs) -> pd.DataFrame:
    """``results`` (:func:`.tables.results_frame`) with columns ``partial`` and
    ``diverged_runs``."""
    frame = results.copy()
    with_records = {cell for job in jobs.jobs for cell in job.cells()}
    planned_rows = {(dataset, algorithm) for dataset, algorithm, _ in with_records}
    planned_envs = {(dataset, env) for dataset, _, env in with_records}
    unfinished, diverged = jobs.unfinished_cells(), jobs.diverged_cells()
    cell = frame["test_env"] != AVERAGE
    keys = list(zip(frame["dataset"], frame["algorithm"], frame["test_env"], strict=True))
    counted = cell & pd.Series(
        [(d, a) in planned_rows and (d, e) in planned_envs for d, a, e in keys], frame.index
    )
    trials = frame["n_trials"].fillna(0).where(counted)
    fullest = trials.groupby([frame["selection_method"], frame["dataset"]]).transform("max")
    frame["partial"] = counted & (
        (trials < fullest) | pd.Series([key in unfinished for key in keys], frame.index)
    )
    frame["diverged_runs"] = [diverged.get(key, 0) for key in keys]
    # An average row carries the flags of the cells it averages.
    by_row = frame[cell].groupby(["selection_method", "dataset", "algorithm"], sort=False)
    flags = by_row.agg(partial=("partial", "any"), diverged_runs=("diverged_runs", "sum"))
    averages = frame.index[~cell]
    index = pd.MultiIndex.from_frame(frame.loc[averages, flags.index.names])
    frame.loc[averages, "partial"] = flags["partial"].reindex(index, fill_value=False).to_numpy()
    frame.loc[averages, "diverged_runs"] = (
        flags["diverged_runs"].reindex(index, fill_value=0).to_numpy()
    )
    return frame.astype({"partial": bool, "diverged_runs": int})


def flag_averages(averages: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """``averages`` (:func:`.tables.averages_frame`) with the flags of the
    :func:`flag_results` cells each average is made of."""
    cells = results[results["test_env"] != AVERAGE]
    frame = averages.copy()
    partial, diverged = [], []
    for method, dataset, algorithm in zip(
        frame["selection_method"], frame["dataset"], frame["algorithm"], strict=True
    ):
        rows = cells[(cells["selection_method"] == method) & (cells["algorithm"] == algorithm)]
        if dataset != AVERAGE:
            rows = rows[rows["dataset"] == dataset]
        partial.append(bool(rows["partial"].any()))
        diverged.append(int(rows["diverged_runs"].sum()))
    return frame.assign(partial=partial, diverged_runs=diverged)


def flags_summary(results: pd.DataFrame, jobs: SweepJobs) -> str:
    """What the marks in the tables mean, when there are any; '' when there are none."""
    cells = results[results["test_env"] != AVERAGE]
    partial = _count(cells[cells["partial"]])
    lines = []
    if partial or not jobs.complete():
        lines.append(
            f"The numbers are PARTIAL: {partial} cell(s) lack trials that other cells have, or "
            "hold runs that are not done (marked 'partial'); they change once every job is done."
        )
    diverged = _count(cells[cells["diverged_runs"] > 0])
    if diverged:
        lines.append(f"{diverged} cell(s) hold runs whose loss diverged (marked 'diverged').")
    return "\n".join(lines)


def _count(cells: pd.DataFrame) -> int:
    """Cells counted once whatever the selection method."""
    return len(cells.drop_duplicates(["dataset", "algorithm", "test_env"]))
