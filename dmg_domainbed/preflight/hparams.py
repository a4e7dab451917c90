"""Check hparam overrides (``--hparams`` JSON, a sweep file's hparams) before any job starts.

DomainBed's ``train.py`` updates the hparams with whatever ``--hparams`` holds: a misspelt name
is silently ignored and a value of the wrong type fails hours later, inside a job. Here a name
must be one the algorithm has on that dataset, and a value must have the type of the default
(or pass the check that this package's algorithms and datasets declare in their ``HPARAMS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmg_domainbed.errors import UserError


def effective_hparams(
    algorithm: str, dataset: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The hparams of a run with ``hparams_seed`` 0, as its algorithm is built with them: the
    defaults updated with ``overrides`` and what the dataset records. Raises
    :class:`UserError` for an unknown name, a value of the wrong type or one that cannot train."""
    # Imported here: every command of the CLI imports this module, few of them need these.
    from domainbed import algorithms, datasets, hparams_registry

    from dmg_domainbed import precision
    from dmg_domainbed.algorithms.base import PluginAlgorithm
    from dmg_domainbed.hparams import HParamSpace, reject_unknown
    from dmg_domainbed.hparams.recorded import record, recorded_hparams
    from dmg_domainbed.hparams.trainable import check_trainable
    from dmg_domainbed.rules import rule_like

    defaults = hparams_registry.default_hparams(algorithm, dataset)
    overrides = dict(overrides or {})
    owners = [algorithms.get_algorithm_class(algorithm), datasets.get_dataset_class(dataset)]
    hparams = defaults | overrides
    record(owners[1], hparams)  # what the dataset writes when train.py builds it
    known = set(defaults) | set(recorded_hparams(owners[1])) | {precision.HPARAM}
    unknown = sorted(set(overrides) - known)
    if unknown:
        verb = "is not an hparam" if len(unknown) == 1 else "are not hparams"
        raise UserError(
            f"{', '.join(map(repr, unknown))} {verb} of {algorithm} on {dataset}; "
            f"its hparams are: {', '.join(sorted(known))}"
        )
    if issubclass(owners[0], PluginAlgorithm):  # the names rule the algorithm applies when built
        reject_unknown(owners[0], hparams)
    if precision.HPARAM in overrides:  # every algorithm's, absent from DomainBed's defaults
        precision.requested(overrides)
    spaces = [getattr(owner, "HPARAMS", None) for owner in owners]
    for name, value in overrides.items():
        declared = [s[name] for s in spaces if isinstance(s, HParamSpace) and name in s]
        if declared:
            declared[-1].check(value, algorithm)
        elif name in defaults:
            what = f"{algorithm} hparam '{name}' on {dataset}"
            fix = f"Give a value of the type of its default, {defaults[name]!r}."
            rule_like(defaults[name]).check(value, what, fix)
    check_trainable(hparams, algorithm)
    return hparams
