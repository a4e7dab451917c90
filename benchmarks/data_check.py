"""Images checked per second by ``dmg-domainbed data check``, quick and full.

Writes a copy of one of DomainBed's image datasets with its download's folder names and image
counts (PACS by default: 9,991 images in 4 domains of 7 classes) into a temporary folder:
227 x 227 JPEGs (PACS's size) of smooth random colour fields, a third of them grayscale, or,
with ``--empty``, the same 1 x 1 JPEG's bytes in every file (enough for ``--quick``, which reads
only each file's first bytes; this is how a DomainNet-sized folder is timed). Then it runs the
check in this process, where DomainBed is already imported, so that the rows time the check and
not Python's start-up:

* ``quick``: names, counts and each file's first bytes, what the sweep preflight and
  ``doctor`` run;
* ``full, N workers``: every image read, hashed and decoded, in N processes (1 and this
  machine's cores).

Each row is the median of ``--rounds`` runs (the first of each kind also warms the page cache).
With ``--scale`` below 1 the counts are the release's no more, and the verdict says so.

Usage: ``python benchmarks/data_check.py [--dataset PACS] [--scale 1.0] [--rounds 3] [--empty]
[--data_dir DIR]``. ``--data_dir`` checks a copy that is already there instead of writing one.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import domainbed.datasets  # noqa: F401  (imported once, before anything is timed)
import numpy as np
from PIL import Image

from dmg_domainbed.cores import usable_cores
from dmg_domainbed.datasets.check.data_check import check_dataset
from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS

SIDE = 227


def _tiny_jpeg() -> bytes:
    encoded = io.BytesIO()
    Image.new("RGB", (1, 1)).save(encoded, "JPEG")
    return encoded.getvalue()


TINY_JPEG = _tiny_jpeg()


def write_copy(data_dir: Path, dataset: str, scale: float, empty: bool) -> int:
    """A copy of ``dataset`` with its download's names and ``scale`` times its counts."""
    layout = IMAGE_LAYOUTS[dataset]
    rng = np.random.default_rng(0)
    written = 0
    for domain, count in layout.releases[0].per_domain.items():
        for name in layout.classes:
            (data_dir / layout.folder / domain / name).mkdir(parents=True)
        for i in range(max(len(layout.classes), round(count * scale))):
            path = data_dir / layout.folder / domain / layout.classes[i % len(layout.classes)]
            path = path / f"{i:06d}.jpg"
            if empty:
                path.write_bytes(TINY_JPEG)
            else:
                field = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
                image = field.resize((SIDE, SIDE), Image.BILINEAR)
                (image.convert("L") if i % 3 == 2 else image).save(path, quality=85)
            written += 1
    return written


def timed(dataset: str, data_dir: Path, quick: bool, workers: int, rounds: int):
    seconds, report = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        report = check_dataset(dataset, data_dir, quick=quick, workers=workers, manifests={})
        seconds.append(time.perf_counter() - start)
    images = sum(count.images for count in report.counts)
    return images, statistics.median(seconds), report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="PACS", choices=sorted(IMAGE_LAYOUTS))
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--empty", action="store_true", help="1x1 stand-in files: quick only")
    parser.add_argument("--data_dir", type=Path, help="an existing copy to check")
    args = parser.parse_args(argv)
    if IMAGE_LAYOUTS[args.dataset].classes is None or not IMAGE_LAYOUTS[args.dataset].releases:
        parser.error(f"no class names or counts known for {args.dataset}")

    with tempfile.TemporaryDirectory(prefix="data_check_bench_") as scratch:
        data_dir = args.data_dir or Path(scratch)
        if args.data_dir is None:
            start = time.perf_counter()
            written = write_copy(data_dir, args.dataset, args.scale, args.empty)
            what = "1x1 JPEGs" if args.empty else f"{SIDE}x{SIDE} JPEGs"
            print(f"wrote {written:,} {what} in {time.perf_counter() - start:.1f} s")
        cores = usable_cores()
        kinds = [("quick", True, 1)]
        if not args.empty:
            kinds += [(f"full, {n} worker(s)", False, n) for n in sorted({1, cores})]
        print(f"{args.dataset} data check; Python {platform.python_version()}, {cores} core(s)")
        print(f"{'check':<22} {'images':>9} {'median s':>9} {'images/s':>10}  verdict")
        for label, quick, workers in kinds:
            images, seconds, report = timed(args.dataset, data_dir, quick, workers, args.rounds)
            verdict = "ok" if report.ok else f"{len(report.errors)} error(s)"
            print(f"{label:<22} {images:>9,} {seconds:>9.2f} {images / seconds:>10,.0f}  {verdict}")


if __name__ == "__main__":
    sys.exit(main())
