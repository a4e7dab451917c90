"""``dmg-domainbed select``: model selection over saved checkpoints by known-domain accuracy on
the source domains' validation splits (the DMG authors' selection), next to DomainBed's."""

from __future__ import annotations

import argparse

from dmg_domainbed.cli import add_output_dir, print_written


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "select",
        help="select checkpoints by known-domain source validation accuracy (the paper's way)",
        description=(
            "Evaluates every model a sweep's runs saved at their checkpoints (train.py's "
            "--save_model_every_checkpoint) on the source domains' validation splits, rebuilt "
            "exactly as train.py made them, with every prediction the algorithm has (DMG: "
            "predict, known-domain soft and hard masks; MultiHead: predict, own head), and "
            "reports the test-domain accuracy that each prediction's validation accuracy "
            "selects with DomainBed's training-domain validation method (best checkpoint, "
            "then best hparams; mean over trials). Selecting by predict gives collect_results' "
            "numbers; DMG selected by its hard masks is the paper's protocol. Writes "
            "checkpoints.csv, selection.csv and selection.md."
        ),
    )
    parser.add_argument("--input_dir", required=True, help="the sweep folder (DomainBed's)")
    add_output_dir(parser, "dmg_select", "where the tables go")
    parser.add_argument(
        "--data_dir", help="dataset folder, if not the one the runs were trained with"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.reporting.checkpoint_selection import write_selection
    from dmg_domainbed.reporting.files import check_output_dir
    from dmg_domainbed.reporting.runs import require_sweep

    sweep = require_sweep(args.input_dir)
    output = check_output_dir(args.output_dir, sweep)
    print_written(write_selection(sweep, output, args.data_dir))
    return 0
