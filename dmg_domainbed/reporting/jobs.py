"""The jobs of a sweep folder as they stand, and the names their runs are reported under.

A job folder (a sub-folder holding a file train.py writes, or still empty) is done when it has
``done``; running when a live command holds the sweep's folder lock or a registered launcher's
``running_jobs`` says so; failed otherwise; diverged, whatever its state, when a logged loss is
not finite. Records are read in ``os.listdir`` order, as ``collect_results`` reads them, and
each run named by :func:`reported_names`, the one rule by which every report keeps apart runs
that DomainBed's grouping would pool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dmg_domainbed import precision as precisions
from dmg_domainbed import runs
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams.every_algorithm import DOMAINBED_PROTOCOL, PROTOCOL
from dmg_domainbed.runs import DONE_FILE, RESULTS_FILE
from dmg_domainbed.shortlist import shortlist

DONE, RUNNING, FAILED = "done", "running", "failed"
# What train.py writes into a job folder (out.txt and err.txt as it starts).
JOB_FILES = (RESULTS_FILE, DONE_FILE, "out.txt", "err.txt")
NAMED = 3  # jobs named per state in a summary

Cell = tuple[str, str, int]  # (dataset, algorithm, test env): one cell of collect_results


@dataclass(frozen=True)
class Job:
    """One job folder of a sweep, its records and its state."""

    folder: Path
    records: tuple[dict[str, Any], ...]  # as the reports read them (:func:`renamed`)
    state: str = FAILED
    empty: bool = False  # a folder with nothing in it: no job ran there
    diverged: str | None = None  # the first non-finite loss, e.g. 'loss nan at step 300'
    trained: dict[str, Any] | None = None  # its last record as train.py wrote it

    def cells(self) -> set[Cell]:
        """The collect_results cells its records are part of (none before its first record)."""
        if not self.records:
            return set()
        args = self.records[-1]["args"]
        return {(args["dataset"], args["algorithm"], env) for env in args["test_envs"]}

    def name(self) -> str:
        if not self.records:
            return f"{self.folder.name} ({'empty' if self.empty else 'no record yet'})"
        a = self.records[-1]["args"]
        envs = ",".join(str(env) for env in a["test_envs"])
        seeds = f"hparams {a['hparams_seed']}, trial {a['trial_seed']}"
        return f"{a['algorithm']} on {a['dataset']}, test env {envs}, {seeds} ({self.folder.name})"


def read_jobs(*sweep_dirs: str | Path) -> list[Job]:
    """Every job folder of the sweeps with its records, checked and :func:`renamed` (the runs
    of several sweeps by one rule), done or not, diverged or not (:func:`sweep_jobs` tells
    running from failed); :class:`UserError` for a job found in two of them."""
    found: list[tuple[Path, list[dict[str, Any]], bool]] = []
    for sweep_dir in sweep_dirs:
        for name in os.listdir(sweep_dir):
            folder = Path(sweep_dir) / name
            results = folder / RESULTS_FILE
            if results.is_file():
                require_utf8_name(folder)
                records = runs.read_records(results)
                runs.check_fields(records, results, runs.SWEEP)
                runs.check_environments(records, results)
                found.append((folder, records, False))
            elif not name.startswith(".") and folder.is_dir():
                empty = not any(folder.iterdir())
                if empty or any((folder / file).exists() for file in JOB_FILES):
                    found.append((require_utf8_name(folder), [], empty))
    first: dict[str, Path] = {}  # a job's folder name -> where it was found first
    for folder, _, _ in found:
        if (other := first.setdefault(folder.name, folder)) is not folder:
            raise UserError(
                f"'{other}' and '{folder}' are one job (DomainBed names a job's folder by its "
                "train.py arguments): its runs would be counted twice. Give each sweep once."
            )
    names = reported_names({folder: records[-1] for folder, records, _ in found if records})
    jobs = []
    for folder, records, empty in found:
        shown = tuple(renamed(record, names[folder], folder) for record in records)
        state = DONE if (folder / DONE_FILE).exists() else FAILED
        trained = records[-1] if records else None
        jobs.append(Job(folder, shown, state, empty, runs.divergence(shown), trained))
    return jobs


def require_utf8_name(folder: Path) -> Path:
    """``folder``, unless its path is not valid UTF-8, which the reports' files could not name."""
    try:
        str(folder).encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(folder)
        quoted = "".join(
            chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}" for b in raw
        )
        raise UserError(
            f"run folder {raw!r} has a name that is not valid UTF-8 (its bytes are shown), and "
            "the reports name every run's folder in their UTF-8 files. Nothing was written. "
            f"Rename it to a UTF-8 name, e.g. in bash: mv $'{quoted}' NEW_NAME, or move it out "
            "of the folder read."
        ) from None
    return folder


def precision(record: dict[str, Any]) -> str:
    """The precision a run trained in: its hparam ``precision``, ``fp32`` where absent."""
    return record["hparams"].get(precisions.HPARAM, precisions.FP32)


def protocol(record: Mapping[str, Any]) -> str:
    """The sweep protocol a run belongs to: its hparam ``protocol``, DomainBed's where absent."""
    return record["hparams"].get(PROTOCOL, DOMAINBED_PROTOCOL)


def fixed_hparams(record: Mapping[str, Any], where: Path) -> dict[str, str]:
    """The run's ``--hparams`` (``args.hparams``) as JSON text, less precision and protocol."""
    given = record["args"].get("hparams")
    try:
        found = json.loads(given) if given else {}
    except (TypeError, ValueError):
        found = None
    if not isinstance(found, dict):
        raise UserError(
            f"'{where}' records --hparams {given!r}, which is not a JSON object as train.py "
            "reads it (e.g. '{\"lr\": 0.001}'): it was not written by domainbed.scripts.train. "
            "Move that folder out of the sweep folder, or rerun the run."
        )
    return {
        name: json.dumps(value, sort_keys=True)
        for name, value in found.items()
        if name not in (precisions.HPARAM, PROTOCOL)
    }


def differing_hparams(last: Mapping[Path, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Algorithm -> the fixed hparams in which runs of it on one dataset differ."""
    fixed: dict[tuple[str, str], list[dict[str, str]]] = {}
    for folder, record in last.items():
        pair = (record["args"]["algorithm"], record["args"]["dataset"])
        fixed.setdefault(pair, []).append(fixed_hparams(record, folder))
    differing: dict[str, set[str]] = {}
    for (algorithm, _), given in fixed.items():
        names = {name for hparams in given for name in hparams}
        found = {name for name in names if len({hparams.get(name) for hparams in given}) > 1}
        differing.setdefault(algorithm, set()).update(found)
    return {algorithm: sorted(names) for algorithm, names in differing.items() if names}


def reported_names(last: Mapping[Path, Mapping[str, Any]]) -> dict[Path, str]:
    """Run folder -> the name its numbers are reported under: its algorithm, then in brackets
    its precision unless fp32, its protocol unless DomainBed's and its values of the fixed
    hparams in which runs of its algorithm differ (``DMG (bf16, lr=0.05)``)."""
    differing, names = differing_hparams(last), {}
    for folder, record in last.items():
        algorithm, fixed = record["args"]["algorithm"], fixed_hparams(record, folder)
        parts = [precision(record), str(protocol(record))]
        parts = [p for p in parts if p not in (precisions.FP32, DOMAINBED_PROTOCOL)]
        parts += [f"{n}={fixed[n]}" for n in differing.get(algorithm, []) if n in fixed]
        names[folder] = f"{algorithm} ({', '.join(parts)})" if parts else algorithm
    return names


def renamed(record: dict[str, Any], name: str, folder: Path) -> dict[str, Any]:
    """``record`` named ``name``, its ``output_dir`` the (absolute) folder it was read from."""
    where = str(folder.absolute())
    return {**record, "args": {**record["args"], "algorithm": name, "output_dir": where}}


def names_notes(last: Mapping[Path, Mapping[str, Any]]) -> list[str]:
    """What the runs' names mean, where any is not its algorithm's plain name."""
    notes = []
    if (found := sorted({precision(r) for r in last.values()})) not in ([], [precisions.FP32]):
        notes.append(
            f"Precision: the runs are in {' and '.join(found)}. Runs of different precisions "
            "are never pooled: a run not in fp32 is reported as '<algorithm> (<precision>)', "
            "e.g. 'ERM (bf16)', in its own row."
        )
    if any(protocol(record) != DOMAINBED_PROTOCOL for record in last.values()):
        notes.append(
            "Protocol: runs of a search_once sweep (hparams searched on trial 0 only, the "
            "winners trained on the other trials) are reported as '<algorithm> (search_once)', "
            "in their own rows, never pooled with DomainBed's protocol; their trials' spread "
            "leaves out the variance of the hparam search."
        )
    if differing := differing_hparams(last):
        named = "; ".join(f"{a}: {', '.join(names)}" for a, names in differing.items())
        example = next(n for n in reported_names(last).values() if "=" in n)
        notes.append(
            f"Fixed hparams: runs of one algorithm were given different --hparams ({named}). "
            "Runs that differ in them are never pooled: each is reported in its own row, named "
            f"by the values it was given, e.g. '{example}' (a run not given one keeps the plain "
            "name). Hparams drawn by the random search (hparams_seed) are pooled as "
            "collect_results pools them."
        )
    return notes


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
        from domainbed.lib.query import Q

        return Q([record for job in self.jobs for record in job.records])

    def complete(self) -> bool:
        return all(job.state == DONE for job in self.jobs)

    def summary(self) -> str:
        done, running = self.of(DONE), self.of(RUNNING)
        failed = [job for job in self.of(FAILED) if not job.empty]
        empty = [job for job in self.of(FAILED) if job.empty]
        diverged = self.diverged()
        if self.complete() and not diverged:
            return f"Jobs: all {len(self.jobs)} jobs of the sweep are done."
        counts = f"{len(done)} done, {len(running)} running, {len(failed)} failed"
        counts += f", {len(empty)} empty folder(s)" if empty else ""
        lines = [f"Jobs: {len(self.jobs)} in the sweep: {counts}; {len(diverged)} diverged."]
        if running:
            lines.append(f"  running ({self.why_running}): {_named(running)}")
        if failed:
            lines.append(
                f"  failed (no '{DONE_FILE}' file and nothing runs them; see err.txt in each "
                f"folder): {_named(failed)}"
            )
        if empty:
            lines.append(
                "  empty folders (nothing in them: no job ran there, or one stopped before "
                f"train.py wrote its first file; no record to report): {_named(empty)}. A sweep "
                "takes such a folder for an incomplete job and skips it: once nothing runs, "
                "delete them (dmg-domainbed sweep --delete-incomplete, or DomainBed's sweep "
                "delete_incomplete) and launch the sweep again to run their jobs."
            )
        if diverged:
            named = _named(diverged, lambda job: f"{job.name()}: {job.diverged}")
            lines.append(
                f"  diverged (a logged loss is NaN or infinite; their accuracies come from "
                f"broken weights; lower lr or the penalty weights): {named}"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def names_notes(self) -> list[str]:
        return names_notes({job.folder: job.trained for job in self.jobs if job.trained})

    def trained_algorithms(self) -> dict[str, str]:
        """The name each run is reported under -> the algorithm it trained."""
        trained = [job for job in self.jobs if job.trained]
        return {j.records[-1]["args"]["algorithm"]: j.trained["args"]["algorithm"] for j in trained}


def _named(jobs: list[Job], describe=Job.name) -> str:
    return shortlist([describe(job) for job in jobs], NAMED, "; ", "; and ")


def sweep_jobs(*sweep_dirs: str | Path) -> SweepJobs:
    """The sweeps' jobs with their states (see the module's description)."""
    from dmg_domainbed.locks import FolderLock

    jobs = read_jobs(*sweep_dirs)
    unfinished = [job.folder for job in jobs if job.state != DONE]
    holders = {Path(d).resolve(): FolderLock(d).holder() for d in sweep_dirs if unfinished}
    live = {sweep: h for sweep, h in holders.items() if h is not None and not h.stale()}
    # a live command that holds a sweep's folder runs its unfinished jobs
    running = {job for job in unfinished if job.parent.resolve() in live}
    why = (
        f"the sweep's folder is locked by {next(iter(live.values())).describe()}" if running else ""
    )
    rest, said, notes = [job for job in unfinished if job not in running], [], []
    if rest:  # only then are the launchers (and their plugins) loaded and asked
        from domainbed import command_launchers

        for name, launcher in command_launchers.REGISTRY.items():
            if (running_jobs := getattr(launcher, "running_jobs", None)) is None:
                continue
            try:
                found = set(running_jobs(rest, os.environ))
            except UserError as error:
                notes.append(f"launcher {name} could not say whether its jobs still run: {error}")
                continue
            said += [name] if found else []
            running |= found
        why = why or f"launcher {' and '.join(said)} says they are queued or running"
    jobs = [replace(job, state=RUNNING) if job.folder in running else job for job in jobs]
    return SweepJobs(tuple(jobs), why, tuple(notes))
