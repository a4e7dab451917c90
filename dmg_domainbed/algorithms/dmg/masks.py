"""Domain-specific masks on a network's activations (DMG; Chattopadhyay et al., ECCV 2020, Sec. 2).

For every masked layer ``L`` with ``k`` input units (channels of a conv activation, features of
a flat one) and every source domain ``d`` there is a logit vector ``m~_d in R^k`` and a mask
probability ``m_d = sigmoid(m~_d)``. The mask multiplies the *input* of ``L``:

* training (Sec. 2.2): an example of domain ``d`` draws ``b ~ Bernoulli(m_d)`` per example and
  uses the straight-through estimator ``b_st = (b - m_d).detach() + m_d`` (forward uses ``b``,
  backward the gradient of ``m_d``);
* out-of-domain test (Sec. 2.3): every source domain's *soft* mask ``m_d`` in turn, raw logits
  averaged over domains;
* known-domain test (Sec. 4, Table 3): the example's own domain, soft (``m_d``) or hard
  (``m_d > 0.5``).

The overlap penalty of Eq. (2) is the soft IoU ``sIoU(m_i, m_j) = m_i.m_j / sum_k(m_i + m_j -
m_i m_j)`` (:func:`soft_iou`), averaged over unordered pairs of source domains
(:func:`overlap_loss`) and summed over layers; the optional sparsity term is the sum of the mask
probabilities (:func:`sparsity_loss`). Autograd differentiates both.

This module knows nothing about DomainBed; it needs torch only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from dmg_domainbed import precision
from dmg_domainbed.algorithms import named_layers

EPS = 1e-6  # the authors' smoothing of the soft IoU
INITS = ("random_uniform", "scalar")
MODES = ("soft", "hard")
#: Attribute of a masked layer holding ``(its DomainMasks, its position among them)``.
MASK_ATTRIBUTE = "domain_masks_of_input"


def soft_iou(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """``(a.b + eps) / (sum(a + b - a*b) + eps)`` over the last dimension."""
    intersection = (a * b).sum(-1)
    union = (a + b - a * b).sum(-1)
    return (intersection + eps) / (union + eps)


def pairwise_soft_iou(probs, eps: float = EPS):
    """``[..., D, D]``: :func:`soft_iou` between the rows of ``probs`` (``[..., D, k]``).

    Works on torch tensors and NumPy arrays alike.
    """
    intersection = probs @ probs.swapaxes(-1, -2)
    totals = probs.sum(-1)
    union = totals[..., :, None] + totals[..., None, :] - intersection
    return (intersection + eps) / (union + eps)


def mean_over_pairs(matrix):
    """Mean over unordered pairs ``i < j`` of symmetric ``[..., D, D]`` matrices; 0 when ``D < 2``.

    ``(sum - trace) / (D (D - 1))``; works on torch tensors and NumPy arrays alike.
    """
    size = matrix.shape[-1]
    off_diagonal = matrix.sum((-1, -2)) - matrix.diagonal(0, -2, -1).sum(-1)
    return off_diagonal / (size * (size - 1)) if size > 1 else off_diagonal * 0


def overlap_loss(probs: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Eq. (2) per layer: soft IoU averaged over unordered pairs of domains (rows of ``probs``)."""
    # fp32 under bf16 autocast: sums over thousands of units need more than bf16's 8-bit mantissa
    with precision.full_precision():
        return mean_over_pairs(pairwise_soft_iou(probs.float(), eps))


def sparsity_loss(probs: torch.Tensor) -> torch.Tensor:
    """The optional sparsity term for one layer: the sum of all mask probabilities."""
    return probs.sum()


def hard_masks(probs: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """Binary masks ``m > threshold`` as floats."""
    return (probs > threshold).to(probs.dtype)


def straight_through_bernoulli(probs: torch.Tensor) -> torch.Tensor:
    """``b ~ Bernoulli(probs)`` in the forward pass, the gradient of ``probs`` in the backward:
    ``(b - probs).detach() + probs``."""
    sample = torch.bernoulli(probs.detach())
    return (sample - probs).detach() + probs


def initial_logits(num_domains: int, units: int, init: str, scalar: float) -> torch.Tensor:
    """``random_uniform``: logits ~ U[0, 1); ``scalar``: every logit equals ``scalar``."""
    if init == "random_uniform":
        return torch.rand(num_domains, units)
    if init == "scalar":
        return torch.full((num_domains, units), float(scalar))
    raise ValueError(f"unknown mask init {init!r}; choose one of {', '.join(INITS)}")


class DomainMasks(nn.Module):
    """Per-domain masks on the inputs of named layers of ``network``, applied by pre-hooks.

    Each masked layer carries its masks and its position among them (attribute
    :data:`MASK_ATTRIBUTE`), and the hook, :func:`mask_input`, finds them through the layer it is
    called with: a ``copy.deepcopy`` of the network (or of the algorithm holding both) is
    self-contained, its layers masked by the copy's masks (SWAD, moving averages).
    The input shapes of the layers are probed with one forward pass on the meta device, which
    allocates nothing.

    The masks act only inside one of the routing contexts below, so an unmasked call of the
    network is impossible by accident:

    * :meth:`per_example` -- each example uses its own domain's mask (``sample``: straight-
      through Bernoulli for training; ``soft``/``hard``: known-domain prediction);
    * :meth:`averaged` -- out-of-domain prediction. The first masked layer repeats its input
      once per domain (the trunk before it runs once) and each block gets its domain's soft
      mask; :meth:`average_logits` folds the ``[D*N, C]`` output back to the mean over
      domains. With ``fold=True`` (exact when the only masked layer is a final linear layer)
      one pass with the mean mask gives the same logits at the cost of one.
    """

    def __init__(
        self,
        network: nn.Module,
        layer_names: Sequence[str],
        num_domains: int,
        input_shape: Sequence[int],
        init: str = "random_uniform",
        init_scalar: float = 1.0,
        fold: bool = False,
    ) -> None:
        super().__init__()
        layers = named_layers.modules_named(network, layer_names, "mask")
        self.num_domains = num_domains
        self.fold = fold
        input_shapes = _probe_input_shapes(network, layers, input_shape)
        # Keep the order in which the forward pass reaches the layers: the first one expands.
        order = sorted(range(len(layer_names)), key=lambda i: input_shapes[i][0])
        self.layer_names = [layer_names[i] for i in order]
        self.logits = nn.ParameterList(
            nn.Parameter(initial_logits(num_domains, input_shapes[i][1][1], init, init_scalar))
            for i in order
        )
        self._route: tuple | None = None
        self._handles = []
        for position, i in enumerate(order):
            # a plain attribute (not a sub-module): the network's state_dict stays as it is
            setattr(layers[i], MASK_ATTRIBUTE, (self, position))
            self._handles.append(layers[i].register_forward_pre_hook(mask_input))

    def probabilities(self) -> list[torch.Tensor]:
        """``m_d = sigmoid(m~_d)`` of every masked layer, ``[D, k]`` each, in forward order."""
        return [torch.sigmoid(logits) for logits in self.logits]

    @contextlib.contextmanager
    def per_example(self, domains: torch.Tensor, mode: str) -> Iterator[None]:
        """Route example ``n`` through the mask of ``domains[n]``; ``mode`` in sample/soft/hard."""
        if mode not in ("sample",) + MODES:
            raise ValueError(f"unknown mask mode {mode!r}; choose sample, soft or hard")
        with self._routing(("per_example", domains, mode)):
            yield

    @contextlib.contextmanager
    def averaged(self) -> Iterator[None]:
        """Out-of-domain routing: every source domain's soft mask (see the class docstring)."""
        with self._routing(("fold",) if self.fold else ("expand",)):
            yield

    def average_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Mean over domains of the logits of a pass made in :meth:`averaged`."""
        if self.fold:
            return logits
        return logits.view(self.num_domains, -1, *logits.shape[1:]).mean(0)

    @contextlib.contextmanager
    def _routing(self, route: tuple) -> Iterator[None]:
        previous, self._route = self._route, route
        try:
            yield
        finally:
            self._route = previous

    def _masked(self, position: int, x: torch.Tensor) -> torch.Tensor:
        if self._route is None:
            raise RuntimeError(
                f"layer '{self.layer_names[position]}' is masked by domain; call the network "
                "inside DomainMasks.per_example(...) or DomainMasks.averaged()"
            )
        probs = torch.sigmoid(self.logits[position])
        # The mask in the activation's dtype: under bf16 autocast, an fp32 mask would promote the
        # masked activation (and everything after it) to fp32.
        probs = probs.to(x.dtype)
        trailing = (1,) * (x.dim() - 2)  # one value per channel, broadcast over H x W
        kind = self._route[0]
        if kind == "per_example":
            _, domains, mode = self._route
            chosen = probs.index_select(0, domains)
            if mode == "sample":
                chosen = straight_through_bernoulli(chosen)
            elif mode == "hard":
                chosen = hard_masks(chosen)
            return x * chosen.view(*chosen.shape, *trailing)
        if kind == "fold":
            return x * probs.mean(0).view(1, -1, *trailing)
        blocks = self.num_domains
        if position == 0:
            x = x.unsqueeze(0)
        else:
            x = x.view(blocks, -1, *x.shape[1:])
        masked = x * probs.view(blocks, 1, -1, *trailing)
        return masked.reshape(-1, *masked.shape[2:])


def mask_input(layer: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook of a masked layer: its masks and position are found on ``layer``."""
    domain_masks, position = getattr(layer, MASK_ATTRIBUTE)
    return (domain_masks._masked(position, args[0]),) + tuple(args[1:])


def _probe_input_shapes(
    network: nn.Module, layers: Sequence[nn.Module], input_shape: Sequence[int]
) -> list[tuple[int, torch.Size]]:
    """(call order, input shape) of each layer in one forward pass of a batch of two examples of
    ``input_shape``, run on the meta device: parameters, buffers and input are meta tensors
    (shapes without storage), swapped in for the pass by ``torch.func.functional_call``."""
    seen: dict[int, tuple[int, torch.Size]] = {}

    def recorder(index: int):
        def record(module: nn.Module, args: tuple) -> None:
            seen.setdefault(index, (len(seen), args[0].shape))

        return record

    meta = {
        name: torch.empty_like(tensor, device="meta")
        for name, tensor in (*network.named_parameters(), *network.named_buffers())
    }
    handles = [layer.register_forward_pre_hook(recorder(i)) for i, layer in enumerate(layers)]
    was_training = network.training
    try:
        network.eval()
        with torch.no_grad():
            torch.func.functional_call(
                network, meta, (torch.empty(2, *input_shape, device="meta"),)
            )
    finally:
        network.train(was_training)
        for handle in handles:
            handle.remove()
    missing = [i for i in range(len(layers)) if i not in seen]
    if missing:
        raise ValueError(f"layers at positions {missing} are never called in the forward pass")
    return [seen[i] for i in range(len(layers))]
