"""``dmg-domainbed doctor``: what would run here, and if not, why?

Each check is ``ok``, ``FAIL`` (the run would not start), ``warn`` (it would; something deserves
a look) or ``info``. With ``--dataset`` the verdict is for a run on it: what every run needs, its
data under ``--data_dir`` and the pretrained weights its model loads. Without, it is for the demo
(on the embedded RotatedDigits: no files), and the weights of a run on 224x224 images are listed
as what an image sweep will need (a missing file is a ``warn``). A torch and a torchvision that
do not go together fail, with the pip command that installs a matching pair: DomainBed's import
would otherwise end in an error about a torchvision operator, naming neither.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmg_domainbed import TESTED_DOMAINBED_COMMIT, _startup, domainbed_setup, register
from dmg_domainbed.datasets import input_shape
from dmg_domainbed.datasets.check.downloads import domainbed_checkout
from dmg_domainbed.errors import UserError
from dmg_domainbed.preflight import data, environment, requirements
from dmg_domainbed.preflight.hparams import checked_run

OK, FAIL, WARN, INFO = "ok", "FAIL", "warn", "info"
# Hparams looked up when no dataset is named: any of DomainBed's 224x224 image datasets.
IMAGE_DATASET_FOR_WEIGHTS = "PACS"
SMALL_INPUTS_NEED_NO_WEIGHTS = (
    "runs on datasets of small inputs (e.g. RotatedDigits, ColoredMNIST) load no pretrained "
    "weights: `--dataset NAME` checks one of them"
)
BACKBONE_HPARAMS = ("alexnet", "resnet18", "resnet50_augmix", "vit", "dinov2")
#: What a bare ``doctor`` judges: the demo, on the embedded dataset (no files, no weights).
DEMO_DATASET = "RotatedDigits"


@dataclass(frozen=True)
class Check:
    status: str
    title: str
    details: Sequence[str] = ()


def _domainbed_check() -> Check:
    checkout, tested = domainbed_checkout(), TESTED_DOMAINBED_COMMIT
    made = domainbed_setup.installed_folder()
    pth = domainbed_setup.pth_file()
    if checkout is None:
        fix = [
            f"not importable by {sys.executable}: run `dmg-domainbed install-domainbed` "
            "(`--from PATH_OR_URL` where GitHub cannot be reached)"
        ]
        if made is not None:
            fix.append(f"{pth} names {made}, which holds no importable `domainbed` package")
        return Check(FAIL, "DomainBed", fix)
    origin = (
        [f"importable through {pth}, the file `dmg-domainbed install-domainbed` writes"]
        if made is not None and made.resolve() == checkout
        else []
    )
    commit = domainbed_setup.checkout_commit(checkout)
    if commit is None:
        detail = f"{checkout}; commit unknown (git cannot tell); tested against {tested[:7]}"
        return Check(OK, "DomainBed", (detail, *origin))
    if commit != tested:
        detail = f"{checkout} at commit {commit[:12]}; this package is tested against {tested[:12]}"
        fix = "to use the tested commit: `dmg-domainbed install-domainbed --dir DIR --force`"
        return Check(WARN, "DomainBed", (detail, *origin, fix))
    detail = f"{checkout} at commit {commit[:12]} (the tested commit)"
    return Check(OK, "DomainBed", (detail, *origin))


def _plugin_check(algorithm: str, dataset: str | None) -> Check:
    from dmg_domainbed import integration

    probe = environment.probe_fresh_process()
    where = f"fresh `python` process, as the jobs start it ({probe.python or 'not found'})"
    disabled = ["DMG_DOMAINBED_DISABLE is set: unset it"] if _startup.disabled() else []
    if probe.error:
        return Check(FAIL, "plugins", (f"{where}: {probe.error}", *disabled, *probe.warnings))
    lines = [f"{where} runs {probe.executable}, DomainBed from {probe.domainbed}"]
    missing, failed = [], False
    for kind, group, registered, needed in [
        ("algorithms", integration.ALGORITHM_GROUP, probe.algorithms, algorithm),
        ("datasets", integration.DATASET_GROUP, probe.datasets, dataset),
        ("launchers", integration.LAUNCHER_GROUP, probe.launchers, None),
    ]:
        declared = list(integration.entry_points(group))
        lines.append(f"{kind} registered: {', '.join(n for n in declared if n in registered)}")
        missing += [name for name in declared if name not in registered]
        if needed is not None and needed not in registered:
            failed = True
            lines.append(f"{needed} is not registered in that process")
    if missing:
        lines += [f"not registered: {', '.join(missing)}", *disabled]
    status = FAIL if failed else (WARN if missing else OK)
    return Check(status, "plugins", (*lines, *probe.warnings))


def _weights_check(algorithm: str, dataset: str | None, hparams: Mapping[str, Any] | None) -> Check:
    """The weights the sweep preflight and smoke ask for (:mod:`.requirements`), file by file: a
    missing one fails a run on ``dataset``; without one it is what an image sweep needs first."""
    target = dataset or IMAGE_DATASET_FOR_WEIGHTS
    scope = f"{algorithm} on {dataset}" if dataset else f"{algorithm} on 224x224 image datasets"
    if (own := requirements.own_weights(algorithm, target, hparams)) is not None:
        lines = [f"{scope} loads its own weights; looked in, in order:"]
        lines += [
            f"{'found ' if f.present else 'absent'}  {f.what}: {f.filename} in {f.folder}"
            for f in own.locations
        ]
        lines += own.details
        ready, broken = own.ready, any(f.present for f in own.locations)
    else:
        files, problems = requirements.weight_files(algorithm, target, hparams)
        if not files and not problems:
            detail = f"none: {dataset} inputs {input_shape(target)} use no pretrained featurizer"
            return Check(OK, "pretrained weights", (detail,))
        effective = checked_run(algorithm, target, hparams).hparams
        backbone = ", ".join(f"{k}={effective[k]}" for k in BACKBONE_HPARAMS if k in effective)
        lines = [f"{scope} ({backbone}) loads:"]
        for f in files:
            if f.present:
                lines.append(f"cached  {f.what}: {f.path}")
            else:
                lines += [
                    f"MISSING {f.what}: not found at {f.path}",
                    f"        to get it: {f.fetch}",
                ]
        ready, broken = not problems and all(f.present for f in files), False
        if not ready:
            lines += problems + unwritable_caches([f.folder for f in files if not f.present])
            lines.append(
                "DomainBed downloads missing weights when it builds the model; offline, the job "
                "fails there"
            )
    if ready:
        return Check(OK, "pretrained weights", lines)
    unaffected = [] if dataset else [SMALL_INPUTS_NEED_NO_WEIGHTS]
    return Check(FAIL if dataset or broken else WARN, "pretrained weights", [*lines, *unaffected])


#: What starts the line of a cache folder that cannot be written (read by :func:`render`).
CANNOT_WRITE = "cannot write"


def unwritable_caches(folders: Sequence[Path]) -> list[str]:
    """Where a missing file cannot be written (a read-only HOME), and how to write elsewhere."""
    lines = []
    for folder in dict.fromkeys(folders):
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            lines.append(
                f"{CANNOT_WRITE} {folder}: {existing} is not writable, so the command above "
                "and DomainBed's own download would fail there"
            )
    if lines:
        lines.append(
            "        fix: point the caches at a folder you can write, in this shell and in the "
            "jobs' environment, e.g. export TORCH_HOME=/scratch/$USER/torch "
            "HF_HOME=/scratch/$USER/huggingface, then run doctor again"
        )
    return lines


def _input_check(algorithm: str, dataset: str | None) -> list[Check]:
    """Whether the algorithm takes the dataset's inputs (its ``check_input_shape(shape)``)."""
    from domainbed import algorithms

    from dmg_domainbed.algorithms.base import declarations_of

    if not dataset or (shape := input_shape(dataset)) is None:
        return []
    try:
        declarations_of(algorithms.get_algorithm_class(algorithm)).check_input_shape(shape)
    except UserError as error:
        return [Check(FAIL, "input", (str(error),))]
    return [Check(OK, "input", (f"{algorithm} takes {dataset}'s inputs {shape}",))]


def _data_check(dataset: str | None, data_dir: str | None) -> Check:
    from domainbed import datasets

    if dataset is not None:
        found = requirements.data_status(dataset, data_dir)
        if not found.ok:
            return Check(FAIL, "data", (f"{dataset}: {found.state}:", *found.problems))
        return Check(OK, "data", (f"{dataset}: {found.state}: {found.detail}",))
    if data_dir is None:
        return Check(INFO, "data", ("give --data_dir DIR to see which datasets are there",))
    lines = [f"under {os.path.abspath(data_dir)}:"]
    for name in datasets.DATASETS:
        found = requirements.data_status(name, data_dir)
        if found.state in (data.PRESENT, data.MISSING, data.INVALID):
            lines.append(f"{found.state:8} {name}: {found.detail}")
    return Check(INFO, "data", lines)


def diagnose(
    algorithm: str, dataset: str | None, data_dir: str | None, hparams: Mapping[str, Any] | None
) -> list[Check]:
    """Every check, in order. Raises :class:`UserError` for an unknown name or hparam."""
    checks = [_domainbed_check()]
    if checks[0].status == FAIL:
        return checks
    mismatch = environment.torch_pair_problem()
    if mismatch:
        checks.append(Check(FAIL, "torch and torchvision", mismatch))
    try:
        from domainbed import algorithms, datasets

        register()
    except Exception as error:  # any failure of DomainBed's own imports stops every run
        cause = ["the torch and torchvision above do not match: fix them first"] if mismatch else []
        failed = Check(FAIL, "DomainBed import", (f"{type(error).__name__}: {error}", *cause))
        return checks + [failed]
    for kind, given, valid in [
        ("algorithm", algorithm, algorithms.ALGORITHMS),
        ("dataset", dataset, datasets.DATASETS),
    ]:
        if given is not None and given not in valid:
            raise UserError(f"unknown {kind} {given!r}; choose one of: {', '.join(valid)}")
    checked_run(algorithm, dataset or IMAGE_DATASET_FOR_WEIGHTS, hparams)  # raises first
    checks += [
        _plugin_check(algorithm, dataset or DEMO_DATASET),
        Check(INFO, "torch", environment.torch_summary()),
        *_input_check(algorithm, dataset),
        _weights_check(algorithm, dataset, hparams),
        _data_check(dataset, data_dir),
    ]
    return checks


def render(checks: Sequence[Check], algorithm: str, dataset: str | None) -> str:
    """The report a user reads, ending with the verdict."""
    lines = [
        f"[{c.status:^4}] {c.title}" + "".join(f"\n       {d}" for d in c.details) for c in checks
    ]
    failed = ", ".join(c.title for c in checks if c.status == FAIL)
    run = f"a run of {algorithm} on {dataset}" if dataset else "the demo"
    if failed:
        lines.append(f"NOT READY: {run} would not start; see: {failed}")
    elif dataset:
        lines.append(f"READY: {run} would start")
    else:
        lines.append(
            f"READY: the demo (dmg-domainbed demo, on {DEMO_DATASET}) would start; --dataset NAME "
            f"checks a run of {algorithm} on a dataset"
        )
        weights = next((c for c in checks if c.title == "pretrained weights"), None)
        if weights is not None and weights.status == WARN:
            lines.append(
                f"  before a sweep of {algorithm} on 224x224 image datasets: get the pretrained "
                "weights listed MISSING above"
            )
            if any(detail.startswith(CANNOT_WRITE) for detail in weights.details):
                lines.append("  their caches cannot be written here: set the folders named above")
    return "\n".join(lines)


def is_ready(checks: Sequence[Check]) -> bool:
    return all(check.status != FAIL for check in checks)
