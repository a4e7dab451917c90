"""The quick check's look at each image file: its first bytes, not its pixels.

DomainBed's loader opens every file whose name ends like an image's, and a file that is no image
stops the job at the first batch that draws it, possibly hours in. The first bytes of a file
tell most of these apart without decoding: an empty file, a macOS AppleDouble file (``._name``,
magic ``00 05 16 07``, which a copy from a Mac leaves beside each file and which ends like the
image it describes), or text saved under an image's name (an HTML error page). A file that
starts like none of the formats torchvision's ``IMG_EXTENSIONS`` name (JPEG, PNG, BMP, PPM/PGM,
TIFF, WebP) is handed to Pillow's ``Image.open``, which reads the header only, for the formats
Pillow knows by other marks. A whole image that is truncated or broken inside is only found by
decoding it (the full check).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence

from PIL import Image

from dmg_domainbed.datasets.findings import ERROR, REPLACE, DatasetReport

# Bytes read from the start of each file: enough for every signature below.
HEAD = 12
APPLEDOUBLE = b"\x00\x05\x16\x07"
# Starts of the image formats torchvision's ImageFolder reads by name.
SIGNATURES = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",
    b"BM",  # BMP
    b"II*\x00",  # TIFF, little-endian
    b"MM\x00*",  # TIFF, big-endian
    *(b"P%d" % n for n in range(1, 7)),  # PBM, PGM, PPM
)

EMPTY, MAC_METADATA, NOT_IMAGE, UNREADABLE = "empty", "AppleDouble", "not an image", "unreadable"
_STOPS = "DomainBed's loader raises on it and the job stops at the first batch that draws it"


def _starts_like_an_image(head: bytes) -> bool:
    webp = head.startswith(b"RIFF") and head[8:12] == b"WEBP"
    return webp or head.startswith(SIGNATURES)


def header_problem(path: str) -> str | None:
    """What is wrong with the file at ``path`` as an image, from its first bytes (``None``:
    it starts like an image)."""
    try:  # os-level calls: no buffered file object for 12 bytes
        descriptor = os.open(path, os.O_RDONLY)
        try:
            head = os.read(descriptor, HEAD)
        finally:
            os.close(descriptor)
    except OSError as error:
        return f"{UNREADABLE}: {error.strerror or error}"
    if not head:
        return EMPTY
    if head.startswith(APPLEDOUBLE) or os.path.basename(path).startswith("._"):
        return MAC_METADATA
    if _starts_like_an_image(head):
        return None
    try:
        with Image.open(path):
            return None
    except Exception:  # Pillow raises many kinds for a file it cannot identify
        return NOT_IMAGE


# problem -> (what the files are, what DomainBed expects)
FINDINGS = {
    EMPTY: ("are empty (0 bytes)", f"image files: {_STOPS}"),
    MAC_METADATA: (
        "are macOS metadata (AppleDouble '._' files a copy from a Mac leaves)",
        f"image files only: DomainBed reads them as images by their names; {_STOPS}",
    ),
    NOT_IMAGE: (
        "are not images: their first bytes are no image format's",
        f"image files: {_STOPS}",
    ),
    UNREADABLE: ("cannot be read", f"files this user can read: {_STOPS}"),
}


def add_header_findings(report: DatasetReport, paths: Sequence[str]) -> None:
    """One finding per kind of problem among ``paths``, naming a few of the files and counting
    the rest."""
    by_problem: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        problem = header_problem(path)
        if problem is not None:
            kind, _, why = problem.partition(": ")
            by_problem[kind].append(f"{path} ({why})" if why else path)
    for problem, files in sorted(by_problem.items()):
        report.files(ERROR, files, *FINDINGS[problem], REPLACE)
