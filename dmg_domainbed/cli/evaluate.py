"""``dmg-domainbed evaluate``: in-domain accuracy of finished runs (paper Table 3)."""

from __future__ import annotations

import argparse

from dmg_domainbed.cli import add_output_dir, print_written


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="in-domain accuracy of finished runs, predict vs known-domain (paper Table 3)",
        description=(
            "Rebuilds the held-out split of every source domain exactly as train.py made it "
            "and classifies it with predict (DMG: averaged masks; MultiHead: averaged heads) "
            "and, where the algorithm has one, known-domain prediction (DMG soft and hard "
            "masks, MultiHead's own head). Several runs of one sweep with the same test "
            "domains make one table. Writes in_domain.csv and in_domain.md."
        ),
    )
    parser.add_argument(
        "--run_dir",
        required=True,
        nargs="+",
        metavar="RUN",
        help="folder(s) of finished training runs (each holds model.pkl)",
    )
    add_output_dir(parser, "dmg_evaluate", "where the tables go")
    parser.add_argument(
        "--data_dir", help="dataset folder, if not the one the runs were trained with"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.reporting.files import check_output_dir
    from dmg_domainbed.reporting.in_domain import write_in_domain
    from dmg_domainbed.reporting.runs import read_run, require_model

    runs = [read_run(path) for path in args.run_dir]
    for run_ in runs:
        require_model(run_)
    output = check_output_dir(args.output_dir, *(run_.path for run_ in runs))
    print_written(write_in_domain([runs], output, args.data_dir))
    return 0
