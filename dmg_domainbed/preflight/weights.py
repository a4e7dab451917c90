"""The pretrained weights DomainBed downloads when it builds a model, and whether they are cached.

DomainBed (``networks.py``, commit b93c22a) builds every 224x224 featurizer from pretrained
weights, downloading them at construction; on a node without internet the job dies there. For
a ResNet it first builds torchvision's ``resnet18``/``resnet50(pretrained=True)`` (the
``IMAGENET1K_V1`` weights) and then, if ``resnet50_augmix`` is on (DomainBed's default), replaces
it by timm's ``resnet50.ram_in1k``: with the default hparams *both* are downloaded. With ``vit``
and ``dinov2`` it loads DINOv2 ViT-B/14 through ``torch.hub``. Smaller inputs (MNIST's CNN,
the Wide ResNet, the MLP) use no pretrained weights.

Caches are only looked at here; nothing is downloaded. Each missing file comes with the command
that puts it where the loader looks.
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

# Where a file sits in its cache: a torch.hub checkpoint file, a Hugging Face hub snapshot, or
# a torch.hub repository of code.
TORCH_HUB_FILE, HF_SNAPSHOT, TORCH_HUB_REPO = "torch hub file", "hf snapshot", "torch hub repo"


@dataclass(frozen=True)
class Caches:
    """The two caches DomainBed's networks load pretrained weights from."""

    torch_hub: Path  # torch.hub.get_dir(): $TORCH_HOME/hub
    hf_hub: Path  # huggingface_hub's cache: $HF_HUB_CACHE, else $HF_HOME/hub

    @classmethod
    def current(cls) -> Caches:
        """The caches this process (and a job started with its environment) reads."""
        import torch
        from huggingface_hub import constants

        return cls(Path(torch.hub.get_dir()), Path(constants.HF_HUB_CACHE))

    @classmethod
    def under(cls, root: Path) -> Caches:
        """Both caches inside ``root``, for a process started with :meth:`environment`."""
        root = Path(root).absolute()
        return cls(root / "torch" / "hub", root / "huggingface" / "hub")

    def environment(self) -> dict[str, str]:
        """Environment variables that make torch.hub, torchvision and timm read these caches."""
        return {
            "TORCH_HOME": str(self.torch_hub.parent),
            "HF_HOME": str(self.hf_hub.parent),
            "HF_HUB_CACHE": str(self.hf_hub),
        }


@dataclass(frozen=True)
class WeightFile:
    """One file a run needs: what it is, where the loader looks for it, how to get it there.

    ``model`` names the architecture the file holds weights of (``torchvision:resnet50``,
    ``timm:resnet50.ram_in1k``); ``layout`` says how its cache stores it.
    """

    what: str
    folder: Path
    filename: str
    present: bool
    fetch: str
    model: str = ""
    layout: str = TORCH_HUB_FILE

    @property
    def path(self) -> Path:
        return self.folder / self.filename


def torch_hub_dir() -> Path:
    """torch.hub's folder in this process (``$TORCH_HOME/hub``)."""
    return Caches.current().torch_hub


def _torchvision_checkpoint(name: str, caches: Caches) -> WeightFile:
    from torchvision import models

    # ``pretrained=True`` is torchvision's legacy name for IMAGENET1K_V1.
    url = models.get_model_weights(name).IMAGENET1K_V1.url
    return _torch_hub_file(
        url, f"torchvision {name} ImageNet weights (IMAGENET1K_V1)", name, caches
    )


def _torchvision_alexnet(caches: Caches) -> WeightFile:
    """The file of this package's AlexNet featurizer (``alexnet = true``; see
    :mod:`dmg_domainbed.alexnet`), which replaces DomainBed's ResNet entirely."""
    import torchvision.models as models

    from dmg_domainbed.alexnet import WEIGHTS

    url = getattr(models.AlexNet_Weights, WEIGHTS).url
    what = f"torchvision alexnet ImageNet weights ({WEIGHTS})"
    return _torch_hub_file(url, what, "alexnet", caches)


def _torch_hub_file(url: str, what: str, name: str, caches: Caches) -> WeightFile:
    """The file torchvision's loader keeps ``url`` in, in torch hub's checkpoint folder."""
    folder = caches.torch_hub / "checkpoints"
    filename = os.path.basename(urlparse(url).path)
    return WeightFile(
        what=what,
        folder=folder,
        filename=filename,
        present=(folder / filename).is_file(),
        fetch=(
            f'TORCH_HOME={caches.torch_hub.parent} python -c "import torch; '
            f"torch.hub.load_state_dict_from_url('{url}')\""
        ),
        model=f"torchvision:{name}",
        layout=TORCH_HUB_FILE,
    )


def _hf_weights_name() -> str:
    try:
        import safetensors  # noqa: F401  (timm prefers model.safetensors when it can read it)
    except ImportError:
        return "pytorch_model.bin"
    return "model.safetensors"


def _timm_checkpoint(name: str, caches: Caches) -> WeightFile:
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    create = f"import timm; timm.create_model('{name}', pretrained=True)"
    try:
        import huggingface_hub
    except ImportError:
        huggingface_hub = None
    if cfg.hf_hub_id and huggingface_hub is not None:
        filename = _hf_weights_name()
        repo_folder = caches.hf_hub / f"models--{cfg.hf_hub_id.replace('/', '--')}"
        cached = huggingface_hub.try_to_load_from_cache(
            cfg.hf_hub_id, filename, cache_dir=caches.hf_hub
        )
        return WeightFile(
            what=f"timm {name} weights (Hugging Face hub {cfg.hf_hub_id})",
            folder=repo_folder,
            filename=f"snapshots/<revision>/{filename}",
            present=isinstance(cached, str),
            fetch=f'HF_HUB_CACHE={caches.hf_hub} python -c "{create}"; set HF_HUB_OFFLINE=1 '
            "on nodes without internet",
            model=f"timm:{name}",
            layout=HF_SNAPSHOT,
        )
    folder = caches.torch_hub / "checkpoints"
    filename = os.path.basename(urlparse(cfg.url).path)
    return WeightFile(
        what=f"timm {name} weights",
        folder=folder,
        filename=filename,
        present=(folder / filename).is_file(),
        fetch=f'TORCH_HOME={caches.torch_hub.parent} python -c "{create}"',
        model=f"timm:{name}",
        layout=TORCH_HUB_FILE,
    )


def _dinov2(caches: Caches) -> list[WeightFile]:
    hub = caches.torch_hub
    fetch = (
        f'TORCH_HOME={hub.parent} python -c "import torch; '
        f"torch.hub.load('{DINOV2_REPO}', '{DINOV2_MODEL}')\""
    )
    return [
        WeightFile(
            f"torch.hub code of {DINOV2_REPO}",
            hub,
            DINOV2_REPO_FOLDER,
            (hub / DINOV2_REPO_FOLDER).is_dir(),
            fetch,
            model=f"torch.hub:{DINOV2_REPO}",
            layout=TORCH_HUB_REPO,
        ),
        WeightFile(
            f"DINOV2 {DINOV2_MODEL} weights",
            hub / "checkpoints",
            DINOV2_CHECKPOINT,
            (hub / "checkpoints" / DINOV2_CHECKPOINT).is_file(),
            fetch,
            model=f"torch.hub:{DINOV2_REPO}:{DINOV2_MODEL}",
            layout=TORCH_HUB_FILE,
        ),
    ]


def uses_pretrained_backbone(input_shape: Sequence[int] | None) -> bool:
    """DomainBed builds a pretrained featurizer for 224x224 inputs only."""
    return input_shape is not None and tuple(input_shape[1:3]) == (224, 224)


def needed_weights(
    hparams: Mapping[str, object],
    input_shape: Sequence[int] | None,
    caches: Caches | None = None,
) -> tuple[list[WeightFile], list[str]]:
    """The weight files a run with ``hparams`` on inputs of ``input_shape`` loads (looked up in
    ``caches``, by default this process's), and problems that would stop the model from being
    built at all."""
    if not uses_pretrained_backbone(input_shape):
        return [], []
    caches = caches or Caches.current()
    if hparams.get("alexnet"):
        return [_torchvision_alexnet(caches)], []
    if hparams.get("vit"):
        if not hparams.get("dinov2"):
            return [], ["DomainBed builds no ViT but DINOv2: with vit=true set dinov2=true"]
        return _dinov2(caches), []
    files = [_torchvision_checkpoint("resnet18" if hparams.get("resnet18") else "resnet50", caches)]
    if hparams.get("resnet50_augmix"):
        files.append(_timm_checkpoint(TIMM_MODEL, caches))
    return files, []


def missing_weights_message(files: Sequence[WeightFile]) -> str:
    """What is missing, where it was looked for, and the command that fetches each file."""
    lines = [f"{f.what}: not found at {f.path}; to get it: {f.fetch}" for f in files]
    return "; ".join(lines)


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
