"""What a DomainBed run needs on disk before its first step: its dataset's files and the
pretrained weights its model loads. ``doctor``, the sweep preflight and ``smoke`` all ask here,
so that they name the same path and the same command that fixes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmg_domainbed.datasets import input_shape
from dmg_domainbed.preflight import data, weights
from dmg_domainbed.preflight.hparams import effective_hparams
from dmg_domainbed.weight_files import Caches, WeightFile, WeightsCheck


def data_status(
    dataset: str, data_dir: str | None, batch: data.Batch | None = None
) -> data.DataStatus:
    """Whether DomainBed will find ``dataset``'s files under ``data_dir``, and each domain's
    training split fill ``batch`` (when given)."""
    from domainbed import datasets

    cls = datasets.get_dataset_class(dataset)
    return data.dataset_status(dataset, cls.__module__, len(cls.ENVIRONMENTS), data_dir, batch)


def weight_files(
    algorithm: str,
    dataset: str,
    overrides: Mapping[str, Any] | None = None,
    caches: Caches | None = None,
) -> tuple[list[WeightFile], list[str]]:
    """The weight files a run with the fixed hparams ``overrides`` loads, looked up in ``caches``
    (default: this process's), and problems that stop its model from being built. Raises
    ``UserError`` for a bad hparam."""
    hparams = effective_hparams(algorithm, dataset, overrides)
    return weights.needed_weights(hparams, input_shape(dataset), caches)


def own_weights(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> WeightsCheck | None:
    """The algorithm's ``check_weights`` of the weights it loads instead of DomainBed's
    featurizer's, or ``None`` when it has none."""
    return _own_weights(algorithm, effective_hparams(algorithm, dataset, overrides))


def _own_weights(algorithm: str, hparams: Mapping[str, Any]) -> WeightsCheck | None:
    from domainbed import algorithms

    from dmg_domainbed.algorithms.base import declarations_of

    return declarations_of(algorithms.get_algorithm_class(algorithm)).check_weights(hparams)


def missing(
    algorithm: str,
    dataset: str,
    data_dir: str | None,
    overrides: Mapping[str, Any] | None = None,
    batch: data.Batch | None = None,
) -> list[str]:
    """Everything that would stop the run with the fixed hparams ``overrides`` before its first
    step (:func:`missing_for`); raises ``UserError`` for a bad hparam."""
    return missing_for(
        algorithm, dataset, data_dir, effective_hparams(algorithm, dataset, overrides), batch
    )


def missing_for(
    algorithm: str,
    dataset: str,
    data_dir: str | None,
    hparams: Mapping[str, Any],
    batch: data.Batch | None = None,
) -> list[str]:
    """Everything that would stop a run with the checked, complete ``hparams`` (those of
    :func:`~dmg_domainbed.preflight.hparams.effective_hparams`) before its first step (or
    hang it), each naming the path looked at and the command that fixes it; empty when nothing
    does."""
    problems = []
    found = data_status(dataset, data_dir, batch)
    if not found.ok:
        problems.append(f"{dataset} data {found.state}: {found.detail}")
    own = _own_weights(algorithm, hparams)
    if own is not None:
        if not own.ready:
            problems.append(f"{algorithm}'s pretrained weights: {'; '.join(own.details)}")
        return problems
    files, model_problems = weights.needed_weights(hparams, input_shape(dataset))
    problems += model_problems
    if absent := [f for f in files if not f.present]:
        problems.append(f"pretrained weights missing: {weights.missing_weights_message(absent)}")
    return problems
