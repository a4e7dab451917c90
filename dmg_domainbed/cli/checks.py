"""Before a sweep, will its jobs run: ``doctor``, ``smoke``, ``check-algorithm``, ``data check``."""

from __future__ import annotations

import argparse
import json
import math
import os
from functools import partial
from pathlib import Path

from dmg_domainbed.cli import command, whole_number
from dmg_domainbed.errors import UserError


def add_parsers(subparsers) -> None:
    add = partial(command, subparsers)
    doctor = add(
        "doctor", doctor_command, "check what would run here: the demo, or a run on --dataset"
    )
    doctor.add_argument("--algorithm", default="DMG", help="algorithm of the run (default: DMG)")
    doctor.add_argument("--dataset", help="dataset of the run; checks its data and weights")
    doctor.add_argument("--data_dir", help="DomainBed's --data_dir")
    doctor.add_argument("--hparams", help="DomainBed's --hparams JSON, e.g. '{\"resnet18\": true}'")

    smoke = add(
        "smoke",
        smoke_command,
        "run each algorithm x dataset of a sweep a few steps before launching it",
    )
    smoke.add_argument("file", nargs="?", help="a sweep file, e.g. sweeps/pacs_resnet50.toml")
    for names in ("algorithms", "datasets"):
        smoke.add_argument(
            f"--{names}", nargs="+", metavar="NAME", help=f"{names} (of the file, if one is given)"
        )
    smoke.add_argument(
        "--hparams", help="without a file: fixed hparams as JSON, e.g. '{\"resnet18\": true}'"
    )
    smoke.add_argument("--data_dir", help="DomainBed's --data_dir (wins over the file's)")
    smoke.add_argument(
        "--steps",
        type=int,
        default=20,
        help="timed steps per job, after 3 warm-up steps (default: %(default)s); seconds per "
        "step are their median",
    )
    smoke.add_argument(
        "--synthetic",
        action="store_true",
        help="where a dataset or pretrained weights are missing, use synthetic ones: random "
        "images laid out like the dataset, random weights in a cache of the check's own",
    )
    smoke.add_argument(
        "--synthetic_dir",
        type=Path,
        help="keep the synthetic datasets in this folder (implies --synthetic; default: a "
        "temporary folder)",
    )
    smoke.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write the measures to FILE (JSON), for `sweep FILE --dry-run --cost-from FILE`",
    )
    smoke.add_argument(
        "--timeout", type=float, default=1800, help="seconds a job may take (default: %(default)s)"
    )

    check_algorithm = add(
        "check-algorithm",
        check_algorithm_command,
        "check registered algorithms against what DomainBed's train and tests ask",
    )
    check_algorithm.add_argument("names", nargs="+", metavar="NAME", help="algorithm names")
    check_algorithm.add_argument(
        "--dataset",
        default="Debug28",
        choices=("Debug28", "Debug224"),
        help="DomainBed's debug dataset to build on (default: %(default)s; Debug224 loads "
        "DomainBed's pretrained ResNet-50)",
    )
    check_algorithm.add_argument(
        "--images_per_domain",
        type=int,
        default=8,
        help="images per domain in each minibatch (default: %(default)s, as DomainBed's "
        "test_models; fewer for a large network on a laptop CPU)",
    )

    data = subparsers.add_parser("data", help="check datasets before a sweep trains on them")
    actions = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = command(
        actions, "check", data_check_command, "check datasets on disk against what DomainBed reads"
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


def _parse_hparams(text: str | None) -> dict:
    """A command line's ``--hparams`` JSON object (``{}`` when not given)."""
    if text is None:
        return {}
    try:
        hparams = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"--hparams is not valid JSON ({error}): {text!r}") from None
    if not isinstance(hparams, dict):
        raise UserError(
            f"--hparams must be a JSON object like '{{\"resnet18\": true}}'; got {text!r}"
        )
    return hparams


def check_algorithm_command(args: argparse.Namespace) -> int:
    """For each algorithm (DomainBed's, this package's or another installed package's): its
    entry point imports and names an Algorithm subclass, its hparams come from DomainBed's
    registry, random hparams are the same per seed on every dataset and keep their declared
    rules, and no declared name replaces one of DomainBed's; built on DomainBed's debug
    dataset, update returns a dict of finite floats, predict gives [images, classes] logits on
    the images' device, the same twice in eval mode, a new instance loaded with its state dict
    predicts the same, and .to(device) moves every tensor. Each failure says what was expected,
    what was found and where; a check that needs a failed one is listed as not run, with the
    reason. On the CPU, in seconds. Exit status 1 when a check fails."""
    from dmg_domainbed.algorithm_check import check_algorithm, render

    failed = False
    for name in args.names:
        findings = check_algorithm(name, args.dataset, args.images_per_domain)
        print(render(name, args.dataset, findings), flush=True)
        failed |= not all(f.passed for f in findings)
    return 1 if failed else 0


def doctor_command(args: argparse.Namespace) -> int:
    """Report DomainBed's location and commit, whether a fresh `python` process registers the
    plugins, torch/CUDA/GPUs (a torch and torchvision that do not match come with the pip
    command that installs a matching pair), whether the pretrained weights the run loads are
    cached (nothing is downloaded) and which datasets are under --data_dir. Without --dataset
    it judges the demo (the embedded RotatedDigits) and lists the weights an image sweep will
    need; with --dataset, a run on it. Exit status 0 only when that would start."""
    from dmg_domainbed.preflight import doctor

    hparams = _parse_hparams(args.hparams)
    checks = doctor.diagnose(args.algorithm, args.dataset, args.data_dir, hparams)
    print(doctor.render(checks, args.algorithm, args.dataset))
    return 0 if doctor.is_ready(checks) else 1


def smoke_command(args: argparse.Namespace) -> int:
    """For every algorithm and dataset of a sweep file (its job with the largest batch) or of
    the command line, run DomainBed's own train for a few steps in a fresh process on this
    machine's device, on a small sample of the real data with the real pretrained weights, and
    print a table: ok or the error, seconds per step, peak memory, and the sweep's estimated
    cost. Run it on a node like the sweep's. Writes only into a temporary folder (and
    --synthetic_dir). Exit status 0 when every job ran."""
    from dmg_domainbed.smoke import jobs
    from dmg_domainbed.smoke.run import smoke_check
    from dmg_domainbed.sweep.config import load_sweep

    if args.steps < 1:
        raise UserError(f"--steps must be at least 1; got {args.steps}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UserError(
            f"--timeout must be a finite number of seconds > 0, the most one job may take; got "
            f"{args.timeout:g}: give one, e.g. the default, --timeout 1800"
        )
    if args.json is not None and not args.json.parent.is_dir():
        raise UserError(
            f"--json {args.json}: no folder {args.json.parent} to write it in; make it first or "
            "name a file in an existing folder"
        )
    if args.file is not None and args.hparams is not None:
        raise UserError(
            "--hparams is for checks without a sweep file: the file's [sweep.hparams] and "
            "[sweep.algorithm_hparams.NAME] tables fix the hparams"
        )
    data_dir = args.data_dir
    if args.file is not None:
        config = load_sweep(args.file, registered=False)  # smoke launches nothing
        data_dir = data_dir or config.data_dir
        smoke_jobs = jobs.from_sweep(config, args.algorithms, args.datasets)
    elif args.algorithms and args.datasets:
        hparams = _parse_hparams(args.hparams)
        smoke_jobs = jobs.from_command_line(args.algorithms, args.datasets, hparams)
    else:
        raise UserError(
            "name a sweep file (e.g. dmg-domainbed smoke sweeps/pacs_resnet50.toml) or both "
            "--algorithms and --datasets"
        )
    synthetic = args.synthetic or args.synthetic_dir is not None
    ok = smoke_check(
        smoke_jobs, data_dir, args.steps, args.timeout, synthetic, args.synthetic_dir, args.json
    )
    return 0 if ok else 1


def data_check_command(args: argparse.Namespace) -> int:
    """For each dataset (default: every DomainBed dataset found under --data_dir and every
    registered manifest dataset): its domain and class folders against the names DomainBed
    reads, its image count per domain against the published releases, and, unless --quick,
    every image decoded (files that do not decode, modes DomainBed's loader changes, files of
    the same content in several domains or classes). Each finding says what was found, what
    DomainBed expects and the fix. Nothing is written. Exit status 1 when something would stop
    a job or change what it trains on."""
    from domainbed import datasets

    from dmg_domainbed import integration
    from dmg_domainbed.cores import usable_cores
    from dmg_domainbed.datasets.check import data_check
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
    workers = args.workers or usable_cores()
    for problem in problems:
        print(f"[ERROR] {problem}")
    failed = bool(problems)
    for name in chosen:
        report = data_check.check_dataset(name, args.data_dir, args.quick, workers, manifests)
        print("\n".join(data_check.render(report)))
        failed = failed or not report.ok
    print("NOT READY: fix the errors above" if failed else "READY: every dataset checked is ok")
    return 1 if failed else 0
