"""Soups of a sweep's runs (``dmg-domainbed soup``): one model from all the finished runs of each
(algorithm as reported, dataset, test domains, trial); docs/algorithms.md says more.

With ``f(x; w_m)`` the logits of run ``m`` of ``M``: ``ensemble`` (EoA, Arpit et al., NeurIPS
2022) is ``1/M sum_m f(x; w_m)``; ``uniform`` (Wortsman et al., *Model soups*, ICML 2022, Eq. 1;
DiWA, Rame et al., NeurIPS 2022, Eq. 1) is ``f(x; 1/M sum_m w_m)``; ``greedy`` (Wortsman et al.,
Recipe 1) adds the runs best first, each kept where the soup's validation accuracy (DomainBed's
training-domain validation: no test domain takes part) does not fall. Weights are averaged only
for runs of one recorded ``init_seed`` whose networks, built again from it, are equal; every
floating-point entry of the ``state_dict`` is averaged, the others must be equal.

Each soup is a record in ``soups.jsonl`` as train.py writes them (``args`` and ``hparams`` of
its best run, ``args.output_dir`` its id, ``soup`` what it is made of), which ``report --soups``
reads as rows of their own; a weight soup's model is saved as train.py saves one (``<id>.pkl``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from dmg_domainbed import runs as run_files
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import INIT_SEED, OWN_SEED
from dmg_domainbed.reporting.in_domain import predicted_classes, run_names
from dmg_domainbed.reporting.jobs import require_utf8_name
from dmg_domainbed.reporting.outputs import check_output_dir, write_files
from dmg_domainbed.reporting.tables import markdown_table
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
    return f"{name[:-1]}, {LABELS[mode]})" if name.endswith(")") else f"{name} ({LABELS[mode]})"


def soup_problem(soup: Any) -> str | None:
    """What keeps a record's ``soup`` field from being read as :func:`write_soups` writes it, or
    None."""
    if not isinstance(soup, dict):
        return f"its '{SOUP}' is {soup!r}, not an object"
    if not all(isinstance(soup.get(field), str) for field in ("name", "of")):
        return f"its '{SOUP}' has no 'name' and 'of' (the runs' name) as text"
    if soup.get("mode") not in LABELS:
        return f"its soup's mode is {soup.get('mode')!r}, not one of {', '.join(LABELS)}"
    runs = soup.get("runs")
    if not (isinstance(runs, list) and runs and all(isinstance(run, str) for run in runs)):
        return f"its soup's 'runs' is {runs!r}, not a list of the run folders it was made of"
    return None


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


def _refused(group: Group, runs: Sequence[Run], why: str, fix: str = "") -> UserError:
    named, (name, dataset, envs, trial) = shortlist([f"'{run.path}'" for run in runs]), group
    fix = fix or (
        f"train them with one shared initialisation, e.g. --hparams '{{\"{INIT_SEED}\": 0}}' "
        f"(a sweep file: hparams = {{ {INIT_SEED} = 0 }}), the same for every job"
    )
    return UserError(
        f"the weights of the runs of {name} on {dataset}, test envs {list(envs)}, trial {trial} "
        f"cannot be averaged: {named} {why}. "
        "Nothing was written. A weight soup needs runs that started from the same weights: "
        f"{fix}; or give --modes {ENSEMBLE}, which averages the predictions of any runs."
    )


def check_shared_seed(groups: dict[Group, list[Run]]) -> None:
    """:class:`UserError` naming the runs of a group that record no shared ``init_seed``."""
    for group, runs in groups.items():
        seeds = [run.hparams.get(INIT_SEED, OWN_SEED) for run in runs]
        if own := [run for run, seed in zip(runs, seeds) if seed == OWN_SEED]:
            raise _refused(group, own, "were initialised from each job's own seed")
        if len(set(seeds)) > 1:
            found = ", ".join(str(seed) for seed in sorted(set(seeds)))
            raise _refused(group, runs, f"record different {INIT_SEED}s ({found})")


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
    (so that runs' logits line up; DomainBed's ``FastDataLoader`` shuffles)."""
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


def mean_weights(states: Sequence[dict]) -> dict[str, torch.Tensor]:
    """The mean of the saved states' floating-point entries; their other entries, equal in all."""
    return {
        key: torch.stack([state[key].double() for state in states]).mean(0).to(value.dtype)
        if value.is_floating_point()
        else value
        for key, value in states[0].items()
    }


def _check_same_structure(group: Group, pair: list[Run], states: list[dict], built, first) -> None:
    """:class:`UserError` unless the saved ``states`` of the ``pair`` of runs have the same names,
    shapes and non-floating-point values, and ``built`` (the second's network built afresh from
    its ``init_seed``) equals ``first`` (the first's, built the same way); it names the hparams in
    which the two runs differ."""

    def refused(why: str) -> UserError:
        one, two = (run.hparams for run in pair)
        differ = sorted(k for k in {*one, *two} if one.get(k) != two.get(k))
        fixed = ", ".join(f"{k} ({one.get(k)} and {two.get(k)})" for k in differ)
        fix = (
            "fix every hparam that shapes or initialises the network for every job of the sweep "
            "(--hparams, or a sweep file's hparams), beside one init_seed"
        )
        return _refused(group, pair, f"{why}: they differ in the hparams {fixed}", fix)

    base, last = states
    shapes = [{k: (v.shape, v.dtype) for k, v in state.items()} for state in states]
    if shapes[0] != shapes[1]:
        raise refused("save networks of different architectures")
    for key, value in base.items():
        if not value.is_floating_point() and not torch.equal(value, last[key]):
            raise refused(f"differ in '{key}', which is no weight")
    if any(not torch.equal(a, b) for a, b in zip(built, first, strict=True)):
        raise refused(f"start from different weights for one {INIT_SEED}")


def soups_of_group(group: Group, runs: list[Run], modes, data_dir, on: str) -> list[tuple]:
    """``(record, checkpoint)`` of each soup of ``modes`` of one group's runs; the checkpoint,
    as train.py saves one, holds a weight soup's weights (its best run's hparams), and is None
    for the ensemble."""
    dataset = run_files.load_dataset(runs[0], data_dir, augment=False)
    splits = evaluated_splits(runs[0], dataset)
    weighted = bool(set(modes) & set(WEIGHT_MODES))
    checkpoints, logits, first_built = [], [], None  # checkpoints: kept for the weight soups
    for run in runs:
        path = run_files.require_model(run)
        checkpoint = run_files.read_checkpoint(path, "cpu")
        run_files.check_model_fits(run, path, checkpoint, dataset)
        algorithm = run_files.build_algorithm(run, checkpoint)
        if weighted:
            checkpoints.append(checkpoint)
            built = [t.detach().clone() for t in type(algorithm).state_dict(algorithm).values()]
            first_built = first_built or built
            states = [checkpoints[0]["model_dict"], checkpoint["model_dict"]]
            _check_same_structure(group, [runs[0], run], states, built, first_built)
        algorithm.load_state_dict(checkpoint["model_dict"])
        algorithm.to(on).eval()
        found, labels = logits_of(algorithm, dataset, splits, on)
        logits.append(found)
    alone = [accuracies(found, labels) for found in logits]
    order = sorted(range(len(runs)), key=lambda i: -validation(alone[i], runs[i]))
    best = runs[order[0]]
    if weighted:  # soups are evaluated, and saved, with its hparams
        best_checkpoint = checkpoints[order[0]]
        algorithm = run_files.build_algorithm(best, best_checkpoint)

    def weights(members: list[int]) -> dict:
        return mean_weights([checkpoints[i]["model_dict"] for i in members])

    def souped(members: list[int]) -> dict[str, float]:
        algorithm.load_state_dict(weights(members))
        algorithm.to(on).eval()
        return accuracies(logits_of(algorithm, dataset, splits, on)[0], labels)

    every, made = list(range(len(runs))), {}
    if ENSEMBLE in modes:
        mean = {k: torch.stack([found[k] for found in logits]).mean(0) for k in splits}
        made[ENSEMBLE] = (every, accuracies(mean, labels))
    if UNIFORM in modes:
        made[UNIFORM] = (every, souped(every))
    if GREEDY in modes:
        members, accuracy = [order[0]], alone[order[0]]
        for candidate in order[1:]:
            tried = souped([*members, candidate])
            if validation(tried, best) >= validation(accuracy, best):
                members, accuracy = [*members, candidate], tried
        made[GREEDY] = (members, accuracy)
    soups, step = [], best.records[-1]["step"]
    for mode, (members, accuracy) in made.items():
        paths = [str(runs[i].path.resolve()) for i in members]
        soup = {"name": soup_name(group[0], mode), "of": group[0], "mode": mode}
        soup |= {"validation_acc": validation(accuracy, best), "runs": paths}
        record = {"args": dict(best.args), "hparams": dict(best.hparams), "step": step, **accuracy}
        model = None if mode == ENSEMBLE else {**best_checkpoint, "model_dict": weights(members)}
        soups.append(({**record, SOUP: soup}, model))
    return soups


def soup_id(record: dict) -> str:
    """A soup's name in files: its mode and a digest of what it is made of."""
    made_of = json.dumps([record[SOUP]["name"], record["args"]["test_envs"], record[SOUP]])
    return f"{record[SOUP]['mode']}_{hashlib.sha256(made_of.encode()).hexdigest()[:12]}"


def soups_frame(records: list[dict]) -> pd.DataFrame:
    rows = []
    for record in records:
        soup, args = record[SOUP], record["args"]
        test = [100 * record[f"env{env}_in_acc"] for env in args["test_envs"]]
        envs = ",".join(map(str, args["test_envs"]))
        rows.append([soup["name"], args["dataset"], envs, args["trial_seed"], len(soup["runs"])])
        rows[-1] += [100 * soup["validation_acc"], sum(test) / len(test), soup_id(record)]
    columns = "soup dataset test_envs trial runs validation_accuracy test_accuracy id"
    return pd.DataFrame(rows, columns=columns.split())


def write_soups(
    sweep_dir: str | Path,
    output_dir: Path,
    modes: Sequence[str] = MODES,
    data_dir: str | None = None,
) -> tuple[str, list[Path], list[str]]:
    """Every soup of ``modes`` of the sweep's groups written into ``output_dir`` (``soups.jsonl``,
    ``<id>.pkl``, ``soups.csv`` and ``.md``): the Markdown table, the files, a warning for each
    diverged run in a soup."""
    sweep = run_files.require_sweep(sweep_dir)
    output = check_output_dir(output_dir, sweep)
    groups = soup_groups(sweep)
    if set(modes) & set(WEIGHT_MODES):
        check_shared_seed(groups)
    on = run_files.device()
    made = [s for g, runs in groups.items() for s in soups_of_group(g, runs, modes, data_dir, on)]
    for record, _ in made:  # its id, where the reports look for a run's folder
        record["args"]["output_dir"] = str(output.absolute() / soup_id(record))
    frame = soups_frame([record for record, _ in made])
    written = {RECORDS: "".join(json.dumps(record) + "\n" for record, _ in made)}
    saved = {soup_id(r): {**model, "args": r["args"]} for r, model in made if model is not None}
    written |= {f"{id}.pkl": partial(torch.save, model) for id, model in saved.items()}
    markdown = markdown_table(frame.round(1).set_index("soup"), "Soup")
    written |= {f"{SOUPS}.csv": frame, f"{SOUPS}.md": markdown}
    warnings = run_files.warnings(run for runs in groups.values() for run in runs)
    return markdown, write_files(output, written), warnings
