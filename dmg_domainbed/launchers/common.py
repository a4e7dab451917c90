"""What the launchers share: settings read from environment variables, and job folders.

DomainBed calls a launcher as ``launcher(commands)`` with nothing else, so its settings travel
through environment variables, declared as :class:`Option` s in a tuple ``OPTIONS`` on the
launcher function; ``dmg-domainbed sweep`` validates a sweep file's ``[launcher]`` table with
the same declarations and turns it into variables. Stdlib only: launchers run inside
DomainBed's sweep script and on cluster nodes.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dmg_domainbed.rules import Rule, not_blank


@dataclass(frozen=True)
class Option:
    """A launcher setting: its ``[launcher]`` key, variable, kind (``int``, ``float``, ``str``
    or ``bool``) and default (``None``: the launcher decides, as ``help`` says)."""

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

    @property
    def fix(self) -> str:
        return f"Fix the value or unset it to use the default ({self.name}: {self.help})."

    def check(self, value: Any, given_as: str) -> Any:
        """``value`` as a valid setting; :class:`UserError` if it is not."""
        return self.rule.check(value, given_as, self.fix)

    def read(self, environ: Mapping[str, str]) -> Any:
        """Its variable's value when set and not blank, else its default."""
        text = environ.get(self.env, "")
        return self.rule.parse(text, self.env, self.fix) if text.strip() else self.default


def read_options(options: Iterable[Option], environ: Mapping[str, str]) -> dict[str, Any]:
    return {option.name: option.read(environ) for option in options}


def output_dir_of(command: str) -> str | None:
    """The ``--output_dir`` a DomainBed train command names, or ``None``."""
    with contextlib.suppress(ValueError):
        words = shlex.split(command)
        for word, following in zip(words, [*words[1:], None]):
            if word.startswith("--output_dir="):
                return word.split("=", 1)[1]
            if word == "--output_dir" and following is not None:
                return following
    return None
