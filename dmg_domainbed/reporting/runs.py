"""Finding and checking DomainBed training runs on disk, before any heavy import.

A run is the ``--output_dir`` of one ``domainbed.scripts.train`` process: ``results.jsonl``
(one record per checkpoint, each with train.py's ``args`` and ``hparams``), ``model.pkl``
(written when training ends) and ``done``. A sweep folder holds one run per sub-folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError

RESULTS_FILE = "results.jsonl"
MODEL_FILE = "model.pkl"
DONE_FILE = "done"


@dataclass(frozen=True)
class Run:
    """One training run: its folder and the records train.py appended to ``results.jsonl``."""

    path: Path
    records: tuple[dict[str, Any], ...]

    @property
    def args(self) -> dict[str, Any]:
        return self.records[-1]["args"]

    @property
    def hparams(self) -> dict[str, Any]:
        return self.records[-1]["hparams"]

    @property
    def algorithm(self) -> str:
        return self.args["algorithm"]

    @property
    def dataset(self) -> str:
        return self.args["dataset"]

    @property
    def test_envs(self) -> list[int]:
        return list(self.args["test_envs"])

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_FILE

    def describe(self) -> str:
        return f"{self.algorithm} on {self.dataset}, test envs {self.test_envs} ({self.path})"


def read_records(results_path: Path) -> list[dict[str, Any]]:
    """The records of one ``results.jsonl``; a half-written last line is ignored."""
    records = []
    with open(results_path) as lines:
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def run_folders(sweep_dir: Path) -> list[Path]:
    """Sub-folders of ``sweep_dir`` that hold a ``results.jsonl``, sorted by name."""
    return sorted(p.parent for p in Path(sweep_dir).glob(f"*/{RESULTS_FILE}"))


def read_run(run_dir: str | Path) -> Run:
    """Read one run folder; a wrong folder raises :class:`UserError` saying what to give."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(
            f"run folder '{path}' does not exist. Give the folder of one training run: "
            f"the --output_dir of domainbed.scripts.train, or one sub-folder of a sweep."
        )
    results = path / RESULTS_FILE
    if not results.is_file():
        hint = ""
        inside = run_folders(path)
        if inside:
            hint = (
                f" It looks like a sweep folder with {len(inside)} runs; give one of them, "
                f"e.g. --run_dir {inside[0]}"
            )
        raise UserError(
            f"'{path}' is not a DomainBed training run: it has no {RESULTS_FILE}.{hint}"
        )
    records = read_records(results)
    if not records or "args" not in records[-1]:
        raise UserError(
            f"'{results}' holds no complete record: the run has not reached its first "
            "checkpoint yet. Wait for it, or rerun it with domainbed.scripts.train."
        )
    return Run(path=path, records=tuple(records))


def require_model(run: Run) -> Path:
    """The run's ``model.pkl``, or :class:`UserError` explaining why it is missing."""
    if not run.model_path.is_file():
        raise UserError(
            f"run '{run.path}' has no {MODEL_FILE}. train.py writes it when training ends; "
            f"wait until the run has finished (a '{DONE_FILE}' file appears), or rerun it without "
            "--skip_model_save."
        )
    return run.model_path


def require_algorithm(run: Run, allowed: tuple[str, ...], command: str) -> None:
    """:class:`UserError` unless ``run`` trained one of ``allowed``; names suitable siblings."""
    if run.algorithm in allowed:
        return
    siblings = []
    for folder in run_folders(run.path.parent):
        records = read_records(folder / RESULTS_FILE)
        if records and records[-1].get("args", {}).get("algorithm") in allowed:
            siblings.append(folder)
            if len(siblings) == 4:
                break
    hint = ""
    if siblings:
        hint = f" Runs of {'/'.join(allowed)} next to it: {', '.join(map(str, siblings))}."
    raise UserError(
        f"'{run.path}' is a run of {run.algorithm}; '{command}' needs a run of "
        f"{' or '.join(allowed)}.{hint}"
    )


def require_sweep(sweep_dir: str | Path) -> Path:
    """``sweep_dir`` as a Path, or :class:`UserError` if it holds no training run."""
    path = Path(sweep_dir)
    if not path.is_dir():
        raise UserError(
            f"sweep folder '{path}' does not exist. Give the --output_dir of "
            "domainbed.scripts.sweep (or of 'dmg-domainbed demo', its 'sweep' sub-folder)."
        )
    if not run_folders(path):
        hint = ""
        if (path / RESULTS_FILE).is_file():
            hint = " It is a single run; give the folder that holds the runs (its parent)."
        elif (path / "sweep").is_dir():
            hint = f" Did you mean --input_dir {path / 'sweep'}?"
        raise UserError(
            f"no training runs in '{path}': expected sub-folders with {RESULTS_FILE}, as "
            f"domainbed.scripts.sweep writes them.{hint}"
        )
    return path
