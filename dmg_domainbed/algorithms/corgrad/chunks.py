"""Where CorGrad's chunks lie in the domains' flat gradients, and the arithmetic on them.

CorGrad (:mod:`.corgrad`) cuts every corrected parameter tensor along dim 0 into chunks, as
``torch.chunk`` does. Its two steps need, per chunk ``j``, only the inner products
``<g_d^j, g_e^j>`` of the ``D`` domains' chunks (:meth:`ChunkLayout.gram`), and its result is a
combination of the domains' chunks per chunk (:meth:`ChunkLayout.combine`): this module holds
the layout of the chunks in one flat vector and those two passes over the gradients.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Rows shorter than this (biases, normalisation layers) get exact Gram entries: their chunks can
# hold fewer elements than there are domains, so that corrected chunks become collinear or zero
# and only exact inner products tell a residue from a value.
EXACT_BELOW = 16
# The relative rounding error of inner products from exact Gram entries (float64's, with a wide
# margin) and from float32 sums of some thousands of products (some 1e-7, with a margin): under
# it, relative to the scale of the chunks, an inner product or a squared norm is rounding
# residue, zero in exact arithmetic (see corgrad.project_conflicting_chunks).
EXACT, SUMMED = 2.0**-46, 2.0**-20
# The tensor fields of a ChunkLayout (CorGrad keeps them as buffers, moved by .to()).
LAYOUT_TENSORS = ("row_chunk", "chunk_rows", "tensor_chunks", "exact_chunks")


@dataclass(frozen=True)
class ChunkLayout:
    """Where the chunks of the corrected parameter tensors lie in one flat gradient vector.

    The vector is the concatenation of the flattened tensors; every tensor is cut along dim 0
    (output channels / output features) as ``torch.chunk(tensor, n_parts)`` cuts it, so every
    chunk is a run of whole rows (a row: one index of dim 0 and everything under it), and the
    layout needs one entry per row, chunk and tensor, never one per element:

    * ``matrices`` (Python ints): ``(rows, columns)`` of every tensor seen as the matrix of its
      rows (``(0, 0)`` for an empty tensor, ``(1, 1)`` for a 0-d one);
    * ``row_chunk`` ``[R]``: the chunk every row belongs to, rows in vector order;
    * ``chunk_rows`` ``[C]``: rows of every chunk;
    * ``tensor_chunks`` ``[T]``: chunks of every tensor (0 for an empty tensor);
    * ``exact_chunks`` ``[C]``, bool: the chunks whose rows are shorter than ``EXACT_BELOW``;
    * ``blocks`` (Python ints, from ``matrices``, made once with the layout):
      ``(first element, rows, columns)`` of every block, in vector order.

    Consecutive tensors whose rows have the same length make one block of the vector, a
    ``[rows, columns]`` matrix: products, sums along rows and per-row weights run block by
    block, a few operations per block however many tensors it holds (tensors ordered by row
    length, :func:`by_row_length`, make the fewest blocks: a dozen in a ResNet-50). Sums over
    the rows of a chunk and the chunks of a tensor are segmented reductions
    (``torch.segment_reduce``: a fixed reduction order, so repeatable on a GPU, unlike
    scatter-adds with float atomics). No index is ever as long as the vector.
    """

    matrices: tuple[tuple[int, int], ...]
    blocks: tuple[tuple[int, int, int], ...]
    row_chunk: torch.Tensor
    chunk_rows: torch.Tensor
    tensor_chunks: torch.Tensor
    exact_chunks: torch.Tensor

    @property
    def num_elements(self) -> int:
        return sum(rows * columns for rows, columns in self.matrices)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_rows)

    @property
    def num_tensors(self) -> int:
        return len(self.tensor_chunks)

    def gram(self, grads: torch.Tensor) -> torch.Tensor:
        """``[C, D, D]``, float64: the inner products ``<g_d^j, g_e^j>`` of every chunk ``j`` of
        the ``D`` flat gradients ``grads [D, P]``.

        One batched product per block gives every row's ``[D, D]`` inner products, all pairs of
        domains at once. Rows of fewer than ``EXACT_BELOW`` elements (biases, normalisation
        layers: chunks where domains' gradients can be collinear) in float64, exactly; longer
        rows, some thousands of elements at most, in the gradients' dtype. Sums over the rows of
        a chunk in float64.
        """
        count = len(grads)
        per_row = []
        for _, own in self._block_rows(grads):  # own: [rows, D, columns]
            if own.shape[-1] < EXACT_BELOW:  # float32 products are exact in float64
                own = own.double()
            per_row.append(torch.bmm(own, own.transpose(1, 2)).double())
        if not per_row:
            return grads.new_zeros(self.num_chunks, count, count, dtype=torch.float64)
        rows = torch.cat(per_row).view(-1, count * count)
        sums = torch.segment_reduce(rows, "sum", lengths=self.chunk_rows, axis=0, unsafe=True)
        return sums.view(self.num_chunks, count, count)

    def _block_rows(self, grads: torch.Tensor):
        """``(first element, [rows, D, columns] view of grads)`` of every block."""
        for start, rows, columns in self.blocks:
            own = grads[:, start : start + rows * columns].view(len(grads), rows, columns)
            yield start, own.transpose(0, 1)

    def rounding(self) -> torch.Tensor:
        """``[C]``, float64: relative error of each chunk's :meth:`gram` entries, with a margin;
        a corrected chunk under it is rounding residue (see
        :func:`.corgrad.project_conflicting_chunks`)."""
        exact = self.exact_chunks  # filled where it lies: nothing copied from the host
        summed = torch.full(exact.shape, SUMMED, dtype=torch.float64, device=exact.device)
        return summed.masked_fill_(exact, EXACT)

    def tensor_sums(self, per_chunk: torch.Tensor) -> torch.Tensor:
        """Sum of ``per_chunk [..., C]`` over the chunks of each tensor: ``[..., T]``."""
        return _segment_sums(per_chunk, self.tensor_chunks)

    def per_chunk(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """``per_tensor [..., T]`` repeated over the chunks of each tensor: ``[..., C]``."""
        return per_tensor.repeat_interleave(self.tensor_chunks, dim=-1, output_size=self.num_chunks)

    def combine(
        self, grads: torch.Tensor, weights: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[P]``: ``sum_d weights[j, d] g_d^j`` on every chunk ``j`` of ``grads [D, P]``, for
        ``weights [C, D]``; one batched product per block, written to ``out`` if given."""
        per_row = weights.to(grads.dtype)[self.row_chunk]  # [R, D]: R small, one per row
        combined = grads.new_empty(self.num_elements) if out is None else out
        first_row = 0
        for start, own in self._block_rows(grads):
            rows, _, columns = own.shape
            row_weights = per_row[first_row : first_row + rows, None, :]  # [rows, 1, D]
            target = combined[start : start + rows * columns].view(rows, 1, columns)
            torch.bmm(row_weights, own, out=target)
            first_row += rows
        return combined


def _segment_sums(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Sums of consecutive runs of ``lengths`` elements along the last dim of ``values``."""
    leading = values.shape[:-1]
    rows = math.prod(leading)
    sums = torch.segment_reduce(
        values.reshape(-1), "sum", lengths=lengths.repeat(rows), unsafe=True
    )  # unsafe: no check that reads the lengths back; chunk_layout makes them add up
    return sums.view(*leading, len(lengths))


def by_row_length(shapes: Sequence[Sequence[int]]) -> list[int]:
    """Positions of ``shapes`` ordered by the length of their rows (elements per index of dim
    0), stable: the order in which :class:`ChunkLayout` makes the fewest blocks."""

    def row_length(position: int) -> int:
        shape = shapes[position]
        return math.prod(shape[1:]) if len(shape) else 1

    return sorted(range(len(shapes)), key=row_length)


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
    matrices: list[tuple[int, int]] = []
    row_chunk: list[int] = []
    chunk_rows: list[int] = []
    tensor_chunks: list[int] = []
    exact: list[bool] = []
    for shape in shapes:
        numel = math.prod(shape)
        rows = (shape[0] if len(shape) else 1) if numel else 0
        matrices.append((rows, numel // rows if rows else 0))
        rows_per_chunk = math.ceil(rows / n_parts)
        starts = range(0, rows, rows_per_chunk) if rows else ()
        for start in starts:
            row_chunk += [len(chunk_rows)] * min(rows_per_chunk, rows - start)
            chunk_rows.append(min(rows_per_chunk, rows - start))
        tensor_chunks.append(len(starts))
        exact += [matrices[-1][1] < EXACT_BELOW] * len(starts)

    def as_tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return ChunkLayout(
        tuple(matrices),
        blocks_of(matrices),
        as_tensor(row_chunk),
        as_tensor(chunk_rows),
        as_tensor(tensor_chunks),
        torch.tensor(exact, dtype=torch.bool, device=device),
    )


def blocks_of(matrices: Sequence[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """``(first element, rows, columns)`` of every block of consecutive non-empty matrices whose
    rows have the same length, in vector order."""
    found: list[tuple[int, int, int]] = []
    start = 0
    for rows, columns in matrices:
        if rows and found and found[-1][2] == columns:
            first, before, _ = found[-1]
            found[-1] = (first, before + rows, columns)
        elif rows:
            found.append((start, rows, columns))
        start += rows * columns
    return tuple(found)
