"""From a checked sweep file to DomainBed's own sweep commands and job list.

DomainBed's sweep script passes one ``--hparams`` to every job, so the algorithms of a sweep file
are grouped by their fixed hparams and each group becomes one
``python -m domainbed.scripts.sweep launch`` into the same output folder. Job folders, their
hashes and ``done`` files are DomainBed's: the job list here comes from DomainBed's own
``make_args_list`` and ``Job``, which only look at the file system.
"""

from __future__ import annotations

import json
import os
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.sweep.config import SweepConfig


@dataclass(frozen=True)
class Group:
    """Algorithms whose jobs share the same fixed hparams (one DomainBed sweep call)."""

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

    @property
    def groups(self) -> list[Group]:
        by_hparams: dict[str, list[str]] = {}
        for algorithm in self.config.algorithms:
            key = json.dumps(self.config.hparams_of(algorithm), sort_keys=True)
            by_hparams.setdefault(key, []).append(algorithm)
        return [Group(tuple(names), json.loads(key)) for key, names in by_hparams.items()]


def resolve(config: SweepConfig, data_dir: str | None, output_dir: str | None) -> Sweep:
    """Command-line folders win over the file's; both are made absolute."""
    chosen = {
        "data_dir": data_dir or config.data_dir,
        "output_dir": output_dir or config.output_dir,
    }
    for key, value in chosen.items():
        if value is None:
            raise UserError(
                f'{config.path}: no {key}: set {key} = "..." in [sweep] or pass --{key} DIR'
            )
    return Sweep(config, **{k: os.path.abspath(os.path.expanduser(v)) for k, v in chosen.items()})


def domainbed_sweep_args(sweep: Sweep, group: Group, action: str, launcher: str) -> list[str]:
    """Arguments of ``python`` running DomainBed's sweep script for one group."""
    config = sweep.config
    args = [
        "-m",
        "domainbed.scripts.sweep",
        action,
        "--datasets",
        *config.datasets,
        "--algorithms",
        *group.algorithms,
        "--n_hparams_from",
        str(config.n_hparams_from),
        "--n_hparams",
        str(config.n_hparams),
        "--n_trials",
        str(config.n_trials),
        "--holdout_fraction",
        repr(float(config.holdout_fraction)),
        "--task",
        config.task,
        "--data_dir",
        sweep.data_dir,
        "--output_dir",
        sweep.output_dir,
        "--command_launcher",
        launcher,
        "--skip_confirmation",
    ]
    if config.steps is not None:
        args += ["--steps", str(config.steps)]
    if group.hparams_json is not None:
        args += ["--hparams", group.hparams_json]
    if config.single_test_envs:
        args.append("--single_test_envs")
    return args


def shell_line(python: str, args: Sequence[str]) -> str:
    return " ".join(shlex.quote(word) for word in [python, *args])


def jobs(sweep: Sweep, group: Group) -> list[Any]:
    """DomainBed's ``Job`` objects of one group, exactly as its sweep script builds them."""
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
    return [domainbed_sweep.Job(train_args, sweep.output_dir) for train_args in args_list]


def state_counts(all_jobs: Sequence[Any]) -> Counter:
    from domainbed.scripts.sweep import Job

    counts = Counter(job.state for job in all_jobs)
    return Counter(
        {state: counts.get(state, 0) for state in (Job.DONE, Job.INCOMPLETE, Job.NOT_LAUNCHED)}
    )


def summary(sweep: Sweep, jobs_by_group: Sequence[tuple[Group, Sequence[Any]]]) -> str:
    """What the sweep holds: jobs per dataset and algorithm, their states, the fixed hparams."""
    from domainbed.scripts.sweep import Job

    config = sweep.config
    all_jobs = [job for _, group_jobs in jobs_by_group for job in group_jobs]
    counts = state_counts(all_jobs)
    lines = [
        f"Sweep {config.path}: {len(all_jobs)} job(s): {counts[Job.NOT_LAUNCHED]} to launch, "
        f"{counts[Job.DONE]} done, {counts[Job.INCOMPLETE]} incomplete",
        f"  output_dir: {sweep.output_dir}",
        f"  data_dir:   {sweep.data_dir}",
        f"  per dataset and algorithm: {config.n_hparams - config.n_hparams_from} hparams "
        f"seed(s) x {config.n_trials} trial(s) x test envs "
        f"({'one at a time' if config.single_test_envs else 'every 1 and 2'}), "
        f"{config.steps or 'dataset default'} steps",
    ]
    width = (
        max(len(f"{job.train_args['dataset']} {job.train_args['algorithm']}") for job in all_jobs)
        if all_jobs
        else 0
    )
    rows = Counter(
        (job.train_args["dataset"], job.train_args["algorithm"], job.state) for job in all_jobs
    )
    for dataset in config.datasets:
        for algorithm in config.algorithms:
            n = {state: rows[(dataset, algorithm, state)] for state in counts}
            label = f"{dataset} {algorithm}".ljust(width)
            lines.append(
                f"    {label}  {sum(n.values()):5d} jobs  ({n[Job.NOT_LAUNCHED]} to launch, "
                f"{n[Job.DONE]} done, {n[Job.INCOMPLETE]} incomplete)"
            )
    for group, _ in jobs_by_group:
        fixed = group.hparams_json or "none (DomainBed's defaults and random search)"
        lines.append(f"  fixed hparams of {', '.join(group.algorithms)}: {fixed}")
    return "\n".join(lines)
