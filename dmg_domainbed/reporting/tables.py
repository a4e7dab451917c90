"""A sweep's results tables by DomainBed's own grouping and selection code (the numbers of
``collect_results``, one row per cell, in percent), their flags, Markdown and files, and the run
and checkpoint each selection method selects (:func:`selection_methods` adds the step DomainBed's
methods do not return). Flags: ``partial`` (fewer trials than the dataset's fullest cell of that
selection method, or a job not done; an algorithm or test domain the sweep never ran is not
lacking) and ``diverged_runs``; an average carries the flags of the cells it averages.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import groupby, product
from pathlib import Path

import numpy as np
import pandas as pd

from dmg_domainbed.reporting.jobs import DONE, SweepJobs, read_jobs

AVERAGE = "Avg"
MISSING = "X"  # collect_results' mark for a cell without results
CELL = ["selection_method", "dataset", "algorithm", "test_env"]
COLUMNS = "selection_method dataset algorithm test_env test_domain trial_seed hparams_seed"
COLUMNS = f"{COLUMNS} step val_acc accuracy run diverged".split()


def load_sweep_records(sweep_dir: str | Path):
    """The sweep's records as a ``Q``, checked (:func:`.jobs.read_jobs`)."""
    return SweepJobs(tuple(read_jobs(sweep_dir))).records()


def cell_text(mean: float | None, error: float | None, n_trials: int | None = None) -> str:
    """A cell as collect_results prints it, but one trial as its mean alone (no ``+/- 0.0``)."""
    if mean is None:
        return MISSING
    return f"{mean:.1f}" if n_trials == 1 else f"{mean:.1f} +/- {error:.1f}"


def ordered_algorithms(records) -> list[str]:
    """Algorithms in collect_results' order: DomainBed's registry order, then the others."""
    from domainbed import algorithms

    present = records.select("args.algorithm").unique()
    known = [name for name in algorithms.ALGORITHMS if name in present]
    return known + [name for name in present if name not in algorithms.ALGORITHMS]


def cells_frame(accuracies: pd.DataFrame, keys: list[str], grid: list[tuple]) -> pd.DataFrame:
    """collect_results' cell (its ``format_mean`` of the ``test_acc`` of ``accuracies``, in their
    order: :func:`selected_frame`'s, sorted by index) for every key of ``grid``; after the keys
    of ``grid`` that follow one another sharing all but the last, their average (``Avg``)."""
    from domainbed.scripts.collect_results import format_mean

    lists = dict(accuracies.groupby(keys)["test_acc"].agg(list)) if len(accuracies) else {}
    rows = []
    for start, row in groupby(grid, key=lambda key: key[:-1]):  # the keys of a table's row
        means = []
        for key in row:
            values = lists.get(key, [])
            mean, error, _ = format_mean(values, False)
            error = None if len(values) == 1 else error
            rows.append([*key, mean, error, len(values), cell_text(mean, error, len(values))])
            means.append(mean)
        average = None if None in means else sum(means) / len(means)
        rows.append([*start, AVERAGE, average, None, None, cell_text(average, None, 1)])
    frame = pd.DataFrame(rows, columns=[*keys, "accuracy", "stderr", "n_trials", "text"])
    return frame.astype({"accuracy": float, "stderr": float, "n_trials": "Int64"})


def results_frames(records, ranked, jobs: SweepJobs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """collect_results' per-dataset tables, one row per (algorithm, test domain or ``Avg``), and
    its "Averages" (each trial's mean over test domains, then over trials), of what ``ranked``
    (:func:`ranked_runs` of ``records``) selects, flagged (:func:`flag_results`; an average: as
    the cells it is made of)."""
    from domainbed import datasets as registered

    accuracies, methods = selected_frame(ranked).sort_index(), [m.name for m in selection_methods()]
    present = set(records.select("args.dataset").unique())  # collect_results prints only these
    algorithms = ordered_algorithms(records)
    datasets = [name for name in registered.DATASETS if name in present]
    results = domain_cells(accuracies, CELL, list(product(methods, datasets, algorithms)))
    keys = ["selection_method", "algorithm", "dataset"]
    trials = accuracies.groupby([*keys, "trial_seed"], sort=False)["test_acc"]
    trial_means = trials.agg(lambda v: float(np.mean(list(v)))).reset_index()
    grid = list(product(methods, algorithms, datasets))
    averages = cells_frame(trial_means, keys, grid).assign(test_env=AVERAGE, test_domain=AVERAGE)
    averages = averages[[*CELL, "test_domain", "accuracy", "stderr", "n_trials", "text"]]
    results = flag_results(results, jobs)
    cells = results[results["test_env"] != AVERAGE]
    cells = pd.concat([cells, cells.assign(dataset=AVERAGE)]).groupby(keys)
    return results, averages.join(cells.agg({"partial": "any", "diverged_runs": "sum"}), on=keys)


def domain_cells(accuracies: pd.DataFrame, keys: list[str], rows: list[tuple]) -> pd.DataFrame:
    """:func:`cells_frame` for every test environment of each of ``rows`` (its ``keys`` but the
    last, ``dataset`` among them), with ``test_domain``: the environment's name, or ``Avg``."""
    from domainbed import datasets

    at = keys.index("dataset")
    names = {row[at]: datasets.get_dataset_class(row[at]).ENVIRONMENTS for row in rows}
    grid = [(*row, env) for row in rows for env in range(len(names[row[at]]))]
    frame = cells_frame(accuracies, keys, grid)
    domains = [
        AVERAGE if env == AVERAGE else names[dataset][env]
        for dataset, env in zip(frame["dataset"], frame["test_env"], strict=True)
    ]
    frame.insert(frame.columns.get_loc("test_env") + 1, "test_domain", domains)
    return frame


def selection_methods() -> list[type]:
    """The selection methods collect_results reports (without ``--auto_lr``), in its order, as
    subclasses that return the step too (the selection is DomainBed's, unchanged)."""
    from domainbed import model_selection as ms

    class IIDWithStep(ms.IIDAccuracySelectionMethod):
        @classmethod
        def _step_acc(cls, record):
            return {**super()._step_acc(record), "step": record["step"]}

    class LeaveOneOutWithStep(ms.LeaveOneOutSelectionMethod):
        @classmethod
        def _step_acc(cls, records):
            chosen = super()._step_acc(records)
            return None if chosen is None else {**chosen, "step": records[0]["step"]}

    class OracleWithStep(ms.OracleSelectionMethod):
        # The oracle takes the last checkpoint of a run (no early stopping).
        @classmethod
        def run_acc(cls, run_records):
            chosen = super().run_acc(run_records)
            steps = ms.get_test_records(run_records).select("step")
            return None if chosen is None else {**chosen, "step": max(steps)}

    return [IIDWithStep, LeaveOneOutWithStep, OracleWithStep]


def ranked_runs(
    records, diverged: Mapping[str, str] | None = None, methods: Sequence[type] | None = None
) -> pd.DataFrame:
    """Every hparams setting each method (:func:`selection_methods`) ranks in every group, best
    first (``rank`` 0 selected), by method, dataset, algorithm, test env and trial, with
    ``test_acc`` as DomainBed selects it (a fraction) and the row's place in collect_results'
    order as its index; ``diverged``: run folder -> its first non-finite loss."""
    from domainbed import datasets
    from domainbed.lib import reporting
    from domainbed.model_selection import get_test_records

    keys = ("dataset", "algorithm", "test_env", "trial_seed")
    rows, methods = [], methods or selection_methods()
    groups = reporting.get_grouped_records(records)
    for method in methods:
        for group in groups:
            environments = datasets.get_dataset_class(group["dataset"]).ENVIRONMENTS
            for position, (chosen, run_records) in enumerate(method.hparams_accs(group["records"])):
                step = chosen["step"]
                record = next(r for r in get_test_records(run_records) if r["step"] == step)
                args, run = record["args"], record["args"]["output_dir"]
                cell = [group[k] for k in keys[:3]]
                seeds = [group["trial_seed"], args["hparams_seed"], step]
                accuracies = [100 * chosen["val_acc"], 100 * chosen["test_acc"]]
                tail = [run, (diverged or {}).get(run, ""), position, record["hparams"]]
                domain = environments[group["test_env"]]
                rows.append([method.name, *cell, domain, *seeds, *accuracies, *tail])
                rows[-1].append(chosen["test_acc"])
    ranked = pd.DataFrame(rows, columns=[*COLUMNS, "rank", "hparams", "test_acc"])
    order = {method.name: place for place, method in enumerate(methods)}
    by = ["selection_method", *keys, "rank"]  # each row once
    return ranked.sort_values(by, key=lambda c: c.map(order) if c.name == by[0] else c)


def selected_frame(ranked: pd.DataFrame) -> pd.DataFrame:
    """The selected run of every group (rank 0 of :func:`ranked_runs`), in its order, its index
    the row's place in collect_results' order."""
    return ranked[ranked["rank"] == 0].drop(columns="rank")


def selected_hparams(selected: pd.DataFrame) -> pd.DataFrame:
    """:func:`selected_frame` with one column per hparam (`` (hparam)`` after a clashing name)."""
    hparams = pd.DataFrame(selected["hparams"].tolist(), index=selected.index, dtype=object)
    hparams = hparams.rename(columns=lambda name: f"{name} (hparam)" if name in COLUMNS else name)
    return pd.concat([selected[COLUMNS], hparams], axis=1)


def flag_results(results: pd.DataFrame, jobs: SweepJobs) -> pd.DataFrame:
    """``results`` (:func:`results_frames`) with columns ``partial`` and ``diverged_runs``."""
    frame = results.copy()
    with_records = [(cell, job) for job in jobs.jobs for cell in job.cells()]
    ran_rows = {(dataset, algorithm) for (dataset, algorithm, _), _ in with_records}
    ran_envs = {(dataset, env) for (dataset, _, env), _ in with_records}
    unfinished = {cell for cell, job in with_records if job.state != DONE}
    diverged = Counter(cell for cell, job in with_records if job.diverged)
    cell = frame["test_env"] != AVERAGE
    keys = list(zip(frame["dataset"], frame["algorithm"], frame["test_env"], strict=True))
    counted = cell & np.array([(d, a) in ran_rows and (d, e) in ran_envs for d, a, e in keys])
    trials = frame["n_trials"].fillna(0).where(counted)
    fullest = trials.groupby([frame["selection_method"], frame["dataset"]]).transform("max")
    frame["partial"] = counted & ((trials < fullest) | np.array([k in unfinished for k in keys]))
    frame["diverged_runs"] = [diverged.get(key, 0) for key in keys]
    # an Avg row (flagged by neither): the flags of its row's cells
    by_row = frame.groupby(["selection_method", "dataset", "algorithm"])
    frame.loc[~cell, "partial"] = by_row["partial"].transform("any")
    frame.loc[~cell, "diverged_runs"] = by_row["diverged_runs"].transform("sum")
    return frame


def flags_summary(results: pd.DataFrame, jobs: SweepJobs) -> str:
    """What the marks in the tables mean, when there are any; '' when there are none."""
    # a cell once, whatever the selection method
    cells = results[results["test_env"] != AVERAGE].groupby(["dataset", "algorithm", "test_env"])
    partial, diverged = cells["partial"].any().sum(), (cells["diverged_runs"].max() > 0).sum()
    lines = []
    if partial or not jobs.complete():
        lines.append(
            f"The numbers are PARTIAL: {partial} cell(s) lack trials that other cells have, or "
            "hold runs that are not done (marked 'partial'); they change once every job is done."
        )
    if diverged:
        lines.append(f"{diverged} cell(s) hold runs whose loss diverged (marked 'diverged').")
    return "\n".join(lines)


def flag_marks(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """Flag -> the rows of ``frame`` that carry it (none before :func:`flag_results`)."""
    if "partial" not in frame:
        return {}
    return {"partial": frame["partial"], "diverged": frame["diverged_runs"] > 0}


def wide_table(
    frame: pd.DataFrame, columns: str = "test_domain", index: str = "algorithm"
) -> pd.DataFrame:
    """Rows as collect_results lays them out, the text with its flags (``41.3 (one trial)``)."""
    marks = {"one trial": frame["n_trials"].eq(1).fillna(False), **flag_marks(frame)}
    flags = [", ".join(name for name, on in zip(marks, row) if on) for row in zip(*marks.values())]
    shown = [f"{text} ({flag})" if flag else text for text, flag in zip(frame["text"], flags)]
    table = frame.assign(shown=shown).pivot(index=index, columns=columns, values="shown")
    return table.loc[frame[index].unique(), frame[columns].unique()]


def without_results(results: pd.DataFrame) -> list[str]:
    """The selection methods with no result in any cell of ``results``."""
    has_result = results.groupby("selection_method", sort=False)["accuracy"].count() > 0
    return list(has_result.index[~has_result])


def no_result_line(method_name: str) -> str:
    """One line instead of a table of X: which method, why it has no result, how to get one."""
    from domainbed import model_selection

    why = (
        "it selects among runs that hold out exactly one test domain, and this sweep has "
        "none. Sweep every single test domain (DomainBed's sweep does unless its test "
        "environments are restricted)"
    )
    if method_name == model_selection.LeaveOneOutSelectionMethod.name:
        why = (
            "it validates on runs that hold out two domains (the test domain and one "
            "validation domain), and this sweep has none. Sweep without --single_test_envs "
            "(sweep file: single_test_envs = false) to train every pair of held-out domains too"
        )
    return f"Model selection {method_name}: no result for any cell: {why}."


def results_markdown(results: pd.DataFrame, averages: pd.DataFrame) -> str:
    """Every table of collect_results with a result, in its order, as Markdown sections."""
    parts = [
        "# Results\n",
        "Test-domain accuracy (%), mean +/- standard error over trial seeds, as printed by "
        "`python -m domainbed.scripts.collect_results`. X: no result for that cell. (one trial): "
        "the mean of a single trial; one trial: no interval (collect_results prints +/- 0.0).\n",
    ]
    empty = without_results(results)
    for method, of_method in results.groupby("selection_method", sort=False):
        if method in empty:
            parts.append(no_result_line(method) + "\n")
            continue
        parts.append(f"## Model selection: {method}\n")
        for dataset, rows in of_method.groupby("dataset", sort=False):
            parts += [f"### {dataset}\n", markdown_table(wide_table(rows), "Algorithm")]
        table = wide_table(averages[averages["selection_method"] == method], "dataset")
        parts += ["### Averages\n", markdown_table(table, "Algorithm")]
    return "\n".join(parts)


# What Markdown reads as other than text (``_`` outside a word, ``]`` before a link's target).
MARKDOWN_SIGNS = re.compile(r"[\\`*~<|&]|\](?=[(\[])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_text(value: object) -> str:
    """``value`` shown as it is on one line: Markdown signs escaped, unprintables as ``\\n``."""
    text = MARKDOWN_SIGNS.sub(lambda sign: "\\" + sign.group(), str(value))
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def markdown_table(table: pd.DataFrame, index_label: str | None = None) -> str:
    """``table`` as a pipe table, index first, missing cells empty, as :func:`markdown_text`."""
    label = markdown_text(index_label if index_label is not None else (table.index.name or ""))
    cells = table.astype(object).where(table.notna(), "").map(markdown_text)
    cells = cells.rename(index=markdown_text, columns=markdown_text).rename_axis(label)
    return cells.to_markdown(tablefmt="pipe", disable_numparse=True) + "\n"


def sections_markdown(sections: list[tuple[str, pd.DataFrame]], index_label: str = "") -> str:
    """One Markdown table per ``(title, table)`` section, each under its title."""
    return "\n".join(f"{title}\n\n{markdown_table(wide, index_label)}" for title, wide in sections)
