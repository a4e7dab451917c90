"""Is a dataset's data where DomainBed will look for it under ``--data_dir``?

The folder names are those DomainBed's ``datasets.py`` (commit b93c22a) opens and its
``scripts/download.py`` creates. Only folders are looked at; nothing is read or downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# DomainBed dataset -> folder under data_dir holding one sub-folder per domain (ImageFolder).
IMAGE_FOLDERS = {
    "VLCS": "VLCS",
    "PACS": "PACS",
    "OfficeHome": "office_home",
    "TerraIncognita": "terra_incognita",
    "DomainNet": "domain_net",
    "SVIRO": "sviro",
}
# WILDS datasets live in <data_dir>/<name>_v<version>/ with a RELEASE_v<version>.txt marker.
WILDS_FOLDERS = {"WILDSCamelyon": ("camelyon17", "1.0"), "WILDSFMoW": ("fmow", "1.1")}
MNIST_DATASETS = ("ColoredMNIST", "RotatedMNIST")
NO_FILES = ("Debug28", "Debug224")
# Datasets this package ships are built from data bundled with installed packages.
EMBEDDED_MODULE_PREFIX = "dmg_domainbed.datasets"

PRESENT, MISSING, NOT_NEEDED, NOT_CHECKED = "present", "missing", "no files needed", "not checked"


@dataclass(frozen=True)
class DataStatus:
    """Where a dataset's files must be, and whether they are there."""

    dataset: str
    state: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.state != MISSING


def _mnist_files() -> list[str]:
    from torchvision.datasets import MNIST

    # torchvision looks for the unpacked files in <root>/MNIST/raw.
    return [os.path.join("MNIST", "raw", os.path.splitext(name)[0]) for name, _ in MNIST.resources]


def _image_folder_status(dataset: str, root: Path, n_envs: int) -> DataStatus:
    expected = f"{root}/ with {n_envs} domain folders, each holding one folder per class"
    if not root.is_dir():
        return DataStatus(dataset, MISSING, f"not found: expected {expected}")
    domains = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if len(domains) != n_envs:
        return DataStatus(
            dataset,
            MISSING,
            f"{root} holds {len(domains)} folder(s) {domains}; expected {expected}",
        )
    empty = [d for d in domains if not any(e.is_dir() for e in os.scandir(root / d))]
    if empty:
        return DataStatus(dataset, MISSING, f"no class folders in {', '.join(empty)} of {root}")
    return DataStatus(dataset, PRESENT, f"{root} ({', '.join(domains)})")


def dataset_status(dataset: str, module: str, n_envs: int, data_dir: str | None) -> DataStatus:
    """Whether DomainBed will find ``dataset`` (defined in ``module``) under ``data_dir``."""
    if dataset in NO_FILES or module.startswith(EMBEDDED_MODULE_PREFIX):
        return DataStatus(dataset, NOT_NEEDED, "built in memory; --data_dir is not read")
    known = dataset in IMAGE_FOLDERS or dataset in WILDS_FOLDERS or dataset in MNIST_DATASETS
    if not known:
        return DataStatus(dataset, NOT_CHECKED, f"layout of {module}.{dataset} is not known")
    if data_dir is None:
        return DataStatus(dataset, MISSING, "no --data_dir given")
    base = Path(data_dir).expanduser().resolve()
    if dataset in IMAGE_FOLDERS:
        return _image_folder_status(dataset, base / IMAGE_FOLDERS[dataset], n_envs)
    if dataset in WILDS_FOLDERS:
        name, version = WILDS_FOLDERS[dataset]
        marker = base / f"{name}_v{version}" / f"RELEASE_v{version}.txt"
        if marker.is_file():
            return DataStatus(dataset, PRESENT, str(marker.parent))
        return DataStatus(dataset, MISSING, f"not found: expected {marker}")
    missing = [f for f in _mnist_files() if not (base / f).is_file()]
    if missing:
        # torchvision would try to download them when the job starts.
        return DataStatus(
            dataset, MISSING, f"missing under {base}: {', '.join(missing)} (torchvision's MNIST)"
        )
    return DataStatus(dataset, PRESENT, str(base / "MNIST" / "raw"))
