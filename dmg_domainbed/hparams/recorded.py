"""Hparams a dataset records: what a run was built on, written into the run's hparams.

train.py writes the hparams into every record of ``results.jsonl`` and into ``model.pkl``, so a
fact a dataset records there (a manifest dataset's domains) is part of the run. A dataset
declares them with a classmethod ``recorded_hparams()`` (from the class alone; ``None`` for a
value only its files tell, which its ``__init__`` writes as it reads them), calls
:func:`record` first when built (:mod:`dmg_domainbed.datasets.when_built`), and the names rule
knows them."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from dmg_domainbed.errors import UserError


def recorded_hparams(dataset_class: type | None) -> dict[str, Any]:
    """``{name: value}`` that ``dataset_class`` records in a run's hparams (none when it
    declares nothing, or no dataset is given)."""
    declared = getattr(dataset_class, "recorded_hparams", None)
    return dict(declared()) if declared is not None else {}


def record(dataset_class: type, hparams: MutableMapping[str, Any]) -> None:
    """Write what ``dataset_class`` records into ``hparams``; :class:`UserError` when
    ``hparams`` already give one of those names another value (the dataset would replace it,
    so the run would not have it). A value only the files tell (declared ``None``) is left to
    the dataset, which writes it as it reads them, over whatever is there."""
    recorded = recorded_hparams(dataset_class)
    for name, value in recorded.items():
        if value is None:
            hparams.setdefault(name, None)
            continue
        if name in hparams and hparams[name] != value:
            raise UserError(
                f"hparam {name!r} = {json.dumps(hparams[name])} was given, but {name!r} is "
                f"recorded by dataset {dataset_class.__name__} when it is built "
                f"({json.dumps(value)}): it is not a setting. Remove it from --hparams (or "
                "the sweep file)."
            )
        hparams[name] = value
