"""Synthetic stand-ins for DomainBed's image datasets and for the pretrained weights its
featurizers load, so that DomainBed's real image path runs offline: a folder laid out exactly
like DomainBed's download (:func:`write_image_dataset`), and random weights in the very cache
file torchvision or timm reads (:func:`write_random_weights`). Every dataset folder holds
``SYNTHETIC.txt``, file names start with ``synthetic_``, and nothing existing is overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dmg_domainbed.datasets.layouts import IMAGE_LAYOUTS, SYNTHETIC_MARKER
from dmg_domainbed.errors import UserError
from dmg_domainbed.weight_files import HF_SNAPSHOT, TORCH_HUB_FILE, WeightFile

IMAGE_SHAPE = (3, 224, 224)
# (width, height) of the JPEGs, cycled: square like PACS, landscape and portrait photos, a
# strip, and one smaller than the 224x224 DomainBed resizes to.
IMAGE_SIZES = ((227, 227), (320, 240), (240, 320), (500, 140), (48, 64))
# Every GRAYSCALE_EVERY-th image is single-channel, as in TerraIncognita's night shots.
GRAYSCALE_EVERY = 3
# DomainBed's image datasets whose class folders are known: those a synthetic copy can stand in for.
LAYOUTS = {name: layout for name, layout in IMAGE_LAYOUTS.items() if layout.classes is not None}


def images_needed(batch_size: int, holdout_fraction: float, classes: int = 1) -> int:
    """The fewest images per domain with which DomainBed's train.py runs: its held-out split
    (``int(n * holdout_fraction)`` images) is not empty (its accuracy divides by its size), the
    rest fills one batch (the training loader drops incomplete batches and would wait forever),
    and every class folder holds an image (``ImageFolder`` refuses an empty one)."""
    n = max(classes, batch_size + 1)
    while int(n * holdout_fraction) < 1 or n - int(n * holdout_fraction) < batch_size:
        n += 1
    return n


def _random_image(rng: np.random.Generator, index: int):
    from PIL import Image

    # A 4x4 field of random colours, upsampled: smooth like a photo, small as a JPEG.
    field = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    image = field.resize(IMAGE_SIZES[index % len(IMAGE_SIZES)], Image.BILINEAR)
    return image.convert("L") if index % GRAYSCALE_EVERY == GRAYSCALE_EVERY - 1 else image


def write_image_dataset(
    dataset: str,
    data_dir: str | Path,
    images_per_domain: int | None = None,
    classes: int | None = None,
    seed: int = 0,
) -> Path:
    """Write a synthetic ``dataset`` as ``<data_dir>/<folder>/<domain>/<class>/synthetic_*.jpg``
    with DomainBed's folder names, and return ``<data_dir>/<folder>``: the first ``classes``
    classes (default: all), ``images_per_domain`` images (default: one per class) spread over
    them in turn. A folder this function already wrote with the same arguments is returned as
    it is; any other existing folder is an error, never overwritten."""
    if dataset not in LAYOUTS:
        raise UserError(
            f"no synthetic layout for dataset {dataset!r}; synthetic folders can be written for "
            f"{', '.join(LAYOUTS)}"
        )
    layout = LAYOUTS[dataset]
    n_classes = len(layout.classes) if classes is None else classes
    if not 1 <= n_classes <= len(layout.classes):
        raise UserError(f"{dataset} has {len(layout.classes)} classes; asked for {classes}")
    per_domain = n_classes if images_per_domain is None else images_per_domain
    if per_domain < n_classes:
        raise UserError(
            f"{per_domain} images per domain cannot fill {n_classes} class folders: DomainBed's "
            "ImageFolder refuses an empty class folder; ask for at least one image per class"
        )
    target = Path(data_dir) / layout.folder
    recipe = dict(dataset=dataset, classes=n_classes, images_per_domain=per_domain, seed=seed)
    if target.exists():
        with contextlib.suppress(OSError, ValueError, IndexError):  # unreadable: not ours
            if json.loads((target / SYNTHETIC_MARKER).read_text().splitlines()[-1]) == recipe:
                return target
        raise UserError(
            f"{target} already exists and is not a synthetic {dataset} folder written with these "
            "settings; it is left untouched: choose another folder for the synthetic data"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written next to its place and renamed at the end: a failure leaves no half dataset.
    with tempfile.TemporaryDirectory(
        prefix=f".{target.name}.partial-", dir=target.parent, ignore_cleanup_errors=True
    ) as name:
        partial, rng = Path(name), np.random.default_rng(seed)
        for index, (domain, i) in enumerate(itertools.product(layout.domains, range(per_domain))):
            folder = partial / domain / layout.classes[i % n_classes]
            folder.mkdir(parents=True, exist_ok=True)
            _random_image(rng, index).save(folder / f"synthetic_{i:05d}.jpg", quality=85)
        (partial / SYNTHETIC_MARKER).write_text(
            "Random images written by dmg_domainbed.synthetic in the layout of DomainBed's "
            f"{dataset} download, to exercise the image path offline. Not the dataset: "
            "accuracies on it mean nothing.\n" + json.dumps(recipe, sort_keys=True) + "\n"
        )
        os.rename(partial, target)
    return target


def _hf_revision(file: WeightFile, seed: int) -> str:
    """A made-up revision that ``refs/main`` of the file's repository folder points at."""
    revision = hashlib.sha1(f"synthetic {file.model} {seed}".encode()).hexdigest()
    ref = file.folder / "refs" / "main"
    if not ref.exists():
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(revision)
    elif ref.read_text().strip() != revision:
        raise UserError(f"{ref} points at another revision; random weights never replace it")
    return revision


def write_random_weights(files: Sequence[WeightFile], seed: int = 0) -> list[Path]:
    """Write a random initialisation of each missing file of ``files`` where its loader reads
    it (torch.hub: a ``torch.save``'d state dict, whose hash torchvision checks only when it
    downloads; Hugging Face: a snapshot ``refs/main`` points at); return the paths written."""
    written = []
    for file in files:
        if file.present:
            continue
        if file.layout not in (TORCH_HUB_FILE, HF_SNAPSHOT):
            raise UserError(f"cannot write random weights for {file.what} ({file.layout})")
        path = file.path
        if file.layout == HF_SNAPSHOT:
            path = file.folder / "snapshots" / _hf_revision(file, seed) / Path(file.filename).name
        _save_random_weights(path, file.model, seed)
        written.append(path)
    return written


def _save_random_weights(path: Path, model: str, seed: int) -> None:
    """Save a fresh initialisation of ``model`` (``torchvision:NAME`` or ``timm:NAME``) as a new
    ``path``, through a temporary file renamed at the end (no half-written file on a failure)."""
    import torch

    if path.exists():
        raise UserError(f"{path} exists; random weights never replace a file")
    family, _, name = model.partition(":")
    torch.manual_seed(seed)
    if family == "torchvision":
        from torchvision import models

        network = models.get_model(name, weights=None)
    elif family == "timm":
        import timm

        network = timm.create_model(name, pretrained=False)
    else:
        raise UserError(
            f"cannot write random weights for {model}: only for models of torchvision, timm"
        )
    state = {key: value.detach().contiguous() for key, value in network.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as folder:
        temporary = Path(folder) / path.name
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file(state, temporary)
        else:
            torch.save(state, temporary)
        os.rename(temporary, path)
