"""``dmg-domainbed sweep FILE``: run a sweep file with DomainBed's own sweep code."""

from __future__ import annotations

import argparse
import os

from dmg_domainbed.errors import UserError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a sweep file (sweeps/*.toml) with DomainBed's sweep code",
        description=(
            "Check a sweep file, show its jobs, and launch them with DomainBed's own sweep code "
            "(its job list, Job.launch and the command launcher: job folders, hashes and "
            "`done` files stay DomainBed's; finished jobs are skipped)."
        ),
    )
    parser.add_argument("file", help="a sweep file, e.g. sweeps/demo.toml")
    parser.add_argument("--launcher", help="DomainBed command launcher (wins over the file's)")
    parser.add_argument(
        "--dry-run", action="store_true", help="show the jobs and commands; create and run nothing"
    )
    parser.add_argument("--data_dir", help="DomainBed's --data_dir (wins over the file's)")
    parser.add_argument("--output_dir", help="the sweep's output folder (wins over the file's)")
    parser.add_argument(
        "--delete-incomplete",
        action="store_true",
        help="first delete the folders of incomplete jobs (DomainBed's delete_incomplete) so "
        "they are launched again; only when none of them is still running",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from domainbed.scripts.sweep import Job

    from dmg_domainbed.sweep import config as sweep_config
    from dmg_domainbed.sweep import plan
    from dmg_domainbed.sweep import run as sweep_run

    config = sweep_config.load_sweep(args.file)
    build_notes = sweep_config.check_against_domainbed(config)
    launcher, env, notes = args.launcher or config.launcher, os.environ, []
    if launcher is not None:
        sweep_config.check_launcher(config, launcher)
        env, notes = sweep_run.launcher_environment(config, launcher, os.environ)
    elif not args.dry_run:
        raise UserError(
            f'{config.path} names no launcher: add [launcher] name = "..." to it or pass '
            "--launcher NAME (e.g. local_parallel, submitit, local)"
        )
    sweep = plan.resolve(config, args.data_dir, args.output_dir)
    groups = [(group, plan.jobs(sweep, group)) for group in sweep.groups]
    print(plan.summary(sweep, groups))
    for note in build_notes + notes:
        print(f"  note: {note}")
    all_jobs = [job for _, jobs in groups for job in jobs]
    if args.dry_run:
        print(f"Launcher: {launcher or 'LAUNCHER'} (DomainBed's Job.launch, one launch per group)")
        new = [f"  {job.command_str}" for job in all_jobs if job.state == Job.NOT_LAUNCHED]
        print("\n".join(["Jobs to launch:", *new, "Dry run: nothing was created or launched."]))
        if launcher is not None:
            try:
                sweep_run.check_ready(sweep, launcher, env)
            except UserError as error:
                print(f"Launching it now would stop before any job: {error}")
        return 0
    print(f"  launcher: {sweep_run.check_ready(sweep, launcher, env)}")
    incomplete = sum(job.state == Job.INCOMPLETE for job in all_jobs)
    if incomplete and not args.delete_incomplete:
        print(
            f"  {incomplete} incomplete job(s) are left as they are (they may still be running)"
            "; once they have stopped, rerun with --delete-incomplete to launch them again"
        )
    return sweep_run.execute(sweep, launcher, env, args.delete_incomplete)
