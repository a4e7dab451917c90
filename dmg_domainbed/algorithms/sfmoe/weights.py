"""Where SF-MoE's pretrained DeiT-S weights are found, and whether a file holds them.

The network (:mod:`.network`) loads timm's distilled DeiT-Small
``deit_small_distilled_patch16_224.fb_in1k``, looked up offline first: the file of the
``sfmoe_weights`` hparam, else timm's own caches, the Hugging Face hub cache (``model.safetensors``
or ``pytorch_model.bin`` of a snapshot), then the torch hub checkpoint folder. This module says
where those are (:func:`weight_locations`, as :class:`~dmg_domainbed.weight_files.WeightFile` s
that :mod:`dmg_domainbed.synthetic` can also write random weights into), which one is found
(:func:`find_weights`), how to get them on a node without internet (:func:`how_to_get`), and
whether a found file fits the network (:func:`check_weights`: every tensor's shape against the
1000-class model, after timm's own checkpoint filter).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from dmg_domainbed.errors import UserError
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
HF_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm reads from the hub, in order


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
        hub_file, hub_present = f"snapshots/<revision>/{HF_FILES[0]}", False
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
    """The first weight file found (:func:`weight_locations`), None when none is; a missing
    ``weights_file`` is a :class:`UserError`."""
    locations = weight_locations(weights_file)
    if weights_file and not locations[0].present:
        raise UserError(
            f"SFMOE hparam 'sfmoe_weights' names '{locations[0].path}', which is not a file. "
            f"Give the path of the {MODEL} weights (a .pth or .safetensors file), or "
            '\'{"sfmoe_weights": ""}\' to use timm\'s caches'
        )
    return next((location.path for location in locations if location.present), None)


def check_weights(hparams: Mapping[str, Any]) -> WeightsCheck:
    """Find the weights as the network's ``create_backbone`` would, load them, and compare
    every tensor's shape with the distilled DeiT-S (the dense MLPs of the MoE blocks named
    separately)."""
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
        import timm

        reference = timm.create_model(MODEL, num_classes=_pretrained_cfg().num_classes)
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
