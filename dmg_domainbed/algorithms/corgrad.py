"""CorGrad: per-domain gradient correction at the granularity of output-channel chunks.

Zhou, Hu, Zhou, Guan, Jiang, "Rethinking Domain Generalization from Perspective of Gradient
Granularity", ECAI 2024 (released as a DomainBed/SWAD fork, ``domainbed/gradient.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed import precision
from dmg_domainbed.algorithms.base import PluginAlgorithm, featurizer_classifier
from dmg_domainbed.hparams import HParam, HParamSpace

PARAMETER_SETS = ("conv_linear", "all")


@dataclass(frozen=True)
class ChunkLayout:
    """Where the chunks of the corrected parameter tensors lie in one flat gradient vector.

    The vector is the concatenation of the flattened tensors; every tensor is cut along dim 0
    (output channels / output features) as ``torch.chunk(tensor, n_parts)`` cuts it, so every
    chunk is a contiguous run of the vector and the layout needs one entry per chunk, not per
    element:

    * ``chunk_sizes`` ``[C]``: elements of every chunk, in vector order;
    * ``tensor_chunks`` ``[T]``: chunks of every tensor (0 for an empty tensor);
    * ``tensor_sizes`` ``[T]``: elements of every tensor;
    * ``num_elements``: ``P``, the length of the vector.

    Sums over chunks and tensors are segmented reductions (``torch.segment_reduce``: a fixed
    reduction order, so repeatable on a GPU, unlike scatter-adds with float atomics); values
    per chunk or tensor are spread over their elements with ``repeat_interleave``.
    """

    chunk_sizes: torch.Tensor
    tensor_chunks: torch.Tensor
    tensor_sizes: torch.Tensor
    num_elements: int

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_sizes)

    @property
    def num_tensors(self) -> int:
        return len(self.tensor_sizes)

    def chunk_sums(self, values: torch.Tensor) -> torch.Tensor:
        """Sum of ``values [..., P]`` over the elements of each chunk: ``[..., C]``."""
        return _segment_sums(values, self.chunk_sizes)

    def tensor_sums(self, per_chunk: torch.Tensor) -> torch.Tensor:
        """Sum of ``per_chunk [..., C]`` over the chunks of each tensor: ``[..., T]``."""
        return _segment_sums(per_chunk, self.tensor_chunks)

    def per_element(self, per_chunk: torch.Tensor) -> torch.Tensor:
        """``per_chunk [C]`` repeated over the elements of each chunk: ``[P]``."""
        return per_chunk.repeat_interleave(self.chunk_sizes, output_size=self.num_elements)

    def per_tensor_element(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """``per_tensor [T]`` repeated over the elements of each tensor: ``[P]``."""
        return per_tensor.repeat_interleave(self.tensor_sizes, output_size=self.num_elements)


def _segment_sums(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Sums of consecutive runs of ``lengths`` elements along the last dim of ``values``."""
    leading = values.shape[:-1]
    rows = math.prod(leading)
    sums = torch.segment_reduce(
        values.reshape(-1), "sum", lengths=lengths.repeat(rows), unsafe=True
    )  # unsafe: no check that reads the lengths back; chunk_layout makes them sum to P
    return sums.view(*leading, len(lengths))


def chunk_layout(
    shapes: Sequence[Sequence[int]], n_parts: int, device: torch.device | str | None = None
) -> ChunkLayout:
    """The :class:`ChunkLayout` of tensors of ``shapes`` cut into (at most) ``n_parts`` chunks.

    Like ``torch.chunk``: ``ceil(rows / n_parts)`` rows per chunk, the last chunk smaller, so a
    tensor of fewer rows than ``n_parts`` (or a row count such as 12 with ``n_parts = 10``) gives
    fewer chunks. A 0-d tensor is one row.
    """
    if n_parts < 1:
        raise ValueError(f"n_parts must be >= 1; got {n_parts}")
    chunk_sizes: list[int] = []
    tensor_chunks: list[int] = []
    tensor_sizes: list[int] = []
    for shape in shapes:
        numel = math.prod(shape)
        tensor_sizes.append(numel)
        tensor_chunks.append(0)
        if numel == 0:
            continue
        rows = shape[0] if len(shape) else 1
        rows_per_chunk = math.ceil(rows / n_parts)
        for start in range(0, rows, rows_per_chunk):
            chunk_sizes.append(min(rows_per_chunk, rows - start) * (numel // rows))
            tensor_chunks[-1] += 1

    def as_tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return ChunkLayout(
        as_tensor(chunk_sizes),
        as_tensor(tensor_chunks),
        as_tensor(tensor_sizes),
        sum(tensor_sizes),
    )


def project_conflicting_chunks(
    grads: torch.Tensor, layout: ChunkLayout
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 1 of CorGrad: remove the conflicting component of every chunk, domain by domain.

    ``grads [D, P]`` holds one flat gradient per source domain. For domain ``i = 0..D-1`` in
    order, every other domain ``p`` in increasing order and every chunk ``j``::

        if <g_i^j, g_p^j> < 0:   g_i^j <- g_i^j - (<g_i^j, g_p^j> / ||g_p^j||^2) g_p^j

    where ``g_p^j`` is domain ``p``'s chunk as it stands, i.e. already corrected when ``p < i``
    (the released code updates the gradients in place), which makes the rule order dependent.

    Returns the corrected gradients (a new tensor), the fraction of conflicting (i, p, j)
    triples among all ``D (D-1) C`` and the mean projection ratio
    ``||projected component|| / ||g_i^j||`` (= ``|cos(g_i^j, g_p^j)|``) over the conflicts
    (0 when there is none). Temporaries are one gradient long, never ``[D, P]``.
    """
    grads = grads.clone()
    num_domains = grads.shape[0]
    squares = torch.stack([layout.chunk_sums(g * g) for g in grads])
    conflicts = grads.new_zeros(())
    ratio_sum = grads.new_zeros(())
    tiny = torch.finfo(grads.dtype).tiny
    for i in range(num_domains):
        for p in range(num_domains):
            if p == i:
                continue
            dots = layout.chunk_sums(grads[i] * grads[p])
            conflict = dots < 0
            # A conflict implies both chunks are non-zero, so the clamps never change a used value.
            coefficient = torch.where(conflict, dots / squares[p].clamp_min(tiny), 0.0)
            ratio = -dots / (squares[p].sqrt() * squares[i].sqrt()).clamp_min(tiny)
            ratio_sum += torch.where(conflict, ratio, 0.0).sum()
            conflicts += conflict.sum()
            grads[i] -= layout.per_element(coefficient) * grads[p]
            squares[i] = layout.chunk_sums(grads[i] * grads[i])
    pairs = num_domains * (num_domains - 1) * layout.num_chunks
    fraction = conflicts / pairs if pairs else conflicts
    return grads, fraction, ratio_sum / conflicts.clamp_min(1)


def blend_outliers(
    grads: torch.Tensor, layout: ChunkLayout, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2 of CorGrad: pull domains with an outlying gradient norm towards the others.

    Per parameter tensor, with ``n_d = ||g_d||``, ``mu`` their mean and ``sigma`` their
    population standard deviation, domain ``d`` is an outlier when ``|n_d - mu| > sigma``; then
    ``g_d <- alpha g_d + (1 - alpha) mean_{d' not outlier} g_d'`` (the mean taken before any
    blending). Returns the blended gradients (a new tensor) and the fraction of (domain, tensor)
    outliers.

    A domain exactly one sigma away is not an outlier, and "exactly" allows for rounding: with
    two domains both always lie exactly one sigma from the mean, so rounding alone would
    otherwise decide, step by step, whether one of them is blended.
    """
    squares = torch.stack([layout.tensor_sums(layout.chunk_sums(g * g)) for g in grads])
    norms = squares.double().sqrt()
    deviation = (norms - norms.mean(0)).abs()
    slack = 16 * torch.finfo(norms.dtype).eps * norms.amax(0)
    outlier = deviation > norms.std(0, correction=0) + slack
    inlier = (~outlier).to(grads.dtype)
    weights = inlier / inlier.sum(0)
    inlier_mean = sum(layout.per_tensor_element(w) * g for w, g in zip(weights, grads))
    blended = torch.empty_like(grads)
    for d, g in enumerate(grads):
        chosen = layout.per_tensor_element(outlier[d])
        torch.where(chosen, alpha * g + (1 - alpha) * inlier_mean, g, out=blended[d])
    return blended, outlier.to(grads.dtype).mean()


def corrected_update(
    grads: torch.Tensor, layout: ChunkLayout, alpha: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CorGrad's update direction: steps 1 and 2, then the SUM over domains (step 3)."""
    projected, conflict_fraction, projection_ratio = project_conflicting_chunks(grads, layout)
    blended, outlier_fraction = blend_outliers(projected, layout, alpha)
    stats = {
        "conflict_fraction": conflict_fraction,
        "projection_ratio": projection_ratio,
        "outlier_fraction": outlier_fraction,
    }
    return blended.sum(0), stats


def corrected_parameters(network: nn.Module, which: str) -> list[nn.Parameter]:
    """The trainable parameters CorGrad corrects.

    ``all``: every trainable parameter, normalisation layers included (what the authors'
    published commands corrected: conv, BatchNorm and linear on their ResNet);
    ``conv_linear``: weights and biases of every convolution and linear layer (what their code
    meant to select without ``--all_layers``).
    """
    if which not in PARAMETER_SETS:
        raise ValueError(f"which must be one of {PARAMETER_SETS}; got {which!r}")
    if which == "all":
        return [p for p in network.parameters() if p.requires_grad]
    layers = (nn.modules.conv._ConvNd, nn.Linear)
    return [
        p
        for module in network.modules()
        if isinstance(module, layers)
        for p in module.parameters(recurse=False)
        if p.requires_grad
    ]


class CorGrad(PluginAlgorithm):
    """CorGrad (Zhou et al., ECAI 2024): chunk-wise conflict projection and norm-outlier blending.

    Every step, each source domain's minibatch goes through DomainBed's featurizer and classifier
    on its own; ``L_d`` is its mean cross-entropy and ``g_d = grad L_d`` (one backward per domain,
    as the method requires). On the corrected parameters (``corrected_params``), each tensor's
    gradient is cut along dim 0 into ``n_parts`` chunks ``g_d^j`` (groups of output channels) and

    1. for ``i`` in order, every ``p != i`` and every chunk ``j``, if ``<g_i^j, g_p^j> < 0``:
       ``g_i^j <- g_i^j - <g_i^j, g_p^j> / ||g_p^j||^2 g_p^j``
       (see :func:`project_conflicting_chunks`);
    2. per tensor, ``O = {d : | ||g_d|| - mu | > sigma}`` with ``mu``, ``sigma`` the mean and
       population standard deviation of the norms over domains, and
       ``g_d <- alpha g_d + (1 - alpha) mean_{d' not in O} g_d'`` for ``d`` in ``O``
       (see :func:`blend_outliers`);
    3. the gradient given to Adam is ``sum_d g_d``.

    The other trainable parameters get the plain sum ``sum_d g_d``. ``update`` logs ``loss`` (mean
    CE over domains), ``conflict_fraction`` (conflicting chunk pairs among all),
    ``projection_ratio`` (mean ``||projection|| / ||g_i^j||`` over conflicts) and
    ``outlier_fraction`` (blended (domain, tensor) pairs among all).

    Deliberate differences from the released code:

    * it has no classifier head: ``GradSurgery`` trains ``networks.ResNet`` (``fc`` replaced by
      an identity) with cross-entropy on the 512/2048 features; here DomainBed's ``Featurizer``
      and ``Classifier``, so every DomainBed backbone works;
    * its trainer passes ``use_alpha`` and ``all_layers`` to ``GradSurgery`` in swapped
      positions, so the published commands (``--use_alpha``, no ``--all_layers``) corrected
      the conv, BatchNorm and linear parameters; here one explicit hparam,
      ``corrected_params``: ``all`` (every trainable parameter, normalisation layers of any
      kind included: what the published commands ran, the default) or ``conv_linear`` (conv
      and linear weights and biases, what the flag's name promised);
    * its ``AlphaSheduler`` (``1 - log(t+1) / log(T)``) is computed but never used: ``alpha``
      is constant there and here, and there is no schedule;
    * the parameters it does not correct keep the last domain's gradient only (it zeroes the
      gradients before each domain's backward); here they get the sum over domains.

    Kept as released: the fixed domain order and in-place semantics of step 1, ``torch.chunk``
    cuts, norms and blending measured after step 1, per-domain forward passes, Adam with
    DomainBed's ``lr`` and ``weight_decay``, and BatchNorm frozen: their ResNet keeps every
    BatchNorm layer in eval mode (ImageNet statistics, never updated), so every domain's
    gradient is taken on the same normalisation. Here CorGrad sets DomainBed's own
    ``freeze_bn`` hparam to true, which does the same to DomainBed's ResNet; ``freeze_bn =
    false`` normalises each domain's minibatch with its own statistics instead. (DomainBed's
    other featurizers have no pretrained statistics to freeze: MNIST_CNN uses GroupNorm, the
    Wide ResNet is trained from scratch; ``freeze_bn`` does not act on them.)
    """

    HPARAMS = HParamSpace(
        HParam(
            "n_parts",
            10,
            lambda r: int(round(10 ** r.uniform(0.7, 1.3))),
            minimum=1,
            help="chunks per parameter tensor along dim 0 (output channels)",
        ),
        HParam(
            "alpha",
            0.6,
            lambda r: r.uniform(0.4, 0.8),
            minimum=0.0,
            maximum=1.0,
            help="weight an outlier domain keeps on its own gradient",
        ),
        HParam(
            "corrected_params",
            "all",
            lambda r: "all",
            choices=PARAMETER_SETS,
            help="all: every trainable parameter (the authors' runs); conv_linear: conv and "
            "linear layers",
        ),
        HParam(
            "freeze_bn",
            True,
            lambda r: True,
            where_defined=True,
            help="BatchNorm of DomainBed's ResNet in eval mode, with its ImageNet statistics "
            "(the authors' runs); false: DomainBed's default, statistics of each minibatch",
        ),
    )

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.network = featurizer_classifier(input_shape, num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        corrected = {id(p) for p in corrected_parameters(self.network, hparams["corrected_params"])}
        self._corrected = [i for i, p in enumerate(self._params) if id(p) in corrected]
        self._plain = [i for i, p in enumerate(self._params) if id(p) not in corrected]
        layout = chunk_layout([self._params[i].shape for i in self._corrected], hparams["n_parts"])
        # Derived from the network and hparams: moved by .to(), kept out of the state_dict.
        for name in ("chunk_sizes", "tensor_chunks", "tensor_sizes"):
            self.register_buffer(f"_{name}", getattr(layout, name), persistent=False)
        self._num_elements = layout.num_elements

    def _layout(self) -> ChunkLayout:
        return ChunkLayout(
            self._chunk_sizes,
            self._tensor_chunks,
            self._tensor_sizes,
            self._num_elements,
        )

    def update(self, minibatches, unlabeled=None):
        first = self._params[0]
        grads = first.new_empty(len(minibatches), self._num_elements)
        plain_sum = [torch.zeros_like(self._params[i]) for i in self._plain]
        losses = []
        for d, (x, y) in enumerate(minibatches):
            loss = F.cross_entropy(self.network(x), y)
            domain_grads = torch.autograd.grad(
                loss, self._params, allow_unused=True, materialize_grads=True
            )
            if self._corrected:
                torch.cat([domain_grads[i].reshape(-1) for i in self._corrected], out=grads[d])
            for total, i in zip(plain_sum, self._plain, strict=True):
                total += domain_grads[i]
            losses.append(loss.detach())
        # fp32 under bf16 autocast: the projections' dot products decide conflicts by their sign
        with precision.full_precision():
            update, stats = corrected_update(grads, self._layout(), self.hparams["alpha"])
        offset = 0
        for i in self._corrected:
            param = self._params[i]
            param.grad = update[offset : offset + param.numel()].view_as(param)
            offset += param.numel()
        for total, i in zip(plain_sum, self._plain, strict=True):
            self._params[i].grad = total
        self.optimizer.step()
        names = ["loss", *stats]
        values = torch.stack([torch.stack(losses).mean(), *stats.values()]).tolist()
        return dict(zip(names, values, strict=True))

    def predict(self, x):
        return self.network(x)
