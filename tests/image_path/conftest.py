"""The run the image-path tests share.

One step of DMG through DomainBed's own train script on a synthetic folder laid out like PACS,
with DomainBed's default backbone, ResNet-50 (torchvision's, replaced by timm's
resnet50.ram_in1k): DomainBed's ImageFolder loaders and augmentations at 224x224, and its
ResNet featurizer built with ``pretrained=True`` from random weights written into the very
cache file timm reads (offline). Every algorithm with the paper's cheaper ResNet-18, on PACS
too, is a cell of the combination matrix (``tests/test_combinations.py``); DomainBed's own
``test_models`` holds every algorithm to its contract on ``Debug28``
(``test_domainbed_contract``). The run is in this process, as the matrix's are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from dmg_domainbed import synthetic
from dmg_domainbed.weight_files import Caches

from ..helpers import domainbed_script, one_loader_worker, random_weight_cache, read_weights_from

# Two steps: train.py logs the epoch at step 1, from which a run knows its smallest training split.
DATASET, ALGORITHM, STEPS = "PACS", "DMG", 2
RESNET50 = {"resnet18": False, "resnet50_augmix": True}
# input channels of layer3 and layer4, classifier inputs
MASK_UNITS = (512, 1024, 2048)
# Two classes and three images per domain with half held out: one batch of 2 per domain, and
# an evaluation of 12 images at each step train.py evaluates (step 0 is always evaluated).
CLASSES, IMAGES_PER_DOMAIN, HOLDOUT_FRACTION, BATCH_SIZE = 2, 3, 0.5, 2


@dataclass(frozen=True)
class ImagePath:
    data_dir: Path
    caches: Caches


@pytest.fixture(scope="session")
def image_path(tmp_path_factory) -> ImagePath:
    """A synthetic PACS-shaped folder and a weight cache of a random ResNet-50."""
    root = tmp_path_factory.mktemp("image_path")
    caches = random_weight_cache(root / "cache", backbones=[RESNET50])
    synthetic.write_image_dataset(
        DATASET, root / "data", images_per_domain=IMAGES_PER_DOMAIN, classes=CLASSES
    )
    return ImagePath(root / "data", caches)


@pytest.fixture(scope="session")
def image_run(image_path, tmp_path_factory) -> Path:
    """The run folder of DMG with ResNet-50, trained by train.py in this process."""
    output = tmp_path_factory.mktemp("image_runs") / "resnet50_DMG"
    hparams = {**RESNET50, "batch_size": BATCH_SIZE}
    with pytest.MonkeyPatch.context() as patch, one_loader_worker():
        read_weights_from(patch, image_path.caches)
        domainbed_script(
            "train",
            *("--algorithm", ALGORITHM, "--dataset", DATASET),
            *("--data_dir", str(image_path.data_dir), "--output_dir", str(output)),
            *("--steps", str(STEPS), "--holdout_fraction", str(HOLDOUT_FRACTION)),
            *("--test_envs", "0", "--hparams", json.dumps(hparams)),
        )
    return output


@pytest.fixture
def offline_caches(image_path, monkeypatch):
    """This process reads the random weights of :func:`image_path`, offline, as the run did."""
    read_weights_from(monkeypatch, image_path.caches)
    return image_path
