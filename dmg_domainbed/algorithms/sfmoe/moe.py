"""Sparse top-2 mixture of experts: the sparse block of SF-MoE, in plain torch.

SF-MoE ("Sparse Fusion Mixture-of-Experts are Domain Generalizable Learners", Li et al., arXiv
2206.04046v1) replaces the MLP of some vision-transformer blocks by this layer; its released code
uses GShard's top-2 gating (Lepikhin et al., 2020), as written out below. For the tokens
``x [B, N, D]`` of ``B`` images, each image's ``N`` tokens forming one routing group:

* gate probabilities ``p = softmax(x W_g)``, ``W_g [D, E]``, no bias, no noise;
* top-2 routing: ``e1 = argmax_e p``, ``e2 = argmax_e`` of ``p`` with ``e1`` masked out; the gate
  values ``g1, g2 = p[e1], p[e2]`` are renormalised, ``g_i <- g_i / (g1 + g2 + 1e-9)``;
* the second expert is used or not by a policy, the same in training and evaluation: ``random``
  (the authors'): iff ``u < g2 / threshold``, ``u ~ U(0, 1)``, threshold 0.2; ``threshold``: iff
  ``g2 > threshold``; ``all``; ``none``;
* capacity per image and expert ``C = max(4, min(N, int(N * cf / E)))`` (:func:`expert_capacity`)
  with ``cf`` 1.25 in training and 2.0 in evaluation. Each expert's ``C`` slots are filled in
  token order, every top-1 assignment before any top-2 one; an assignment that finds its expert
  full is dropped: that expert contributes nothing to the token (the block's residual connection
  still carries it);
* output ``y = g1 E_e1(x) + g2 E_e2(x)`` over the kept assignments, not renormalised after drops.
  Every expert is ``E_e(x) = GELU(x W1_e) W2_e`` with ``W1_e [D, H]``, ``W2_e [H, D]``, no biases
  (biases only when the experts are copies of a dense MLP that has them);
* balance loss (GShard's auxiliary loss, counted before capacity):
  ``w E^2 mean_{b,e} [mean_n p[b, n, e]] [mean_n onehot(e1)[b, n, e]]``, ``w = 0.01``: exactly
  ``w`` when routing is balanced, ``w E`` when every token goes to one expert.

``top_k = 1`` routes each token to ``e1`` only, weighted by ``p[e1]`` (Switch routing): with one
expert the renormalised gate would be 1 and the gate would never learn.

The forward pass has no Python loop over tokens, images or experts and no shape that depends on
the data: dispatch and combine are index gathers into a fixed ``[E, B, C]`` slot buffer, and the
experts run as two batched matrix products. In evaluation the uniforms of the ``random`` policy
come from a generator seeded with a constant at every forward, so the same input gives the same
output every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed import precision

MIN_CAPACITY = 4
GATE_EPS = 1e-9
SECOND_POLICIES = ("random", "threshold", "all", "none")


def expert_capacity(tokens: int, experts: int, capacity_factor: float) -> int:
    """Slots per expert in one group of ``tokens`` tokens: ``max(4, min(N, int(N * cf / E)))``.

    198 tokens and 4 experts give 61 slots at ``cf = 1.25`` and 99 at ``cf = 2``.
    """
    return max(MIN_CAPACITY, min(tokens, int(tokens * capacity_factor / experts)))


def balance_loss(probabilities: torch.Tensor, top1: torch.Tensor) -> torch.Tensor:
    """``E^2 mean_{b,e} [mean_n p[b, n, e]] [mean_n onehot(top1)[b, n, e]]`` (unweighted).

    ``probabilities [B, N, E]``; ``top1 [B, N]`` the first expert of every token, before capacity.
    1 when routing is balanced, ``E`` when it collapses onto one expert.
    """
    experts = probabilities.shape[-1]
    share = _one_hot(top1, experts, probabilities.dtype).mean(1)
    return (probabilities.mean(1) * share).mean() * experts**2


def _one_hot(index: torch.Tensor, classes: int, dtype: torch.dtype) -> torch.Tensor:
    """``F.one_hot`` without its bounds check, which reads the indices back from the device."""
    shape = (*index.shape, classes)
    return torch.zeros(shape, dtype=dtype, device=index.device).scatter_(-1, index[..., None], 1)


def _exclusive_cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim) - x


@dataclass(frozen=True)
class Routing:
    """Where one forward pass sent every token: ``[B, N, k]`` per assignment (``k`` = top-k).

    ``experts`` the chosen experts (first, second), ``gates`` their renormalised gate values
    (before drops), ``kept`` whether the assignment was used (the second: chosen by the policy
    and within capacity), ``slots`` its position in the expert's ``capacity`` slots (meaningful
    where kept). ``probabilities [B, N, E]`` are the gate's softmax.
    """

    probabilities: torch.Tensor
    experts: torch.Tensor
    gates: torch.Tensor
    kept: torch.Tensor
    slots: torch.Tensor
    capacity: int

    @property
    def weights(self) -> torch.Tensor:
        """The combine weights: gate values where kept, 0 where dropped."""
        return self.gates * self.kept

    def detach(self) -> Routing:
        return Routing(
            self.probabilities.detach(),
            self.experts,
            self.gates.detach(),
            self.kept,
            self.slots,
            self.capacity,
        )


def route(
    probabilities: torch.Tensor,
    capacity: int,
    top_k: int = 2,
    second_policy: str = "random",
    threshold: float = 0.2,
    uniforms: torch.Tensor | None = None,
) -> Routing:
    """Top-``k`` routing with per-group capacity (see the module docstring).

    ``probabilities [B, N, E]``; ``uniforms [B, N]`` in [0, 1), needed by the ``random`` policy.
    """
    experts = probabilities.shape[-1]
    gate1, expert1 = probabilities.max(-1)
    one_hot1 = _one_hot(expert1, experts, torch.long)
    slot1 = _exclusive_cumsum(one_hot1, 1).gather(-1, expert1[..., None]).squeeze(-1)
    kept1 = slot1 < capacity
    if top_k == 1:
        unsqueeze = (t[..., None] for t in (expert1, gate1, kept1, slot1))
        return Routing(probabilities, *unsqueeze, capacity)
    gate2, expert2 = probabilities.masked_fill(one_hot1.bool(), -1.0).max(-1)
    total = gate1 + gate2 + GATE_EPS
    gate1, gate2 = gate1 / total, gate2 / total
    if second_policy == "random":
        chosen2 = uniforms < gate2 / max(threshold, GATE_EPS)
    elif second_policy == "threshold":
        chosen2 = gate2 > threshold
    elif second_policy == "all":
        chosen2 = torch.ones_like(kept1)
    elif second_policy == "none":
        chosen2 = torch.zeros_like(kept1)
    else:
        raise ValueError(f"second_policy must be one of {SECOND_POLICIES}; got {second_policy!r}")
    filled1 = (one_hot1 * kept1[..., None]).sum(1, keepdim=True)
    one_hot2 = _one_hot(expert2, experts, torch.long) * chosen2[..., None]
    after1 = _exclusive_cumsum(one_hot2, 1) + filled1
    slot2 = after1.gather(-1, expert2[..., None]).squeeze(-1)
    kept2 = chosen2 & (slot2 < capacity)
    return Routing(
        probabilities,
        torch.stack([expert1, expert2], -1),
        torch.stack([gate1, gate2], -1),
        torch.stack([kept1, kept2], -1),
        torch.stack([slot1, slot2], -1),
        capacity,
    )


class Experts(nn.Module):
    """``E`` two-layer GELU MLPs applied to ``[E, T, D]`` inputs as two batched products.

    ``w1 [E, D, H]`` and ``w2 [E, H, D]`` are drawn from U(-1/sqrt(f), 1/sqrt(f)) with ``f``
    their last dimension, as in the authors' code; biases exist only with ``bias=True``.
    """

    def __init__(self, experts: int, dim: int, hidden: int, bias: bool = False) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.b1 = nn.Parameter(torch.zeros(experts, 1, hidden)) if bias else None
        self.b2 = nn.Parameter(torch.zeros(experts, 1, dim)) if bias else None
        for weight in (self.w1, self.w2):
            bound = 1 / math.sqrt(weight.shape[-1])
            nn.init.uniform_(weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.bmm(x, self.w1) if self.b1 is None else torch.baddbmm(self.b1, x, self.w1)
        hidden = F.gelu(hidden)
        return (
            torch.bmm(hidden, self.w2)
            if self.b2 is None
            else torch.baddbmm(self.b2, hidden, self.w2)
        )

    @torch.no_grad()
    def copy_dense(self, fc1: nn.Linear, fc2: nn.Linear) -> None:
        """Every expert becomes the dense MLP ``fc2(GELU(fc1(x)))`` (biases too, if it has them)."""
        self.w1.copy_(fc1.weight.t().expand_as(self.w1))
        self.w2.copy_(fc2.weight.t().expand_as(self.w2))
        if self.b1 is not None:
            self.b1.copy_(fc1.bias.expand_as(self.b1))
            self.b2.copy_(fc2.bias.expand_as(self.b2))


class SparseMoE(nn.Module):
    """The sparse top-2 mixture-of-experts layer (module docstring), a drop-in for an MLP.

    ``forward(x [B, N, D]) -> [B, N, D]``. After each forward, :attr:`balance` holds the layer's
    weighted balance loss (to add to the training loss) and :attr:`routing` the detached
    :class:`Routing` of that pass. Training and evaluation differ by ``self.training`` only:
    capacity factor, and where the ``random`` policy draws its uniforms (the global generator in
    training; in evaluation a generator seeded with ``eval_seed`` at every forward).
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        experts: int = 4,
        top_k: int = 2,
        capacity_factor_train: float = 1.25,
        capacity_factor_eval: float = 2.0,
        second_policy: str = "random",
        second_threshold: float = 0.2,
        balance_weight: float = 0.01,
        gate_std: float = 1.0,
        bias: bool = False,
        eval_seed: int = 0,
    ) -> None:
        super().__init__()
        if top_k not in (1, 2) or top_k > experts:
            raise ValueError(f"top_k must be 1 or 2 and at most experts={experts}; got {top_k}")
        if second_policy not in SECOND_POLICIES:
            raise ValueError(
                f"second_policy must be one of {SECOND_POLICIES}; got {second_policy!r}"
            )
        self.num_experts = experts
        self.top_k = top_k
        self.capacity_factor_train = capacity_factor_train
        self.capacity_factor_eval = capacity_factor_eval
        self.second_policy = second_policy
        self.second_threshold = second_threshold
        self.balance_weight = balance_weight
        self.eval_seed = eval_seed
        self.gate = nn.Parameter(torch.randn(dim, experts) * gate_std)
        self.experts = Experts(experts, dim, hidden, bias)
        self.balance: torch.Tensor | None = None
        self.routing: Routing | None = None

    def extra_repr(self) -> str:
        return (
            f"experts={self.num_experts}, top_k={self.top_k}, "
            f"capacity_factor=({self.capacity_factor_train}, {self.capacity_factor_eval}), "
            f"second_policy={self.second_policy!r}, balance_weight={self.balance_weight}"
        )

    def capacity(self, tokens: int) -> int:
        """Slots per expert for groups of ``tokens`` tokens, in the current mode."""
        factor = self.capacity_factor_train if self.training else self.capacity_factor_eval
        return expert_capacity(tokens, self.num_experts, factor)

    def _uniforms(self, x: torch.Tensor) -> torch.Tensor | None:
        if self.top_k == 1 or self.second_policy != "random":
            return None
        shape = x.shape[:2]
        if self.training:
            return torch.rand(shape, device=x.device)
        generator = torch.Generator(device=x.device).manual_seed(self.eval_seed)
        return torch.rand(shape, device=x.device, generator=generator)

    def route(self, x: torch.Tensor) -> Routing:
        """The routing of tokens ``x [B, N, D]`` in the current mode."""
        # fp32 under bf16 autocast: bf16 gate logits tie and round, which changes the top-2 choice
        with precision.full_precision():
            probabilities = torch.softmax(x.float() @ self.gate, dim=-1)
        return route(
            probabilities,
            self.capacity(x.shape[1]),
            self.top_k,
            self.second_policy,
            self.second_threshold,
            self._uniforms(x),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        routing = self.route(x)
        self.balance = self.balance_weight * balance_loss(
            routing.probabilities, routing.experts[..., 0]
        )
        self.routing = routing.detach()
        slots_per_expert = batch * routing.capacity
        total_slots = self.num_experts * slots_per_expert
        # Slot s = e * (B * C) + b * C + position: the buffer is already laid out [E, B * C] for
        # the batched expert products. Dropped assignments point one past the end.
        image = torch.arange(batch, device=x.device).view(batch, 1, 1)
        slot = routing.experts * slots_per_expert + image * routing.capacity + routing.slots
        slot = torch.where(routing.kept, slot, total_slots)
        token = torch.arange(batch * tokens, device=x.device).view(batch, tokens, 1)
        source = torch.zeros(total_slots + 1, dtype=torch.long, device=x.device)
        source.scatter_(0, slot.flatten(), token.expand_as(slot).flatten())
        # Empty slots read token 0: their outputs are computed but never gathered below.
        expert_inputs = x.reshape(batch * tokens, dim).index_select(0, source[:total_slots])
        outputs = self.experts(expert_inputs.view(self.num_experts, slots_per_expert, dim))
        outputs = outputs.reshape(total_slots, dim)
        # Dropped assignments read slot 0 with weight 0.
        gathered = outputs.index_select(0, torch.where(routing.kept, slot, 0).flatten())
        gathered = gathered.view(batch, tokens, self.top_k, dim)
        # The gates in the experts' dtype: fp32 gates would promote a bf16 output to fp32.
        return (routing.weights.to(gathered.dtype).unsqueeze(-1) * gathered).sum(2)
