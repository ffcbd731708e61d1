"""`hlopt.bcoo.dynamic_slice`: `lax.dynamic_slice` of a BCOO array. Start indices are wrapped once
when negative and clamped so the slice fits (lax.dynamic_slice's rule); batch and dense dims slice
the buffers, sparse dims shift the indices and turn entries outside the window into padding (data 0)."""

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


def _clamped_starts(starts: Value, shape: Sequence[int], sizes: Sequence[int]) -> list[Value]:
    """Scalar start per dim: wrapped once when negative, then clamped into `[0, shape - size]`."""
    elem = b.elem_of(starts)
    out = []
    for d, (n, s) in enumerate(zip(shape, sizes, strict=True)):
        x = b.reshape(b.slice_dim(starts, 0, d, d + 1), [])
        x = b.select(b.compare(x, b.scalar(0, elem), "LT"), b.add(x, b.scalar(n, elem)), x)
        out.append(b.clamp(b.scalar(0, elem), x, b.scalar(n - s, elem)))
    return out


def lower_dynamic_slice(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx, starts = c.operands
    sizes = list(c.config["slice_sizes"])
    nb, ns = lay.n_batch, lay.n_sparse
    first = _clamped_starts(starts, lay.shape, sizes)
    zero = b.scalar(0, b.elem_of(starts))

    def batch_part(buf: Value) -> tuple[list[Value], list[int]]:
        full = [b.shape_of(buf)[i] == lay.shape[i] for i in range(nb)]
        return ([first[i] if full[i] else zero for i in range(nb)], [sizes[i] if full[i] else 1 for i in range(nb)])

    st, sz = batch_part(data)
    data = b.dynamic_slice(data, [*st, zero, *first[nb + ns :]], [*sz, lay.nse, *sizes[nb + ns :]])
    st, sz = batch_part(idx)
    idx = b.dynamic_slice(idx, [*st, zero, zero], [*sz, lay.nse, ns])
    if ns:
        elem = b.elem_of(idx)
        lead = b.shape_of(idx)
        offsets = b.concat([b.reshape(b.convert(s, elem), [1]) for s in first[nb : nb + ns]], 0)
        shifted = b.sub(idx, b.broadcast(offsets, lead, [len(lead) - 1]))
        keep = ix.valid(shifted, sizes[nb : nb + ns])
        idx = ix.where(keep, shifted, sizes[nb : nb + ns])
        batch = c.result_shape(0)[:nb]
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(keep, batch))
    return [data, idx]


def result_shapes(config: Mapping[str, Any], data: Shape, indices: Shape, starts: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    lay = shapes.operand(config, data, indices)
    if starts != (len(lay.shape),):
        raise ValueError(f"dynamic_slice start indices must have shape ({len(lay.shape)},), got {starts}")
    return list(shapes.dynamic_slice(lay, config["slice_sizes"])[1:])


def batch_dynamic_slice(t: terms.Terms, args, dims, *, shape, slice_sizes, **params):
    """vmap: unmapped starts slice the new batch dim whole; mapped starts cut one window per example
    (a gather of one window per example)."""
    size = t.mapped_size(args, dims)
    data, indices, starts = (t.to_front(a, d) for a, d in zip(args, dims))
    if dims[2] is None:
        starts = t.concatenate([t.zeros((1,), starts.dtype), starts[0]], 0)
        outs = t.bind("dynamic_slice", data, indices, starts, shape=(size, *shape), slice_sizes=(size, *slice_sizes),
                      **params)
        return t.from_front(outs, size, True)
    wrapped = t.where(starts < 0, starts + t.asarray(shape, starts.dtype).reshape(1, -1), starts)
    rows = t.arange(0, size, starts.dtype).reshape(size, 1)
    windows = t.concatenate([rows, wrapped], 1)
    outs = t.bind("gather", data, indices, windows, shape=(size, *shape), slice_sizes=(1, *slice_sizes), **params)
    return [x.reshape(size, *x.shape[2:]) for x in outs], [0, 0]


RECORDS = (Record("dynamic_slice", Signature((DATA, INDICES, STARTS), 2, {"slice_sizes": SHAPE}), result_shapes,
                   lower_dynamic_slice, derivative=DATA_LINEAR, batch=batch_dynamic_slice),)
