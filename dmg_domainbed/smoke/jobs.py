"""The jobs the smoke check runs: for each algorithm and dataset, the sweep's job with the largest
batch (the one that needs the most memory), with the arguments DomainBed's sweep gives it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep import plan
from dmg_domainbed.sweep.config import SweepConfig, check_against_domainbed


@dataclass(frozen=True)
class SmokeJob:
    """One algorithm on one dataset, standing for the sweep's jobs of that pair."""

    algorithm: str
    dataset: str
    train_args: Mapping[str, Any]  # DomainBed's train arguments of the job it stands for
    hparams: Mapping[str, Any]  # the hparams that job trains with, as train.py computes them
    fixed_hparams: Mapping[str, Any]  # the sweep's fixed hparams of the algorithm
    sweep_jobs: int | None  # the sweep's jobs of this algorithm and dataset (None: no sweep)
    steps_per_job: int

    @property
    def batch_size(self) -> int:
        return int(self.hparams["batch_size"])

    @property
    def batch(self) -> str:
        """Examples per step: source domains x batch size per domain."""
        from domainbed import datasets

        environments = len(datasets.get_dataset_class(self.dataset).ENVIRONMENTS)
        return f"{environments - len(self.train_args['test_envs'])}x{self.batch_size}"


def job_hparams(train_args: Mapping[str, Any]) -> dict[str, Any]:
    """The hparams train.py trains a job with: the defaults for hparams seed 0, else the random
    search's draw, updated with the job's ``--hparams``."""
    from domainbed import hparams_registry
    from domainbed.lib import misc

    algorithm, dataset = train_args["algorithm"], train_args["dataset"]
    if train_args["hparams_seed"] == 0:
        hparams = hparams_registry.default_hparams(algorithm, dataset)
    else:
        seed = misc.seed_hash(train_args["hparams_seed"], train_args["trial_seed"])
        hparams = hparams_registry.random_hparams(algorithm, dataset, seed)
    hparams.update(json.loads(train_args.get("hparams") or "{}"))
    return hparams


def _jobs_of(config: SweepConfig, counted: bool) -> list[SmokeJob]:
    from domainbed import datasets

    # DomainBed's Job only asks whether its folder exists; none does under os.devnull.
    sweep = plan.Sweep(config, data_dir=os.devnull, output_dir=os.devnull)
    pairs: dict[tuple[str, str], list[tuple[Mapping, dict]]] = {}
    for group in sweep.groups:
        for job in plan.jobs(sweep, group):
            args = job.train_args
            pair = pairs.setdefault((args["algorithm"], args["dataset"]), [])
            pair.append((args, job_hparams(args)))
    smoke_jobs = []
    for dataset in config.datasets:
        for algorithm in config.algorithms:
            candidates = pairs[(algorithm, dataset)]
            train_args, hparams = max(candidates, key=lambda job: job[1]["batch_size"])
            smoke_jobs.append(
                SmokeJob(
                    algorithm,
                    dataset,
                    train_args,
                    hparams,
                    fixed_hparams=config.hparams_of(algorithm),
                    sweep_jobs=len(candidates) if counted else None,
                    steps_per_job=config.steps or datasets.get_dataset_class(dataset).N_STEPS,
                )
            )
    return smoke_jobs


def _narrow(given: Sequence[str] | None, available: Sequence[str], kind: str, path: Path):
    unknown = [name for name in given or () if name not in available]
    if unknown:
        raise UserError(
            f"{kind} {', '.join(unknown)} not in {path}; its {kind}: {', '.join(available)}"
        )
    return tuple(name for name in available if not given or name in given)


def from_sweep(
    config: SweepConfig, algorithms: Sequence[str] | None, datasets: Sequence[str] | None
) -> list[SmokeJob]:
    """The smoke jobs of a sweep file, narrowed to some of its algorithms and datasets."""
    check_against_domainbed(config)
    config = replace(
        config,
        algorithms=_narrow(algorithms, config.algorithms, "algorithms", config.path),
        datasets=_narrow(datasets, config.datasets, "datasets", config.path),
    )
    return _jobs_of(config, counted=True)


def from_command_line(
    algorithms: Sequence[str], datasets: Sequence[str], hparams: Mapping[str, Any]
) -> list[SmokeJob]:
    """The smoke jobs of algorithms and datasets named on the command line: default hparams
    updated with ``hparams``, test domain 0, as ``train.py`` runs without more arguments."""
    import dmg_domainbed
    from dmg_domainbed.preflight.hparams import effective_hparams

    dmg_domainbed.register()
    from domainbed import algorithms as registered_algorithms
    from domainbed import datasets as registered_datasets

    for kind, given, valid in (
        ("algorithm", algorithms, registered_algorithms.ALGORITHMS),
        ("dataset", datasets, registered_datasets.DATASETS),
    ):
        unknown = [name for name in given if name not in valid]
        if unknown:
            raise UserError(
                f"unknown {kind}(s) {', '.join(unknown)}; valid {kind}s: {', '.join(valid)}"
            )
    for algorithm in algorithms:
        for dataset in datasets:
            try:
                effective_hparams(algorithm, dataset, hparams)
            except UserError as error:
                raise UserError(f"--hparams: {error}") from None
    config = SweepConfig(
        path=Path(os.devnull),
        algorithms=tuple(algorithms),
        datasets=tuple(datasets),
        n_hparams=1,
        n_trials=1,
        single_test_envs=True,
        hparams=dict(hparams),
    )
    return _jobs_of(config, counted=False)
