"""The pretrained weights DomainBed downloads when it builds a model, and whether they are cached.

DomainBed (``networks.py``, commit b93c22a) builds every 224x224 featurizer from pretrained
weights, downloaded at construction: a job on a node without internet dies there. A ResNet is
torchvision's ``resnet18``/``resnet50`` (``IMAGENET1K_V1``), replaced, with ``resnet50_augmix``
(DomainBed's default), by timm's ``resnet50.ram_in1k``, after *both* are loaded; ``vit`` with
``dinov2`` loads DINOv2 ViT-B/14 through ``torch.hub``. Smaller inputs load none. Each missing
file comes with the command that puts it where the loader looks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from urllib.parse import urlparse

from dmg_domainbed.weight_files import HF_SNAPSHOT, TORCH_HUB_REPO, Caches, WeightFile

TIMM_MODEL = "resnet50.ram_in1k"
DINOV2_REPO, DINOV2_MODEL = "facebookresearch/dinov2", "dinov2_vitb14"
# torch.hub's folder names for the DINOv2 repository and its checkpoint.
DINOV2_REPO_FOLDER = "facebookresearch_dinov2_main"
DINOV2_CHECKPOINT = "dinov2_vitb14_pretrain.pth"


def _torchvision_file(name: str, weights: str, caches: Caches) -> WeightFile:
    """The file torchvision's ``name`` builder loads for ``weights`` (``pretrained=True`` is
    ``IMAGENET1K_V1``), in torch hub's checkpoint folder."""
    from torchvision import models

    url = models.get_model_weights(name)[weights].url
    folder, filename = caches.torch_hub / "checkpoints", os.path.basename(urlparse(url).path)
    load = f"import torch; torch.hub.load_state_dict_from_url('{url}')"
    fetch = f'TORCH_HOME={caches.torch_hub.parent} python -c "{load}"'
    what = f"torchvision {name} ImageNet weights ({weights})"
    present = (folder / filename).is_file()
    return WeightFile(what, folder, filename, present, fetch, model=f"torchvision:{name}")


def _timm_file(name: str, caches: Caches) -> WeightFile:
    """timm (with huggingface_hub and safetensors) loads the model's Hugging Face hub snapshot."""
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    repo, filename = get_pretrained_cfg(name).hf_hub_id, "model.safetensors"
    present = isinstance(try_to_load_from_cache(repo, filename, cache_dir=caches.hf_hub), str)
    create = f"import timm; timm.create_model('{name}', pretrained=True)"
    return WeightFile(
        f"timm {name} weights (Hugging Face hub {repo})",
        caches.hf_hub / f"models--{repo.replace('/', '--')}",
        f"snapshots/<revision>/{filename}",
        present,
        f'HF_HUB_CACHE={caches.hf_hub} python -c "{create}"; set HF_HUB_OFFLINE=1 on nodes '
        "without internet",
        model=f"timm:{name}",
        layout=HF_SNAPSHOT,
    )


def _dinov2(caches: Caches) -> list[WeightFile]:
    hub, checkpoints, model = caches.torch_hub, caches.torch_hub / "checkpoints", DINOV2_MODEL
    load = f"import torch; torch.hub.load('{DINOV2_REPO}', '{model}')"
    fetch = f'TORCH_HOME={hub.parent} python -c "{load}"'
    code, repo = f"torch.hub code of {DINOV2_REPO}", f"torch.hub:{DINOV2_REPO}"
    present = (hub / DINOV2_REPO_FOLDER).is_dir(), (checkpoints / DINOV2_CHECKPOINT).is_file()
    weights = f"DINOV2 {model} weights"
    return [
        WeightFile(
            code, hub, DINOV2_REPO_FOLDER, present[0], fetch, model=repo, layout=TORCH_HUB_REPO
        ),
        WeightFile(
            weights, checkpoints, DINOV2_CHECKPOINT, present[1], fetch, model=f"{repo}:{model}"
        ),
    ]


def needed_weights(
    hparams: Mapping[str, object],
    input_shape: Sequence[int] | None,
    caches: Caches | None = None,
) -> tuple[list[WeightFile], list[str]]:
    """The weight files a run with ``hparams`` on ``input_shape`` loads, looked up in ``caches``
    (default: this process's), and what stops its model from being built (none but 224x224)."""
    if input_shape is None or tuple(input_shape[1:3]) != (224, 224):
        return [], []
    caches = caches or Caches.current()
    if hparams.get("alexnet"):  # the AlexNet featurizer of the DMG paper's algorithms
        from dmg_domainbed.algorithms.paper_baselines.alexnet import WEIGHTS

        return [_torchvision_file("alexnet", WEIGHTS, caches)], []
    if hparams.get("vit"):
        if not hparams.get("dinov2"):
            return [], ["DomainBed builds no ViT but DINOv2: with vit=true set dinov2=true"]
        return _dinov2(caches), []
    resnet = "resnet18" if hparams.get("resnet18") else "resnet50"
    files = [_torchvision_file(resnet, "IMAGENET1K_V1", caches)]
    if hparams.get("resnet50_augmix"):
        files.append(_timm_file(TIMM_MODEL, caches))
    return files, []


def missing_weights_message(files: Sequence[WeightFile]) -> str:
    """What is missing, where it was looked for, and the command that fetches each file."""
    return "; ".join(f"{f.what}: not found at {f.path}; to get it: {f.fetch}" for f in files)
