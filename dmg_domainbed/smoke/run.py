"""Run every smoke job as a sweep runs it, one at a time, and measure it.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from dmg_domainbed.preflight.environment import job_environment
from dmg_domainbed.smoke.jobs import SmokeJob
from dmg_domainbed.smoke.staging import Staged, Staging

DEFAULT_STEPS = 5
DEFAULT_TIMEOUT_SECONDS = 1800
OK, FAILED, TIMED_OUT, NOT_RUN = "ok", "failed", "timed out", "not run"
LOG_TAIL_LINES = 25
ERROR_WIDTH = 60
COLUMNS = (
    "algorithm",
    "dataset",
    "batch",
    "status",
    "s/step",
    "peak GB",
    "sweep jobs",
    "steps/job",
    "est. hours",
)


@dataclass(frozen=True)
class Outcome:
    """What became of one job."""

    status: str
    detail: str = ""  # the error, or why it did not run
    seconds_per_step: float | None = None
    peak_memory_gb: float | None = None
    log_tail: str = ""
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class SmokeResult:
    rows: list[tuple[Staged, Outcome]]
    notes: list[str]
    device: str  # "cuda" or "cpu": what train.py picks

    @property
    def ok(self) -> bool:
        return all(outcome.status == OK for _, outcome in self.rows)


def smoke_check(
    jobs: Sequence[SmokeJob],
    data_dir: str | None,
    steps: int = DEFAULT_STEPS,
    synthetic: bool = False,
    synthetic_data_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    echo: Callable[[str], None] = print,
) -> SmokeResult:
    """Run ``jobs`` for ``steps`` steps each. Everything is written inside a new temporary
    folder, removed at the end; with ``synthetic``, missing datasets and weights get stand-ins,
    the datasets in ``synthetic_data_dir`` when given (kept), else in the temporary folder."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # counts GPUs, starts no CUDA
    with tempfile.TemporaryDirectory(prefix="dmg-smoke-") as root:
        synthetic_dir = (synthetic_data_dir or Path(root) / "synthetic_data") if synthetic else None
        staging = Staging(Path(root), data_dir, synthetic_dir)
        rows = []
        for index, staged in enumerate(staging.stage(list(jobs)), 1):
            if staged.problems:
                outcome = Outcome(NOT_RUN, "; ".join(staged.problems))
            else:
                outcome = run_job(staged, steps, Path(root) / "runs", device, timeout)
            echo(
                f"[{index}/{len(jobs)}] {staged.job.algorithm} on {staged.job.dataset}: "
                + _summary(outcome)
            )
            rows.append((staged, outcome))
        return SmokeResult(rows, list(dict.fromkeys(staging.notes)), device)


def run_job(staged: Staged, steps: int, runs: Path, device: str, timeout: float) -> Outcome:
    """Run one staged job for ``steps`` steps under ``runs`` and measure it."""
    from domainbed.scripts.sweep import Job

    train_args = {**staged.job.train_args, "steps": steps}
    train_args.pop("data_dir", None)
    if staged.data_dir is not None:
        train_args["data_dir"] = staged.data_dir
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
    records = _records(output)
    if code != 0 or not (output / "done").exists() or not records:
        return Outcome(FAILED, _error_line(log_text), log_tail=tail, wall_seconds=wall)
    if device == "cuda":
        peak = max(float(record.get("mem_gb", 0.0)) for record in records)
    else:  # ru_maxrss: kilobytes on Linux, bytes on macOS
        peak = rusage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 2**30
    return Outcome(OK, "", float(records[-1]["step_time"]), peak, tail, wall)


def _wait(process: subprocess.Popen, timeout: float):
    """(exit code, rusage) of ``process``; (None, None) after killing its group at ``timeout``."""
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


def _records(output: Path) -> list[dict]:
    try:
        lines = (output / "results.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _error_line(log: str) -> str:
    """The exception a failed train.py ended with (the last line of its traceback)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) or head in ("Killed", "Aborted"):
            return line
    return lines[-1] if lines else "no output"


def _summary(outcome: Outcome) -> str:
    if outcome.status == OK:
        return (
            f"ok, {outcome.seconds_per_step:.3f} s/step, {outcome.peak_memory_gb:.2f} GB peak "
            f"({outcome.wall_seconds:.0f} s)"
        )
    return f"{outcome.status}: {outcome.detail}"


def estimated_hours(staged: Staged, outcome: Outcome) -> float | None:
    """jobs x steps x seconds per step, in hours (per job when there is no sweep)."""
    if outcome.seconds_per_step is None:
        return None
    jobs = staged.job.sweep_jobs or 1
    return jobs * staged.job.steps_per_job * outcome.seconds_per_step / 3600


def describe_device(device: str) -> str:
    """The device's name. Called once the jobs have run: reading a GPU's properties starts
    CUDA in this process, which must not hold the GPU while a job needs it."""
    import torch

    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        return f"cuda: {properties.name}, {properties.total_memory / 2**30:.0f} GiB"
    return f"cpu: {os.cpu_count()} cores, no CUDA device"


def render(result: SmokeResult, steps: int) -> str:
    """The table (algorithm x dataset: status, s/step, peak memory, the sweep's estimated
    hours) and the lines that say how to read it."""
    rows, hours = [], []
    for staged, outcome in result.rows:
        job = staged.job
        status = f"{outcome.status}: {outcome.detail}"
        if outcome.status == OK:
            status = "ok" + (f" ({', '.join(staged.stand_ins)})" if staged.stand_ins else "")
        elif len(status) > ERROR_WIDTH:
            status = status[: ERROR_WIDTH - 3] + "..."
        hours.append(estimated_hours(staged, outcome))
        rows.append(
            [
                job.algorithm,
                job.dataset,
                job.batch,
                status,
                _number(outcome.seconds_per_step, 3),
                _number(outcome.peak_memory_gb, 2),
                job.sweep_jobs or "-",
                job.steps_per_job,
                _number(hours[-1], 2),
            ]
        )
    swept = any(staged.job.sweep_jobs is not None for staged, _ in result.rows)
    if swept:
        known = [h for h in hours if h is not None]
        unknown = len(hours) - len(known)
        total = f"{sum(known):.2f}" + (f" + {unknown} unknown" if unknown else "")
        jobs = sum(staged.job.sweep_jobs or 0 for staged, _ in result.rows)
        rows.append(["total", "", "", "", "", "", jobs, "", total])
    table = tabulate(rows, COLUMNS, tablefmt="simple", disable_numparse=True)
    per = "the sweep's jobs of the row" if swept else "one job"
    memory = "GPU" if result.device == "cuda" else "host"
    return "\n".join(
        [
            table,
            "",
            f"device: {describe_device(result.device)}; {steps} steps a job, DomainBed's train",
            "batch: source domains x examples per domain; s/step: train.py's step_time after the "
            f"first step; peak GB: peak {memory} memory",
            f"est. hours: {per} x steps/job x s/step, on one such device, without start-up, "
            "evaluation and checkpoints",
        ]
    )


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
