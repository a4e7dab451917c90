"""Results tables of a sweep, computed with DomainBed's own selection and grouping code, and
the Markdown they are shown in.

The numbers are those of ``python -m domainbed.scripts.collect_results``: records are grouped
by ``domainbed.lib.reporting.get_grouped_records``, each group's accuracy is
``selection_method.sweep_acc`` of ``domainbed.model_selection``, and a cell is the mean over
trial seeds with its standard error (``std / sqrt(n)``), in percent. Only the layout differs:
a long pandas DataFrame, one row per cell, ready for CSV.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dmg_domainbed.reporting.jobs import SweepJobs, read_jobs

SELECTION_METHOD_NAMES = (
    "IIDAccuracySelectionMethod",
    "LeaveOneOutSelectionMethod",
    "OracleSelectionMethod",
)
AVERAGE = "Avg"
MISSING = "X"  # collect_results' mark for a cell without results


def selection_methods() -> list[type]:
    """The selection methods collect_results reports (without ``--auto_lr``), in its order."""
    from domainbed import model_selection

    return [getattr(model_selection, name) for name in SELECTION_METHOD_NAMES]


def load_sweep_records(sweep_dir: str | Path):
    """Every record of the sweep, as DomainBed's ``reporting.load_records`` reads them (each
    sub-folder's ``results.jsonl``, in ``os.listdir`` order, as a ``Q``), except that a
    half-written last line is left out with a warning instead of stopping everything (see
    :func:`~dmg_domainbed.reporting.runs.read_records`) and that records lacking what model
    selection reads are refused naming the field (:mod:`.record_fields`)."""
    return SweepJobs(tuple(read_jobs(sweep_dir))).records()


def mean_and_error(accuracies: Sequence[float]) -> tuple[float, float] | None:
    """Mean and standard error in percent, as collect_results computes them; None if empty."""
    if len(accuracies) == 0:
        return None
    values = np.asarray(list(accuracies), dtype=float)
    return 100 * np.mean(values), 100 * np.std(values / np.sqrt(len(values)))


def cell_text(mean: float | None, error: float | None) -> str:
    """A cell as collect_results prints it: ``mean +/- error`` with one decimal."""
    if mean is None:
        return MISSING
    return f"{mean:.1f} +/- {error:.1f}"


def ordered_algorithms(records) -> list[str]:
    """Algorithms in collect_results' order: DomainBed's registry order, then the others."""
    from domainbed import algorithms

    present = records.select("args.algorithm").unique()
    known = [name for name in algorithms.ALGORITHMS if name in present]
    return known + [name for name in present if name not in algorithms.ALGORITHMS]


def ordered_datasets(records) -> list[str]:
    """Datasets in DomainBed's registry order (collect_results prints only those)."""
    from domainbed import datasets

    present = set(records.select("args.dataset").unique())
    return [name for name in datasets.DATASETS if name in present]


def selected_groups(records, selection_method):
    """Groups of (trial, dataset, algorithm, test env) with the accuracy the method selects."""
    from domainbed.lib import reporting

    return (
        reporting.get_grouped_records(records)
        .map(lambda group: {**group, "sweep_acc": selection_method.sweep_acc(group["records"])})
        .filter(lambda group: group["sweep_acc"] is not None)
    )


def results_frame(records) -> pd.DataFrame:
    """Per-dataset tables of every selection method, one row per (algorithm, test domain).

    Columns: ``selection_method``, ``dataset``, ``algorithm``, ``test_env`` (index, or ``Avg``),
    ``test_domain`` (environment name or ``Avg``), ``accuracy`` and ``stderr`` (percent),
    ``n_trials`` and ``text`` (the cell exactly as collect_results prints it).
    """
    from domainbed import datasets

    rows = []
    algorithm_names = ordered_algorithms(records)
    for method in selection_methods():
        groups = selected_groups(records, method)
        for dataset in ordered_datasets(records):
            environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
            for algorithm in algorithm_names:
                means = []
                for env, domain in enumerate(environments):
                    accuracies = groups.filter_equals(
                        "dataset, algorithm, test_env", (dataset, algorithm, env)
                    ).select("sweep_acc")
                    stats = mean_and_error(accuracies)
                    mean, error = stats if stats else (None, None)
                    means.append(mean)
                    rows.append(
                        _row(
                            method,
                            dataset,
                            algorithm,
                            env,
                            domain,
                            mean,
                            error,
                            len(accuracies),
                            cell_text(mean, error),
                        )
                    )
                average = None if None in means else sum(means) / len(means)
                text = MISSING if average is None else f"{average:.1f}"
                rows.append(
                    _row(method, dataset, algorithm, AVERAGE, AVERAGE, average, None, None, text)
                )
    return _frame(rows)


def averages_frame(records) -> pd.DataFrame:
    """collect_results' "Averages" table: per algorithm and dataset, the mean over test domains
    of each trial seed, then mean and standard error over trial seeds; ``Avg`` over datasets."""
    rows = []
    algorithm_names = ordered_algorithms(records)
    dataset_names = ordered_datasets(records)
    for method in selection_methods():
        groups = selected_groups(records, method)
        for algorithm in algorithm_names:
            means = []
            for dataset in dataset_names:
                trial_means = (
                    groups.filter_equals("algorithm, dataset", (algorithm, dataset))
                    .group("trial_seed")
                    .map(lambda _seed, group: group.select("sweep_acc").mean())
                )
                stats = mean_and_error(trial_means)
                mean, error = stats if stats else (None, None)
                means.append(mean)
                rows.append(
                    _row(
                        method,
                        dataset,
                        algorithm,
                        AVERAGE,
                        AVERAGE,
                        mean,
                        error,
                        len(trial_means),
                        cell_text(mean, error),
                    )
                )
            average = None if None in means else sum(means) / len(means)
            text = MISSING if average is None else f"{average:.1f}"
            rows.append(
                _row(method, AVERAGE, algorithm, AVERAGE, AVERAGE, average, None, None, text)
            )
    return _frame(rows)


_COLUMNS = [
    "selection_method",
    "dataset",
    "algorithm",
    "test_env",
    "test_domain",
    "accuracy",
    "stderr",
    "n_trials",
    "text",
]


def _frame(rows: list[list]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    frame["n_trials"] = frame["n_trials"].astype("Int64")
    return frame


def _row(method, dataset, algorithm, env, domain, mean, error, n_trials, text) -> list:
    return [method.name, dataset, algorithm, env, domain, mean, error, n_trials, text]


def wide_table(frame: pd.DataFrame, columns: str = "test_domain") -> pd.DataFrame:
    """One selection method's (and dataset's) rows as collect_results lays them out:
    algorithms down, test domains (or datasets) across, cells as text with their flags."""
    table = frame.assign(shown=marked_text(frame)).pivot(
        index="algorithm", columns=columns, values="shown"
    )
    return table.loc[frame["algorithm"].unique(), frame[columns].unique()]


def marked_text(frame: pd.DataFrame) -> pd.Series:
    """Each cell's ``text`` followed by its flags (:mod:`.cell_flags`), if the frame has them:
    ``27.4 +/- 3.1 (partial, diverged)``."""
    if "partial" not in frame:
        return frame["text"]
    flags = [
        ", ".join(name for name, on in (("partial", partial), ("diverged", diverged)) if on)
        for partial, diverged in zip(frame["partial"], frame["diverged_runs"] > 0, strict=True)
    ]
    return pd.Series(
        [f"{text} ({flag})" if flag else text for text, flag in zip(frame["text"], flags)],
        frame.index,
    )


def without_results(results: pd.DataFrame) -> list[str]:
    """The selection methods with no result in any cell of ``results``."""
    has_result = results.groupby("selection_method", sort=False)["accuracy"].apply(
        lambda values: values.notna().any()
    )
    return [method for method, present in has_result.items() if not present]


def no_result_line(method_name: str) -> str:
    """One line instead of a table of X: which method, why it has no result, how to get one."""
    from domainbed import model_selection

    if method_name == model_selection.LeaveOneOutSelectionMethod.name:
        why = (
            "it validates on runs that hold out two domains (the test domain and one "
            "validation domain), and this sweep has none. Sweep without --single_test_envs "
            "(sweep file: single_test_envs = false) to train every pair of held-out domains too"
        )
    else:
        why = (
            "it selects among runs that hold out exactly one test domain, and this sweep has "
            "none. Sweep every single test domain (DomainBed's sweep does unless its test "
            "environments are restricted)"
        )
    return f"Model selection {method_name}: no result for any cell: {why}."


def results_markdown(results: pd.DataFrame, averages: pd.DataFrame) -> str:
    """Every table of collect_results with a result, in its order, as Markdown sections; a
    method without any result is one line (:func:`no_result_line`)."""
    parts = [
        "# Results\n",
        "Test-domain accuracy (%), mean +/- standard error over trial seeds, as printed by "
        "`python -m domainbed.scripts.collect_results`. X: no result for that cell.\n",
    ]
    empty = without_results(results)
    for method in results["selection_method"].unique():
        if method in empty:
            parts.append(no_result_line(method) + "\n")
            continue
        parts.append(f"## Model selection: {method}\n")
        of_method = results[results["selection_method"] == method]
        for dataset in of_method["dataset"].unique():
            parts.append(f"### {dataset}\n")
            table = wide_table(of_method[of_method["dataset"] == dataset])
            parts.append(markdown_table(table, "Algorithm"))
        parts.append("### Averages\n")
        table = wide_table(averages[averages["selection_method"] == method], "dataset")
        parts.append(markdown_table(table, "Algorithm"))
    return "\n".join(parts)


def markdown_table(table: pd.DataFrame, index_label: str | None = None) -> str:
    """``table`` with its index as the first column (tabulate's pipe table); numbers are
    written as they are, missing cells are empty and ``|`` in a cell is escaped."""
    label = index_label if index_label is not None else (table.index.name or "")
    cells = table.astype(object).where(table.notna(), "").map(lambda c: str(c).replace("|", r"\|"))
    return cells.rename_axis(label).to_markdown(tablefmt="pipe", disable_numparse=True) + "\n"
