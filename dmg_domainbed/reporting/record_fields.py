"""The fields of train.py's records that each reader needs, checked before it reads.

DomainBed's ``train.py`` appends one JSON record per checkpoint to ``results.jsonl``: the
accuracies ``env<i>_in_acc`` / ``env<i>_out_acc``, ``step``, what ``update`` returned, its
``hparams`` and its command-line ``args``. Another tool's ``results.jsonl``, or records of an
older or modified ``train.py``, may lack some of them. Each reader asks only for the fields it
uses (a :class:`Needs`), so it reads what can be read; a record lacking one is refused with a
:class:`~dmg_domainbed.errors.UserError` naming the file and the field, instead of a
``KeyError`` deep inside DomainBed's selection code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError


@dataclass(frozen=True)
class Needs:
    """The fields ``purpose`` reads (``args.trial_seed``: key ``trial_seed`` of ``args``), and
    whether it reads the test domains' accuracies (model selection does)."""

    purpose: str
    fields: tuple[str, ...]
    test_accuracies: bool = False  # env<i>_in_acc and env<i>_out_acc of each test domain

    def __add__(self, other: Needs) -> Needs:
        fields = tuple(dict.fromkeys(self.fields + other.fields))
        return Needs(other.purpose, fields, self.test_accuracies or other.test_accuracies)

    def missing(self, record: Mapping[str, Any]) -> list[str]:
        """The fields ``record`` lacks."""
        absent: list[str] = []
        for field in self.fields:
            # A missing table is named once, not with each of its keys.
            if not _has(record, field) and not any(field.startswith(f"{a}.") for a in absent):
                absent.append(field)
        test_envs = record["args"]["test_envs"] if _has(record, "args.test_envs") else None
        for env in test_envs if self.test_accuracies and isinstance(test_envs, list) else ():
            absent += [k for k in (f"env{env}_in_acc", f"env{env}_out_acc") if k not in record]
        return absent

    def check(self, records: Iterable[Mapping[str, Any]], path: Path) -> None:
        """:class:`UserError` naming ``path`` and the fields the first incomplete record lacks."""
        for number, record in enumerate(records, start=1):
            absent = self.missing(record)
            if absent:
                raise UserError(
                    f"'{path}' does not hold records as DomainBed's train.py writes them: "
                    f"record {number} has no {', '.join(absent)} (read by {self.purpose}). "
                    "It was written by another tool or by an older or modified train.py. Give "
                    "runs of domainbed.scripts.train (move other folders out of a sweep "
                    "folder), or rerun the run with this DomainBed."
                )


def _has(record: Mapping[str, Any], field: str) -> bool:
    value: Any = record
    for key in field.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


RUN = Needs(
    "every command that reads runs",
    ("step", "hparams", "args", "args.algorithm", "args.dataset", "args.test_envs"),
)
SWEEP = RUN + Needs(
    "collect_results' model selection",
    ("args.trial_seed", "args.hparams_seed", "args.output_dir"),
    test_accuracies=True,
)
SPLITS = RUN + Needs(
    "the rebuilding of train.py's data splits",
    ("args.trial_seed", "args.hparams_seed", "args.holdout_fraction"),
)
