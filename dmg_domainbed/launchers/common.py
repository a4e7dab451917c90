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

from dmg_domainbed.rules import Rule, not_blank


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

    @property
    def rule(self) -> Rule:
        text = not_blank if self.kind is str else None
        return Rule((self.kind,), minimum=self.minimum, choices=self.choices, validate=text)

    def check(self, value: Any, given_as: str) -> Any:
        """``value`` as a valid setting; :class:`UserError` if it is not."""
        return self.rule.check(value, given_as, self._fix())

    def _fix(self) -> str:
        return f"Fix the value or unset it to use the default ({self.name}: {self.help})."


def read_options(options: Iterable[Option], environ: Mapping[str, str]) -> dict[str, Any]:
    """Every option's value: its environment variable when set and not empty, else its default."""
    values = {}
    for option in options:
        text = environ.get(option.env, "")
        if text.strip():
            values[option.name] = option.rule.parse(text, option.env, option._fix())
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
