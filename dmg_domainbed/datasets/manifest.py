"""Dataset manifests: a user's own image dataset in a few lines of TOML, registered into
DomainBed like PACS without a dataset class (docs/datasets.md, "Your own dataset")::

    name = "MyData"                 # required: DomainBed's --dataset name
    root = "/data/mydata"           # required: absolute, or relative to this file
    csv = "labels.csv"              # optional: columns path, label, domain (else folders)
    domains = ["photo", "sketch"]   # default: every domain, sorted; the order of --test_envs
    input_size = 224                # 28, 32 or 224 (default): picks DomainBed's featurizer
    steps = 3000                    # DomainBed's N_STEPS for it (default 5001)
    checkpoint_freq = 300           # DomainBed's CHECKPOINT_FREQ (default 100)

Every process finds them through ``DMG_DOMAINBED_DATASETS`` (absolute paths of files, or of
folders of ``*.toml``, ``:``-separated), which reaches every job of every launcher. Reading a
manifest opens only it, the root's listing and the CSV (read this once: :attr:`Manifest.rows`);
the images are listed when the dataset is built (:func:`list_files`).
"""

from __future__ import annotations

import csv
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from dmg_domainbed.datasets.image_files import (
    DomainFiles,
    domain_problems,
    list_domain,
    subfolders,
)
from dmg_domainbed.errors import UserError
from dmg_domainbed.rules import Rule
from dmg_domainbed.shortlist import shortlist

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

MANIFESTS_VARIABLE = "DMG_DOMAINBED_DATASETS"
#: The hparams in which a manifest dataset records what it was built from
#: (``recorded_hparams`` of :class:`dmg_domainbed.datasets.manifest_dataset.ManifestImageFolder`),
#: so that a run can be compared with its dataset of today: the domains, in order; the classes,
#: in label order; each domain's number of images; a digest of every image's domain, path under
#: the root and class.
DOMAINS_HPARAM = "manifest_domains"
CLASSES_HPARAM = "manifest_classes"
IMAGES_HPARAM = "manifest_images"
FILES_HPARAM = "manifest_files"
CSV_COLUMNS = ("path", "label", "domain")
# Input side -> the featurizer DomainBed's networks.Featurizer builds for it.
INPUT_SIZES = {28: "MNIST_CNN", 32: "Wide_ResNet", 224: "ResNet"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _integer(value: Any) -> bool:
    """An integer of TOML: not a float (``28.0``), nor a bool (Python's ``True == 1``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(_text(v) for v in value)
        and len(set(value)) == len(value)
    )


# key -> (check, what a valid value looks like)
KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "name": (
        lambda v: isinstance(v, str) and bool(_NAME.match(v)),
        "a name of letters, digits and _, not starting with a digit",
    ),
    "root": (_text, "a folder path"),
    "csv": (_text, "a CSV file path"),
    "domains": (_names, "a non-empty list of distinct domain names"),
    "input_size": (
        lambda v: _integer(v) and v in INPUT_SIZES,
        "an integer: "
        + ", ".join(f"{side} (DomainBed's {net})" for side, net in INPUT_SIZES.items()),
    ),
    "steps": (Rule((int,), minimum=1).accepts, "an integer >= 1"),
    "checkpoint_freq": (Rule((int,), minimum=1).accepts, "an integer >= 1"),
}
# Files listed twice that a check names one by one; the rest are counted.
SHOWN_REPEATS = 5
# Required key -> an example of it.
REQUIRED = {"name": 'name = "MyData"', "root": 'root = "/data/mydata"'}


class Row(NamedTuple):
    """One row of a manifest's CSV: the line it ends on (the header is line 1) and its fields
    (``""`` where a short row leaves one out): kept for as long as the manifest, in half the
    memory of ``csv.DictReader``'s rows (some 240 bytes a row)."""

    line: int
    path: str
    label: str
    domain: str

    @property
    def complete(self) -> bool:
        """Whether the row gives a path, a label and a domain."""
        return all(text.strip() for text in self[1:])


@dataclass(frozen=True)
class Manifest:
    """A checked manifest; ``domains`` in DomainBed's order, found in the data when the
    manifest does not list them; ``rows``: its CSV's rows, as read with the manifest."""

    path: Path
    name: str
    root: Path
    domains: tuple[str, ...]
    csv: Path | None = None
    input_size: int = 224
    steps: int | None = None
    checkpoint_freq: int | None = None
    rows: tuple[Row, ...] = field(default=(), compare=False, repr=False)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (3, self.input_size, self.input_size)


def not_utf8(path: Path, error: UnicodeDecodeError) -> str:
    """What to tell of a text file that is not UTF-8."""
    return (
        f"{path} is not UTF-8 text ({error.reason}: byte {error.object[error.start]:#04x} at "
        f"offset {error.start}); save it as UTF-8"
    )


def leaves_root(relative: str, root: Path) -> bool:
    """Whether ``relative``, a path given relative to ``root``, names a place outside it by its
    text: climbing out with ``..``, or absolute."""
    inside = os.path.normpath(os.path.join(root, relative))
    return os.path.commonpath([inside, os.path.normpath(root)]) != os.path.normpath(root)


def _once(text: str | None) -> str:
    """``text`` (``""`` for a field a short row leaves out) kept once however often it repeats."""
    return sys.intern(text or "")


def _csv_rows(path: Path) -> tuple[Row, ...]:
    """The rows of a manifest's CSV: UTF-8, with or without the byte-order mark spreadsheets
    write. Its labels and domains repeat: each text is kept once (``sys.intern``)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as stream:
            reader = csv.DictReader(stream)
            absent = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or ())]
            if absent:
                raise UserError(
                    f"{path}: no column(s) {', '.join(absent)} in its header "
                    f"{reader.fieldnames or '(empty file)'}; a manifest's CSV needs a header line "
                    f"with the columns {', '.join(CSV_COLUMNS)} (others are ignored)"
                )
            return tuple(
                Row(reader.line_num, row["path"] or "", _once(row["label"]), _once(row["domain"]))
                for row in reader
            )
    except OSError as error:
        raise UserError(f"cannot read the CSV {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise UserError(not_utf8(path, error)) from None
    except csv.Error as error:
        raise UserError(f"{path} is not a readable CSV file: {error}") from None


def _visible(names: list[str]) -> list[str]:
    return [name for name in names if not name.startswith(".")]


def parse_manifest(document: Mapping[str, Any], path: Path) -> Manifest:
    """A :class:`Manifest` from a parsed TOML document; :class:`UserError` if it is not one."""

    def fail(message: str) -> UserError:
        return UserError(f"dataset manifest {path}: {message}")

    unknown = sorted(set(document) - set(KEYS))
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(KEYS)}")
    for key in REQUIRED:
        if key not in document:
            raise fail(f"{key} = ... is required ({KEYS[key][1]}), e.g. {REQUIRED[key]}")
    for key, value in document.items():
        check, allowed = KEYS[key]
        if not check(value):
            raise fail(f"{key} = {value!r} is not valid: it must be {allowed}")
    here = path.parent
    root = here / Path(document["root"]).expanduser()
    if not root.is_dir():
        raise fail(f"root = {document['root']!r}: no folder {root}; give the folder of the images")
    table = here / Path(document["csv"]).expanduser() if "csv" in document else None
    if table is not None and not table.is_file():
        raise fail(f"csv = {document['csv']!r}: no file {table}")
    rows = _csv_rows(table) if table else ()
    try:
        found = (
            sorted({row.domain for row in rows if row.complete})
            if table
            else _visible(subfolders(root))
        )
    except OSError as error:
        raise fail(f"cannot list {root}: {error.strerror or error}") from None
    where = f"the CSV's domain column ({table})" if table else f"the folders of {root}"
    if not found:
        layout = (
            "rows with a domain" if table else "one folder per domain, each holding one per class"
        )
        raise fail(f"no domains in {where}: it needs {layout}")
    domains = document.get("domains", found)
    absent = [d for d in domains if d not in found]
    if absent:
        raise fail(
            f"domains {', '.join(absent)} are not in {where} ({', '.join(found)}); "
            "list domains from there, or leave domains out to take all of them"
        )
    if len(domains) < 2:
        raise fail(
            f"one domain ({domains[0]}) in {where}: domain generalization needs at least "
            "two, one to train on and one to test on"
        )
    return Manifest(
        path=path,
        name=document["name"],
        root=root.resolve(),
        domains=tuple(domains),
        csv=table.resolve() if table else None,
        input_size=document.get("input_size", 224),
        steps=document.get("steps"),
        checkpoint_freq=document.get("checkpoint_freq"),
        rows=rows,
    )


def load_manifest(path: str | Path) -> Manifest:
    """Read and check one manifest file."""
    path = Path(path).expanduser().absolute()
    try:
        with open(path, "rb") as stream:
            document = tomllib.load(stream)
    except OSError as error:
        raise UserError(f"dataset manifest {path}: cannot read it: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"dataset manifest {path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8
        raise UserError(f"dataset manifest {not_utf8(path, error)}") from None
    return parse_manifest(document, path)


def manifest_files(environ: Mapping[str, str]) -> list[Path]:
    """The manifest files ``DMG_DOMAINBED_DATASETS`` names, each once, in the order first named;
    :class:`UserError` for a relative path or one that does not exist."""
    files = []
    for entry in environ.get(MANIFESTS_VARIABLE, "").split(os.pathsep):
        if not entry.strip():
            continue
        path = Path(entry.strip()).expanduser()
        if not path.is_absolute():
            raise UserError(
                f"{MANIFESTS_VARIABLE} names {entry!r}, a relative path: a job started in another "
                "folder (or on another node) would not find it. Give its absolute path, e.g. "
                f"{MANIFESTS_VARIABLE}=$PWD/{entry}"
            )
        if path.is_dir():
            files += sorted(path.glob("*.toml"))
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(
                f"{MANIFESTS_VARIABLE} names {path}, which does not exist: give dataset manifest "
                "files, or folders of them, separated by ':'"
            )
    # A file named twice (itself and its folder, or through a link) is one manifest.
    unique: dict[str, Path] = {}
    for file in files:
        unique.setdefault(os.path.realpath(file), file)
    return list(unique.values())


class NameTaken(UserError):
    """A second manifest of one name (:func:`read_manifests`); ``name``: that name."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


def read_manifests(environ: Mapping[str, str]) -> tuple[list[Manifest], list[UserError]]:
    """The manifests ``DMG_DOMAINBED_DATASETS`` names, and the problem of each one that cannot
    be used (a second manifest of one name included)."""
    try:
        files = manifest_files(environ)
    except UserError as error:
        return [], [error]
    manifests: dict[str, Manifest] = {}
    problems = []
    for file in files:
        try:
            manifest = load_manifest(file)
        except UserError as error:
            problems.append(error)
            continue
        first = manifests.get(manifest.name)
        if first is not None:
            problems.append(
                NameTaken(
                    f"dataset manifest {file}: name {manifest.name!r} is already taken by "
                    f"{first.path}; give one of them another name",
                    manifest.name,
                )
            )
            continue
        manifests[manifest.name] = manifest
    return list(manifests.values()), problems


def list_files(manifest: Manifest) -> list[DomainFiles]:
    """Each domain's image files by class, in the manifest's domain order."""
    if manifest.csv is None:
        domains = [list_domain(manifest.root / domain) for domain in manifest.domains]
        for domain in domains:
            domain.classes = {name: domain.classes[name] for name in _visible(list(domain.classes))}
        return domains
    domains = {d: DomainFiles(d, manifest.root) for d in manifest.domains}
    for row in manifest.rows:
        usable = row.complete and not leaves_root(row.path, manifest.root)
        domain = domains.get(row.domain) if usable else None
        if domain is None:  # another domain's, or a row csv_problems names
            continue
        path = str(manifest.root / row.path)
        if os.path.isfile(path):
            domain.classes.setdefault(row.label, []).append(path)
        else:
            domain.missing.append(path)
    return list(domains.values())


def _number(name: str) -> int | None:
    """The whole number a class name writes (``7``, ``07``, `` 7``, ``-7``), else ``None``."""
    try:
        return int(name)
    except ValueError:
        return None


def class_names(domains: list[DomainFiles]) -> list[str]:
    """Every class of the dataset, in label order: sorted, numerically if all are numbers.

    Names of one number (``1`` and ``01``) are ordered by the names themselves: the order is
    total, so every process numbers the classes alike (a set's order, which a tie would keep,
    changes with ``PYTHONHASHSEED``). :func:`file_problems` refuses such names anyway."""
    names = {name for domain in domains for name in domain.classes}
    numbers = {name: _number(name) for name in names}
    if None not in numbers.values():
        return sorted(names, key=lambda name: (numbers[name], name))
    return sorted(names)


def csv_problems(manifest: Manifest) -> list[str]:
    """Rows of a manifest's CSV that DomainBed would misread: a row without a path, a label or a
    domain (left out), a path that leaves the root (left out: nothing outside the root is the
    dataset's), a file listed in several rows (read once per row: one
    image counted twice, or under two labels). Empty for a manifest without a CSV."""
    if manifest.csv is None:
        return []
    incomplete, outside, rows_of = [], [], defaultdict(list)
    for row in manifest.rows:
        if not row.complete:
            incomplete.append(row.line)
        elif leaves_root(row.path, manifest.root):
            outside.append(f"line {row.line}: {row.path}")
        else:
            rows_of[os.path.normpath(manifest.root / row.path)].append(row)
    problems = []
    if incomplete:
        problems.append(
            f"{manifest.csv}: {len(incomplete)} row(s) without a path, a label or a domain "
            f"(line(s) {shortlist(incomplete)}): DomainBed would leave them out; give each "
            "row every field, or delete it"
        )
    if outside:
        problems.append(
            f"{manifest.csv}: {len(outside)} row(s) whose path leaves the root {manifest.root} "
            f"({shortlist(outside, separator='; ')}): a manifest's dataset is what its root "
            "holds, and its paths are relative to it; move those files under the root and give "
            "their paths from there, or set root to a folder that holds every file"
        )
    repeated = [(path, listed) for path, listed in rows_of.items() if len(listed) > 1]
    for path, listed in repeated[:SHOWN_REPEATS]:
        labels = {row.label for row in listed}
        effect = (
            f"one image under {len(labels)} labels"
            if len(labels) > 1
            else f"the same image {len(listed)} times"
        )
        lines = [f"line {r.line}: label {r.label}, domain {r.domain}" for r in listed]
        where = shortlist(lines, separator="; ")
        problems.append(
            f"{manifest.csv} lists {path} {len(listed)} times ({where}): DomainBed would read "
            f"{effect}; keep one row of it"
        )
    if len(repeated) > SHOWN_REPEATS:
        problems.append(
            f"{manifest.csv}: {len(repeated) - SHOWN_REPEATS:,} more file(s) listed in several "
            "rows; keep one row of each"
        )
    return problems


def file_problems(manifest: Manifest, domains: list[DomainFiles]) -> list[str]:
    """What stops DomainBed from training on the listed files, or makes it train on others: CSV
    rows it would misread, files the CSV names that are not there, classes that write one
    number twice, and each domain's :func:`~.image_files.domain_problems`."""
    problems = csv_problems(manifest)
    classes = class_names(domains)
    by_number = defaultdict(list)  # class names that write one number (1, 01, ' 1')
    for name in classes:
        if (number := _number(name)) is not None:
            by_number[number].append(name)
    for number, names in by_number.items():
        if len(names) < 2:
            continue
        written = " and ".join(repr(name) for name in names)
        fix = (
            f"write each label one way in every row of {manifest.csv}"
            if manifest.csv
            else "keep one folder of each class in every domain (move the images of the others "
            "into it)"
        )
        problems.append(
            f"{manifest.name} ({manifest.path}): classes {written} write the same number "
            f"{number}: DomainBed would train them as {len(names)} classes with "
            f"labels of their own; {fix}"
        )
    why = (
        "a domain without a class poses another task, not the same task in another domain; add "
        "them, or remove those classes from every domain (a class whose name reads alike is one "
        "class named two ways: name it one way in every domain)"
    )
    for domain in domains:
        where = f"domain {domain.name!r} of {manifest.name} ({manifest.path})"
        if domain.missing:
            problems.append(
                f"{where}: {len(domain.missing)} file(s) its CSV names do not exist "
                f"({shortlist(domain.missing, 3)}); fix the paths in {manifest.csv} (relative "
                f"to {manifest.root}) or remove the rows"
            )
        problems += domain_problems(domain, classes, where, why)
    return problems
