"""Run every smoke job as a sweep runs it, one at a time, measure it, and report.

Each job is DomainBed's own command for it (its sweep ``Job``'s ``command_str``: ``python -m
domainbed.scripts.train`` with the job's arguments), in a fresh process with the ``python`` the
sweep's jobs use, writing only inside the check's temporary folder. Seconds per step are what
``train.py`` logs (``step_time`` of its last record: the steps after the first, which pays for
warm-up). Peak memory on a GPU is ``torch.cuda.max_memory_allocated`` (train.py's ``mem_gb``);
on a CPU the peak resident memory of the job's largest process, from the operating system.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
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
from dmg_domainbed.preflight.environment import job_environment
from dmg_domainbed.smoke.jobs import SmokeJob, Staged, Staging

OK, FAILED, TIMED_OUT, NOT_RUN = "ok", "failed", "timed out", "not run"
LOG_TAIL_LINES, ERROR_WIDTH = 25, 60


@dataclass(frozen=True)
class Outcome:
    """What became of one job."""

    status: str
    detail: str = ""  # the error, or why it did not run
    seconds_per_step: float | None = None
    peak_memory_gb: float | None = None
    log_tail: str = ""
    wall_seconds: float = 0.0

    def summary(self) -> str:
        if self.status != OK:
            return f"{self.status}: {self.detail}"
        measured = f"{self.seconds_per_step:.3f} s/step, {self.peak_memory_gb:.2f} GB peak"
        return f"ok, {measured} ({self.wall_seconds:.0f} s)"


def smoke_check(
    jobs: Sequence[SmokeJob],
    data_dir: str | None,
    steps: int,
    timeout: float,
    synthetic: bool = False,
    synthetic_data_dir: Path | None = None,
) -> bool:
    """Run ``jobs`` for ``steps`` steps each, print each outcome and the report; whether every
    job ran. Everything is written inside a new temporary folder, removed at the end; with
    ``synthetic``, missing datasets and weights get stand-ins, the datasets in
    ``synthetic_data_dir`` when given (kept), else in the temporary folder."""
    print(
        f"Smoke check: {len(jobs)} job(s), {steps} steps each, through DomainBed's train in "
        "fresh processes" + (" (synthetic stand-ins for what is missing)" if synthetic else "")
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
        return all(outcome.status == OK for _, outcome in rows)


def run_job(staged: Staged, steps: int, runs: Path, device: str, timeout: float) -> Outcome:
    """Run one staged job for ``steps`` steps under ``runs`` and measure it."""
    from domainbed.scripts.sweep import Job

    train_args = {**staged.job.train_args, "steps": steps, "data_dir": staged.data_dir}
    if staged.data_dir is None:
        del train_args["data_dir"]
    job = Job(train_args, str(runs))
    output = Path(job.output_dir)
    output.mkdir(parents=True)
    log_path = output.with_suffix(".log")
    start = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            shlex.split(job.command_str),
            env=job_environment({**os.environ, **staged.environment}),
            cwd=output,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout stops its workers too
        )
        code, rusage = _wait(process, timeout)
    wall = time.monotonic() - start
    log_text = log_path.read_text(errors="replace")
    tail = "\n".join(log_text.splitlines()[-LOG_TAIL_LINES:])
    if code is None:
        return Outcome(
            TIMED_OUT, f"no result within {timeout:.0f} s", log_tail=tail, wall_seconds=wall
        )
    if code != 0 or not (output / "done").exists():
        return Outcome(FAILED, _error_line(log_text), log_tail=tail, wall_seconds=wall)
    # train.py writes a record at its last step before it writes "done".
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    if device == "cuda":
        peak = max(float(record.get("mem_gb", 0.0)) for record in records)
    else:  # ru_maxrss: kilobytes on Linux, bytes on macOS
        peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 2**30
    return Outcome(OK, "", float(records[-1]["step_time"]), peak, tail, wall)


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
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _error_line(log: str) -> str:
    """What a failed train.py ended with: the package's message, or the exception (the last
    line of its traceback)."""
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


def _hours(job: SmokeJob, outcome: Outcome) -> float | None:
    """The sweep's jobs of the row (one job without a sweep) x steps x s/step, in hours."""
    if outcome.seconds_per_step is None:
        return None
    return (job.sweep_jobs or 1) * job.steps_per_job * outcome.seconds_per_step / 3600


def report(results: list[tuple[Staged, Outcome]], notes: list[str], device: str, steps: int) -> str:
    """The notes; the table (algorithm x dataset: status, s/step, peak memory, the sweep's
    estimated hours) and how to read it; the end of each failed job's output; the verdict."""
    rows = [
        {
            "algorithm": staged.job.algorithm,
            "dataset": staged.job.dataset,
            "batch": staged.job.batch,
            "status": _status(staged, outcome),
            "s/step": _number(outcome.seconds_per_step, 3),
            "peak GB": _number(outcome.peak_memory_gb, 2),
            "sweep jobs": staged.job.sweep_jobs or "-",
            "steps/job": staged.job.steps_per_job,
            "est. hours": _number(_hours(staged.job, outcome), 2),
        }
        for staged, outcome in results
    ]
    swept = any(staged.job.sweep_jobs is not None for staged, _ in results)
    if swept:
        hours = [_hours(staged.job, outcome) for staged, outcome in results]
        unknown = hours.count(None)
        total = f"{sum(h or 0 for h in hours):.2f}" + (f" + {unknown} unknown" if unknown else "")
        jobs = sum(staged.job.sweep_jobs or 0 for staged, _ in results)
        rows.append({"algorithm": "total", "sweep jobs": jobs, "est. hours": total})
    per = "the sweep's jobs of the row" if swept else "one job"
    memory, machine = "host", f"cpu: {os.cpu_count()} cores, no CUDA device"
    if device == "cuda":  # read only now: it starts CUDA here, which holds the GPU
        gpu = torch.cuda.get_device_properties(0)
        memory, machine = "GPU", f"cuda: {gpu.name}, {gpu.total_memory / 2**30:.0f} GiB"
    lines = [
        "",
        *(f"note: {note}" for note in notes),
        "",
        tabulate(rows, "keys", tablefmt="simple", disable_numparse=True),
        "",
        f"device: {machine}; {steps} steps a job, DomainBed's train",
        "batch: source domains x examples per domain; s/step: train.py's step_time after the "
        f"first step; peak GB: peak {memory} memory",
        f"est. hours: {per} x steps/job x s/step, on one such device, without start-up, "
        "evaluation and checkpoints",
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


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
