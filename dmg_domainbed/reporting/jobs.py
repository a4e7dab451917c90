"""The jobs of a sweep folder as they stand: done, running or failed, and which diverged.

DomainBed's sweep makes one folder per job; train.py writes ``out.txt`` and ``err.txt`` first,
a record in ``results.jsonl`` at every checkpoint and ``done`` last. A job folder (a sub-folder
holding one of these files, or still empty) is done when it has ``done``; running when the
sweep's folder lock is held by a live command or a registered launcher's ``running_jobs`` says
its job is queued or runs; failed otherwise; and diverged, whatever its state, when a loss it
logged is not finite. Records are read in ``os.listdir`` order, as ``collect_results`` reads
them, checked, and a run not in fp32 is named ``<algorithm> (<precision>)``: the one rule by
which every report (``report``, ``select``, ``evaluate``) tells runs of two precisions apart.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dmg_domainbed import precision as precisions
from dmg_domainbed import runs
from dmg_domainbed.errors import UserError
from dmg_domainbed.runs import DONE_FILE, RESULTS_FILE

DONE, RUNNING, FAILED = "done", "running", "failed"
# What train.py writes into a job folder (out.txt and err.txt as it starts).
JOB_FILES = (RESULTS_FILE, DONE_FILE, "out.txt", "err.txt")
NAMED = 3  # jobs named per state in a summary

Cell = tuple[str, str, int]  # (dataset, algorithm, test env): one cell of collect_results


@dataclass(frozen=True)
class Job:
    """One job folder of a sweep, its records and its state."""

    folder: Path
    records: tuple[dict[str, Any], ...]
    state: str = FAILED
    diverged: str | None = None  # the first non-finite loss, e.g. 'loss nan at step 300'

    def cells(self) -> set[Cell]:
        """The collect_results cells its records are part of (none before its first record)."""
        if not self.records:
            return set()
        args = self.records[-1]["args"]
        return {(args["dataset"], args["algorithm"], env) for env in args["test_envs"]}

    def name(self) -> str:
        if not self.records:
            return f"{self.folder.name} (no record yet)"
        a = self.records[-1]["args"]
        envs = ",".join(str(env) for env in a["test_envs"])
        seeds = f"hparams {a['hparams_seed']}, trial {a['trial_seed']}"
        return f"{a['algorithm']} on {a['dataset']}, test env {envs}, {seeds} ({self.folder.name})"


def read_jobs(sweep_dir: str | Path) -> list[Job]:
    """Every job folder of the sweep with its records (checked), in ``os.listdir`` order."""
    jobs = []
    for name in os.listdir(sweep_dir):
        folder = Path(sweep_dir) / name
        results = folder / RESULTS_FILE
        if results.is_file():
            records = runs.read_records(results)
            runs.check_fields(records, results, runs.SWEEP)
            runs.check_environments(records, results)
            jobs.append(Job(folder, tuple(map(as_reported, records))))
        elif not name.startswith(".") and folder.is_dir():
            if any((folder / file).exists() for file in JOB_FILES) or not any(folder.iterdir()):
                jobs.append(Job(folder, ()))
    return jobs


def precision(record: dict[str, Any]) -> str:
    """The precision a run trained in: its hparam ``precision``, ``fp32`` where absent."""
    return record["hparams"].get(precisions.HPARAM, precisions.FP32)


def reported_algorithm(record: dict[str, Any]) -> str:
    """The name a run's numbers are reported under: its algorithm, as ``<algorithm>
    (<precision>)`` unless in fp32 (``ERM (bf16)``). Every table of runs (``report``,
    ``select``, ``evaluate``) names its rows by it, and ``report`` its pictures and TensorBoard
    runs, so that DomainBed's grouping never pools runs of two precisions."""
    algorithm, trained_in = record["args"]["algorithm"], precision(record)
    return algorithm if trained_in == precisions.FP32 else f"{algorithm} ({trained_in})"


def as_reported(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its algorithm named by :func:`reported_algorithm`."""
    if precision(record) == precisions.FP32:
        return record
    return {**record, "args": {**record["args"], "algorithm": reported_algorithm(record)}}


def trained_algorithm(record: dict[str, Any]) -> str:
    """The algorithm a run of :func:`read_jobs` trained: its reported name without the
    precision that :func:`as_reported` added (``ERM`` of ``ERM (bf16)``)."""
    algorithm, trained_in = record["args"]["algorithm"], precision(record)
    return (
        algorithm if trained_in == precisions.FP32 else algorithm.removesuffix(f" ({trained_in})")
    )


def precisions_note(records: Iterable[dict[str, Any]]) -> str:
    """What the names of runs not in fp32 mean, when ``records`` (one per run) hold any."""
    found = sorted({precision(record) for record in records})
    if found in ([], [precisions.FP32]):
        return ""
    return (
        f"Precision: the runs are in {' and '.join(found)}. Runs of different precisions are "
        "never pooled: a run not in fp32 is reported as '<algorithm> (<precision>)', e.g. "
        "'ERM (bf16)', in its own row."
    )


@dataclass(frozen=True)
class SweepJobs:
    """A sweep's jobs; what runs the running ones; what could not be asked."""

    jobs: tuple[Job, ...]
    why_running: str = ""
    notes: tuple[str, ...] = ()

    def of(self, state: str) -> list[Job]:
        return [job for job in self.jobs if job.state == state]

    def diverged(self) -> list[Job]:
        return [job for job in self.jobs if job.diverged]

    def records(self):
        """Every record, as DomainBed's ``reporting.load_records`` gives them (a ``Q``)."""
        from domainbed.lib.query import Q

        return Q([record for job in self.jobs for record in job.records])

    def unfinished_cells(self) -> set[Cell]:
        return {cell for job in self.jobs if job.state != DONE for cell in job.cells()}

    def diverged_cells(self) -> Counter[Cell]:
        return Counter(cell for job in self.diverged() for cell in job.cells())

    def complete(self) -> bool:
        return all(job.state == DONE for job in self.jobs)

    def summary(self) -> str:
        done, running, failed = self.of(DONE), self.of(RUNNING), self.of(FAILED)
        diverged = self.diverged()
        if self.complete() and not diverged:
            return f"Jobs: all {len(self.jobs)} jobs of the sweep are done."
        counts = f"{len(done)} done, {len(running)} running, {len(failed)} failed"
        lines = [f"Jobs: {len(self.jobs)} in the sweep: {counts}; {len(diverged)} diverged."]
        if running:
            lines.append(f"  running ({self.why_running}): {_named(running)}")
        if failed:
            lines.append(
                f"  failed (no '{DONE_FILE}' file and nothing runs them; see err.txt in each "
                f"folder): {_named(failed)}"
            )
        if diverged:
            named = _named(diverged, lambda job: f"{job.name()}: {job.diverged}")
            lines.append(
                f"  diverged (a logged loss is NaN or infinite; their accuracies come from "
                f"broken weights; lower lr or the penalty weights): {named}"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def precisions_note(self) -> str:
        return precisions_note(record for job in self.jobs for record in job.records[-1:])


def _named(jobs: list[Job], describe=Job.name) -> str:
    shown = "; ".join(describe(job) for job in jobs[:NAMED])
    return shown + (f"; and {len(jobs) - NAMED} more" if len(jobs) > NAMED else "")


def sweep_jobs(sweep_dir: str | Path) -> SweepJobs:
    """The sweep's jobs with their states (see the module's description)."""
    from dmg_domainbed.locks import FolderLock

    jobs = [
        replace(job, state=DONE if (job.folder / DONE_FILE).exists() else FAILED)
        for job in read_jobs(sweep_dir)
    ]
    jobs = [replace(job, diverged=runs.divergence(job.records)) for job in jobs]
    unfinished = [job.folder for job in jobs if job.state != DONE]
    why, running, notes = "", set(), ()
    if unfinished:
        holder = FolderLock(sweep_dir).holder()
        if holder is not None and not holder.stale():
            why, running = f"the sweep's folder is locked by {holder.describe()}", set(unfinished)
        else:
            why, running, notes = _launchers_running(unfinished)
    jobs = [replace(job, state=RUNNING) if job.folder in running else job for job in jobs]
    return SweepJobs(tuple(jobs), why, notes)


def _launchers_running(folders: list[Path]) -> tuple[str, set[Path], tuple[str, ...]]:
    """Which of ``folders`` registered launchers say still run, who said so, who could not."""
    from domainbed import command_launchers

    running: set[Path] = set()
    said, notes = [], []
    for name, launcher in command_launchers.REGISTRY.items():
        running_jobs = getattr(launcher, "running_jobs", None)
        if running_jobs is None:
            continue
        try:
            found = set(running_jobs(folders, os.environ))
        except UserError as error:
            notes.append(f"launcher {name} could not say whether its jobs still run: {error}")
            continue
        if found:
            said.append(name)
            running |= found
    why = f"launcher {' and '.join(said)} says they are queued or running"
    return why, running, tuple(notes)
