"""`hlopt.bcoo.reshape`: `lax.reshape` of a BCOO array (`dimensions` transposes first); batch, sparse
and dense dims reshape separately."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INTS, SHAPE, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_reshape(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    dims = c.config.get("dimensions")
    plan = shapes.reshape(lay, c.config["new_sizes"], dims if dims else None)
    nb, ns = lay.n_batch, lay.n_sparse
    data = ix.broadcast_batch(data, lay.batch_shape)
    idx = ix.broadcast_batch(idx, lay.batch_shape)
    data = b.transpose(data, [*plan.batch_perm, nb, *(p + nb + 1 for p in plan.dense_perm)])
    idx = b.transpose(idx, [*plan.batch_perm, nb, nb + 1])
    data_shape, idx_shape = shapes.reshape_buffers(lay, plan)
    data = b.reshape(data, data_shape)
    idx = b.reshape(idx, [*plan.batch, lay.nse, ns])
    if ns and plan.sparse:
        sizes = [lay.sparse_shape[p] for p in plan.sparse_perm]
        key = ix.linear_key(ix.columns(idx, plan.sparse_perm), sizes, math.prod(sizes))
        idx = ix.unravel(key, plan.sparse, b.elem_of(idx))
    elif ns:
        data = ix.mask(data, ix.valid(idx, lay.sparse_shape))
        idx = b.full(idx_shape, 0, b.elem_of(idx))
    else:
        idx = b.full(idx_shape, 0, b.elem_of(idx))
    return [data, idx]


def result_shapes(config: Mapping[str, Any], data: Shape, indices: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    lay = shapes.operand(config, data, indices)
    return list(shapes.reshape_buffers(lay, shapes.reshape(lay, config["new_sizes"], config.get("dimensions") or None)))


def batched(p: dict[str, Any], size: int) -> dict[str, Any]:
    dims = p["dimensions"]
    return {**p, "new_sizes": (size, *p["new_sizes"]),
            "dimensions": None if dims is None else (0, *(d + 1 for d in dims))}


def transpose_reshape(t: terms.Terms, ct, data, indices, *, shape, new_sizes, dimensions, **_):
    """The cotangent reshaped and permuted back (zeroed at padding when the sparse dims went dense)."""
    data = t.aval(data)
    lay = shapes.layout(shape, data.shape, indices.shape)
    plan = shapes.reshape(lay, new_sizes, dimensions)
    nb = lay.n_batch
    if lay.n_sparse and not plan.sparse:
        ct = t.where(terms.expand_dense(terms.valid(t, indices, lay.sparse_shape), len(plan.dense)), ct, 0)
    perm = [*plan.batch_perm, nb, *(p + nb + 1 for p in plan.dense_perm)]
    permuted = [(*lay.batch_shape, lay.nse, *lay.dense_shape)[p] for p in perm]
    x = t.transpose(ct.reshape(permuted), [perm.index(i) for i in range(len(perm))])
    return t.sum_to_shape(x, data.shape)


RECORDS = (Record("reshape", Signature((DATA, INDICES), 2, {"new_sizes": SHAPE}, {"dimensions": INTS}), result_shapes,
                   lower_reshape, batched, derivative=Derivative(transpose=transpose_reshape)),)
