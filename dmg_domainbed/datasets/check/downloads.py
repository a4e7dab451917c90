"""The command that puts one of DomainBed's datasets under ``--data_dir`` as DomainBed expects it:
its own ``scripts/download.py`` function, or the WILDS package's download."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS, MNIST_FOLDER, WILDS_LAYOUTS


def domainbed_checkout() -> Path | None:
    """The folder holding the ``domainbed`` package (its checkout), without importing it."""
    spec = importlib.util.find_spec("domainbed")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve().parent


def download_command(dataset: str, data_dir: str | Path) -> str:
    """The shell command that downloads ``dataset`` into ``data_dir``."""
    if dataset in WILDS_LAYOUTS:
        module, name = WILDS_LAYOUTS[dataset].wilds_class.split(":")
        return (
            f"python -c \"from {module} import {name}; {name}(root_dir='{data_dir}', "
            'download=True)"'
        )
    # DomainBed's scripts/download.py names each function after the folder it fills.
    folder = IMAGE_LAYOUTS[dataset].folder if dataset in IMAGE_LAYOUTS else MNIST_FOLDER
    function = f"download_{folder.lower()}"
    # download_domain_net reads a file relative to the checkout; gdown fetches the archives.
    checkout = domainbed_checkout() or "DOMAINBED_CHECKOUT"
    return (
        f'pip install gdown && cd {checkout} && python -c "from domainbed.scripts.download '
        f"import {function}; {function}('{data_dir}')\""
    )
