"""``dmg-domainbed masks``: pictures of what a finished run learned, drawn by its algorithm."""

from __future__ import annotations

import argparse

from dmg_domainbed.cli import add_output_dir


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "masks",
        help="pictures of what a finished run learned (DMG's masks, ImportanceMask's weights)",
        description=(
            "Loads a finished run and asks its algorithm to draw what it learned into "
            "OUTPUT_DIR: for DMG, masks.png (per layer: the mask probability sigmoid(logit) of "
            "every unit for every source domain, and the hard IoU matrix between domains), "
            "masks_probabilities.csv and masks_iou.csv (soft and hard IoU); for ImportanceMask, "
            "masks.png (per tracked parameter, the importance of every weight and the "
            "important-weight mask) and masks_importance.csv."
        ),
    )
    parser.add_argument(
        "--run_dir", required=True, metavar="RUN", help="folder of a finished run (holds model.pkl)"
    )
    add_output_dir(parser, "dmg_masks", "where the pictures and tables go")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.reporting.divergence import warnings
    from dmg_domainbed.reporting.files import check_output_dir
    from dmg_domainbed.reporting.learned import draw_learned, require_drawing
    from dmg_domainbed.reporting.runs import read_run, require_model

    run_ = read_run(args.run_dir)
    require_drawing(run_, "masks")
    require_model(run_)
    output = check_output_dir(args.output_dir, run_.path)
    drawn = draw_learned(run_, output, "masks")
    print(f"What {run_.describe()} learned:")
    print(drawn.summary.round(3).to_string())
    for line in warnings([run_]):
        print(line)
    print(f"Wrote {', '.join(str(p) for p in drawn.files)}")
    return 0
