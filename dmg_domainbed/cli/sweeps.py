"""Sweeps run by DomainBed's own sweep code: ``demo`` and ``sweep`` (a sweep file's jobs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from functools import partial

from dmg_domainbed.cli import add_output_dir, command, whole_number
from dmg_domainbed.demo import ALGORITHMS


def add_parsers(subparsers) -> None:
    add = partial(command, subparsers)
    demo = add(
        "demo",
        demo_command,
        "run a real DomainBed sweep on the embedded RotatedDigits dataset and report it",
    )
    add_output_dir(demo, "dmg_demo", "folder of the sweep, its log and the report")
    demo.add_argument(
        "--steps", type=whole_number, help="training steps per job (default: RotatedDigits.N_STEPS)"
    )
    demo.add_argument(
        "--algorithms",
        nargs="+",
        default=list(ALGORITHMS),
        metavar="NAME",
        help="DomainBed algorithms to compare (default: %(default)s)",
    )
    demo.add_argument(
        "--jobs",
        type=whole_number,
        help="jobs run at the same time by the local_parallel launcher (default: one per CPU "
        "core, GPUs or not)",
    )
    demo.add_argument(
        "--trials",
        type=whole_number,
        default=3,
        help="trials per hparam setting: new data splits and seeds, which give the tables "
        "their standard errors (default: %(default)s)",
    )
    demo.add_argument(
        "--hparams_samples",
        type=whole_number,
        default=1,
        metavar="N",
        help="hparam settings per algorithm and test domain, as DomainBed's sweep draws them: "
        "its defaults, then N-1 random draws from the search space, among which model "
        "selection chooses (default: %(default)s)",
    )

    sweep = add(
        "sweep", sweep_command, "run a sweep file (sweeps/*.toml) with DomainBed's sweep code"
    )
    sweep.add_argument("file", help="a sweep file, e.g. sweeps/demo.toml")
    sweep.add_argument("--launcher", help="DomainBed command launcher (wins over the file's)")
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="show the jobs, their cost and what would stop them; create and run nothing",
    )
    sweep.add_argument(
        "--commands",
        action="store_true",
        help="with --dry-run: list every job's command line too",
    )
    sweep.add_argument(
        "--cost-from",
        metavar="SMOKE_JSON",
        help="with --dry-run: estimate the cost from your own measures, the file "
        "`dmg-domainbed smoke FILE --json SMOKE_JSON` wrote (shown before the package's)",
    )
    sweep.add_argument("--data_dir", help="DomainBed's --data_dir (wins over the file's)")
    sweep.add_argument("--output_dir", help="the sweep's output folder (wins over the file's)")
    sweep.add_argument(
        "--delete-incomplete",
        action="store_true",
        help="first delete the folders of incomplete jobs (DomainBed's delete_incomplete) so "
        "they are launched again; only when none of them is still running",
    )


def demo_config_of(args: argparse.Namespace):
    """The demo's sweep (:func:`dmg_domainbed.demo.demo_config`) that ``demo ARGS`` runs, its
    flags checked; ``build_parser().parse_args(["demo"])`` gives the defaults' one."""
    import dmg_domainbed
    from dmg_domainbed.demo import demo_config
    from dmg_domainbed.sweep.checks import check_names
    from dmg_domainbed.sweep.config import SWEEP_KEYS

    dmg_domainbed.register()
    from domainbed import algorithms

    check_names("--algorithms", "algorithm", args.algorithms, algorithms.ALGORITHMS)

    for flag, key in (("trials", "n_trials"), ("hparams_samples", "n_hparams")):
        fix = f"Give --{flag} within these bounds (a sweep's {key})."
        SWEEP_KEYS[key].check(getattr(args, flag), f"--{flag}", fix)
    return demo_config(args.algorithms, args.steps, args.jobs, args.trials, args.hparams_samples)


def demo_command(args: argparse.Namespace) -> int:
    """Runs DomainBed's own sweep (train.py per job) of the given algorithms on RotatedDigits, one
    job per test domain, then prints collect_results' table and writes a report (CSV, Markdown,
    PNG) to OUTPUT_DIR/report. Running it again resumes: finished jobs (DomainBed's 'done' files)
    are kept, unfinished ones redone."""
    from dmg_domainbed.demo import SWEEP, run_demo

    config = demo_config_of(args)
    try:
        return run_demo(args.output_dir, config, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(
            f"Interrupted. Run the same command again to resume: finished jobs are kept "
            f"in {args.output_dir / SWEEP}.",
            file=sys.stderr,
        )
        return 130


def sweep_command(args: argparse.Namespace) -> int:
    """Check a sweep file, show its jobs, and launch them with DomainBed's own sweep code (its job
    list, Job.launch and the command launcher: job folders, hashes and `done` files stay
    DomainBed's; finished jobs are skipped)."""
    from dmg_domainbed.sweep.run import SweepRequest, run_sweep

    request = {field.name: getattr(args, field.name) for field in fields(SweepRequest)}
    return run_sweep(SweepRequest(**request), echo=print)
