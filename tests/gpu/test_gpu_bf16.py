"""bf16 on a CUDA GPU: DomainBed's own train.py runs ERM and DMG with ``precision = "bf16"``
on a synthetic PACS-shaped folder (DomainBed's ResNet-18 from random weights in a local cache),
with finite losses and the precision in every record and in the checkpoint."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from dmg_domainbed import synthetic
from dmg_domainbed.preflight.weights import needed_weights
from dmg_domainbed.weight_files import Caches

from ..helpers import domainbed_env, run_domainbed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU: torch.cuda.is_available() is False",
    ),
]

HPARAMS = {"resnet18": True, "resnet50_augmix": False, "batch_size": 8, "precision": "bf16"}
STEPS = 3


@pytest.fixture(scope="module")
def pacs(tmp_path_factory):
    """A PACS-shaped folder of 2 classes x 16 images per domain, and a cache of random weights."""
    root = tmp_path_factory.mktemp("gpu_bf16")
    caches = Caches.under(root / "cache")
    files, problems = needed_weights(HPARAMS, synthetic.IMAGE_SHAPE, caches)
    assert not problems, problems
    synthetic.write_random_weights(files)
    synthetic.write_image_dataset("PACS", root / "data", images_per_domain=16, classes=2)
    return root, {**caches.environment(), "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize("algorithm", ["ERM", "DMG"])
def test_domainbeds_train_runs_bf16_on_the_gpu(pacs, algorithm):
    root, environment = pacs
    output = root / algorithm
    run_domainbed(
        "train",
        *("--algorithm", algorithm, "--dataset", "PACS", "--test_envs", "0"),
        *("--data_dir", str(root / "data"), "--output_dir", str(output)),
        *("--steps", str(STEPS), "--checkpoint_freq", "2", "--hparams", json.dumps(HPARAMS)),
        env=domainbed_env(**environment),
    )
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 2]
    assert all(r["hparams"]["precision"] == "bf16" for r in records)
    assert all(math.isfinite(r["loss"]) and r["mem_gb"] > 0 for r in records)  # ran on CUDA
    saved = torch.load(output / "model.pkl", weights_only=False)
    assert saved["model_hparams"]["precision"] == "bf16"


def test_dmg_masked_activations_are_bf16_and_channels_last_on_the_gpu(pacs, monkeypatch):
    from domainbed import algorithms, hparams_registry

    for name, value in pacs[1].items():  # the random weights' cache, offline
        monkeypatch.setenv(name, value)
    hparams = hparams_registry.default_hparams("DMG", "PACS")
    hparams.update(HPARAMS)
    dmg = algorithms.get_algorithm_class("DMG")((3, 224, 224), 7, 3, hparams).cuda()
    seen = set()
    modules = dict(dmg.network.named_modules())
    for name in dmg.masks.layer_names:
        modules[name].register_forward_pre_hook(lambda m, args: seen.add(args[0].dtype))
    batches = [
        (torch.randn(4, 3, 224, 224, device="cuda"), torch.randint(0, 7, (4,), device="cuda"))
        for _ in range(3)
    ]
    logged = dmg.update(batches)
    assert seen == {torch.bfloat16} and all(math.isfinite(v) for v in logged.values())
    conv = next(m for m in dmg.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
