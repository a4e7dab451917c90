"""Layers of a network named by an hparam (DMG's ``mask_layers``, ImportanceMask's
``importance_layers``): the form of the value, and the lookup with a clear error.

The value is ``"auto"`` (the algorithm's default choice), one layer name, or a list of names;
a name is a key of ``network.named_modules()``, e.g. ``featurizer.network.layer3``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from dmg_domainbed.errors import UserError
from dmg_domainbed.shortlist import shortlist

AUTO = "auto"


def check_value(value: Any) -> None:
    """Validator of such an hparam: ``'auto'``, one name, or a non-empty list of distinct names
    (a layer named twice would be masked or tracked twice, with parameters made twice for it)."""
    names = [value] if isinstance(value, str) else value
    if (
        not isinstance(names, list)
        or not names
        or not all(isinstance(name, str) and name for name in names)
    ):
        raise ValueError(
            "give 'auto', one layer name, or a list of layer names such as "
            "['featurizer.conv4', 'classifier']"
        )
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        listed = shortlist([repr(name) for name in repeated])
        raise ValueError(f"it names {listed} more than once: give each layer once")


def resolve(value: str | Sequence[str], auto: Callable[[], list[str]]) -> list[str]:
    """The layer names ``value`` stands for; ``auto()`` gives the default choice."""
    if value == AUTO:
        return auto()
    return [value] if isinstance(value, str) else list(value)


def modules_named(network: nn.Module, names: Sequence[str], purpose: str) -> list[nn.Module]:
    """The sub-modules of ``network`` called ``names``; a :class:`UserError` listing the valid
    names when one does not exist. ``purpose`` says what the layers are for, e.g. "mask"."""
    modules = dict(network.named_modules())
    unknown = [name for name in names if name not in modules or name == ""]
    if unknown or not names:
        problem = f"unknown {unknown!r}" if unknown else "no layer given"
        raise UserError(
            f"cannot {purpose} layers {list(names)!r}: {problem}. Valid layer names: "
            f"{describe_names([name for name in modules if name])}"
        )
    return [modules[name] for name in names]


def describe_names(names: Sequence[str], limit: int = 40) -> str:
    """``names`` joined; a long list (a ResNet has hundreds) keeps the shallowest levels that
    fit in ``limit`` and says how many deeper names exist."""
    if len(names) <= limit:
        return ", ".join(names)
    fitting = (d for d in range(1, 10) if sum(n.count(".") < d for n in names) <= limit)
    depth = max(fitting, default=1)
    shown = [name for name in names if name.count(".") < depth]
    return (
        f"{', '.join(shown)} and {len(names) - len(shown)} deeper ones (any name of the "
        "network's named_modules())"
    )
