"""The domains' gradients and CorGrad's update in flat buffers, with no per-parameter work per step.

CorGrad (:mod:`.corgrad`) needs every domain's gradient as one row of a ``[D, P]`` matrix and gives
Adam one ``[P]`` update. Both buffers are made once (:func:`flat_gradients`) with a view per
parameter into each row, in the parameter's own strides, so that

* a domain's gradients from autograd land in its row with one ``torch._foreach_copy_``
  (:meth:`FlatGradients.store`), a few launches however many parameters;
* every parameter's ``.grad`` is a view of the update (:meth:`FlatGradients.attach`, once): the
  update is written in place and Adam reads it, in the memory format of the weights, so its
  ``foreach`` kernels take their fast path (a ``channels_last`` weight gets a ``channels_last``
  gradient).

Each parameter occupies a run of the flat vector in its own memory order; where dim 0 is its
outermost dimension (contiguous and ``channels_last`` tensors) every index of dim 0 is a run of
consecutive elements, so the runs of :class:`.chunks.ChunkLayout` are the parameter's rows. A
parameter whose dim 0 is not outermost gets a contiguous view instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FlatGradients:
    """``grads [D, P]`` (one row per domain) and ``update [P]`` for ``params``, in that order."""

    params: tuple[torch.nn.Parameter, ...]
    grads: torch.Tensor
    update: torch.Tensor
    domain_views: tuple[tuple[torch.Tensor, ...], ...]  # per domain, per parameter
    update_views: tuple[torch.Tensor, ...]  # per parameter

    def store(self, domain: int, gradients: Sequence[torch.Tensor]) -> None:
        """Copy ``gradients`` (one per parameter, as autograd returns them) into row ``domain``."""
        torch._foreach_copy_(self.domain_views[domain], gradients)

    def attach(self) -> None:
        """Make every parameter's ``.grad`` its view of the update, unless it already is (the
        first parameter tells: all are set together)."""
        if self.params and self.params[0].grad is self.update_views[0]:
            return
        for param, view in zip(self.params, self.update_views, strict=True):
            param.grad = view

    def fits(self, domains: int) -> bool:
        return len(self.grads) == domains


def flat_gradients(params: Sequence[torch.nn.Parameter], domains: int) -> FlatGradients:
    """Buffers for ``domains`` gradients of ``params`` and their update, on the parameters'
    device and dtype, with the views described in the module docstring."""
    like = params[0]
    strides = [memory_strides(p) for p in params]
    offsets, size = [], 0
    for param in params:
        offsets.append(size)
        size += param.numel()
    grads = like.new_empty(domains, size)
    update = like.new_empty(size)

    def views(flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        start = flat.storage_offset()
        return tuple(
            flat.as_strided(p.shape, stride, start + offset)
            for p, stride, offset in zip(params, strides, offsets, strict=True)
        )

    return FlatGradients(tuple(params), grads, update, tuple(map(views, grads)), views(update))


def memory_strides(param: torch.Tensor) -> tuple[int, ...]:
    """``param``'s strides where it is dense with dim 0 outermost; else contiguous strides."""
    dense = param.is_contiguous() or param.is_contiguous(memory_format=torch.channels_last)
    if dense and (param.dim() == 0 or param.stride(0) * param.shape[0] >= param.numel()):
        return tuple(param.stride())
    return torch.empty(param.shape, device="meta").stride()
