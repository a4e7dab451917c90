"""The smoke check's table: algorithm x dataset, ok or the error, seconds per step, peak memory,
and what the sweep will cost (jobs x steps x seconds per step)."""

from __future__ import annotations

from collections.abc import Sequence

from dmg_domainbed.smoke.execute import OK, Device, Outcome
from dmg_domainbed.smoke.staging import Staged

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
ERROR_WIDTH = 60


def estimated_hours(staged: Staged, outcome: Outcome) -> float | None:
    """jobs x steps x seconds per step, in hours (per job when there is no sweep)."""
    if outcome.seconds_per_step is None:
        return None
    jobs = staged.job.sweep_jobs or 1
    return jobs * staged.job.steps_per_job * outcome.seconds_per_step / 3600


def _status(staged: Staged, outcome: Outcome) -> str:
    if outcome.status == OK:
        return "ok" + (f" ({', '.join(staged.stand_ins)})" if staged.stand_ins else "")
    text = f"{outcome.status}: {outcome.detail}"
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(rows: Sequence[tuple[Staged, Outcome]], device: Device, steps: int) -> str:
    """The table and the lines that say how to read it."""
    body = []
    for staged, outcome in rows:
        job = staged.job
        body.append(
            (
                job.algorithm,
                job.dataset,
                job.batch,
                _status(staged, outcome),
                _number(outcome.seconds_per_step, 3),
                _number(outcome.peak_memory_gb, 2),
                "-" if job.sweep_jobs is None else str(job.sweep_jobs),
                str(job.steps_per_job),
                _number(estimated_hours(staged, outcome), 2),
            )
        )
    swept = any(staged.job.sweep_jobs is not None for staged, _ in rows)
    hours = [estimated_hours(staged, outcome) for staged, outcome in rows]
    if swept and rows:
        known = [h for h in hours if h is not None]
        total_jobs = sum(staged.job.sweep_jobs or 0 for staged, _ in rows)
        unknown = len(hours) - len(known)
        body.append(
            (
                "total",
                "",
                "",
                "",
                "",
                "",
                str(total_jobs),
                "",
                f"{sum(known):.2f}" + (f" + {unknown} unknown" if unknown else ""),
            )
        )
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip()]
    lines.append("-" * len(lines[0]))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in body]
    per = "the sweep's jobs of the row" if swept else "one job"
    lines += [
        "",
        f"device: {device.describe()}; {steps} steps per job with DomainBed's train",
        f"batch: source domains x examples per domain; s/step: train.py's step_time after the "
        f"first step; peak GB: {device.memory}",
        f"est. hours: {per} x steps/job x s/step, on one such device, without start-up, "
        "evaluation and checkpoints",
    ]
    return "\n".join(lines)
