"""The smoke check from jobs to results: stage every job's data and weights in a temporary
folder, run each job that can run, one at a time (each measured alone), and report."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.smoke import execute
from dmg_domainbed.smoke.jobs import SmokeJob
from dmg_domainbed.smoke.staging import Staged, Staging

DEFAULT_STEPS = 5
DEFAULT_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class SmokeResult:
    rows: list[tuple[Staged, execute.Outcome]]
    notes: list[str]
    device: execute.Device

    @property
    def ok(self) -> bool:
        return all(outcome.status == execute.OK for _, outcome in self.rows)


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
    device = execute.this_device()
    python = execute.python_on_path(execute.job_environment({}))
    with tempfile.TemporaryDirectory(prefix="dmg-smoke-") as root:
        root_path = Path(root)
        synthetic_dir = None
        if synthetic:
            synthetic_dir = synthetic_data_dir or root_path / "synthetic_data"
        staging = Staging(root_path, data_dir, synthetic_dir)
        staged_jobs = staging.stage(list(jobs))
        rows = []
        for index, staged in enumerate(staged_jobs, 1):
            job = staged.job
            label = f"[{index}/{len(staged_jobs)}] {job.algorithm} on {job.dataset}"
            if staged.problems:
                outcome = execute.Outcome(execute.NOT_RUN, "; ".join(staged.problems))
            else:
                env = execute.job_environment(staged.environment)
                output = root_path / "runs" / f"{index:03d}_{job.algorithm}_{job.dataset}"
                command = execute.train_command(
                    python, job.train_args, staged.data_dir, steps, output
                )
                outcome = execute.run_job(command, env, output, device, timeout)
            echo(f"{label}: {_summary(outcome)}")
            rows.append((staged, outcome))
        return SmokeResult(rows, list(dict.fromkeys(staging.notes)), device)


def _summary(outcome: execute.Outcome) -> str:
    if outcome.status == execute.OK:
        return (
            f"ok, {outcome.seconds_per_step:.3f} s/step, {outcome.peak_memory_gb:.2f} GB peak "
            f"({outcome.wall_seconds:.0f} s)"
        )
    return f"{outcome.status}: {outcome.detail}"
