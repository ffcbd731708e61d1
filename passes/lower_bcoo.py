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
from typing import Any, ClassVar

from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes import builders as b
from hlopt.passes.base import Pass, PassError
from hlopt.passes.mlir import ir
from hlopt.passes.walk import walk_ops

Value = ir.Value
PREFIX = "hlopt.bcoo."


@dataclasses.dataclass
class BcooOp:
    """One `hlopt.bcoo.<name>` op as a lowering rule sees it."""

    op: ir.Operation
    name: str
    config: dict[str, Any]
    result_types: list[ir.RankedTensorType]

    @property
    def operands(self) -> list[Value]:
        """Read when the rule runs: rules for earlier ops may have replaced these values."""
        return list(self.op.operands)

    def layout(self, first: int = 0, shape_key: str = "shape") -> shapes.Layout:
        """The layout of the BCOO operand whose data is operand `first` (indices follow it)."""
        try:
            return shapes.layout(
                self.config[shape_key], b.shape_of(self.operands[first]), b.shape_of(self.operands[first + 1])
            )
        except (KeyError, IndexError, ValueError) as e:
            raise PassError(f"{self.op.name} @{PREFIX}{self.name}: invalid operands or config: {e}", self.op.location)

    def result_shape(self, i: int) -> list[int]:
        return list(self.result_types[i].shape)

    def result_elem(self, i: int) -> ir.Type:
        return self.result_types[i].element_type


def _decode(attr: ir.Attribute) -> Any:
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return tuple(attr)
    if isinstance(attr, ir.ArrayAttr):
        return tuple(_decode(a) for a in attr)
    if isinstance(attr, ir.DictAttr):
        return {a.name: _decode(a.attr) for a in attr}
    if isinstance(attr, ir.UnitAttr):
        return None
    raise PassError(f"unexpected attribute {attr} in an hlopt.bcoo backend_config")


# ---------------------------------------------------------------------------
# Canonical layout helpers


def _broadcast_batch(v: Value, batch: Sequence[int]) -> Value:
    shape = b.shape_of(v)
    return b.broadcast_to(v, [*batch, *shape[len(batch) :]])


def _flatten_batch(v: Value, n_batch: int) -> Value:
    shape = b.shape_of(v)
    return b.reshape(v, [math.prod(shape[:n_batch]), *shape[n_batch:]])


def _canonical(v: Value, batch: Sequence[int]) -> Value:
    """Broadcast the batch dims of `v` to `batch` and flatten them into one."""
    return _flatten_batch(_broadcast_batch(v, batch), len(batch))


def _restore(v: Value, batch: Sequence[int], target: Sequence[int]) -> Value:
    """Undo `_canonical`, then keep row 0 of each batch dim that `target` has as 1."""
    shape = b.shape_of(v)
    v = b.reshape(v, [*batch, *shape[1:]])
    full = b.shape_of(v)
    limits = [1 if i < len(batch) and target[i] == 1 else s for i, s in enumerate(full)]
    return b.slice_(v, [0] * len(full), limits, [1] * len(full))


def _sizes(idx: Value, sizes: Sequence[int]) -> Value:
    """The per-column `sizes` broadcast to the shape of `idx` (last dim = columns); a splat when all are equal."""
    shape = b.shape_of(idx)
    if len(set(sizes)) == 1:
        return b.full(shape, sizes[0], b.elem_of(idx))
    return b.broadcast(b.int_vector(sizes, b.elem_of(idx)), shape, [len(shape) - 1])


def _columns(idx: Value, cols: Sequence[int]) -> Value:
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


def _in_range(idx: Value, sizes: Sequence[int]) -> Value:
    """True where `0 <= idx[..., k] < sizes[k]`: one unsigned compare (negative indices wrap above every size)."""
    u = b.convert(idx, b.unsigned(b.elem_of(idx)))
    return b.compare(u, _sizes(u, sizes), "LT")


def _valid(idx: Value, sizes: Sequence[int]) -> Value:
    """True where every index of an entry is in `[0, size)`: `idx[..., S]` -> i1 `[...]`."""
    return _fold_columns(_in_range(idx, sizes))


def _fold_columns(x: Value, kind: str = "and") -> Value:
    """`x[..., S]` -> `[...]`, the columns combined with `kind` (`and`: true where every column
    is); a chain of ops for few columns (fuses better), else a reduce."""
    shape = b.shape_of(x)
    if not 0 < shape[-1] <= 8:
        return b.reduce(x, [len(shape) - 1], kind)
    result = _column(x, 0)
    for k in range(1, shape[-1]):
        result = b.COMBINERS[kind](result, _column(x, k))
    return result


def _column(x: Value, k: int) -> Value:
    """`x[..., k]`."""
    shape = b.shape_of(x)
    return b.reshape(b.slice_dim(x, len(shape) - 1, k, k + 1), shape[:-1])


def _stack_where(ok: Value, cols: Sequence[Value], fill: Sequence[int]) -> Value:
    """Index columns `cols` (each shaped like `ok`) stacked into `[..., S]`, with `fill[k]` in
    column k where `ok` is false.

    One select per column: a select of `ok` broadcast across the columns becomes, on XLA:CPU, a
    branch per entry (LLVM unswitches the column loop), which mispredicts on irregular masks
    (slice: 5x slower).
    """
    shape = b.shape_of(ok)
    picked = [b.select(ok, col, b.full(shape, f, b.elem_of(col))) for col, f in zip(cols, fill, strict=True)]
    return b.concat([b.reshape(p, [*shape, 1]) for p in picked], len(shape))


def _where(ok: Value, idx: Value, fill: Sequence[int]) -> Value:
    """`idx[..., S]` where `ok[...]`, else the per-column `fill` (see `_stack_where`)."""
    shape = b.shape_of(idx)
    if not shape[-1]:
        return idx
    return _stack_where(ok, [_column(idx, k) for k in range(shape[-1])], fill)


def _padding_unless_zero(flags: Value, idx: Value, fill: Sequence[int]) -> Value:
    """`idx[..., K]` where every column of `flags[..., F]` is 0, else the per-column `fill`.

    A gather from the stack `[idx, fill]` whose start index is the flags read unsigned
    (or-ed), which the gather clamps to 1 when not 0: pure data movement, so a program
    made of it alone stays under PJRT's CPU threshold for running on the calling thread
    (a compare + select per entry does not, and the hand-off to a worker costs more than
    the work).
    """
    lead = b.shape_of(idx)[:-1]
    n = len(lead)
    flag = _fold_columns(b.convert(flags, b.unsigned(b.elem_of(flags))), "or")
    table = b.concat([b.reshape(v, [1, *b.shape_of(v)]) for v in (idx, _sizes(idx, fill))], 0)
    return b.gather(
        table, b.reshape(flag, [*lead, 1]), offset_dims=[n], collapsed_slice_dims=[0],
        operand_batching_dims=range(1, n + 1), start_indices_batching_dims=range(n), start_index_map=[0],
        index_vector_dim=n, slice_sizes=[1] * (n + 1) + [b.shape_of(idx)[-1]],
    )


def _mask(x: Value, ok: Value) -> Value:
    """Zero the entries of `x[*lead, *rest]` where `ok[*lead]` is false."""
    shape = b.shape_of(x)
    lead = len(b.shape_of(ok))
    return b.select(b.broadcast(ok, shape, range(lead)), x, b.zeros_like(x))


def _key_type(sizes: Sequence[int], headroom: int = 1) -> ir.Type:
    """The narrowest integer type holding `headroom * (prod(sizes) + 2)`: linear keys and their sentinels."""
    bound = headroom * (math.prod(sizes) + 2)
    if bound >= 2**62:
        raise PassError(f"sparse dimensions {tuple(sizes)} are too large to linearize into 64-bit keys")
    return _index_type(bound)


def _linear_key(idx: Value, sizes: Sequence[int], invalid: int, elem: ir.Type | None = None) -> Value:
    """Row-major linear index of each entry (type `elem`, default `_key_type`), `invalid` for padding."""
    elem = elem or _key_type(sizes)
    shape = b.shape_of(idx)[:-1]
    terms = []
    for k in range(len(sizes)):
        stride = math.prod(sizes[k + 1 :])
        col = b.convert(_column(idx, k), elem)
        terms.append(col if stride == 1 else b.mul(col, b.full(shape, stride, elem)))
    key = terms[0] if terms else b.full(shape, 0, elem)
    for term in terms[1:]:
        key = b.add(key, term)
    return b.select(_valid(idx, sizes), key, b.full(shape, invalid, elem))


def _unravel(key: Value, sizes: Sequence[int], elem: ir.Type) -> Value:
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
    return _stack_where(b.compare(key, b.full(shape, math.prod(sizes), ke), "LT"), cols, sizes)


def _index_type(n: int) -> ir.Type:
    return b.i32() if n < 2**31 - 1 else b.i64()


def _gather_rows(x: Value, rows: Value) -> Value:
    """`x[b, rows[b, m], ...]` for canonical `x[B, N, *rest]` and `rows[B, M]` (in range)."""
    xs = b.shape_of(x)
    bs, m = b.shape_of(rows)
    return b.gather(
        x,
        b.reshape(rows, [bs, m, 1]),
        offset_dims=range(2, len(xs)),
        collapsed_slice_dims=[1],
        operand_batching_dims=[0],
        start_indices_batching_dims=[0],
        start_index_map=[1],
        index_vector_dim=2,
        slice_sizes=[1, 1, *xs[2:]],
    )


def _scatter_rows(out: Value, rows: Value, updates: Value, combine: str) -> Value:
    """`out[b, rows[b, n], ...] (+)= updates[b, n, ...]`; rows outside `out` are dropped."""
    os_ = b.shape_of(out)
    bs, n = b.shape_of(rows)
    return b.scatter(
        out,
        b.reshape(rows, [bs, n, 1]),
        updates,
        update_window_dims=range(2, len(os_)),
        inserted_window_dims=[1],
        input_batching_dims=[0],
        scatter_indices_batching_dims=[0],
        scattered_dims_to_operand_dims=[1],
        index_vector_dim=2,
        combine=combine,
    )


def _batching(bs: int) -> tuple[int, list[int]]:
    """With one batch row the batch dim is dropped (XLA would add an index column for it)."""
    return (0, []) if bs == 1 else (1, [0])


def _gather_sparse(arr: Value, idx: Value) -> Value:
    """`arr[b, *idx[b, n]]` for canonical `arr[B, *sparse, *rest]` and `idx[B, N, S]` (clamped into range)."""
    bs, n, s = b.shape_of(idx)
    rest = b.shape_of(arr)[1 + s :]
    if s == 0:
        return b.broadcast(arr, [bs, n, *rest], [0, *range(2, 2 + len(rest))])
    lead, batch_dims = _batching(bs)
    if not lead:
        arr, idx = b.reshape(arr, b.shape_of(arr)[1:]), b.reshape(idx, [n, s])
    out = b.gather(
        arr,
        idx,
        offset_dims=range(lead + 1, lead + 1 + len(rest)),
        collapsed_slice_dims=range(lead, lead + s),
        operand_batching_dims=batch_dims,
        start_indices_batching_dims=batch_dims,
        start_index_map=range(lead, lead + s),
        index_vector_dim=lead + 1,
        slice_sizes=[1] * (lead + s) + list(rest),
    )
    return b.reshape(out, [bs, n, *rest])


def _scatter_sparse(out: Value, idx: Value, updates: Value) -> Value:
    """`out[b, *idx[b, n]] += updates[b, n]` for canonical buffers; updates outside `out` are dropped."""
    bs, n, s = b.shape_of(idx)
    shape = b.shape_of(out)
    rest = shape[1 + s :]
    lead, batch_dims = _batching(bs)
    if not lead:
        out, idx, updates = b.reshape(out, shape[1:]), b.reshape(idx, [n, s]), b.reshape(updates, [n, *rest])
    result = b.scatter(
        out,
        idx,
        updates,
        update_window_dims=range(lead + 1, lead + 1 + len(rest)),
        inserted_window_dims=range(lead, lead + s),
        input_batching_dims=batch_dims,
        scatter_indices_batching_dims=batch_dims,
        scattered_dims_to_operand_dims=range(lead, lead + s),
        index_vector_dim=lead + 1,
    )
    return b.reshape(result, shape)


def _sort_positions(key: Value) -> tuple[Value, Value]:
    """Sort non-negative `key[B, N]` along N: (sorted keys, the position each came from).

    Keys below 2**31 travel with their position in one 64-bit word, so XLA sorts
    a single operand (about 3x faster on CPU than sorting a second operand along).
    """
    bs, n = b.shape_of(key)
    ke = b.elem_of(key)
    if ke.width <= 32 and n < 2**31:
        shift = b.full([bs, n], 2**32, b.i64())
        packed = b.add(b.mul(b.convert(key, b.i64()), shift), b.iota([bs, n], 1, b.i64()))
        (packed_s,) = b.sort([packed], dim=1, stable=False)
        return b.convert(b.div(packed_s, shift), ke), b.convert(b.rem(packed_s, shift), _index_type(n))
    key_s, pos_s = b.sort([key, b.iota([bs, n], 1, _index_type(n))], dim=1)
    return key_s, pos_s


def _segments(key: Value) -> tuple[Value, Value]:
    """For sorted `key[B, N]`: (True at the first entry of each run of equal keys, run number)."""
    bs, n = b.shape_of(key)
    first = b.full([bs, 1], 1, b.i1())
    if n > 1:
        differs = b.compare(b.slice_dim(key, 1, 1, n), b.slice_dim(key, 1, 0, n - 1), "NE")
        first = b.concat([first, differs], 1)
    it = _index_type(n + 1)
    run = b.sub(b.prefix_scan(b.convert(first, it), 1), b.full([bs, n], 1, it))
    return first, run


def _sum_duplicates_keys(data: Value, idx: Value, sizes: Sequence[int], nse: int) -> tuple[Value, Value]:
    """Data summed per distinct index and the sorted linear keys, `nse` slots per batch.

    Slots past the last distinct index hold data 0 and the key `prod(sizes)`.
    """
    bs, n = b.shape_of(idx)[:2]
    rest = b.shape_of(data)[2:]
    total = math.prod(sizes)
    kt = _key_type(sizes)
    if n == 0 or nse == 0:
        return b.full([bs, nse, *rest], 0, b.elem_of(data)), b.full([bs, nse], total, kt)
    key_s, perm = _sort_positions(_linear_key(idx, sizes, total, kt))
    first, run = _segments(key_s)
    it = b.elem_of(run)
    drop = b.full([bs, n], nse, it)
    target = b.select(b.compare(key_s, b.full([bs, n], total, kt), "EQ"), drop, run)
    out = _scatter_rows(b.full([bs, nse, *rest], 0, b.elem_of(data)), target, _gather_rows(data, perm), "add")
    keys = _scatter_rows(b.full([bs, nse], total, kt), b.select(first, target, drop), key_s, "set")
    return out, keys


# ---------------------------------------------------------------------------
# Rules, one per op


def lower_todense(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    batch = lay.batch_shape
    bs = math.prod(batch)
    data_c, idx_c = _canonical(data, batch), _canonical(idx, batch)
    out_c = [bs, *lay.sparse_shape, *lay.dense_shape]
    if lay.n_sparse == 0:
        out = b.reduce(data_c, [1])
    elif lay.nse == 0 or math.prod(out_c) == 0:
        out = b.full(out_c, 0, b.elem_of(data))
    else:
        # An update whose index is outside the array (padding, negative or past the end) is dropped.
        out = _scatter_sparse(b.full(out_c, 0, b.elem_of(data)), idx_c, data_c)
    return [b.reshape(out, lay.shape)]


def lower_extract(c: BcooOp) -> list[Value]:
    arr, idx = c.operands
    try:
        lay = shapes.extract_layout(b.shape_of(arr), b.shape_of(idx))
    except ValueError as e:
        raise PassError(f"@{PREFIX}extract: invalid operands: {e}", c.op.location) from None
    batch = lay.batch_shape
    bs = math.prod(batch)
    arr_c = b.reshape(arr, [bs, *lay.shape[lay.n_batch :]])
    idx_c = _canonical(idx, batch)
    ok = _valid(idx_c, lay.sparse_shape)
    out = _mask(_gather_sparse(arr_c, _where(ok, idx_c, [0] * lay.n_sparse)), ok)
    return [b.reshape(out, c.result_shape(0))]


def lower_multiply_dense(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx, v = c.operands
    out_shape = c.result_shape(0)
    vs = b.shape_of(v)
    if not vs:
        return [b.mul(data, b.broadcast(v, b.shape_of(data), []))]
    nb, ns = lay.n_batch, lay.n_sparse
    v = b.reshape(v, [1] * (len(lay.shape) - len(vs)) + vs)
    vs = b.shape_of(v)
    batch = out_shape[:nb]
    bs = math.prod(batch)
    data_c = _canonical(data, batch)
    idx_c = _canonical(idx, batch)
    v_c = b.reshape(_broadcast_batch(v, batch), [bs, *vs[nb:]])
    keep = [1 if s > 1 else 0 for s in vs[nb : nb + ns]]
    where = idx_c if all(keep) else b.mul(idx_c, _sizes(idx_c, keep))
    # Padding entries read a clamped element, as in JAX; their data is never used.
    gathered = b.broadcast_to(_gather_sparse(v_c, where), b.shape_of(data_c))
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
    if ns == 0:
        data = b.slice_dim(mat_c, 1, 0, 0) if nse == 0 else b.pad(
            mat_c, [0] * (2 + nd), [0, nse - 1] + [0] * nd, [0] * (2 + nd), b.scalar(0, elem)
        )
        indices = b.full([bs, nse, 0], 0, c.result_elem(1))
    else:
        nonzero = b.reduce(b.compare(mat_c, b.zeros_like(mat_c), "NE"), range(2, 2 + nd), "or")
        it = _index_type(total + 1)
        rank = b.sub(b.prefix_scan(b.convert(nonzero, it), 1), b.full([bs, total], 1, it))
        target = b.select(nonzero, rank, b.full([bs, total], nse, it))
        where = _scatter_rows(b.full([bs, nse], total, it), target, b.iota([bs, total], 1, it), "set")
        ok = b.compare(where, b.full([bs, nse], total, it), "LT")
        data = _mask(_gather_rows(mat_c, b.select(ok, where, b.zeros_like(where))), ok)
        indices = _unravel(where, sparse, c.result_elem(1))
    return [b.reshape(data, c.result_shape(0)), b.reshape(indices, c.result_shape(1))]


def lower_sort_indices(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    if lay.n_sparse == 0:
        return [data, idx]
    if lay.nse == 0:
        return [b.broadcast_to(data, c.result_shape(0)), idx]
    batch = lay.max_batch
    data_c, idx_c = _canonical(data, batch), _canonical(idx, batch)
    bs, n = b.shape_of(idx_c)[:2]
    total = math.prod(lay.sparse_shape)
    key = _linear_key(idx_c, lay.sparse_shape, total)
    key_s, perm = _sort_positions(key)
    # Sorted keys give back the indices; every padding entry comes out as `shape` (canonical padding).
    idx_s = _unravel(key_s, lay.sparse_shape, b.elem_of(idx_c))
    data_s = _gather_rows(data_c, perm)
    return [_restore(data_s, batch, c.result_shape(0)), _restore(idx_s, batch, c.result_shape(1))]


def lower_sum_duplicates(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    nse = c.config["nse"]
    batch = lay.max_batch
    data_c, idx_c = _canonical(data, batch), _canonical(idx, batch)
    if lay.n_sparse == 0:
        total = b.reduce(data_c, [1])
        bs = math.prod(batch)
        total = b.reshape(total, [bs, 1, *lay.dense_shape])
        nd = lay.n_dense
        out = b.pad(total, [0] * (2 + nd), [0, nse - 1] + [0] * nd, [0] * (2 + nd), b.scalar(0, b.elem_of(data))) \
            if nse else b.slice_dim(total, 1, 0, 0)
        indices = b.full([bs, nse, 0], 0, b.elem_of(idx))
    else:
        out, keys = _sum_duplicates_keys(data_c, idx_c, lay.sparse_shape, nse)
        indices = _unravel(keys, lay.sparse_shape, b.elem_of(idx))
    return [_restore(out, batch, c.result_shape(0)), _restore(indices, batch, c.result_shape(1))]


def lower_transpose(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    perm = c.config["permutation"]
    nb, ns = lay.n_batch, lay.n_sparse
    dense = [p - ns + 1 for p in perm[nb + ns :]]
    cols = [p - nb for p in perm[nb : nb + ns]]
    data = b.transpose(data, [*perm[:nb], nb, *dense])
    idx = b.transpose(_columns(idx, cols), [*perm[:nb], nb, nb + 1])
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
            idx = _padding_unless_zero(_columns(idx, squeezed), _columns(idx, kept),
                                       [lay.sparse_shape[k] for k in kept])
        else:
            inside = _valid(_columns(idx, squeezed), [1] * len(squeezed))
            batch = lay.max_batch
            data = _mask(_broadcast_batch(data, batch), _broadcast_batch(inside, batch))
            idx = _columns(idx, kept)
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
        shifted = b.sub(idx, _sizes(idx, st))
        inside = _in_range(shifted, [e - s for s, e in zip(st, lim)])
        if any(t != 1 for t in sd):  # integer division only where a stride needs it; unsigned needs no sign fix-ups
            wrapped = b.convert(shifted, b.unsigned(b.elem_of(idx)))
            steps = _sizes(wrapped, sd)
            inside = b.and_(inside, b.compare(b.rem(wrapped, steps), b.zeros_like(wrapped), "EQ"))
            shifted = b.convert(b.div(wrapped, steps), b.elem_of(idx))
        keep = _fold_columns(inside)
        new_sizes = [(e - s + t - 1) // t for s, e, t in zip(st, lim, sd)]
        idx = _where(keep, shifted, new_sizes)
        batch = c.result_shape(0)[:nb]
        data = _mask(_broadcast_batch(data, batch), _broadcast_batch(keep, batch))
    return [data, idx]


def lower_reduce_sum(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    axes = sorted(set(c.config["axes"]))
    plan = shapes.reduce_sum(lay, axes)
    nb, ns = lay.n_batch, lay.n_sparse
    data = b.reduce(data, [a - ns + 1 for a in axes if a >= nb + ns])
    if plan.mask:
        batch = lay.max_batch
        data = _mask(_broadcast_batch(data, batch), _broadcast_batch(_valid(idx, lay.sparse_shape), batch))
    factor = math.prod(lay.shape[a] for a in plan.scale)
    if factor != 1:
        data = b.mul(data, b.full(b.shape_of(data), factor, b.elem_of(data)))
    idx = _columns(idx, [d - nb for d in range(nb, nb + ns) if d not in axes])
    kept = [a for a in range(nb) if a not in axes]
    target = [lay.shape[a] if a in plan.fold else 1 if a in plan.scale else plan.batch[kept.index(a)] for a in range(nb)]
    outs = []
    for buf, out in ((data, plan.data), (idx, plan.indices)):
        buf = _broadcast_batch(buf, target)
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
    data = _broadcast_batch(data, lay.batch_shape)
    idx = _broadcast_batch(idx, lay.batch_shape)
    data = b.transpose(data, [*plan.batch_perm, nb, *(p + nb + 1 for p in plan.dense_perm)])
    idx = b.transpose(idx, [*plan.batch_perm, nb, nb + 1])
    data_shape, idx_shape = shapes.reshape_buffers(lay, plan)
    data = b.reshape(data, data_shape)
    idx = b.reshape(idx, [*plan.batch, lay.nse, ns])
    if ns and plan.sparse:
        sizes = [lay.sparse_shape[p] for p in plan.sparse_perm]
        key = _linear_key(_columns(idx, plan.sparse_perm), sizes, math.prod(sizes))
        idx = _unravel(key, plan.sparse, b.elem_of(idx))
    elif ns:
        data = _mask(data, _valid(idx, lay.sparse_shape))
        idx = b.full(idx_shape, 0, b.elem_of(idx))
    else:
        idx = b.full(idx_shape, 0, b.elem_of(idx))
    return [data, idx]


def lower_update_layout(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    n_batch, n_dense = c.config["n_batch"], c.config["n_dense"]
    data, idx = _broadcast_batch(data, lay.batch_shape), _broadcast_batch(idx, lay.batch_shape)
    nb, nd = lay.n_batch, lay.n_dense
    shape = lay.shape
    if n_dense < nd:
        data, idx = _dense_to_sparse(data, idx, nb, nd - n_dense)
        nd = n_dense
    if n_batch < nb:
        data, idx = _batch_to_sparse(data, idx, n_batch, nb - n_batch)
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
    grid = _unravel(b.iota([m], 0, b.i64()), moved, b.elem_of(idx))
    grid = b.broadcast(grid, [*ish[:nb], nse, m, n], [nb + 1, nb + 2])
    old = b.broadcast(idx, [*ish[:nb], nse, m, s], [*range(nb + 1), nb + 2])
    idx = b.reshape(b.concat([old, grid], nb + 2), [*ish[:nb], nse * m, s + n])
    return data, idx


def _batch_to_sparse(data: Value, idx: Value, keep: int, n: int) -> tuple[Value, Value]:
    """The last `n` of `keep + n` batch dims become the first sparse dims."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    moved = ish[keep : keep + n]
    nse, s = ish[keep + n], ish[keep + n + 1]
    m = math.prod(moved)
    data = b.reshape(data, [*ds[:keep], m * nse, *ds[keep + n + 1 :]])
    coords = [b.iota([*ish[:-1], 1], keep + k, b.elem_of(idx)) for k in range(n)]
    idx = b.reshape(b.concat([*coords, idx], keep + n + 1), [*ish[:keep], m * nse, n + s])
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
    hot = _one_hot(_columns(idx, range(s - n, s)), sizes, nb + 1)
    out = [*ds[: nb + 1], *sizes, *ds[nb + 1 :]]
    spread = b.broadcast(data, out, [*range(nb + 1), *range(nb + 1 + n, len(out))])
    data = b.select(b.broadcast(hot, out, range(nb + 1 + n)), spread, b.zeros_like(spread))
    return data, _columns(idx, range(s - n))


def _sparse_to_batch(data: Value, idx: Value, nb: int, sizes: Sequence[int]) -> tuple[Value, Value]:
    """The first `len(sizes)` sparse dims become the last batch dims."""
    ds, ish = b.shape_of(data), b.shape_of(idx)
    n, s, nse = len(sizes), ish[-1], ish[-2]
    hot = _one_hot(_columns(idx, range(n)), sizes, nb + 1)
    hot = b.transpose(hot, [*range(nb), *range(nb + 1, nb + 1 + n), nb])
    out = [*ds[:nb], *sizes, *ds[nb:]]
    spread = b.broadcast(data, out, [*range(nb), *range(nb + n, len(out))])
    data = b.select(b.broadcast(hot, out, range(nb + n + 1)), spread, b.zeros_like(spread))
    rest = _columns(idx, range(n, s))
    idx = b.broadcast(rest, [*ish[:nb], *sizes, nse, s - n], [*range(nb), nb + n, nb + n + 1])
    return data, idx


def lower_multiply_sparse(c: BcooOp) -> list[Value]:
    lhs, rhs = c.layout(0), c.layout(2, "rhs_shape")
    plan = shapes.multiply_sparse(lhs, rhs, c.config["driver"])
    nb = plan.n_batch
    sides = []
    for lay, (data, idx) in ((lhs, c.operands[:2]), (rhs, c.operands[2:])):
        data, idx = _broadcast_batch(data, lay.batch_shape), _broadcast_batch(idx, lay.batch_shape)
        if lay.n_batch > nb:
            data, idx = _batch_to_sparse(data, idx, nb, lay.n_batch - nb)
        sizes = lay.shape[nb : len(lay.shape) - lay.n_dense]
        sides.append((_canonical(data, plan.batch), _canonical(idx, plan.batch), sizes))
    out_sizes = plan.shape[nb : len(plan.shape) - lhs.n_dense]
    if plan.driver == "pairs":
        out_data, out_idx = _multiply_pairs(sides[0], sides[1], out_sizes)
    else:
        drive, look = (sides[0], sides[1]) if plan.driver == "lhs" else (sides[1], sides[0])
        out_data, out_idx = _multiply_lookup(drive, look, out_sizes)
    return [b.reshape(out_data, plan.data), b.reshape(out_idx, plan.indices)]


Side = tuple[Value, Value, Sequence[int]]


def _matched_key(idx: Value, sizes: Sequence[int], dims: Sequence[int], invalid: int, elem: ir.Type) -> Value:
    """Linear key of the columns `dims`; entries invalid in any column get `invalid`."""
    key = _linear_key(_columns(idx, dims), [sizes[d] for d in dims], invalid, elem)
    shape = b.shape_of(key)
    return b.select(_valid(idx, sizes), key, b.full(shape, invalid, elem))


def _dense_product(a: Value, c: Value, dense: Sequence[int]) -> Value:
    lead = b.shape_of(a)[:2]
    return b.mul(b.broadcast_to(a, [*lead, *dense]), b.broadcast_to(c, [*lead, *dense]))


def _multiply_lookup(drive: Side, look: Side, out_sizes: Sequence[int]) -> tuple[Value, Value]:
    """Each driver entry times the summed lookup entries at its index (the lookup side may broadcast)."""
    d_data, d_idx, d_sizes = drive
    k_data, k_idx, k_sizes = look
    bs, nd_ = b.shape_of(d_idx)[:2]
    nk = b.shape_of(k_idx)[1]
    dense = [max(x, y) for x, y in zip(b.shape_of(d_data)[2:], b.shape_of(k_data)[2:])]
    if nd_ == 0 or nk == 0:
        data = b.full([bs, nd_, *dense], 0, b.elem_of(d_data))
        return data, _sizes(b.full(b.shape_of(d_idx), 0, b.elem_of(d_idx)), out_sizes)
    dims = [k for k, s in enumerate(k_sizes) if s != 1]
    total = math.prod(k_sizes[k] for k in dims)
    # Size-1 dims of the lookup side add 0 to its linear keys, which are therefore keys over `dims`.
    u_data, u_key = _sum_duplicates_keys(k_data, k_idx, k_sizes, nk)
    kt = _key_type([k_sizes[k] for k in dims], headroom=2)
    u_key = b.convert(u_key, kt)
    d_key = _matched_key(d_idx, d_sizes, dims, total + 1, kt)
    two = b.full([bs, nk + nd_], 2, kt)
    tags = b.concat([b.full([bs, nk], 0, kt), b.full([bs, nd_], 1, kt)], 1)
    combined = b.add(b.mul(b.concat([u_key, d_key], 1), two), tags)
    _, pos_s = _sort_positions(combined)
    it = b.elem_of(pos_s)
    from_look = b.compare(pos_s, b.full([bs, nk + nd_], nk, it), "LT")
    last = b.prefix_scan(b.select(from_look, pos_s, b.full([bs, nk + nd_], -1, it)), 1, "max")
    partner = _scatter_rows(
        b.full([bs, nd_], -1, it),
        b.select(from_look, b.full([bs, nk + nd_], nd_, it), b.sub(pos_s, b.full([bs, nk + nd_], nk, it))),
        last,
        "set",
    )
    found = b.compare(partner, b.zeros_like(partner), "GE")
    safe = b.select(found, partner, b.zeros_like(partner))
    match = b.and_(found, b.compare(_gather_rows(u_key, safe), d_key, "EQ"))
    data = _mask(_dense_product(d_data, _gather_rows(u_data, safe), dense), match)
    idx = _where(match, d_idx, out_sizes)
    return data, idx


def _multiply_pairs(lhs: Side, rhs: Side, out_sizes: Sequence[int]) -> tuple[Value, Value]:
    """Every pair of entries, kept where their indices agree: both operands broadcast."""
    l_data, l_idx, l_sizes = lhs
    r_data, r_idx, r_sizes = rhs
    bs, nl, s = b.shape_of(l_idx)
    nr = b.shape_of(r_idx)[1]
    dims = [k for k in range(s) if l_sizes[k] != 1 and r_sizes[k] != 1]
    total = math.prod(l_sizes[k] for k in dims)
    kt = _key_type([l_sizes[k] for k in dims])
    lk = b.broadcast(_matched_key(l_idx, l_sizes, dims, total, kt), [bs, nl, nr], [0, 1])
    rk = b.broadcast(_matched_key(r_idx, r_sizes, dims, total + 1, kt), [bs, nl, nr], [0, 2])
    match = b.reshape(b.compare(lk, rk, "EQ"), [bs, nl * nr])
    dense = [max(x, y) for x, y in zip(b.shape_of(l_data)[2:], b.shape_of(r_data)[2:])]
    nd = len(dense)
    pair = [bs, nl, nr, *dense]
    ld = b.broadcast(l_data, pair, [0, 1, *range(3, 3 + nd)])
    rd = b.broadcast(r_data, pair, [0, 2, *range(3, 3 + nd)])
    data = _mask(b.reshape(b.mul(ld, rd), [bs, nl * nr, *dense]), match)
    li = b.broadcast(l_idx, [bs, nl, nr, s], [0, 1, 3])
    ri = b.broadcast(r_idx, [bs, nl, nr, s], [0, 2, 3])
    idx = b.reshape(b.maximum(li, ri), [bs, nl * nr, s])
    idx = _where(match, idx, out_sizes)
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
}


def is_bcoo_op(op: ir.Operation) -> bool:
    """True for a `stablehlo.custom_call` whose target starts with `hlopt.bcoo.`."""
    return op.name == "stablehlo.custom_call" and ir.StringAttr(op.attributes["call_target_name"]).value.startswith(PREFIX)


def bcoo_op(op: ir.Operation) -> BcooOp:
    """The `BcooOp` view of an `hlopt.bcoo.*` custom_call."""
    target = ir.StringAttr(op.attributes["call_target_name"]).value
    name = target[len(PREFIX) :]
    if name not in LOWERINGS:
        raise PassError(f"unknown sparse op @{target} (known: {', '.join(sorted(LOWERINGS))})", op.location)
    config = op.attributes["backend_config"] if "backend_config" in op.attributes else None
    if not isinstance(config, ir.DictAttr):
        raise PassError(f"@{target} needs a dictionary backend_config", op.location)
    return BcooOp(op, name, _decode(config), [ir.RankedTensorType(r.type) for r in op.results])


@dataclasses.dataclass(frozen=True)
class LowerBcoo(Pass):
    """Lower every `hlopt.bcoo.*` custom_call to StableHLO gathers, scatters, sorts and reductions.

    Before:
      %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices)
             {api_version = 4, backend_config = {shape = array<i64: 4, 5>, n_batch = 0, n_dense = 0, ...}}
             : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
    After:
      %0 = "stablehlo.scatter"(%zeros, %safe_indices, %masked_data) ({ stablehlo.add ... })
             : (tensor<1x4x5xf32>, tensor<1x3x2xi32>, tensor<1x3xf32>) -> tensor<1x4x5xf32>
      %1 = stablehlo.reshape %0 : (tensor<1x4x5xf32>) -> tensor<4x5xf32>
    """

    name: ClassVar[str] = "lower-bcoo"

    def apply(self, module: ir.Operation) -> None:
        found = [op for op in walk_ops(module, "stablehlo.custom_call") if is_bcoo_op(op)]
        for view in map(bcoo_op, found):
            with view.op.location, ir.InsertionPoint(view.op):
                values = LOWERINGS[view.name](view)
            for old, new in zip(view.op.results, values, strict=True):
                if old.type != new.type:
                    raise PassError(
                        f"lower-bcoo built {new.type} for a result of type {old.type} of @{PREFIX}{view.name}",
                        view.op.location,
                    )
                old.replace_all_uses_with(new)
            view.op.erase()
