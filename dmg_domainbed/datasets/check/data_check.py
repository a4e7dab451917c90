"""Is a dataset on disk what DomainBed will read, before any job starts?

:func:`check_dataset` serves ``data check``, the doctor and the sweep preflight alike: DomainBed's
image (:mod:`.folder_check`), MNIST and WILDS datasets, and manifest datasets. ``quick`` looks at
names, counts and file headers; the full check also decodes every image. Both refuse domains that
cannot fill the runs' :class:`Batch`. Nothing is written or downloaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.datasets import featurizer_of, input_shape
from dmg_domainbed.datasets.check.folder_check import check_image_dataset, check_manifest_dataset
from dmg_domainbed.datasets.check.mnist_check import check_mnist
from dmg_domainbed.datasets.check.wilds_check import check_wilds
from dmg_domainbed.datasets.findings import ERROR, DatasetReport
from dmg_domainbed.datasets.layouts import (
    IMAGE_LAYOUTS,
    MNIST_DATASETS,
    MNIST_FOLDER,
    WILDS_LAYOUTS,
)
from dmg_domainbed.datasets.manifest import Manifest
from dmg_domainbed.datasets.training_split import HOLDOUT_FRACTION, batch_findings
from dmg_domainbed.folders import check_creatable, check_outside

# DomainBed's datasets whose files this check knows, in DomainBed's order.
FILE_DATASETS = (*MNIST_DATASETS, *IMAGE_LAYOUTS, *WILDS_LAYOUTS)


@dataclass(frozen=True)
class Batch:
    """The batch runs train with: ``size``, else (``None``) DomainBed's default for ERM on the
    dataset; ``source`` says where it comes from. A sweep gives the largest batch its jobs
    draw (:func:`dmg_domainbed.sweep.plan.draws`), as every domain trains in some job."""

    size: int | None = None
    holdout_fraction: float = HOLDOUT_FRACTION
    source: str = "DomainBed's default batch_size"


def _add_batch_findings(report: DatasetReport, domains: list[str], batch: Batch) -> None:
    """An error for each domain whose training split cannot fill ``batch``. MNIST's two files
    are pooled and dealt out to the domains in turn."""
    from domainbed import hparams_registry

    examples = [(count.domain, count.images) for count in report.counts]
    if report.dataset in MNIST_DATASETS:
        examples = [(name, sum(n for _, n in examples) // len(domains)) for name in domains]
    size = batch.size or hparams_registry.default_hparams("ERM", report.dataset)["batch_size"]
    fraction = batch.holdout_fraction
    report.findings += batch_findings(report.dataset, examples, size, fraction, batch.source)


def registered_manifests() -> dict[str, Manifest]:
    """The manifest datasets registered into DomainBed here, by name."""
    from domainbed import datasets

    classes = {name: vars(datasets).get(name) for name in datasets.DATASETS}
    return {name: cls.MANIFEST for name, cls in classes.items() if hasattr(cls, "MANIFEST")}


def check_dataset(
    dataset: str,
    data_dir: str | Path | None,
    quick: bool,
    workers: int = 1,
    manifests: Mapping[str, Manifest] | None = None,
    batch: Batch | None = Batch(),
) -> DatasetReport:
    """The findings on ``dataset`` (a DomainBed dataset with files, or one of ``manifests``,
    default: the registered ones) under ``data_dir``, for runs with ``batch`` (default:
    DomainBed's default batch; ``None``: batches not looked at)."""
    from domainbed import datasets

    manifests = registered_manifests() if manifests is None else manifests
    manifest = manifests.get(dataset)
    if manifest is None and dataset not in FILE_DATASETS:
        raise ValueError(f"no check of the files of {dataset}")
    report = DatasetReport(dataset, str(data_dir), quick)
    if manifest is None:
        domains, shape = datasets.get_dataset_class(dataset).ENVIRONMENTS, input_shape(dataset)
    else:
        domains, shape = manifest.domains, manifest.input_shape
    report.featurizer = featurizer_of(shape)
    if manifest is not None:
        check_manifest_dataset(report, manifest, workers)
    elif data_dir is None:
        report.present = False
        report.add(ERROR, "no --data_dir given", f"the folder that holds {dataset}")
        return report
    else:
        base = Path(data_dir).expanduser().resolve()
        if dataset in IMAGE_LAYOUTS:
            check_image_dataset(report, IMAGE_LAYOUTS[dataset], base, workers)
        elif dataset in WILDS_LAYOUTS:
            check_wilds(report, WILDS_LAYOUTS[dataset], len(domains), base, workers)
        else:
            check_mnist(report, base)
    if report.present and batch is not None:
        _add_batch_findings(report, domains, batch)
    return report


def dataset_folders(data_dir: str | Path) -> dict[str, Path]:
    """The folder under ``data_dir`` that holds each of DomainBed's datasets with files."""
    layouts = IMAGE_LAYOUTS | WILDS_LAYOUTS
    base = Path(data_dir).expanduser()
    return {d: base / (layouts[d].folder if d in layouts else MNIST_FOLDER) for d in FILE_DATASETS}


def check_sweep_output_dir(output_dir: Path, data_dir: str, option: str) -> None:
    """:class:`UserError` if ``output_dir`` (``option``), which jobs write into, cannot be made
    or lies in a dataset's folder (a registered manifest's root, or one of DomainBed's under
    ``data_dir``), where DomainBed would read the job folders as domains or classes."""
    manifests = {name: manifest.root for name, manifest in registered_manifests().items()}
    check_creatable(output_dir, option)
    why = ": job folders written in it would be read as the dataset's domains or classes"
    for dataset, folder in (dataset_folders(data_dir) | manifests).items():
        check_outside(output_dir, [folder], option, f"{dataset} dataset", "an output_dir", why)


def found_under(data_dir: str | Path) -> list[str]:
    """DomainBed's datasets with files whose folder (or MNIST's raw files) is in ``data_dir``."""
    return [
        dataset
        for dataset, folder in dataset_folders(data_dir).items()
        if (folder / "raw" if dataset in MNIST_DATASETS else folder).is_dir()
    ]


def _table(report: DatasetReport) -> list[str]:
    if not report.counts:
        return []
    width = max(len("domain"), *(len(c.domain) for c in report.counts))
    known = any(c.expected is not None for c in report.counts)
    lines = [f"  {'domain':<{width}}  {'images':>9}" + ("  published" if known else "")]
    for count in report.counts:
        line = f"  {count.domain:<{width}}  {count.images:>9,}"
        if count.expected is not None:
            mark = "" if count.images == count.expected else "  <- differs"
            line += f"  {count.expected:>9,}{mark}"
        lines.append(line)
    return lines


def render(report: DatasetReport) -> list[str]:
    """The report a user reads for one dataset, ending with its verdict."""
    how = "quick: names, counts, headers" if report.quick else f"{report.decoded:,} decoded"
    lines = [f"{report.dataset}: {report.location} ({how})", *_table(report)]
    if report.featurizer:
        lines.append(f"  featurizer: {report.featurizer}")
    lines += [f"  [{finding.severity:^5}] {finding}" for finding in report.findings]
    errors, warnings = len(report.errors), len(report.warnings)
    if errors:
        lines.append(
            f"{report.dataset}: NOT READY: {errors} error(s), {warnings} warning(s): a run "
            "would stop or train on other data than the download's; fix the errors above"
        )
    else:
        lines.append(f"{report.dataset}: ok ({warnings} warning(s))")
    return lines
