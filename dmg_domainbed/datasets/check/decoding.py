"""Open and decode every image of a dataset, in parallel over the cores, with a progress bar.

Each file is read once: its bytes are hashed (BLAKE2b, to find files of the same content) and
decoded by Pillow in full (``load()``, every pixel), not only opened or verified, which reads
nothing past the header. DomainBed's ``datasets.py`` sets Pillow's
``ImageFile.LOAD_TRUNCATED_IMAGES``, so that a truncated image decodes with its missing part
filled in; here images are decoded strictly first, and a file that fails is decoded again as
DomainBed would, which tells a truncated image DomainBed trains on from one that stops a job.
The flag is set around each decoding and restored after it.

The workers are forked from this process (a fork server or spawned workers would first import
the program's main module again, which for ``dmg-domainbed`` means DomainBed and torch, seconds
per worker). A forked worker only reads files, hashes and decodes with Pillow, imported before
the fork: it never touches torch or a lock another thread of this process may hold.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from PIL import Image, ImageFile, UnidentifiedImageError

# Files per task sent to a worker: large enough that the pool's messages cost little, small
# enough that the progress bar moves.
CHUNK = 64
# Fewer files than this are decoded here: starting worker processes would cost more.
IN_PROCESS_BELOW = 256


@dataclass(frozen=True)
class Decoded:
    """What reading one file found: ``error`` when strict decoding failed (then
    ``decodes_as_domainbed`` tells whether DomainBed's tolerant decoding succeeds), else its
    mode; ``transparency`` for a palette image with a transparent colour; ``digest`` of its
    bytes (empty when it could not be read)."""

    path: str
    digest: str = ""
    mode: str = ""
    transparency: bool = False
    error: str | None = None
    decodes_as_domainbed: bool = False


@contextlib.contextmanager
def _truncated_images(allowed: bool) -> Iterator[None]:
    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = allowed
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def _load(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def decode(path: str) -> Decoded:
    """Read, hash and strictly decode one file."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        return Decoded(path, error=f"cannot be read: {error.strerror or error}")
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    try:
        with _truncated_images(False):
            image = _load(data)
    except Exception as error:  # Pillow raises many kinds for a broken file
        problem = f"{type(error).__name__}: {error}"
        if isinstance(error, UnidentifiedImageError):
            problem = "not an image file Pillow can identify"
        try:
            with _truncated_images(True):
                _load(data)
            tolerated = True
        except Exception:
            tolerated = False
        return Decoded(path, digest, error=problem, decodes_as_domainbed=tolerated)
    transparent = image.mode == "P" and "transparency" in image.info
    return Decoded(path, digest, image.mode, transparent)


def decode_all(paths: Sequence[str], workers: int, description: str) -> list[Decoded]:
    """Decode ``paths`` with ``workers`` processes (here when 1, or for a few files), showing a
    progress bar on a terminal; results in the order of ``paths``."""
    from tqdm import tqdm

    with contextlib.ExitStack() as stack:
        decoded = map(decode, paths)
        if workers > 1 and len(paths) >= IN_PROCESS_BELOW:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=context))
            decoded = pool.map(decode, paths, chunksize=CHUNK)
        return list(tqdm(decoded, total=len(paths), desc=description, unit="img", disable=None))
