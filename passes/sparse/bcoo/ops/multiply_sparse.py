"""`hlopt.bcoo.multiply_sparse`: the elementwise product of two BCOO arrays; the `driver` operand's
entries each meet at most one entry of the other (`lhs`, `rhs`), or every pair is formed (`pairs`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, SHAPE, STR, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


def result_shapes(config: Mapping[str, Any], ld: Shape, li: Shape, rd: Shape, ri: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    if config["driver"] not in ("lhs", "rhs", "pairs"):
        raise ValueError(f"driver must be 'lhs', 'rhs' or 'pairs', got {config['driver']!r}")
    lhs, rhs = shapes.operand(config, ld, li), shapes.layout(config["rhs_shape"], rd, ri)
    plan = shapes.multiply_sparse(lhs, rhs, config["driver"])
    return [plan.data, plan.indices]


def _aligned(t: terms.Terms, data, lay: shapes.Layout, plan: shapes.MultiplyPlan):
    """An operand's data arranged like the plan's entries: `[*plan.batch, nse, *dense]`."""
    nb, rest = plan.n_batch, data.shape[lay.n_batch + 1 :]
    full = t.broadcast_to(data, (*lay.batch_shape, lay.nse, *rest))
    merged = full.reshape(*lay.batch_shape[:nb], math.prod(lay.batch_shape[nb:]) * lay.nse, *rest)
    return t.broadcast_to(merged, (*plan.batch, *merged.shape[nb:]))


def transpose_multiply_sparse(t: terms.Terms, ct, ld, li, rd, ri, *, shape, rhs_shape, driver, **params):
    """Bilinear in the two data: on the driver side elementwise; on the lookup side through the
    lookup with this side driving (or the dense product when this side broadcasts); with pairs,
    summed over the partners."""
    left = t.is_undefined(ld)
    lda, rda = t.aval(ld), t.aval(rd)
    plan = shapes.multiply_sparse(shapes.layout(shape, lda.shape, li.shape), shapes.layout(rhs_shape, rda.shape,
                                                                                          ri.shape), driver)
    kw = dict(shape=shape, rhs_shape=rhs_shape, driver=driver, **params)
    side = "lhs" if left else "rhs"
    me, my_idx, my_shape = (lda, li, shape) if left else (rda, ri, rhs_shape)
    other, other_idx, other_shape = (rd, ri, rhs_shape) if left else (ld, li, shape)
    my_lay, other_lay = shapes.layout(my_shape, me.shape, my_idx.shape), shapes.layout(other_shape, other.shape,
                                                                                         other_idx.shape)
    nb, dense = plan.n_batch, ct.shape[plan.n_batch + 1 :]
    entries = (*plan.batch, *my_lay.batch_shape[nb:], my_lay.nse, *dense)
    ones = t.ones(me.shape, me.dtype)
    if plan.driver == side:
        args = (ones, li, rd, ri) if left else (ld, li, ones, ri)
        grad = (ct * t.bind("multiply_sparse", *args, **kw)[0]).reshape(entries)
    else:
        zeros = t.zeros(me.shape, me.dtype)
        _, out_indices = t.bind("multiply_sparse", *((zeros, li, rd, ri) if left else (ld, li, zeros, ri)), **kw)
        aligned = _aligned(t, other, other_lay, plan)
        if plan.driver == "pairs":
            split = (*plan.batch, plan.lhs_nse, plan.rhs_nse)
            match = terms.valid(t, out_indices, plan.shape[nb : nb + out_indices.shape[-1]]).reshape(split)
            weighted = ct.reshape(*split, *dense) * terms.expand_dense(match, len(dense)).astype(ct.dtype)
            mine, partner = (nb, nb + 1) if left else (nb + 1, nb)
            grad = (weighted * t.expand_dims(aligned, mine)).sum(partner).reshape(entries)
        elif tuple(my_shape) == plan.shape and my_lay.n_batch == nb:
            # Each of my entries receives the summed cotangents at its index: the same
            # lookup with me driving, so nothing of the dense shape is built.
            looked_up = (ones, my_idx, ct * aligned, out_indices) if left else (ct * aligned, out_indices, ones, my_idx)
            lookup_kw = dict(kw, shape=plan.shape if not left else shape, rhs_shape=plan.shape if left else rhs_shape,
                             driver=side)
            grad = t.bind("multiply_sparse", *looked_up, **lookup_kw)[0]
        else:  # I broadcast against the output: sum the cotangents over my size-1 dims densely
            product = terms.todense(t, ct * aligned, out_indices, plan.shape)
            grad = terms.extract(t, my_idx, t.sum_to_shape(product, my_shape))
    return t.sum_to_shape(grad, me.shape)


RECORDS = (Record("multiply_sparse", Signature((DATA, INDICES, DATA, INDICES), 2, {"rhs_shape": SHAPE, "driver": STR}),
                   result_shapes, lower_multiply_sparse,
                   batched=lambda p, size: {**p, "rhs_shape": (size, *p["rhs_shape"])},
                   derivative=Derivative(linear=(0, 2), transpose=transpose_multiply_sparse)),)
