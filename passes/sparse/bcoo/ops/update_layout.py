"""`hlopt.bcoo.update_layout`: the same array with dims moved between batch, sparse and dense
(`n_batch`, `n_dense` of the config are the new layout's)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.record import DATA, DATA_LINEAR, INDICES, BcooOp, Record, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_update_layout(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    n_batch, n_dense = c.config["n_batch"], c.config["n_dense"]
    data, idx = ix.broadcast_batch(data, lay.batch_shape), ix.broadcast_batch(idx, lay.batch_shape)
    nb, nd = lay.n_batch, lay.n_dense
    shape = lay.shape
    if n_dense < nd:
        data, idx = _dense_to_sparse(data, idx, nb, nd - n_dense)
        nd = n_dense
    if n_batch < nb:
        data, idx = ix.batch_to_sparse(data, idx, n_batch, nb - n_batch)
        nb = n_batch
    if n_dense > nd:
        ns = len(shape) - nb - nd
        data, idx = _sparse_to_dense(data, idx, nb, shape[nb + ns - (n_dense - nd) : nb + ns])
    if n_batch > nb:
        data, idx = _sparse_to_batch(data, idx, nb, shape[nb:n_batch])
    return [data, idx]


def _dense_to_sparse(data: Value, idx: Value, nb: int, n: int) -> tuple[Value, Value]:
    """The first `n` dense dims become the last sparse dims."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    moved = ds[nb + 1 : nb + 1 + n]
    m = math.prod(moved)
    nse, s = ish[nb], ish[nb + 1]
    data = b.reshape(data, [*ds[:nb], nse * m, *ds[nb + 1 + n :]])
    grid = ix.unravel(b.iota([m], 0, b.i64()), moved, b.elem_of(idx))
    grid = b.broadcast(grid, [*ish[:nb], nse, m, n], [nb + 1, nb + 2])
    old = b.broadcast(idx, [*ish[:nb], nse, m, s], [*range(nb + 1), nb + 2])
    idx = b.reshape(b.concat([old, grid], nb + 2), [*ish[:nb], nse * m, s + n])
    return data, idx


def _one_hot(cols: Value, sizes: Sequence[int], lead: int) -> Value:
    """`cols[*L, n]` -> i1 `[*L, *sizes]`: true at the position the columns name."""
    shape = b.shape_of(cols)
    out = [*shape[:lead], *sizes]
    hot = None
    for k, size in enumerate(sizes):
        col = b.reshape(b.slice_dim(cols, lead, k, k + 1), shape[:lead])
        eq = b.compare(b.broadcast(col, out, range(lead)), b.iota(out, lead + k, b.elem_of(cols)), "EQ")
        hot = eq if hot is None else b.and_(hot, eq)
    return hot


def _sparse_to_dense(data: Value, idx: Value, nb: int, sizes: Sequence[int]) -> tuple[Value, Value]:
    """The last `len(sizes)` sparse dims become the first dense dims."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    n, s = len(sizes), ish[-1]
    hot = _one_hot(ix.columns(idx, range(s - n, s)), sizes, nb + 1)
    out = [*ds[: nb + 1], *sizes, *ds[nb + 1 :]]
    spread = b.broadcast(data, out, [*range(nb + 1), *range(nb + 1 + n, len(out))])
    data = b.select(b.broadcast(hot, out, range(nb + 1 + n)), spread, b.zeros_like(spread))
    return data, ix.columns(idx, range(s - n))


def _sparse_to_batch(data: Value, idx: Value, nb: int, sizes: Sequence[int]) -> tuple[Value, Value]:
    """The first `len(sizes)` sparse dims become the last batch dims."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    n, s, nse = len(sizes), ish[-1], ish[-2]
    hot = _one_hot(ix.columns(idx, range(n)), sizes, nb + 1)
    hot = b.transpose(hot, [*range(nb), *range(nb + 1, nb + 1 + n), nb])
    out = [*ds[:nb], *sizes, *ds[nb:]]
    spread = b.broadcast(data, out, [*range(nb), *range(nb + n, len(out))])
    data = b.select(b.broadcast(hot, out, range(nb + n + 1)), spread, b.zeros_like(spread))
    rest = ix.columns(idx, range(n, s))
    idx = b.broadcast(rest, [*ish[:nb], *sizes, nse, s - n], [*range(nb), nb + n, nb + n + 1])
    return data, idx


RECORDS = (Record("update_layout", Signature((DATA, INDICES), 2),
                   lambda c, d, i: list(shapes.update_layout(shapes.layout(c["shape"], d, i), c["n_batch"],
                                                             c["n_dense"])),
                   lower_update_layout, batched=lambda p, size: {**p, "n_batch": p["n_batch"] + 1},
                   derivative=DATA_LINEAR),)
