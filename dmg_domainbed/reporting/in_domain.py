"""In-domain evaluation of finished runs (paper Sec. 4, Table 3): each source domain's held-out
split (train.py's ``env<i>_out``, rebuilt) classified by ``predict`` and by each known-domain
prediction the algorithm declares (``KNOWN_DOMAIN_PREDICTIONS``); source domain ``d`` is the
``d``-th training environment, as in ``update``. ``select`` evaluates every checkpoint model so,
and DomainBed's ``IIDAccuracySelectionMethod`` selects on records whose source ``env<i>_out_acc``
is a prediction's accuracy (for ``predict``, train.py's own records: collect_results' rows).
"""

from __future__ import annotations

import json
import os
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd
import torch

from dmg_domainbed import runs as run_files
from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import tables
from dmg_domainbed.reporting.jobs import names_notes, renamed, reported_names, require_utf8_name
from dmg_domainbed.reporting.outputs import write_files
from dmg_domainbed.reporting.tables import markdown_text, sections_markdown
from dmg_domainbed.runs import Run, warnings

PREDICT = "predict"
IN_DOMAIN, SELECTION, CHECKPOINTS = "in_domain", "selection", "checkpoints.csv"
SELECTED = "test-domain accuracy (%) at the checkpoint and hparams selected by each prediction's"
SELECTED += " source validation accuracy"


def run_names(runs: Iterable[Run]) -> dict[Path, str]:
    """Run folder -> the name its rows go under (:func:`.jobs.reported_names`)."""
    return reported_names({run.path: run.records[-1] for run in runs})


def run_notes(runs: list[Run]) -> list[str]:
    """The runs' warnings, and what their names mean."""
    return warnings(runs) + names_notes({run.path: run.records[-1] for run in runs})


def predictors(name: str, algorithm) -> dict[str, Callable]:
    """Row label -> function ``(x, d)`` giving logits, ``predict`` first."""
    rows: dict[str, Callable] = {f"{name} ({PREDICT})": lambda x, d: algorithm.predict(x)}
    known = getattr(algorithm, "predict_known_domain", None)
    for mode, label in declarations_of(type(algorithm)).KNOWN_DOMAIN_PREDICTIONS.items():
        rows[f"{name}-{label}"] = lambda x, d, mode=mode: known(x, d, mode)
    return rows


def predicted_classes(logits: torch.Tensor) -> torch.Tensor:
    """Predicted classes as DomainBed's ``misc.accuracy`` reads logits (one column: sign)."""
    return logits.gt(0).long().view(-1) if logits.size(1) == 1 else logits.argmax(1)


@torch.no_grad()
def evaluate_run(
    run: Run,
    data_dir: str | None = None,
    device: str | None = None,
    step: int | None = None,
    dataset=None,
    name: str | None = None,
) -> pd.DataFrame:
    """Accuracy (%) of every prediction of ``run`` (at checkpoint ``step``, else ``model.pkl``)
    on each source domain's held-out split, the % whose class differs from ``predict``'s, and
    train.py's logged ``env<i>_out_acc`` where it did not classify them augmented."""
    from domainbed.lib.fast_data_loader import FastDataLoader
    from torch.utils.data import Subset

    on = device or run_files.device()
    model_file = None if step is None else run_files.checkpoint_models(run)[step]
    # The held-out images as they are (Table 3), never with the training augmentation; what
    # train.py logged is then comparable only where it did not augment them either.
    if dataset is None:
        dataset = run_files.load_dataset(run, data_dir, augment=False)
    algorithm = run_files.load_algorithm(run, on, model_file, dataset)
    comparable = not run_files.augmented_evaluation(run)
    splits = run_files.rebuild_splits(dataset, run.args)
    rows = []
    record = run.records[-1] if step is None else next(r for r in run.records if r["step"] == step)
    name = name or run_names([run])[run.path]
    ways = predictors(name, algorithm)
    for d, env in enumerate(run.source_envs()):
        held_out = Subset(dataset[env], splits[env].out_keys)
        loader = FastDataLoader(dataset=held_out, batch_size=64, num_workers=dataset.N_WORKERS)
        moved = ((x.to(on), y) for x, y in loader)
        batches = [(y, [predicted_classes(p(x, d)).cpu() for p in ways.values()]) for x, y in moved]
        y = torch.cat([labels for labels, _ in batches])
        predicted = [torch.cat(classes) for classes in zip(*(c for _, c in batches))]
        for i, prediction in enumerate(ways):  # the first is predict: what train.py logged
            logged = record.get(f"env{env}_out_acc") if i == 0 else None
            logged = 100 * logged if logged is not None and comparable else None
            accuracy = 100 * predicted[i].eq(y).sum().item() / len(y)
            changed = 100 * predicted[i].ne(predicted[0]).sum().item() / len(y)
            rows.append([str(run.path), name, prediction, env, type(dataset).ENVIRONMENTS[env]])
            rows[-1] += [len(y), accuracy, changed, logged]
    columns = ["run", "algorithm", "prediction", "env", "domain", "n_examples", "accuracy"]
    frame = pd.DataFrame(rows, columns=[*columns, "changed", "logged"])
    return frame if step is None else frame.assign(step=step)


def check_comparable(runs: list[Run]) -> None:
    """Runs in one table share train.py's splits, are one per name and in UTF-8 folders."""
    keys = ("dataset", "test_envs", "trial_seed", "holdout_fraction")
    first, seen, names = runs[0], {}, run_names(runs)
    for run in runs:
        require_utf8_name(Path(run.path))
        if differ := [k for k in keys if run.args.get(k) != first.args.get(k)]:
            raise UserError(
                f"runs '{first.path}' and '{run.path}' differ in {', '.join(differ)}; "
                "runs in one table must share dataset, test envs, trial seed and holdout "
                "fraction (then they were evaluated on the same examples). Evaluate them "
                "separately."
            )
        if (other := seen.setdefault(names[run.path], run)) is not run:
            same = Path(other.path).resolve() == Path(run.path).resolve()
            raise UserError(
                f"run '{run.path}' is given twice; give each run once."
                if same
                else f"runs '{other.path}' and '{run.path}' are both runs of {names[run.path]} "
                f"on test envs {run.test_envs}; one table holds one run per algorithm. "
                "Evaluate them in separate calls (each with its own --output_dir)."
            )


def table3(frame: pd.DataFrame) -> pd.DataFrame:
    """Paper Table 3 layout: predictions down, source domains across, plus their average (%)."""
    wide = frame.pivot(index="prediction", columns="domain", values="accuracy")
    wide = wide.loc[frame["prediction"].unique(), frame["domain"].unique()]
    wide["Avg"] = wide.mean(axis=1)
    wide.columns.name = None
    return wide.round(1)


def table3_title(runs: Sequence[Run], home: Path) -> str:
    """Markdown heading of a Table 3 of ``runs``, their folders relative to ``home``."""
    environments, names = runs[0].environments(), run_names(runs)
    held_out = markdown_text(", ".join(environments[e] for e in runs[0].test_envs))
    shown = "\n".join(
        f"- {markdown_text(names[run.path])}: trial seed {run.args.get('trial_seed')}, hparams "
        f"seed {run.args.get('hparams_seed')}, step {run.records[-1].get('step')} (folder "
        f"{markdown_text(os.path.relpath(Path(run.path).absolute(), home.absolute()))}); "
        f"hparams {markdown_text(json.dumps(run.hparams, sort_keys=True))}"
        for run in runs
    )
    return (
        f"## In-domain accuracy (%) on {markdown_text(runs[0].dataset)}, test domain {held_out} "
        "held out\n\n"
        "Source domains' held-out splits (train.py's env<i>_out), paper Table 3 layout, of "
        f"the runs (their folders relative to this file's):\n\n{shown}"
    )


#: What ``evaluate`` or ``select`` produced: every row, the titled tables, files, notes.
Written = namedtuple("Written", "frame sections files notes")


def logged_mismatches(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows where ``predict``'s accuracy differs from the logged one."""
    logged = frame.dropna(subset=["logged"])
    return logged[(logged["accuracy"] - logged["logged"]).abs() > 1e-6]


def logged_notes(frame: pd.DataFrame, when: str) -> list[str]:
    """Whether the splits are train.py's: predict's accuracy against what train.py logged."""
    if frame["logged"].isna().all():
        return []
    if len(mismatch := logged_mismatches(frame)):
        return [
            f"WARNING: predict's accuracy differs from train.py's logged env<i>_out_acc for "
            f"{len(mismatch)} (run, step, domain) case(s); was the dataset loaded from another "
            "--data_dir, or did its domains change since?"
        ]
    return [
        f"predict's accuracy equals the env<i>_out_acc train.py logged {when} wherever it "
        "logged one of unaugmented images: the splits are train.py's."
    ]


def write_in_domain(
    groups: Sequence[Sequence[Run]], output_dir: Path, data_dir: str | None = None
) -> Written:
    """One Table 3 per group of comparable runs: ``in_domain.csv`` (every row) and ``.md``."""
    for group in groups:
        check_comparable(list(group))
    frames, sections = [], []
    for group in groups:
        names = run_names(group)
        frames.append(pd.concat([evaluate_run(r, data_dir, name=names[r.path]) for r in group]))
        sections.append((table3_title(group, output_dir), table3(frames[-1])))
    frame = pd.concat(frames, ignore_index=True)
    markdown = sections_markdown(sections, "Prediction")
    files = write_files(output_dir, {f"{IN_DOMAIN}.csv": frame, f"{IN_DOMAIN}.md": markdown})
    notes = run_notes([run for group in groups for run in group])
    if frame.loc[frame["prediction"].str.endswith(f"({PREDICT})"), "logged"].isna().any():
        notes.append(
            "The held-out images are classified without augmentation. train.py classified "
            "some of them with its random training augmentation (DomainBed's "
            "data_augmentation applies to a training domain's held-out split too): its "
            "logged accuracies for those are not compared."
        )
    return Written(frame, sections, files, notes + logged_notes(frame, "at its last step"))


def selection_frame(runs: Sequence[Run], evaluations: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, prediction and test domain, the cell of what the prediction selects, from
    records whose source ``env<i>_out_acc`` is its accuracy (``predict``: train.py's)."""
    from domainbed.lib.query import Q

    records, names = [], run_names(runs)
    for run in runs:
        own = f"{names[run.path]} ({PREDICT})"
        records += [renamed(r, own, Path(run.path)) for r in run.records]
        evaluated = evaluations[evaluations["run"] == str(run.path)]
        for (prediction, step), rows in evaluated.groupby(["prediction", "step"], sort=False):
            if prediction.endswith(f"({PREDICT})"):
                continue
            record = next(r for r in run.records if r["step"] == step)
            accuracies = {f"env{e}_out_acc": a / 100 for e, a in zip(rows["env"], rows["accuracy"])}
            records.append(renamed({**record, **accuracies}, prediction, Path(run.path)))
    iid = tables.selection_methods()[:1]  # training-domain validation
    selected = tables.selected_frame(tables.ranked_runs(Q(records), methods=iid)).sort_index()
    selected = selected.rename(columns={"algorithm": "prediction"})
    rows = sorted(set(zip(selected["dataset"], selected["prediction"])))
    return tables.domain_cells(selected, ["dataset", "prediction", "test_env"], rows)


def write_selection(
    sweep_dir: str | Path, output_dir: Path, data_dir: str | None = None
) -> Written:
    """``checkpoints.csv`` and ``selection.csv`` / ``.md`` of the sweep's runs."""
    sweep = run_files.require_sweep(sweep_dir)
    runs = [run_files.read_run(require_utf8_name(f)) for f in run_files.run_folders(sweep)]
    with_known_domain = [
        r for r in runs if declarations_of(run_files.algorithm_class(r)).KNOWN_DOMAIN_PREDICTIONS
    ]
    without = [run for run in with_known_domain if not run_files.checkpoint_models(run)]
    if with_known_domain and len(without) == len(with_known_domain):
        raise UserError(
            f"no run in '{sweep}' saved its checkpoints' models (model_step<N>.pkl), so "
            "known-domain accuracy cannot be measured per checkpoint. Train with train.py's "
            "--save_model_every_checkpoint (in a sweep file: save_model_every_checkpoint = "
            "true)."
        )
    # Every prediction's accuracy (%) on the source validation splits, per checkpoint model.
    frames, names = [], run_names(runs)
    for run in with_known_domain:
        if steps := list(run_files.checkpoint_models(run)):  # its dataset built once for all
            dataset, name = run_files.load_dataset(run, data_dir, augment=False), names[run.path]
            frames += [
                evaluate_run(run, data_dir, step=s, dataset=dataset, name=name) for s in steps
            ]
    no_frames = pd.DataFrame(columns=["run", "prediction", "step"])
    evaluations = pd.concat(frames, ignore_index=True) if frames else no_frames
    selection = selection_frame(runs, evaluations)
    sections = [
        (f"## {dataset}: {SELECTED}", tables.wide_table(rows, index="prediction"))
        for dataset, rows in selection.groupby("dataset", sort=False)
    ]
    markdown = sections_markdown(sections, "Selected by")
    written = {CHECKPOINTS: evaluations} if len(evaluations) else {}
    written |= {f"{SELECTION}.csv": selection, f"{SELECTION}.md": markdown}
    files = write_files(output_dir, written)
    notes = [
        f"note: {run.describe()} saved no checkpoint models; its known-domain rows leave it out"
        for run in without
    ]
    notes += run_notes(runs)
    if len(evaluations):
        found = logged_notes(evaluations, "at each checkpoint") or [
            "None could be compared with train.py's log (it evaluated augmented images)."
        ]
        notes.append(f"{evaluations['step'].nunique()} checkpoint step(s) evaluated. {found[0]}")
    return Written(selection, sections, files, notes)
