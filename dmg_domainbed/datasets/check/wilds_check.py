"""The WILDS datasets DomainBed reads (WILDSCamelyon, WILDSFMoW), read as DomainBed reads them:
through the WILDS class, from ``<data_dir>/<name>_v<version>/`` with its release marker. The
metadata table's domain field gives each domain's count, compared with DomainBed's domains, and
its rows are compared with the image files on disk; the full check decodes every image file.
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from pathlib import Path

from dmg_domainbed.datasets.check.downloads import download_command
from dmg_domainbed.datasets.check.images import look_at_files
from dmg_domainbed.datasets.findings import ERROR, DatasetReport, DomainCount
from dmg_domainbed.datasets.layouts import WildsLayout


def check_wilds(
    report: DatasetReport, layout: WildsLayout, domains: int, data_dir: Path, workers: int
) -> None:
    release = data_dir / layout.folder
    report.location = str(release)
    fix = f"download it: {download_command(report.dataset, data_dir)}"
    if not (release / layout.marker).is_file():
        report.present = release.is_dir()
        report.add(
            ERROR,
            f"not found: expected {release / layout.marker}, the marker of the WILDS release",
            fix=fix,
        )
        return
    module, name = layout.wilds_class.split(":")
    try:
        dataset = getattr(importlib.import_module(module), name)(root_dir=str(data_dir))
    except Exception as error:  # whatever the WILDS package raises on a broken release
        report.add(
            ERROR,
            f"the WILDS package cannot read {release}: {type(error).__name__}: {error}",
            "a whole release",
            fix,
        )
        return
    column = dataset.metadata_fields.index(layout.domain_field)
    per_domain = Counter(dataset.metadata_array[:, column].tolist())
    report.counts = [
        DomainCount(f"{layout.domain_field}_{value}", n) for value, n in sorted(per_domain.items())
    ]
    if len(per_domain) != domains:
        report.add(
            ERROR,
            f"{len(per_domain)} values of {layout.domain_field} in the metadata of {release}",
            f"{domains}, DomainBed's domains of {report.dataset}",
            fix,
        )
    walk = sorted(os.walk(release / layout.images))
    files = [os.path.join(folder, name) for folder, _, names in walk for name in sorted(names)]
    rows = len(dataset.metadata_array)
    if len(files) < rows:
        report.add(
            ERROR,
            f"{len(files):,} files in {release / layout.images}",
            f"an image for each of the metadata's {rows:,} rows: {rows - len(files):,} are missing",
            fix,
        )
    if not report.quick:
        look_at_files(report, files, workers)
