"""`hlopt.bcoo.todense`: the dense array of a BCOO array (a scatter-add of the data at its indices)."""

from __future__ import annotations

import math

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, BcooOp, Derivative, Record, Signature, same_params
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_todense(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    batch = lay.batch_shape
    bs = math.prod(batch)
    data_c, idx_c = ix.canonical(data, batch), ix.canonical(idx, batch)
    out_c = [bs, *lay.sparse_shape, *lay.dense_shape]
    if lay.n_sparse == 0:
        out = b.reduce(data_c, [1])
    elif lay.nse == 0 or math.prod(out_c) == 0:
        out = b.full(out_c, 0, b.elem_of(data))
    else:
        # An update whose index is outside the array (padding, negative or past the end) is dropped.
        out = ix.scatter_sparse(b.full(out_c, 0, b.elem_of(data)), idx_c, data_c)
    return [b.reshape(out, lay.shape)]


def transpose_todense(t: terms.Terms, ct, data, indices, *, shape, **_):
    """The data cotangent is the dense cotangent read at the indices (extract: todense's transpose)."""
    return t.sum_to_shape(terms.extract(t, indices, ct), t.aval(data).shape)


RECORDS = (Record("todense", Signature((DATA, INDICES), 1), lambda c, d, i: [shapes.operand(c, d, i).shape],
                   lower_todense, batched=same_params, derivative=Derivative(transpose=transpose_todense)),)
