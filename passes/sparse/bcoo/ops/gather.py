"""`hlopt.bcoo.gather`: windows of `slice_sizes` of a BCOO array at `starts[windows, rank]` (clamped
into the array, as dynamic_slice does), stacked along a new leading batch dim."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, DATA_LINEAR, INDICES, SHAPE, STARTS, BcooOp, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_gather(c: BcooOp) -> list[Value]:
    """Windows of `slice_sizes` at `starts[G, rank]` (clamped into the array, as dynamic_slice does)."""
    lay = c.layout()
    data, idx, starts = c.operands
    sizes = list(c.config["slice_sizes"])
    nb, ns = lay.n_batch, lay.n_sparse
    room = [n - s for n, s in zip(lay.shape, sizes)]
    starts = b.minimum(b.maximum(starts, b.zeros_like(starts)), ix.per_column(starts, room))
    dense = list(range(nb + ns, len(lay.shape)))
    data = _gather_windows(data, starts, lay, [*range(nb), *dense], sizes)
    idx = _gather_windows(idx, starts, lay, list(range(nb)), sizes)
    if ns:
        batch = c.result_shape(0)[: nb + 1]
        offsets = b.convert(ix.columns(starts, range(nb, nb + ns)), b.elem_of(idx))
        ishape = b.shape_of(idx)
        shifted = b.sub(idx, b.broadcast(offsets, ishape, [0, len(ishape) - 1]))
        keep = ix.valid(shifted, sizes[nb : nb + ns])
        idx = ix.where(keep, shifted, sizes[nb : nb + ns])
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(keep, batch))
    return [data, idx]


def _gather_windows(buf: Value, starts: Value, lay: shapes.Layout, dims: Sequence[int], sizes: Sequence[int]) -> Value:
    """`buf[*batch, nse, *rest]` cut to the windows along the array dims `dims` (batch dims the
    buffer broadcasts stay 1): `[G, *window]`."""
    shape = b.shape_of(buf)
    windows = b.shape_of(starts)[0]

    nb = lay.n_batch

    def axis(d: int) -> int:  # the buffer axis of array dim d (batch or dense)
        return d if d < nb else d - lay.n_sparse + 1

    moving = [d for d in dims if not (d < nb and shape[d] != lay.shape[d])]
    slice_sizes = list(shape)
    for d in moving:
        slice_sizes[axis(d)] = sizes[d]
    if not moving:
        return b.broadcast(buf, [windows, *shape], range(1, len(shape) + 1))
    return b.gather(
        buf, b.convert(ix.columns(starts, moving), b.elem_of(starts)), offset_dims=range(1, len(shape) + 1),
        collapsed_slice_dims=[], operand_batching_dims=[], start_indices_batching_dims=[],
        start_index_map=[axis(d) for d in moving], index_vector_dim=1, slice_sizes=slice_sizes,
    )


def result_shapes(config: Mapping[str, Any], data: Shape, indices: Shape, starts: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    lay = shapes.operand(config, data, indices)
    if len(starts) != 2 or starts[1] != len(lay.shape):
        raise ValueError(f"gather start indices must have shape (windows, {len(lay.shape)}), got {tuple(starts)}")
    return list(shapes.gather(lay, config["slice_sizes"], starts[0])[1:])


def batch_gather(t: terms.Terms, args, dims, *, shape, slice_sizes, **params):
    """vmap: example s's windows read batch row s of the operand (one window list)."""
    size = t.mapped_size(args, dims)
    data, indices, starts = (t.to_front(a, d) for a, d in zip(args, dims))
    windows = starts.shape[1]
    starts = t.broadcast_to(starts, (size, *starts.shape[1:]))
    rows = t.broadcast_to(t.arange(0, size, starts.dtype).reshape(size, 1, 1), (size, windows, 1))
    starts = t.concatenate([rows, starts], 2).reshape(size * windows, len(shape) + 1)
    outs = t.bind("gather", data, indices, starts, shape=(size, *shape), slice_sizes=(1, *slice_sizes), **params)
    return [x.reshape(size, windows, *x.shape[2:]) for x in outs], [0, 0]


RECORDS = (Record("gather", Signature((DATA, INDICES, STARTS), 2, {"slice_sizes": SHAPE}), result_shapes,
                   lower_gather, derivative=DATA_LINEAR, batch=batch_gather),)
