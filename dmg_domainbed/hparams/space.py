"""The declaration mechanism: a default and a seeded random sampler per hyperparameter."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import Rule, rule_like

Sampler = Callable[[np.random.RandomState], Any]


@dataclass(frozen=True)
class HParam:
    """One hyperparameter: default value, random-search sampler and what is valid.

    A valid value (its :attr:`rule`) has the type of ``default`` (an ``int`` is accepted where
    the default is a ``float``) unless ``types`` lists the accepted types; ``minimum`` and
    ``maximum`` bound numbers (inclusive); ``choices`` lists the allowed values of a string;
    ``validate`` is a last check that raises ``ValueError``.

    Where it is declared:

    * ``per_dataset``: defaults that replace ``default`` on the named datasets;
    * ``datasets``: declared on these datasets only (elsewhere DomainBed's value, if any, stays);
    * ``where_defined``: declared only where DomainBed or the dataset already has the hparam,
      to fix the value of one of theirs (e.g. a featurizer's dropout) without adding it to
      datasets that do not use it.
    """

    name: str
    default: Any
    sample: Sampler
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    validate: Callable[[Any], None] | None = None
    types: tuple[type, ...] | None = None
    help: str = ""
    per_dataset: Mapping[str, Any] = field(default_factory=dict)
    datasets: tuple[str, ...] | None = None
    where_defined: bool = False

    def applies(self, dataset: str | None, defined: Container[str] = ()) -> bool:
        """Whether the hparam is declared for runs on ``dataset`` (``None``: any dataset), given
        the names DomainBed and the dataset already define."""
        if self.datasets is not None and dataset is not None and dataset not in self.datasets:
            return False
        return not self.where_defined or self.name in defined

    def default_on(self, dataset: str | None) -> Any:
        """The default on ``dataset``."""
        return self.per_dataset.get(dataset, self.default)

    @property
    def rule(self) -> Rule:
        """What a valid value is: of the default's type unless ``types`` says otherwise."""
        return replace(
            rule_like(self.default) if self.types is None else Rule(self.types),
            minimum=self.minimum,
            maximum=self.maximum,
            choices=self.choices,
            validate=self.validate,
        )

    def check(self, value: Any, owner: str) -> None:
        """Raise :class:`UserError` naming the value, what is allowed and how to fix it."""
        example = json.dumps({self.name: self.default})
        self.rule.check(
            value,
            f"{owner} hparam '{self.name}'",
            f"Fix it in --hparams or the sweep file, e.g. '{example}'",
        )


class HParamSpace:
    """An ordered set of :class:`HParam` declarations belonging to one component."""

    def __init__(self, *hparams: HParam) -> None:
        names = [h.name for h in hparams]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"hparams declared twice: {duplicates}")
        self._hparams = {h.name: h for h in hparams}

    def __iter__(self):
        return iter(self._hparams.values())

    def __contains__(self, name: str) -> bool:
        return name in self._hparams

    def __getitem__(self, name: str) -> HParam:
        return self._hparams[name]

    def defaults(self, dataset: str | None = None) -> dict[str, Any]:
        """The default of every hparam declared for every dataset, on ``dataset``."""
        return {h.name: h.default_on(dataset) for h in self if h.applies(None, ())}

    def validate(self, hparams: Mapping[str, Any], owner: str) -> None:
        """Check every declared hparam in ``hparams``; those declared for every dataset must be
        present, the others are checked where present."""
        for h in self:
            if h.name not in hparams:
                if h.datasets is not None or h.where_defined:
                    continue
                raise UserError(
                    f"{owner} needs hparam '{h.name}' (default {h.default!r}) but it is missing; "
                    "build hparams with domainbed.hparams_registry.default_hparams"
                )
            h.check(hparams[h.name], owner)


class MalformedHParams(TypeError):
    """A component's ``HPARAMS`` is neither an :class:`HParamSpace` (or iterable of
    :class:`HParam`) nor a mapping ``{name: (default, sampler)}``."""


Declaration = HParamSpace | Mapping[str, tuple[Any, Sampler]] | Iterable[HParam]


def declared(space: Declaration) -> list[HParam]:
    """The :class:`HParam` objects of ``space`` (a plain mapping's entries as hparams of the
    default's type, declared everywhere); :class:`MalformedHParams` saying what is wrong."""
    if isinstance(space, Mapping):
        for name, entry in space.items():
            if not (isinstance(entry, tuple | list) and len(entry) == 2 and callable(entry[1])):
                raise MalformedHParams(
                    f"entry {name!r}: {entry!r} is not a (default, sampler) pair. Write "
                    f"{name!r}: (default, lambda random: ...), where the sampler draws the "
                    "random-search value from the numpy RandomState it is given; or declare an "
                    "HParamSpace of dmg_domainbed.hparams.HParam"
                )
        return [HParam(name, default, sample) for name, (default, sample) in space.items()]
    entries = list(space) if isinstance(space, Iterable) else [space]
    wrong = [entry for entry in entries if not isinstance(entry, HParam)]
    if wrong:
        raise MalformedHParams(
            f"{wrong[0]!r} is not an HParam: HPARAMS is an HParamSpace(HParam(name, default, "
            "sampler, ...), ...) or a mapping {name: (default, sampler)}"
        )
    return entries


def resolve_space(
    space: Declaration,
    random_seed: int,
    seed_hash: Callable[..., int],
    dataset: str | None = None,
    defined: Container[str] = (),
) -> dict[str, tuple[Any, Any]]:
    """(default, random value) per name declared for ``dataset``, each drawn from
    ``RandomState(seed_hash(random_seed, name))`` as DomainBed draws its own (independent of
    which other hparams exist). ``defined``: the names DomainBed and the dataset already define
    (:attr:`HParam.where_defined`)."""
    return {
        h.name: (
            h.default_on(dataset),
            _plain(h.sample(np.random.RandomState(seed_hash(random_seed, h.name)))),
        )
        for h in declared(space)
        if h.applies(dataset, defined)
    }


def _plain(value: Any) -> Any:
    """NumPy scalars become Python ones, so results.jsonl and type checks see plain values."""
    return value.item() if isinstance(value, np.generic) else value
