"""``dmg-domainbed report``: a sweep's results as CSV, Markdown and pictures."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmg_domainbed.reporting.runs import require_sweep


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="tables (CSV, Markdown) and pictures of a DomainBed sweep",
        description=(
            "Reads a DomainBed sweep folder and writes the numbers of collect_results for "
            "every model-selection method (results.csv, averages.csv, results.md), test "
            "accuracy per test domain by algorithm (accuracy_<dataset>.png) and, for algorithms "
            "that log diagnostics (DMG's masks), their curves over training "
            "(<algorithm>_diagnostics_<dataset>.png). The sweep folder is only read."
        ),
    )
    parser.add_argument(
        "--input_dir", required=True, help="the --output_dir of domainbed.scripts.sweep"
    )
    parser.add_argument(
        "--output_dir", default="dmg_report", help="where the report goes (default: %(default)s)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_sweep(args.input_dir)
    from dmg_domainbed.reporting.report import write_report
    from dmg_domainbed.reporting.tables import results_markdown

    written = write_report(args.input_dir, Path(args.output_dir))
    print(results_markdown(written.results, written.averages))
    print(f"Wrote {', '.join(str(p) for p in written.files)}")
    return 0
