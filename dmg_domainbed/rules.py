"""What a setting's value may be (hparams, sweep keys, launcher settings), checked one way::

    <where it was given> = <value> is not valid: it must be <what is allowed>. <how to fix it>

Numbers are never booleans, an integer is a valid float, and floats must be finite. Stdlib
only: launchers and the start-up hook import it.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass
from typing import Any

from dmg_domainbed.errors import UserError

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a table",
}


@dataclass(frozen=True)
class Rule:
    """The allowed values: of one of ``types``, within ``minimum``..``maximum`` (inclusive)
    for numbers, one of ``choices`` when given, and accepted by ``validate`` (which raises
    ``ValueError`` saying why not)."""

    types: tuple[type, ...]
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    validate: Callable[[Any], None] | None = None

    def allowed(self) -> str:
        """What a valid value looks like, in words."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(choice) for choice in self.choices)
        text = " or ".join(_NAMES.get(kind, kind.__name__) for kind in self.types)
        if self.minimum is not None and self.maximum is not None:
            return f"{text} between {self.minimum:g} and {self.maximum:g}"
        if self.minimum is not None:
            return f"{text} >= {self.minimum:g}"
        if self.maximum is not None:
            return f"{text} <= {self.maximum:g}"
        return text

    def problem(self, value: Any) -> str | None:
        """Why ``value`` breaks the rule, or ``None`` if it does not."""
        if not any(_is(value, kind) for kind in self.types):
            return f"it must be {self.allowed()}, not {type(value).__name__}"
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            out_of_range = (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum
            )
            if not math.isfinite(value) or out_of_range:
                return f"it must be {self.allowed()}"
        if self.choices is not None and value not in self.choices:
            return f"it must be {self.allowed()}"
        if self.validate is not None:
            try:
                self.validate(value)
            except ValueError as error:
                return str(error)
        return None

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` keeps the rule."""
        return self.problem(value) is None

    def check(self, value: Any, given_as: str, fix: str) -> Any:
        """``value``, or :class:`UserError` saying where it was given, what is allowed and
        ``fix``."""
        problem = self.problem(value)
        if problem is not None:
            raise UserError(f"{given_as} = {shown(value)} is not valid: {problem}. {fix}")
        return float(value) if self.types == (float,) else value

    def parse(self, text: str, given_as: str, fix: str) -> Any:
        """The value written as ``text`` (an environment variable), checked."""
        cleaned = text.strip()
        kind = self.types[0]
        value: Any = cleaned
        if kind is bool and cleaned.lower() in _TRUE | _FALSE:
            value = cleaned.lower() in _TRUE
        elif kind in (int, float):
            try:
                value = kind(cleaned)
            except ValueError:
                pass
        return self.check(value, given_as, fix)


def with_article(noun: str) -> str:
    """``noun`` after "a" or "an", as its first letter is spoken (a dataset, an algorithm)."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def shown(value: Any) -> str:
    """``repr(value)``, shortened where it is long (a list of thousands of names): its first
    items and ``...``, and its length, so that the message stays readable."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    if not isinstance(value, Sized):
        return _SHORT.repr(value)
    unit = "characters" if isinstance(value, str) else "items"
    return f"{_SHORT.repr(value)} ({len(value):,} {unit})"


_SHOWN_CHARACTERS = 300
_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 5
_SHORT.maxstring = _SHORT.maxother = 80


def _is(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, numbers.Real)
    if kind is int:
        return isinstance(value, numbers.Integral)
    return isinstance(value, kind)


def rule_like(default: Any) -> Rule:
    """The rule of a setting known only by its default: values of the default's type."""
    if isinstance(default, tuple):
        return Rule((list, tuple))
    for kind in (bool, int, float, str, list, dict):
        if _is(default, kind):
            return Rule((kind,))
    return Rule((object,))


def not_blank(text: str) -> None:
    """Validator of a string that must hold more than white space."""
    if not text.strip():
        raise ValueError("it must not be empty")


def positive(value: float) -> None:
    """Validator of a number that must be > 0 (a rule's ``validate``, after its type check)."""
    if not value > 0:
        raise ValueError("it must be a number > 0")


def refuse_unknown_keys(
    source: object, where: str, given: Iterable[str], valid: Iterable[str]
) -> None:
    """Refuse the keys of ``given`` that are not ``valid`` (``where`` in ``source``, e.g. a
    file), naming the valid ones."""
    valid = list(valid)
    unknown = ", ".join(sorted(set(given) - set(valid)))
    if unknown:
        raise UserError(
            f"{source}: unknown key(s) {unknown} in {where}; valid keys: {', '.join(valid)}"
        )
