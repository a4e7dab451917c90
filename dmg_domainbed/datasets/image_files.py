"""The image files of domain folders of class folders, listed the way DomainBed reads them.

DomainBed reads every sub-folder of its root (sorted) as a domain with torchvision's
``ImageFolder``: each sub-folder a class, sorted, holding the files anywhere below it (links
followed) that end in one of ``IMG_EXTENSIONS``. :func:`list_domain` lists each of a root's
:func:`subfolders` the same way, without opening a file, and also keeps what ``ImageFolder``
passes over without a word: other files, images outside any class folder, unreadable folders,
and links back to a folder they lie in (``os.walk`` follows such a loop to the system's limit of
40 links: its images are read 41 times). :func:`domain_problems` tells what would stop a job or
relabel it.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dmg_domainbed.shortlist import how_they_differ, shortlist


def subfolders(folder: Path) -> list[str]:
    """The sub-folders of ``folder``, sorted, hidden ones included, as DomainBed and
    ``ImageFolder`` see them (a link to a folder is a folder)."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


@dataclass
class DomainFiles:
    """One domain: its image files by class, and the files the dataset does not read.

    ``missing`` lists files a CSV names that are not there (always empty for folders);
    ``unreadable`` the folders that cannot be listed, with why; ``loops`` each link that points
    back to a folder it lies in, with that folder.
    """

    name: str
    folder: Path
    classes: dict[str, list[str]] = field(default_factory=dict)
    outside_classes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    loops: dict[str, str] = field(default_factory=dict)

    @property
    def images(self) -> int:
        return sum(len(files) for files in self.classes.values())


def _files_below(folder: Path, domain: DomainFiles) -> list[str]:
    """The files below ``folder`` as ``ImageFolder`` lists them; records unreadable folders and
    loops in ``domain``."""

    def unreadable(error: OSError) -> None:
        if error.errno != errno.ELOOP:  # the end of a loop: named as the loop
            domain.unreadable.append(f"{error.filename} ({error.strerror})")

    found, loops = [], {}
    for parent, folders, names in sorted(os.walk(folder, followlinks=True, onerror=unreadable)):
        found += [os.path.join(parent, name) for name in sorted(names)]
        here = os.path.realpath(parent)
        for name in folders:
            link = os.path.join(parent, name)
            target = os.path.realpath(link)
            if os.path.islink(link) and (here + os.sep).startswith(target + os.sep):
                loops.setdefault(os.path.join(here, name), (link, target))  # shallowest first
    domain.loops.update(dict(loops.values()))
    return found


def list_domain(folder: Path) -> DomainFiles:
    """The files of one domain folder, by class folder."""
    from torchvision.datasets.folder import IMG_EXTENSIONS as extensions  # lower case

    domain = DomainFiles(folder.name, folder)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as error:
        domain.unreadable.append(f"{folder} ({error.strerror or error})")
        return domain
    for entry in entries:
        if entry.is_dir():
            files = _files_below(Path(entry.path), domain)
            domain.classes[entry.name] = [f for f in files if f.lower().endswith(extensions)]
            in_loop = tuple(link + os.sep for link in domain.loops)  # named as the loop
            domain.skipped += [
                f for f in files if not f.lower().endswith(extensions) and not f.startswith(in_loop)
            ]
        elif entry.name.lower().endswith(extensions):
            domain.outside_classes.append(entry.path)
        else:
            domain.skipped.append(entry.path)
    return domain


def domain_problems(
    domain: DomainFiles, classes: Sequence[str], where: str, why: str, known: bool = False
) -> list[str]:
    """What would stop DomainBed on ``domain`` (told as ``where``) or make it train on other data:
    folders it cannot read, links back to a folder they lie in (read again at every level),
    no images, a class of ``classes`` without images (beside a class of ``domain`` whose name
    reads alike, what tells them apart; ``why`` says why every domain needs every class), and,
    where ``classes`` are the download's (``known``), class folders of other names."""
    problems = []
    if domain.unreadable:
        problems.append(
            f"{where}: {len(domain.unreadable)} folder(s) cannot be read: "
            f"{shortlist(domain.unreadable)}; DomainBed stops on such a folder or leaves its "
            "images out. Let this user read them (chmod -R u+rX), or move them out"
        )
    for link, target in domain.loops.items():
        real = (os.path.realpath(f) for files in domain.classes.values() for f in files)
        copies = Counter(path for path in real if path.startswith(target + os.sep))
        problems.append(
            f"{where}: link {link} points back to {target}, a folder it lies in: DomainBed "
            f"follows it level after level and reads each of the {len(copies):,} image(s) "
            f"below it {max(copies.values(), default=0)} times, which multiplies their class. "
            "Remove the link"
        )
    if not domain.images:
        return problems + [
            f"{where}: no images; put its images in one folder per class under {domain.folder}"
        ]
    told = []
    for name in (c for c in classes if not domain.classes.get(c)):
        alike = [(other, how) for other in domain.classes if (how := how_they_differ(name, other))]
        told.append(
            f"{name!r} (it has {alike[0][0]!r}: the names differ in {alike[0][1]})"
            if alike
            else repr(name)
        )
    if told:
        whose = "the download has" if known else "other domains have"
        problems.append(
            f"{where}: no images of class(es) {shortlist(told)}, which {whose}; every domain "
            f"needs images of the same {len(classes)} classes: {why}"
        )
    extra = [name for name in domain.classes if known and name not in classes]
    if extra:
        problems.append(
            f"{where}: class folder(s) {shortlist([repr(n) for n in extra])} that the download "
            f"does not have; expected only its {len(classes)} classes: {why}"
        )
    return problems
