"""Check hparam overrides (``--hparams`` JSON, a sweep file's hparams) before any job starts.

DomainBed's ``train.py`` updates the hparams with whatever ``--hparams`` holds: a misspelt name
is silently ignored and a value of the wrong type fails hours later, inside a job. Here the
names go through the rule the algorithm applies when it is built
(:func:`~dmg_domainbed.hparams.names.reject_unknown`), on the hparams it is built with, and a
value must have the type of the default (or pass the check of its declaration: the
``HPARAMS`` of this package's algorithms and datasets, and the hparams it gives every algorithm,
:data:`~dmg_domainbed.hparams.every_algorithm.EVERY_ALGORITHM`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckedRun:
    """A DomainBed run as ``train.py`` will build it, known before it starts: its algorithm and
    dataset, the input shape its featurizer sees (``None`` when the dataset's class does not
    tell) and its hparams with ``hparams_seed`` 0, checked (:func:`checked_run`); in a sweep,
    the largest batch its jobs train with (``None``: not asked)."""

    algorithm: str
    dataset: str
    input_shape: tuple[int, ...] | None
    hparams: dict[str, Any]
    largest_batch: int | None = None


def checked_run(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> CheckedRun:
    """The run of ``algorithm`` on ``dataset`` with the fixed hparams ``overrides``: the defaults
    updated with them and with what the dataset records, as its algorithm is built with them.
    Raises :class:`UserError` for an unknown name, a value of the wrong type or one that cannot
    train."""
    # Imported here: every command of the CLI imports this module, few of them need these.
    from domainbed import algorithms, datasets

    from dmg_domainbed import averaging
    from dmg_domainbed.datasets import input_shape
    from dmg_domainbed.hparams import HParamSpace
    from dmg_domainbed.hparams.every_algorithm import EVERY_ALGORITHM
    from dmg_domainbed.hparams.names import reject_unknown
    from dmg_domainbed.hparams.of_job import job_hparams
    from dmg_domainbed.hparams.recorded import record
    from dmg_domainbed.hparams.trainable import check_trainable
    from dmg_domainbed.rules import rule_like

    shape = input_shape(dataset)
    defaults = job_hparams(algorithm, dataset, 0, 0)  # hparams seed 0: the defaults
    overrides = dict(overrides or {})
    algorithm_class = algorithms.get_algorithm_class(algorithm)
    dataset_class = datasets.get_dataset_class(dataset)
    hparams = defaults | overrides
    record(dataset_class, hparams)  # what the dataset writes when train.py builds it
    # The hparams the algorithm is built with, through the rule it applies then.
    reject_unknown(algorithm_class, hparams, dataset_class, shape)
    owners = (algorithm_class, dataset_class)
    spaces = [EVERY_ALGORITHM, *(getattr(owner, "HPARAMS", None) for owner in owners)]
    for name, value in overrides.items():
        declared = [s[name] for s in spaces if isinstance(s, HParamSpace) and name in s]
        if declared:
            declared[-1].check(value, algorithm)
        elif name in defaults:
            what = f"{algorithm} hparam '{name}' on {dataset}"
            fix = f"Give a value of the type of its default, {defaults[name]!r}."
            rule_like(defaults[name]).check(value, what, fix)
    averaging.check(hparams, algorithm)  # the hparams it reads given with its mode
    check_trainable(hparams, algorithm)
    return CheckedRun(algorithm, dataset, shape, hparams)


def effective_hparams(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The hparams of :func:`checked_run`."""
    return checked_run(algorithm, dataset, overrides).hparams
