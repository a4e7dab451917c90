"""SF-MoE's network: timm's distilled DeiT-Small with sparse MoE layers in place of some MLPs.

The backbone is ``deit_small_distilled_patch16_224`` (patch 16, width 384, depth 12, 6 heads,
MLP hidden 1536; class and distillation tokens, 198 tokens a 224x224 image), built by timm with
drop rate, attention drop and drop-path 0. Its output is the mean of the class and distillation
heads' logits, what the authors' ``predict`` returns; there is no distillation loss.

The MLPs of the chosen blocks (the authors': 0-based 5 and 11) become
:class:`~.moe.SparseMoE` layers. Expert initialisation ``random``: fresh experts and
gate, which is what the authors' runs had (timm's pretrained loader dropped the dense MLP
weights of those blocks when it went non-strict for a class count other than 1000); ``copy``:
every expert is the pretrained dense MLP, biases included (GMoE's upcycling).

Pretrained weights are looked up offline first (:mod:`.weights`: the file of
the ``sfmoe_weights`` hparam, else timm's own caches). With none of them timm downloads the
weights, as DomainBed does with its own backbones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed.algorithms.sfmoe.moe import SparseMoE
from dmg_domainbed.algorithms.sfmoe.weights import MODEL, find_weights, how_to_get, weight_locations
from dmg_domainbed.errors import UserError

DEPTH = 12  # DeiT-S blocks
INPUT_SHAPE = (3, 224, 224)
CHANNELS = (3, 1)  # RGB, or grayscale repeated to RGB
GRID = 14  # patches per side
PREFIX_TOKENS = 2  # class and distillation tokens


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
