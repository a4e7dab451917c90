"""The pretrained weights DomainBed downloads when it builds a model, and whether they are cached.

DomainBed (``networks.py``, commit b93c22a) builds every 224x224 featurizer from pretrained
weights, downloading them at construction; on a node without internet the job dies there. For
a ResNet it first builds torchvision's ``resnet18``/``resnet50(pretrained=True)`` (the
``IMAGENET1K_V1`` weights) and then, if ``resnet50_augmix`` is on (DomainBed's default), replaces
it by timm's ``resnet50.ram_in1k``: with the default hparams *both* are downloaded. With ``vit``
and ``dinov2`` it loads DINOv2 ViT-B/14 through ``torch.hub``. Smaller inputs (MNIST's CNN,
the Wide ResNet, the MLP) use no pretrained weights.

Caches are only looked at here; nothing is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

TIMM_MODEL = "resnet50.ram_in1k"
DINOV2_REPO, DINOV2_MODEL = "facebookresearch/dinov2", "dinov2_vitb14"
# torch.hub's folder names for the DINOv2 repository and its checkpoint.
DINOV2_REPO_FOLDER = "facebookresearch_dinov2_main"
DINOV2_CHECKPOINT = "dinov2_vitb14_pretrain.pth"


@dataclass(frozen=True)
class WeightFile:
    """One file a run needs: what it is, where the loader looks for it, how to get it there."""

    what: str
    folder: Path
    filename: str
    present: bool
    fetch: str

    @property
    def path(self) -> Path:
        return self.folder / self.filename


def torch_hub_dir() -> Path:
    import torch

    return Path(torch.hub.get_dir())


def _torchvision_resnet(depth: int) -> WeightFile:
    import torchvision.models as models

    # ``pretrained=True`` is torchvision's legacy name for IMAGENET1K_V1.
    url = getattr(models, f"ResNet{depth}_Weights").IMAGENET1K_V1.url
    folder = torch_hub_dir() / "checkpoints"
    filename = os.path.basename(urlparse(url).path)
    return WeightFile(
        what=f"torchvision resnet{depth} ImageNet weights (IMAGENET1K_V1)",
        folder=folder,
        filename=filename,
        present=(folder / filename).is_file(),
        fetch=f"download {url} into {folder}",
    )


def _timm_resnet50_augmix() -> WeightFile:
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(TIMM_MODEL)
    fetch_hint = (
        f'on a machine with internet run python -c "import timm; '
        f"timm.create_model('{TIMM_MODEL}', pretrained=True)\", then copy its cache folder "
    )
    try:
        import huggingface_hub
    except ImportError:
        huggingface_hub = None
    if cfg.hf_hub_id and huggingface_hub is not None:
        from huggingface_hub import constants

        try:
            import safetensors  # noqa: F401  (timm prefers model.safetensors when it can read it)

            filename = "model.safetensors"
        except ImportError:
            filename = "pytorch_model.bin"
        cache = Path(constants.HF_HUB_CACHE)
        repo_folder = cache / f"models--{cfg.hf_hub_id.replace('/', '--')}"
        cached = huggingface_hub.try_to_load_from_cache(cfg.hf_hub_id, filename)
        return WeightFile(
            what=f"timm {TIMM_MODEL} weights (Hugging Face hub {cfg.hf_hub_id})",
            folder=repo_folder,
            filename=f"snapshots/<revision>/{filename}",
            present=isinstance(cached, str),
            fetch=fetch_hint + f"{repo_folder.name} into {cache}; set HF_HUB_OFFLINE=1 "
            "on nodes without internet",
        )
    folder = torch_hub_dir() / "checkpoints"
    filename = os.path.basename(urlparse(cfg.url).path)
    return WeightFile(
        what=f"timm {TIMM_MODEL} weights",
        folder=folder,
        filename=filename,
        present=(folder / filename).is_file(),
        fetch=f"download {cfg.url} into {folder}",
    )


def _dinov2() -> list[WeightFile]:
    hub = torch_hub_dir()
    hint = (
        f'on a machine with internet run python -c "import torch; '
        f"torch.hub.load('{DINOV2_REPO}', '{DINOV2_MODEL}')\" and copy it from there"
    )
    return [
        WeightFile(
            f"torch.hub code of {DINOV2_REPO}",
            hub,
            DINOV2_REPO_FOLDER,
            (hub / DINOV2_REPO_FOLDER).is_dir(),
            hint,
        ),
        WeightFile(
            f"DINOV2 {DINOV2_MODEL} weights",
            hub / "checkpoints",
            DINOV2_CHECKPOINT,
            (hub / "checkpoints" / DINOV2_CHECKPOINT).is_file(),
            hint,
        ),
    ]


def uses_pretrained_backbone(input_shape: Sequence[int] | None) -> bool:
    """DomainBed builds a pretrained featurizer for 224x224 inputs only."""
    return input_shape is not None and tuple(input_shape[1:3]) == (224, 224)


def needed_weights(
    hparams: Mapping[str, object], input_shape: Sequence[int] | None
) -> tuple[list[WeightFile], list[str]]:
    """The weight files a run with ``hparams`` on inputs of ``input_shape`` loads, and problems
    that would stop the model from being built at all."""
    if not uses_pretrained_backbone(input_shape):
        return [], []
    if hparams.get("vit"):
        if not hparams.get("dinov2"):
            return [], ["DomainBed builds no ViT but DINOv2: with vit=true set dinov2=true"]
        return _dinov2(), []
    files = [_torchvision_resnet(18 if hparams.get("resnet18") else 50)]
    if hparams.get("resnet50_augmix"):
        files.append(_timm_resnet50_augmix())
    return files, []


@dataclass(frozen=True)
class WeightsCheck:
    """An algorithm's own account of the pretrained weights it loads, for algorithms that do
    not use DomainBed's featurizer: they offer ``check_weights(hparams) -> WeightsCheck``.

    ``locations``: where the loader looks, in its order (found or not); ``ready``: whether the
    run would load them; ``details``: what was found (does it load, does it fit) and how to
    get the weights."""

    locations: tuple[WeightFile, ...]
    ready: bool
    details: tuple[str, ...]


def algorithm_weights(algorithm_class: type, hparams: Mapping[str, object]) -> WeightsCheck | None:
    """``algorithm_class``'s check of its own weights, or ``None`` when it loads DomainBed's."""
    check = getattr(algorithm_class, "check_weights", None)
    return check(hparams) if check is not None else None
