"""The sweep's checks: one pass over a resolved sweep, before any job is made.

The pass (:func:`check_sweep`) reads a resolved :class:`~dmg_domainbed.sweep.config.Sweep` and
asks, in this order:

1. the names: its algorithms and datasets are registered in DomainBed (this package's plugins
   included), and its jobs are few enough to plan (:data:`MAX_JOBS`);
2. the hparams: for each algorithm and dataset, the file's common hparams alone, then the
   algorithm's fixed ones, are names it has and values it can train on
   (:func:`~dmg_domainbed.preflight.hparams.effective_hparams`, once each);
3. the networks: each of this package's algorithms is built cheaply with those hparams
   (:func:`~dmg_domainbed.preflight.networks.check_network`), so that a value only its network
   can refute stops the sweep here;
4. this machine: the output folder can be made and lies outside every dataset's folder
   (:func:`check_output_dir`), ``python`` is on the launcher's ``PATH``, the
   data and the pretrained weights are there (:func:`~dmg_domainbed.preflight.requirements.
   missing_for`, on the hparams of step 2) and the launcher's own ``check(environ)`` passes.

Steps 1 to 3 are mistakes in the file and raise :class:`UserError`. Step 4 depends on the
machine: its problem is returned, so that a dry run can show it and a launch refuse it. What a
run needs on disk is asked of :mod:`dmg_domainbed.preflight`, which ``doctor`` and ``smoke`` ask
too, so that all three name the same path and the same fix.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.datacheck.batch_fit import sweep_batch
from dmg_domainbed.datacheck.data_check import dataset_folders, registered_manifests
from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import check_creatable, check_outside
from dmg_domainbed.launchers.common import as_launcher
from dmg_domainbed.preflight.hparams import effective_hparams
from dmg_domainbed.preflight.networks import check_network
from dmg_domainbed.preflight.requirements import missing_for
from dmg_domainbed.sweep.config import Sweep, SweepConfig

#: The most jobs a sweep plans at once: DomainBed's ``make_args_list`` and ``Job`` make each in
#: memory (a dict, a command line, an md5 hash, two folder look-ups) before any is launched.
MAX_JOBS = 100_000


@dataclass(frozen=True)
class Checked:
    """What the pass found: ``hparams`` of each (algorithm, dataset) run with hparams seed 0,
    ``notes`` on networks that could not be built before launch, and, for this machine, either
    ``launcher`` (how the launcher will run the jobs) or ``problem`` (what would stop them)."""

    hparams: Mapping[tuple[str, str], Mapping[str, Any]]
    notes: tuple[str, ...] = ()
    launcher: str | None = None
    problem: UserError | None = None


def check_sweep(sweep: Sweep, env: Mapping[str, str]) -> Checked:
    """The whole pass; ``env``: the environment the launcher will run the jobs with. The
    machine is checked only when the sweep names a launcher."""
    hparams, notes = check_file(sweep.config)
    if sweep.launcher is None:
        return Checked(hparams, notes)
    try:
        launcher = check_ready(sweep, env, hparams)
    except UserError as problem:
        return Checked(hparams, notes, problem=problem)
    return Checked(hparams, notes, launcher=launcher)


def check_against_domainbed(config: SweepConfig) -> list[str]:
    """Steps 1 to 3 for a sweep's content alone: :class:`UserError` for a name DomainBed does
    not know, an hparam its algorithm lacks or cannot train on, or a network that refutes it;
    returns notes on networks that could not be built."""
    return list(check_file(config)[1])


def check_file(
    config: SweepConfig,
) -> tuple[dict[tuple[str, str], dict[str, Any]], tuple[str, ...]]:
    """Steps 1 to 3: the hparams of each (algorithm, dataset) run and the notes."""
    import dmg_domainbed
    from dmg_domainbed.algorithms.base import PluginAlgorithm
    from dmg_domainbed.datasets import input_shape
    from dmg_domainbed.hparams.names import known_names

    dmg_domainbed.register()
    from domainbed import algorithms, datasets

    for kind, given, valid in (
        ("algorithm", config.algorithms, algorithms.ALGORITHMS),
        ("dataset", config.datasets, datasets.DATASETS),
    ):
        check_names(str(config.path), kind, given, valid)
    jobs = job_count(config, [datasets.num_environments(name) for name in config.datasets])
    if jobs > MAX_JOBS:
        raise UserError(
            f"{config.path}: the sweep has {jobs:,} jobs, more than the {MAX_JOBS:,} planned at "
            "once (DomainBed makes every job in memory before it launches one): lower n_hparams "
            "or n_trials, or run it in parts with n_hparams_from and n_hparams"
        )
    runs, notes = {}, []
    for algorithm, dataset in itertools.product(config.algorithms, config.datasets):
        try:
            effective_hparams(algorithm, dataset, config.hparams)
        except UserError as error:
            message = f"{config.path}: [sweep.hparams]: {error}"
            # names this algorithm's run on this dataset does not know (the names rule)
            known = known_names(
                algorithms.get_algorithm_class(algorithm),
                datasets.get_dataset_class(dataset),
                input_shape(dataset),
            )
            others = [repr(n) for n in config.hparams if n not in known]
            if others:  # a name only some of the sweep's algorithms have
                message = (
                    f"{message.rstrip('.')}. [sweep.hparams] applies to every algorithm: move "
                    f"{', '.join(others)} to [sweep.algorithm_hparams.NAME] of the algorithms "
                    "that have it"
                )
            raise UserError(message) from None
        where = f"[sweep.algorithm_hparams.{algorithm}]"
        try:
            hparams = effective_hparams(algorithm, dataset, config.fixed_hparams[algorithm])
            if issubclass(algorithms.get_algorithm_class(algorithm), PluginAlgorithm):
                where = f"{algorithm}'s network on {dataset}"
                notes.append(check_network(algorithm, dataset, hparams))
        except UserError as error:
            raise UserError(f"{config.path}: {where}: {error}") from None
        runs[(algorithm, dataset)] = hparams
    return runs, tuple(note for note in notes if note)


def check_names(source: str, kind: str, given: Sequence[str], valid: Sequence[str]) -> None:
    """:class:`UserError` naming the names of ``given`` (a ``kind``, given in ``source``) that
    are not ``valid``, and the valid ones."""
    unknown = [name for name in given if name not in valid]
    if unknown:
        raise UserError(
            f"{source}: unknown {kind}(s) {', '.join(unknown)}; valid {kind}s: {', '.join(valid)}"
        )


def job_count(config: SweepConfig, environments: Sequence[int]) -> int:
    """How many jobs DomainBed's ``make_args_list`` makes, given the number of ``environments``
    of each dataset: hparam seeds x trials x algorithms x the test environments of each dataset
    (each one alone with ``single_test_envs``, else each one and each pair)."""
    tests = sum(n if config.single_test_envs else n + n * (n - 1) // 2 for n in environments)
    seeds = config.n_hparams - config.n_hparams_from
    return seeds * config.n_trials * len(config.algorithms) * tests


def check_ready(
    sweep: Sweep,
    env: Mapping[str, str],
    hparams: Mapping[tuple[str, str], Mapping[str, Any]],
) -> str:
    """Step 4, on the ``hparams`` of step 2: :class:`UserError` if the jobs could not start;
    otherwise how the launcher will run them."""
    from domainbed import command_launchers

    check_output_dir(Path(sweep.output_dir), sweep.data_dir)
    if shutil.which("python", path=env.get("PATH")) is None:
        raise UserError(
            "no `python` on PATH: DomainBed's sweep starts every job as "
            "`python -m domainbed.scripts.train`. Activate the environment that has DomainBed "
            "and this package, or put its python first on PATH."
        )
    # The doctor and the smoke check give the same answer: requirements.missing. Each domain's
    # training split must fill the largest batch the sweep's jobs draw (or fix).
    config, missing = sweep.config, {}
    seeds = range(config.n_hparams_from, config.n_hparams)
    for (algorithm, dataset), run_hparams in hparams.items():
        fixed = config.fixed_hparams[algorithm]
        batch = sweep_batch(
            algorithm, dataset, fixed, seeds, config.n_trials, float(config.holdout_fraction)
        )
        found = missing_for(algorithm, dataset, sweep.data_dir, run_hparams, batch)
        missing |= dict.fromkeys(found)
    if missing:
        raise UserError(
            "the jobs would fail before their first step:\n  " + "\n  ".join(missing) + "\nFix "
            "it with the commands above, or pass --data_dir with the folder that holds the data."
        )
    launcher = sweep.launcher
    try:
        described = as_launcher(command_launchers.REGISTRY[launcher]).check(env)
        return f"{launcher}: {described}" if described else launcher
    except UserError as error:
        raise UserError(f"launcher {launcher}: {error}") from None


def check_output_dir(output_dir: Path, data_dir: str) -> None:
    """:class:`UserError` if the sweep's ``output_dir`` cannot be made, or is, or lies inside,
    the folder of a dataset: a manifest's root (any registered one), or the folder under
    ``data_dir`` of one of DomainBed's datasets with files. DomainBed takes every folder in a
    folder of domains (and in a domain) for a domain (a class), so the job folders would become
    part of the data."""
    manifests = {name: manifest.root for name, manifest in registered_manifests().items()}
    datasets = dataset_folders(data_dir) | manifests
    check_creatable(output_dir, "the sweep's output_dir")
    for dataset, folder in datasets.items():
        check_outside(
            output_dir,
            [folder],
            "the sweep's output_dir",
            f"{dataset} dataset",
            "an output_dir",
            why=": job folders written in it would be read as the dataset's domains or classes",
        )
