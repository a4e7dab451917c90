"""Whether a run's training diverged: a loss it logged became NaN or infinite.

train.py logs, next to the accuracies, every number its algorithm's ``update`` returns; the
losses are named so (``loss``, DANN's ``disc_loss``, SagNet's ``loss_c``, DMG's total ``loss``
...). ``json`` writes a NaN or infinite float as ``NaN`` / ``Infinity`` and reads it back as one.
A run whose loss diverged still ends with exit status 0 and a ``done`` file, and its accuracies
are those of whatever its weights became, so every place that shows its numbers flags it.

Stdlib only (as :mod:`.runs` at import): the ``local_parallel`` launcher asks it about each job
that ends.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dmg_domainbed.reporting.runs import RESULTS_FILE


def divergence(records: Iterable[Mapping[str, Any]]) -> str | None:
    """``'loss nan at step 300'``: the first loss a record logged that is not finite; ``None``
    when every logged loss is finite."""
    for record in records:
        for key, value in record.items():
            if "loss" in key.lower() and isinstance(value, float) and not math.isfinite(value):
                return f"{key} {value} at step {record.get('step', '?')}"
    return None


def folder_divergence(folder: Path) -> str | None:
    """:func:`divergence` of the records in ``folder``'s ``results.jsonl`` (none when it is
    missing; lines that are not JSON, like a half-written last one, are passed over)."""
    try:
        lines = (Path(folder) / RESULTS_FILE).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return divergence(record for record in records if isinstance(record, dict))


def warnings(runs: Iterable[Any]) -> list[str]:
    """A warning line for each diverged one of ``runs`` (:class:`~.runs.Run`)."""
    lines = []
    for run in runs:
        diverged = divergence(run.records)
        if diverged:
            lines.append(
                f"WARNING: {run.describe()} diverged ({diverged}): its numbers come from the "
                "weights that non-finite losses left. Lower lr or the penalty weights and rerun it."
            )
    return lines
