"""SF-MoE: a distilled DeiT-Small whose blocks 5 and 11 are sparse top-2 mixtures of experts.

Network (:mod:`~.network`): timm's distilled DeiT-Small
(``deit_small_distilled_patch16_224``, ImageNet weights) whose blocks ``sfmoe_blocks``
(default 5 and 11) have a sparse top-2-of-4 mixture of experts in place of their MLP
(:class:`~.moe.SparseMoE`); the other blocks are the paper's dense "fusion"
blocks. ``predict`` is the mean of the class and distillation heads' logits.

Loss: cross-entropy on the pooled source minibatches plus every MoE layer's balance loss
(``sfmoe_aux_weight`` 0.01 each); one Adam (coupled weight decay) over all parameters.

Inputs: the network takes 224x224 RGB images, the size of DomainBed's image datasets (PACS,
VLCS, OfficeHome, TerraIncognita, DomainNet, ...), the paper's and the only ones its numbers
are for. Images of another size, e.g. DomainBed's 28x28 ``Debug28`` and MNIST datasets, are
resized bilinearly to 224x224 before the first layer (each input pixel then spans several
16-pixel patches; nothing is renormalised), and a single grayscale channel is repeated over
the three (:func:`~.network.patch_grid_images`): such a run trains and predicts like
any other, at the cost of a 224x224 image per example. Other inputs (2-channel
``ColoredMNIST``, flat features) are refused before anything is built.

Evaluation keeps the random second-expert policy, drawing its uniforms from a generator
seeded at every eval-mode forward: ``predict`` gives the same logits for the same batch every
time. With ``sfmoe_blocks = []`` the same class is dense DeiT-S trained by ERM.

``update`` logs ``loss``, ``ce``, ``balance`` (the summed balance losses) and per MoE block
``b``: ``dropped/block<b>`` (share of top-1 assignments over capacity) and
``second/block<b>`` (share of tokens whose second expert was used).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from dmg_domainbed.algorithms.base import PluginAlgorithm, pooled
from dmg_domainbed.algorithms.sfmoe import network as deit_network
from dmg_domainbed.algorithms.sfmoe import weights as deit_weights
from dmg_domainbed.algorithms.sfmoe.moe import SECOND_POLICIES, SparseMoE
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam, HParamSpace, positive
from dmg_domainbed.hparams.trainable import MAX_LOSS_WEIGHT, MAX_LR, MAX_WEIGHT_DECAY, MIN_LR

if TYPE_CHECKING:
    from dmg_domainbed.drawing import Drawn, FinishedRun
    from dmg_domainbed.weight_files import WeightsCheck


class SFMOE(PluginAlgorithm):
    """Sparse Fusion Mixture-of-Experts (Li et al., arXiv 2206.04046v1), as the authors ran it.

    The network, loss, inputs and evaluation in full: this module's docstring. Its hparams:
    ``SFMOE.HPARAMS``, after the class.
    """

    LEARNED_PICTURES = (
        "per image, each MoE block's top-1 expert of every patch (gate value as opacity, "
        "assignments over capacity marked) and the last block's class-token attention per "
        "head; expert load per source domain and for the test domain"
    )

    SAMPLE_IMAGES = 64  # held-out images per environment whose routing the pictures count

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        self.check_input_shape(input_shape)
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.blocks = list(hparams["sfmoe_blocks"])
        self.network = deit_network.build_network(num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )

    @classmethod
    def check_input_shape(cls, input_shape: Sequence[int]) -> None:
        """:class:`UserError` unless the inputs are images the network takes (see
        :func:`~.network.patch_grid_images`), naming the datasets whose images are."""
        if deit_network.takes(input_shape):
            return
        fitting = _datasets_taking(deit_network.takes)
        raise UserError(
            f"{cls.__name__} runs a 224x224 vision transformer on images with 3 (RGB) or 1 "
            f"(grayscale) channels, any height and width; the dataset's inputs are "
            f"{tuple(input_shape)}. Datasets that fit: {', '.join(fitting)}"
        )

    @classmethod
    def check_weights(cls, hparams: Mapping[str, Any]) -> WeightsCheck:
        """Where the pretrained weights are, whether they load and fit (``dmg-domainbed
        doctor``)."""
        return deit_weights.check_weights(hparams)

    @property
    def moe_layers(self) -> list[SparseMoE]:
        return [self.network.blocks[b].mlp for b in self.blocks]

    def update(self, minibatches, unlabeled=None):
        x, y = pooled(minibatches)
        ce = F.cross_entropy(self.network(deit_network.patch_grid_images(x)), y)
        layers = self.moe_layers
        balance = sum((layer.balance for layer in layers), torch.zeros((), device=x.device))
        loss = ce + balance
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        kept = [layer.routing.kept.float() for layer in layers]
        values = [loss.detach(), ce.detach(), balance.detach()]
        values += [1 - k[..., 0].mean() for k in kept]
        values += [k[..., 1:].sum() / k[..., 0].numel() for k in kept]
        names = ["loss", "ce", "balance"]
        names += [f"dropped/block{b}" for b in self.blocks]
        names += [f"second/block{b}" for b in self.blocks]
        # One read from the device for every logged value.
        return dict(zip(names, torch.stack(values).tolist()))

    def predict(self, x):
        return self.network(deit_network.patch_grid_images(x))

    def draw_learned(self, run: FinishedRun, output_dir: Path, stem: str) -> Drawn:
        from dmg_domainbed.algorithms.sfmoe import pictures

        return pictures.draw(self, run, output_dir, stem)


# The authors' per-dataset defaults (lr, weight decay); their random search draws
# lr = 10^U(-4.5, -2.5) and keeps weight decay 0.
PAPER_DATASETS = {
    "PACS": (3e-5, 0.0),
    "VLCS": (1e-5, 1e-6),
    "OfficeHome": (3e-5, 1e-6),
    "TerraIncognita": (3e-5, 1e-4),
    "DomainNet": (3e-5, 0.0),
}
DEFAULT_LR = 3e-5


def _fixed(value: Any):
    """A random-search sampler that keeps the default: the MoE knobs are not searched."""
    return lambda r: value


def _blocks(value: Sequence[int]) -> None:
    depth = deit_network.DEPTH
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        raise ValueError(f"give block indices (integers 0..{depth - 1}), e.g. [5, 11]")
    if any(not 0 <= b < depth for b in value) or len(set(value)) != len(value):
        raise ValueError(f"block indices must be distinct, in 0..{depth - 1}; [] is dense DeiT-S")


# SFMOE's hparams (merged into DomainBed's registry; docs/algorithms.md shows them).
SFMOE.HPARAMS = HParamSpace(
    HParam(
        "lr",
        DEFAULT_LR,
        lambda r: 10 ** r.uniform(-4.5, -2.5),
        minimum=MIN_LR,
        maximum=MAX_LR,
        per_dataset={name: lr for name, (lr, _) in PAPER_DATASETS.items()},
        where_defined=True,  # DomainBed's own lr, with the paper's values
        help="Adam learning rate",
    ),
    HParam(
        "weight_decay",
        0.0,
        _fixed(0.0),
        minimum=0.0,
        maximum=MAX_WEIGHT_DECAY,
        per_dataset={name: wd for name, (_, wd) in PAPER_DATASETS.items()},
        datasets=tuple(PAPER_DATASETS),
        where_defined=True,  # DomainBed's own weight_decay, with the paper's values
        help="Adam (coupled) weight decay; DomainBed's on other datasets",
    ),
    HParam(
        "sfmoe_blocks",
        [5, 11],
        _fixed([5, 11]),
        types=(list, tuple),
        validate=_blocks,
        help="0-based DeiT blocks whose MLP is a sparse MoE; [] is dense DeiT-S",
    ),
    HParam("sfmoe_experts", 4, _fixed(4), minimum=2, help="experts per MoE layer"),
    HParam("sfmoe_top_k", 2, _fixed(2), choices=(1, 2), help="experts per token"),
    HParam(
        "sfmoe_capacity_train",
        1.25,
        _fixed(1.25),
        maximum=100.0,  # from E experts on, every token fits: a larger one changes nothing
        validate=positive,
        help="capacity factor in training: C = max(4, min(N, int(N * cf / E)))",
    ),
    HParam(
        "sfmoe_capacity_eval",
        2.0,
        _fixed(2.0),
        maximum=100.0,  # from E experts on, every token fits: a larger one changes nothing
        validate=positive,
        help="capacity factor in evaluation",
    ),
    HParam(
        "sfmoe_second_policy",
        "random",
        _fixed("random"),
        choices=SECOND_POLICIES,
        help="when the second expert is used: random (u < g2 / threshold), threshold "
        "(g2 > threshold), all, none",
    ),
    HParam(
        "sfmoe_second_threshold",
        0.2,
        _fixed(0.2),
        maximum=1.0,  # a gate value never exceeds 1
        validate=positive,
        help="threshold of the second-expert policy",
    ),
    HParam(
        "sfmoe_aux_weight",
        0.01,
        _fixed(0.01),
        minimum=0.0,
        maximum=MAX_LOSS_WEIGHT,
        help="weight of each MoE layer's balance loss",
    ),
    HParam(
        "sfmoe_expert_init",
        "random",
        _fixed("random"),
        choices=("random", "copy"),
        help="random (the authors' runs) or copy (every expert = the pretrained dense MLP)",
    ),
    HParam(
        "sfmoe_gate_std",
        1.0,
        _fixed(1.0),
        minimum=0.0,
        maximum=10.0,  # wider, the gate's softmax starts saturated on one expert
        help="standard deviation of the gate's N(0, std) initialisation",
    ),
    HParam(
        "sfmoe_pretrained",
        True,
        _fixed(True),
        help="start from ImageNet weights; false builds random weights offline",
    ),
    HParam(
        "sfmoe_weights",
        "",
        _fixed(""),
        help="local weight file; empty: timm's caches (Hugging Face hub, then torch hub)",
    ),
)


def _datasets_taking(takes) -> list[str]:
    from domainbed import datasets

    from dmg_domainbed.datasets import input_shape

    shapes = {name: input_shape(name) for name in datasets.DATASETS}
    return [name for name, shape in shapes.items() if shape is not None and takes(shape)]
