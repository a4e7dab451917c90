"""DomainBed dataset classes built from dataset manifests (:mod:`.manifest`).

A manifest dataset is a ``MultipleEnvironmentImageFolder`` in everything DomainBed asks of a
class (its image hparams and training augmentation included), except that the domains are the
manifest's, in its order, the labels number the classes of all domains together, ``--data_dir``
is not read and the images are resized to the manifest's input side.

So that a run's numbers are never shown under another domain's name, nor its model scored on
other classes or splits, the dataset records what it was built from in the run's hparams
(``recorded_hparams``, :func:`data_facts`), which train.py writes into ``results.jsonl`` and
``model.pkl`` and :mod:`dmg_domainbed.runs` compares with the data of today.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

from domainbed.datasets import MultipleEnvironmentImageFolder
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.datasets.folder import default_loader

from dmg_domainbed.datasets.image_files import DomainFiles
from dmg_domainbed.datasets.manifest import (
    CLASSES_HPARAM,
    DOMAINS_HPARAM,
    FILES_HPARAM,
    IMAGES_HPARAM,
    Manifest,
    class_names,
    file_problems,
    list_files,
)
from dmg_domainbed.datasets.training_split import batch_findings, train_arguments
from dmg_domainbed.datasets.when_built import check_and_record
from dmg_domainbed.errors import UserError

# DomainBed's image statistics (ImageNet's), with which its image datasets normalise.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def image_transforms(side: int) -> tuple[transforms.Compose, transforms.Compose]:
    """(evaluation, training) transforms of DomainBed's image datasets for ``side`` x ``side``
    inputs: a resize, or a random crop of 70-100% of the image, flip, colour jitter and random
    grayscale (``MultipleEnvironmentImageFolder`` with 224)."""
    plain = transforms.Compose(
        [transforms.Resize((side, side)), transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    )
    augmented = transforms.Compose(
        [
            transforms.RandomResizedCrop(side, scale=(0.7, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ColorJitter(0.3, 0.3, 0.3, 0.3),
            transforms.RandomGrayscale(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    return plain, augmented


class LabelledImages(Dataset):
    """One domain: image files with their labels, read as ``ImageFolder`` reads them (RGB)."""

    def __init__(self, samples: Sequence[tuple[str, int]], transform) -> None:
        self.samples = list(samples)
        self.targets = [label for _, label in self.samples]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        return self.transform(default_loader(path)), label


class ManifestImageFolder(MultipleEnvironmentImageFolder):
    """The base of every manifest dataset class; ``MANIFEST`` is the class's manifest."""

    MANIFEST: Manifest

    @classmethod
    def recorded_hparams(cls) -> dict[str, Any]:
        """What a run on the dataset records in its hparams: the manifest's domains, in order,
        and what only its files tell, written as it is built (:func:`data_facts`)."""
        known_once_built = dict.fromkeys((CLASSES_HPARAM, IMAGES_HPARAM, FILES_HPARAM))
        return {DOMAINS_HPARAM: list(cls.MANIFEST.domains), **known_once_built}

    def __init__(self, root, test_envs, hparams) -> None:
        check_and_record(type(self), test_envs, hparams)
        manifest = self.MANIFEST
        domains = list_files(manifest)
        problems = file_problems(manifest, domains)
        if problems:
            raise UserError("\n".join(problems))
        refuse_short_domains(manifest, domains, test_envs, hparams)
        self.classes = class_names(domains)
        hparams.update(data_facts(manifest, domains, self.classes))
        label = {name: i for i, name in enumerate(self.classes)}
        plain, augmented = image_transforms(manifest.input_size)
        self.datasets = []
        for i, domain in enumerate(domains):
            augment = hparams["data_augmentation"] and i not in test_envs
            samples = [
                (path, label[name]) for name in self.classes for path in domain.classes[name]
            ]
            self.datasets.append(LabelledImages(samples, augmented if augment else plain))
        self.input_shape = manifest.input_shape
        self.num_classes = len(self.classes)


def data_facts(
    manifest: Manifest, domains: list[DomainFiles], classes: list[str]
) -> dict[str, Any]:
    """What the dataset records of its files in a run's hparams: its classes in label order,
    each domain's number of images, and a digest of every image's domain, path under the root
    and class, in the order the dataset reads them. Paths are relative to the root: a copy of
    the dataset in another folder gives the same."""
    digest = hashlib.sha256()
    for domain in domains:
        for name in classes:
            for path in domain.classes[name]:
                line = f"{domain.name}\t{os.path.relpath(path, manifest.root)}\t{name}\n"
                digest.update(line.encode())
    return {
        CLASSES_HPARAM: list(classes),
        IMAGES_HPARAM: [domain.images for domain in domains],
        FILES_HPARAM: digest.hexdigest()[:16],
    }


def refuse_short_domains(manifest: Manifest, domains, test_envs, hparams) -> None:
    """:class:`UserError` when ``train.py`` builds the dataset (only it draws training batches
    and knows ``holdout_fraction``) and a training domain cannot fill one batch: its loader
    would wait for ever (:mod:`dmg_domainbed.datasets.training_split`)."""
    fraction = getattr(train_arguments(), "holdout_fraction", None)  # None: not in train.py
    if not isinstance(fraction, int | float) or hparams.get("class_balanced"):
        return
    trained = [(d.name, d.images) for i, d in enumerate(domains) if i not in test_envs]
    source = "the run's hparam batch_size"
    short = batch_findings(manifest.name, trained, hparams["batch_size"], float(fraction), source)
    if short:
        raise UserError("\n".join(str(finding) for finding in short))


def dataset_class(manifest: Manifest) -> type[ManifestImageFolder]:
    """The DomainBed dataset class of ``manifest``, named as it, in ``domainbed.datasets``:
    pickled by reference, it is found again in any process that registers the manifest."""
    attributes = {
        "MANIFEST": manifest,
        "ENVIRONMENTS": list(manifest.domains),
        "INPUT_SHAPE": manifest.input_shape,
        "__module__": "domainbed.datasets",
        "__qualname__": manifest.name,
        "__doc__": f"Dataset of the manifest {manifest.path}.",
    }
    if manifest.steps is not None:
        attributes["N_STEPS"] = manifest.steps
    if manifest.checkpoint_freq is not None:
        attributes["CHECKPOINT_FREQ"] = manifest.checkpoint_freq
    return type(manifest.name, (ManifestImageFolder,), attributes)
