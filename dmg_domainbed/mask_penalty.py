"""The mask terms of DMG's loss (paper Eq. 2-3) as one autograd node with its gradient written out.

:func:`mask_penalty` equals ``lambda_overlap * sum_layers masks.overlap_loss(m) +
lambda_sparsity * sum_layers masks.sparsity_loss(m)`` for ``m = sigmoid(logits)``, value and
gradient (the test suite checks both against those plain definitions). Recorded op by op,
autograd would replay some forty small operations every step; on small networks those, not the
arithmetic, dominate the cost of DMG's step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.autograd import Function

from dmg_domainbed.masks import EPS, mean_over_pairs, stack_layers


class MaskPenalty(Function):
    """Returns ``(penalty, overlap, sparsity, probs)``; only ``penalty`` carries a gradient.

    ``overlap = sum over layers of the mean over unordered domain pairs of sIoU(m_i, m_j)``
    (Eq. 2), ``sparsity = sum of all m``, ``probs`` is :func:`stack_layers`' ``[L, D, k_max]``.

    With ``s_ij = (I + eps) / (U + eps)``, ``I = m_i . m_j``, ``U = |m_i| + |m_j| - I``:
    ``ds_ij/dm_i = (m_j (1 + s_ij) - s_ij) / (U_ij + eps)``, so with ``P = D (D - 1) / 2``
    pairs, ``d overlap / dm_i = (1/P) sum_{j != i} (m_j (1 + s_ij) - s_ij) / (U_ij + eps)``:
    one batched matrix product for all layers and domains.
    """

    @staticmethod
    def forward(ctx, lambda_overlap: float, lambda_sparsity: float, *logits):
        probs = stack_layers([torch.sigmoid(layer) for layer in logits])
        num_domains = probs.shape[1]
        pairs = num_domains * (num_domains - 1) // 2
        sparsity = probs.sum()
        union = iou = None
        if pairs:
            intersection = probs @ probs.transpose(-1, -2)
            totals = probs.sum(-1)
            union = (totals[:, :, None] + totals[:, None, :]).sub_(intersection).add_(EPS)
            iou = intersection.add_(EPS).div_(union)
            overlap = mean_over_pairs(iou).sum()
        else:
            overlap = sparsity.new_zeros(())
        penalty = lambda_overlap * overlap + lambda_sparsity * sparsity
        ctx.save_for_backward(probs, union, iou)
        ctx.lambdas = (lambda_overlap, lambda_sparsity)
        ctx.pairs = pairs
        ctx.widths = [layer.shape[-1] for layer in logits]
        ctx.mark_non_differentiable(overlap, sparsity, probs)
        return penalty, overlap, sparsity, probs

    @staticmethod
    def backward(ctx, grad, *_):
        probs, union, iou = ctx.saved_tensors
        lambda_overlap, lambda_sparsity = ctx.lambdas
        grad_probs = torch.full_like(probs, lambda_sparsity)
        if ctx.pairs and lambda_overlap:
            inverse = union.reciprocal()
            inverse.diagonal(dim1=-2, dim2=-1).zero_()  # j != i only
            weighted_iou = iou * inverse  # s_ij / (U_ij + eps)
            slope = (inverse + weighted_iou) @ probs - weighted_iou.sum(-1, keepdim=True)
            grad_probs.add_(slope, alpha=lambda_overlap / ctx.pairs)
        grad_probs.mul_(grad).mul_(probs * (1 - probs))  # through m = sigmoid(logits)
        grad_logits = [grad_probs[layer, :, :width] for layer, width in enumerate(ctx.widths)]
        return (None, None, *grad_logits)


def mask_penalty(
    logits: Sequence[torch.Tensor], lambda_overlap: float, lambda_sparsity: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(penalty, overlap, sparsity, probs)`` of the layers' ``[D, k]`` mask logits."""
    return MaskPenalty.apply(float(lambda_overlap), float(lambda_sparsity), *logits)
