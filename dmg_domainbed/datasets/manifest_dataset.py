"""DomainBed dataset classes built from dataset manifests (:mod:`.manifest`).

A manifest dataset is one of DomainBed's image-folder datasets in everything DomainBed and this
package ask of a class: a ``MultipleEnvironmentImageFolder`` with ``ENVIRONMENTS``, ``N_STEPS``,
``CHECKPOINT_FREQ`` and ``INPUT_SHAPE``, built as ``cls(data_dir, test_envs, hparams)``, one
dataset of ``(image, label)`` pairs per domain, DomainBed's image hparams (it is not one of
DomainBed's ``SMALL_IMAGES``) and its image augmentation for training domains when
``data_augmentation`` is on. What differs: the domains are the manifest's, in its order; the
labels number the classes of all domains together; ``--data_dir`` is not read (the manifest
names its root); and the images are resized to the manifest's input side instead of 224.

A manifest can change between training and reporting (domains reordered, renamed or added). So
that a run's numbers are never shown under another domain's name, the dataset records the
domains it was built with in the run's hparams (``hparams["manifest_domains"]``, declared by
``recorded_hparams``, see :mod:`dmg_domainbed.hparams.recorded`): DomainBed's ``train.py``
writes that dict into every record of ``results.jsonl`` and into ``model.pkl``, and ``report``
and ``evaluate`` compare it with the manifest of today.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domainbed.datasets import MultipleEnvironmentImageFolder
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.datasets.folder import default_loader

from dmg_domainbed.datasets.manifest import (
    DOMAINS_HPARAM,
    Manifest,
    class_names,
    file_problems,
    list_files,
)
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
        """What a run on the dataset records in its hparams: the manifest's domains, in order."""
        return {DOMAINS_HPARAM: list(cls.MANIFEST.domains)}

    def __init__(self, root, test_envs, hparams) -> None:
        manifest = self.MANIFEST
        domains = list_files(manifest)
        problems = file_problems(manifest, domains)
        if problems:
            raise UserError("\n".join(problems))
        self.classes = class_names(domains)
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


def dataset_class(manifest: Manifest) -> type[ManifestImageFolder]:
    """The DomainBed dataset class of ``manifest``, named as the manifest names it.

    Its ``__module__`` is ``domainbed.datasets``, where registration puts it: pickled by
    reference like DomainBed's own classes, it is found again in any process that registers
    the same manifests.
    """
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
