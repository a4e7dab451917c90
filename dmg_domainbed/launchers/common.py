"""What the launchers share: their settings (read from environment variables) and errors.

DomainBed calls a launcher as ``launcher(commands)`` with nothing else, so a launcher's settings
travel through environment variables. Each launcher declares them as :class:`Option` s in a
tuple ``OPTIONS`` attached to the launcher function; ``dmg-domainbed sweep`` reads the same
declarations to validate a sweep file's ``[launcher]`` table and to turn it into variables.

Stdlib only: launchers run inside DomainBed's sweep script and on cluster nodes.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dmg_domainbed.errors import UserError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Option:
    """One launcher setting: its key in a sweep file's ``[launcher]`` table and its variable.

    ``kind`` is ``int``, ``float``, ``str`` or ``bool``. ``default`` ``None`` means "decided by
    the launcher" (documented in ``help``).
    """

    name: str
    env: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] | None = None

    def describe_allowed(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        kind = {int: "an integer", float: "a number", str: "a string"}[self.kind]
        return f"{kind} >= {self.minimum:g}" if self.minimum is not None else kind

    def check(self, value: Any, given_as: str) -> Any:
        """Return ``value`` converted to ``kind``; raise :class:`UserError` if invalid."""
        if isinstance(value, str) and self.kind is not str:
            value = self._from_text(value, given_as)
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is str:
            ok = isinstance(value, str) and bool(value.strip())
        else:
            numbers = (int, float) if self.kind is float else (int,)
            ok = isinstance(value, numbers) and not isinstance(value, bool)
        ok = ok and (self.minimum is None or value >= self.minimum)
        ok = ok and (self.choices is None or value in self.choices)
        if not ok:
            raise self._error(value, given_as)
        return self.kind(value)

    def _from_text(self, text: str, given_as: str) -> Any:
        cleaned = text.strip().lower()
        if self.kind is bool:
            if cleaned in _TRUE | _FALSE:
                return cleaned in _TRUE
            raise self._error(text, given_as)
        try:
            return self.kind(cleaned)
        except ValueError:
            raise self._error(text, given_as) from None

    def _error(self, value: Any, given_as: str) -> UserError:
        return UserError(
            f"{given_as} = {value!r} is not valid: {self.name} must be {self.describe_allowed()} "
            f"({self.help}). Fix the value or unset it to use the default."
        )


def read_options(options: Iterable[Option], environ: Mapping[str, str]) -> dict[str, Any]:
    """Every option's value: its environment variable when set and not empty, else its default."""
    values = {}
    for option in options:
        text = environ.get(option.env, "")
        if text.strip():
            values[option.name] = option.check(text, option.env)
        else:
            values[option.name] = option.default
    return values


def output_dir_of(command: str) -> str | None:
    """The ``--output_dir`` a DomainBed train command names, or ``None``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "--output_dir" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--output_dir="):
            return word.split("=", 1)[1]
    return None
