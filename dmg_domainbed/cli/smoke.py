"""``dmg-domainbed smoke``: every algorithm and dataset of a sweep, a few steps through
DomainBed's own train on this machine, before the sweep is launched."""

from __future__ import annotations

import argparse
from pathlib import Path

from dmg_domainbed.cli import parse_hparams
from dmg_domainbed.errors import UserError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "smoke",
        help="run each algorithm x dataset of a sweep a few steps before launching it",
        description=(
            "For every algorithm and dataset of a sweep file (its job with the largest batch) "
            "or of the command line, run DomainBed's own train for a few steps in a fresh "
            "process on this machine's device, on a small sample of the real data with the "
            "real pretrained weights, and print a table: ok or the error, seconds per step, "
            "peak memory, and the sweep's estimated cost. Run it on a node like the sweep's. "
            "Writes only into a temporary folder (and --synthetic_dir). Exit status 0 when "
            "every job ran."
        ),
    )
    parser.add_argument("file", nargs="?", help="a sweep file, e.g. sweeps/pacs_resnet50.toml")
    for names in ("algorithms", "datasets"):
        parser.add_argument(
            f"--{names}", nargs="+", metavar="NAME", help=f"{names} (of the file, if one is given)"
        )
    parser.add_argument(
        "--hparams", help="without a file: fixed hparams as JSON, e.g. '{\"resnet18\": true}'"
    )
    parser.add_argument("--data_dir", help="DomainBed's --data_dir (wins over the file's)")
    parser.add_argument(
        "--steps",
        type=int,
        default=5,
        help="steps per job (default: %(default)s; the first one is warm-up)",
    )
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="where a dataset or pretrained weights are missing, use synthetic ones: random "
        "images laid out like the dataset, random weights in a cache of the check's own",
    )
    parser.add_argument(
        "--synthetic_dir",
        type=Path,
        help="keep the synthetic datasets in this folder (implies --synthetic; default: a "
        "temporary folder)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds a job may take (default: %(default)s)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.smoke import jobs
    from dmg_domainbed.smoke.run import smoke_check
    from dmg_domainbed.sweep.config import load_sweep

    if args.steps < 1:
        raise UserError(f"--steps must be at least 1; got {args.steps}")
    if args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds; got {args.timeout}")
    if args.file is not None and args.hparams is not None:
        raise UserError(
            "--hparams is for checks without a sweep file: the file's [sweep.hparams] and "
            "[sweep.algorithm_hparams.NAME] tables fix the hparams"
        )
    data_dir = args.data_dir
    if args.file is not None:
        config = load_sweep(args.file)
        data_dir = data_dir or config.data_dir
        smoke_jobs = jobs.from_sweep(config, args.algorithms, args.datasets)
    elif args.algorithms and args.datasets:
        hparams = parse_hparams(args.hparams)
        smoke_jobs = jobs.from_command_line(args.algorithms, args.datasets, hparams)
    else:
        raise UserError(
            "name a sweep file (e.g. dmg-domainbed smoke sweeps/pacs_resnet50.toml) or both "
            "--algorithms and --datasets"
        )
    synthetic = args.synthetic or args.synthetic_dir is not None
    ok = smoke_check(smoke_jobs, data_dir, args.steps, args.timeout, synthetic, args.synthetic_dir)
    return 0 if ok else 1
