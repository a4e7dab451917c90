"""SF-MoE's network: timm's distilled DeiT-Small with sparse MoE layers in place of some MLPs.

The backbone is ``deit_small_distilled_patch16_224`` (patch 16, width 384, depth 12, 6 heads,
MLP hidden 1536; class and distillation tokens, 198 tokens a 224x224 image), built by timm with
drop rate, attention drop and drop-path 0. Its output is the mean of the class and distillation
heads' logits, what the authors' ``predict`` returns; there is no distillation loss.

The MLPs of the chosen blocks (the authors': 0-based 5 and 11) become
:class:`~dmg_domainbed.moe.SparseMoE` layers. Expert initialisation ``random``: fresh experts and
gate, which is what the authors' runs had (timm's pretrained loader dropped the dense MLP
weights of those blocks when it went non-strict for a class count other than 1000); ``copy``:
every expert is the pretrained dense MLP, biases included (GMoE's upcycling).

Pretrained weights are looked up offline first: the file of the ``sfmoe_weights`` hparam, else
timm's own caches (the Hugging Face hub cache, then the torch hub checkpoint folder). With none
of them timm downloads the weights, as DomainBed does with its own backbones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.errors import UserError
from dmg_domainbed.moe import SparseMoE
from dmg_domainbed.weight_files import (
    HF_SNAPSHOT,
    TORCH_HUB_FILE,
    Caches,
    WeightFile,
    WeightsCheck,
)

MODEL = "deit_small_distilled_patch16_224"
ARCHITECTURE = f"timm:{MODEL}"  # what a weight file holds (WeightFile.model)
PRETRAINED_TAG = "fb_in1k"
DEPTH = 12  # DeiT-S blocks
INPUT_SHAPE = (3, 224, 224)
CHANNELS = (3, 1)  # RGB, or grayscale repeated to RGB
GRID = 14  # patches per side
PREFIX_TOKENS = 2  # class and distillation tokens
HF_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm reads from the hub, in order


def takes(input_shape) -> bool:
    """Whether :func:`patch_grid_images` takes inputs of ``input_shape`` (``C, H, W``)."""
    return len(input_shape) == 3 and input_shape[0] in CHANNELS


def patch_grid_images(x: torch.Tensor) -> torch.Tensor:
    """Images ``[B, C, H, W]`` as the network takes them, ``[B, 3, 224, 224]``: the 14x14 grid
    of 16-pixel patches the ImageNet weights were trained on. A single channel is repeated to
    three; another size is resized bilinearly. 224x224 RGB images pass unchanged."""
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    if tuple(x.shape[-2:]) != INPUT_SHAPE[1:]:
        x = F.interpolate(x, size=INPUT_SHAPE[1:], mode="bilinear", align_corners=False)
    return x


def _pretrained_cfg():
    from timm.models import get_pretrained_cfg

    return get_pretrained_cfg(f"{MODEL}.{PRETRAINED_TAG}")


def _hf_cached_file(repo_id: str, hf_hub: Path) -> Path | None:
    import huggingface_hub

    for filename in HF_FILES:
        cached = huggingface_hub.try_to_load_from_cache(repo_id, filename, cache_dir=hf_hub)
        if isinstance(cached, str):
            return Path(cached)
    return None


def how_to_get(caches: Caches | None = None) -> str:
    """How to put the weights where the loader looks, on a node without internet."""
    caches = caches or Caches.current()
    cfg = _pretrained_cfg()
    return (
        f'on a machine with internet run python -c "import timm; '
        f"timm.create_model('{MODEL}.{PRETRAINED_TAG}', pretrained=True)\" and copy the cache "
        f"folder models--{cfg.hf_hub_id.replace('/', '--')} into {caches.hf_hub} (set "
        f"HF_HUB_OFFLINE=1 on nodes without internet); or download {cfg.url} into "
        f"{caches.torch_hub / 'checkpoints'}; "
        'or pass --hparams \'{"sfmoe_weights": "/path/to/file"}\' (a .pth or .safetensors file)'
    )


def weight_locations(weights_file: str, caches: Caches | None = None) -> list[WeightFile]:
    """Where the pretrained weights are looked for, in order: ``weights_file`` if given, else
    the Hugging Face hub cache, then the torch hub checkpoint folder (of ``caches``, by default
    this process's)."""
    caches = caches or Caches.current()
    fetch = how_to_get(caches)
    if weights_file:
        path = Path(weights_file).expanduser()
        what = "sfmoe_weights file"
        return [WeightFile(what, path.parent, path.name, path.is_file(), fetch, ARCHITECTURE)]
    cfg = _pretrained_cfg()
    hub_folder = caches.hf_hub / f"models--{cfg.hf_hub_id.replace('/', '--')}"
    cached = _hf_cached_file(cfg.hf_hub_id, caches.hf_hub)
    if cached is not None:
        hub_file, hub_present = str(cached.relative_to(hub_folder)), True
    else:
        hub_file, hub_present = f"snapshots/<revision>/{' or '.join(HF_FILES)}", False
    checkpoints = caches.torch_hub / "checkpoints"
    checkpoint = os.path.basename(urlparse(cfg.url).path)
    return [
        WeightFile(
            f"timm {MODEL}.{PRETRAINED_TAG} (Hugging Face hub {cfg.hf_hub_id})",
            hub_folder,
            hub_file,
            hub_present,
            fetch,
            ARCHITECTURE,
            HF_SNAPSHOT,
        ),
        WeightFile(
            f"DeiT's {MODEL} checkpoint (torch hub)",
            checkpoints,
            checkpoint,
            (checkpoints / checkpoint).is_file(),
            fetch,
            ARCHITECTURE,
            TORCH_HUB_FILE,
        ),
    ]


def find_weights(weights_file: str) -> Path | None:
    """The first weight file found (:func:`weight_locations`); a missing ``weights_file`` is a
    :class:`UserError`."""
    locations = weight_locations(weights_file)
    if weights_file and not locations[0].present:
        raise UserError(
            f"SFMOE hparam 'sfmoe_weights' names '{locations[0].path}', which is not a file. "
            f"Give the path of the {MODEL} weights (a .pth or .safetensors file), or "
            '\'{"sfmoe_weights": ""}\' to use timm\'s caches'
        )
    return next((location.path for location in locations if location.present), None)


def _create(num_classes: int, **kwargs: Any) -> nn.Module:
    import timm

    return timm.create_model(
        MODEL,
        num_classes=num_classes,
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.0,
        **kwargs,
    )


def create_backbone(num_classes: int, pretrained: bool, weights_file: str = "") -> nn.Module:
    """The dense distilled DeiT-S with a ``num_classes`` head, ImageNet weights if
    ``pretrained`` (found offline where possible; see the module docstring)."""
    if not pretrained:
        return _create(num_classes, pretrained=False)
    found = find_weights(weights_file)
    if found is None:
        try:
            return _create(num_classes, pretrained=True)
        except OSError as error:
            looked = "; ".join(f"{w.folder / w.filename}" for w in weight_locations(weights_file))
            raise UserError(
                f"the {MODEL} weights are not on this machine (looked in: {looked}) and could "
                f"not be downloaded ({type(error).__name__}: {error}). To get them: {how_to_get()}"
            ) from None
    try:
        return _create(num_classes, pretrained=True, pretrained_cfg_overlay={"file": str(found)})
    except (RuntimeError, KeyError, OSError, ValueError) as error:
        raise UserError(
            f"'{found}' does not hold {MODEL} weights ({type(error).__name__}: "
            f"{str(error)[:300]}). `dmg-domainbed doctor --algorithm SFMOE` checks the file; "
            f"to get the right one: {how_to_get()}"
        ) from None


def insert_moe(
    model: nn.Module,
    blocks: Sequence[int],
    expert_init: str = "random",
    **moe: Any,
) -> list[SparseMoE]:
    """Replace the MLP of each block in ``blocks`` by a :class:`SparseMoE` built with ``moe``;
    ``expert_init`` ``copy`` makes every expert a copy of that dense MLP (biases included)."""
    layers = []
    for index in blocks:
        block = model.blocks[index]
        dense = block.mlp
        layer = SparseMoE(
            dense.fc1.in_features,
            dense.fc1.out_features,
            bias=expert_init == "copy",
            eval_seed=index,
            **moe,
        )
        if expert_init == "copy":
            layer.experts.copy_dense(dense.fc1, dense.fc2)
        block.mlp = layer.to(dense.fc1.weight.device)
        layers.append(layer)
    return layers


def build_network(num_classes: int, hparams: Mapping[str, Any]) -> nn.Module:
    """SF-MoE's network from the algorithm's hparams (see :class:`~.sfmoe.SFMOE`)."""
    model = create_backbone(num_classes, hparams["sfmoe_pretrained"], hparams["sfmoe_weights"])
    insert_moe(
        model,
        hparams["sfmoe_blocks"],
        hparams["sfmoe_expert_init"],
        experts=hparams["sfmoe_experts"],
        top_k=hparams["sfmoe_top_k"],
        capacity_factor_train=hparams["sfmoe_capacity_train"],
        capacity_factor_eval=hparams["sfmoe_capacity_eval"],
        second_policy=hparams["sfmoe_second_policy"],
        second_threshold=hparams["sfmoe_second_threshold"],
        balance_weight=hparams["sfmoe_aux_weight"],
        gate_std=hparams["sfmoe_gate_std"],
    )
    return model


def check_weights(hparams: Mapping[str, Any]) -> WeightsCheck:
    """Find the weights as :func:`create_backbone` would, load them, and compare every tensor's
    shape with the distilled DeiT-S (the dense MLPs of the MoE blocks named separately)."""
    if not hparams["sfmoe_pretrained"]:
        return WeightsCheck(
            (), True, ("none: sfmoe_pretrained is false, the network starts random",)
        )
    locations = tuple(weight_locations(hparams["sfmoe_weights"]))
    fix = f"to get the right file: {how_to_get()}"
    found = next((w.path for w in locations if w.present), None)
    if found is None:
        return WeightsCheck(
            locations,
            False,
            (
                f"{MODEL} weights not found; timm tries to download them when the model is "
                "built, and a job without internet fails there",
                f"to get them: {how_to_get()}",
            ),
        )
    try:
        problems, mlps = _compare_shapes(found, hparams["sfmoe_blocks"])
    except Exception as error:  # whatever stops the file from loading stops the run too
        return WeightsCheck(
            locations, False, (f"{found} does not load: {type(error).__name__}: {error}", fix)
        )
    if problems:
        return WeightsCheck(
            locations, False, (f"{found} loads but does not fit {MODEL}:", *problems, fix)
        )
    details = [f"{found} loads and has every tensor of {MODEL} with its shape"]
    if mlps:
        use = (
            "copied into every expert (sfmoe_expert_init 'copy')"
            if hparams["sfmoe_expert_init"] == "copy"
            else "not used: with sfmoe_expert_init 'random' those experts start random, as in "
            "the authors' runs"
        )
        details.append(f"dense MLPs of the MoE blocks: {', '.join(mlps)}; {use}")
    return WeightsCheck(locations, True, tuple(details))


def _compare_shapes(path: Path, moe_blocks: Sequence[int]) -> tuple[list[str], list[str]]:
    """Problems of the file at ``path`` against the 1000-class distilled DeiT-S (timm's own
    checkpoint filter applied), and the dense MLP tensors of ``moe_blocks`` found with their
    shapes."""
    from timm.models import load_state_dict
    from timm.models.vision_transformer import checkpoint_filter_fn

    with torch.random.fork_rng(devices=[]):
        reference = _create(_pretrained_cfg().num_classes, pretrained=False)
    expected = reference.state_dict()
    loaded = checkpoint_filter_fn(load_state_dict(str(path)), reference)
    problems = []
    missing = sorted(set(expected) - set(loaded))
    if missing:
        problems.append(f"missing {len(missing)} tensors, e.g. {', '.join(missing[:4])}")
    wrong = [
        f"{name}: {tuple(loaded[name].shape)} instead of {tuple(expected[name].shape)}"
        for name in expected
        if name in loaded and loaded[name].shape != expected[name].shape
    ]
    problems += wrong[:6]
    used = []
    for index in moe_blocks:
        for layer in ("fc1", "fc2"):
            name = f"blocks.{index}.mlp.{layer}.weight"
            if name in loaded and loaded[name].shape == expected[name].shape:
                used.append(f"{name} {tuple(loaded[name].shape)}")
    return problems, used
