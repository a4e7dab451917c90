"""``dmg-domainbed demo``: a real DomainBed sweep on the embedded RotatedDigits, and its report."""

from __future__ import annotations

import argparse
import sys

from dmg_domainbed.cli import add_output_dir, whole_number
from dmg_domainbed.demo import ALGORITHMS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a real DomainBed sweep on the embedded RotatedDigits dataset and report it",
        description=(
            "Runs DomainBed's own sweep (train.py per job) of the given algorithms on "
            "RotatedDigits, one job per test domain, then prints collect_results' table and "
            "writes a report (CSV, Markdown, PNG) to OUTPUT_DIR/report. Running it again "
            "resumes: finished jobs (DomainBed's 'done' files) are kept, unfinished ones redone."
        ),
    )
    add_output_dir(parser, "dmg_demo", "folder of the sweep, its log and the report")
    parser.add_argument(
        "--steps", type=whole_number, help="training steps per job (default: RotatedDigits.N_STEPS)"
    )
    parser.add_argument(
        "--algorithms",
        nargs="+",
        default=list(ALGORITHMS),
        metavar="NAME",
        help="DomainBed algorithms to compare (default: %(default)s)",
    )
    parser.add_argument(
        "--jobs",
        type=whole_number,
        help="jobs run at the same time by the local_parallel launcher (default: one per CPU "
        "core, GPUs or not)",
    )
    parser.add_argument(
        "--trials",
        type=whole_number,
        default=3,
        help="trials per hparam setting: new data splits and seeds, which give the tables "
        "their standard errors (default: %(default)s)",
    )
    parser.add_argument(
        "--hparams_samples",
        type=whole_number,
        default=1,
        metavar="N",
        help="hparam settings per algorithm and test domain, as DomainBed's sweep draws them: "
        "its defaults, then N-1 random draws from the search space, among which model "
        "selection chooses (default: %(default)s)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.demo import SWEEP, demo_config, run_demo

    config = demo_config(args.algorithms, args.steps, args.jobs, args.trials, args.hparams_samples)
    try:
        return run_demo(args.output_dir, config, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(
            f"Interrupted. Run the same command again to resume: finished jobs are kept "
            f"in {args.output_dir / SWEEP}.",
            file=sys.stderr,
        )
        return 130
