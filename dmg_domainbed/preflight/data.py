"""The quick data check (:mod:`dmg_domainbed.datasets.check.data_check`: names, counts, file
headers) summed up as one state for ``doctor``, the sweep preflight and ``smoke``: ``present``,
``missing``, or ``not usable`` where a job would stop, hang (a domain that cannot fill the batch)
or train on other data than the download's. ``dmg-domainbed data check`` gives the whole report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dmg_domainbed.datasets.check.data_check import (
    FILE_DATASETS,
    Batch,
    check_dataset,
    registered_manifests,
)
from dmg_domainbed.datasets.findings import INFO
from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS, NO_FILES

PRESENT, MISSING, INVALID = "present", "missing", "not usable"
NOT_NEEDED, NOT_CHECKED = "no files needed", "not checked"


@dataclass(frozen=True)
class DataStatus:
    """Whether a dataset's files are there and usable; ``problems``: errors, each with its fix."""

    state: str
    detail: str
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state not in (MISSING, INVALID)


def dataset_status(
    dataset: str, module: str, n_envs: int, data_dir: str | None, batch: Batch | None = None
) -> DataStatus:
    """Whether DomainBed will find ``dataset`` (defined in ``module``, with ``n_envs`` domains)
    under ``data_dir`` as its download leaves it, and, given the runs' ``batch``, each domain's
    training split able to fill it."""
    manifests = registered_manifests()
    if dataset not in manifests:
        if dataset in NO_FILES or module.startswith("dmg_domainbed.datasets"):
            return DataStatus(NOT_NEEDED, "built in memory; --data_dir is not read")
        if dataset not in FILE_DATASETS:
            return DataStatus(NOT_CHECKED, f"layout of {module}.{dataset} is not known")
        known = len(IMAGE_LAYOUTS[dataset].domains) if dataset in IMAGE_LAYOUTS else n_envs
        if known != n_envs:
            return DataStatus(NOT_CHECKED, f"{module}.{dataset} has {n_envs} domains, not {known}")
    report = check_dataset(dataset, data_dir, quick=True, manifests=manifests, batch=batch)
    problems = tuple(str(finding) for finding in report.errors)
    if not report.present:
        return DataStatus(MISSING, problems[0], problems)
    if problems:
        more = f"; dmg-domainbed data check --data_dir {data_dir} --datasets {dataset} says more"
        return DataStatus(INVALID, "\n    ".join(problems) + more, problems)
    notes = [f.found for f in report.findings if f.severity == INFO][:1]
    if report.warnings:
        notes.append(f"{len(report.warnings)} warning(s): see dmg-domainbed data check")
    images = sum(count.images for count in report.counts)
    found = f"{Path(report.location)} ({len(report.counts)} domains; {images:,} images)"
    return DataStatus(PRESENT, "; ".join([found, *notes]))
