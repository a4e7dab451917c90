"""Importance-based weight masking: per-domain weight movement decides per-weight learning rates.

**Phase 1** (updates ``0 .. phase1_steps - 1``): ``D`` copies of the network, all from one
initialisation ``w_0``, each trained (Adam, DomainBed's ``lr``/``weight_decay``) on its own
source domain's minibatch only. At its end, over the weights of the tracked layers
(``importance_layers``; ``auto`` = the classifier):

* importance ``I = sum_d |w_d - w_0|`` (:func:`weight_importance`);
* ``I`` normalised to [0, 1] with one global min and max (:func:`normalise`);
* those at or above the ``1 - important_fraction`` quantile are important
  (:func:`top_fraction`).

The copies run as one network of channel groups where the featurizer allows it
(:mod:`.grouped`: the same arithmetic, one network's launches). The copies are then dropped.
**Phase 2** (the remaining updates): a network with its own,
fresh initialisation, built at construction, is trained on the pooled source minibatches
with per-weight learning rates (:func:`apply_rates`): important tracked weights and all
untracked weights at ``lr``; unimportant tracked weights at
``lr * unimportant_lr_factor * 2 ** (-(t - phase1_steps) / unimportant_lr_half_life)``,
and not at all from update ``freeze_step`` on (:func:`unimportant_rate`).

Step counting: DomainBed calls ``update`` once per step but never says how many steps the
run has, so the schedule is in global update counts. The count is the buffer
``update_count`` (saved in ``model.pkl``) and a host-side copy of it, restored with the
state dict, from which the phase is decided, so no step reads the GPU back for it. The
defaults keep the original's proportions (10 epochs per phase, the unimportant rate halved
every epoch, frozen after 7 of the 10 phase-2 epochs) within DomainBed's default run: phase 1
half the run, a half-life of a tenth of phase 2, the freeze 70% into phase 2
(:meth:`run_length_hparams` scales them to another run length; docs/algorithms.md gives the
values). With fewer steps than ``phase1_steps`` the run ends in phase 1.

``predict``: in phase 1, the mean of the copies' raw logits; in phase 2, the phase-2
network. ``update`` logs ``loss``, ``phase`` (1 or 2) and ``unimportant_rate`` (the current
multiplier). The initial tracked weights, the importance and the masks are buffers, so
``model.pkl`` holds them; :meth:`importance_maps` and :meth:`importance_masks` give them per
parameter, shaped like it, for pictures.

Deliberate differences from the original: it tracks only the weights (not the biases) of a
small MLP's hidden layers on frozen ViT features, and here every parameter of the tracked
layers on any DomainBed backbone; it scales the gradients of unimportant weights (which
Adam's normalisation undoes) and steps a second Adam over the same weights, so its rates do
not act as stated, while here they scale Adam's step itself; its rate decays once per epoch,
here continuously per step.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed import precision
from dmg_domainbed.algorithms import named_layers
from dmg_domainbed.algorithms.base import PluginAlgorithm, featurizer_classifier, pooled
from dmg_domainbed.algorithms.importance_mask import grouped
from dmg_domainbed.errors import UserError
from dmg_domainbed.hparams import HParam, HParamSpace, positive
from dmg_domainbed.hparams.trainable import MAX_LR

if TYPE_CHECKING:
    from dmg_domainbed.drawing import Drawn


SCHEDULE_HPARAMS = ("phase1_steps", "freeze_step", "unimportant_lr_half_life")
DEFAULT_RUN_STEPS = 5000  # the run length the schedule defaults are sized for (DomainBed's)


class ImportanceMask(PluginAlgorithm):
    """Importance-based weight masking, after a PACS project of the same name (no paper).

    Its two phases, the step counting and the differences from the original in full: this
    module's docstring. Its hparams: ``ImportanceMask.HPARAMS``, after the class.
    """

    LEARNED_PICTURES = (
        "per tracked parameter, every weight's importance and the important-weight mask"
    )

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        layers = named_layers.resolve(hparams["importance_layers"], lambda: ["classifier"])
        initial = featurizer_classifier(input_shape, num_classes, hparams)
        self.network = featurizer_classifier(input_shape, num_classes, hparams)
        self.tracked_names = list(_tracked_parameters(self.network, layers))
        if grouped.groupable(initial):  # the copies as one network: D times fewer launches
            self.domain_networks = grouped.GroupedCopies(initial, num_domains)
        else:
            self.domain_networks = nn.ModuleList(copy.deepcopy(initial) for _ in range(num_domains))
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        self.phase1_optimizer = torch.optim.Adam(
            self.domain_networks.parameters(),
            lr=hparams["lr"],
            weight_decay=hparams["weight_decay"],
        )
        initial_weights = self._flat(initial).detach().clone()
        self.register_buffer("update_count", torch.zeros((), dtype=torch.long))
        self._steps = 0  # = update_count, kept on the host
        self.register_buffer("initial_weights", initial_weights)
        self.register_buffer("importance", torch.zeros_like(initial_weights))
        self.register_buffer("important", torch.zeros_like(initial_weights, dtype=torch.bool))

    def _tracked(self, network: nn.Module) -> list[nn.Parameter]:
        params = dict(network.named_parameters())
        return [params[name] for name in self.tracked_names]

    def _flat(self, network: nn.Module) -> torch.Tensor:
        return torch.cat([p.reshape(-1) for p in self._tracked(network)])

    @property
    def in_phase1(self) -> bool:
        return len(self.domain_networks) > 0

    def update(self, minibatches, unlabeled=None):
        step = self._steps
        if self.in_phase1:
            result = self._phase1_update(minibatches)
            if step + 1 >= self.hparams["phase1_steps"]:
                # fp32 under bf16 autocast: scores rank movements finer than bf16 resolves
                with precision.full_precision():
                    self._end_phase1()
        else:
            result = self._phase2_update(minibatches, step)
        self.update_count += 1
        self._steps += 1
        return result

    def _copies_grouped(self) -> bool:
        return isinstance(self.domain_networks, grouped.GroupedCopies)

    def _phase1_update(self, minibatches) -> dict[str, float]:
        sizes = {len(x) for x, _ in minibatches}
        if self._copies_grouped() and len(sizes) == 1:
            logits = self.domain_networks([x for x, _ in minibatches])  # [N, D, K]
            labels = torch.stack([y for _, y in minibatches], dim=1)  # [N, D]
            losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(0)
        elif self._copies_grouped():
            losses = torch.stack(
                [
                    F.cross_entropy(self.domain_networks.one(d, x), y)
                    for d, (x, y) in enumerate(minibatches)
                ]
            )
        else:
            losses = torch.stack(
                [
                    F.cross_entropy(net(x), y)
                    for net, (x, y) in zip(self.domain_networks, minibatches, strict=True)
                ]
            )
        self.phase1_optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.phase1_optimizer.step()
        return {"loss": losses.mean().item(), "phase": 1.0}

    @torch.no_grad()
    def _end_phase1(self) -> None:
        """Importance and masks from the copies; then the copies and their optimiser go."""
        if self._copies_grouped():
            finals = self.domain_networks.copy_parameters(self.tracked_names)
        else:
            finals = torch.stack([self._flat(net) for net in self.domain_networks])
        self.importance.copy_(normalise(weight_importance(self.initial_weights, finals)))
        self.important.copy_(top_fraction(self.importance, self.hparams["important_fraction"]))
        self._drop_copies()

    def _drop_copies(self) -> None:
        self.domain_networks = nn.ModuleList()
        self.phase1_optimizer = None

    def _phase2_update(self, minibatches, step: int) -> dict[str, float]:
        hp = self.hparams
        rate = unimportant_rate(
            step,
            hp["phase1_steps"],
            hp["freeze_step"],
            hp["unimportant_lr_factor"],
            hp["unimportant_lr_half_life"],
        )
        x, y = pooled(minibatches)
        loss = F.cross_entropy(self.network(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        before = self._flat(self.network).detach().clone()
        self.optimizer.step()
        with torch.no_grad():
            rates = torch.where(self.important, 1.0, rate).to(before.dtype)
            weights = apply_rates(before, self._flat(self.network), rates)
            offset = 0
            for param in self._tracked(self.network):
                param.copy_(weights[offset : offset + param.numel()].view_as(param))
                offset += param.numel()
        return {"loss": loss.item(), "phase": 2.0, "unimportant_rate": rate}

    def predict(self, x):
        if self._copies_grouped():
            return self.domain_networks([x] * len(self.domain_networks)).mean(1)
        if self.in_phase1:
            return torch.stack([net(x) for net in self.domain_networks]).mean(0)
        return self.network(x)

    @classmethod
    def check_hparams(cls, hparams) -> None:
        """Its ranges, then the phases' order: weights are frozen in phase 2."""
        super().check_hparams(hparams)
        if hparams["freeze_step"] < hparams["phase1_steps"]:
            raise UserError(
                f"ImportanceMask hparam 'freeze_step' ({hparams['freeze_step']}) must be >= "
                f"'phase1_steps' ({hparams['phase1_steps']}): weights are frozen in phase 2; "
                """fix it with e.g. --hparams '{"phase1_steps": 2500, "freeze_step": 4250}'"""
            )

    @classmethod
    def run_length_hparams(cls, steps: int) -> dict[str, int]:
        """The phase schedule's defaults, sized for DomainBed's 5,000 steps, scaled to ``steps``."""
        defaults = cls.HPARAMS.defaults()
        scale = steps / DEFAULT_RUN_STEPS
        return {name: max(1, round(defaults[name] * scale)) for name in SCHEDULE_HPARAMS}

    def draw_learned(self, run, output_dir, stem) -> Drawn:
        """``<stem>.png`` (importance and important mask per tracked parameter) and
        ``<stem>_importance.csv``; a run that ended in phase 1 has no importance yet."""
        from dmg_domainbed.algorithms.importance_mask import pictures

        return pictures.draw_importance(self, run, output_dir, stem)

    def _per_parameter(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        maps, offset = {}, 0
        for name, param in zip(self.tracked_names, self._tracked(self.network), strict=True):
            maps[name] = flat[offset : offset + param.numel()].view_as(param)
            offset += param.numel()
        return maps

    def importance_maps(self) -> dict[str, torch.Tensor]:
        """Normalised importance in [0, 1] per tracked parameter (all zero during phase 1)."""
        return self._per_parameter(self.importance)

    def importance_masks(self) -> dict[str, torch.Tensor]:
        """``True`` where a tracked weight is important (all ``False`` during phase 1)."""
        return self._per_parameter(self.important)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A checkpoint taken after phase 1 has no copies: drop ours before the children load.
        copies = f"{prefix}domain_networks."
        if self.in_phase1 and not any(key.startswith(copies) for key in state_dict):
            self._drop_copies()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        count = state_dict.get(f"{prefix}update_count")
        if count is not None:
            self._steps = int(count)


# ImportanceMask's hparams (merged into DomainBed's registry; docs/algorithms.md shows them).
ImportanceMask.HPARAMS = HParamSpace(
    HParam(
        "phase1_steps",
        2500,
        lambda r: 2500,
        minimum=1,
        help="updates spent training the per-domain copies (phase 1)",
    ),
    HParam(
        "freeze_step",
        4250,
        lambda r: 4250,
        minimum=0,
        help="global update from which unimportant weights are frozen",
    ),
    HParam(
        "important_fraction",
        0.6,
        lambda r: r.uniform(0.4, 0.8),
        minimum=0.0,
        maximum=1.0,
        help="fraction of tracked weights that are important",
    ),
    HParam(
        "unimportant_lr_factor",
        0.1,
        lambda r: 10 ** r.uniform(-2, -0.5),
        minimum=0.0,
        maximum=MAX_LR,
        help="learning-rate multiplier of unimportant weights when phase 2 starts",
    ),
    HParam(
        "unimportant_lr_half_life",
        250.0,
        lambda r: 250.0,
        maximum=1e9,  # steps: longer than any run (the multiplier then stays put)
        validate=positive,
        help="steps over which the unimportant multiplier halves",
    ),
    HParam(
        "importance_layers",
        "auto",
        lambda r: "auto",
        types=(str, list),
        validate=named_layers.check_value,
        help="'auto' (the classifier) or names of the layers whose weights are tracked",
    ),
)


def weight_importance(initial: torch.Tensor, finals: torch.Tensor) -> torch.Tensor:
    """``I = sum_d |w_d - w_0|``: how far each weight moved, summed over the domain copies.

    ``initial [N]`` is the shared initialisation ``w_0``, ``finals [D, N]`` the copies' weights.
    """
    return (finals - initial).abs().sum(0)


def normalise(importance: torch.Tensor) -> torch.Tensor:
    """Min-max normalisation to [0, 1] over all tracked weights at once (one global range).

    A constant importance carries no ranking and maps to 0.5 everywhere, as in the original.
    """
    low, high = importance.min(), importance.max()
    if high - low <= 0:
        return torch.full_like(importance, 0.5)
    return (importance - low) / (high - low)


#: Largest input ``torch.quantile`` accepts (it refuses tensors of more elements).
QUANTILE_MAX_ELEMENTS = 2**24


def top_fraction(scores: torch.Tensor, fraction: float) -> torch.Tensor:
    """Boolean mask of the scores at or above their ``1 - fraction`` quantile: the original's
    ``score >= torch.quantile(score, 1 - fraction)``, ties at the threshold included.

    ``torch.quantile`` itself decides wherever it accepts the scores, so the kept weights are the
    original's on every torch version; above :data:`QUANTILE_MAX_ELEMENTS` elements
    :func:`linear_quantile` computes the same threshold.
    """
    flat = scores.reshape(-1)
    if flat.numel() == 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if flat.numel() <= QUANTILE_MAX_ELEMENTS:
        threshold = torch.quantile(flat, 1 - fraction)
    else:
        threshold = linear_quantile(flat, 1 - fraction)
    return scores >= threshold


def linear_quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` (linear interpolation) for a 1-d tensor of any size.

    With the sorted values ``v_(0) <= ... <= v_(N-1)`` and the rank ``r = q (N - 1)``, the
    quantile is ``lerp(v_(floor r), v_(ceil r), r - floor r)``. The arithmetic is
    ``torch.quantile``'s: ``q`` rounded to the values' dtype, ``r`` in double precision, the
    weight ``r - floor r`` in the values' dtype; the two order statistics come from
    ``kthvalue``, so no sorted copy is made. Every operand lives on the values' device.
    """
    size = values.numel()
    rank = torch.tensor(q, dtype=values.dtype).item() * (size - 1)
    below, above = math.floor(rank), math.ceil(rank)
    low = values.kthvalue(below + 1).values
    high = values.kthvalue(above + 1).values
    weight = torch.tensor(rank - below, dtype=values.dtype, device=values.device)
    return torch.lerp(low, high, weight)


def unimportant_rate(
    step: int, phase1_steps: int, freeze_step: int, factor: float, half_life: float
) -> float:
    """Learning-rate multiplier of the unimportant weights at global update ``step`` (phase 2).

    ``factor * 2 ** (-(step - phase1_steps) / half_life)`` until ``freeze_step``, then 0.
    """
    if step >= freeze_step:
        return 0.0
    return factor * 0.5 ** ((step - phase1_steps) / half_life)


def apply_rates(before: torch.Tensor, after: torch.Tensor, rates: torch.Tensor) -> torch.Tensor:
    """Weights after an optimiser step with per-weight learning rates ``lr * rates``.

    Adam's step (L2 weight decay included) is proportional to its learning rate, so a weight with
    rate ``r`` moves ``r`` times Adam's step: ``before + r (after - before)``. ``torch.lerp`` gives
    ``before`` exactly at ``r = 0`` (frozen) and ``after`` exactly at ``r = 1``.
    """
    return torch.lerp(before, after, rates)


def _tracked_parameters(network: nn.Module, layers: list[str]) -> OrderedDict[str, nn.Parameter]:
    """Every parameter of the named layers (their sub-layers included), in network order."""
    modules = named_layers.modules_named(network, layers, "track")
    empty = [
        name for name, module in zip(layers, modules) if next(module.parameters(), None) is None
    ]
    if empty:
        raise UserError(
            f"ImportanceMask hparam 'importance_layers': layers {empty!r} have no weights to "
            "track; name layers that have weights, e.g. 'classifier'"
        )
    prefixes = tuple(f"{name}." for name in layers)
    return OrderedDict(
        (name, param)
        for name, param in network.named_parameters()
        if name.startswith(prefixes) and param.requires_grad
    )
