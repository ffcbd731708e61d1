"""The products: `dot_general` (sparse x dense), `dot_general_sampled`
(dense x dense read at sparse indices, SDDMM), `spdot_general` (sparse x sparse) and
`spdot_general_sampled` (sparse x sparse read at sparse indices, the transpose of `spdot_general`).

Every rule first lists the stored entries of a BCOO operand with their full index: the batch
coordinates (broadcast batch buffers expanded) followed by the sparse indices, `data[E, *dense]`
and `indices[E, n_batch + n_sparse]` (`_entries`). A dimension of the operand is then either
an index column of the entries or a dense dimension of the data, whatever its role in the dot.

- `dot_general`: each entry reads the slice of the dense operand its contracting and batch
  columns select (one gather), multiplies it with its data (a per-entry `dot_general` when the
  data has dense dims), and adds the product into the output at its free and batch columns (one
  scatter-add; a reduce when no column reaches the output). Padding entries add nothing: those
  out of range in an output column are dropped by the scatter, those out of range in a gathered
  column are masked. With `indices_sorted`, the scatter is marked `indices_are_sorted` where the
  output columns are the leading index columns (then its targets are sorted: a sorted segment
  sum); its writes then run through the output in order.
- `dot_general_sampled`: each entry gathers the slices of both dense operands its index selects
  and contracts them (a `dot_general` batched over the entries).
- `spdot_general`: the entries of both operands are matched on their contracting indices by one
  sort of both key lists (never the `lhs.nse x rhs.nse` table): each lhs entry gets the run of
  rhs entries with its key, and the matching pairs are numbered by a prefix sum of the run
  lengths. Pairs are then generated in chunks, each pair's product keyed by its output index,
  and merged into the `nse` smallest output keys by a sort and a segment sum per chunk. Every
  buffer is linear in the operands' nse, the output nse and the chunk size.
- `spdot_general_sampled`: the same pairs, each added into the sampled entry with its output
  index (found by a binary search of the sorted sampled keys).

The sparse x dense products are portable: one gather, product and scatter-add over all the
entries, no loop sized for any cache (`xla-cpu-gather-blocks` splits them into blocks for
XLA:CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.record import (
    DATA, DENSE, DIMS, INDICES, INT, INTS, NUMBERS, SHAPE, BcooOp, Derivative, Record, Shape, Signature,
)
from hlopt.passes.mlir import ir

Value = ir.Value

# ---------------------------------------------------------------------------
# Shared helpers


def _entries(data: Value | None, idx: Value, lay: shapes.Layout) -> tuple[Value | None, Value]:
    """Every entry of every batch with its full index: `data[E, *dense]`, `indices[E, n_batch + n_sparse]`
    (batch coordinates, then sparse indices), E = prod(batch) * nse. Indices become i32 or i64."""
    wide = ir.IntegerType(b.elem_of(idx)).width > 32 or max(lay.shape, default=0) >= 2**31 - 1
    idx = b.convert(idx, b.i64() if wide else b.i32())
    idx = ix.broadcast_batch(idx, lay.batch_shape)
    if data is None:
        data = b.full([*lay.batch_shape, lay.nse], 0, b.i1())
    data = ix.broadcast_batch(data, lay.batch_shape)
    if lay.n_batch:
        data, idx = ix.batch_to_sparse(data, idx, 0, lay.n_batch)
    return data, idx


def _compute_elem(result: ir.Type, *operands: ir.Type) -> ir.Type:
    """The type products are formed and summed in: the result's, or a wider float operand's."""
    floats = [e for e in operands if isinstance(e, ir.FloatType) and not isinstance(e, ir.ComplexType)]
    if isinstance(result, ir.FloatType) and floats:
        widest = max(floats, key=lambda e: e.width)
        if widest.width > result.width:
            return widest
    return result


def _gather_slices(x: Value, idx: Value, cols: Sequence[int], dims: Sequence[int]) -> tuple[Value, list[int]]:
    """`x` at the index columns `cols` of `idx[E, k]` along its dims `dims` (clamped into range), whole
    along the others: `[E, *window]`, and the window's dims of `x` (ascending)."""
    shape = b.shape_of(x)
    window = [d for d in range(len(shape)) if d not in dims]
    e = b.shape_of(idx)[0]
    if not dims:
        return b.broadcast(x, [e, *shape], range(1, len(shape) + 1)), window
    x = b.transpose(x, [*dims, *window])  # gathered slices are contiguous
    n = len(dims)
    out = b.gather(
        x, ix.columns(idx, cols), offset_dims=range(1, 1 + len(window)), collapsed_slice_dims=range(n),
        operand_batching_dims=[], start_indices_batching_dims=[], start_index_map=range(n), index_vector_dim=1,
        slice_sizes=[1] * n + [shape[d] for d in window],
    )
    return out, window


def _valid_cols(idx: Value, cols: Sequence[int], lay: shapes.Layout) -> Value | None:
    """True where the sparse ones among index columns `cols` are in range; None if none is sparse."""
    sparse = [c for c in cols if c >= lay.n_batch]
    if not sparse:
        return None
    return ix.valid(ix.columns(idx, sparse), [lay.shape[c] for c in sparse])


# ---------------------------------------------------------------------------
# dot_general: sparse x dense


def lower_dot_general(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx, rhs = c.operands
    (lc, rc), (lb, rb) = c.config["dimension_numbers"]
    rank_l, rank_r = len(lay.shape), len(b.shape_of(rhs))
    k = lay.n_batch + lay.n_sparse  # lhs dims held by index columns
    pair = {**dict(zip(lc, rc)), **dict(zip(lb, rb))}
    lfree, rfree = shapes.free_dims(rank_l, lc, lb), shapes.free_dims(rank_r, rc, rb)
    sources = [("l", d) for d in (*lb, *lfree)] + [("r", d) for d in rfree]  # output dims, in order
    out_shape = c.result_shape(0)
    indexed = [p for p, (side, d) in enumerate(sources) if side == "l" and d < k]
    windows = [p for p in range(len(sources)) if p not in indexed]
    out_cols = [sources[p][1] for p in indexed]
    gather_cols = [d for d in range(k) if d in pair]
    out_elem = c.result_elem(0)
    elem = _compute_elem(out_elem, b.elem_of(data), b.elem_of(rhs))
    data_e, idx_e = _entries(b.convert(data, elem), idx, lay)
    rhs = b.convert(rhs, elem)
    dense_batch = [d for d in lb if d >= k]
    dense_contract = [d for d in lc if d >= k]
    window_shape = [out_shape[p] for p in windows]

    # `[E, *window]`: each entry's data times the slice of rhs it reads, zero where that read is padding.
    g, rw = _gather_slices(rhs, idx_e, gather_cols, [pair[x] for x in gather_cols])
    if lay.n_dense:
        p = b.dot_general(
            data_e, g, lhs_batch=[0, *(1 + x - k for x in dense_batch)],
            rhs_batch=[0, *(1 + rw.index(pair[x]) for x in dense_batch)],
            lhs_contract=[1 + x - k for x in dense_contract],
            rhs_contract=[1 + rw.index(pair[x]) for x in dense_contract], elem=elem, precision_config=None)
    else:
        p = b.mul(b.broadcast(data_e, [b.shape_of(idx_e)[0], *window_shape], [0]), g)
    ok = _valid_cols(idx_e, gather_cols, lay)
    p = p if ok is None else ix.mask(p, ok)
    if indexed:
        zeros = b.full([*(out_shape[q] for q in indexed), *window_shape], 0, elem)
        sorted_ = bool(c.config.get("indices_sorted")) and out_cols == list(range(len(out_cols)))
        acc = _scatter_add(zeros, ix.columns(idx_e, out_cols), p, sorted_)
    else:
        acc = b.reduce(p, [0])
    order = [*indexed, *windows]
    out = b.transpose(acc, [order.index(p) for p in range(len(sources))])
    return [b.convert(out, out_elem)]


def _scatter_add(out: Value, idx: Value, updates: Value, sorted_: bool) -> Value:
    """`out[*idx[e], ...] += updates[e, ...]` for `out` whose leading dims are indexed; updates
    out of range are dropped."""
    n = b.shape_of(idx)[1]
    rest = b.shape_of(updates)[1:]
    return b.scatter(out, idx, updates, update_window_dims=range(1, 1 + len(rest)), inserted_window_dims=range(n),
                     input_batching_dims=[], scatter_indices_batching_dims=[], scattered_dims_to_operand_dims=range(n),
                     index_vector_dim=1, sorted_indices=sorted_)


# ---------------------------------------------------------------------------
# dot_general_sampled: dense x dense at sparse indices


def _dot_sources(a_rank: int, b_rank: int, dims: shapes.DotDims) -> list[tuple[int | None, int | None]]:
    """For each dim of `dot_general(a, b)`: the dim of a and the dim of b it comes from (None: not that side)."""
    (lc, rc), (lb, rb) = dims
    return ([(x, y) for x, y in zip(lb, rb)] + [(x, None) for x in shapes.free_dims(a_rank, lc, lb)]
            + [(None, y) for y in shapes.free_dims(b_rank, rc, rb)])


def lower_dot_general_sampled(c: BcooOp) -> list[Value]:
    a, bb, idx = c.operands
    dims = shapes.dot_dims(c.config["dimension_numbers"])
    (lc, rc), _ = dims
    a_rank, b_rank = len(b.shape_of(a)), len(b.shape_of(bb))
    data_shape, lay = shapes.dot_general_sampled(b.shape_of(a), b.shape_of(bb), b.shape_of(idx), dims,
                                                 c.config.get("permutation"))
    rank = len(lay.shape)
    perm = c.config.get("permutation") or tuple(range(rank))
    sources = _dot_sources(a_rank, b_rank, dims)
    src = [sources[perm[s]] for s in range(rank)]  # sampled dim -> (a dim, b dim)
    k = lay.n_batch + lay.n_sparse
    out_elem = c.result_elem(0)
    elem = _compute_elem(out_elem, b.elem_of(a), b.elem_of(bb))
    a, bb = b.convert(a, elem), b.convert(bb, elem)
    _, idx_e = _entries(None, idx, lay)
    a_cols = [s for s in range(k) if src[s][0] is not None]
    b_cols = [s for s in range(k) if src[s][1] is not None]
    dense = list(range(k, rank))
    dense_batch = [s for s in dense if None not in src[s]]
    a_free = sorted((s for s in dense if src[s][1] is None), key=lambda s: src[s][0])
    b_free = sorted((s for s in dense if src[s][0] is None), key=lambda s: src[s][1])
    result_order = [*dense_batch, *a_free, *b_free]

    # `[E, *dense]`: each entry's contraction of the slices of a and b its index selects.
    ga, aw = _gather_slices(a, idx_e, a_cols, [src[s][0] for s in a_cols])
    gb, bw = _gather_slices(bb, idx_e, b_cols, [src[s][1] for s in b_cols])
    p = b.dot_general(
        ga, gb, lhs_batch=[0, *(1 + aw.index(src[s][0]) for s in dense_batch)],
        rhs_batch=[0, *(1 + bw.index(src[s][1]) for s in dense_batch)],
        lhs_contract=[1 + aw.index(x) for x in lc], rhs_contract=[1 + bw.index(y) for y in rc], elem=elem, precision_config=None)
    p = b.transpose(p, [0, *(1 + result_order.index(s) for s in dense)])
    ok = _valid_cols(idx_e, range(k), lay)
    out = p if ok is None else ix.mask(p, ok)
    return [b.reshape(b.convert(out, out_elem), data_shape)]


# ---------------------------------------------------------------------------
# Sparse x sparse: matching entries on their contracting indices


class Matching(NamedTuple):
    """Pairs of lhs and rhs entries with equal keys, batched over G.

    Lhs entry e meets the rhs entries `rperm[lo[e] : lo[e] + count[e]]`; its pairs are numbered
    `[before[e], before[e] + count[e])`, and `upto[e] = before[e] + count[e]`; `total[g]` pairs in all.
    """

    lo: Value
    count: Value
    rperm: Value
    before: Value
    upto: Value
    total: Value


def _match(lkey: Value, rkey: Value, pair_elem: ir.Type) -> Matching:
    """Lhs and rhs entries with equal non-negative keys `lkey[G, nl]`, `rkey[G, nr]` (sentinels must
    differ between the sides): one sort of both key lists, rhs before lhs on ties."""
    g, nl = b.shape_of(lkey)
    nr = b.shape_of(rkey)[1]
    kt = b.elem_of(lkey)
    n = nl + nr
    two = b.full([g, n], 2, kt)
    tags = b.concat([b.full([g, nr], 0, kt), b.full([g, nl], 1, kt)], 1)
    key_s, pos = ix.sort_positions(b.add(b.mul(b.concat([rkey, lkey], 1), two), tags))
    it = b.elem_of(pos)
    from_r = b.compare(pos, b.full([g, n], nr, it), "LT")
    rank = b.prefix_scan(b.convert(from_r, it), 1)  # rhs entries up to here
    first, _ = ix.segments(b.div(key_s, two))
    before_run = b.sub(rank, b.convert(from_r, it))
    lo = b.prefix_scan(b.select(first, before_run, b.zeros_like(rank)), 1, "max")
    drop_l = b.full([g, n], nl, it)
    rows_l = b.select(from_r, drop_l, b.sub(pos, b.full([g, n], nr, it)))
    lo_e = ix.scatter_rows(b.full([g, nl], 0, it), rows_l, lo, "set")
    count = ix.scatter_rows(b.full([g, nl], 0, it), rows_l, b.sub(rank, lo), "set")
    rows_r = b.select(from_r, b.sub(rank, b.full([g, n], 1, it)), b.full([g, n], nr, it))
    rperm = ix.scatter_rows(b.full([g, nr], 0, it), rows_r, pos, "set")
    count_p = b.convert(count, pair_elem)
    upto = b.prefix_scan(count_p, 1)
    total = b.reshape(b.slice_dim(upto, 1, nl - 1, nl), [g])
    return Matching(lo_e, count, rperm, b.sub(upto, count_p), upto, total)


def _pairs(m: Matching, start: Value, size: int) -> tuple[Value, Value, Value]:
    """Pairs `[start, start + size)` of each batch: (lhs entry, rhs entry, True for a real pair)."""
    g, nl = b.shape_of(m.lo)
    nr = b.shape_of(m.rperm)[1]
    pe = b.elem_of(m.upto)
    q = b.add(b.broadcast(start, [g, size], []), b.iota([g, size], 1, pe))
    e = ix.searchsorted(m.upto, q)
    it = b.elem_of(e)
    ok = b.compare(e, b.full([g, size], nl, it), "LT")
    e = b.convert(b.minimum(e, b.full([g, size], nl - 1, it)), b.elem_of(m.lo))
    offset = b.convert(b.sub(q, ix.gather_rows(m.before, e)), b.elem_of(m.lo))
    rank = b.add(ix.gather_rows(m.lo, e), offset)
    rank = b.minimum(b.maximum(rank, b.zeros_like(rank)), b.full([g, size], nr - 1, b.elem_of(rank)))
    return e, ix.gather_rows(m.rperm, rank), ok


def _pair_chunks(m: Matching, first: int, chunk: int, most: int, init: Callable[[Value, Value, Value], list[Value]],
                 step: Callable[[Value, Value, Value, list[Value]], list[Value]]) -> list[Value]:
    """`state = init(*pairs[0:first])`, then `state = step(*pairs[s:s + chunk], state)` for the later
    chunks that hold a pair of some batch (`most`: the most pairs a batch can have)."""
    pe = b.elem_of(m.upto)
    state = init(*_pairs(m, b.scalar(0, pe), first))
    if most <= first:
        return state
    remaining = b.sub(b.reduce(m.total, [0], "max"), b.scalar(first, pe))
    trips = b.div(b.add(remaining, b.scalar(chunk - 1, pe)), b.scalar(chunk, pe))

    def loop(t: Value, *st: Value) -> list[Value]:
        start = b.add(b.scalar(first, pe), b.mul(t, b.scalar(chunk, pe)))
        return [b.add(t, b.scalar(1, pe)), *step(*_pairs(m, start, chunk), list(st))]

    return b.while_loop([b.scalar(0, pe), *state], lambda t, *_: b.compare(t, trips, "LT"), loop)[1:]


def _side(data: Value, idx: Value, lay: shapes.Layout, batch: Sequence[int], slots: Sequence[int],
          target: Sequence[int]) -> tuple[Value, Value]:
    """A sparse operand's buffers with its batch dims `batch` (in that order) at positions `slots` of the
    output batch `target` (size 1 elsewhere), broadcast to it and flattened: `[G, nse]`, `[G, nse, n_sparse]`."""
    nb = lay.n_batch
    shaped = []
    for buf in (data, idx):
        buf = ix.broadcast_batch(buf, lay.max_batch)
        rest = b.shape_of(buf)[nb:]
        buf = b.transpose(buf, [*batch, *range(nb, nb + len(rest))])
        sizes = [1] * len(target)
        for slot, dim in zip(slots, batch):
            sizes[slot] = b.shape_of(buf)[batch.index(dim)]
        buf = b.reshape(buf, [*sizes, *rest])
        shaped.append(ix.canonical(buf, target))
    return shaped[0], shaped[1]


def lower_spdot_general(c: BcooOp) -> list[Value]:
    lhs, rhs = c.layout(0), c.layout(2, "rhs_shape")
    dims = shapes.dot_dims(c.config["dimension_numbers"])
    (lc, rc), (lb, rb) = dims
    nse = c.config["nse"]
    plan = shapes.spdot_general(lhs, rhs, dims, nse)
    lfb, rfb = shapes.free_dims(lhs.n_batch, lb), shapes.free_dims(rhs.n_batch, rb)
    nlb = len(lb)
    ld, li = _side(*c.operands[:2], lhs, [*lb, *lfb], range(nlb + len(lfb)), plan.batch)
    rd, ri = _side(*c.operands[2:], rhs, [*rb, *rfb], [*range(nlb), *range(nlb + len(lfb), len(plan.batch))],
                   plan.batch)
    out_elem = c.result_elem(0)
    elem = _compute_elem(out_elem, b.elem_of(ld), b.elem_of(rd))
    ld, rd = b.convert(ld, elem), b.convert(rd, elem)
    g, nl = b.shape_of(li)[:2]
    nr = b.shape_of(ri)[1]
    lsizes, rsizes = lhs.sparse_shape, rhs.sparse_shape
    lcols = [d - lhs.n_batch for d in lc]
    rcols = [d - rhs.n_batch for d in rc]
    lfree = [k for k in range(lhs.n_sparse) if k not in lcols]
    rfree = [k for k in range(rhs.n_sparse) if k not in rcols]
    free_sizes = [*(lsizes[k] for k in lfree), *(rsizes[k] for k in rfree)]
    total = math.prod(free_sizes)
    index_elem = c.result_elem(1)
    if min(nl, nr, nse) == 0 or total == 0:
        data = b.full([g, nse], 0, elem)
        indices = ix.per_column(b.full([g, nse, len(free_sizes)], 0, index_elem), free_sizes)
        return [b.reshape(b.convert(data, out_elem), plan.data), b.reshape(indices, plan.indices)]
    contract = [lsizes[k] for k in lcols]
    kt = ix.key_type(contract, headroom=2)
    m = _match(ix.matched_key(li, lsizes, lcols, math.prod(contract), kt),
               ix.matched_key(ri, rsizes, rcols, math.prod(contract) + 1, kt), ix.index_type(nl * nr + 1))
    ot = ix.key_type(free_sizes)
    rstride = math.prod(rsizes[k] for k in rfree)
    lkey = b.mul(ix.linear_key(ix.columns(li, lfree), [lsizes[k] for k in lfree], 0, ot), b.full([g, nl], rstride, ot))
    rkey = ix.linear_key(ix.columns(ri, rfree), [rsizes[k] for k in rfree], 0, ot)

    def keyed(e: Value, r: Value, ok: Value) -> tuple[Value, Value]:
        """Each pair's product and output key (`total` for no pair)."""
        key = b.add(ix.gather_rows(lkey, e), ix.gather_rows(rkey, r))
        key = b.select(ok, key, b.full(b.shape_of(key), total, ot))
        return b.mul(ix.gather_rows(ld, e), ix.gather_rows(rd, r)), key

    def init(e: Value, r: Value, ok: Value) -> list[Value]:
        return list(ix.sum_keys(*keyed(e, r, ok), total, nse))

    def step(e: Value, r: Value, ok: Value, state: list[Value]) -> list[Value]:
        vals, keys = keyed(e, r, ok)
        return list(ix.sum_keys(b.concat([state[0], vals], 1), b.concat([state[1], keys], 1), total, nse))

    most = nl * nr
    first = min(most, nl + nr)
    data, keys = _pair_chunks(m, first, min(most, max(nl + nr, nse)), most, init, step)
    indices = ix.unravel(keys, free_sizes, index_elem)
    return [b.reshape(b.convert(data, out_elem), plan.data), b.reshape(indices, plan.indices)]


def lower_spdot_general_sampled(c: BcooOp) -> list[Value]:
    ad, ai, bd, bi, idx = c.operands
    la = shapes.layout(c.config["lhs_shape"], b.shape_of(ad), b.shape_of(ai))
    lb_ = shapes.layout(c.config["rhs_shape"], b.shape_of(bd), b.shape_of(bi))
    dims = shapes.dot_dims(c.config["dimension_numbers"])
    (lc, rc), (lbat, rbat) = dims
    data_shape, lay = shapes.spdot_general_sampled(la, lb_, b.shape_of(idx), dims, c.config.get("permutation"))
    rank = len(lay.shape)
    perm = c.config.get("permutation") or tuple(range(rank))
    src = [_dot_sources(len(la.shape), len(lb_.shape), dims)[perm[s]] for s in range(rank)]
    out_elem = c.result_elem(0)
    elem = _compute_elem(out_elem, b.elem_of(ad), b.elem_of(bd))
    a_data, a_idx = _entries(b.convert(ad, elem), ai, la)
    b_data, b_idx = _entries(b.convert(bd, elem), bi, lb_)
    _, s_idx = _entries(None, idx, lay)
    ns_ = b.shape_of(s_idx)[0]
    na, nb_ = b.shape_of(a_idx)[0], b.shape_of(b_idx)[0]
    if min(na, nb_, ns_) == 0 or 0 in lay.shape:
        return [b.full(data_shape, 0, out_elem)]
    # Entries as one batch; keys over full indices (batch coordinates included).
    a_idx, b_idx, s_idx = (b.reshape(v, [1, *b.shape_of(v)]) for v in (a_idx, b_idx, s_idx))
    a_data, b_data = b.reshape(a_data, [1, na]), b.reshape(b_data, [1, nb_])
    contract = [la.shape[d] for d in (*lbat, *lc)]
    kt = ix.key_type(contract, headroom=2)
    m = _match(ix.matched_key(a_idx, la.shape, [*lbat, *lc], math.prod(contract), kt),
               ix.matched_key(b_idx, lb_.shape, [*rbat, *rc], math.prod(contract) + 1, kt),
               ix.index_type(na * nb_ + 1))
    total = math.prod(lay.shape)
    st = ix.key_type(lay.shape)
    strides = [math.prod(lay.shape[s + 1 :]) for s in range(rank)]

    def partial_key(entry_idx: Value, side: int) -> Value:
        """The part of the sampled linear key that the side's columns give (batch pairs from lhs)."""
        n = b.shape_of(entry_idx)[1]
        key = b.full([1, n], 0, st)
        for s in range(rank):
            dim = src[s][side]
            if dim is None or (side == 1 and src[s][0] is not None):
                continue
            col = b.convert(ix.column(entry_idx, dim), st)
            key = b.add(key, b.mul(col, b.full([1, n], strides[s], st)))
        return key

    akey, bkey = partial_key(a_idx, 0), partial_key(b_idx, 1)
    skey_s, spos = ix.sort_positions(ix.linear_key(s_idx, lay.shape, total, st))
    first, _ = ix.segments(skey_s)
    it = b.elem_of(spos)
    run_start = b.prefix_scan(b.select(first, b.iota([1, ns_], 1, it), b.zeros_like(spos)), 1, "max")

    def add_pairs(e: Value, r: Value, ok: Value, state: list[Value]) -> list[Value]:
        size = b.shape_of(e)[1]
        key = b.add(ix.gather_rows(akey, e), ix.gather_rows(bkey, r))
        found = ix.searchsorted(skey_s, key)
        at = b.sub(found, b.full([1, size], 1, b.elem_of(found)))
        at = b.maximum(at, b.zeros_like(at))
        hit = b.and_(ok, b.compare(ix.gather_rows(skey_s, at), key, "EQ"))
        slot = b.select(hit, ix.gather_rows(run_start, at), b.full([1, size], ns_, b.elem_of(run_start)))
        vals = b.mul(ix.gather_rows(a_data, e), ix.gather_rows(b_data, r))
        return [ix.scatter_rows(state[0], slot, vals, "add")]

    most = na * nb_
    first_chunk = min(most, max(na + nb_, ns_))
    (acc,) = _pair_chunks(m, first_chunk, first_chunk, most,
                          lambda e, r, ok: add_pairs(e, r, ok, [b.full([1, ns_], 0, elem)]), add_pairs)
    valid = b.compare(skey_s, b.full([1, ns_], total, st), "LT")
    per_sorted = ix.mask(ix.gather_rows(acc, run_start), valid)
    data = ix.scatter_rows(b.full([1, ns_], 0, elem), spos, per_sorted, "set")
    return [b.reshape(b.convert(data, out_elem), data_shape)]


# ---------------------------------------------------------------------------
# The records


def _check_sampled(config: Mapping[str, Any], lay: shapes.Layout) -> None:
    if tuple(config["shape"]) != lay.shape or (config["n_batch"], config["n_dense"]) != (lay.n_batch, lay.n_dense):
        raise ValueError(f"shape={tuple(config['shape'])}, n_batch={config['n_batch']} and n_dense={config['n_dense']} "
                         f"do not describe the sampled array: the dims of the product give shape {lay.shape}, "
                         f"n_batch={lay.n_batch}, n_dense={lay.n_dense}")


def dot_general_shapes(config: Mapping[str, Any], data: Shape, indices: Shape, rhs: Shape) -> list[Shape]:
    return [shapes.dot_shape(shapes.operand(config, data, indices).shape, rhs, config["dimension_numbers"])]


def dot_general_sampled_shapes(config: Mapping[str, Any], a: Shape, b: Shape, indices: Shape) -> list[Shape]:
    data, lay = shapes.dot_general_sampled(a, b, indices, config["dimension_numbers"], config.get("permutation"))
    _check_sampled(config, lay)
    return [data]


def spdot_general_shapes(config: Mapping[str, Any], ld: Shape, li: Shape, rd: Shape, ri: Shape) -> list[Shape]:
    lhs, rhs = shapes.operand(config, ld, li), shapes.layout(config["rhs_shape"], rd, ri)
    plan = shapes.spdot_general(lhs, rhs, config["dimension_numbers"], config["nse"])
    return [plan.data, plan.indices]


def spdot_general_sampled_shapes(config: Mapping[str, Any], ad: Shape, ai: Shape, bd: Shape, bi: Shape,
                           indices: Shape) -> list[Shape]:
    lhs, rhs = shapes.layout(config["lhs_shape"], ad, ai), shapes.layout(config["rhs_shape"], bd, bi)
    data, lay = shapes.spdot_general_sampled(lhs, rhs, indices, config["dimension_numbers"], config.get("permutation"))
    _check_sampled(config, lay)
    return [data]


def _sampled_shape(params: Mapping[str, Any], operands: Sequence[Shape]) -> Shape:
    """The sampled array's shape: the product's dims, permuted."""
    a, b_, indices = operands
    return shapes.dot_general_sampled(a, b_, indices, params["dimension_numbers"], params["permutation"])[1].shape


def _spsampled_shape(params: Mapping[str, Any], operands: Sequence[Shape]) -> Shape:
    """The sampled array's shape: the sparse x sparse product's dims, permuted."""
    ad, ai, bd, bi, indices = operands
    lhs, rhs = shapes.layout(params["lhs_shape"], ad, ai), shapes.layout(params["rhs_shape"], bd, bi)
    return shapes.spdot_general_sampled(lhs, rhs, indices, params["dimension_numbers"], params["permutation"])[1].shape


# ---------------------------------------------------------------------------
# Derivatives and batching: every product is linear in each operand's data. The transposes are
# the products that lax.dot_general's transpose gives, read at the operand's indices (a sampled
# product), so a gradient never builds the dense operand of a sparse one.


def cotangent_dims(ranks: Sequence[int], dims: shapes.DotDims, permutation: Sequence[int] | None, side: int):
    """For `out = dot_general(x0, x1, dims)` with its dims permuted (out dim i is dot dim
    `permutation[i]`; None: not permuted): the dims and permutation that give operand `side`'s
    cotangent as `dot_general(out_ct, other operand, dims')` permuted, as lax.dot_general's
    transpose has them (operand dim i is dot' dim `permutation'[i]`)."""
    (lc, rc), (lb, rb) = dims
    contracting, batch = (lc, rc), (lb, rb)
    free = [shapes.free_dims(ranks[k], contracting[k], batch[k]) for k in (0, 1)]
    nb = len(lb)
    start = (nb, nb + len(free[0]))  # the first dot dim of each operand's free dims
    perm = range(nb + len(free[0]) + len(free[1])) if permutation is None else permutation
    pos = {dot: s for s, dot in enumerate(perm)}
    other = 1 - side
    ct_dims = ((tuple(pos[start[other] + j] for j in range(len(free[other]))), tuple(free[other])),
               (tuple(pos[i] for i in range(nb)), tuple(batch[other])))
    # dot' dims: the batch pairs, out_ct's other dims (ascending), the other operand's contracting dims (ascending)
    ct_free = [s for s, dot in enumerate(perm) if start[side] <= dot < start[side] + len(free[side])]
    src = [*batch[side], *(free[side][perm[s] - start[side]] for s in ct_free),
           *(contracting[side][contracting[other].index(d)] for d in sorted(contracting[other]))]
    return ct_dims, _inverse(src)


def _inverse(order: Sequence[int]) -> tuple[int, ...]:
    """The permutation that sorts `order` (numpy's argsort of distinct values)."""
    return tuple(sorted(range(len(order)), key=lambda i: order[i]))


def batch_dims(dims: shapes.DotDims, rhs_mapped: bool):
    """dimension_numbers once both operands have a leading mapped dim (batched together) or only
    lhs has one (a free dim), and the output dim it becomes."""
    (lc, rc), (lb, rb) = dims
    shift = (lambda ds: tuple(d + 1 for d in ds))
    if rhs_mapped:
        return ((shift(lc), shift(rc)), ((0, *shift(lb)), (0, *shift(rb)))), 0
    return ((shift(lc), rc), (shift(lb), rb)), len(lb)


def product_dtypes(results: int, numbers: tuple[int, int]) -> Callable[..., list[Any]]:
    """A product's result dtypes: lax.dot_general's for its two number operands, then (sparse
    results) the indices operands' dtype."""
    def dtypes(t, avals: Sequence[Any], params: dict[str, Any]) -> list[Any]:
        out = [t.dot_dtype(avals[numbers[0]].dtype, avals[numbers[1]].dtype, params["dimension_numbers"],
                           params.get("preferred_element_type"))]
        return out + [avals[1].dtype] if results == 2 else out

    return dtypes


def transpose_dot_general(t, ct, data, indices, rhs, *, shape, dimension_numbers, preferred_element_type, **flags):
    """The data cotangent: ct times rhs, sampled at the indices; rhs's: the sparse operand times ct."""
    data_aval, rhs_aval = t.aval(data), t.aval(rhs)
    ranks = (len(shape), len(rhs_aval.shape))
    if t.is_undefined(data):
        l_dims, l_perm = cotangent_dims(ranks, dimension_numbers, None, 0)
        grad = t.bind("dot_general_sampled", ct, rhs, indices, dimension_numbers=l_dims, permutation=l_perm)
        return t.sum_to_shape(grad, data_aval.shape)
    # sparse first: [batch, lhs's contracting dims (rhs's, ordered by lhs's), ct's rhs dims]
    (ct_c, l_c), (ct_b, l_b) = cotangent_dims(ranks, dimension_numbers, None, 1)[0]
    (lc, rc), (_, rb) = dimension_numbers
    rc_by_l = [rc[i] for i in _inverse(lc)] if rc else []
    rkept = [d for d in range(len(rhs_aval.shape)) if d not in rc and d not in rb]
    grad = t.bind("dot_general", data, indices, ct, shape=shape, dimension_numbers=((l_c, ct_c), (l_b, ct_b)),
                  preferred_element_type=None, **flags)
    return t.transpose(grad, _inverse([*rb, *rc_by_l, *rkept]))


def batch_dot_general(t, args, dims, *, shape, dimension_numbers, **params):
    data, indices, rhs = args
    ddim, idim, rdim = dims
    size = t.mapped_size(args, dims)
    data, indices = t.to_front(data, ddim), t.to_front(indices, idim)
    if rdim is not None:
        rhs = t.moveaxis(rhs, rdim, 0)
    new_dims, out_dim = batch_dims(dimension_numbers, rdim is not None)
    return t.bind("dot_general", data, indices, rhs, shape=(size, *shape), dimension_numbers=new_dims,
                  **params), out_dim


def transpose_dot_general_sampled(t, ct, a, b_, indices, *, dimension_numbers, permutation):
    """The sampled cotangent is a BCOO array of the permuted product: each operand's cotangent is
    the sparse x dense product of it with the other operand."""
    a_aval, b_aval = t.aval(a), t.aval(b_)
    _, lay = shapes.dot_general_sampled(a_aval.shape, b_aval.shape, indices.shape, dimension_numbers, permutation)
    side = 0 if t.is_undefined(a) else 1
    ct_dims, perm = cotangent_dims((len(a_aval.shape), len(b_aval.shape)), dimension_numbers, permutation, side)
    g = t.bind("dot_general", ct, indices, b_ if side == 0 else a, shape=lay.shape, dimension_numbers=ct_dims,
               preferred_element_type=None, indices_sorted=False, unique_indices=False)
    return t.transpose(g, perm)


def batch_dot_general_sampled(t, args, dims, *, dimension_numbers, permutation):
    size = t.mapped_size(args, dims)
    a, b_, indices = (t.to_front(x, d) for x, d in zip(args, dims))
    a = t.broadcast_to(a, (size, *a.shape[1:]))
    b_ = t.broadcast_to(b_, (size, *b_.shape[1:]))
    new_dims, _ = batch_dims(dimension_numbers, True)
    perm = None if permutation is None else (0, *(p + 1 for p in permutation))
    return t.bind("dot_general_sampled", a, b_, indices, dimension_numbers=new_dims, permutation=perm), 0


def sparse_cotangent(t, ct, ct_indices, ct_shape: Sequence[int], permutation: Sequence[int] | None,
                     x: tuple[Any, Any, Sequence[int]], y: tuple[Any, Any, Sequence[int]], dims: shapes.DotDims):
    """The data cotangent of the unknown one of the sparse operands `x`, `y` (data, indices, shape)
    of a product whose output (dims permuted by `permutation`) has the cotangent `ct` at
    `ct_indices`: the product of that BCOO array with the other operand, read at the operand's indices."""
    side = 0 if t.is_undefined(x[0]) else 1
    (od, oi, oshape), (td, ti, _) = (y, x) if side == 0 else (x, y)
    ct_dims, perm = cotangent_dims((len(x[2]), len(y[2])), dims, permutation, side)
    grad = t.bind("spdot_general_sampled", ct, ct_indices, od, oi, ti, lhs_shape=tuple(ct_shape),
                  rhs_shape=tuple(oshape), dimension_numbers=ct_dims, permutation=perm)
    return t.sum_to_shape(grad, t.aval(td).shape)


def transpose_spdot_general(t, ct, ld, li, rd, ri, *, shape, rhs_shape, dimension_numbers, nse,
                            preferred_element_type, **flags):
    """Through the output's indices: the sampled product of the cotangent with the other operand."""
    lda, rda = t.aval(ld), t.aval(rd)
    params = dict(shape=shape, rhs_shape=rhs_shape, dimension_numbers=dimension_numbers, nse=nse,
                  preferred_element_type=preferred_element_type, **flags)
    _, out_indices = t.bind("spdot_general", t.zeros(lda.shape, lda.dtype), li, t.zeros(rda.shape, rda.dtype), ri,
                            **params)
    out_shape = shapes.dot_shape(shape, rhs_shape, dimension_numbers)
    return sparse_cotangent(t, ct, out_indices, out_shape, None, (ld, li, tuple(shape)), (rd, ri, tuple(rhs_shape)),
                            dimension_numbers)


def batch_spdot_general(t, args, dims, *, shape, rhs_shape, dimension_numbers, **params):
    size = t.mapped_size(args, dims)
    ld, li, rd, ri = (t.to_front(x, d) for x, d in zip(args, dims))
    new_dims, _ = batch_dims(dimension_numbers, True)
    return t.bind("spdot_general", ld, li, rd, ri, shape=(size, *shape), rhs_shape=(size, *rhs_shape),
                  dimension_numbers=new_dims, **params), [0, 0]


def transpose_spdot_general_sampled(t, ct, ad, ai, bd, bi, indices, *, lhs_shape, rhs_shape, dimension_numbers,
                                    permutation):
    """Bilinear in the operands' data: each one's cotangent is the sampled product of the cotangent
    (a BCOO array at `indices`) with the other operand, read at the operand's indices."""
    a_aval, b_aval = t.aval(ad), t.aval(bd)
    _, lay = shapes.spdot_general_sampled(shapes.layout(lhs_shape, a_aval.shape, ai.shape),
                                          shapes.layout(rhs_shape, b_aval.shape, bi.shape), indices.shape,
                                          dimension_numbers, permutation)
    return sparse_cotangent(t, ct, indices, lay.shape, permutation, (ad, ai, tuple(lhs_shape)),
                            (bd, bi, tuple(rhs_shape)), dimension_numbers)


def batch_spdot_general_sampled(t, args, dims, *, lhs_shape, rhs_shape, dimension_numbers, permutation):
    size = t.mapped_size(args, dims)
    new_dims, _ = batch_dims(dimension_numbers, True)
    rank = len(shapes.dot_shape(lhs_shape, rhs_shape, dimension_numbers))
    perm = (0, *(p + 1 for p in (range(rank) if permutation is None else permutation)))
    return t.bind("spdot_general_sampled", *(t.to_front(x, d) for x, d in zip(args, dims)),
                  lhs_shape=(size, *lhs_shape), rhs_shape=(size, *rhs_shape), dimension_numbers=new_dims,
                  permutation=perm), 0


_PRODUCT = dict(elements=NUMBERS, type_only=("preferred_element_type",))

RECORDS = (
    Record("dot_general", Signature((DATA, INDICES, DENSE), 1, {"dimension_numbers": DIMS}), dot_general_shapes,
           lower_dot_general, **_PRODUCT, dtypes=product_dtypes(1, (0, 2)), batch=batch_dot_general,
           derivative=Derivative(linear=(0, 2), transpose=transpose_dot_general)),
    Record("dot_general_sampled",
           Signature((DENSE, DENSE, INDICES), 1, {"dimension_numbers": DIMS}, {"permutation": INTS}),
           dot_general_sampled_shapes, lower_dot_general_sampled, elements=NUMBERS, array_shape=_sampled_shape,
           indices_operand=2, dtypes=product_dtypes(1, (0, 1)), batch=batch_dot_general_sampled,
           derivative=Derivative(linear=(0, 1), transpose=transpose_dot_general_sampled)),
    Record("spdot_general", Signature((DATA, INDICES, DATA, INDICES), 2,
                                      {"rhs_shape": SHAPE, "dimension_numbers": DIMS, "nse": INT}),
           spdot_general_shapes, lower_spdot_general, **_PRODUCT, dtypes=product_dtypes(2, (0, 2)),
           batch=batch_spdot_general, derivative=Derivative(linear=(0, 2), transpose=transpose_spdot_general)),
    Record("spdot_general_sampled", Signature((DATA, INDICES, DATA, INDICES, INDICES), 1,
                                              {"lhs_shape": SHAPE, "rhs_shape": SHAPE, "dimension_numbers": DIMS},
                                              {"permutation": INTS}),
           spdot_general_sampled_shapes, lower_spdot_general_sampled, elements=NUMBERS, array_shape=_spsampled_shape,
           indices_operand=4, dtypes=product_dtypes(1, (0, 2)), batch=batch_spdot_general_sampled,
           derivative=Derivative(linear=(0, 2), transpose=transpose_spdot_general_sampled)),
)
