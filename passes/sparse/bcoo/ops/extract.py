"""`hlopt.bcoo.extract`: a dense array read at the indices of a BCOO array (0 at padding; without
`assume_unique`, 0 also at every repeat of an index after its first occurrence)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import BOOL, DENSE, INDICES, BcooOp, Derivative, Record, Shape, Signature, same_params
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_extract(c: BcooOp) -> list[Value]:
    arr, idx = c.operands
    lay = shapes.extract_layout(b.shape_of(arr), b.shape_of(idx))
    if 0 in lay.sparse_shape:  # no index is in range
        return [b.full(c.result_shape(0), 0, c.result_elem(0))]
    batch = lay.batch_shape
    bs = math.prod(batch)
    arr_c = b.reshape(arr, [bs, *lay.shape[lay.n_batch :]])
    idx_c = ix.canonical(idx, batch)
    ok = ix.valid(idx_c, lay.sparse_shape)
    if not c.config.get("assume_unique", True):
        ok = b.and_(ok, first_occurrences(idx_c, lay.sparse_shape))
    out = ix.mask(ix.gather_sparse(arr_c, ix.where(ok, idx_c, [0] * lay.n_sparse)), ok)
    return [b.reshape(out, c.result_shape(0))]


def first_occurrences(idx: Value, sizes: Sequence[int]) -> Value:
    """For canonical `idx[B, N, S]`: i1 `[B, N]`, true at the first entry (lowest position) with each index."""
    bs, n, _ = b.shape_of(idx)
    key = ix.linear_key(idx, sizes, math.prod(sizes), ix.key_type(sizes))
    key_s, pos_s = ix.sort_positions(key)  # equal keys keep their order: the first of a run is the first entry
    first, _ = ix.segments(key_s)
    it = b.elem_of(pos_s)
    flags = ix.scatter_rows(b.full([bs, n], 0, it), pos_s, b.convert(first, it), "set")
    return b.compare(flags, b.zeros_like(flags), "NE")


def result_shapes(config: Mapping[str, Any], arr: Shape, indices: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    if tuple(config["shape"]) != tuple(arr):
        raise ValueError(f"shape {tuple(config['shape'])} is not the shape of the dense operand {tuple(arr)}")
    lay = shapes.extract_layout(arr, indices)
    shapes.operand(config, lay.data, indices)
    return [shapes.extract(lay)]


def transpose_extract(t: terms.Terms, ct, arr, indices, *, assume_unique):
    """The cotangent scattered back at the indices (todense); without `assume_unique` only first
    occurrences read `arr`: 1 there, 0 at repeats and padding."""
    shape = t.aval(arr).shape
    if not assume_unique:
        ct = ct * terms.extract(t, indices, t.ones(shape, ct.dtype), assume_unique=False)
    return terms.todense(t, ct, indices, shape)


def prepare_batch(t: terms.Terms, batched: list, params: dict, size: int) -> list:
    """The dense array defines the shape: it needs every example."""
    arr, indices = batched
    return [t.broadcast_to(arr, (size, *arr.shape[1:])), indices]


RECORDS = (Record("extract", Signature((DENSE, INDICES), 1, {}, {"assume_unique": BOOL}), result_shapes, lower_extract,
                   batched=same_params, array_shape=lambda params, operands: operands[0],
                   derivative=Derivative(transpose=transpose_extract), prepare_batch=prepare_batch),)
