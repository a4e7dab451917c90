"""The run and checkpoint each model-selection method selects, with its hparams.

DomainBed's ``collect_results`` groups records by (trial seed, dataset, algorithm, test
environment) (``domainbed.lib.reporting.get_grouped_records``) and, in each group, a selection
method ranks the hparams settings by validation accuracy (``SelectionMethod.hparams_accs``); the
first one's ``test_acc`` is the group's number (``sweep_acc``). Its ``run_acc`` says which
accuracies it chose inside a run but not at which checkpoint, so the subclasses below add the
step to what it returns and change nothing else: the accuracies, their order and the
tie-breaking are DomainBed's own.

Every hparams setting a method ranks in a group is a row of :func:`ranked_runs` (rank 0 is
the one selected, its ``accuracy`` collect_results' number for that trial); each row has the
run folder, hparams seed, hparams, the checkpoint's step, and its validation and test
accuracy (%). The selected rows (:func:`selected_frame`) are ``selected_hparams.csv``, and the
paired comparisons and ranks are computed from them; the TensorBoard export marks them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dmg_domainbed.reporting import tables

COLUMNS = (
    "selection_method dataset algorithm test_env test_domain trial_seed hparams_seed step "
    "val_acc accuracy run diverged"
).split()


def with_steps() -> dict[str, type]:
    """DomainBed's three reported selection methods (by class name), each made to return the
    chosen step."""
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
    selected one): columns :data:`COLUMNS`, ``rank`` and ``hparams`` (the run's hparams
    dict). ``run`` is the folder of the run that holds out only the group's test domain (as
    train.py logged it), ``diverged`` its entry in ``diverged`` (run -> its first non-finite
    loss, :mod:`.divergence`) or empty. Groups a method selects nothing in
    (leave-one-domain-out without runs holding out two domains) have no row."""
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
                record = next(
                    r for r in get_test_records(run_records) if r["step"] == chosen["step"]
                )
                args = record["args"]
                rows.append(
                    [
                        method.name,
                        *(group[k] for k in ("dataset", "algorithm", "test_env")),
                        environments[group["test_env"]],
                        group["trial_seed"],
                        args["hparams_seed"],
                        chosen["step"],
                        100 * chosen["val_acc"],
                        100 * chosen["test_acc"],
                        args["output_dir"],
                        (diverged or {}).get(args["output_dir"], ""),
                        position,
                        record["hparams"],
                    ]
                )
    frame = pd.DataFrame(rows, columns=[*COLUMNS, "rank", "hparams"])
    methods = {method.name: i for i, method in enumerate(tables.selection_methods())}
    return frame.sort_values(
        ["selection_method", "dataset", "algorithm", "test_env", "trial_seed", "rank"],
        key=lambda column: column.map(methods) if column.name == "selection_method" else column,
        ignore_index=True,
    )


def selected_frame(ranked: pd.DataFrame) -> pd.DataFrame:
    """The selected run of every group (rank 0 of :func:`ranked_runs`): its ``accuracy`` is
    the group's number in collect_results."""
    return ranked[ranked["rank"] == 0].drop(columns="rank").reset_index(drop=True)


def selected_hparams(selected: pd.DataFrame) -> pd.DataFrame:
    """:func:`selected_frame` with one column per hparam (empty where an algorithm has no such
    hparam); an hparam named like one of :data:`COLUMNS` gets the suffix `` (hparam)``."""
    # Object columns keep each value as train.py logged it (an int stays an int where
    # another algorithm has no such hparam).
    hparams = pd.DataFrame(selected["hparams"].tolist(), index=selected.index, dtype=object)
    hparams = hparams.rename(columns=lambda name: f"{name} (hparam)" if name in COLUMNS else name)
    return pd.concat([selected[COLUMNS], hparams], axis=1)
