"""``dmg-domainbed data check``: is each dataset on disk what DomainBed will read?"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dmg_domainbed.cli import whole_number
from dmg_domainbed.errors import UserError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("data", help="check datasets before a sweep trains on them")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="check datasets on disk against what DomainBed reads",
        description=(
            "For each dataset (default: every DomainBed dataset found under --data_dir and every "
            "registered manifest dataset): its domain and class folders against the names "
            "DomainBed reads, its image count per domain against the published releases, and, "
            "unless --quick, every image decoded (files that do not decode, modes DomainBed's "
            "loader changes, files of the same content in several domains or classes). Each "
            "finding says what was found, what DomainBed expects and the fix. Nothing is "
            "written. Exit status 1 when something would stop a job or change what it trains on."
        ),
    )
    check.add_argument("--data_dir", help="DomainBed's --data_dir")
    check.add_argument("--datasets", nargs="+", metavar="DATASET", help="datasets to check")
    check.add_argument(
        "--quick", action="store_true", help="names, counts and file headers only: no decoding"
    )
    check.add_argument(
        "--workers",
        type=whole_number,
        help="processes decoding images (default: this machine's cores)",
    )
    check.add_argument(
        "--manifest",
        nargs="+",
        default=[],
        metavar="FILE",
        help="also check the datasets of these manifest files (see DMG_DOMAINBED_DATASETS)",
    )
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from domainbed import datasets

    from dmg_domainbed import integration
    from dmg_domainbed.datacheck import data_check
    from dmg_domainbed.datacheck.decoding import available_cores
    from dmg_domainbed.datasets.manifest import load_manifest, read_manifests

    integration.register_into(datasets)  # the datasets only: no algorithm is needed here
    if args.data_dir is not None and not Path(args.data_dir).expanduser().is_dir():
        raise UserError(f"--data_dir {args.data_dir}: no such folder; give DomainBed's --data_dir")
    manifests = data_check.registered_manifests()  # and those of --manifest, checked first
    for file in args.manifest:
        manifest = load_manifest(file)
        if refusal := integration.manifest_refusal(datasets, manifest):
            raise UserError(refusal)
        manifests[manifest.name] = manifest
    # Why a manifest that DMG_DOMAINBED_DATASETS names is not registered.
    named, unusable = read_manifests(os.environ)
    problems = [f"{problem}. It is not registered." for problem in unusable]
    problems += [r for m in named if (r := integration.manifest_refusal(datasets, m))]
    found = [*manifests, *(data_check.found_under(args.data_dir) if args.data_dir else [])]
    chosen = args.datasets or found
    valid = [*manifests, *data_check.FILE_DATASETS]
    if unknown := [name for name in chosen if name not in valid]:
        raise UserError(
            f"no check for dataset(s) {', '.join(unknown)}; datasets with files: "
            f"{', '.join(valid)} (a dataset of your own: give its --manifest)"
        )
    if not chosen and not problems:
        raise UserError(
            f"no DomainBed dataset under --data_dir {args.data_dir} and no manifest dataset; "
            "give the folder that holds them (e.g. PACS/, office_home/, MNIST/raw/)"
        )
    workers = args.workers or available_cores()
    for problem in problems:
        print(f"[ERROR] {problem}")
    failed = bool(problems)
    for name in chosen:
        report = data_check.check_dataset(name, args.data_dir, args.quick, workers, manifests)
        print("\n".join(data_check.render(report)))
        failed = failed or not report.ok
    print("NOT READY: fix the errors above" if failed else "READY: every dataset checked is ok")
    return 1 if failed else 0
