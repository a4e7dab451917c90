"""Checks of datasets made of domain folders of class folders: DomainBed's image datasets
(against :mod:`dmg_domainbed.datasets.layouts`) and manifest datasets (against their manifest).

What DomainBed reads from such a folder depends on names only (see
:mod:`dmg_domainbed.datasets.image_files`), so the quick check looks at names and counts:

* every sub-folder is a domain, in sorted order: a folder that is no domain, or a domain named
  as another mirror names it (``Real_World``, ``pascal``), shifts or reorders the domains that
  ``--test_envs`` and DomainBed's tables refer to by position;
* each domain numbers its own class folders in sorted order: a class missing in one domain
  gives that domain's later classes other labels; an empty class folder stops the job;
* images outside class folders are not read; the counts are compared with each published
  release of the dataset;
* a folder that cannot be read stops the job or loses its images; a link back to a folder it
  lies in multiplies a class (:func:`~dmg_domainbed.datasets.image_files.listing_problems`).

The quick check also reads the first bytes of each image file (:mod:`.headers`); the full check
decodes every image (:mod:`.image_findings`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from dmg_domainbed.datasets.check.decoding import decode_all
from dmg_domainbed.datasets.check.downloads import download_command
from dmg_domainbed.datasets.check.headers import add_header_findings
from dmg_domainbed.datasets.check.image_findings import add_image_findings
from dmg_domainbed.datasets.findings import ERROR, INFO, WARNING, DatasetReport, DomainCount
from dmg_domainbed.datasets.image_files import DomainFiles, list_image_folders, listing_problems
from dmg_domainbed.datasets.layouts import SYNTHETIC_MARKER, ImageDatasetLayout
from dmg_domainbed.datasets.manifest import Manifest, file_problems, list_files
from dmg_domainbed.datasets.within_root import changed_outside, outside_note
from dmg_domainbed.shortlist import shortlist

_SHOWN = 8


def _key(name: str) -> str:
    """A name without case and separators: 'Real_World', 'real world' and 'RealWorld' agree."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _shown(names: Sequence[str]) -> str:
    return shortlist([repr(n) for n in names], _SHOWN)


def _match(folders: Sequence[str], expected: Sequence[str], aliases: dict[str, set[str]]):
    """{folder: expected name} for folders named as expected, or, failing that, by one alias."""
    matched = {f: f for f in folders if f in expected}
    for folder in folders:
        if folder in matched:
            continue
        taken = set(matched.values())
        candidates = [e for e in expected if e not in taken and _key(folder) in aliases[e]]
        if len(candidates) == 1:
            matched[folder] = candidates[0]
    return matched


def _domains(
    report: DatasetReport,
    root: Path,
    layout: ImageDatasetLayout,
    environments: Sequence[str],
    folders: list[str],
    fix: str,
) -> dict[str, str]:
    """Findings on the domain folders; returns {folder: domain} of the folders that are one."""
    expected = sorted(layout.domains)
    aliases = {d: {_key(d), *map(_key, layout.other_names.get(d, ()))} for d in expected}
    for domain, short in zip(expected, environments):
        aliases[domain].add(_key(short))
    matched = _match(folders, expected, aliases)
    listing = f"{root}/ with {len(expected)} domain folders ({', '.join(expected)})"
    for index, folder in enumerate(folders):
        if folder not in matched:
            report.add(
                ERROR,
                f"folder {folder!r} in {root} is no domain of {report.dataset}",
                f"{listing} only: DomainBed takes every folder there as a domain, in sorted "
                f"order, so {folder!r} would be domain {index} (--test_envs {index}) and shift "
                "the domains after it",
                f"move it out: mv '{root / folder}' '{root.parent}/'",
            )
    for domain in expected:
        if domain not in matched.values():
            report.add(ERROR, f"no folder of domain {domain!r} in {root}", listing, fix)
    for index, folder in enumerate(folders):
        domain = matched.get(folder, folder)
        if domain == folder:
            continue
        position = expected.index(domain)
        moved = position != index
        consequence = ""
        if moved:
            called = f", DomainBed's {environments[index]!r}" if index < len(environments) else ""
            consequence = (
                f": sorted, {folder!r} comes at position {index} (--test_envs {index}{called}) "
                f"where {domain!r} belongs at {position}"
            )
        report.add(
            ERROR if moved else WARNING,
            f"folder {folder!r} is domain {domain!r} as another copy names it",
            f"the download's name {domain!r}{consequence}",
            f"rename it: mv '{root / folder}' '{root / domain}'",
        )
    return matched


def _classes(
    report: DatasetReport,
    domains: list[DomainFiles],
    expected: Sequence[str] | None,
    root: Path,
    fix: str,
) -> None:
    """Every domain must hold the same class folders (the download's, where known); renames are
    given as commands where they change nothing outside ``root``."""
    lists = [tuple(d.classes) for d in domains]
    reference = list(expected or Counter(lists).most_common(1)[0][0])
    same_everywhere = len(set(lists)) == 1
    why = (
        "DomainBed numbers each domain's class folders on its own, in sorted order, so the "
        "classes after a missing or extra one get other labels in that domain"
    )
    for domain in domains:
        where = f"domain folder {domain.folder}"
        names = list(domain.classes)
        keys = {_key(n): n for n in names}
        missing = [c for c in reference if c not in names and _key(c) not in keys]
        known = {_key(c) for c in reference}
        extra = [n for n in names if n not in reference and _key(n) not in known]
        renamed = [(keys[_key(c)], c) for c in reference if c not in names and _key(c) in keys]
        if missing:
            report.add(
                ERROR,
                f"{where} has no folder of class(es) {_shown(missing)}",
                f"the same {len(reference)} class folders in every domain: {why}",
                fix,
            )
        if extra:
            report.add(
                ERROR,
                f"{where} has class folder(s) {_shown(extra)} that the others do not",
                f"the same {len(reference)} class folders in every domain: {why}",
                f"move them out of {domain.folder}, or add them to every domain",
            )
        if renamed:
            renames = (
                outside_note([domain.folder / old for old, _ in renamed], root)
                if changed_outside(domain.folder / renamed[0][0], root)
                else shortlist(
                    [f"mv '{domain.folder / o}' '{domain.folder / n}'" for o, n in renamed],
                    _SHOWN,
                    "; ",
                )
            )
            report.add(
                WARNING if same_everywhere else ERROR,
                f"{where} names class folder(s) as another copy does: "
                + shortlist([f"{old!r} for {new!r}" for old, new in renamed], _SHOWN),
                "the download's names"
                + ("" if same_everywhere else f", the same in every domain: {why}"),
                f"rename them: {renames}",
            )


def _files(
    report: DatasetReport, domains: list[DomainFiles], root: Path, manifest: bool = False
) -> None:
    """Files DomainBed passes over, and, unless a manifest's problems name them already, folders
    it cannot read, loops and class folders without images (of the dataset in ``root``)."""
    for domain in domains:
        if not manifest:
            for problem in listing_problems(domain, root):
                report.add(ERROR, f"domain folder {domain.folder}: {problem}")
        empty = [] if manifest else [name for name, files in domain.classes.items() if not files]
        for name in empty:
            report.add(
                ERROR,
                f"class folder {domain.folder / name} holds no image file",
                "an image in every class folder: torchvision's ImageFolder stops the job "
                "with 'Found no valid file for the classes' while DomainBed loads the data",
                "put its images back, or remove that class from every domain",
            )
        if domain.outside_classes:
            report.add(
                WARNING,
                f"{len(domain.outside_classes)} image(s) directly in {domain.folder}, outside "
                f"any class folder: {_shown(domain.outside_classes)}",
                "images in class folders: DomainBed does not read these",
                "move each into its class folder, or delete them",
            )
        if domain.skipped:
            endings = Counter(Path(p).suffix.lower() or Path(p).name for p in domain.skipped)
            report.add(
                INFO,
                f"{len(domain.skipped)} file(s) in {domain.folder} that DomainBed skips (not an "
                "image name ending): "
                + ", ".join(f"{n} {e}" for e, n in endings.most_common(_SHOWN)),
            )


def _counts(report: DatasetReport, layout: ImageDatasetLayout, counts: dict[str, int], fix: str):
    """Compare each domain's count with each release; the table shows the matching release's
    counts, else the first release's that has per-domain counts."""
    total = sum(counts.values())
    match = next(
        (
            r
            for r in layout.releases
            if r.per_domain == counts or (r.per_domain is None and r.total == total)
        ),
        None,
    )
    shown = match or next((r for r in layout.releases if r.per_domain), None)
    report.counts = [
        DomainCount(
            d, counts.get(d, 0), shown.per_domain[d] if shown and shown.per_domain else None
        )
        for d in sorted(layout.domains)
    ]
    if not layout.releases:
        report.add(INFO, "no published image counts known: counts not compared")
        return
    if match:
        report.add(INFO, f"image counts match {match.name} ({match.source})")
        return
    published = "; or ".join(
        f"{r.total:,} in {r.name}"
        + (f" ({', '.join(f'{d} {n:,}' for d, n in r.per_domain.items())})" if r.per_domain else "")
        + f" [{r.source}]"
        for r in layout.releases
    )
    found = ", ".join(f"{d} {counts.get(d, 0):,}" for d in sorted(layout.domains))
    fewer = total < max(r.total for r in layout.releases)
    report.add(
        ERROR,
        f"{total:,} images ({found}): the counts of no published release",
        published,
        (
            "images are missing (an interrupted download or unpacking?): "
            if fewer
            else "the folder holds images the release does not (another mirror, or added files): "
        )
        + fix,
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
        outside = [root / n for n in present if changed_outside(root / n, root)]
        remove = (
            outside_note(outside, root)
            if outside
            else f"python -c \"import os; root = '{root}'; [os.remove(os.path.join(root, "
            f"n.strip())) for n in open('{listing}') if os.path.isfile(os.path.join(root, "
            'n.strip()))]"'
        )
        report.add(
            ERROR,
            f"{len(present):,} of the {len(names):,} files DomainBed's download deletes are in "
            f"{root} (e.g. {present[0]})",
            f"{report.dataset} as DomainBed's download leaves it: without the files listed in "
            f"{listing}",
            remove,
        )


def _look_at_files(
    report: DatasetReport, domains: list[DomainFiles], root: Path, workers: int
) -> None:
    """Read each image file's header (quick), or decode it."""
    places = {
        path: (domain.name, name)
        for domain in domains
        for name, files in domain.classes.items()
        for path in files
    }
    if report.quick:
        add_header_findings(report, list(places), root)
        return
    results = decode_all(list(places), workers, f"{report.dataset}: decoding")
    add_image_findings(report, results, root, places)


def check_image_dataset(
    report: DatasetReport,
    layout: ImageDatasetLayout,
    environments: Sequence[str],
    data_dir: Path,
    workers: int,
) -> None:
    """Check one of DomainBed's image datasets under ``data_dir`` (decoding unless quick)."""
    root = data_dir / layout.folder
    report.location = str(root)
    fix = f"download it again: {download_command(report.dataset, data_dir)}"
    if not root.is_dir():
        report.present = False
        report.add(
            ERROR,
            f"not found: expected {root}/ with {len(layout.domains)} domain folders, each "
            "holding one folder per class",
            fix=f"download it: {download_command(report.dataset, data_dir)}",
        )
        return
    try:
        domains = list_image_folders(root)
    except OSError as error:
        report.add(
            ERROR,
            f"folder {root} cannot be read ({error.strerror or error})",
            "a folder this user can list: DomainBed lists it to find the domains",
            f"let this user read it (e.g. chmod -R u+rX '{root}'), or give another --data_dir",
        )
        return
    matched = _domains(report, root, layout, environments, [d.name for d in domains], fix)
    ours = [d for d in domains if d.name in matched]
    synthetic = (root / SYNTHETIC_MARKER).is_file()
    if ours:
        _classes(report, ours, None if synthetic else layout.classes, root, fix)
    _files(report, domains, root)
    if synthetic:
        report.add(
            INFO,
            "SYNTHETIC: random images, not the dataset (written by dmg_domainbed.synthetic); "
            "classes and counts not compared with the download",
        )
        report.counts = [DomainCount(matched[d.name], d.images) for d in ours]
    else:
        _counts(report, layout, {matched[d.name]: d.images for d in ours}, fix)
        if layout.deleted_by_download:
            _deleted_by_download(report, root, layout.deleted_by_download)
    _look_at_files(report, domains, root, workers)


def check_manifest_dataset(report: DatasetReport, manifest: Manifest, workers: int) -> None:
    """Check a manifest dataset's files (decoding unless quick)."""
    report.location = str(manifest.csv or manifest.root)
    domains = list_files(manifest)
    for problem in file_problems(manifest, domains):
        report.add(ERROR, problem)
    if manifest.csv is None:
        _files(report, domains, manifest.root, manifest=True)
    report.counts = [DomainCount(d.name, d.images) for d in domains]
    _look_at_files(report, domains, manifest.root, workers)
