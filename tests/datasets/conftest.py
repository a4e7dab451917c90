"""Folders of domains of class folders, and manifest datasets registered for one test."""

import numpy as np
import pytest
from domainbed import datasets
from PIL import Image

from dmg_domainbed import integration
from dmg_domainbed.datasets.manifest import MANIFESTS_VARIABLE, read_manifests

DOMAINS = ("north", "south", "west")
CLASSES = ("cat", "dog")


def write_domains(root, domains=DOMAINS, classes=CLASSES, per_class=3, seed=0):
    """One folder per domain, one folder per class, small PNGs of random pixels."""
    rng = np.random.default_rng(seed)
    for domain in domains:
        for name in classes:
            (root / domain / name).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / domain / name / f"{i}.png")
    return root


@pytest.fixture
def registered(monkeypatch):
    """Register manifests into the real domainbed.datasets for one test, then take them out."""

    def register(*files):
        environ = {MANIFESTS_VARIABLE: ":".join(str(f) for f in files)}
        names = [m.name for m in read_manifests(environ)[0]]
        monkeypatch.setattr(datasets, "DATASETS", list(datasets.DATASETS))
        for name in names:
            if not hasattr(datasets, name):  # taken out again when the test ends
                monkeypatch.setattr(datasets, name, None, raising=False)
                monkeypatch.delattr(datasets, name)
        return integration.register_manifest_datasets(datasets, environ)

    return register
