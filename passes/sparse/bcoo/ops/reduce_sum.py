"""`hlopt.bcoo.reduce_sum`: the sum over `axes` of a BCOO array."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INTS, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_reduce_sum(c: BcooOp) -> list[Value]:
    """Dense axes are summed in the data, batch axes folded into nse (or scaled), sparse axes dropped
    from the indices. An entry out of range in a summed sparse dim becomes padding in the kept sparse
    dims (its data is left as is: less work than JAX's masking of the data); with no sparse dim
    kept, its data is zeroed (`reduce_sum_zeroes_data`)."""
    lay = c.layout()
    data, idx = c.operands
    axes = sorted(set(c.config["axes"]))
    plan = shapes.reduce_sum(lay, axes)
    nb, ns = lay.n_batch, lay.n_sparse
    kept_cols = [d - nb for d in range(nb, nb + ns) if d not in axes]
    summed_cols = [d - nb for d in range(nb, nb + ns) if d in axes]
    data = b.reduce(data, [a - ns + 1 for a in axes if a >= nb + ns])
    if shapes.reduce_sum_zeroes_data(lay, axes):
        batch = lay.max_batch
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(ix.valid(idx, lay.sparse_shape), batch))
    factor = math.prod(lay.shape[a] for a in plan.scale)
    if factor != 1:
        data = b.mul(data, b.full(b.shape_of(data), factor, b.elem_of(data)))
    kept = ix.columns(idx, kept_cols)
    if kept_cols and summed_cols:
        inside = ix.valid(ix.columns(idx, summed_cols), [lay.sparse_shape[k] for k in summed_cols])
        kept = ix.where(inside, kept, [lay.sparse_shape[k] for k in kept_cols])
    idx = kept
    kept = [a for a in range(nb) if a not in axes]
    target = _batch_target(lay, plan, kept)
    outs = []
    for buf, out in ((data, plan.data), (idx, plan.indices)):
        buf = ix.broadcast_batch(buf, target)
        rank = len(b.shape_of(buf))
        buf = b.transpose(buf, [*kept, *plan.fold, *[a for a in range(nb) if a in plan.scale], *range(nb, rank)])
        outs.append(b.reshape(buf, out))
    return outs


def _batch_target(lay: shapes.Layout, plan: shapes.ReduceSumPlan, kept: list[int]) -> list[int]:
    """Each batch dim's size before the fold: the array's (folded into nse), 1 (scaled) or the result's (kept)."""
    return [lay.shape[a] if a in plan.fold else 1 if a in plan.scale else plan.batch[kept.index(a)]
            for a in range(lay.n_batch)]


def result_shapes(config: Mapping[str, Any], data: Shape, indices: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    plan = shapes.reduce_sum(shapes.operand(config, data, indices), config["axes"])
    return [plan.data, plan.indices]


def transpose_reduce_sum(t: terms.Terms, ct, data, indices, *, shape, axes, **_):
    """The cotangent broadcast back over the summed axes (batch axes unfolded from nse, scaled
    ones multiplied, dense ones broadcast; zeroed where the lowering zeroes the data)."""
    data = t.aval(data)
    lay = shapes.layout(shape, data.shape, indices.shape)
    plan = shapes.reduce_sum(lay, axes)
    nb, ns = lay.n_batch, lay.n_sparse
    axes = sorted(set(axes))
    kept = [a for a in range(nb) if a not in axes]
    scale = [a for a in range(nb) if a in plan.scale]
    order = [*kept, *plan.fold, *scale]
    target = _batch_target(lay, plan, kept)
    dense_kept = ct.shape[len(plan.batch) + 1 :]
    x = ct.reshape(*[target[a] for a in order], lay.nse, *dense_kept)
    x = t.transpose(x, [*(order.index(i) for i in range(len(order))), *range(nb, x.ndim)])
    factor = math.prod(lay.shape[a] for a in plan.scale)
    if factor != 1:
        x = x * t.asarray(factor, x.dtype)
    if shapes.reduce_sum_zeroes_data(lay, axes):
        x = t.where(terms.expand_dense(terms.valid(t, indices, lay.sparse_shape), len(dense_kept)), x, 0)
    x = t.expand_dims(x, [a - ns + 1 for a in axes if a >= nb + ns])
    return t.sum_to_shape(t.broadcast_to(x, (*x.shape[: nb + 1], *data.shape[nb + 1 :])), data.shape)


RECORDS = (Record("reduce_sum", Signature((DATA, INDICES), 2, {"axes": INTS}), result_shapes, lower_reduce_sum,
                   batched=lambda p, size: {**p, "axes": tuple(a + 1 for a in p["axes"])},
                   derivative=Derivative(transpose=transpose_reduce_sum)),)
