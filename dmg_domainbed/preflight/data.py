"""Is a dataset's data where DomainBed will look for it under ``--data_dir``?

The folder names are those DomainBed's ``datasets.py`` (commit b93c22a) opens and its
``scripts/download.py`` creates. Only folders are looked at; nothing is read or downloaded.
A missing or differently laid out dataset comes with the command that downloads it.
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
# The file dmg_domainbed.synthetic leaves in a dataset folder of random images it wrote.
SYNTHETIC_MARKER = "SYNTHETIC.txt"

# The function of DomainBed's scripts/download.py that fetches each dataset.
_DOWNLOADERS = {
    "VLCS": "download_vlcs",
    "PACS": "download_pacs",
    "OfficeHome": "download_office_home",
    "DomainNet": "download_domain_net",
    "TerraIncognita": "download_terra_incognita",
    "SVIRO": "download_sviro",
    "ColoredMNIST": "download_mnist",
    "RotatedMNIST": "download_mnist",
}
_WILDS_CLASSES = {
    "WILDSCamelyon": "wilds.datasets.camelyon17_dataset:Camelyon17Dataset",
    "WILDSFMoW": "wilds.datasets.fmow_dataset:FMoWDataset",
}

PRESENT, MISSING, INVALID = "present", "missing", "not usable"
NOT_NEEDED, NOT_CHECKED = "no files needed", "not checked"


@dataclass(frozen=True)
class DataStatus:
    """Where a dataset's files must be, and whether they are there."""

    dataset: str
    state: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.state not in (MISSING, INVALID)


def download_command(dataset: str, data_dir: str | Path) -> str:
    """The command that puts ``dataset`` under ``data_dir`` as DomainBed expects it."""
    from dmg_domainbed.preflight.environment import domainbed_checkout

    if dataset in _WILDS_CLASSES:
        module, name = _WILDS_CLASSES[dataset].split(":")
        return (
            f"python -c \"from {module} import {name}; {name}(root_dir='{data_dir}', "
            'download=True)"'
        )
    function = _DOWNLOADERS[dataset]
    # download_domain_net reads a file relative to the checkout; gdown fetches the archives.
    checkout = domainbed_checkout() or "DOMAINBED_CHECKOUT"
    return (
        f'pip install gdown && cd {checkout} && python -c "from domainbed.scripts.download '
        f"import {function}; {function}('{data_dir}')\""
    )


def _mnist_files() -> list[str]:
    from torchvision.datasets import MNIST

    # torchvision looks for the unpacked files in <root>/MNIST/raw.
    return [os.path.join("MNIST", "raw", os.path.splitext(name)[0]) for name, _ in MNIST.resources]


def _subfolders(folder: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def _image_folder_status(dataset: str, root: Path, n_envs: int, data_dir: Path) -> DataStatus:
    expected = f"{root}/ with {n_envs} domain folders, each holding one folder per class"
    fix = f"; to get it: {download_command(dataset, data_dir)}"
    if not root.is_dir():
        return DataStatus(dataset, MISSING, f"not found: expected {expected}{fix}")
    domains = _subfolders(root)
    if len(domains) != n_envs:
        return DataStatus(
            dataset,
            INVALID,
            f"{root} holds {len(domains)} folder(s) {domains}; expected {expected}{fix}",
        )
    classes = {domain: _subfolders(root / domain) for domain in domains}
    empty = [d for d in domains if not classes[d]]
    if empty:
        return DataStatus(
            dataset, INVALID, f"no class folders in {', '.join(empty)} of {root}{fix}"
        )
    # DomainBed numbers the classes of each domain on its own: they must be the same folders.
    reference = classes[domains[0]]
    for domain in domains[1:]:
        if classes[domain] != reference:
            differ = sorted(set(reference) ^ set(classes[domain]))
            return DataStatus(
                dataset,
                INVALID,
                f"{root}: domains {domains[0]} and {domain} have different class folders "
                f"({', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''}); DomainBed would "
                f"mislabel their images{fix}",
            )
    detail = f"{root} ({', '.join(domains)}; {len(reference)} classes)"
    if (root / SYNTHETIC_MARKER).is_file():
        detail += " SYNTHETIC: random images, not the dataset"
    return DataStatus(dataset, PRESENT, detail)


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
        return _image_folder_status(dataset, base / IMAGE_FOLDERS[dataset], n_envs, base)
    fix = f"; to get it: {download_command(dataset, base)}"
    if dataset in WILDS_FOLDERS:
        name, version = WILDS_FOLDERS[dataset]
        marker = base / f"{name}_v{version}" / f"RELEASE_v{version}.txt"
        if marker.is_file():
            return DataStatus(dataset, PRESENT, str(marker.parent))
        return DataStatus(dataset, MISSING, f"not found: expected {marker}{fix}")
    missing = [f for f in _mnist_files() if not (base / f).is_file()]
    if missing:
        # torchvision would try to download them when the job starts.
        return DataStatus(
            dataset,
            MISSING,
            f"missing under {base}: {', '.join(missing)} (torchvision's MNIST){fix}",
        )
    return DataStatus(dataset, PRESENT, str(base / "MNIST" / "raw"))
