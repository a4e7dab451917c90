"""Hyperparameters declared next to the component that uses them: ``HPARAMS =
HParamSpace(HParam(...), ...)`` on an algorithm or dataset plugin, each with its default, the
sampler of DomainBed's random search and what a valid value looks like. The names rule
(:mod:`.names`) is not imported here: it reads the hparams every algorithm has, declared by a
module that imports this package."""

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
