"""``dmg-domainbed doctor``: check that a DomainBed run would start on this machine."""

from __future__ import annotations

import argparse

from dmg_domainbed.cli import parse_hparams


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check that a DomainBed run would start here",
        description=(
            "Report DomainBed's location and commit, whether a fresh `python` process registers "
            "the plugins, torch/CUDA/GPUs, whether the pretrained weights the run loads are "
            "cached (nothing is downloaded) and which datasets are under --data_dir. "
            "Exit status 0 only when the run would start."
        ),
    )
    parser.add_argument("--algorithm", default="DMG", help="algorithm of the run (default: DMG)")
    parser.add_argument("--dataset", help="dataset of the run; checks its data and weights")
    parser.add_argument("--data_dir", help="DomainBed's --data_dir")
    parser.add_argument("--hparams", help="DomainBed's --hparams JSON, e.g. '{\"resnet18\": true}'")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dmg_domainbed.preflight import doctor

    hparams = parse_hparams(args.hparams)
    checks = doctor.diagnose(args.algorithm, args.dataset, args.data_dir, hparams)
    print(doctor.render(checks, args.algorithm, args.dataset))
    return 0 if doctor.is_ready(checks) else 1
