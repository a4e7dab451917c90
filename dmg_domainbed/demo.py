"""The demo: a real DomainBed sweep on the embedded RotatedDigits, and its report.

A sweep like any other, written in code instead of a file, through the package's sweep runner
(checked, planned and launched with ``local_parallel`` under the folder's lock), and ERM again
with its weights averaged (:func:`averaged_config`) in a sweep of its own; then collect_results'
own tables, the report of both sweeps, in-domain Table 3 and the pictures of what each run
learned.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dmg_domainbed import runs
from dmg_domainbed.cores import usable_cores
from dmg_domainbed.errors import UserError
from dmg_domainbed.folders import path_part
from dmg_domainbed.locks import FolderLock
from dmg_domainbed.sweep.checks import check_sweep
from dmg_domainbed.sweep.config import Sweep, SweepConfig
from dmg_domainbed.sweep.launch import execute, is_done
from dmg_domainbed.sweep.plan import describe_job, plan_sweep

DATASET = "RotatedDigits"
ALGORITHMS = ("ERM", "Aggregate", "MultiHead", "DMG")
# RotatedDigits ships inside scikit-learn and reads no folder, but DomainBed's jobs require
# --data_dir. A fixed value keeps the job hashes (and so resuming) independent of the folder.
DATA_DIR = "."
LAUNCHER = "local_parallel"
#: The demo's own hparams, given to every job of the algorithm (``sweeps/demo.toml`` sets the
#: same): DMG's masks need a larger rate than its default 1e-3 to move apart in 600 steps.
DEMO_HPARAMS = {"DMG": {"mask_lr": 1e-2}}
SWEEP, REPORT, LOG = "sweep", "report", "sweep.log"  # inside the demo's output folder
#: The averaged row's algorithm, and its sweep's folder beside :data:`SWEEP`.
AVERAGED, AVERAGED_SWEEP = "ERM", "sweep_sma"


def demo_config(
    algorithms: Sequence[str], steps: int | None, jobs: int | None, trials: int, samples: int
) -> SweepConfig:
    """The demo's sweep: ``algorithms`` on every test domain of RotatedDigits, ``steps`` steps
    (default: the dataset's ``N_STEPS``), ``jobs`` at once, ``samples`` hparam settings (as
    DomainBed's sweep draws them, :data:`DEMO_HPARAMS` fixed) each repeated ``trials`` times with
    new data splits and seeds."""
    from domainbed import datasets

    algorithms = tuple(dict.fromkeys(algorithms))
    return SweepConfig(
        path=Path("dmg-domainbed demo"),
        algorithms=algorithms,
        algorithm_hparams={a: h for a, h in DEMO_HPARAMS.items() if a in algorithms},
        datasets=(DATASET,),
        n_hparams=samples,
        n_trials=trials,
        steps=steps or datasets.get_dataset_class(DATASET).N_STEPS,
        single_test_envs=True,
        launcher=LAUNCHER,
        # One job per CPU core, on the cores even where GPUs are visible: these small MLP jobs
        # run faster there than queued on a GPU, and local_parallel's own default with GPUs is
        # one job per GPU (its image jobs keep it).
        launcher_options={"jobs": jobs or usable_cores(), "gpus": False},
    )


def averaged_config(config: SweepConfig) -> SweepConfig | None:
    """:data:`AVERAGED`'s jobs of ``config`` again, each evaluating and saving the simple moving
    average of its weights (``averaging = "sma"``, EoA's) from step ``steps // 6`` (EoA's 100,
    of the demo's 600); ``None`` without that algorithm or a step to average. A sweep of its
    own: collect_results would pool its runs with the plain ones, which the report keeps apart
    by their fixed hparams."""
    if AVERAGED not in config.algorithms or config.steps < 2:
        return None
    averaged = {"averaging": "sma", "averaging_start": config.steps // 6}
    return replace(config, algorithms=(AVERAGED,), algorithm_hparams={}, hparams=averaged)


def demo_sweeps(config: SweepConfig, output_dir: Path) -> list[Sweep]:
    """The demo's sweeps of ``config`` (:func:`demo_config`) in ``output_dir``: its own, then
    the averaged one (:func:`averaged_config`); their jobs as DomainBed's sweep makes them:
    ``plan_sweep(sweep).jobs``."""
    configs = {SWEEP: config, AVERAGED_SWEEP: averaged_config(config)}
    return [
        Sweep(its_config, DATA_DIR, str((output_dir / folder).resolve()), LAUNCHER)
        for folder, its_config in configs.items()
        if its_config is not None
    ]


def check_no_conflicting_runs(sweep_dir: Path, jobs: list) -> None:
    """Refuse a folder holding an unplanned run of a planned (algorithm, test domain):
    collect_results would select among the runs of both configurations."""
    planned = {Path(job.output_dir) for job in jobs}
    wanted = {(job.train_args["algorithm"], job.train_args["test_envs"][0]) for job in jobs}
    for folder in runs.run_folders(sweep_dir):
        if folder.resolve() in planned:
            continue
        records = runs.read_records(folder / runs.RESULTS_FILE)
        args = records[-1].get("args", {}) if records else {}
        key = (args.get("algorithm"), (args.get("test_envs") or [None])[0])
        if key in wanted:
            raise UserError(
                f"'{sweep_dir}' already holds a run of {key[0]} on test env {key[1]} that "
                f"this demo does not plan ({folder}: steps={args.get('steps')}, "
                f"hparams_seed={args.get('hparams_seed')}, trial_seed={args.get('trial_seed')}); "
                "it was made with other --steps, --trials or --hparams_samples. Use another "
                "--output_dir for this configuration, or delete that folder."
            )


def collect_results_text(sweep_dir: Path) -> str:
    """What ``python -m domainbed.scripts.collect_results --input_dir SWEEP`` prints, made by
    its own ``print_results_tables`` for each of its selection methods, except that a method
    without any result is one line saying why instead of tables of X."""
    from domainbed.scripts import collect_results

    from dmg_domainbed.reporting import tables

    records = tables.load_sweep_records(sweep_dir)
    selecting = set(tables.selected_frame(tables.ranked_runs(records))["selection_method"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print("Total records:", len(records))
        for method in tables.selection_methods():
            if method.name in selecting:
                collect_results.print_results_tables(records, method, latex=False)
            else:
                print(f"\n{tables.no_result_line(method.name)}")
    return printed.getvalue()


def write_report_files(
    sweep_dirs: list[Path], report_dir: Path, finished: list, echo
) -> list[Path]:
    """The report of the sweeps (its summary echoed), then the pictures of what each run learned
    (``masks_<algorithm>_test_env<i>.*``) and the in-domain Table 3 per test domain, of the
    ``finished`` runs of the first trial with DomainBed's default hparams (one data split per
    test domain)."""
    from dmg_domainbed.algorithms.base import declarations_of
    from dmg_domainbed.reporting import in_domain
    from dmg_domainbed.reporting.learned import draw_learned
    from dmg_domainbed.reporting.report import write_report

    written = write_report(sweep_dirs, report_dir)
    echo(written.summary)
    files = list(written.files)
    by_test_env: dict[int, list] = {}
    for job in finished:
        if job.train_args["hparams_seed"] == 0 and job.train_args["trial_seed"] == 0:
            run_ = runs.read_run(job.output_dir)
            by_test_env.setdefault(run_.test_envs[0], []).append(run_)
            if declarations_of(runs.algorithm_class(run_)).LEARNED_PICTURES:
                stem = path_part(f"masks_{run_.algorithm}_test_env{run_.test_envs[0]}")
                try:
                    files += draw_learned(run_, report_dir, stem).files
                except UserError as error:
                    echo(f"note: no pictures of {run_.describe()}: {error}")
    if by_test_env:
        groups = [by_test_env[env] for env in sorted(by_test_env)]
        files += in_domain.write_in_domain(groups, report_dir).files
    return files


def launch_sweep(sweep: Sweep, launcher: str, env, log_path: Path, echo) -> tuple[int, list]:
    """The jobs of one of the demo's sweeps launched under its folder's lock; the launch's exit
    code and the jobs."""
    config, sweep_dir = sweep.config, Path(sweep.output_dir)
    with FolderLock(sweep_dir):  # the job states read, and the jobs launched, under the lock
        plan = plan_sweep(sweep)
        jobs = plan.jobs
        check_no_conflicting_runs(sweep_dir, jobs)
        done = len(plan.done)
        echo(
            f"DomainBed sweep of {', '.join(config.algorithms)} on {DATASET}, every test "
            f"domain, {config.n_hparams} hparam setting(s) x {config.n_trials} trial(s): "
            f"{len(jobs)} jobs, {done} already done, {len(jobs) - done} to run "
            f"(launcher {launcher}; in {sweep_dir}; log: {log_path})"
        )
        for group, _ in plan.jobs_by_group:
            if group.hparams:
                echo(
                    f"{', '.join(group.algorithms)}: hparams sized for {config.steps} steps, "
                    f"--hparams '{group.hparams_json}'"
                )
        code = execute(plan, LAUNCHER, env, delete_incomplete=True, echo=echo, log=log_path)
    return code, jobs


def run_demo(output_dir: Path, config: SweepConfig, echo=print) -> int:
    """The whole demo of ``config`` (:func:`demo_config`) in ``output_dir``; returns the exit
    code (0 when every job finished)."""
    from dmg_domainbed.reporting.outputs import check_output_dir

    start = time.monotonic()
    report_dir, log_path = output_dir / REPORT, output_dir / LOG
    check_output_dir(output_dir, only_outputs=False)  # its log: writable
    check_output_dir(report_dir)  # its report: no file of the user's in the way
    sweeps = demo_sweeps(config, output_dir)
    checks = [check_sweep(sweep, os.environ) for sweep in sweeps]
    if problem := next((c.problem for c in checks if c.problem is not None), None):
        raise problem
    launched = [launch_sweep(s, c.launcher, c.env, log_path, echo) for s, c in zip(sweeps, checks)]
    codes = [code for code, _ in launched]
    jobs = [job for _, its_jobs in launched for job in its_jobs]
    failed = [job for job in jobs if not is_done(job)]
    for job in failed:
        echo(f"FAILED: {describe_job(job)}; see {Path(job.output_dir) / 'err.txt'}")
    if any(codes) and not failed:
        echo(f"The sweep exited with code {max(codes)}; see {log_path}")
    echo(collect_results_text(Path(sweeps[0].output_dir)))
    plain = [job for job in launched[0][1] if is_done(job)]  # the pictures: the demo's own runs
    folders = [Path(sweep.output_dir) for sweep in sweeps]
    files = write_report_files(folders, report_dir, plain, echo)
    shown = [p.name for p in files if p.suffix in (".md", ".png")]
    echo(f"Report in {report_dir} (CSV tables next to each): " + ", ".join(shown))
    echo(f"Wall time: {time.monotonic() - start:.0f} s")
    return 1 if failed or any(codes) else 0
