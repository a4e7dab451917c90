"""In-domain evaluation of a finished run (paper Sec. 4, Table 3).

Each source domain's held-out part (train.py's ``env<i>_out`` split, rebuilt by
:func:`~dmg_domainbed.reporting.runs.rebuild_splits`) is classified in several ways:

* ``predict``: DomainBed's out-of-domain prediction (DMG: raw logits averaged over the source
  domains' soft masks; MultiHead: averaged heads), the number train.py logs as
  ``env<i>_out_acc``;
* known-domain prediction, for algorithms that declare ``KNOWN_DOMAIN_PREDICTIONS`` (served by
  ``predict_known_domain(x, domain, mode)``): the example's own source domain is used
  (DMG-KnownDomain with soft masks ``m_d`` or hard masks ``m_d > 0.5``; MultiHead with its own
  head).

Source domain ``d`` is the ``d``-th training environment in increasing order, test
environments skipped, as in DomainBed's ``update``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from dmg_domainbed.algorithms.base import declarations_of
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import runs as run_files
from dmg_domainbed.reporting.divergence import warnings
from dmg_domainbed.reporting.files import write_table
from dmg_domainbed.reporting.runs import Run

PREDICT = "predict"

Predictor = Callable[[torch.Tensor, int], torch.Tensor]


def predictors(run: Run, algorithm) -> dict[str, Predictor]:
    """Row label -> function ``(x, d)`` giving logits, for every prediction the algorithm has;
    ``predict`` comes first."""
    rows: dict[str, Predictor] = {f"{run.algorithm} ({PREDICT})": lambda x, d: algorithm.predict(x)}
    for mode, label in declarations_of(type(algorithm)).KNOWN_DOMAIN_PREDICTIONS.items():
        rows[f"{run.algorithm}-{label}"] = lambda x, d, mode=mode: algorithm.predict_known_domain(
            x, d, mode
        )
    return rows


def _classes(logits: torch.Tensor) -> torch.Tensor:
    """Predicted classes as DomainBed's ``misc.accuracy`` reads logits (one column: sign)."""
    return logits.gt(0).long().view(-1) if logits.size(1) == 1 else logits.argmax(1)


@torch.no_grad()
def evaluate_run(
    run: Run, data_dir: str | None = None, device: str | None = None, step: int | None = None
) -> pd.DataFrame:
    """Accuracy of every prediction of ``run`` on each source domain's held-out split.

    Columns: ``run``, ``algorithm``, ``prediction``, ``env``, ``domain`` (environment name),
    ``n_examples``, ``accuracy`` (%), ``changed`` (% of examples whose class differs from
    ``predict``'s) and ``logged`` (train.py's last ``env<i>_out_acc`` in %, ``predict`` only;
    empty where train.py classified the images augmented, see
    :func:`~dmg_domainbed.reporting.runs.augmented_evaluation`).

    ``step``: evaluate the model train.py saved at that checkpoint (``model_step<step>.pkl``)
    against the record of that step, instead of the final ``model.pkl`` and the last record.
    """
    from domainbed.lib.fast_data_loader import FastDataLoader
    from torch.utils.data import Subset

    on = device or run_files.device()
    model_file = None if step is None else run_files.checkpoint_models(run)[step]
    algorithm = run_files.load_algorithm(run, on, model_file)
    # The held-out images as they are (Table 3), never with the training augmentation; what
    # train.py logged is then comparable only where it did not augment them either.
    dataset = run_files.load_dataset(run, data_dir, augment=False)
    comparable = not run_files.augmented_evaluation(run)
    environments = type(dataset).ENVIRONMENTS
    splits = run_files.rebuild_splits(dataset, run.args)
    rows = []
    record = run.records[-1] if step is None else next(r for r in run.records if r["step"] == step)
    ways = predictors(run, algorithm)
    reference_name = next(iter(ways))
    for d, env in enumerate(run.source_envs()):
        loader = FastDataLoader(
            dataset=Subset(dataset[env], splits[env].out_keys),
            batch_size=64,
            num_workers=dataset.N_WORKERS,
        )
        batches: dict[str, list[torch.Tensor]] = {name: [] for name in ways}
        labels = []
        for x, y in loader:
            x = x.to(on)
            for name, predict in ways.items():
                batches[name].append(_classes(predict(x, d)).cpu())
            labels.append(y)
        y = torch.cat(labels)
        reference = torch.cat(batches[reference_name])
        for name, predicted in batches.items():
            predicted = torch.cat(predicted)
            logged = record.get(f"env{env}_out_acc") if name == reference_name else None
            logged = 100 * logged if logged is not None and comparable else None
            rows.append(
                {
                    "run": str(run.path),
                    "algorithm": run.algorithm,
                    "prediction": name,
                    "env": env,
                    "domain": environments[env],
                    "n_examples": len(y),
                    "accuracy": 100 * predicted.eq(y).sum().item() / len(y),
                    "changed": 100 * predicted.ne(reference).sum().item() / len(y),
                    "logged": logged,
                }
            )
    return pd.DataFrame(rows)


def check_comparable(runs: list[Run]) -> None:
    """Runs side by side in one table must share train.py's splits and source domains."""
    keys = ("dataset", "test_envs", "trial_seed", "holdout_fraction")
    first = runs[0]
    for run in runs[1:]:
        differ = [k for k in keys if run.args.get(k) != first.args.get(k)]
        if differ:
            raise UserError(
                f"runs '{first.path}' and '{run.path}' differ in {', '.join(differ)}; "
                "runs in one table must share dataset, test envs, trial seed and holdout "
                "fraction (then they were evaluated on the same examples). Evaluate them "
                "separately."
            )


def table3(frame: pd.DataFrame) -> pd.DataFrame:
    """Paper Table 3 layout: predictions down, source domains across, plus their average (%)."""
    wide = frame.pivot(index="prediction", columns="domain", values="accuracy")
    wide = wide.loc[frame["prediction"].unique(), frame["domain"].unique()]
    wide["Avg"] = wide.mean(axis=1)
    wide.columns.name = None
    return wide.round(1)


def table3_title(run: Run) -> str:
    """Markdown heading of a Table 3 for runs that held out ``run.test_envs``."""
    names = run.environments()
    held_out = ", ".join(names[e] for e in run.test_envs)
    return (
        f"## In-domain accuracy (%) on {run.dataset}, test domain {held_out} held out\n\n"
        "Source domains' held-out splits (train.py's env<i>_out), paper Table 3 layout."
    )


@dataclass
class InDomainReport:
    """What :func:`write_in_domain` produced: every row, the Table 3 sections, the files."""

    frame: pd.DataFrame
    sections: list[tuple[str, pd.DataFrame]]
    files: list[Path]
    groups: Sequence[Sequence[Run]] = ()

    def logged_mismatches(self) -> pd.DataFrame:
        """Rows where ``predict``'s accuracy differs from what train.py logged."""
        logged = self.frame.dropna(subset=["logged"])
        return logged[(logged["accuracy"] - logged["logged"]).abs() > 1e-6]

    def augmented(self) -> bool:
        """Whether some ``predict`` rows have no logged accuracy to compare with (train.py
        classified those images with its training augmentation)."""
        rows = self.frame[self.frame["prediction"].str.endswith(f"({PREDICT})")]
        return bool(rows["logged"].isna().any())

    def notes(self) -> list[str]:
        """What ``evaluate`` says after the tables: whether the splits are train.py's (predict's
        accuracy against what train.py logged), and which runs diverged."""
        notes = warnings(run for group in self.groups for run in group)
        augmented, mismatch = self.augmented(), self.logged_mismatches()
        if augmented:
            notes.append(
                "The held-out images are classified without augmentation. train.py classified "
                "some of them with its random training augmentation (DomainBed's "
                "data_augmentation applies to a training domain's held-out split too): its "
                "logged accuracies for those are not compared."
            )
        if not mismatch.empty:
            notes.append(
                f"WARNING: predict's accuracy differs from train.py's logged env<i>_out_acc for "
                f"{len(mismatch)} domain(s); was the dataset loaded from another --data_dir?"
            )
        elif not self.frame["logged"].isna().all():
            notes.append(
                "predict's accuracy equals the env<i>_out_acc train.py logged at its last step "
                f"on {'the others' if augmented else 'every source domain'}: the splits are "
                "train.py's."
            )
        return notes


def write_in_domain(
    groups: Sequence[Sequence[Run]], output_dir: Path, data_dir: str | None = None
) -> InDomainReport:
    """One Table 3 per group of comparable runs (see :func:`check_comparable`), written as
    ``in_domain.csv`` (every row of :func:`evaluate_run`) and ``in_domain.md``."""
    for group in groups:
        check_comparable(list(group))
    frames = [evaluate_run(run, data_dir) for group in groups for run in group]
    frame = pd.concat(frames, ignore_index=True)
    sections = []
    for group in groups:
        rows = frame[frame["run"].isin([str(run.path) for run in group])]
        sections.append((table3_title(group[0]), table3(rows)))
    files = write_table(frame, sections, output_dir, "in_domain", "Prediction")
    return InDomainReport(frame, sections, files, groups)
