"""CorGrad: per-domain gradient correction at the granularity of output-channel chunks.

Zhou, Hu, Zhou, Guan, Jiang, "Rethinking Domain Generalization from Perspective of Gradient
Granularity", ECAI 2024 (released as a DomainBed/SWAD fork, ``domainbed/gradient.py``).

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

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dmg_domainbed import precision
from dmg_domainbed.algorithms.base import PluginAlgorithm, featurizer_classifier
from dmg_domainbed.algorithms.corgrad.chunks import (
    LAYOUT_TENSORS,
    ChunkLayout,
    by_row_length,
    chunk_layout,
)
from dmg_domainbed.algorithms.corgrad.flat import FlatGradients, flat_gradients
from dmg_domainbed.hparams import HParam, HParamSpace

PARAMETER_SETS = ("conv_linear", "all")


class CorGrad(PluginAlgorithm):
    """CorGrad (Zhou et al., ECAI 2024): chunk-wise conflict projection and norm-outlier
    blending, stated in full, with its differences from the released code, in this module's
    docstring. Its hparams: ``CorGrad.HPARAMS``, after the class."""

    def __init__(self, input_shape, num_classes, num_domains, hparams):
        super().__init__(input_shape, num_classes, num_domains, hparams)
        self.network = featurizer_classifier(input_shape, num_classes, hparams)
        self.optimizer = torch.optim.Adam(
            self.network.parameters(), lr=hparams["lr"], weight_decay=hparams["weight_decay"]
        )
        params = [p for p in self.network.parameters() if p.requires_grad]
        corrected = {id(p) for p in corrected_parameters(self.network, hparams["corrected_params"])}
        chosen = [p for p in params if id(p) in corrected]
        # In the flat vector, ordered by row length: the fewest blocks (see ChunkLayout); the
        # parameters it does not correct after them.
        self._params = [chosen[k] for k in by_row_length([p.shape for p in chosen])]
        self._params += [p for p in params if id(p) not in corrected]
        self._corrected_size = sum(p.numel() for p in chosen)
        layout = chunk_layout([p.shape for p in self._params[: len(chosen)]], hparams["n_parts"])
        # Derived from the network and hparams: moved by .to(), kept out of the state_dict.
        for name in LAYOUT_TENSORS:
            self.register_buffer(f"_{name}", getattr(layout, name), persistent=False)
        self._matrices, self._blocks = layout.matrices, layout.blocks
        self._flat: FlatGradients | None = None  # made on the first step, on the weights' device

    def _layout(self) -> ChunkLayout:
        tensors = {name: getattr(self, f"_{name}") for name in LAYOUT_TENSORS}
        return ChunkLayout(self._matrices, self._blocks, **tensors)

    def _apply(self, fn, *args, **kwargs):
        # .to(), .cuda(), a memory format: the flat buffers follow the weights on the next step
        self._flat = None
        return super()._apply(fn, *args, **kwargs)

    def _flat_gradients(self, domains: int) -> FlatGradients:
        """The domains' flat gradients and the update, kept from step to step: new ones each step
        would cost their allocation each step (on a CPU, every page of them)."""
        if self._flat is None or not self._flat.fits(domains):
            self._flat = flat_gradients(self._params, domains)
        return self._flat

    def update(self, minibatches, unlabeled=None):
        flat = self._flat_gradients(len(minibatches))
        losses = []
        for d, (x, y) in enumerate(minibatches):
            loss = F.cross_entropy(self.network(x), y)
            flat.store(d, torch.autograd.grad(loss, flat.params, materialize_grads=True))
            losses.append(loss.detach())
        size = self._corrected_size
        # fp32 under bf16 autocast: the projections' dot products decide conflicts by their sign
        with precision.full_precision():
            _, stats = corrected_update(
                flat.grads[:, :size], self._layout(), self.hparams["alpha"], flat.update[:size]
            )
        torch.sum(flat.grads[:, size:], 0, out=flat.update[size:])  # the plain sum elsewhere
        flat.attach()
        self.optimizer.step()
        names = ["loss", *stats]
        values = torch.stack([torch.stack(losses).mean(), *stats.values()]).tolist()
        return dict(zip(names, values, strict=True))

    def predict(self, x):
        return self.network(x)


# CorGrad's hparams (merged into DomainBed's registry; docs/algorithms.md shows them).
CorGrad.HPARAMS = HParamSpace(
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


def corrected_update(
    grads: torch.Tensor, layout: ChunkLayout, alpha: float, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CorGrad's update direction ``[P]`` from the domains' flat gradients ``grads [D, P]``:
    steps 1 and 2, then the SUM over domains (step 3), written to ``out`` if given; and the
    logged statistics (in ``grads``' dtype)."""
    gram = layout.gram(grads)
    projected, conflict_fraction, projection_ratio = project_conflicting_chunks(
        gram, layout.rounding()
    )
    blended, outlier_fraction = blend_outliers(gram, projected, layout, alpha)
    stats = {
        "conflict_fraction": conflict_fraction,
        "projection_ratio": projection_ratio,
        "outlier_fraction": outlier_fraction,
    }
    update = layout.combine(grads, blended.sum(1), out)
    return update, {name: value.to(grads.dtype) for name, value in stats.items()}


def project_conflicting_chunks(
    gram: torch.Tensor, rounding: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 1 of CorGrad: remove the conflicting component of every chunk, domain by domain.

    With ``D`` domains' gradients ``g_d``, for domain ``i = 0..D-1`` in order, every other
    domain ``p`` in increasing order and every chunk ``j``::

        if <g_i^j, g_p^j> < 0:   g_i^j <- g_i^j - (<g_i^j, g_p^j> / ||g_p^j||^2) g_p^j

    where ``g_p^j`` is domain ``p``'s chunk as it stands, i.e. already corrected when ``p < i``
    (the released code updates the gradients in place), which makes the rule order dependent.

    Every corrected chunk stays a combination of the domains' original chunks, so the rule runs
    on ``gram [C, D, D]`` (:meth:`ChunkLayout.gram`) and returns ``mixing [C, D, D]``: the
    corrected ``g_i^j = sum_q mixing[j, i, q] g_q^j``; inner products of corrected chunks are
    ``a^T gram b``. No gradient-sized tensor is touched: the gradients are read for the Gram
    matrices (one batched product per block of rows) and once more where the result is applied
    (:meth:`ChunkLayout.combine`).
    The recurrence runs in float64 and follows exact arithmetic where floats leave residues of
    either sign that the released code takes for values. With ``s_d = sum_q |mixing[j, d, q]|
    ||g_q^j||``, the scale of the rounding errors of corrected chunk ``d``, an inner product
    under ``rounding * s_i * s_p`` is zero (``rounding``: per chunk,
    :meth:`ChunkLayout.rounding`): no conflict, as between a chunk and one it was just
    projected against, orthogonal in exact arithmetic (the released code counts about half of
    these pairs as conflicts and projects by a rounding error); and a corrected chunk whose
    squared norm is under ``rounding * s_i^2`` is zero, as where collinear chunks are
    projected (in one-element chunks the released code's residue, when not exactly zero, can
    zero a later domain's chunk).

    Also returns the fraction of conflicting (i, p, j) triples among all ``D (D-1) C`` and the
    mean projection ratio ``||projected component|| / ||g_i^j||`` (= ``|cos(g_i^j, g_p^j)|``)
    over the conflicts (0 when there is none).
    """
    chunks, domains, _ = gram.shape
    mixing = torch.eye(domains, dtype=gram.dtype, device=gram.device).repeat(chunks, 1, 1)
    rows = mixing.unbind(1)  # rows[d] [C, D]: corrected g_d^j = sum_q rows[d][j, q] g_q^j
    applied = list(gram.unbind(1))  # applied[d] [C, D]: rows[d] times gram, per chunk
    lengths = gram.diagonal(dim1=1, dim2=2).sqrt()  # [C, D]: ||g_d^j||
    squares = list(gram.diagonal(dim1=1, dim2=2).T.clone())  # per d, [C]: ||corrected g_d^j||^2
    # per d, [C]: sum_q |rows[d][j, q]| ||g_q^j||, a bound on ||corrected g_d^j|| and the scale
    # of the rounding errors of its inner products.
    scales = list(lengths.T.clone())
    zero = gram.new_zeros(())
    conflicts, ratios = [], []
    tiny = torch.finfo(gram.dtype).tiny
    for i in range(domains):
        for p in range(domains):
            if p == i:
                continue
            dots = (applied[i] * rows[p]).sum(1)  # [C]: <corrected g_i^j, corrected g_p^j>
            dots = dots.masked_fill(dots.abs() <= rounding * scales[i] * scales[p], 0.0)
            conflict = dots < 0
            # A conflict implies both chunks are non-zero, so the clamps never change a used value.
            coefficient = torch.where(conflict, dots / squares[p].clamp_min(tiny), zero)
            ratio = dots / (squares[p].sqrt() * squares[i].sqrt()).clamp_min(tiny)
            ratios.append(torch.where(conflict, ratio, zero))
            conflicts.append(conflict)
            rows[i].addcmul_(rows[p], coefficient[:, None], value=-1)
            applied[i] = torch.bmm(rows[i][:, None, :], gram)[:, 0]
            scales[i] = (rows[i].abs() * lengths).sum(1)
            squares[i] = (applied[i] * rows[i]).sum(1)
            residue = (conflict & (squares[i] <= rounding * scales[i].square()))[:, None]
            rows[i].masked_fill_(residue, 0.0)
            applied[i].masked_fill_(residue, 0.0)
            squares[i] = squares[i].masked_fill(residue[:, 0], 0.0)
            scales[i] = scales[i].masked_fill(residue[:, 0], 0.0)
    if not conflicts:
        return mixing, zero.clone(), zero.clone()
    count = torch.stack(conflicts).sum()
    fraction = count / (domains * (domains - 1) * chunks) if chunks else count.to(gram.dtype)
    return mixing, fraction, -torch.stack(ratios).sum() / count.clamp_min(1)


def blend_outliers(
    gram: torch.Tensor, mixing: torch.Tensor, layout: ChunkLayout, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2 of CorGrad: pull domains with an outlying gradient norm towards the others.

    Per parameter tensor, with ``n_d = ||g_d||``, ``mu`` their mean and ``sigma`` their
    population standard deviation, domain ``d`` is an outlier when ``|n_d - mu| > sigma``; then
    ``g_d <- alpha g_d + (1 - alpha) mean_{d' not outlier} g_d'`` (the mean taken before any
    blending). The gradients ``g_d`` are those of step 1, given as ``mixing [C, D, D]`` over
    the original chunks whose Gram matrices are ``gram`` (see
    :func:`project_conflicting_chunks`). Returns the blended gradients as the same kind of
    ``[C, D, D]`` mixing and the fraction of (domain, tensor) outliers.

    A domain exactly one sigma away is not an outlier, and "exactly" allows for rounding: with
    two domains both always lie exactly one sigma from the mean, so rounding alone would
    otherwise decide, step by step, whether one of them is blended.
    """
    squares = torch.einsum("cid,cde,cie->ic", mixing, gram, mixing).clamp_min(0)
    norms = layout.tensor_sums(squares).sqrt()  # [D, T]
    deviation = (norms - norms.mean(0)).abs()
    slack = 16 * torch.finfo(norms.dtype).eps * norms.amax(0)
    outlier = deviation > norms.std(0, correction=0) + slack
    inlier = (~outlier).to(mixing.dtype)
    weights = layout.per_chunk(inlier / inlier.sum(0))  # [D, C]
    inlier_mean = torch.einsum("dc,cdq->cq", weights, mixing)
    blended = torch.where(
        layout.per_chunk(outlier).T[:, :, None],
        alpha * mixing + (1 - alpha) * inlier_mean[:, None, :],
        mixing,
    )
    return blended, outlier.to(mixing.dtype).mean()


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
