"""The MNIST files of DomainBed's ColoredMNIST and RotatedMNIST: torchvision's ``MNIST(data_dir)``
reads four unpacked IDX files in ``<data_dir>/MNIST/raw`` (and downloads missing ones, which a job
without internet cannot). An IDX header (big-endian: magic number 2051 for images, 2049 for
labels, the item count and, for images, 28 x 28) fixes the file's length, so the headers and the
labels check the files whole; the image bytes need no decoding.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from dmg_domainbed.datasets.check.downloads import download_command
from dmg_domainbed.datasets.findings import ERROR, INFO, DatasetReport, DomainCount
from dmg_domainbed.datasets.layouts import MNIST_FOLDER, MNIST_IMAGES, MNIST_SIDE

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049
CLASSES = 10


def mnist_files() -> list[str]:
    """The unpacked files torchvision's MNIST reads, in its ``raw`` folder."""
    from torchvision.datasets import MNIST

    return [os.path.splitext(os.path.basename(name))[0] for name, _ in MNIST.resources]


def _read_idx(path: Path, images: bool) -> tuple[int, bytes, str | None]:
    """(items the header declares, the items' bytes, the problem if any)."""
    data = path.read_bytes()
    header = 16 if images else 8
    if len(data) < header:
        return 0, b"", f"{len(data)} bytes, shorter than an IDX header"
    magic, items = struct.unpack(">II", data[:8])
    if magic != (IMAGES_MAGIC if images else LABELS_MAGIC):
        return 0, b"", f"magic number {magic}, not an MNIST {'image' if images else 'label'} file"
    size = header + items * (MNIST_SIDE * MNIST_SIDE if images else 1)
    if len(data) != size:
        return items, b"", f"{len(data):,} bytes where its header needs {size:,} (truncated?)"
    return items, data[header:], None


def check_mnist(report: DatasetReport, data_dir: Path) -> None:
    raw = data_dir / MNIST_FOLDER / "raw"
    report.location = str(raw)
    command = download_command(report.dataset, data_dir)
    fix = f"download MNIST (a broken file deleted first): {command}"
    missing = [name for name in mnist_files() if not (raw / name).is_file()]
    if missing:
        report.present = len(missing) < len(mnist_files())
        report.add(
            ERROR,
            f"missing under {data_dir}: {', '.join(missing)}",
            f"torchvision's MNIST files in {raw} (a job would try to download them)",
            fix,
        )
        return
    for name in mnist_files():
        images = "images" in name
        items, payload, problem = _read_idx(raw / name, images)
        expected, source = MNIST_IMAGES[name.split("-")[0]]
        if problem:
            report.add(ERROR, f"{raw / name}: {problem}", "the file torchvision unpacks", fix)
            continue
        if items != expected:
            report.add(
                ERROR, f"{raw / name} holds {items:,} items", f"{expected:,} ({source})", fix
            )
        if images:
            report.counts.append(DomainCount(name.split("-")[0], items, expected))
        elif payload and max(payload) >= CLASSES:
            report.add(ERROR, f"{raw / name} holds labels above 9", "digits 0 to 9", fix)
    if report.ok:
        total = sum(count.images for count in report.counts)
        report.add(INFO, f"the IDX files are whole: {total:,} images, labels 0-9")
