"""`hlopt.bcoo.slice`: `lax.slice` of a BCOO array; sparse dims shift the indices and entries outside
the slice become padding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INTS, BcooOp, Derivative, Record, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_slice(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    start, limit, strides = c.config["start_indices"], c.config["limit_indices"], c.config["strides"]
    nb, ns = lay.n_batch, lay.n_sparse

    def batch_slice(buf: Value, rest: Sequence[tuple[int, int, int]]) -> Value:
        bshape = b.shape_of(buf)
        spec = [
            (start[i], limit[i], strides[i]) if bshape[i] == lay.shape[i] else (0, 1, 1) for i in range(nb)
        ] + list(rest)
        return b.slice_(buf, [s[0] for s in spec], [s[1] for s in spec], [s[2] for s in spec])

    dense = [(start[d], limit[d], strides[d]) for d in range(nb + ns, len(lay.shape))]
    data = batch_slice(data, [(0, lay.nse, 1), *dense])
    idx = batch_slice(idx, [(0, lay.nse, 1), (0, ns, 1)])
    if ns:
        st, lim, sd = (list(x[nb : nb + ns]) for x in (start, limit, strides))
        # `st <= idx < lim` is one unsigned compare of `idx - st` (with wrap-around) against `lim - st`.
        shifted = b.sub(idx, ix.per_column(idx, st))
        inside = ix.in_range(shifted, [e - s for s, e in zip(st, lim)])
        if any(t != 1 for t in sd):  # integer division only where a stride needs it; unsigned needs no sign fix-ups
            wrapped = b.convert(shifted, b.unsigned(b.elem_of(idx)))
            steps = ix.per_column(wrapped, sd)
            inside = b.and_(inside, b.compare(b.rem(wrapped, steps), b.zeros_like(wrapped), "EQ"))
            shifted = b.convert(b.div(wrapped, steps), b.elem_of(idx))
        keep = ix.fold_columns(inside)
        new_sizes = [(e - s + t - 1) // t for s, e, t in zip(st, lim, sd)]
        idx = ix.where(keep, shifted, new_sizes)
        batch = c.result_shape(0)[:nb]
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(keep, batch))
    return [data, idx]


def batched(p: dict[str, Any], size: int) -> dict[str, Any]:
    return {**p, "start_indices": (0, *p["start_indices"]), "limit_indices": (size, *p["limit_indices"]),
            "strides": (1, *p["strides"])}


def transpose_slice(t: terms.Terms, ct, data, indices, *, shape, start_indices, limit_indices, strides, **_):
    """The cotangent of each kept entry (its index in the window) written back into the sliced
    batch rows and dense window of the data."""
    data = t.aval(data)
    lay = shapes.layout(shape, data.shape, indices.shape)
    nb, ns = lay.n_batch, lay.n_sparse
    if ns:
        sl = [slice(None)] * nb
        for i in range(nb):
            if indices.shape[i] == lay.shape[i]:
                sl[i] = slice(start_indices[i], limit_indices[i], strides[i])
        idx = indices[tuple(sl)]
        st, lim, sd = (terms.per_column(t, x[nb : nb + ns], idx) for x in (start_indices, limit_indices, strides))
        keep = t.all((idx >= st) & (idx < lim) & ((idx - st) % sd == 0), -1)
        ct = t.where(terms.expand_dense(keep, lay.n_dense), ct, 0)
    sliced_shape = list(data.shape)
    index = []
    for i in range(len(data.shape)):
        d = i if i < nb else (None if i == nb else i + ns - 1)
        if d is not None and (i >= nb or data.shape[i] == lay.shape[i]):
            index.append(slice(start_indices[d], limit_indices[d], strides[d]))
            sliced_shape[i] = len(range(start_indices[d], limit_indices[d], strides[d]))
        else:
            index.append(slice(None))
    return t.set_at(t.zeros(data.shape, ct.dtype), tuple(index), t.sum_to_shape(ct, sliced_shape))


RECORDS = (Record("slice",
                   Signature((DATA, INDICES), 2, {"start_indices": INTS, "limit_indices": INTS, "strides": INTS}),
                   lambda c, d, i: list(shapes.slice_shapes(shapes.operand(c, d, i), c["start_indices"],
                                                            c["limit_indices"], c["strides"])[1:]),
                   lower_slice, batched, derivative=Derivative(transpose=transpose_slice)),)
