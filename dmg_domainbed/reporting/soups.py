"""Soups of a sweep's runs (``dmg-domainbed soup``): one model from all the runs of each
(algorithm as reported, dataset, test domains, trial), whatever their hparams seeds.

With ``f(x; w)`` a run's logits and ``w_1..w_M`` the weights of the ``M`` runs:

* ``ensemble``, the ensemble of EoA (Arpit et al., *Ensemble of Averages*, NeurIPS 2022):
  ``f_ens(x) = 1/M sum_m f(x; w_m)``, the mean of the runs' logits; any runs can be ensembled.
* ``uniform``, the uniform soup (Wortsman et al., *Model soups*, ICML 2022, Eq. 1) and DiWA's
  uniform average (Rame et al., *Diverse Weight Averaging*, NeurIPS 2022, Eq. 1):
  ``f(x; 1/M sum_m w_m)``, one model with the mean of the runs' weights.
* ``greedy``, the greedy soup (Wortsman et al., Recipe 1; DiWA's restricted average): the runs
  sorted by validation accuracy, best first; each joins the soup when the soup with it is at
  least as accurate on validation as the soup without it.

Validation is DomainBed's training-domain validation only: the mean over the source domains of
the accuracy on train.py's held-out split (``env<i>_out``), rebuilt as train.py made it; no
test domain takes part in any choice. A weight average is a model only where the runs started
from the same weights (DiWA's shared initialisation): every run must record the same
``init_seed`` (:func:`dmg_domainbed.averaging.seed_initialisation`), and their networks, built
again from it, must be equal; otherwise :class:`UserError` names the runs before anything is
written. What is averaged is every floating-point entry of the saved ``state_dict``
(BatchNorm's statistics among them, as :mod:`dmg_domainbed.averaging` does); other entries
must be equal in every run.

Each soup is a record in ``soups.jsonl``, as train.py writes them into ``results.jsonl``: its
accuracies the soup's (``env<i>_out_acc`` of every domain, ``env<i>_in_acc`` of the test
domains), its ``args`` and ``hparams`` those of its best run (``args.output_dir`` its id), and
``soup`` what it is made of; ``report --soups`` reads them as rows of their own, named
``<algorithm> (soup: greedy)``, never pooled with a single model's. A weight soup's weights are
saved as train.py saves a model (``<id>.pkl``, with its best run's hparams).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from dmg_domainbed import runs as run_files
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import INIT_SEED, OWN_SEED
from dmg_domainbed.reporting.in_domain import predicted_classes, run_names
from dmg_domainbed.reporting.jobs import require_utf8_name
from dmg_domainbed.reporting.outputs import check_output_dir, placed, staged
from dmg_domainbed.reporting.tables import markdown_table, write_table
from dmg_domainbed.runs import Run
from dmg_domainbed.shortlist import shortlist

ENSEMBLE, UNIFORM, GREEDY = "ensemble", "uniform", "greedy"
MODES = (ENSEMBLE, UNIFORM, GREEDY)
WEIGHT_MODES = (UNIFORM, GREEDY)
LABELS = {ENSEMBLE: "ensemble", UNIFORM: "soup: uniform", GREEDY: "soup: greedy"}
SOUPS = "soups"
RECORDS = "soups.jsonl"  # what report --soups reads
SOUP = "soup"  # a soup's record's own field: what it is made of
#: (the runs' name as reported, dataset, test environments, trial seed)
Group = tuple[str, str, tuple[int, ...], int]


def soup_name(name: str, mode: str) -> str:
    """``ERM (soup: greedy)``; ``ERM (bf16, soup: greedy)`` for runs named ``ERM (bf16)``."""
    if name.endswith(")"):
        return f"{name[:-1]}, {LABELS[mode]})"
    return f"{name} ({LABELS[mode]})"


def soup_groups(sweep: Path) -> dict[Group, list[Run]]:
    """The sweep's finished runs (those with ``done``) by :data:`Group`."""
    folders = [f for f in run_files.run_folders(sweep) if (f / run_files.DONE_FILE).is_file()]
    runs = [run_files.read_run(require_utf8_name(folder)) for folder in folders]
    if not runs:
        raise UserError(
            f"no finished run in '{sweep}' (none has a '{run_files.DONE_FILE}' file): a soup "
            "is made of the models runs save when they end. Wait for the sweep to finish."
        )
    names, groups = run_names(runs), {}
    for run in runs:
        key = (names[run.path], run.dataset, tuple(run.test_envs), run.args["trial_seed"])
        groups.setdefault(key, []).append(run)
    return groups


def _group_text(group: Group) -> str:
    name, dataset, envs, trial = group
    return f"{name} on {dataset}, test envs {list(envs)}, trial {trial}"


def _refused(group: Group, runs: Sequence[Run], why: str, fix: str = "") -> UserError:
    named = shortlist([f"'{run.path}'" for run in runs])
    fix = fix or (
        f"train them with one shared initialisation, e.g. --hparams '{{\"{INIT_SEED}\": 0}}' "
        f"(a sweep file: hparams = {{ {INIT_SEED} = 0 }}), the same for every job"
    )
    return UserError(
        f"the weights of the runs of {_group_text(group)} cannot be averaged: {named} {why}. "
        "Nothing was written. A weight soup needs runs that started from the same weights: "
        f"{fix}; or give --modes {ENSEMBLE}, which averages the predictions of any runs."
    )


def _same_network(group: Group, runs: Sequence[Run], why: str) -> UserError:
    """The refusal of two runs whose hparams build different networks, naming the hparams in
    which they differ."""
    first, other = (run.hparams for run in runs)
    differ = sorted(k for k in {*first, *other} if first.get(k) != other.get(k))
    fixed = ", ".join(f"{k} ({first.get(k)} and {other.get(k)})" for k in differ)
    return _refused(
        group,
        runs,
        f"{why}: they differ in the hparams {fixed}",
        "fix every hparam that shapes or initialises the network for every job of the sweep "
        "(--hparams, or a sweep file's hparams), beside one init_seed",
    )


def check_shared_seed(groups: dict[Group, list[Run]]) -> None:
    """:class:`UserError` naming the runs of a group that do not record one shared
    ``init_seed`` (read from their records, before any model is loaded)."""
    for group, runs in groups.items():
        seeds = [run.hparams.get(INIT_SEED, OWN_SEED) for run in runs]
        own = [run for run, seed in zip(runs, seeds) if seed == OWN_SEED]
        if own:
            raise _refused(group, own, "were initialised from each job's own seed")
        if len(set(seeds)) > 1:
            found = ", ".join(str(seed) for seed in sorted(set(seeds)))
            raise _refused(group, runs, f"record different {INIT_SEED}s ({found})")


@dataclass
class Ingredient:
    """One run in a soup: its checkpoint (``model.pkl``) and its logits on every split."""

    run: Run
    checkpoint: dict
    logits: dict[str, torch.Tensor]
    weights = property(lambda self: self.checkpoint["model_dict"])


def evaluated_splits(run: Run, dataset) -> dict[str, tuple[int, list[int]]]:
    """Record key -> (environment, indices) of what a soup's record holds: every domain's
    held-out split (``env<i>_out_acc``), the test domains' training split (``env<i>_in_acc``)."""
    keys = {}
    for split in run_files.rebuild_splits(dataset, run.args):
        keys[f"env{split.env}_out_acc"] = (split.env, split.out_keys)
        if split.env in run.test_envs:
            keys[f"env{split.env}_in_acc"] = (split.env, split.in_keys)
    return keys


@torch.no_grad()
def logits_of(algorithm, dataset, splits: dict, on: str) -> tuple[dict, dict]:
    """``algorithm``'s logits and the labels on each split of ``splits``, in the split's order
    (every call the same, so that runs' logits line up; DomainBed's ``FastDataLoader``
    shuffles)."""
    from torch.utils.data import DataLoader, Subset

    logits, labels = {}, {}
    for key, (env, indices) in splits.items():
        held = Subset(dataset[env], indices)
        loader = DataLoader(held, batch_size=64, num_workers=dataset.N_WORKERS)
        batches = [(algorithm.predict(x.to(on)).float().cpu(), y) for x, y in loader]
        logits[key] = torch.cat([out for out, _ in batches])
        labels[key] = torch.cat([y for _, y in batches])
    return logits, labels


def accuracies(logits: dict, labels: dict) -> dict[str, float]:
    return {k: predicted_classes(v).eq(labels[k]).float().mean().item() for k, v in logits.items()}


def validation(accuracy: dict[str, float], run: Run) -> float:
    """Training-domain validation accuracy: the mean over source domains of ``env<i>_out_acc``."""
    return sum(accuracy[f"env{env}_out_acc"] for env in run.source_envs()) / len(run.source_envs())


def mean_weights(ingredients: Sequence[Ingredient]) -> dict[str, torch.Tensor]:
    """The mean of the ingredients' floating-point weights; their other entries, equal in all."""
    first = ingredients[0].weights
    return {
        key: torch.stack([i.weights[key].double() for i in ingredients]).mean(0).to(value.dtype)
        if value.is_floating_point()
        else value
        for key, value in first.items()
    }


def _check_same_structure(group: Group, ingredients: Sequence[Ingredient], built, first) -> None:
    """:class:`UserError` unless every ingredient's saved state has the names, shapes and
    non-floating-point values of the first's, and ``built`` (its network built afresh from
    its ``init_seed``) equals ``first`` (the first run's, built the same way)."""
    last, base = ingredients[-1], ingredients[0]
    shape = {k: (tuple(v.shape), v.dtype) for k, v in base.weights.items()}
    pair = [base.run, last.run]
    if {k: (tuple(v.shape), v.dtype) for k, v in last.weights.items()} != shape:
        raise _same_network(group, pair, "save networks of different architectures")
    for key, value in base.weights.items():
        if not value.is_floating_point() and not torch.equal(value, last.weights[key]):
            raise _same_network(group, pair, f"differ in '{key}', which is no weight")
    if any(not torch.equal(a, b) for a, b in zip(built, first, strict=True)):
        raise _same_network(group, pair, f"start from different weights for one {INIT_SEED}")


def _initial(algorithm) -> list[torch.Tensor]:
    return [t.detach().clone() for t in type(algorithm).state_dict(algorithm).values()]


def soups_of_group(group: Group, runs: list[Run], modes, data_dir, on: str) -> list[tuple]:
    """``(record, checkpoint)`` of each soup of ``modes`` of one group's runs (see the module's
    description); the checkpoint, as train.py saves one, holds a weight soup's weights (with
    its best run's hparams), and is None for the ensemble."""
    dataset = run_files.load_dataset(runs[0], data_dir, augment=False)
    splits = evaluated_splits(runs[0], dataset)
    ingredients, first_initial, algorithm, labels = [], None, None, {}
    for run in runs:
        path = run_files.require_model(run)
        checkpoint = run_files.read_checkpoint(run, path, "cpu")
        run_files.check_model_fits(run, path, checkpoint, dataset)
        algorithm = run_files.build_algorithm(run, checkpoint)
        initial = _initial(algorithm)
        first_initial = first_initial or initial
        algorithm.load_state_dict(checkpoint["model_dict"])
        algorithm.to(on).eval()
        logits, labels = logits_of(algorithm, dataset, splits, on)
        ingredients.append(Ingredient(run, checkpoint, logits))
        if set(modes) & set(WEIGHT_MODES):
            _check_same_structure(group, ingredients, initial, first_initial)
    alone = [accuracies(i.logits, labels) for i in ingredients]
    order = sorted(range(len(runs)), key=lambda i: -validation(alone[i], runs[i]))
    best, best_checkpoint = runs[order[0]], ingredients[order[0]].checkpoint
    if set(modes) & set(WEIGHT_MODES):  # soups are evaluated, and saved, with its hparams
        algorithm = run_files.build_algorithm(best, best_checkpoint)

    def souped(members: list[int]) -> dict[str, float]:
        algorithm.load_state_dict(mean_weights([ingredients[i] for i in members]))
        algorithm.to(on).eval()
        return accuracies(logits_of(algorithm, dataset, splits, on)[0], labels)

    made = {}
    if ENSEMBLE in modes:
        mean = {k: torch.stack([i.logits[k] for i in ingredients]).mean(0) for k in splits}
        made[ENSEMBLE] = (list(range(len(runs))), accuracies(mean, labels))
    if UNIFORM in modes:
        made[UNIFORM] = (list(range(len(runs))), souped(list(range(len(runs)))))
    if GREEDY in modes:
        members, accuracy = [order[0]], alone[order[0]]
        for candidate in order[1:]:
            tried = souped([*members, candidate])
            if validation(tried, best) >= validation(accuracy, best):
                members, accuracy = [*members, candidate], tried
        made[GREEDY] = (members, accuracy)

    def record(mode: str, members: list[int], accuracy: dict) -> dict:
        return {
            "args": dict(best.args),
            "hparams": dict(best.hparams),
            "step": best.records[-1]["step"],
            **accuracy,
            SOUP: {
                "name": soup_name(group[0], mode),
                "of": group[0],
                "mode": mode,
                "validation_acc": validation(accuracy, best),
                "runs": [str(runs[i].path.resolve()) for i in members],
            },
        }

    def checkpoint(mode: str, members: list[int]) -> dict | None:
        if mode == ENSEMBLE:
            return None
        weights = mean_weights([ingredients[i] for i in members])
        return {**best_checkpoint, "model_dict": weights}

    return [
        (record(mode, members, accuracy), checkpoint(mode, members))
        for mode, (members, accuracy) in made.items()
    ]


def soup_id(record: dict) -> str:
    """A soup's name in files: its mode and a digest of what it is made of."""
    made_of = json.dumps([record[SOUP]["name"], record["args"]["test_envs"], record[SOUP]])
    return f"{record['soup']['mode']}_{hashlib.sha256(made_of.encode()).hexdigest()[:12]}"


def soups_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for record in records:
        soup, args = record[SOUP], record["args"]
        test = [100 * record[f"env{env}_in_acc"] for env in args["test_envs"]]
        rows.append(
            [soup["name"], args["dataset"], ",".join(map(str, args["test_envs"]))]
            + [args["trial_seed"], len(soup["runs"]), 100 * soup["validation_acc"]]
            + [sum(test) / len(test), soup_id(record)]
        )
    columns = "soup dataset test_envs trial runs validation_accuracy test_accuracy id"
    return pd.DataFrame(rows, columns=columns.split())


def write_soups(
    sweep_dir: str | Path, output_dir: Path, modes: Sequence[str] = MODES, data_dir=None
) -> tuple[pd.DataFrame, list[Path], list[str]]:
    """Every soup of ``modes`` of the sweep's groups (:func:`soup_groups`), written into
    ``output_dir``: ``soups.jsonl`` (a record each), ``<id>.pkl`` for each weight soup, and
    ``soups.csv`` and ``soups.md``: what each soup is made of and its validation and test
    accuracy (%); and a warning for each diverged run in a soup."""
    sweep = run_files.require_sweep(sweep_dir)
    output = check_output_dir(output_dir, sweep)
    groups = soup_groups(sweep)
    if set(modes) & set(WEIGHT_MODES):
        check_shared_seed(groups)
    on = run_files.device()
    made = [
        soup
        for group, runs in groups.items()
        for soup in soups_of_group(group, runs, modes, data_dir, on)
    ]
    for record, _ in made:  # its id, where the reports look for a run's folder
        record["args"]["output_dir"] = str(output.absolute() / soup_id(record))
    frame = soups_frame([record for record, _ in made])
    with staged(output) as stage:
        files = [stage / RECORDS]
        files[0].write_text("".join(json.dumps(record) + "\n" for record, _ in made))
        for record, checkpoint in made:
            if checkpoint is not None:
                files.append(stage / f"{soup_id(record)}.pkl")
                torch.save({**checkpoint, "args": record["args"]}, files[-1])
        markdown = markdown_table(frame.round(1).set_index("soup"), "Soup")
        files += write_table(frame, markdown, stage, SOUPS)
    warnings = run_files.warnings(run for runs in groups.values() for run in runs)
    return frame, placed(files, output), warnings
