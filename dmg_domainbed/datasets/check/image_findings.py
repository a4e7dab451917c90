"""Findings about the images themselves, from decoding every file (:mod:`.decoding`): files that
do not decode, modes DomainBed's loader changes, and files of the same content in several
domains or classes.

DomainBed's image folders read every file as torchvision's ``default_loader`` does: Pillow's
``convert("RGB")``. That is exact for 8-bit RGB, grayscale, bilevel and palette images; it
converts CMYK without a colour profile (the colours change), clips 16- and 32-bit values at 255
(most of the image turns white) and drops an alpha channel (transparent parts show whatever
colour they store).

A copy in two domains or two classes is a warning, not an error: published releases hold some
(DomainBed's own download of DomainNet deletes 9,431 it knows of), and a copy with files added
also fails the comparison of image counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from dmg_domainbed.datasets.check.decoding import Decoded
from dmg_domainbed.datasets.findings import (
    ERROR,
    INFO,
    REPLACE,
    WARNING,
    DatasetReport,
    Finding,
)
from dmg_domainbed.shortlist import SHOWN, shortlist

_CLIPPED = (
    ERROR,
    "DomainBed's loader converts it to 8-bit RGB by clipping at 255: most of it turns white",
    "rescale it to 8 bits (e.g. magick IN -auto-level -depth 8 OUT), or delete it",
)
_ALPHA = (
    WARNING,
    "DomainBed's loader drops the alpha channel: transparent parts show the colour they store",
    "flatten it onto the background it is meant to have, if that matters",
)
# mode -> (severity, what DomainBed's loader does to it, fix)
MODE_EFFECTS = {
    "CMYK": (
        ERROR,
        "DomainBed's loader converts CMYK to RGB without its colour profile: the colours change",
        "convert it to sRGB with its profile (e.g. magick IN -colorspace sRGB OUT), or delete it",
    ),
    "I": _CLIPPED,
    "F": _CLIPPED,
    "RGBA": _ALPHA,
    "LA": _ALPHA,
    "PA": _ALPHA,
    "P+transparency": _ALPHA,
}
# Pillow's mode names that say little to a reader.
MODE_NAMES = {"I": "I (16- or 32-bit integers)", "F": "F (32-bit floats)"}
# Modes DomainBed's loader converts exactly.
EXACT_MODES = frozenset({"RGB", "L", "P", "1"})


def _mode_of(result: Decoded) -> str:
    if result.transparency:
        return "P+transparency"
    return "I" if result.mode.startswith("I;16") else result.mode


def _undecodable(report: DatasetReport, results: Sequence[Decoded]) -> None:
    failed = [r for r in results if r.error is not None]
    for tolerated, what, expected in (
        (
            True,
            "are truncated",
            "complete images: DomainBed decodes a truncated one with its missing part filled in "
            "(it sets Pillow's LOAD_TRUNCATED_IMAGES) and trains on that",
        ),
        (
            False,
            "cannot be decoded",
            "images that decode: DomainBed's loader raises on such a file and the job stops at "
            "the first batch that draws it, possibly hours in",
        ),
    ):
        paths = [f"{r.path} ({r.error})" for r in failed if r.decodes_as_domainbed == tolerated]
        report.files(ERROR, paths, what, expected, REPLACE)


def _modes(report: DatasetReport, results: Sequence[Decoded]) -> None:
    by_mode: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if result.error is None and _mode_of(result) not in EXACT_MODES:
            by_mode[_mode_of(result)].append(result.path)
    for mode, paths in sorted(by_mode.items()):
        severity, effect, fix = MODE_EFFECTS.get(
            mode,
            (WARNING, "DomainBed's loader converts it to RGB with Pillow", "check it looks right"),
        )
        what = f"in mode {MODE_NAMES.get(mode, mode)}"
        report.files(severity, paths, what, f"8-bit RGB or grayscale images; {effect}", fix)


def _duplicates(
    report: DatasetReport, results: Sequence[Decoded], places: Mapping[str, tuple[str, str]]
) -> None:
    groups: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if result.digest:
            groups[result.digest].append(result.path)
    findings = []
    for paths in groups.values():
        where = {places[path] for path in paths}
        if len(where) < 2:
            continue
        across = "domains" if len({domain for domain, _ in where}) > 1 else "classes"
        copies = f"{len(paths):,} files of " if len(paths) > SHOWN else ""
        findings.append(
            Finding(
                WARNING,
                f"{copies}same content in several {across}: {shortlist(paths)}",
                "each image in one domain and one class: a copy in a test domain is also "
                "trained on, a copy in two classes has two labels",
                "keep the one where the image belongs (a path reached through a link to shared "
                "storage is the shared file itself: take the link out instead)",
            )
        )
    report.listed(WARNING, findings, "groups of files of the same content")


def add_image_findings(
    report: DatasetReport,
    results: Sequence[Decoded],
    places: Mapping[str, tuple[str, str]] | None = None,
) -> None:
    """Add the findings of decoded ``results``; ``places`` maps each path to its (domain,
    class) for finding copies across them (left out: not looked for)."""
    report.decoded = len(results)
    _undecodable(report, results)
    _modes(report, results)
    if places is not None:
        _duplicates(report, results, places)
    bad = sum(result.error is not None for result in results)
    report.add(INFO, f"{len(results) - bad:,} of {len(results):,} images decoded")
