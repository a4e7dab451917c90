"""``dmg-domainbed report``: a sweep's results as CSV, Markdown and pictures, with paired
comparisons, ranks, the selected hparams and, optionally, TensorBoard logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmg_domainbed.cli import add_output_dir
from dmg_domainbed.reporting.runs import require_sweep


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="tables (CSV, Markdown), comparisons and pictures of a DomainBed sweep",
        description=(
            "Reads a DomainBed sweep folder and writes the numbers of collect_results for "
            "every model-selection method (results.csv, averages.csv, results.md), the run, "
            "hparams and step each method selected (selected_hparams.csv), every algorithm "
            "paired with a reference on the same data splits, with 95% confidence intervals "
            "(comparisons.csv, comparisons.md), average ranks across tasks with a Friedman "
            "test and a critical-difference diagram when there are enough tasks (ranks.csv, "
            "ranks.md, ranks.png), test accuracy per test domain by algorithm "
            "(accuracy_<dataset>.png) and, for algorithms that log diagnostics (DMG's masks), "
            "their curves over training (<algorithm>_diagnostics_<dataset>.png). The sweep "
            "folder is only read."
        ),
    )
    parser.add_argument(
        "--input_dir", required=True, help="the --output_dir of domainbed.scripts.sweep"
    )
    add_output_dir(parser, "dmg_report", "where the report goes")
    parser.add_argument(
        "--reference",
        help="the algorithm every other one is compared with (default: ERM, when in the sweep)",
    )
    parser.add_argument(
        "--tensorboard",
        type=Path,
        metavar="DIR",
        help=(
            "also write every run's logged scalars and its hparams, with the test accuracy "
            "each selection method takes from it, as TensorBoard logs into DIR (a new or "
            "empty folder; needs pip install 'dmg-domainbed[tensorboard]'); view them with "
            "tensorboard --logdir DIR"
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sweep = require_sweep(args.input_dir)
    from dmg_domainbed.reporting import tensorboard
    from dmg_domainbed.reporting.report import write_report
    from dmg_domainbed.reporting.tables import results_markdown

    log_dir = tensorboard.check_log_dir(args.tensorboard, sweep) if args.tensorboard else None
    written = write_report(sweep, args.output_dir, args.reference)
    print(results_markdown(written.results, written.averages))
    print(written.summary())
    print(f"\nWrote {', '.join(str(p) for p in written.files)}")
    if log_dir is not None:
        names = tensorboard.export(sweep, written.ranked, log_dir)
        print(f"TensorBoard: {len(names)} runs in {log_dir}; view them with:")
        print(f"  tensorboard --logdir {log_dir}")
    return 0
