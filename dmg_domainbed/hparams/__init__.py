"""Hyperparameters declared next to the component that uses them.

An algorithm or dataset plugin sets a class attribute ``HPARAMS = HParamSpace(HParam(...), ...)``.
Each :class:`HParam` carries its default, the sampler of DomainBed's random search and what a
valid value looks like; :mod:`dmg_domainbed.integration` merges resolved spaces into
``domainbed.hparams_registry``, the package's algorithms validate the values at construction and
every algorithm's names are checked by one rule (:func:`.names.reject_unknown`) when it is
built and before a sweep. That rule is not imported here: it reads the hparams every algorithm
has, declared with :class:`HParam` by a module that imports this package.
"""

from dmg_domainbed.hparams.space import HParam, HParamSpace, resolve_space
from dmg_domainbed.hparams.trainable import check_trainable
from dmg_domainbed.rules import positive

__all__ = [
    "HParam",
    "HParamSpace",
    "check_trainable",
    "positive",
    "resolve_space",
]
