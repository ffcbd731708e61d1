"""`hlopt.bcoo.sum_duplicates`: entries with one index summed into one, `nse` entries per batch
(the smallest indices in row-major order, then padding)."""

from __future__ import annotations

import math

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INT, BcooOp, Derivative, Record, Signature, same_params
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_sum_duplicates(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    nse = c.config["nse"]
    batch = lay.max_batch
    data_c, idx_c = ix.canonical(data, batch), ix.canonical(idx, batch)
    if lay.n_sparse == 0:
        total = b.reduce(data_c, [1])
        bs = math.prod(batch)
        total = b.reshape(total, [bs, 1, *lay.dense_shape])
        nd = lay.n_dense
        out = b.pad(total, [0] * (2 + nd), [0, nse - 1] + [0] * nd, [0] * (2 + nd), b.scalar(0, b.elem_of(data))) \
            if nse else b.slice_dim(total, 1, 0, 0)
        indices = b.full([bs, nse, 0], 0, b.elem_of(idx))
    elif 0 in lay.sparse_shape:  # every entry is padding
        out = b.full([math.prod(batch), nse, *lay.dense_shape], 0, b.elem_of(data))
        indices = ix.per_column(b.full([math.prod(batch), nse, lay.n_sparse], 0, b.elem_of(idx)), lay.sparse_shape)
    else:
        out, keys = ix.sum_duplicates_keys(data_c, idx_c, lay.sparse_shape, nse)
        indices = ix.unravel(keys, lay.sparse_shape, b.elem_of(idx))
    return [ix.restore(out, batch, c.result_shape(0)), ix.restore(indices, batch, c.result_shape(1))]


def transpose_sum_duplicates(t: terms.Terms, ct, data, indices, *, shape, nse, **_):
    """Each input entry receives the cotangent of the unique entry it was summed into: a lookup of
    its index among the output's (multiply_sparse driven by the input)."""
    data = t.aval(data)
    lay = shapes.layout(shape, data.shape, indices.shape)
    nb = lay.n_batch
    if lay.n_sparse == 0:
        first = (ct[(slice(None),) * nb + (slice(0, 1),)] if nse
                 else t.zeros(ct.shape[:nb] + (1,) + ct.shape[nb + 1 :], ct.dtype))
        return t.sum_to_shape(t.broadcast_to(first, (*first.shape[:nb], lay.nse, *first.shape[nb + 1 :])), data.shape)
    flags = dict(indices_sorted=False, unique_indices=False)
    _, out_indices = t.bind("sum_duplicates", t.zeros(data.shape, data.dtype), indices, shape=shape, nse=nse, **flags)
    looked_up, _ = t.bind("multiply_sparse", t.ones(data.shape, data.dtype), indices, ct, out_indices,
                          shape=tuple(shape), rhs_shape=tuple(shape), driver="lhs", **flags)
    return t.sum_to_shape(looked_up, data.shape)


RECORDS = (Record("sum_duplicates", Signature((DATA, INDICES), 2, {"nse": INT}),
                   lambda c, d, i: list(shapes.sum_duplicates(shapes.operand(c, d, i), c["nse"])), lower_sum_duplicates,
                   batched=same_params, derivative=Derivative(transpose=transpose_sum_duplicates)),)
