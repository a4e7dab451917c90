"""Checks of datasets made of domain folders of class folders, by names and counts (DomainBed
reads such a folder by names only: :mod:`dmg_domainbed.datasets.image_files`): DomainBed's image
datasets against :mod:`dmg_domainbed.datasets.layouts` (every folder a domain of the download,
the download's classes in every domain, the counts of a published release), manifest datasets
against their manifest (:func:`dmg_domainbed.datasets.manifest.file_problems`). Each finding
names the problem and the layout expected; :mod:`.images` looks at each image file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from dmg_domainbed.datasets.check.downloads import download_command
from dmg_domainbed.datasets.check.images import look_at_files
from dmg_domainbed.datasets.findings import ERROR, INFO, WARNING, DatasetReport, DomainCount
from dmg_domainbed.datasets.image_files import DomainFiles, domain_problems, list_domain, subfolders
from dmg_domainbed.datasets.layouts import SYNTHETIC_MARKER, ImageDatasetLayout
from dmg_domainbed.datasets.manifest import Manifest, file_problems, list_files
from dmg_domainbed.shortlist import shortlist

WHY_SAME_CLASSES = (
    "DomainBed numbers each domain's class folders on its own, in sorted order, so the classes "
    "after a missing or extra one get other labels in that domain, and torchvision's "
    "ImageFolder stops the job on an empty one ('Found no valid file for the classes'); give "
    "every domain the download's class folders (download it again)"
)


def _domains(
    report: DatasetReport, root: Path, expected: list[str], folders: list[str], fix: str
) -> dict[str, str]:
    """Errors for folders that are no domain and domains without a folder; a folder standing
    where a missing domain sorts is that domain to DomainBed, warned of and returned with it."""
    listing = f"{root}/ with {len(expected)} domain folders ({', '.join(expected)}) only"
    renamed = _in_place(folders, expected)
    for index, folder in enumerate(folders):
        if folder in renamed:
            report.add(
                WARNING,
                f"folder {folder!r} in {root} stands where domain {renamed[folder]!r} sorts",
                f"{listing}: DomainBed reads folders in sorted order, so {folder!r} is domain "
                f"{index} (--test_envs {index}), the same training under another name",
                f"rename it {renamed[folder]!r} to match the download",
            )
        elif folder not in expected:
            report.add(
                ERROR,
                f"folder {folder!r} in {root} is no domain of {report.dataset}",
                f"{listing}: DomainBed takes every folder there as a domain, in sorted order, so "
                f"{folder!r} would be domain {index} (--test_envs {index}) and shift or reorder "
                "the domains after it",
                "move it out of the dataset, or give it the download's name of its domain",
            )
    for domain in expected:
        if domain not in folders and domain not in renamed.values():
            report.add(ERROR, f"no folder of domain {domain!r} in {root}", listing, fix)
    return renamed


def _in_place(found: list[str], expected: list[str]) -> dict[str, str]:
    """Of sorted names as many as the sorted ``expected``, each of another name that sorts where
    a missing expected one does (DomainBed's folder numbers are positions), with that name."""
    if len(found) != len(expected):
        return {}
    pairs = zip(found, expected)
    return {name: want for name, want in pairs if name not in expected and want not in found}


def _class_names(report: DatasetReport, root: Path, domains: list[DomainFiles], download):
    """The download's classes, where every domain gives some of them the same other names, each
    where the download's sorts, by those names (warned of: DomainBed numbers them as the
    download's, whatever the names say)."""
    lists = {tuple(domain.classes) for domain in domains}
    renamed = _in_place(list(lists.pop()), sorted(download)) if len(lists) == 1 else {}
    if renamed:
        report.add(
            WARNING,
            f"class folder(s) {shortlist([f'{a!r} for {b!r}' for a, b in renamed.items()])} in "
            f"every domain of {root}",
            "the download's names: DomainBed numbers each domain's class folders in sorted "
            "order and these sort where the download's do, the same labels under other names",
            "rename them to match the download",
        )
    standing = {want: name for name, want in renamed.items()}
    return [standing.get(name, name) for name in download]


def _files(report: DatasetReport, domains: list[DomainFiles]) -> None:
    """Images outside class folders and files of other endings, which DomainBed passes over."""
    for domain in domains:
        if domain.outside_classes:
            report.add(
                WARNING,
                f"{len(domain.outside_classes)} image(s) directly in {domain.folder}, outside "
                f"any class folder: {shortlist(domain.outside_classes)}",
                "images in class folders: DomainBed does not read these",
                "move each into its class folder, or delete them",
            )
        if domain.skipped:
            endings = Counter(Path(p).suffix.lower() or Path(p).name for p in domain.skipped)
            report.add(
                INFO,
                f"{len(domain.skipped)} file(s) in {domain.folder} that DomainBed skips (not an "
                "image name ending): " + ", ".join(f"{n} {e}" for e, n in endings.most_common(8)),
            )


def _per_domain(counts: Mapping[str, int] | None) -> str:
    return f" ({', '.join(f'{domain} {n:,}' for domain, n in counts.items())})" if counts else ""


def _counts(report: DatasetReport, layout: ImageDatasetLayout, counts: dict[str, int], fix: str):
    """Compare each domain's count with each release; the table shows the matching release's
    counts, else the first release's that has per-domain counts."""
    total, releases = sum(counts.values()), layout.releases
    match = next((r for r in releases if r.per_domain in (counts, None) and r.total == total), None)
    shown = match or next((r for r in releases if r.per_domain), None)
    per_domain = shown.per_domain if shown else None
    found = {d: counts.get(d, 0) for d in sorted(layout.domains)}
    report.counts = [DomainCount(d, n, per_domain and per_domain[d]) for d, n in found.items()]
    if not releases:
        report.add(INFO, "no published image counts known: counts not compared")
    elif match:
        report.add(INFO, f"image counts match {match.name} ({match.source})")
    else:
        each = [
            f"{r.total:,} in {r.name}{_per_domain(r.per_domain)} [{r.source}]" for r in releases
        ]
        why = "the folder holds images the release does not (another copy, or added files)"
        if total < max(r.total for r in releases):
            why = "images are missing (an interrupted download or unpacking?)"
        report.add(
            ERROR,
            f"{total:,} images{_per_domain(found)}: the counts of no published release",
            "; or ".join(each),
            f"{why}: {fix}",
        )


def _deleted_by_download(report: DatasetReport, root: Path, listed_in: str) -> None:
    """Are files there that DomainBed's download deletes (DomainNet's duplicates)?"""
    import domainbed

    listing = Path(domainbed.__file__).parent / listed_in
    if not listing.is_file():
        return
    names = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
    present = [n for n in names if (root / n).is_file()]
    if present:
        report.add(
            ERROR,
            f"{len(present):,} of the {len(names):,} files DomainBed's download deletes are in "
            f"{root} (e.g. {present[0]})",
            f"{report.dataset} as DomainBed's download leaves it: without the files listed in "
            f"{listing}",
            f"delete them (the list's paths are relative to {root})",
        )


def _look_at_files(report: DatasetReport, domains: list[DomainFiles], workers: int) -> None:
    places = {p: (d.name, c) for d in domains for c, files in d.classes.items() for p in files}
    look_at_files(report, list(places), workers, places)


def check_image_dataset(
    report: DatasetReport, layout: ImageDatasetLayout, data_dir: Path, workers: int
) -> None:
    """Check one of DomainBed's image datasets under ``data_dir`` (decoding unless quick)."""
    root = data_dir / layout.folder
    report.location = str(root)
    fix = f"download it: {download_command(report.dataset, data_dir)}"
    if not root.is_dir():
        report.present = False
        expected = f"{root}/ with {len(layout.domains)} domain folders, each holding one per class"
        report.add(ERROR, f"not found: expected {expected}", fix=fix)
        return
    try:
        domains = [list_domain(root / name) for name in subfolders(root)]
    except OSError as error:
        report.add(
            ERROR,
            f"folder {root} cannot be read ({error.strerror or error})",
            "a folder this user can list: DomainBed lists it to find the domains",
            "let this user read it (chmod -R u+rX), or give another --data_dir",
        )
        return
    expected = sorted(layout.domains)
    renamed = _domains(report, root, expected, [d.name for d in domains], fix)
    ours = [replace(d, name=renamed.get(d.name, d.name)) for d in domains]
    ours = [d for d in ours if d.name in expected]
    synthetic = (root / SYNTHETIC_MARKER).is_file()
    known = layout.classes is not None and not synthetic
    found = sorted({c for d in ours for c in d.classes})
    classes = _class_names(report, root, ours, layout.classes) if known else found
    for domain in ours:
        where = f"domain folder {domain.folder}"
        for problem in domain_problems(domain, classes, where, WHY_SAME_CLASSES, known):
            report.add(ERROR, problem)
    _files(report, domains)
    if synthetic:
        report.add(
            INFO,
            "SYNTHETIC: random images, not the dataset (written by dmg_domainbed.synthetic); "
            "classes and counts not compared with the download",
        )
        report.counts = [DomainCount(d.name, d.images) for d in ours]
    else:
        _counts(report, layout, {d.name: d.images for d in ours}, fix)
        if layout.deleted_by_download:
            _deleted_by_download(report, root, layout.deleted_by_download)
    _look_at_files(report, domains, workers)


def check_manifest_dataset(report: DatasetReport, manifest: Manifest, workers: int) -> None:
    """Check a manifest dataset's files (decoding unless quick)."""
    report.location = str(manifest.csv or manifest.root)
    domains = list_files(manifest)
    for problem in file_problems(manifest, domains):
        report.add(ERROR, problem)
    if manifest.csv is None:
        _files(report, domains)
    report.counts = [DomainCount(d.name, d.images) for d in domains]
    _look_at_files(report, domains, workers)
