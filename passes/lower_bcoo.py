"""The `lower-bcoo` pass: every `hlopt.bcoo.*` custom_call becomes plain StableHLO.

Each op's rule lives in `LOWERINGS`, keyed by the op name after `hlopt.bcoo.`.
Rules see a `BcooOp` (operands, result types, decoded `backend_config`) and
return the replacement values. Most rules first bring the buffers to a
canonical form with one batch dimension, `data[B, nse, *dense]` and
`indices[B, nse, n_sparse]`, so each algorithm is written once for every
`n_batch`. An index outside `[0, size)` in any sparse dim marks padding.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes import bcoo_index as ix
from hlopt.passes import bcoo_products as products
from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes import bcoo_structure as structure
from hlopt.passes import builders as b
from hlopt.passes.base import Pass, PassError
from hlopt.passes.bcoo_config import PREFIX, BcooOp, is_bcoo_op, read
from hlopt.passes.mlir import ir
from hlopt.passes.walk import walk_ops

Value = ir.Value


# ---------------------------------------------------------------------------
# Rules, one per op


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
        ok = b.and_(ok, structure.first_occurrences(idx_c, lay.sparse_shape))
    out = ix.mask(ix.gather_sparse(arr_c, ix.where(ok, idx_c, [0] * lay.n_sparse)), ok)
    return [b.reshape(out, c.result_shape(0))]


def lower_multiply_dense(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx, v = c.operands
    out_shape = c.result_shape(0)
    vs = b.shape_of(v)
    if not vs:
        return [b.mul(data, b.broadcast(v, b.shape_of(data), []))]
    if 0 in lay.sparse_shape:  # every entry is padding: there is no element of v to read
        return [b.full(out_shape, 0, c.result_elem(0))]
    nb, ns = lay.n_batch, lay.n_sparse
    v = b.reshape(v, [1] * (len(lay.shape) - len(vs)) + vs)
    vs = b.shape_of(v)
    batch = out_shape[:nb]
    bs = math.prod(batch)
    data_c = ix.canonical(data, batch)
    idx_c = ix.canonical(idx, batch)
    v_c = b.reshape(ix.broadcast_batch(v, batch), [bs, *vs[nb:]])
    keep = [1 if s > 1 else 0 for s in vs[nb : nb + ns]]
    where = idx_c if all(keep) else b.mul(idx_c, ix.per_column(idx_c, keep))
    # Padding entries read a clamped element, as in JAX; their data is never used.
    gathered = b.broadcast_to(ix.gather_sparse(v_c, where), b.shape_of(data_c))
    return [b.reshape(b.mul(data_c, gathered), out_shape)]


def lower_fromdense(c: BcooOp) -> list[Value]:
    (mat,) = c.operands
    shape = b.shape_of(mat)
    nb, nd, nse = c.config["n_batch"], c.config["n_dense"], c.config["nse"]
    ns = len(shape) - nb - nd
    batch, sparse, dense = shape[:nb], shape[nb : nb + ns], shape[nb + ns :]
    bs, total = math.prod(batch), math.prod(sparse)
    mat_c = b.reshape(mat, [bs, total, *dense])
    elem = b.elem_of(mat)
    if total == 0:  # nothing to store: zero data, padding indices
        data = b.full(c.result_shape(0), 0, elem)
        indices = ix.per_column(b.full(c.result_shape(1), 0, c.result_elem(1)), sparse)
        return [data, indices]
    if ns == 0:
        data = b.slice_dim(mat_c, 1, 0, 0) if nse == 0 else b.pad(
            mat_c, [0] * (2 + nd), [0, nse - 1] + [0] * nd, [0] * (2 + nd), b.scalar(0, elem)
        )
        indices = b.full([bs, nse, 0], 0, c.result_elem(1))
    else:
        nonzero = b.reduce(b.compare(mat_c, b.zeros_like(mat_c), "NE"), range(2, 2 + nd), "or")
        it = ix.index_type(total + 1)
        rank = b.sub(b.prefix_scan(b.convert(nonzero, it), 1), b.full([bs, total], 1, it))
        target = b.select(nonzero, rank, b.full([bs, total], nse, it))
        where = ix.scatter_rows(b.full([bs, nse], total, it), target, b.iota([bs, total], 1, it), "set")
        ok = b.compare(where, b.full([bs, nse], total, it), "LT")
        data = ix.mask(ix.gather_rows(mat_c, b.select(ok, where, b.zeros_like(where))), ok)
        indices = ix.unravel(where, sparse, c.result_elem(1))
    return [b.reshape(data, c.result_shape(0)), b.reshape(indices, c.result_shape(1))]


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


def lower_transpose(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    perm = c.config["permutation"]
    nb, ns = lay.n_batch, lay.n_sparse
    dense = [p - ns + 1 for p in perm[nb + ns :]]
    cols = [p - nb for p in perm[nb : nb + ns]]
    data = b.transpose(data, [*perm[:nb], nb, *dense])
    idx = b.transpose(ix.columns(idx, cols), [*perm[:nb], nb, nb + 1])
    return [data, idx]


def lower_squeeze(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    dims = set(c.config["dimensions"])
    nb, ns = lay.n_batch, lay.n_sparse
    squeezed = [d - nb for d in range(nb, nb + ns) if d in dims]
    kept = [d - nb for d in range(nb, nb + ns) if d not in dims]
    if squeezed:
        if kept:
            idx = ix.padding_unless_zero(ix.columns(idx, squeezed), ix.columns(idx, kept),
                                       [lay.sparse_shape[k] for k in kept])
        else:
            inside = ix.valid(ix.columns(idx, squeezed), [1] * len(squeezed))
            batch = lay.max_batch
            data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(inside, batch))
            idx = ix.columns(idx, kept)
    return [b.reshape(data, c.result_shape(0)), b.reshape(idx, c.result_shape(1))]


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


def lower_gather(c: BcooOp) -> list[Value]:
    """Windows of `slice_sizes` at `starts[G, rank]` (clamped into the array, as dynamic_slice does)."""
    lay = c.layout()
    data, idx, starts = c.operands
    sizes = list(c.config["slice_sizes"])
    nb, ns = lay.n_batch, lay.n_sparse
    room = [n - s for n, s in zip(lay.shape, sizes)]
    starts = b.minimum(b.maximum(starts, b.zeros_like(starts)), ix.per_column(starts, room))
    dense = list(range(nb + ns, len(lay.shape)))
    data = _gather_windows(data, starts, lay, [*range(nb), *dense], sizes)
    idx = _gather_windows(idx, starts, lay, list(range(nb)), sizes)
    if ns:
        batch = c.result_shape(0)[: nb + 1]
        offsets = b.convert(ix.columns(starts, range(nb, nb + ns)), b.elem_of(idx))
        ishape = b.shape_of(idx)
        shifted = b.sub(idx, b.broadcast(offsets, ishape, [0, len(ishape) - 1]))
        keep = ix.valid(shifted, sizes[nb : nb + ns])
        idx = ix.where(keep, shifted, sizes[nb : nb + ns])
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(keep, batch))
    return [data, idx]


def _gather_windows(buf: Value, starts: Value, lay: shapes.Layout, dims: Sequence[int], sizes: Sequence[int]) -> Value:
    """`buf[*batch, nse, *rest]` cut to the windows along the array dims `dims` (batch dims the
    buffer broadcasts stay 1): `[G, *window]`."""
    shape = b.shape_of(buf)
    windows = b.shape_of(starts)[0]

    nb = lay.n_batch

    def axis(d: int) -> int:  # the buffer axis of array dim d (batch or dense)
        return d if d < nb else d - lay.n_sparse + 1

    moving = [d for d in dims if not (d < nb and shape[d] != lay.shape[d])]
    slice_sizes = list(shape)
    for d in moving:
        slice_sizes[axis(d)] = sizes[d]
    if not moving:
        return b.broadcast(buf, [windows, *shape], range(1, len(shape) + 1))
    return b.gather(
        buf, b.convert(ix.columns(starts, moving), b.elem_of(starts)), offset_dims=range(1, len(shape) + 1),
        collapsed_slice_dims=[], operand_batching_dims=[], start_indices_batching_dims=[],
        start_index_map=[axis(d) for d in moving], index_vector_dim=1, slice_sizes=slice_sizes,
    )


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
    target = [lay.shape[a] if a in plan.fold else 1 if a in plan.scale else plan.batch[kept.index(a)] for a in range(nb)]
    outs = []
    for buf, out in ((data, plan.data), (idx, plan.indices)):
        buf = ix.broadcast_batch(buf, target)
        rank = len(b.shape_of(buf))
        buf = b.transpose(buf, [*kept, *plan.fold, *[a for a in range(nb) if a in plan.scale], *range(nb, rank)])
        outs.append(b.reshape(buf, out))
    return outs


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


def lower_multiply_sparse(c: BcooOp) -> list[Value]:
    lhs, rhs = c.layout(0), c.layout(2, "rhs_shape")
    plan = shapes.multiply_sparse(lhs, rhs, c.config["driver"])
    nb = plan.n_batch
    sides = []
    for lay, (data, idx) in ((lhs, c.operands[:2]), (rhs, c.operands[2:])):
        data, idx = ix.broadcast_batch(data, lay.batch_shape), ix.broadcast_batch(idx, lay.batch_shape)
        if lay.n_batch > nb:
            data, idx = ix.batch_to_sparse(data, idx, nb, lay.n_batch - nb)
        sizes = lay.shape[nb : len(lay.shape) - lay.n_dense]
        sides.append((ix.canonical(data, plan.batch), ix.canonical(idx, plan.batch), sizes))
    out_sizes = plan.shape[nb : len(plan.shape) - lhs.n_dense]
    if plan.driver == "pairs":
        out_data, out_idx = _multiply_pairs(sides[0], sides[1], out_sizes)
    else:
        drive, look = (sides[0], sides[1]) if plan.driver == "lhs" else (sides[1], sides[0])
        out_data, out_idx = _multiply_lookup(drive, look, out_sizes)
    return [b.reshape(out_data, plan.data), b.reshape(out_idx, plan.indices)]


Side = tuple[Value, Value, Sequence[int]]


def _dense_product(a: Value, c: Value, dense: Sequence[int]) -> Value:
    lead = b.shape_of(a)[:2]
    return b.mul(b.broadcast_to(a, [*lead, *dense]), b.broadcast_to(c, [*lead, *dense]))


def _multiply_lookup(drive: Side, look: Side, out_sizes: Sequence[int]) -> tuple[Value, Value]:
    """Each driver entry times the summed lookup entries at its index (the lookup side may broadcast)."""
    d_data, d_idx, d_sizes = drive
    k_data, k_idx, k_sizes = look
    bs, nd_ = b.shape_of(d_idx)[:2]
    nk = b.shape_of(k_idx)[1]
    dense = list(map(shapes.broadcast_dim, b.shape_of(d_data)[2:], b.shape_of(k_data)[2:]))
    if nd_ == 0 or nk == 0:
        data = b.full([bs, nd_, *dense], 0, b.elem_of(d_data))
        return data, ix.per_column(b.full(b.shape_of(d_idx), 0, b.elem_of(d_idx)), out_sizes)
    dims = [k for k, s in enumerate(k_sizes) if s != 1]
    total = math.prod(k_sizes[k] for k in dims)
    # Size-1 dims of the lookup side add 0 to its linear keys, which are therefore keys over `dims`.
    u_data, u_key = ix.sum_duplicates_keys(k_data, k_idx, k_sizes, nk)
    kt = ix.key_type([k_sizes[k] for k in dims], headroom=2)
    u_key = b.convert(u_key, kt)
    d_key = ix.matched_key(d_idx, d_sizes, dims, total + 1, kt)
    two = b.full([bs, nk + nd_], 2, kt)
    tags = b.concat([b.full([bs, nk], 0, kt), b.full([bs, nd_], 1, kt)], 1)
    combined = b.add(b.mul(b.concat([u_key, d_key], 1), two), tags)
    _, pos_s = ix.sort_positions(combined)
    it = b.elem_of(pos_s)
    from_look = b.compare(pos_s, b.full([bs, nk + nd_], nk, it), "LT")
    last = b.prefix_scan(b.select(from_look, pos_s, b.full([bs, nk + nd_], -1, it)), 1, "max")
    partner = ix.scatter_rows(
        b.full([bs, nd_], -1, it),
        b.select(from_look, b.full([bs, nk + nd_], nd_, it), b.sub(pos_s, b.full([bs, nk + nd_], nk, it))),
        last,
        "set",
    )
    found = b.compare(partner, b.zeros_like(partner), "GE")
    safe = b.select(found, partner, b.zeros_like(partner))
    match = b.and_(found, b.compare(ix.gather_rows(u_key, safe), d_key, "EQ"))
    data = ix.mask(_dense_product(d_data, ix.gather_rows(u_data, safe), dense), match)
    idx = ix.where(match, d_idx, out_sizes)
    return data, idx


def _multiply_pairs(lhs: Side, rhs: Side, out_sizes: Sequence[int]) -> tuple[Value, Value]:
    """Every pair of entries, kept where their indices agree: both operands broadcast."""
    l_data, l_idx, l_sizes = lhs
    r_data, r_idx, r_sizes = rhs
    bs, nl, s = b.shape_of(l_idx)
    nr = b.shape_of(r_idx)[1]
    dims = [k for k in range(s) if l_sizes[k] != 1 and r_sizes[k] != 1]
    total = math.prod(l_sizes[k] for k in dims)
    kt = ix.key_type([l_sizes[k] for k in dims])
    lk = b.broadcast(ix.matched_key(l_idx, l_sizes, dims, total, kt), [bs, nl, nr], [0, 1])
    rk = b.broadcast(ix.matched_key(r_idx, r_sizes, dims, total + 1, kt), [bs, nl, nr], [0, 2])
    match = b.reshape(b.compare(lk, rk, "EQ"), [bs, nl * nr])
    dense = list(map(shapes.broadcast_dim, b.shape_of(l_data)[2:], b.shape_of(r_data)[2:]))
    nd = len(dense)
    pair = [bs, nl, nr, *dense]
    ld = b.broadcast(l_data, pair, [0, 1, *range(3, 3 + nd)])
    rd = b.broadcast(r_data, pair, [0, 2, *range(3, 3 + nd)])
    data = ix.mask(b.reshape(b.mul(ld, rd), [bs, nl * nr, *dense]), match)
    li = b.broadcast(l_idx, [bs, nl, nr, s], [0, 1, 3])
    ri = b.broadcast(r_idx, [bs, nl, nr, s], [0, 2, 3])
    idx = b.reshape(b.maximum(li, ri), [bs, nl * nr, s])
    idx = ix.where(match, idx, out_sizes)
    return data, idx


LoweringRule = Callable[[BcooOp], list[Value]]

LOWERINGS: dict[str, LoweringRule] = {
    "todense": lower_todense,
    "extract": lower_extract,
    "fromdense": lower_fromdense,
    "multiply_dense": lower_multiply_dense,
    "multiply_sparse": lower_multiply_sparse,
    "update_layout": lower_update_layout,
    "reduce_sum": lower_reduce_sum,
    "reshape": lower_reshape,
    "slice": lower_slice,
    "sort_indices": lower_sort_indices,
    "squeeze": lower_squeeze,
    "sum_duplicates": lower_sum_duplicates,
    "transpose": lower_transpose,
    "gather": lower_gather,
    "dot_general": products.lower_dot_general,
    "dot_general_sampled": products.lower_dot_general_sampled,
    "spdot_general": products.lower_spdot_general,
    "spdot_general_sampled": products.lower_spdot_general_sampled,
    "broadcast_in_dim": structure.lower_broadcast_in_dim,
    "concatenate": structure.lower_concatenate,
    "dynamic_slice": structure.lower_dynamic_slice,
    "conv": structure.lower_conv,
}


@dataclasses.dataclass(frozen=True)
class LowerBcoo(Pass):
    """Lower every `hlopt.bcoo.*` custom_call to StableHLO gathers, scatters, sorts and reductions.

    Every op is checked first (`bcoo_config.read`: a malformed one is an error at its location
    and nothing is rewritten). `todense` with n_batch = 0, for example:

    Before:
      %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32,
             backend_config = {shape = array<i64: 4, 5>, n_batch = 0 : i64, n_dense = 0 : i64, ...}}
             : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
    After (reshapes to and from the one-batch canonical form left out):
      %zeros = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x5xf32>
      %0 = "stablehlo.scatter"(%zeros, %indices, %data) <{scatter_dimension_numbers = #stablehlo.scatter<
             inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>}>
             ({ stablehlo.add }) : (tensor<4x5xf32>, tensor<3x2xi32>, tensor<3xf32>) -> tensor<4x5xf32>
    (no mask: the scatter drops padding, whose indices lie outside the array).
    """

    name: ClassVar[str] = "lower-bcoo"

    def apply(self, module: ir.Operation) -> None:
        found = [op for op in walk_ops(module, "stablehlo.custom_call") if is_bcoo_op(op)]
        views = [read(op) for op in found]  # every op is checked before any is rewritten
        for view in views:
            with view.op.location, ir.InsertionPoint(view.op):
                if all(0 in t.shape for t in view.result_types):  # empty buffers: nothing to compute
                    values = [b.full(t.shape, 0, t.element_type) for t in view.result_types]
                else:
                    values = LOWERINGS[view.name](view)
            for old, new in zip(view.op.results, values, strict=True):
                if old.type != new.type:
                    raise PassError(
                        f"lower-bcoo built {new.type} for a result of type {old.type} of @{PREFIX}{view.name}",
                        view.op.location,
                    )
                old.replace_all_uses_with(new)
            view.op.erase()
