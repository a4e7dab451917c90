"""The smoke check's jobs: for each algorithm and dataset, the sweep's job with the largest
batch (:func:`from_sweep`), or the command line's one job (:func:`from_command_line`); their
data and weights are :mod:`.staging`'s."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dmg_domainbed import register
from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.checks import check_file, check_names
from dmg_domainbed.sweep.config import SweepConfig


@dataclass(frozen=True)
class SmokeJob:
    """One algorithm on one dataset, standing for the sweep's jobs of that pair."""

    algorithm: str
    dataset: str
    train_args: Mapping[str, Any]  # DomainBed's train arguments of the job it stands for
    batch_size: int  # per domain, of the hparams that job trains with
    batch: str  # examples per step: source domains x batch size per domain
    fixed_hparams: Mapping[str, Any]  # the sweep's fixed hparams of the algorithm
    sweep_args: tuple[Mapping[str, Any], ...]  # the train arguments of the jobs it stands for


def _jobs_of(config: SweepConfig, counted: bool) -> list[SmokeJob]:
    """Per algorithm and dataset, the first job of DomainBed's order with the largest batch."""
    from domainbed import datasets

    sizes = {draw[:4]: draw[4]["batch_size"] for draw in plan.draws(config)}
    by_pair: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for group in plan.groups(config):
        for args in plan.train_args(config, os.devnull, group):
            pair = args["algorithm"], args["dataset"]
            size = sizes[(*pair, args["hparams_seed"], args["trial_seed"])]
            by_pair.setdefault(pair, []).append((size, args))
    smoke_jobs = []
    for dataset, algorithm in itertools.product(config.datasets, config.algorithms):
        pair = by_pair[algorithm, dataset]
        size, args = max(pair, key=lambda sized: sized[0])  # the first of the largest
        domains = len(datasets.get_dataset_class(dataset).ENVIRONMENTS)
        batch = f"{domains - len(args['test_envs'])}x{size}"
        stands_for = tuple(a for _, a in pair) if counted else (args,)
        fixed = config.hparams_of(algorithm)
        smoke_jobs.append(SmokeJob(algorithm, dataset, args, size, batch, fixed, stands_for))
    return smoke_jobs


def _narrow(config: SweepConfig, kind: str, given: Sequence[str] | None) -> tuple[str, ...]:
    available = getattr(config, kind)
    if unknown := [name for name in given or () if name not in available]:
        raise UserError(
            f"{kind} {', '.join(unknown)} not in {config.path}; its {kind}: {', '.join(available)}"
        )
    return tuple(name for name in available if not given or name in given)


def from_sweep(
    config: SweepConfig, algorithms: Sequence[str] | None, datasets: Sequence[str] | None
) -> list[SmokeJob]:
    """The smoke jobs of a sweep file, narrowed to some of its algorithms and datasets."""
    check_file(config)
    algorithms = _narrow(config, "algorithms", algorithms)
    datasets = _narrow(config, "datasets", datasets)
    return _jobs_of(replace(config, algorithms=algorithms, datasets=datasets), counted=True)


def from_command_line(
    algorithms: Sequence[str], datasets: Sequence[str], hparams: Mapping[str, Any]
) -> list[SmokeJob]:
    """The smoke jobs of the command line's algorithms and datasets: default hparams updated
    with ``hparams``, test domain 0, as ``train.py`` runs without more arguments."""
    from dmg_domainbed.preflight.hparams import checked_run

    register()
    from domainbed import algorithms as registered_algorithms
    from domainbed import datasets as registered_datasets

    check_names("--algorithms", "algorithm", algorithms, registered_algorithms.ALGORITHMS)
    check_names("--datasets", "dataset", datasets, registered_datasets.DATASETS)
    for algorithm, dataset in itertools.product(algorithms, datasets):
        try:
            checked_run(algorithm, dataset, hparams)
        except UserError as error:
            raise UserError(f"--hparams: {error}") from None
    one_job = {"n_hparams": 1, "n_trials": 1, "single_test_envs": True, "hparams": dict(hparams)}
    config = SweepConfig(Path(os.devnull), tuple(algorithms), tuple(datasets), **one_job)
    return _jobs_of(config, counted=False)
