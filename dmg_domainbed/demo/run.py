"""Running the demo: DomainBed's sweep (resumable), collect_results, then the report."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from dmg_domainbed.demo.plan import DemoPlan, Job
from dmg_domainbed.demo.progress import DoneWatcher
from dmg_domainbed.errors import UserError
from dmg_domainbed.reporting import in_domain, masks_report, report, tables
from dmg_domainbed.reporting.files import write_table
from dmg_domainbed.reporting.runs import (
    RESULTS_FILE,
    read_records,
    read_run,
    run_folders,
)

Echo = Callable[[str], None]
PARALLEL_JOBS_VARIABLE = "DMG_LOCAL_PARALLEL_JOBS"
STOP_GRACE_SECONDS = 2.0


def job_environment(parallel_jobs: int | None) -> dict[str, str]:
    """Environment of DomainBed's scripts: this interpreter's ``python`` first on PATH (the
    sweep launches ``python -m domainbed.scripts.train`` from PATH), one thread per job."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    if parallel_jobs is not None:
        env[PARALLEL_JOBS_VARIABLE] = str(parallel_jobs)
    return env


def check_no_conflicting_runs(plan: DemoPlan, jobs: list[Job]) -> None:
    """Refuse a folder that already holds the same (algorithm, test domain) with other settings
    (e.g. another --steps): DomainBed's selection would mix the two runs."""
    planned = {job.output_dir for job in jobs}
    wanted = {(job.algorithm, job.test_env) for job in jobs}
    for folder in run_folders(plan.sweep_dir):
        if folder in planned:
            continue
        records = read_records(folder / RESULTS_FILE)
        args = records[-1]["args"] if records else {}
        key = (args.get("algorithm"), (args.get("test_envs") or [None])[0])
        if key in wanted:
            raise UserError(
                f"'{plan.sweep_dir}' already holds a run of {key[0]} on test env {key[1]} made "
                f"with other settings ({folder}, steps={args.get('steps')}). Use another "
                "--output_dir for this configuration, or delete that folder."
            )


def delete_incomplete(jobs: list[Job], log: TextIO) -> None:
    """DomainBed's ``sweep delete_incomplete``: remove job folders that hold no ``done`` (an
    interrupted run), so that ``launch`` runs them again from the start."""
    from domainbed.scripts import sweep

    incomplete = [
        job.domainbed_job for job in jobs if job.domainbed_job.state == sweep.Job.INCOMPLETE
    ]
    if incomplete:
        with contextlib.redirect_stdout(log):
            sweep.Job.delete(incomplete)


def run_sweep(plan: DemoPlan, jobs: list[Job], parallel_jobs: int | None, echo: Echo) -> int:
    """DomainBed's ``sweep launch``, once per group of algorithms with the same fixed hparams:
    it runs only the jobs whose folder does not exist."""
    with open(plan.log_path, "a") as log:
        delete_incomplete(jobs, log)
        with DoneWatcher(jobs, echo):
            for command in plan.launch_commands():
                log.write(f"$ {shlex.join(command)}\n")
                log.flush()
                sweep = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=job_environment(parallel_jobs),
                )
                try:
                    code = sweep.wait()
                except KeyboardInterrupt:
                    stop_sweep(sweep)
                    raise
                if code != 0:
                    return code
        return 0


def stop_sweep(sweep: subprocess.Popen) -> None:
    """Let DomainBed's sweep stop its running jobs (its launcher handles Ctrl-C) and wait for it.

    A Ctrl-C at the terminal reaches the sweep too; an interrupt sent to this process alone is
    passed on. Killing the sweep outright could leave jobs running on their own.
    """
    try:
        sweep.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        sweep.send_signal(signal.SIGINT)
        sweep.wait()


def collect_results(plan: DemoPlan) -> str:
    """What ``python -m domainbed.scripts.collect_results --input_dir SWEEP`` prints, made by
    its own ``print_results_tables`` for each of its selection methods."""
    from domainbed.scripts import collect_results as domainbed_collect_results

    records = tables.load_sweep_records(plan.sweep_dir)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print("Total records:", len(records))
        for method in tables.selection_methods():
            domainbed_collect_results.print_results_tables(records, method, latex=False)
    return printed.getvalue()


def write_run_reports(plan: DemoPlan, jobs: list[Job]) -> list[Path]:
    """In-domain Table 3 of every finished run, and a mask picture of every DMG run."""
    finished = [read_run(job.output_dir) for job in jobs if job.done]
    paths: list[Path] = []
    by_test_env: dict[int, list] = {}
    for run in finished:
        by_test_env.setdefault(run.test_envs[0], []).append(run)
        if run.algorithm == "DMG":
            stem = f"masks_test_env{run.test_envs[0]}"
            paths += masks_report.write_masks_report(run, plan.report_dir, stem).files
    frames = [in_domain.evaluate_run(run) for runs in by_test_env.values() for run in runs]
    if frames:
        import pandas as pd

        long = pd.concat(frames, ignore_index=True)
        sections = []
        for _, runs in sorted(by_test_env.items()):
            rows = long[long["run"].isin([str(r.path) for r in runs])]
            title = in_domain.table3_title(runs[0])
            sections.append((title, in_domain.table3(rows)))
        paths += write_table(long, sections, plan.report_dir, "in_domain", "Prediction")
    return paths


def run_demo(plan: DemoPlan, parallel_jobs: int | None = None, echo: Echo = print) -> int:
    """The whole demo; returns the exit code (0 when every job finished)."""
    start = time.monotonic()
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs = plan.jobs()
    check_no_conflicting_runs(plan, jobs)
    done = sum(job.done for job in jobs)
    echo(
        f"DomainBed sweep of {', '.join(plan.algorithms)} on RotatedDigits, every test domain: "
        f"{len(jobs)} jobs, {done} already done, {len(jobs) - done} to run "
        f"(launcher '{plan.launcher}'; log: {plan.log_path})"
    )
    for algorithm, hparams in plan.algorithm_hparams().items():
        echo(
            f"{algorithm}: phase schedule scaled to {plan.total_steps()} steps, "
            f"--hparams '{json.dumps(hparams, sort_keys=True)}'"
        )
    code = run_sweep(plan, jobs, parallel_jobs, echo)
    failed = [job for job in jobs if not job.done]
    for job in failed:
        echo(f"FAILED: {job.describe()}; see {job.output_dir / 'err.txt'}")
    if code != 0 and not failed:
        echo(f"DomainBed's sweep exited with code {code}; see {plan.log_path}")
    echo(collect_results(plan))
    files = report.write_report(plan.sweep_dir, plan.report_dir).files
    files += write_run_reports(plan, jobs)
    shown = [p.name for p in files if p.suffix in (".md", ".png")]
    echo(f"Report in {plan.report_dir} (CSV tables next to each): " + ", ".join(shown))
    echo(f"Wall time: {time.monotonic() - start:.0f} s")
    return 1 if failed or code != 0 else 0
