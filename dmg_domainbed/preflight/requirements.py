"""What a DomainBed run needs on disk before its first step: its dataset's files and the
pretrained weights its model loads. ``doctor``, the sweep preflight and ``smoke`` all ask here,
so that they name the same path and the same command that fixes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmg_domainbed.preflight import data, weights
from dmg_domainbed.preflight.hparams import CheckedRun, checked_run
from dmg_domainbed.weight_files import Caches, WeightFile, WeightsCheck


def data_status(
    dataset: str, data_dir: str | None, batch: data.Batch | None = None
) -> data.DataStatus:
    """Whether ``dataset``'s files are under ``data_dir``, each domain filling ``batch``."""
    from domainbed import datasets

    cls = datasets.get_dataset_class(dataset)
    return data.dataset_status(dataset, cls.__module__, len(cls.ENVIRONMENTS), data_dir, batch)


def weight_files(
    algorithm: str,
    dataset: str,
    overrides: Mapping[str, Any] | None = None,
    caches: Caches | None = None,
) -> tuple[list[WeightFile], list[str]]:
    """The weight files a run loads, looked up in ``caches`` (default: this process's), and
    what stops its model from being built."""
    run = checked_run(algorithm, dataset, overrides)
    return weights.needed_weights(run.hparams, run.input_shape, caches)


def own_weights(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> WeightsCheck | None:
    """The ``check_weights`` of weights the algorithm loads itself; ``None``: none."""
    return algorithm_weights(algorithm, checked_run(algorithm, dataset, overrides).hparams)


def algorithm_weights(algorithm: str, hparams: Mapping[str, Any]) -> WeightsCheck | None:
    """:func:`own_weights` of a run's ``hparams``."""
    from domainbed import algorithms

    from dmg_domainbed.algorithms.base import declarations_of

    return declarations_of(algorithms.get_algorithm_class(algorithm)).check_weights(hparams)


def weight_problems(run: CheckedRun) -> list[str]:
    """What of its pretrained weights (the featurizer's, or the algorithm's own) would stop
    ``run`` before its first step, each with the path looked at and the fix."""
    if (own := algorithm_weights(run.algorithm, run.hparams)) is not None:
        return (
            [] if own.ready else [f"{run.algorithm}'s pretrained weights: {'; '.join(own.details)}"]
        )
    files, problems = weights.needed_weights(run.hparams, run.input_shape)
    if absent := [f for f in files if not f.present]:
        problems.append(f"pretrained weights missing: {weights.missing_weights_message(absent)}")
    return problems


def data_problems(dataset: str, data_dir: str | None, batch: data.Batch | None = None) -> list[str]:
    """What of ``dataset``'s files would stop a run (or hang it: a domain that cannot fill
    ``batch``), with the fix."""
    found = data_status(dataset, data_dir, batch)
    if found.ok:
        return []
    problem = f"{dataset} data {found.state}: {found.detail}"
    if found.state == data.MISSING and data_dir is not None:
        problem += f"; or pass --data_dir with the folder that holds {dataset}"
    return [problem]
