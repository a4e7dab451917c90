"""The sweep's checks, one pass before any job is made, each question asked of every
(algorithm, dataset) before the next (the order is docs/contributing.md's): names and job count,
hparams (fixed, then every job's draw), networks, then this machine (data, weights, the output
folder, ``python``, the launcher). A mistake in the file raises :class:`UserError`; the
machine's problems come back as one, every one listed, for a dry run to show and a launch to
refuse."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dmg_domainbed.datasets.check.data_check import Batch, check_sweep_output_dir
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.names import UnknownHparams
from dmg_domainbed.launchers.common import as_launcher
from dmg_domainbed.preflight.hparams import CheckedRun, checked_run
from dmg_domainbed.preflight.networks import check_network
from dmg_domainbed.preflight.requirements import data_problems, weight_problems
from dmg_domainbed.shortlist import shortlist
from dmg_domainbed.sweep.config import Sweep, SweepConfig
from dmg_domainbed.sweep.launcher_settings import launcher_environment
from dmg_domainbed.sweep.plan import draws, job_count

#: The most jobs a sweep plans at once: DomainBed makes each in memory before it launches one.
MAX_JOBS = 100_000


@dataclass(frozen=True)
class Checked:
    """``notes`` to show, the launcher's ``env``, and either ``launcher`` (how it will run the
    jobs) or ``problem`` (what would stop them on this machine)."""

    notes: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    launcher: str | None = None
    problem: UserError | None = None


def check_sweep(sweep: Sweep, environ: Mapping[str, str]) -> Checked:
    """The whole pass, in the launcher's environment (the file's settings over ``environ``);
    the machine only when the sweep names a launcher."""
    env, launcher_notes = environ, []
    if sweep.launcher is not None:
        config = sweep.config
        env, launcher_notes = launcher_environment(
            config.path, sweep.launcher, environ, config.launcher, config.launcher_options
        )
    runs, notes = check_file(sweep.config)
    notes += tuple(launcher_notes)
    if sweep.launcher is None:
        return Checked(notes, env)
    try:
        return Checked(notes, env, launcher=check_machine(sweep, env, runs.values()))
    except UserError as problem:
        return Checked(notes, env, problem=problem)


def check_machine(sweep: Sweep, env: Mapping[str, str], runs: Iterable[CheckedRun]) -> str:
    """This machine: each dataset's files once (for the largest batch of its jobs), each run's
    weights, the output folder, ``python``, the launcher; one :class:`UserError` listing every
    problem, or how the launcher will run the jobs."""
    from domainbed import command_launchers

    runs, missing, problems = list(runs), {}, []
    for dataset in dict.fromkeys(run.dataset for run in runs):  # each dataset's files once
        its_runs = [run for run in runs if run.dataset == dataset]
        widest = max(its_runs, key=lambda run: run.largest_batch)
        fixed = "batch_size" in sweep.config.hparams_of(widest.algorithm)
        source = f"the largest that the sweep's jobs of {widest.algorithm} draw"
        source = "fixed by the sweep's hparams" if fixed else source
        batch = Batch(widest.largest_batch, float(sweep.config.holdout_fraction), source)
        missing |= dict.fromkeys(data_problems(dataset, sweep.data_dir, batch))
        for run in its_runs:
            missing |= dict.fromkeys(weight_problems(run))
    try:
        check_sweep_output_dir(Path(sweep.output_dir), sweep.data_dir, "the sweep's output_dir")
    except UserError as error:
        problems.append(str(error))
    if shutil.which("python", path=env.get("PATH")) is None:
        problems.append(
            "no `python` on PATH: DomainBed's sweep starts every job as "
            "`python -m domainbed.scripts.train`. Activate the environment that has "
            "DomainBed and this package, or put its python first on PATH."
        )
    if missing:
        problems.append(
            "the jobs would fail before their first step:\n  " + "\n  ".join(missing) + "\n"
            "Fix each as it says, then run the sweep again."
        )
    launcher, described = sweep.launcher, None
    try:
        described = as_launcher(command_launchers.REGISTRY[launcher]).check(env)
    except UserError as error:
        problems.append(f"launcher {launcher}: {error}")
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        listed = "\n".join(f"{i}. {problem}" for i, problem in enumerate(problems, 1))
        raise UserError(f"{len(problems)} problems:\n{listed}")
    return f"{launcher}: {described}" if described else launcher


def check_file(config: SweepConfig) -> tuple[dict[tuple[str, str], CheckedRun], tuple[str, ...]]:
    """The file's checks: the run of each (algorithm, dataset) and the notes."""
    import dmg_domainbed
    from dmg_domainbed import averaging
    from dmg_domainbed.algorithms.base import PluginAlgorithm

    dmg_domainbed.register()
    from domainbed import algorithms, datasets

    check_names(str(config.path), "algorithm", config.algorithms, algorithms.ALGORITHMS)
    check_names(str(config.path), "dataset", config.datasets, datasets.DATASETS)
    check_manifests(config)
    jobs = job_count(config)
    if jobs > MAX_JOBS:
        raise UserError(
            f"{config.path}: the sweep has {jobs:,} jobs, more than the {MAX_JOBS:,} planned at "
            "once (DomainBed makes every job in memory before it launches one): lower n_hparams "
            "or n_trials, or run it in parts with n_hparams_from and n_hparams"
        )
    runs = {}
    for algorithm, dataset in itertools.product(config.algorithms, config.datasets):
        # The common hparams alone first, so that a mistake in them is told as theirs.
        tables = {
            "[sweep.hparams]": config.hparams,
            f"[sweep.algorithm_hparams.{algorithm}]": config.hparams_of(algorithm),
        }
        for where, fixed in tables.items():
            try:
                runs[(algorithm, dataset)] = checked_run(algorithm, dataset, fixed)
            except UserError as error:
                message = f"{config.path}: {where}: {error}"
                if fixed is config.hparams and isinstance(error, UnknownHparams):
                    # names only some of the sweep's algorithms have
                    others = ", ".join(repr(n) for n in config.hparams if n in error.names)
                    message = (
                        f"{message.rstrip('.')}. [sweep.hparams] applies to every algorithm: "
                        f"move {others} to [sweep.algorithm_hparams.NAME] of the algorithms "
                        "that have it"
                    )
                raise UserError(message) from None
    largest = check_draws(config, jobs)
    runs = {pair: replace(run, largest_batch=largest[pair]) for pair, run in runs.items()}
    for run in runs.values():
        steps = config.steps or datasets.get_dataset_class(run.dataset).N_STEPS
        try:
            averaging.check_run_length(run.hparams, steps, run.algorithm)
        except UserError as error:
            raise UserError(f"{config.path}: {run.algorithm} on {run.dataset}: {error}") from None
    notes = []
    for run in runs.values():
        if issubclass(algorithms.get_algorithm_class(run.algorithm), PluginAlgorithm):
            try:
                notes.append(check_network(run))
            except UserError as error:
                where = f"{run.algorithm}'s network on {run.dataset}"
                raise UserError(f"{config.path}: {where}: {error}") from None
    return runs, tuple(note for note in notes if note)


def check_manifests(config: SweepConfig) -> None:
    """:class:`UserError` when a dataset of the sweep is the name of a manifest that is not
    the one registered (a second of that name, or DomainBed's or a plugin's name)."""
    from domainbed import datasets

    from dmg_domainbed import integration
    from dmg_domainbed.datasets.manifest import NameTaken, read_manifests

    named, unusable = read_manifests(os.environ)
    problems = [str(p) for p in unusable if isinstance(p, NameTaken) and p.name in config.datasets]
    problems += [
        refusal
        for manifest in named
        if manifest.name in config.datasets
        and (refusal := integration.manifest_refusal(datasets, manifest))
    ]
    if problems:
        raise UserError(
            f"{config.path}: a dataset of the sweep is the name of a manifest in "
            "DMG_DOMAINBED_DATASETS that is not registered, so the jobs may not train on the "
            "files meant (`dmg-domainbed data check` calls it an error too):\n  "
            + "\n  ".join(problems)
            + "\nRename that manifest, or take it out of DMG_DOMAINBED_DATASETS"
        )


#: How many refused jobs a message names before it says how many more there are.
NAMED_JOBS = 5


def check_draws(config: SweepConfig, jobs: int) -> dict[tuple[str, str], int]:
    """Every job's hparams (:func:`.plan.draws`) through its algorithm's ``check_hparams``:
    :class:`UserError` naming the jobs (of ``jobs``) drawn a value refused. Returns each
    (algorithm, dataset)'s largest batch."""
    from domainbed import algorithms

    from dmg_domainbed.algorithms.base import PluginAlgorithm

    refused, count, largest = [], 0, {}
    for algorithm, dataset, hparams_seed, trial_seed, hparams in draws(config):
        pair = (algorithm, dataset)
        largest[pair] = max(largest.get(pair, 0), hparams["batch_size"])
        cls = algorithms.get_algorithm_class(algorithm)
        if not issubclass(cls, PluginAlgorithm):
            continue  # DomainBed's algorithms, and other packages', check no values
        try:
            cls.check_hparams(hparams)
        except UserError as error:
            one = {"algorithms": (algorithm,), "datasets": (dataset,), "n_hparams_from": 0}
            per_draw = job_count(replace(config, **one, n_hparams=1, n_trials=1))
            count += per_draw
            problem = str(error).partition(". Fix ")[0].rstrip(".")
            refused.append(
                f"{algorithm} on {dataset}, hparams_seed {hparams_seed}, trial_seed "
                f"{trial_seed} ({per_draw} jobs, one per choice of test domains): {problem}"
            )
    if refused:
        raise UserError(
            f"{config.path}: {count:,} of the sweep's {jobs:,} jobs would stop at their start: "
            "the hparams DomainBed's random search draws for them are values their algorithm "
            "refuses:\n  "
            + shortlist(refused, NAMED_JOBS, "\n  ", "\n  and ")
            + "\nFix the hparam's value for every job in [sweep.algorithm_hparams.NAME] of the "
            "file (a fixed value replaces the drawn one), or make the algorithm's sampler draw "
            "within the range it allows"
        )
    return largest


def check_names(source: str, kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    """:class:`UserError` naming those of ``given`` (in ``source``) not ``valid``."""
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise UserError(
            f"{source}: unknown {kind}(s) {', '.join(unknown)}; valid {kind}s: {', '.join(valid)}"
        )
