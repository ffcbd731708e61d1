"""`hlopt.bcoo.sort_indices`: the entries of each batch in row-major order of their indices
(padding last, as the index `shape`)."""

from __future__ import annotations

import math

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.record import DATA, DATA_LINEAR, INDICES, BcooOp, Record, Signature, same_params
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_sort_indices(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    if lay.n_sparse == 0:
        return [data, idx]
    if lay.nse == 0 or 0 in lay.sparse_shape:  # nothing to sort: every entry is padding
        return [b.broadcast_to(data, c.result_shape(0)), ix.per_column(idx, lay.sparse_shape)]
    batch = lay.max_batch
    data_c, idx_c = ix.canonical(data, batch), ix.canonical(idx, batch)
    bs, n = b.shape_of(idx_c)[:2]
    total = math.prod(lay.sparse_shape)
    key = ix.linear_key(idx_c, lay.sparse_shape, total)
    key_s, perm = ix.sort_positions(key)
    # Sorted keys give back the indices; every padding entry comes out as `shape` (canonical padding).
    idx_s = ix.unravel(key_s, lay.sparse_shape, b.elem_of(idx_c))
    data_s = ix.gather_rows(data_c, perm)
    return [ix.restore(data_s, batch, c.result_shape(0)), ix.restore(idx_s, batch, c.result_shape(1))]


RECORDS = (Record("sort_indices", Signature((DATA, INDICES), 2),
                   lambda c, d, i: list(shapes.sort_indices(shapes.operand(c, d, i))), lower_sort_indices,
                   batched=same_params, derivative=DATA_LINEAR),)
