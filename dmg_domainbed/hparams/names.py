"""Refuse hparam names that nothing reads.

DomainBed's ``train.py`` updates the registry's hparams with whatever ``--hparams`` holds, so a
misspelt name (``lamda_overlap``) trains the whole run with the default and no word of warning.
This package's algorithms check the names when they are built, before the first step. A run does
not tell its algorithm the dataset, so a name is valid when DomainBed's registry defines it for
the algorithm on any registered dataset (DomainBed's own and plugin datasets' declared hparams
included), a registered dataset records it (:mod:`.recorded`) or the algorithm declares it;
``precision`` (:mod:`dmg_domainbed.precision`) is valid for every algorithm. DomainBed's own
algorithms are not checked.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from typing import Any

from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.recorded import recorded_hparams


def known_hparams(algorithm_class: type) -> frozenset[str]:
    """Every hparam name a run of ``algorithm_class`` can use, on any registered dataset."""
    from domainbed import datasets

    return _known_hparams(algorithm_class, tuple(datasets.DATASETS))


@functools.cache
def _known_hparams(algorithm_class: type, dataset_names: tuple[str, ...]) -> frozenset[str]:
    # Cached: DomainBed's registry draws every random value on each call.
    from domainbed import datasets, hparams_registry

    from dmg_domainbed import precision

    # precision: every algorithm's, though absent from DomainBed's defaults (fp32 runs unchanged)
    names = {h.name for h in algorithm_class.HPARAMS} | {precision.HPARAM}
    for dataset in dataset_names:
        names.update(hparams_registry.default_hparams(algorithm_class.__name__, dataset))
        names.update(recorded_hparams(vars(datasets).get(dataset)))
    return frozenset(names)


def reject_unknown(algorithm_class: type, hparams: Mapping[str, Any]) -> None:
    """Raise :class:`UserError` for a name in ``hparams`` that neither DomainBed nor
    ``algorithm_class`` defines, with the closest valid name."""
    known = known_hparams(algorithm_class)
    unknown = sorted(set(hparams) - known)
    if not unknown:
        return
    owner = algorithm_class.__name__
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        described.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    which, them = ("hparam", "it") if len(unknown) == 1 else ("hparams", "them")
    raise UserError(
        f"{owner} does not know {which} {', '.join(described)}: neither DomainBed's registry "
        f"(for {owner}, on any dataset) nor {owner} defines {them}, so the run would train with "
        f"the default. Fix the name in --hparams (or the sweep file); {owner}'s hparams are: "
        f"{', '.join(sorted(known))}"
    )
