"""Run one smoke job as a sweep runs it, a fresh ``python -m domainbed.scripts.train`` process,
and measure it.

Seconds per step are what ``train.py`` itself logs (``step_time`` in ``results.jsonl``, the data
wait included), averaged over the steps after the first: the first step pays for warm-up (data
loader workers, CUDA kernels). Peak memory on a GPU is ``torch.cuda.max_memory_allocated``, which
train.py logs as ``mem_gb``; on a CPU it is the peak resident memory of the job's largest
process, from the operating system.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed.errors import UserError

OK, FAILED, TIMED_OUT, NOT_RUN = "ok", "failed", "timed out", "not run"
LOG_TAIL_LINES = 25
POLL_SECONDS = 0.2


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
class Device:
    """Where the jobs train: what train.py picks (CUDA when available) and how memory is read."""

    kind: str

    @property
    def memory(self) -> str:
        return "peak GPU memory" if self.kind == "cuda" else "peak host memory"

    def describe(self) -> str:
        """The device's name. Called once the jobs have run: reading a GPU's properties starts
        CUDA in this process, which must not hold the GPU while a job needs it."""
        import torch

        if self.kind == "cuda":
            properties = torch.cuda.get_device_properties(0)
            return f"cuda: {properties.name}, {properties.total_memory / 2**30:.0f} GiB"
        return f"cpu: {os.cpu_count()} cores, no CUDA device"


def this_device() -> Device:
    import torch

    # Counts the devices without starting CUDA here (no context on the jobs' GPU).
    return Device("cuda" if torch.cuda.is_available() else "cpu")


def job_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The job's environment: this one with ``extra``, and this interpreter's folder first on PATH,
    as the sweep starts its jobs with the ``python`` found there."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def python_on_path(env: Mapping[str, str]) -> str:
    python = shutil.which("python", path=env.get("PATH"))
    if python is None:
        raise UserError(
            "no `python` on PATH: DomainBed's sweep starts every job as "
            "`python -m domainbed.scripts.train`. Activate the environment that has DomainBed "
            "and this package, or put its python first on PATH."
        )
    return python


def train_command(
    python: str, train_args: Mapping[str, Any], data_dir: str | None, steps: int, output: Path
) -> list[str]:
    """DomainBed's train command for the job, with its own data folder, steps and output."""
    args = {**train_args, "steps": steps, "output_dir": str(output)}
    if data_dir is not None:
        args["data_dir"] = data_dir
    else:
        args.pop("data_dir", None)
    command = [python, "-m", "domainbed.scripts.train"]
    for key, value in args.items():
        values = value if isinstance(value, list | tuple) else [value]
        command += [f"--{key}", *(str(v) for v in values)]
    return command


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


def _peak_rss_gb(rusage) -> float:
    # ru_maxrss: kilobytes on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return rusage.ru_maxrss * scale / 2**30


def _wait(process: subprocess.Popen, timeout: float) -> tuple[int | None, Any]:
    """Wait for ``process``; kill its process group at ``timeout``. (exit code or None, rusage)."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                return process.returncode, rusage
            if time.monotonic() > deadline:
                _kill(process)
                return None, None
            time.sleep(POLL_SECONDS)
    except BaseException:
        _kill(process)
        raise


def _kill(process: subprocess.Popen) -> None:
    """Stop the job and its data loader workers (its own process group)."""
    if process.returncode is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def run_job(
    command: Sequence[str], env: Mapping[str, str], output: Path, device: Device, timeout: float
) -> Outcome:
    """Run ``command`` (a train command writing into ``output``) and measure it."""
    output.mkdir(parents=True, exist_ok=True)
    log_path = output.parent / f"{output.name}.log"
    start = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(command),
            env=dict(env),
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
    # The last record averages the steps since the first one (or is the only step).
    seconds_per_step = float(records[-1]["step_time"])
    if device.kind == "cuda":
        peak = max(float(record.get("mem_gb", 0.0)) for record in records)
    else:
        peak = _peak_rss_gb(rusage)
    return Outcome(OK, "", seconds_per_step, peak, tail, wall)
