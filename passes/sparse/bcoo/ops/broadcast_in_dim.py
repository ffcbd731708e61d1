"""`hlopt.bcoo.broadcast_in_dim`: `lax.broadcast_in_dim` of a BCOO array: both buffers are broadcast
(new batch and dense dims; the result buffers have full batch dims) and new sparse dims (all of size
1) get index columns of 0."""

from __future__ import annotations

from typing import Any

from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.record import DATA, DATA_LINEAR, INDICES, INTS, SHAPE, BcooOp, Record, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_broadcast_in_dim(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    dims = c.config["broadcast_dimensions"]
    plan = shapes.broadcast_in_dim(lay, c.config["new_shape"], dims)
    nb, ns = lay.n_batch, lay.n_sparse
    n_sparse = plan.indices[-1]
    dense = [d - n_sparse + 1 for d in dims[nb + ns :]]
    data = b.broadcast(data, plan.data, [*dims[:nb], plan.n_batch, *dense])
    idx = b.broadcast(idx, [*plan.indices[:-1], ns], [*dims[:nb], plan.n_batch, plan.n_batch + 1])
    if n_sparse != ns:
        lead = b.shape_of(idx)[:-1]
        zero = b.full([*lead, 1], 0, b.elem_of(idx))
        cols = [b.slice_dim(idx, len(lead), plan.sparse_cols.index(j), plan.sparse_cols.index(j) + 1)
                if j in plan.sparse_cols else zero for j in range(n_sparse)]
        idx = b.concat(cols, len(lead))
    return [data, idx]


def batched(p: dict[str, Any], size: int) -> dict[str, Any]:
    return {**p, "new_shape": (size, *p["new_shape"]),
            "broadcast_dimensions": (0, *(d + 1 for d in p["broadcast_dimensions"]))}


RECORDS = (Record("broadcast_in_dim", Signature((DATA, INDICES), 2, {"new_shape": SHAPE, "broadcast_dimensions": INTS}),
                   lambda c, d, i: list(shapes.broadcast_in_dim(shapes.operand(c, d, i), c["new_shape"],
                                                                c["broadcast_dimensions"])[4:]),
                   lower_broadcast_in_dim, batched, derivative=DATA_LINEAR),)
