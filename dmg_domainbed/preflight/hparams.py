"""Fixed hparams (``--hparams``, a sweep file's) checked before any job starts: DomainBed's
``train.py`` ignores a misspelt name and fails hours later on a value of the wrong type. Names
go through the rule the algorithm applies when built (``hparams.names.reject_unknown``); a value
passes its declaration's check, else has its default's type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckedRun:
    """A run as ``train.py`` will build it: the input shape its featurizer sees (``None``: not
    told), its checked hparams of ``hparams_seed`` 0 and, in a sweep, its jobs' largest batch."""

    algorithm: str
    dataset: str
    input_shape: tuple[int, ...] | None
    hparams: dict[str, Any]
    largest_batch: int | None = None


def checked_run(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> CheckedRun:
    """The run of ``algorithm`` on ``dataset`` with the fixed hparams ``overrides`` (and what the
    dataset records); :class:`UserError` for an unknown name or a value it cannot train on."""
    # Imported here: every command of the CLI imports this module, few of them need these.
    from domainbed import algorithms, datasets

    from dmg_domainbed import averaging, precision
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
    record(dataset_class, hparams)  # what the dataset records when train.py builds it
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
    precision.check(hparams, algorithm_class)
    check_trainable(hparams, algorithm)
    return CheckedRun(algorithm, dataset, shape, hparams)
