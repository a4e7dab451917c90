"""The command that puts one of DomainBed's datasets under ``--data_dir`` as DomainBed expects it:
its own ``scripts/download.py`` function, or the WILDS package's download."""

from __future__ import annotations

from pathlib import Path

from dmg_domainbed.datasets.layouts import DOWNLOADERS, WILDS_LAYOUTS


def download_command(dataset: str, data_dir: str | Path) -> str:
    """The shell command that downloads ``dataset`` into ``data_dir``."""
    from dmg_domainbed.preflight.environment import domainbed_checkout

    if dataset in WILDS_LAYOUTS:
        module, name = WILDS_LAYOUTS[dataset].wilds_class.split(":")
        return (
            f"python -c \"from {module} import {name}; {name}(root_dir='{data_dir}', "
            'download=True)"'
        )
    function = DOWNLOADERS[dataset]
    # download_domain_net reads a file relative to the checkout; gdown fetches the archives.
    checkout = domainbed_checkout() or "DOMAINBED_CHECKOUT"
    return (
        f'pip install gdown && cd {checkout} && python -c "from domainbed.scripts.download '
        f"import {function}; {function}('{data_dir}')\""
    )
