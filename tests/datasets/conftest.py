"""Folders of domains of class folders, and manifest datasets registered for one test."""

import numpy as np
import pytest
from PIL import Image

from ..helpers import register_manifests

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
    return lambda *files: register_manifests(monkeypatch, *files)
