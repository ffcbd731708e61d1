"""IR helpers for BCOO buffers shared by the lower-bcoo rules.

Canonical layouts (`canonical`: the batch dims of a buffer broadcast and
flattened into one, `data[B, nse, *dense]`, `indices[B, nse, n_sparse]`), index
columns and range tests (an index outside `[0, size)` marks padding), linear
keys and their inverse, sorts that carry positions, and row and sparse-index
gathers and scatters. Everything builds StableHLO at the current insertion
point with `passes/ir/builders.py`.

The IR is plain and semantic: index columns are combined by a reduce over the
column dim, and an index row is filled with padding by a select of the row
mask broadcast over the columns. What XLA:CPU runs faster (a chain of
elementwise ops instead of a small reduce, one select per column, a gather for
`padding_unless_zero`) is the `xla-cpu-column-selects` pass of `hlopt-default`
(`passes/xla_cpu/column_selects.py`), which gives the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from hlopt.passes.ir import builders as b
from hlopt.passes.base import PassError
from hlopt.passes.mlir import ir

Value = ir.Value

def broadcast_batch(v: Value, batch: Sequence[int]) -> Value:
    shape = b.shape_of(v)
    return b.broadcast_to(v, [*batch, *shape[len(batch) :]])


def flatten_batch(v: Value, n_batch: int) -> Value:
    shape = b.shape_of(v)
    return b.reshape(v, [math.prod(shape[:n_batch]), *shape[n_batch:]])


def canonical(v: Value, batch: Sequence[int]) -> Value:
    """Broadcast the batch dims of `v` to `batch` and flatten them into one."""
    return flatten_batch(broadcast_batch(v, batch), len(batch))


def restore(v: Value, batch: Sequence[int], target: Sequence[int]) -> Value:
    """Undo `canonical`, then keep row 0 of each batch dim that `target` has as 1."""
    shape = b.shape_of(v)
    v = b.reshape(v, [*batch, *shape[1:]])
    full = b.shape_of(v)
    limits = [1 if i < len(batch) and target[i] == 1 else s for i, s in enumerate(full)]
    return b.slice_(v, [0] * len(full), limits, [1] * len(full))


def batch_to_sparse(data: Value, idx: Value, keep: int, n: int) -> tuple[Value, Value]:
    """The last `n` of `keep + n` batch dims become the first sparse dims (buffers with full batch dims)."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    moved = ish[keep : keep + n]
    nse, s = ish[keep + n], ish[keep + n + 1]
    m = math.prod(moved)
    data = b.reshape(data, [*ds[:keep], m * nse, *ds[keep + n + 1 :]])
    coords = [b.iota([*ish[:-1], 1], keep + k, b.elem_of(idx)) for k in range(n)]
    idx = b.reshape(b.concat([*coords, idx], keep + n + 1), [*ish[:keep], m * nse, n + s])
    return data, idx


def per_column(idx: Value, sizes: Sequence[int]) -> Value:
    """The per-column `sizes` broadcast to the shape of `idx` (last dim = columns); a splat when all are equal."""
    shape = b.shape_of(idx)
    if len(set(sizes)) == 1:
        return b.full(shape, sizes[0], b.elem_of(idx))
    return b.broadcast(b.int_vector(sizes, b.elem_of(idx)), shape, [len(shape) - 1])


def columns(idx: Value, cols: Sequence[int]) -> Value:
    """`idx[..., cols]`."""
    shape = b.shape_of(idx)
    last = len(shape) - 1
    if list(cols) == list(range(shape[-1])):
        return idx
    if not cols:
        return b.full([*shape[:-1], 0], 0, b.elem_of(idx))
    if list(cols) == list(range(shape[-1]))[::-1]:  # a plain index remap; slices + concat branch per element
        return b.reverse(idx, [last])
    return b.concat([b.slice_dim(idx, last, c, c + 1) for c in cols], last)


def in_range(idx: Value, sizes: Sequence[int]) -> Value:
    """True where `0 <= idx[..., k] < sizes[k]`: one unsigned compare (negative indices wrap above every size)."""
    u = b.convert(idx, b.unsigned(b.elem_of(idx)))
    return b.compare(u, per_column(u, sizes), "LT")


def valid(idx: Value, sizes: Sequence[int]) -> Value:
    """True where every index of an entry is in `[0, size)`: `idx[..., S]` -> i1 `[...]`."""
    return fold_columns(in_range(idx, sizes))


def fold_columns(x: Value, kind: str = "and") -> Value:
    """`x[..., S]` -> `[...]`, the columns combined with `kind` (`and`: true where every column is)."""
    return b.reduce(x, [len(b.shape_of(x)) - 1], kind)


def column(x: Value, k: int) -> Value:
    """`x[..., k]`."""
    shape = b.shape_of(x)
    return b.reshape(b.slice_dim(x, len(shape) - 1, k, k + 1), shape[:-1])


def stack_where(ok: Value, cols: Sequence[Value], fill: Sequence[int]) -> Value:
    """Index columns `cols` (each shaped like `ok`) stacked into `[..., S]`, with `fill[k]` in
    column k where `ok` is false."""
    shape = b.shape_of(ok)
    return where(ok, b.concat([b.reshape(c, [*shape, 1]) for c in cols], len(shape)), fill)


def where(ok: Value, idx: Value, fill: Sequence[int]) -> Value:
    """`idx[..., S]` where `ok[...]`, else the per-column `fill`."""
    shape = b.shape_of(idx)
    if not shape[-1]:
        return idx
    return b.select(b.broadcast(ok, shape, range(len(shape) - 1)), idx, per_column(idx, fill))


def padding_unless_zero(flags: Value, idx: Value, fill: Sequence[int]) -> Value:
    """`idx[..., K]` where every column of `flags[..., F]` is 0, else the per-column `fill`."""
    shape = b.shape_of(idx)
    nonzero = fold_columns(b.compare(flags, b.zeros_like(flags), "NE"), "or")
    return b.select(b.broadcast(nonzero, shape, range(len(shape) - 1)), per_column(idx, fill), idx)


def mask(x: Value, ok: Value) -> Value:
    """Zero the entries of `x[*lead, *rest]` where `ok[*lead]` is false."""
    shape = b.shape_of(x)
    lead = len(b.shape_of(ok))
    return b.select(b.broadcast(ok, shape, range(lead)), x, b.zeros_like(x))


def key_type(sizes: Sequence[int], headroom: int = 1) -> ir.Type:
    """The narrowest integer type holding `headroom * (prod(sizes) + 2)`: linear keys and their sentinels."""
    bound = headroom * (math.prod(sizes) + 2)
    if bound >= 2**62:
        raise PassError(f"sparse dimensions {tuple(sizes)} are too large to linearize into 64-bit keys")
    return index_type(bound)


def linear_key(idx: Value, sizes: Sequence[int], invalid: int, elem: ir.Type | None = None) -> Value:
    """Row-major linear index of each entry (type `elem`, default `key_type`), `invalid` for padding."""
    elem = elem or key_type(sizes)
    shape = b.shape_of(idx)[:-1]
    terms = []
    for k in range(len(sizes)):
        stride = math.prod(sizes[k + 1 :])
        col = b.convert(column(idx, k), elem)
        terms.append(col if stride == 1 else b.mul(col, b.full(shape, stride, elem)))
    key = terms[0] if terms else b.full(shape, 0, elem)
    for term in terms[1:]:
        key = b.add(key, term)
    return b.select(valid(idx, sizes), key, b.full(shape, invalid, elem))


def matched_key(idx: Value, sizes: Sequence[int], dims: Sequence[int], invalid: int, elem: ir.Type) -> Value:
    """Linear key of the columns `dims`; entries invalid in any column get `invalid`."""
    key = linear_key(columns(idx, dims), [sizes[d] for d in dims], invalid, elem)
    shape = b.shape_of(key)
    return b.select(valid(idx, sizes), key, b.full(shape, invalid, elem))


def unravel(key: Value, sizes: Sequence[int], elem: ir.Type) -> Value:
    """Multi-indices `[..., S]` of non-negative row-major `key`s; keys >= prod(sizes) give `sizes` (padding)."""
    shape = b.shape_of(key)
    if not sizes:
        return b.full([*shape, 0], 0, elem)
    ke = b.elem_of(key)
    uk = b.convert(key, b.unsigned(ke))  # unsigned division needs no sign fix-ups
    ue = b.elem_of(uk)
    cols = []
    for k, size in enumerate(sizes):
        stride = math.prod(sizes[k + 1 :])
        col = uk if stride == 1 else b.div(uk, b.full(shape, stride, ue))
        if k:  # every key below prod(sizes) has a first quotient below sizes[0]
            col = b.rem(col, b.full(shape, size, ue))
        cols.append(b.convert(col, elem))
    return stack_where(b.compare(key, b.full(shape, math.prod(sizes), ke), "LT"), cols, sizes)


def index_type(n: int) -> ir.Type:
    return b.i32() if n < 2**31 - 1 else b.i64()


def gather_rows(x: Value, rows: Value) -> Value:
    """`x[b, rows[b, m], ...]` for canonical `x[B, N, *rest]` and `rows[B, M]` (in range)."""
    xs = b.shape_of(x)
    bs, m = b.shape_of(rows)
    return b.gather(x, b.reshape(rows, [bs, m, 1]), offset_dims=range(2, len(xs)), collapsed_slice_dims=[1],
                    operand_batching_dims=[0], start_indices_batching_dims=[0], start_index_map=[1],
                    index_vector_dim=2, slice_sizes=[1, 1, *xs[2:]])


def scatter_rows(out: Value, rows: Value, updates: Value, combine: str) -> Value:
    """`out[b, rows[b, n], ...] (+)= updates[b, n, ...]`; rows outside `out` are dropped."""
    bs, n = b.shape_of(rows)
    return b.scatter(out, b.reshape(rows, [bs, n, 1]), updates, update_window_dims=range(2, len(b.shape_of(out))),
                     inserted_window_dims=[1], input_batching_dims=[0], scatter_indices_batching_dims=[0],
                     scattered_dims_to_operand_dims=[1], index_vector_dim=2, combine=combine)


def batching(bs: int) -> tuple[int, list[int]]:
    """With one batch row the batch dim is dropped (XLA would add an index column for it)."""
    return (0, []) if bs == 1 else (1, [0])


class SparseDims(NamedTuple):
    """The dimension numbers that read (gather) or write (scatter) canonical `x[B, *sparse, *rest]`
    at `idx[B, N, S]`: with one batch row the batch dim is dropped (`batching`)."""

    lead: int  # 1 with a batch dim, 0 without
    batch: list[int]  # the batching dims of the operand and of the indices
    window: range  # the result's (gather) or the updates' (scatter) dims of `rest`
    sparse: range  # the operand dims the index columns address

    @staticmethod
    def of(bs: int, s: int, n_rest: int) -> SparseDims:
        lead, batch = batching(bs)
        return SparseDims(lead, batch, range(lead + 1, lead + 1 + n_rest), range(lead, lead + s))


def gather_sparse(arr: Value, idx: Value) -> Value:
    """`arr[b, *idx[b, n]]` for canonical `arr[B, *sparse, *rest]` and `idx[B, N, S]` (clamped into range)."""
    bs, n, s = b.shape_of(idx)
    rest = b.shape_of(arr)[1 + s :]
    if s == 0:
        return b.broadcast(arr, [bs, n, *rest], [0, *range(2, 2 + len(rest))])
    dims = SparseDims.of(bs, s, len(rest))
    if not dims.lead:
        arr, idx = b.reshape(arr, b.shape_of(arr)[1:]), b.reshape(idx, [n, s])
    out = b.gather(arr, idx, offset_dims=dims.window, collapsed_slice_dims=dims.sparse,
                   operand_batching_dims=dims.batch, start_indices_batching_dims=dims.batch,
                   start_index_map=dims.sparse, index_vector_dim=dims.lead + 1,
                   slice_sizes=[1] * (dims.lead + s) + list(rest))
    return b.reshape(out, [bs, n, *rest])


def scatter_sparse(out: Value, idx: Value, updates: Value) -> Value:
    """`out[b, *idx[b, n]] += updates[b, n]` for canonical buffers; updates outside `out` are dropped."""
    bs, n, s = b.shape_of(idx)
    shape = b.shape_of(out)
    rest = shape[1 + s :]
    dims = SparseDims.of(bs, s, len(rest))
    if not dims.lead:
        out, idx, updates = b.reshape(out, shape[1:]), b.reshape(idx, [n, s]), b.reshape(updates, [n, *rest])
    result = b.scatter(out, idx, updates, update_window_dims=dims.window, inserted_window_dims=dims.sparse,
                       input_batching_dims=dims.batch, scatter_indices_batching_dims=dims.batch,
                       scattered_dims_to_operand_dims=dims.sparse, index_vector_dim=dims.lead + 1)
    return b.reshape(result, shape)


def sort_positions(key: Value) -> tuple[Value, Value]:
    """Sort non-negative `key[B, N]` along N: (sorted keys, the position each came from).

    Keys below 2**31 travel with their position in one 64-bit word, so XLA sorts
    a single operand (XLA:CPU's sort of one operand is much faster than one that moves
a second operand along).
    """
    bs, n = b.shape_of(key)
    ke = b.elem_of(key)
    if ke.width <= 32 and n < 2**31:
        shift = b.full([bs, n], 2**32, b.i64())
        packed = b.add(b.mul(b.convert(key, b.i64()), shift), b.iota([bs, n], 1, b.i64()))
        (packed_s,) = b.sort([packed], dim=1, stable=False)
        return b.convert(b.div(packed_s, shift), ke), b.convert(b.rem(packed_s, shift), index_type(n))
    key_s, pos_s = b.sort([key, b.iota([bs, n], 1, index_type(n))], dim=1)
    return key_s, pos_s


def segments(key: Value) -> tuple[Value, Value]:
    """For sorted `key[B, N]`: (True at the first entry of each run of equal keys, run number)."""
    bs, n = b.shape_of(key)
    first = b.full([bs, 1], 1, b.i1())
    if n > 1:
        differs = b.compare(b.slice_dim(key, 1, 1, n), b.slice_dim(key, 1, 0, n - 1), "NE")
        first = b.concat([first, differs], 1)
    it = index_type(n + 1)
    run = b.sub(b.prefix_scan(b.convert(first, it), 1), b.full([bs, n], 1, it))
    return first, run


def sum_duplicates_keys(data: Value, idx: Value, sizes: Sequence[int], nse: int) -> tuple[Value, Value]:
    """Data summed per distinct index and the sorted linear keys, `nse` slots per batch.

    Slots past the last distinct index hold data 0 and the key `prod(sizes)`.
    """
    total = math.prod(sizes)
    kt = key_type(sizes)
    if b.shape_of(idx)[1] == 0 or nse == 0:
        return sum_keys(data, b.full(b.shape_of(idx)[:2], total, kt), total, nse)
    return sum_keys(data, linear_key(idx, sizes, total, kt), total, nse)


def sum_keys(data: Value, key: Value, total: int, nse: int) -> tuple[Value, Value]:
    """`data[B, N, *rest]` summed per distinct `key[B, N]` below `total` (keys >= `total` are padding),
    and those keys sorted, `nse` slots per batch: the smallest `nse` keys are kept.

    Slots past the last distinct key hold data 0 and the key `total`.
    """
    bs, n = b.shape_of(key)
    rest = b.shape_of(data)[2:]
    kt = b.elem_of(key)
    if n == 0 or nse == 0:
        return b.full([bs, nse, *rest], 0, b.elem_of(data)), b.full([bs, nse], total, kt)
    key_s, perm = sort_positions(key)
    first, run = segments(key_s)
    it = b.elem_of(run)
    drop = b.full([bs, n], nse, it)
    target = b.select(b.compare(key_s, b.full([bs, n], total, kt), "GE"), drop, run)
    out = scatter_rows(b.full([bs, nse, *rest], 0, b.elem_of(data)), target, gather_rows(data, perm), "add")
    keys = scatter_rows(b.full([bs, nse], total, kt), b.select(first, target, drop), key_s, "set")
    return out, keys


def searchsorted(values: Value, queries: Value) -> Value:
    """For non-decreasing `values[B, N]`: how many of row b's values are <= each `queries[B, M]`
    (numpy's `searchsorted(side="right")`), by a binary search of ceil(log2(N + 1)) gathers
    (a `while` loop, so XLA compiles one step, not one kernel per step)."""
    bs, n = b.shape_of(values)
    shape = b.shape_of(queries)
    it = index_type(n + 1)
    two, last, one = b.full(shape, 2, it), b.full(shape, max(n - 1, 0), it), b.full(shape, 1, it)

    def step(i: Value, lo: Value, hi: Value) -> list[Value]:
        mid = b.div(b.add(lo, hi), two)
        below = b.compare(gather_rows(values, b.minimum(mid, last)), queries, "LE")
        right = b.and_(b.compare(mid, hi, "LT"), below)
        return [b.add(i, b.scalar(1, b.i32())), b.select(right, b.add(mid, one), lo), b.select(right, hi, mid)]

    steps = b.scalar(n.bit_length(), b.i32())
    _, lo, _ = b.while_loop([b.scalar(0, b.i32()), b.full(shape, 0, it), b.full(shape, n, it)],
                            lambda i, *_: b.compare(i, steps, "LT"), step)
    return lo
