"""Run every smoke job as a sweep runs it, one at a time, measure it, and report.

Each job is DomainBed's own command for it (its sweep ``Job``'s ``train.py`` arguments) in a
fresh process with the sweep's ``python``, writing only in the check's temporary folder:
:data:`WARMUP_STEPS` steps, then those asked for, a checkpoint at the first and the last step,
timed by :mod:`.clock`.
Seconds per step are the median after the warm-up (which pays for lazy initialisation and the
first batches); evaluation is per image, from the last checkpoint, so a sample of the data
measures the whole dataset's cost. Peak memory is train.py's ``mem_gb`` on a GPU, else the peak
resident memory of the job's largest process.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tabulate import tabulate

from dmg_domainbed.errors import SCRIPT_ERROR_PREFIX
from dmg_domainbed.launchers.common import signal_group
from dmg_domainbed.preflight.environment import job_environment
from dmg_domainbed.smoke.clock import phases
from dmg_domainbed.smoke.jobs import SmokeJob
from dmg_domainbed.smoke.staging import Staged, Staging
from dmg_domainbed.sweep import cost
from dmg_domainbed.sweep.plan import job_costs

OK, FAILED, TIMED_OUT, NOT_RUN = "ok", "failed", "timed out", "not run"
LOG_TAIL_LINES, ERROR_WIDTH = 25, 60
#: Steps run before the timed ones, left out of the median.
WARMUP_STEPS = 3
RESULTS_FORMAT = 1


@dataclass(frozen=True)
class Outcome:
    """What became of one job."""

    status: str
    detail: str = ""  # the error, or why it did not run
    seconds_per_step: float | None = None  # the median after the warm-up
    peak_memory_gb: float | None = None
    log_tail: str = ""
    wall_seconds: float = 0.0
    start_seconds: float | None = None  # process start to first step, and last evaluation to exit
    eval_seconds_per_image: float | None = None

    def summary(self) -> str:
        if self.status != OK:
            return f"{self.status}: {self.detail}"
        return (
            f"ok, {self.seconds_per_step:.4f} s/step, start and end {self.start_seconds:.1f} s, "
            f"evaluation {1000 * self.eval_seconds_per_image:.3f} ms/image, "
            f"{self.peak_memory_gb:.2f} GB peak ({self.wall_seconds:.0f} s)"
        )


def smoke_check(
    jobs: Sequence[SmokeJob],
    data_dir: str | None,
    steps: int,
    timeout: float,
    synthetic: bool = False,
    synthetic_data_dir: Path | None = None,
    results_file: Path | None = None,
) -> bool:
    """Run ``jobs`` for :data:`WARMUP_STEPS` and ``steps`` timed steps each in a temporary
    folder, print each outcome and the report; whether every job ran. With ``synthetic``,
    missing datasets (in ``synthetic_data_dir``, kept, if given) and weights get stand-ins; with
    ``results_file``, the measures are written there too, for ``sweep --dry-run --cost-from``."""
    print(
        f"Smoke check: {len(jobs)} job(s), {WARMUP_STEPS} warm-up and {steps} timed steps each, "
        "through DomainBed's train in fresh processes"
        + (" (synthetic stand-ins for what is missing)" if synthetic else "")
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"  # counts GPUs, starts no CUDA
    with tempfile.TemporaryDirectory(prefix="dmg-smoke-") as root:
        synthetic_dir = Path(synthetic_data_dir or Path(root) / "synthetic_data").absolute()
        staging = Staging(Path(root), data_dir, synthetic_dir if synthetic else None)
        rows = []
        for index, staged in enumerate(staging.stage(list(jobs)), 1):
            if staged.problems:
                outcome = Outcome(NOT_RUN, "; ".join(staged.problems))
            else:
                outcome = run_job(staged, steps, Path(root) / "runs", device, timeout)
            job = staged.job
            print(f"[{index}/{len(jobs)}] {job.algorithm} on {job.dataset}: {outcome.summary()}")
            rows.append((staged, outcome))
        print(report(rows, staging.notes, device, steps))
        if results_file is not None:
            results_file.write_text(json.dumps(_results(rows, device, steps), indent=1) + "\n")
            print(f"Measures written to {results_file}")
        return all(outcome.status == OK for _, outcome in rows)


def _results(rows: list[tuple[Staged, Outcome]], device: str, steps: int) -> dict:
    """What ``--json`` writes: the machine, when, and each job's measures with its train
    arguments (those of the sweep's job it stood for, before smoke shortened it)."""
    return {
        "format": RESULTS_FORMAT,
        "kind": "smoke",
        "command": shlex.join(["dmg-domainbed", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": _machine(device)[1],
        "warmup_steps": WARMUP_STEPS,
        "timed_steps": steps,
        "rows": [
            {
                "algorithm": staged.job.algorithm,
                "dataset": staged.job.dataset,
                "train_args": dict(staged.job.train_args),
                "batch_size": staged.job.batch_size,
                "source_domains": int(staged.job.batch.split("x")[0]),
                "status": outcome.status,
                "stand_ins": staged.stand_ins,
                "seconds_per_step": outcome.seconds_per_step,
                "start_seconds": outcome.start_seconds,
                "eval_seconds_per_image": outcome.eval_seconds_per_image,
                "peak_memory_gb": outcome.peak_memory_gb,
            }
            for staged, outcome in rows
        ],
    }


def _machine(device: str) -> tuple[str, str]:
    """(the memory peak GB measures, the device in words)."""
    if device == "cuda":  # read only now: it starts CUDA here, which holds the GPU
        gpu = torch.cuda.get_device_properties(0)
        return "GPU", f"cuda: {gpu.name}, {gpu.total_memory / 2**30:.0f} GiB"
    return "host", f"cpu: {os.cpu_count()} cores, no CUDA device"


def run_job(staged: Staged, steps: int, runs: Path, device: str, timeout: float) -> Outcome:
    """Run and measure one staged job for :data:`WARMUP_STEPS` and ``steps`` steps."""
    from domainbed.scripts.sweep import Job

    total = WARMUP_STEPS + steps  # a checkpoint at the first and the last step only
    train_args = {**staged.job.train_args, "steps": total, "checkpoint_freq": total}
    train_args.pop("data_dir", None)
    if staged.data_dir is not None:
        train_args["data_dir"] = staged.data_dir
    job = Job(train_args, str(runs))
    output = Path(job.output_dir)
    output.mkdir(parents=True)
    log_path, times_path = output.with_suffix(".log"), output.with_suffix(".times.json")
    python, _, _, *arguments = shlex.split(job.command_str)  # python -m domainbed.scripts.train
    command = [python, "-m", "dmg_domainbed.smoke.clock", str(times_path), *arguments]
    start, started = time.monotonic(), time.time()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=job_environment({**os.environ, **staged.environment}),
            cwd=output,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout stops its workers too
        )
        code, rusage = _wait(process, timeout)
    wall, ended = time.monotonic() - start, time.time()
    log_text = log_path.read_text(errors="replace")
    tail = "\n".join(log_text.splitlines()[-LOG_TAIL_LINES:])
    if code is None:
        detail = f"no result within {timeout:.0f} s"
        return Outcome(TIMED_OUT, detail, log_tail=tail, wall_seconds=wall)
    if code != 0 or not (output / "done").exists():
        return Outcome(FAILED, _error_line(log_text), log_tail=tail, wall_seconds=wall)
    # train.py writes a record at its last step before it writes "done".
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    if device == "cuda":
        peak = max(float(record.get("mem_gb", 0.0)) for record in records)
    else:  # ru_maxrss: kilobytes on Linux, bytes on macOS
        peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 2**30
    timed = phases(started, ended, json.loads(times_path.read_text()))
    median, evaluation = timed.step_median(WARMUP_STEPS), timed.eval_seconds_per_image()
    return Outcome(OK, "", median, peak, tail, wall, timed.start + timed.end, evaluation)


def _wait(process: subprocess.Popen, timeout: float):
    """(exit code, rusage) of ``process``; (None, None) after killing its group at ``timeout``
    (or at any exception here, e.g. Ctrl-C, which its own session does not receive)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                return process.returncode, rusage
            time.sleep(0.2)
        return None, None
    finally:
        if process.returncode is None:
            signal_group(process.pid)
            process.wait()


def _error_line(log: str) -> str:
    """What a failed train.py ended with: the package's message, or its exception's line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if line.startswith(SCRIPT_ERROR_PREFIX.strip()):
            return line
        if head.endswith(("Error", "Exception", "Interrupt")) or head in ("Killed", "Aborted"):
            return line
    return lines[-1] if lines else "no output"


def _status(staged: Staged, outcome: Outcome) -> str:
    if outcome.status == OK:
        return "ok" + (f" ({', '.join(staged.stand_ins)})" if staged.stand_ins else "")
    status = f"{outcome.status}: {outcome.detail}"
    return status if len(status) <= ERROR_WIDTH else status[: ERROR_WIDTH - 3] + "..."


def _hours(results: list[tuple[Staged, Outcome]], device: str, steps: int) -> list:
    """The hours of the jobs each row stands for, from this check's measures (``None``: not run)."""
    jobs = job_costs([args for staged, _ in results for args in staged.job.sweep_args])
    table = cost.table_from_smoke(_results(results, device, steps), "this check")
    lines = {(line.dataset, line.algorithm): line for line in cost.estimate(jobs, [table])}
    return [lines[(staged.job.dataset, staged.job.algorithm)].hours[0] for staged, _ in results]


def report(results: list[tuple[Staged, Outcome]], notes: list[str], device: str, steps: int) -> str:
    """The notes; the table (algorithm x dataset: status, s/step, peak memory, the sweep's
    estimated hours) and how to read it; the end of each failed job's output; the verdict."""
    hours = _hours(results, device, steps)
    rows = [
        {
            "algorithm": staged.job.algorithm,
            "dataset": staged.job.dataset,
            "batch": staged.job.batch,
            "status": _status(staged, outcome),
            "s/step": _number(outcome.seconds_per_step, 4),
            "start s": _number(outcome.start_seconds, 1),
            "eval ms/image": _number(outcome.eval_seconds_per_image, 3, scale=1000),
            "peak GB": _number(outcome.peak_memory_gb, 2),
            "jobs": len(staged.job.sweep_args),
            "est. hours": _number(row_hours, 2),
        }
        for (staged, outcome), row_hours in zip(results, hours, strict=True)
    ]
    unknown = hours.count(None)
    total = f"{sum(h or 0 for h in hours):.2f}" + (f" + {unknown} unknown" if unknown else "")
    rows.append({"algorithm": "total", "jobs": sum(r["jobs"] for r in rows), "est. hours": total})
    memory, machine = _machine(device)
    lines = [
        "",
        *(f"note: {note}" for note in notes),
        "",
        tabulate(rows, "keys", tablefmt="simple", disable_numparse=True),
        "",
        f"device: {machine}; {WARMUP_STEPS} warm-up and {steps} timed steps a job, DomainBed's "
        "train",
        "batch: source domains x examples per domain; s/step: the median of the timed steps "
        "(data loading included, as train.py's step_time); start s: process start to the first "
        "step and last evaluation to exit; eval ms/image: the last checkpoint's evaluation per "
        f"image; peak GB: peak {memory} memory",
        "jobs: the sweep's jobs the row stands for (itself alone without a sweep file); est. "
        "hours: theirs on one such device, from these measures: steps x batch x source domains "
        "x s/step per image, evaluated images x eval s/image, start and end (`sweep FILE "
        "--dry-run --cost-from` with --json's file gives the same beside the package's GPU "
        "figures)",
    ]
    failed = [(staged.job, outcome) for staged, outcome in results if outcome.status != OK]
    for job, outcome in failed:
        if outcome.log_tail:
            header = f"--- {job.algorithm} on {job.dataset}: last lines of its output ---"
            lines += ["", header, outcome.log_tail]
    stand_ins = sorted({name for staged, _ in results for name in staged.stand_ins})
    if failed:
        names = ", ".join(f"{job.algorithm} on {job.dataset}" for job, _ in failed)
        verdict = f"NOT READY: {len(failed)} job(s) did not run: {names}"
    elif stand_ins:
        verdict = (
            f"Every job ran, with {' and '.join(stand_ins)} standing in for what is missing: "
            "the sweep itself needs the real ones (see the notes)"
        )
    else:
        verdict = "READY: every job ran"
    return "\n".join([*lines, "", verdict])


def _number(value: float | None, digits: int, scale: float = 1) -> str:
    return "-" if value is None else f"{scale * value:.{digits}f}"
