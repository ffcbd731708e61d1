"""Two scratch BCOO ops, written as a record module under `hlopt.passes.sparse.bcoo.ops/` would be (it
imports no jax): test_bcoo_records.py adds them to a scratch registry and checks that
`hlopt.sparse.rules` builds working primitives (jit, vmap, grad, lower-bcoo) from this alone.

- `scale`: the data times the integer `factor` (linear in the data; its transpose in the
  record's own terms);
- `times_dense`: the data times a dense array of the array's shape read at the indices
  (bilinear in the data and the dense array; its transposes through other BCOO ops: the dense
  array at the indices is `extract`, the dense cotangent `todense`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import (
    DATA, DENSE, INDICES, INT, BcooOp, Derivative, Record, Shape, Signature, same_params,
)


def lower_scale(c: BcooOp) -> list:
    data, idx = c.operands
    return [b.mul(data, b.full(b.shape_of(data), c.config["factor"], b.elem_of(data))), idx]


SCALE = Record("scale", Signature((DATA, INDICES), 2, {"factor": INT}),
               lambda c, d, i: [shapes.operand(c, d, i).data, i], lower_scale, batched=same_params,
               derivative=Derivative(transpose=lambda t, ct, data, indices, *, factor, **_: ct * factor))


def lower_times_dense(c: BcooOp) -> list:
    data, idx, arr = c.operands
    lay = c.layout()
    batch = lay.max_batch
    arr_c = b.reshape(ix.broadcast_batch(arr, batch), [math.prod(batch), *lay.shape[lay.n_batch :]])
    ok = ix.valid(ix.canonical(idx, batch), lay.sparse_shape)
    picked = ix.mask(ix.gather_sparse(arr_c, ix.canonical(idx, batch)), ok)  # 0 at padding
    product = b.mul(ix.canonical(data, batch), b.reshape(picked, [math.prod(batch), lay.nse]))
    return [b.reshape(product, c.result_shape(0))]


def times_dense_shapes(config: Mapping[str, Any], data: Shape, indices: Shape, arr: Shape) -> list[Shape]:
    lay = shapes.operand(config, data, indices)
    if tuple(arr) != lay.shape or lay.n_dense:
        raise ValueError(f"the dense operand {tuple(arr)} must have the array's shape {lay.shape}, without dense dims")
    return [(*lay.max_batch, lay.nse)]


def transpose_times_dense(t: terms.Terms, ct, data, indices, arr, *, shape, **_):
    if t.is_undefined(data):  # ct times the dense array at the indices
        return t.sum_to_shape(ct * terms.extract(t, indices, arr), t.aval(data).shape)
    return terms.todense(t, ct * data, indices, shape)  # the dense array's cotangent


def prepare_batch(t: terms.Terms, operands: list, params: dict, size: int) -> list:
    """The dense array has the (batched) array's shape: every example's."""
    data, indices, arr = operands
    return [data, indices, t.broadcast_to(arr, (size, *arr.shape[1:]))]


TIMES_DENSE = Record("times_dense", Signature((DATA, INDICES, DENSE), 1), times_dense_shapes, lower_times_dense,
                     batched=same_params, prepare_batch=prepare_batch,
                     derivative=Derivative(linear=(0, 2), transpose=transpose_times_dense))

RECORDS = (SCALE, TIMES_DENSE)
