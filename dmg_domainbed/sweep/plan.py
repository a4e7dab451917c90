"""A sweep file's jobs: as plain data, nothing on disk looked at (:func:`groups`,
:func:`train_args`, :func:`job_count`, :func:`draws`), then as DomainBed's ``Job`` objects sorted
by the state read from their folders (:func:`plan_sweep`), cut to stage 1 or 2 by
:func:`search_once` under ``protocol = "search_once"`` (docs/sweeps.md)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tabulate import tabulate

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import DOMAINBED_PROTOCOL, PROTOCOL, SEARCH_ONCE
from dmg_domainbed.runs import RESULTS_FILE, read_records
from dmg_domainbed.sweep import cost
from dmg_domainbed.sweep.config import Sweep, SweepConfig


@dataclass(frozen=True)
class Group:
    """Algorithms whose jobs share the same fixed hparams (one launch)."""

    algorithms: tuple[str, ...]
    hparams: Mapping[str, Any]

    @property
    def hparams_json(self) -> str | None:
        """The ``--hparams`` of each job; sorted keys keep the job hashes stable."""
        return json.dumps(dict(self.hparams), sort_keys=True) if self.hparams else None


def groups(config: SweepConfig) -> list[Group]:
    """The algorithms grouped by the ``--hparams`` of their jobs (DomainBed passes one per
    sweep): those an algorithm sizes for a fixed number of steps, then the file's common
    hparams, then its own, later ones winning; a protocol other than DomainBed's as ``protocol``."""
    from domainbed import algorithms

    from dmg_domainbed.algorithms.base import declarations_of

    by_hparams: dict[str, list[str]] = {}
    for algorithm in config.algorithms:
        sized = {}
        if config.steps is not None and algorithm in algorithms.ALGORITHMS:
            cls = algorithms.get_algorithm_class(algorithm)
            sized = declarations_of(cls).run_length_hparams(config.steps)
        fixed = {**sized, **config.hparams_of(algorithm)}
        if config.protocol != DOMAINBED_PROTOCOL:
            fixed[PROTOCOL] = config.protocol
        by_hparams.setdefault(json.dumps(fixed, sort_keys=True), []).append(algorithm)
    return [Group(tuple(names), json.loads(key)) for key, names in by_hparams.items()]


def train_args(config: SweepConfig, data_dir: str, group: Group) -> list[dict[str, Any]]:
    """``train.py`` arguments of one group's jobs by DomainBed's ``make_args_list``, with those
    its sweep script cannot pass (and so in the job hashes)."""
    from domainbed.scripts.sweep import make_args_list

    args_list = make_args_list(
        n_trials=config.n_trials,
        dataset_names=list(config.datasets),
        algorithms=list(group.algorithms),
        n_hparams_from=config.n_hparams_from,
        n_hparams=config.n_hparams,
        steps=config.steps,
        data_dir=data_dir,
        task=config.task,
        holdout_fraction=float(config.holdout_fraction),
        single_test_envs=config.single_test_envs,
        hparams=group.hparams_json,
    )
    for args in args_list:
        if config.checkpoint_freq is not None:
            args["checkpoint_freq"] = config.checkpoint_freq
        if config.save_model_every_checkpoint:
            # A switch without a value: DomainBed's Job writes a list as its items joined by
            # spaces, so an empty list leaves the bare flag that train.py's store_true expects.
            args["save_model_every_checkpoint"] = []
    return args_list


def job_count(config: SweepConfig) -> int:
    """How many jobs the sweep has: those of one hparams seed and trial, times both."""
    one = replace(config, n_hparams_from=0, n_hparams=1, n_trials=1)
    per_draw = len(train_args(one, "", Group(config.algorithms, {})))
    return per_draw * (config.n_hparams - config.n_hparams_from) * config.n_trials


def draws(config: SweepConfig) -> Iterator[tuple[str, str, int, int, dict[str, Any]]]:
    """(algorithm, dataset, hparams seed, trial seed, hparams by ``train.py``'s rule) of every
    job, one for the jobs that differ only in their test domains."""
    from dmg_domainbed.hparams.of_job import job_hparams

    for group in groups(config):
        for algorithm, dataset in itertools.product(group.algorithms, config.datasets):
            for seed in range(config.n_hparams_from, config.n_hparams):
                for trial in range(config.n_trials):
                    hparams = job_hparams(algorithm, dataset, seed, trial, group.hparams)
                    yield algorithm, dataset, seed, trial, hparams


def jobs(sweep: Sweep, group: Group) -> list[Any]:
    """DomainBed's ``Job`` objects of one group, as its sweep script builds them."""
    from domainbed.scripts.sweep import Job

    return [Job(args, sweep.output_dir) for args in train_args(sweep.config, sweep.data_dir, group)]


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


@dataclass(frozen=True)
class Plan:
    """A sweep's jobs, group by group, and their states when made: ``to_launch`` (no folder),
    ``incomplete`` (no ``done`` file) and ``done``."""

    sweep: Sweep
    jobs_by_group: tuple[tuple[Group, tuple[Any, ...]], ...]
    to_launch: tuple[Any, ...]
    incomplete: tuple[Any, ...]
    done: tuple[Any, ...]
    #: search_once while stage 1 is not done: its jobs not done yet, and stage 2's stand-ins
    #: (train.py arguments, one per algorithm, dataset, test domain and trial) for the cost.
    stage_one_unfinished: tuple[Any, ...] = ()
    stage_two_stand_ins: tuple[Mapping[str, Any], ...] = ()

    @property
    def jobs(self) -> list[Any]:
        """Every job, every group's in turn."""
        return [job for _, group_jobs in self.jobs_by_group for job in group_jobs]

    @property
    def unfinished(self) -> list[Any]:
        """The jobs without a ``done`` file: those a launch may start."""
        return [*self.to_launch, *self.incomplete]

    def summary(self) -> str:
        """Jobs per dataset and algorithm, their states, the fixed hparams."""
        config = self.sweep.config
        lines = [
            f"Sweep {config.path}: {len(self.jobs)} job(s): {len(self.to_launch)} to launch, "
            f"{len(self.done)} done, {len(self.incomplete)} incomplete",
            f"  output_dir: {self.sweep.output_dir}",
            f"  data_dir:   {self.sweep.data_dir}",
            f"  per dataset and algorithm: {config.n_hparams - config.n_hparams_from} hparams "
            f"seed(s) x {config.n_trials} trial(s) x test envs "
            f"({'one at a time' if config.single_test_envs else 'every 1 and 2'}), "
            f"{config.steps or 'dataset default'} steps"
            + (f", a checkpoint every {config.checkpoint_freq}" if config.checkpoint_freq else "")
            + (", every checkpoint's model saved" if config.save_model_every_checkpoint else ""),
        ]
        counts = [
            Counter((job.train_args["dataset"], job.train_args["algorithm"]) for job in jobs)
            for jobs in (self.to_launch, self.done, self.incomplete)
        ]
        table = [
            [dataset, algorithm, *(count[(dataset, algorithm)] for count in counts)]
            for dataset in config.datasets
            for algorithm in config.algorithms
        ]
        headers = ["dataset", "algorithm", "to launch", "done", "incomplete"]
        lines += ["    " + line for line in tabulate(table, headers).splitlines()]
        for group, _ in self.jobs_by_group:
            fixed = group.hparams_json or "none (DomainBed's defaults and random search)"
            lines.append(f"  fixed hparams of {', '.join(group.algorithms)}: {fixed}")
        if config.protocol == SEARCH_ONCE:
            lines += self.stages()
        return "\n".join(lines)

    def stages(self) -> list[str]:
        """search_once's two stages: their jobs, and whether stage 2 waits for stage 1."""
        first = [job for job in self.jobs if job.train_args["trial_seed"] == 0]
        done = sum(job in self.done for job in first)
        lines = [
            f"  protocol search_once: stage 1 (trial 0, every hparams seed): {len(first)} job(s), "
            f"{done} done"
        ]
        trials = self.sweep.config.n_trials
        if trials == 1:
            return [*lines, "  stage 2: none (n_trials = 1)"]
        later = f"trials 1..{trials - 1}, each winner's hparams seed"
        if self.stage_one_unfinished:
            return [
                *lines,
                f"  stage 2 ({later}): {len(self.stage_two_stand_ins)} job(s), not launched "
                f"while stage 1 is incomplete ({len(self.stage_one_unfinished)} of its jobs are "
                "not done); run this command again once they are",
            ]
        second = len(self.jobs) - len(first)
        return [*lines, f"  stage 2 ({later}, chosen on stage 1): {second} job(s)"]


def plan_sweep(sweep: Sweep) -> Plan:
    """The sweep's jobs sorted by the state DomainBed reads from each job's folder."""
    from domainbed.scripts.sweep import Job

    jobs_by_group = tuple((group, tuple(jobs(sweep, group))) for group in groups(sweep.config))
    unfinished, stand_ins = (), ()
    if sweep.config.protocol == SEARCH_ONCE:
        jobs_by_group, unfinished, stand_ins = search_once(jobs_by_group)
    every = [job for _, group_jobs in jobs_by_group for job in group_jobs]
    states = (Job.NOT_LAUNCHED, Job.INCOMPLETE, Job.DONE)  # to_launch, incomplete, done
    in_state = [tuple(job for job in every if job.state == state) for state in states]
    return Plan(sweep, jobs_by_group, *in_state, unfinished, stand_ins)


def _cell(job) -> tuple[str, str, tuple[int, ...]]:
    args = job.train_args
    return args["algorithm"], args["dataset"], tuple(args["test_envs"])


def search_once(jobs_by_group):
    """The jobs cut to stage 1 (trial 0) and, once it is done, each cell's jobs of the other
    trials with its winning hparams seed; also stage 1's jobs not done and, while there are
    some, stage 2's stand-ins for the cost: the first job of each (cell, trial)."""
    from domainbed.scripts.sweep import Job

    def first(job) -> bool:
        return job.train_args["trial_seed"] == 0

    every = [job for _, group_jobs in jobs_by_group for job in group_jobs]
    unfinished = tuple(job for job in every if first(job) and job.state != Job.DONE)
    if unfinished:
        stand_ins = {}
        for job in every:
            if not first(job):
                stand_ins.setdefault((_cell(job), job.train_args["trial_seed"]), job.train_args)
        cut = tuple((g, tuple(filter(first, group_jobs))) for g, group_jobs in jobs_by_group)
        return cut, unfinished, tuple(stand_ins.values())
    winners = winning_seeds([job for job in every if first(job)])

    def kept(job) -> bool:
        return first(job) or job.train_args["hparams_seed"] == winners[_cell(job)]

    cut = tuple((g, tuple(filter(kept, group_jobs))) for g, group_jobs in jobs_by_group)
    return cut, (), ()


def winning_seeds(stage_one: Sequence[Any]) -> dict[tuple[str, str, tuple[int, ...]], int]:
    """(algorithm, dataset, test envs) -> the hparams seed of its stage-1 jobs that DomainBed's
    training-domain validation (``IIDAccuracySelectionMethod``) ranks first."""
    from domainbed import model_selection
    from domainbed.lib.query import Q

    by_cell: dict[tuple[str, str, tuple[int, ...]], list[dict[str, Any]]] = {}
    for job in stage_one:
        path = Path(job.output_dir) / RESULTS_FILE
        by_cell.setdefault(_cell(job), []).extend(read_records(path) if path.exists() else [])
    winners = {}
    for cell, records in by_cell.items():
        ranked = model_selection.IIDAccuracySelectionMethod.hparams_accs(Q(records))
        if not len(ranked):
            algorithm, dataset, envs = cell
            raise UserError(
                f"stage 1 of {algorithm} on {dataset}, test envs {list(envs)}, is done but its "
                "jobs wrote no record to select hparams by; delete their folders and run the "
                "sweep again"
            )
        winners[cell] = ranked[0][1][0]["args"]["hparams_seed"]
    return winners


def dataset_images(dataset: str) -> int | None:
    """Every image of ``dataset`` (the download's published count, MNIST's files, the class's
    ``N_IMAGES``); ``None`` where only its files tell (a manifest's)."""
    from domainbed import datasets

    from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS, MNIST_DATASETS, MNIST_IMAGES

    if dataset in IMAGE_LAYOUTS and IMAGE_LAYOUTS[dataset].releases:
        return IMAGE_LAYOUTS[dataset].releases[0].total
    if dataset in MNIST_DATASETS:
        return sum(images for images, _ in MNIST_IMAGES.values())
    return getattr(datasets.get_dataset_class(dataset), "N_IMAGES", None)


def job_costs(jobs: Sequence[Mapping[str, Any]], jobs_per_gpu: int = 1) -> list[cost.JobCost]:
    """The :class:`~.cost.JobCost` of each job's ``train.py`` arguments."""
    from domainbed import datasets as registered

    from dmg_domainbed.datasets import input_shape
    from dmg_domainbed.hparams.of_job import job_hparams
    from dmg_domainbed.preflight.requirements import algorithm_weights

    facts, shapes, own, drawn, costs = {}, {}, {}, {}, []
    for args in jobs:
        algorithm, dataset = args["algorithm"], args["dataset"]
        if dataset not in facts:
            cls = registered.get_dataset_class(dataset)
            facts[dataset] = cost.DatasetFacts(
                len(cls.ENVIRONMENTS), cls.N_STEPS, cls.CHECKPOINT_FREQ, dataset_images(dataset)
            )
            shapes[dataset] = input_shape(dataset)
        # one draw per hparams and trial seed: the jobs of its choices of test domains share it
        draw = (algorithm, dataset, args["hparams_seed"], args["trial_seed"], args.get("hparams"))
        if draw not in drawn:
            drawn[draw] = job_hparams(*draw[:4], json.loads(draw[4] or "{}"))
        hparams = drawn[draw]
        job_cost = cost.job_cost(args, hparams, facts[dataset], shapes[dataset], jobs_per_gpu)
        if algorithm not in own:  # an algorithm that loads its own weights builds its network
            own[algorithm] = algorithm_weights(algorithm, hparams) is not None
        if own[algorithm]:
            job_cost = replace(job_cost, network=f"{algorithm}'s own network")
        costs.append(job_cost)
    return costs
