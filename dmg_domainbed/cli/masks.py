"""``dmg-domainbed masks``: what a DMG run's domain masks (or ImportanceMask's weights) learned."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmg_domainbed.reporting.runs import read_run, require_algorithm, require_model


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "masks",
        help="a DMG run's mask probabilities per domain and layer, and IoU between domains",
        description=(
            "Loads a finished DMG run and writes masks.png (per layer: the mask probability "
            "sigmoid(logit) of every unit for every source domain, and the hard IoU matrix "
            "between domains), masks_probabilities.csv and masks_iou.csv (soft and hard IoU). "
            "For an ImportanceMask run: masks.png (per tracked parameter, the importance of "
            "every weight and the important-weight mask) and masks_importance.csv."
        ),
    )
    parser.add_argument(
        "--run_dir",
        required=True,
        metavar="RUN",
        help="folder of a finished DMG or ImportanceMask run (holds model.pkl)",
    )
    parser.add_argument(
        "--output_dir",
        default="dmg_masks",
        help="where the picture and tables go (default: %(default)s)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_ = read_run(args.run_dir)
    require_algorithm(run_, ("DMG", "ImportanceMask"), "masks")
    require_model(run_)
    from dmg_domainbed.reporting.importance_report import write_importance_report
    from dmg_domainbed.reporting.masks_report import write_masks_report
    from dmg_domainbed.reporting.report import check_output_dir

    output = check_output_dir(Path(args.output_dir), run_.path)
    write = write_masks_report if run_.algorithm == "DMG" else write_importance_report
    written = write(run_, output)
    print(f"{run_.algorithm} masks of {run_.describe()}:")
    print(written.summary.round(3).to_string())
    print(f"Wrote {', '.join(str(p) for p in written.files)}")
    return 0
