"""From a checked sweep file to DomainBed's own job list.

DomainBed passes one ``--hparams`` to every job of a sweep, so the algorithms of a sweep file
are grouped by their fixed hparams and each group is launched on its own, into the same output
folder. DomainBed's ``make_args_list`` and ``Job`` make the jobs, so job folders, their hashes
and ``done`` files are exactly those of ``python -m domainbed.scripts.sweep``; the ``train.py``
arguments its sweep script cannot pass (``checkpoint_freq``, ``save_model_every_checkpoint``)
are added to every job's arguments, and so to its hash.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tabulate import tabulate

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep.config import SweepConfig


@dataclass(frozen=True)
class Group:
    """Algorithms whose jobs share the same fixed hparams (one launch)."""

    algorithms: tuple[str, ...]
    hparams: Mapping[str, Any]

    @property
    def hparams_json(self) -> str | None:
        """The ``--hparams`` of each job; sorted keys keep the job hashes stable."""
        return json.dumps(dict(self.hparams), sort_keys=True) if self.hparams else None


@dataclass(frozen=True)
class Sweep:
    """A sweep file with its folders resolved to absolute paths."""

    config: SweepConfig
    data_dir: str
    output_dir: str

    @functools.cached_property
    def groups(self) -> list[Group]:
        """The algorithms grouped by their fixed hparams: with a fixed number of steps, those an
        algorithm sizes for the run's length (e.g. ImportanceMask's phase schedule), then the
        file's common hparams, then its own; later ones win."""
        from domainbed import algorithms

        from dmg_domainbed.algorithms.base import declarations_of

        by_hparams: dict[str, list[str]] = {}
        for algorithm in self.config.algorithms:
            sized = {}
            if self.config.steps is not None and algorithm in algorithms.ALGORITHMS:
                cls = algorithms.get_algorithm_class(algorithm)
                sized = declarations_of(cls).run_length_hparams(self.config.steps)
            fixed = {**sized, **self.config.hparams_of(algorithm)}
            by_hparams.setdefault(json.dumps(fixed, sort_keys=True), []).append(algorithm)
        return [Group(tuple(names), json.loads(key)) for key, names in by_hparams.items()]


def resolve(config: SweepConfig, data_dir: str | None, output_dir: str | None) -> Sweep:
    """Command-line folders win over the file's; both are made absolute."""
    dirs = {"data_dir": data_dir or config.data_dir, "output_dir": output_dir or config.output_dir}
    for key, value in dirs.items():
        if value is None:
            raise UserError(
                f'{config.path}: no {key}: set {key} = "..." in [sweep] or pass --{key} DIR'
            )
    return Sweep(config, **{k: os.path.abspath(os.path.expanduser(v)) for k, v in dirs.items()})


def jobs(sweep: Sweep, group: Group) -> list[Any]:
    """DomainBed's ``Job`` objects of one group, as its sweep script builds them."""
    from domainbed.scripts import sweep as domainbed_sweep

    config = sweep.config
    args_list = domainbed_sweep.make_args_list(
        n_trials=config.n_trials,
        dataset_names=list(config.datasets),
        algorithms=list(group.algorithms),
        n_hparams_from=config.n_hparams_from,
        n_hparams=config.n_hparams,
        steps=config.steps,
        data_dir=sweep.data_dir,
        task=config.task,
        holdout_fraction=float(config.holdout_fraction),
        single_test_envs=config.single_test_envs,
        hparams=group.hparams_json,
    )
    for train_args in args_list:
        if config.checkpoint_freq is not None:
            train_args["checkpoint_freq"] = config.checkpoint_freq
        if config.save_model_every_checkpoint:
            # A switch without a value: DomainBed's Job writes a list as its items joined by
            # spaces, so an empty list leaves the bare flag that train.py's store_true expects.
            train_args["save_model_every_checkpoint"] = []
    return [domainbed_sweep.Job(train_args, sweep.output_dir) for train_args in args_list]


def describe_job(job) -> str:
    """``<algorithm>, test domain <names> of <dataset>, hparams <i>, trial <j>``."""
    from domainbed import datasets

    args = job.train_args
    names = datasets.get_dataset_class(args["dataset"]).ENVIRONMENTS
    held_out = ", ".join(names[e] for e in args["test_envs"])
    return (
        f"{args['algorithm']}, test domain {held_out} of {args['dataset']}, "
        f"hparams {args['hparams_seed']}, trial {args['trial_seed']}"
    )


def summary(sweep: Sweep, jobs_by_group: Sequence[tuple[Group, Sequence[Any]]]) -> str:
    """What the sweep holds: jobs per dataset and algorithm, their states, the fixed hparams."""
    from domainbed.scripts.sweep import Job

    config = sweep.config
    all_jobs = [job for _, group_jobs in jobs_by_group for job in group_jobs]
    counts = Counter(job.state for job in all_jobs)
    lines = [
        f"Sweep {config.path}: {len(all_jobs)} job(s): {counts[Job.NOT_LAUNCHED]} to launch, "
        f"{counts[Job.DONE]} done, {counts[Job.INCOMPLETE]} incomplete",
        f"  output_dir: {sweep.output_dir}",
        f"  data_dir:   {sweep.data_dir}",
        f"  per dataset and algorithm: {config.n_hparams - config.n_hparams_from} hparams "
        f"seed(s) x {config.n_trials} trial(s) x test envs "
        f"({'one at a time' if config.single_test_envs else 'every 1 and 2'}), "
        f"{config.steps or 'dataset default'} steps"
        + (f", a checkpoint every {config.checkpoint_freq}" if config.checkpoint_freq else "")
        + (", every checkpoint's model saved" if config.save_model_every_checkpoint else ""),
    ]
    rows = Counter(
        (job.train_args["dataset"], job.train_args["algorithm"], job.state) for job in all_jobs
    )
    states = (Job.NOT_LAUNCHED, Job.DONE, Job.INCOMPLETE)
    table = [
        [dataset, algorithm, *(rows[(dataset, algorithm, state)] for state in states)]
        for dataset in config.datasets
        for algorithm in config.algorithms
    ]
    headers = ["dataset", "algorithm", "to launch", "done", "incomplete"]
    lines += ["    " + line for line in tabulate(table, headers).splitlines()]
    for group, _ in jobs_by_group:
        fixed = group.hparams_json or "none (DomainBed's defaults and random search)"
        lines.append(f"  fixed hparams of {', '.join(group.algorithms)}: {fixed}")
    return "\n".join(lines)
