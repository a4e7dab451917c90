"""The run and checkpoint each model-selection method selects, with its hparams.

DomainBed's ``collect_results`` groups records by (trial seed, dataset, algorithm, test
environment) (``domainbed.lib.reporting.get_grouped_records``) and, in each group, a selection
method ranks the hparams settings by validation accuracy (``SelectionMethod.hparams_accs``); the
first one's ``test_acc`` is the group's number (``sweep_acc``). Its ``run_acc`` says which
accuracies it chose inside a run but not at which checkpoint, so the subclasses below add the
step to what it returns and change nothing else: the accuracies, their order and the
tie-breaking are DomainBed's own.

The selected rows are ``selected_hparams.csv``; the paired comparisons and ranks use them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dmg_domainbed.reporting import tables

COLUMNS = "selection_method dataset algorithm test_env test_domain trial_seed hparams_seed"
COLUMNS = f"{COLUMNS} step val_acc accuracy run diverged".split()


def with_steps() -> dict[str, type]:
    """DomainBed's three reported selection methods (by class name), returning the step too."""
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
            if chosen is None:
                return None
            steps = ms.get_test_records(run_records).select("step")
            return {**chosen, "step": max(steps)}

    return {
        "IIDAccuracySelectionMethod": IIDWithStep,
        "LeaveOneOutSelectionMethod": LeaveOneOutWithStep,
        "OracleSelectionMethod": OracleWithStep,
    }


def ranked_runs(records, diverged: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Every hparams setting each method ranks in every group, best first (``rank`` 0 is the
    selected one, its ``accuracy`` collect_results' number): :data:`COLUMNS`, ``rank`` and
    ``hparams``; ``diverged`` is the run's first non-finite loss (from ``diverged``) or empty."""
    from domainbed import datasets
    from domainbed.lib import reporting
    from domainbed.model_selection import get_test_records

    tracked = with_steps()
    groups = reporting.get_grouped_records(records)
    rows = []
    for method in tables.selection_methods():
        for group in groups:
            environments = datasets.get_dataset_class(group["dataset"]).ENVIRONMENTS
            ranked = tracked[method.__name__].hparams_accs(group["records"])
            for position, (chosen, run_records) in enumerate(ranked):
                step = chosen["step"]
                record = next(r for r in get_test_records(run_records) if r["step"] == step)
                args, run = record["args"], record["args"]["output_dir"]
                cell = [group[k] for k in ("dataset", "algorithm", "test_env")]
                seeds = [group["trial_seed"], args["hparams_seed"], step]
                accuracies = [100 * chosen["val_acc"], 100 * chosen["test_acc"]]
                tail = [run, (diverged or {}).get(run, ""), position, record["hparams"]]
                domain = environments[group["test_env"]]
                rows.append([method.name, *cell, domain, *seeds, *accuracies, *tail])
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "rank", "hparams"])
    methods = {method.name: i for i, method in enumerate(tables.selection_methods())}
    return frame.sort_values(
        ["selection_method", "dataset", "algorithm", "test_env", "trial_seed", "rank"],
        key=lambda column: column.map(methods) if column.name == "selection_method" else column,
        ignore_index=True,
    )


def selected_frame(ranked: pd.DataFrame) -> pd.DataFrame:
    """The selected run of every group (rank 0 of :func:`ranked_runs`)."""
    return ranked[ranked["rank"] == 0].drop(columns="rank").reset_index(drop=True)


def selected_hparams(selected: pd.DataFrame) -> pd.DataFrame:
    """:func:`selected_frame` with one object column per hparam (values as logged; empty where
    an algorithm has none); one named like a column of :data:`COLUMNS` gets `` (hparam)``."""
    hparams = pd.DataFrame(selected["hparams"].tolist(), index=selected.index, dtype=object)
    hparams = hparams.rename(columns=lambda name: f"{name} (hparam)" if name in COLUMNS else name)
    return pd.concat([selected[COLUMNS], hparams], axis=1)
