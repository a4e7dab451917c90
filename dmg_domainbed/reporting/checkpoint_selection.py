"""Model selection by known-domain accuracy on the source domains' validation splits, over every
checkpoint a run saved: the DMG authors' selection (best mean in-domain validation accuracy of
the source domains, DMG with its hard masks ``m_d > 0.5``), next to DomainBed's own.

DomainBed's ``train.py`` evaluates only ``predict`` at its checkpoints (the ``env<i>_out_acc``
that ``collect_results``' training-domain validation selects by). With
``--save_model_every_checkpoint`` (a sweep file's ``save_model_every_checkpoint = true``) it
also saves each checkpoint's model as ``model_step<N>.pkl``. Every such model is evaluated here
with every prediction its algorithm has (:func:`~dmg_domainbed.reporting.in_domain.evaluate_run`
on train.py's rebuilt ``env<i>_out`` splits), and the selection is DomainBed's own
``IIDAccuracySelectionMethod`` (best checkpoint of each run, then best hparams, per trial and
test domain; mean and standard error over trials), run on the records with each source
domain's ``env<i>_out_acc`` replaced by that prediction's accuracy on it. For ``predict`` the
records are train.py's own, so its rows are ``collect_results``' training-domain validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import runs as run_files
from dmg_domainbed.reporting import tables
from dmg_domainbed.reporting.divergence import warnings
from dmg_domainbed.reporting.files import write_table
from dmg_domainbed.reporting.in_domain import PREDICT, evaluate_run
from dmg_domainbed.reporting.runs import Run

AVERAGE = tables.AVERAGE


def evaluate_checkpoints(run: Run, data_dir: str | None = None) -> pd.DataFrame:
    """Every prediction's accuracy (%) on each source domain's validation split, for every
    model the run saved at a checkpoint (``model_step<N>.pkl``); column ``step`` added."""
    frames = []
    for step in run_files.checkpoint_models(run):
        frame = evaluate_run(run, data_dir, step=step)
        frames.append(frame.assign(step=step))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def selection_records(runs: Sequence[Run], evaluations: pd.DataFrame):
    """DomainBed records (a ``domainbed.lib.query.Q``) to select from, one set per prediction:
    ``args.algorithm`` becomes the prediction's name and the source domains' ``env<i>_out_acc``
    its accuracy at that step. ``predict`` keeps every record as train.py logged it; another
    prediction keeps the steps whose model was saved."""
    from domainbed.lib.query import Q

    records = []
    for run in runs:
        evaluated = evaluations[evaluations["run"] == str(run.path)] if len(evaluations) else None
        records += [_renamed(r, f"{run.algorithm} ({PREDICT})", {}) for r in run.records]
        if evaluated is None or evaluated.empty:
            continue
        for (prediction, step), rows in evaluated.groupby(["prediction", "step"], sort=False):
            if prediction.endswith(f"({PREDICT})"):
                continue
            record = next(r for r in run.records if r["step"] == step)
            accuracies = {f"env{e}_out_acc": a / 100 for e, a in zip(rows["env"], rows["accuracy"])}
            records.append(_renamed(record, prediction, accuracies))
    return Q(records)


def _renamed(record: dict, prediction: str, accuracies: dict) -> dict:
    return {**record, **accuracies, "args": {**record["args"], "algorithm": prediction}}


def selection_frame(records) -> pd.DataFrame:
    """Per dataset, prediction and test domain: test-domain accuracy (%) of the checkpoint and
    hparams the prediction's validation accuracy selects, mean and standard error over trials
    (columns as :func:`~dmg_domainbed.reporting.tables.results_frame`'s, ``prediction`` for
    ``algorithm``), with the average over test domains."""
    from domainbed import datasets
    from domainbed.model_selection import IIDAccuracySelectionMethod

    groups = tables.selected_groups(records, IIDAccuracySelectionMethod)
    rows = []
    for dataset in sorted(set(groups.select("dataset"))):
        environments = datasets.get_dataset_class(dataset).ENVIRONMENTS
        for prediction in sorted(set(groups.filter_equals("dataset", dataset).select("algorithm"))):
            means = []
            for env, domain in enumerate(environments):
                accuracies = groups.filter_equals(
                    "dataset, algorithm, test_env", (dataset, prediction, env)
                ).select("sweep_acc")
                mean, error = tables.mean_and_error(accuracies) or (None, None)
                means.append(mean)
                text = tables.cell_text(mean, error)
                rows.append([dataset, prediction, env, domain, mean, error, len(accuracies), text])
            average = None if None in means else sum(means) / len(means)
            text = tables.MISSING if average is None else f"{average:.1f}"
            rows.append([dataset, prediction, AVERAGE, AVERAGE, average, None, None, text])
    columns = ["dataset", "prediction", "test_env", "test_domain", "accuracy", "stderr"]
    frame = pd.DataFrame(rows, columns=[*columns, "n_trials", "text"])
    frame["n_trials"] = frame["n_trials"].astype("Int64")
    return frame


@dataclass
class CheckpointSelection:
    """What :func:`write_selection` produced."""

    evaluations: pd.DataFrame
    selection: pd.DataFrame
    sections: list[tuple[str, pd.DataFrame]]
    without_checkpoints: list[Run]
    files: list[Path]
    runs: Sequence[Run] = ()

    def notes(self) -> list[str]:
        """What ``select`` says after the tables: the runs left out and diverged, and whether
        the splits are train.py's (predict's accuracy against what train.py logged)."""
        notes = [
            f"note: {run.describe()} saved no checkpoint models; its known-domain rows leave it out"
            for run in self.without_checkpoints
        ]
        notes += warnings(self.runs)
        evaluations = self.evaluations
        if not len(evaluations):
            return notes
        steps = f"{evaluations['step'].nunique()} checkpoint step(s) evaluated"
        logged = evaluations.dropna(subset=["logged"])
        mismatch = logged[(logged["accuracy"] - logged["logged"]).abs() > 1e-6]
        if logged.empty:
            notes.append(
                f"{steps}; none could be compared with train.py's log (it evaluated augmented "
                "images)."
            )
        elif mismatch.empty:
            notes.append(
                f"{steps}; predict's accuracy equals the env<i>_out_acc train.py logged at "
                "each: the splits are train.py's."
            )
        else:
            notes.append(
                f"WARNING: predict's accuracy differs from train.py's logged env<i>_out_acc "
                f"at {len(mismatch)} (checkpoint, domain) pair(s); was the dataset loaded from "
                "another --data_dir?"
            )
        return notes


def write_selection(
    sweep_dir: str | Path, output_dir: Path, data_dir: str | None = None
) -> CheckpointSelection:
    """``checkpoints.csv`` (every checkpoint model's accuracies on the source validation
    splits) and ``selection.csv`` / ``selection.md`` (the test-domain accuracy each prediction
    selects) for the runs of a sweep."""
    sweep = run_files.require_sweep(sweep_dir)
    runs = [run_files.read_run(folder) for folder in run_files.run_folders(sweep)]
    with_known_domain = [run for run in runs if _has_known_domain(run)]
    without = [run for run in with_known_domain if not run_files.checkpoint_models(run)]
    if with_known_domain and len(without) == len(with_known_domain):
        raise UserError(
            f"no run in '{sweep}' saved its checkpoints' models (model_step<N>.pkl), so "
            "known-domain accuracy cannot be measured per checkpoint. Train with train.py's "
            "--save_model_every_checkpoint (in a sweep file: save_model_every_checkpoint = "
            "true)."
        )
    frames = [evaluate_checkpoints(run, data_dir) for run in with_known_domain]
    evaluations = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    selection = selection_frame(selection_records(runs, evaluations))
    sections = []
    for dataset in selection["dataset"].unique():
        of_dataset = selection[selection["dataset"] == dataset]
        wide = of_dataset.pivot(index="prediction", columns="test_domain", values="text")
        wide = wide.loc[of_dataset["prediction"].unique(), of_dataset["test_domain"].unique()]
        title = (
            f"## {dataset}: test-domain accuracy (%) at the checkpoint and hparams selected by "
            "each prediction's source validation accuracy"
        )
        sections.append((title, wide))
    files = write_table(selection, sections, output_dir, "selection", "Selected by")
    if len(evaluations):
        files.insert(0, output_dir / "checkpoints.csv")
        evaluations.to_csv(files[0], index=False)
    return CheckpointSelection(evaluations, selection, sections, without, files, runs)


def _has_known_domain(run: Run) -> bool:
    from dmg_domainbed.algorithms.base import declarations_of

    return bool(declarations_of(run_files.algorithm_class(run)).KNOWN_DOMAIN_PREDICTIONS)
