"""What the package's datasets do first when built: check ``test_envs``, record their hparams.

DomainBed checks no ``test_envs``: one out of range trains on every domain while the algorithm
is built for one fewer, and fails far from its cause. ``RotatedDigits``, the manifest datasets
and another package's dataset that declares ``recorded_hparams()`` call
:func:`check_and_record` first; DomainBed's own datasets are checked by
:mod:`dmg_domainbed.integration` when ``train.py`` asks for the hparams.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.recorded import record


def check_test_envs(dataset_class: type, test_envs) -> None:
    """Raise :class:`UserError` unless ``test_envs`` are distinct domain numbers of
    ``dataset_class`` that leave at least one domain to train on."""
    environments = list(getattr(dataset_class, "ENVIRONMENTS", None) or ())
    if not environments or test_envs is None:
        return
    name, count = dataset_class.__name__, len(environments)
    domains = ", ".join(f"{i}: {env!r}" for i, env in enumerate(environments))
    given = " ".join(str(env) for env in test_envs)
    allowed = f"{name} has {count} domains ({domains}): test_envs are numbers 0 to {count - 1}"
    fix = (
        f"Give --test_envs between 0 and {count - 1} (--test_envs 0 tests on {environments[0]!r})."
    )
    for env in test_envs:
        if isinstance(env, bool) or not isinstance(env, int) or not 0 <= env < count:
            raise UserError(f"test environment {env!r} (--test_envs {given}): {allowed}. {fix}")
    if len(set(test_envs)) != len(test_envs):
        raise UserError(f"--test_envs {given} names a domain twice: {allowed}, each once. {fix}")
    if len(test_envs) >= count:
        raise UserError(f"--test_envs {given} leaves no domain to train on: {allowed}. {fix}")


def check_and_record(dataset_class: type, test_envs, hparams: MutableMapping[str, Any]) -> None:
    """Check ``test_envs`` (:func:`check_test_envs`), then write what ``dataset_class``
    records into ``hparams`` (:func:`dmg_domainbed.hparams.recorded.record`)."""
    check_test_envs(dataset_class, test_envs)
    record(dataset_class, hparams)
