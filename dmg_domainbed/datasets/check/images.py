"""Each image file looked at as DomainBed's loader reads it: torchvision's ``default_loader``
(Pillow's ``convert("RGB")``), with ``LOAD_TRUNCATED_IMAGES`` set by DomainBed's ``datasets.py``.

Quick: each file's first bytes (known signatures, else Pillow's header-only ``Image.open``) find
what stops a job at the first batch that draws it: an empty file, a macOS ``._name``, a web page
under an image's name. Full: every file read, hashed (copies across domains or classes are a
warning: published releases hold some) and decoded strictly, then as DomainBed does, which tells
a truncated image it trains on from one that stops a job; modes the conversion changes named.
Workers are forked, not spawned (which would import DomainBed and torch again, seconds each),
and touch only files and Pillow, imported before the fork.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from PIL import Image, ImageFile, UnidentifiedImageError

from dmg_domainbed.datasets.findings import ERROR, INFO, WARNING, DatasetReport, Finding
from dmg_domainbed.shortlist import SHOWN, shortlist

# Files per task sent to a worker: the pool's messages cost little, the progress bar moves.
CHUNK = 64
# Fewer files than this are decoded here: starting worker processes would cost more.
IN_PROCESS_BELOW = 256
# Groups of copies given one by one; the rest are counted.
MAX_COPIES = 20
REPLACE = "replace them with the download's files, or delete them"
APPLEDOUBLE = b"\x00\x05\x16\x07"
# The first bytes of the formats torchvision's ImageFolder reads by name (and WebP's RIFF).
SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"II*\x00", b"MM\x00*")
SIGNATURES += tuple(b"P%d" % n for n in range(1, 7))  # PBM, PGM, PPM

_STOPS = "DomainBed's loader raises on such a file: the job stops at the first batch that draws it"
_IMAGE_FILES = f"image files: {_STOPS}"
# kind of file -> (what the files are, what DomainBed expects)
FILE_PROBLEMS = {
    "AppleDouble": (
        "are macOS metadata (AppleDouble '._' files a copy from a Mac leaves)",
        f"image files only: DomainBed reads them as images by their names; {_STOPS}",
    ),
    "empty": ("are empty (0 bytes)", _IMAGE_FILES),
    "not an image": ("are not images: their first bytes are no image format's", _IMAGE_FILES),
    "unreadable": ("cannot be read", f"files this user can read: {_STOPS}"),
    "truncated": (
        "are truncated",
        "complete images: DomainBed decodes a truncated one with its missing part filled in "
        "(it sets Pillow's LOAD_TRUNCATED_IMAGES) and trains on that",
    ),
    "undecodable": ("cannot be decoded", f"images that decode: {_STOPS}, possibly hours in"),
}

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
EXACT_MODES = frozenset({"RGB", "L", "P", "1"})  # DomainBed's loader converts them exactly
# mode -> (severity, what DomainBed's loader does to it, fix)
MODE_EFFECTS = {
    "CMYK": (
        ERROR,
        "DomainBed's loader converts CMYK to RGB without its colour profile: the colours change",
        "convert it to sRGB with its profile (e.g. magick IN -colorspace sRGB OUT), or delete it",
    ),
    "I": _CLIPPED,
    "F": _CLIPPED,
    **dict.fromkeys(("RGBA", "LA", "PA", "P+transparency"), _ALPHA),
}
OTHER_MODE = (WARNING, "DomainBed's loader converts it to RGB with Pillow", "check it looks right")
MODE_NAMES = {"I": "I (16- or 32-bit integers)", "F": "F (32-bit floats)"}
Places = Mapping[str, tuple[str, str]]  # each file's (domain, class)


def header_problem(path: str) -> tuple[str, str] | None:
    """(kind of problem, why) of the file at ``path`` from its first bytes; ``None``: it starts
    like an image."""
    try:
        with open(path, "rb", buffering=0) as stream:  # unbuffered: 12 bytes, no more
            head = stream.read(12)
    except OSError as error:
        return "unreadable", error.strerror or str(error)
    if not head:
        return "empty", ""
    if head.startswith(APPLEDOUBLE) or os.path.basename(path).startswith("._"):
        return "AppleDouble", ""
    if head.startswith(SIGNATURES) or (head.startswith(b"RIFF") and head[8:12] == b"WEBP"):
        return None
    try:
        with Image.open(path):
            return None
    except Exception:  # Pillow raises many kinds for a file it cannot identify
        return "not an image", ""


@dataclass(frozen=True)
class Decoded:
    """What reading one file found: ``error`` when strict decoding failed (``tolerated``:
    DomainBed's decoding succeeds), else its ``mode`` (``I`` for any integer mode,
    ``P+transparency`` for a palette with a transparent colour); ``digest`` of its bytes."""

    path: str
    digest: str = ""
    mode: str = ""
    error: str | None = None
    tolerated: bool = False


def _load(data: bytes, truncated: bool) -> Image.Image:
    """``data`` decoded with Pillow's ``LOAD_TRUNCATED_IMAGES`` set to ``truncated``."""
    before, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, truncated
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def decode(path: str) -> Decoded:
    """Read, hash and strictly decode one file."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        return Decoded(path, error=f"cannot be read: {error.strerror or error}")
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    try:
        image = _load(data, truncated=False)
    except Exception as error:  # Pillow raises many kinds for a broken file
        problem = f"{type(error).__name__}: {error}"
        if isinstance(error, UnidentifiedImageError):
            problem = "not an image file Pillow can identify"
        try:
            _load(data, truncated=True)
        except Exception:
            return Decoded(path, digest, error=problem)
        return Decoded(path, digest, error=problem, tolerated=True)
    mode = "I" if image.mode.startswith("I;16") else image.mode
    if mode == "P" and "transparency" in image.info:
        mode = "P+transparency"
    return Decoded(path, digest, mode)


def _decode_all(paths: Sequence[str], workers: int, description: str) -> list[Decoded]:
    """Decode ``paths`` with ``workers`` forked processes (here when 1, or for a few files),
    with a progress bar on a terminal; results in the order of ``paths``."""
    from tqdm import tqdm

    with contextlib.ExitStack() as stack:
        decoded = map(decode, paths)
        if workers > 1 and len(paths) >= IN_PROCESS_BELOW:
            fork = "fork" in multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if fork else None)
            pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=context))
            decoded = pool.map(decode, paths, chunksize=CHUNK)
        return list(tqdm(decoded, total=len(paths), desc=description, unit="img", disable=None))


def _duplicates(results: Sequence[Decoded], places: Places) -> list[Finding]:
    """A warning for each group of files of one content in several domains or classes
    (:data:`MAX_COPIES` of them, then their count)."""
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
    if len(findings) > MAX_COPIES:
        more = f"... and {len(findings) - MAX_COPIES} more groups of files of the same content"
        findings[MAX_COPIES:] = [Finding(WARNING, more)]
    return findings


def look_at_files(
    report: DatasetReport, paths: Sequence[str], workers: int, places: Places | None = None
) -> None:
    """The findings on each file's first bytes (quick), else on each file decoded with
    ``workers`` processes; ``places`` maps each path to its (domain, class) for finding copies
    across them (left out: not looked for)."""
    if report.quick:
        by_kind: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            if found := header_problem(path):
                kind, why = found
                by_kind[kind].append(f"{path} ({why})" if why else path)
        for kind, files in sorted(by_kind.items()):
            report.files(ERROR, files, *FILE_PROBLEMS[kind], REPLACE)
        return
    results = _decode_all(paths, workers, f"{report.dataset}: decoding")
    report.decoded = len(results)
    failed, by_mode = defaultdict(list), defaultdict(list)
    for result in results:
        if result.error is not None:
            kind = "truncated" if result.tolerated else "undecodable"
            failed[kind].append(f"{result.path} ({result.error})")
        elif result.mode not in EXACT_MODES:
            by_mode[result.mode].append(result.path)
    for kind in ("truncated", "undecodable"):
        report.files(ERROR, failed[kind], *FILE_PROBLEMS[kind], REPLACE)
    for mode, files in sorted(by_mode.items()):
        severity, effect, fix = MODE_EFFECTS.get(mode, OTHER_MODE)
        expected = f"8-bit RGB or grayscale images; {effect}"
        report.files(severity, files, f"in mode {MODE_NAMES.get(mode, mode)}", expected, fix)
    if places is not None:
        report.findings += _duplicates(results, places)
    bad = len(failed["truncated"]) + len(failed["undecodable"])
    report.add(INFO, f"{len(results) - bad:,} of {len(results):,} images decoded")
