"""The runs the image-path tests share.

Runs of a step or two through DomainBed's own train script on synthetic folders laid out like
PACS and DomainNet: DomainBed's ImageFolder loaders and augmentations at 224x224, and its ResNet
featurizer built with ``pretrained=True`` from random weights written into the very cache files
torchvision and timm read (offline). One real path per ResNet family: DMG with ResNet-50
(DomainBed's default: torchvision's, replaced by timm's resnet50.ram_in1k) on the PACS-shaped
folder; with the paper's cheaper ResNet-18 on the DomainNet-shaped one, the algorithms whose
networks depend on the backbone (masks on its layers, heads on its features; CorGrad works on
gradients whatever the network, SFMOE trains its DeiT-S in ``test_sfmoe``). These runs are
where the algorithms' update and predict meet 224x224 images and DomainBed's ResNets; DomainBed's
own ``test_models`` holds every algorithm to its contract on ``Debug28``
(``test_domainbed_contract``).
One worker process runs them all, one after the other (see train_worker.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from dmg_domainbed import synthetic
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.weight_files import Caches

from ..helpers import domainbed_env

RUNS = (
    ("resnet50", "DMG"),
    *(("resnet18", name) for name in ("Aggregate", "MultiHead", "DMG", "ImportanceMask")),
)
# One step, which train.py also evaluates on every split (step 0 is always evaluated), and two for
# ImportanceMask: it ends phase 1 after one step, so its second step and saved model are phase 2.
STEPS = {"ImportanceMask": 2}
ALGORITHM_HPARAMS = {
    "ImportanceMask": {"phase1_steps": 1, "freeze_step": 1, "unimportant_lr_half_life": 1}
}
# Two classes and three images per domain with half held out: one batch of 2 per domain, and
# an evaluation of 12 (PACS) or 18 (DomainNet) images at each evaluated step.
CLASSES, IMAGES_PER_DOMAIN, HOLDOUT_FRACTION, BATCH_SIZE = 2, 3, 0.5, 2


def steps(algorithm: str) -> int:
    return STEPS.get(algorithm, 1)


@dataclass(frozen=True)
class Backbone:
    dataset: str
    hparams: dict
    mask_units: tuple[int, int, int]  # input channels of layer3 and layer4, classifier inputs


BACKBONES = {
    "resnet50": Backbone("PACS", {"resnet18": False, "resnet50_augmix": True}, (512, 1024, 2048)),
    "resnet18": Backbone(
        "DomainNet", {"resnet18": True, "resnet50_augmix": False}, (128, 256, 512)
    ),
}


@dataclass(frozen=True)
class ImagePath:
    data_dir: Path
    caches: Caches

    @property
    def environment(self) -> dict[str, str]:
        return {**self.caches.environment(), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="session")
def image_path(tmp_path_factory) -> ImagePath:
    """Synthetic PACS- and DomainNet-shaped folders and a weight cache of random backbones."""
    root = tmp_path_factory.mktemp("image_path")
    caches = Caches.under(root / "cache")
    for backbone in BACKBONES.values():
        files, _ = needed_weights(backbone.hparams, synthetic.IMAGE_SHAPE, caches)
        synthetic.write_random_weights(files)
        synthetic.write_image_dataset(
            backbone.dataset, root / "data", images_per_domain=IMAGES_PER_DOMAIN, classes=CLASSES
        )
    return ImagePath(root / "data", caches)


def _train_args(image_path: ImagePath, backbone: str, algorithm: str, output: Path) -> list[str]:
    hparams = {
        **BACKBONES[backbone].hparams,
        "batch_size": BATCH_SIZE,
        **ALGORITHM_HPARAMS.get(algorithm, {}),
    }
    return [
        *("--algorithm", algorithm, "--dataset", BACKBONES[backbone].dataset),
        *("--data_dir", str(image_path.data_dir), "--output_dir", str(output)),
        *("--steps", str(steps(algorithm)), "--holdout_fraction", str(HOLDOUT_FRACTION)),
        *("--test_envs", "0", "--hparams", json.dumps(hparams)),
    ]


@pytest.fixture(scope="session")
def image_runs(image_path, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Run folder of every (backbone, algorithm) of RUNS, trained by one worker process."""
    root = tmp_path_factory.mktemp("image_runs")
    runs = {(backbone, algorithm): root / f"{backbone}_{algorithm}" for backbone, algorithm in RUNS}
    jobs, log = root / "jobs.json", root / "worker.log"
    jobs.write_text(json.dumps([_train_args(image_path, *key, run) for key, run in runs.items()]))
    with open(log, "w") as output:
        worker = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("train_worker.py")), str(jobs)],
            env=domainbed_env(**image_path.environment),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=1800,
        )
    assert worker.returncode == 0, log.read_text()[-4000:]
    return runs


@pytest.fixture
def offline_caches(image_path, monkeypatch):
    """This process reads the random weights of :func:`image_path`, offline, as the runs did."""
    from huggingface_hub import constants

    monkeypatch.setenv("TORCH_HOME", image_path.caches.environment()["TORCH_HOME"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(image_path.caches.hf_hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return image_path
