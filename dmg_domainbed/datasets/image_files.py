"""The image files a dataset of domain folders of class folders reads, listed the way DomainBed
reads them.

DomainBed's ``MultipleEnvironmentImageFolder`` takes every sub-folder of its root as a domain,
sorted, and reads each with torchvision's ``ImageFolder``: every sub-folder of a domain is a
class, sorted and numbered within that domain, and a class holds the files anywhere below its
folder (links followed, sorted) whose names end in one of torchvision's ``IMG_EXTENSIONS``.
:func:`list_image_folders` lists a root the same way and also keeps what ``ImageFolder`` passes
over without a word: files of other extensions, and images lying in a domain folder outside any
class folder. Listing only: nothing is opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def image_extensions() -> tuple[str, ...]:
    """The file name endings torchvision's ``ImageFolder`` reads (lower case)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return IMG_EXTENSIONS


def subfolders(folder: Path) -> list[str]:
    """The sub-folders of ``folder``, sorted, hidden ones included, as DomainBed and
    ``ImageFolder`` see them (a link to a folder is a folder)."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


@dataclass
class DomainFiles:
    """One domain: its image files by class, and the files the dataset does not read.

    ``missing`` lists files a CSV names that are not there (always empty for folders).
    """

    name: str
    folder: Path
    classes: dict[str, list[str]] = field(default_factory=dict)
    outside_classes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def images(self) -> int:
        return sum(len(files) for files in self.classes.values())


def _files_below(folder: Path) -> list[str]:
    found = []
    for parent, _, names in sorted(os.walk(folder, followlinks=True)):
        found += [os.path.join(parent, name) for name in sorted(names)]
    return found


def list_domain(folder: Path, name: str | None = None) -> DomainFiles:
    """The files of one domain folder, by class folder."""
    extensions = image_extensions()
    domain = DomainFiles(name or folder.name, folder)
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_dir():
            files = _files_below(Path(entry.path))
            domain.classes[entry.name] = [f for f in files if f.lower().endswith(extensions)]
            domain.skipped += [f for f in files if not f.lower().endswith(extensions)]
        elif entry.name.lower().endswith(extensions):
            domain.outside_classes.append(entry.path)
        else:
            domain.skipped.append(entry.path)
    return domain


def list_image_folders(root: Path) -> list[DomainFiles]:
    """Every domain folder of ``root`` in DomainBed's order, with its files."""
    return [list_domain(root / name) for name in subfolders(root)]
