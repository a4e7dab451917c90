"""The one rule for hparam names: a name that nothing of the run reads is refused.

DomainBed's ``train.py`` takes whatever ``--hparams`` holds, so a misspelt name (``lrr``,
``lamda_overlap``) trains the whole run with the default, silently. A name is valid for an
algorithm on a dataset when DomainBed's registry gives it there (DomainBed's own, the dataset's
and the algorithm's declared ``HPARAMS``; the algorithm's also from its class), the dataset
records it (:mod:`.recorded`), DomainBed's MLP featurizer reads it for vector inputs
(:data:`VECTOR_INPUT_HPARAMS`, which the registry gives only to DANN, CDANN and ADRMX), or the
package gives it to every algorithm. DomainBed's algorithms read every name the registry gives
them by subscript, so a valid run of theirs gives no other. Without a dataset, a name valid on
any registered dataset is valid. :mod:`dmg_domainbed.integration` applies
:func:`reject_unknown` to every algorithm DomainBed builds; the preflight and
``check-algorithm`` call it too."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import EVERY_ALGORITHM
from dmg_domainbed.hparams.recorded import recorded_hparams
from dmg_domainbed.hparams.space import resolve_space

#: What DomainBed's ``networks.MLP`` reads: the featurizer of inputs of one dimension.
VECTOR_INPUT_HPARAMS = ("mlp_width", "mlp_depth", "mlp_dropout")


def _registered_name(module, names: Sequence[str], cls: type) -> str:
    """The name ``cls`` is registered under in a DomainBed module (``ALGORITHMS`` of
    ``domainbed.algorithms``, ``DATASETS`` of ``domainbed.datasets``), else its own."""
    return next((name for name in names if vars(module).get(name) is cls), cls.__name__)


@functools.cache
def _names_on(
    algorithm_class: type, algorithm: str, dataset_class: type | None, dataset: str
) -> frozenset[str]:
    """The names of :func:`known_names` on one dataset, but for the inputs'. Cached:
    DomainBed's registry draws every random value on each call."""
    from domainbed import hparams_registry
    from domainbed.lib import misc

    names = set(hparams_registry.default_hparams(algorithm, dataset))
    for declared in (EVERY_ALGORITHM, getattr(algorithm_class, "HPARAMS", None) or {}):
        names.update(resolve_space(declared, 0, misc.seed_hash, dataset, frozenset(names)))
    names.update(recorded_hparams(dataset_class))
    return frozenset(names)


def known_names(
    algorithm_class: type,
    dataset_class: type | None = None,
    input_shape: Sequence[int] | None = None,
) -> frozenset[str]:
    """Every hparam name a run of ``algorithm_class`` on ``dataset_class`` (``None``: any
    registered dataset) can give, for inputs of ``input_shape`` (``None``: not known)."""
    from domainbed import algorithms, datasets

    algorithm = _registered_name(algorithms, algorithms.ALGORITHMS, algorithm_class)
    if dataset_class is not None:
        on = [(dataset_class, _registered_name(datasets, datasets.DATASETS, dataset_class))]
    else:
        on = [(vars(datasets).get(name), name) for name in datasets.DATASETS]
    names = set().union(*(_names_on(algorithm_class, algorithm, *d) for d in on))
    if input_shape is None or len(input_shape) == 1:
        names.update(VECTOR_INPUT_HPARAMS)
    return frozenset(names)


class UnknownHparams(UserError):
    """The :class:`UserError` of :func:`reject_unknown`; ``names``: the names it refuses."""

    def __init__(self, message: str, names: Sequence[str]) -> None:
        super().__init__(message)
        self.names = tuple(names)


def reject_unknown(
    algorithm_class: type,
    hparams: Mapping[str, Any],
    dataset_class: type | None = None,
    input_shape: Sequence[int] | None = None,
) -> None:
    """Raise :class:`UnknownHparams` for the names in ``hparams`` that a run of
    ``algorithm_class`` on ``dataset_class`` (``None``: any registered dataset) does not read
    (:func:`known_names`), with the closest valid name."""
    known = known_names(algorithm_class, dataset_class, input_shape)
    unknown = sorted(set(hparams) - known)
    if not unknown:
        return
    owner = algorithm_class.__name__
    where = f"on {dataset_class.__name__}" if dataset_class is not None else "on any dataset"
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        described.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    which, them = ("hparam", "it") if len(unknown) == 1 else ("hparams", "them")
    raise UnknownHparams(
        f"{owner} does not know {which} {', '.join(described)}: neither DomainBed's registry "
        f"(for {owner} {where}) nor {owner} nor the dataset defines {them}, so the run would "
        f"ignore {them}. Fix the name in --hparams (or the sweep file); {owner}'s hparams "
        f"{where} are: {', '.join(sorted(known))}",
        unknown,
    )
