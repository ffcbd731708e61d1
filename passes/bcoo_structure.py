"""lower-bcoo rules for the structure ops: `broadcast_in_dim`, `concatenate`, `dynamic_slice` and
`conv` (the 1-d sparse convolution of `bcoo_conv_general_dilated`), and the first-occurrence mask
of `extract` without `assume_unique`.

- `broadcast_in_dim`: both buffers are broadcast (new batch and dense dims; the result buffers
  have full batch dims) and new sparse dims (all of size 1) get index columns of 0.
- `concatenate`: along a batch dim the buffers are concatenated there, each operand's entry
  list first padded to the largest nse with padding entries; along a sparse dim the entry lists
  are concatenated and each operand's indices in that dim offset by the sizes before it (a
  padding entry stays padding: it gets the out-of-range index of the result in every dim).
- `dynamic_slice`: start indices are wrapped once when negative and clamped so the slice fits
  (lax.dynamic_slice's rule); batch and dense dims slice the buffers, sparse dims shift the
  indices and turn entries outside the window into padding (data 0).
- `conv`: every pair of an lhs and an rhs entry gives one entry, `lhs * rhs` at
  `i_lhs + padding_low - i_rhs`; pairs with a padding entry or an index outside the output are
  padding (data 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlopt.passes import bcoo_index as ix
from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes import builders as b
from hlopt.passes.bcoo_config import BcooOp
from hlopt.passes.mlir import ir

Value = ir.Value


def lower_broadcast_in_dim(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx = c.operands
    dims = c.config["broadcast_dimensions"]
    plan = shapes.broadcast_in_dim(lay, c.config["new_shape"], dims)
    nb, ns = lay.n_batch, lay.n_sparse
    n_sparse = plan.indices[-1]
    dense = [d - n_sparse + 1 for d in dims[nb + ns :]]
    data = b.broadcast(data, plan.data, [*dims[:nb], plan.n_batch, *dense])
    idx = b.broadcast(idx, [*plan.indices[:-1], ns], [*dims[:nb], plan.n_batch, plan.n_batch + 1])
    if n_sparse != ns:
        lead = b.shape_of(idx)[:-1]
        zero = b.full([*lead, 1], 0, b.elem_of(idx))
        cols = [b.slice_dim(idx, len(lead), plan.sparse_cols.index(j), plan.sparse_cols.index(j) + 1)
                if j in plan.sparse_cols else zero for j in range(n_sparse)]
        idx = b.concat(cols, len(lead))
    return [data, idx]


def lower_concatenate(c: BcooOp) -> list[Value]:
    dim, sizes = c.config["dimension"], c.config["sizes"]
    operands = c.operands
    lays = [shapes.layout(tuple(s if d == dim else n for d, n in enumerate(c.config["shape"])),
                          b.shape_of(operands[2 * k]), b.shape_of(operands[2 * k + 1])) for k, s in enumerate(sizes)]
    out = c.result_shape(1)
    nb, ns = lays[0].n_batch, lays[0].n_sparse
    nse = out[nb]
    datas, idxs = [], []
    offset = 0
    for k, lay in enumerate(lays):
        data = ix.broadcast_batch(operands[2 * k], lay.batch_shape)
        idx = ix.broadcast_batch(operands[2 * k + 1], lay.batch_shape)
        if dim < nb and lay.nse < nse:  # pad the entry list with padding entries
            extra = [*lay.batch_shape, nse - lay.nse]
            data = b.concat([data, b.full([*extra, *lay.dense_shape], 0, b.elem_of(data))], nb)
            pad = ix.per_column(b.full([*extra, ns], 0, b.elem_of(idx)), lay.sparse_shape)
            idx = b.concat([idx, pad], nb)
        elif dim >= nb:
            col = dim - nb
            out_sizes = [sum(x.shape[dim] for x in lays) if j == col else s for j, s in enumerate(lay.sparse_shape)]
            shifted = b.add(idx, ix.per_column(idx, [offset if j == col else 0 for j in range(ns)]))
            idx = ix.where(ix.valid(idx, lay.sparse_shape), shifted, out_sizes)
        offset += lay.shape[dim]
        datas.append(data)
        idxs.append(idx)
    axis = dim if dim < nb else nb
    return [b.concat(datas, axis), b.concat(idxs, axis)]


def _clamped_starts(starts: Value, shape: Sequence[int], sizes: Sequence[int]) -> list[Value]:
    """Scalar start per dim: wrapped once when negative, then clamped into `[0, shape - size]`."""
    elem = b.elem_of(starts)
    out = []
    for d, (n, s) in enumerate(zip(shape, sizes, strict=True)):
        x = b.reshape(b.slice_dim(starts, 0, d, d + 1), [])
        x = b.select(b.compare(x, b.scalar(0, elem), "LT"), b.add(x, b.scalar(n, elem)), x)
        out.append(b.clamp(b.scalar(0, elem), x, b.scalar(n - s, elem)))
    return out


def lower_dynamic_slice(c: BcooOp) -> list[Value]:
    lay = c.layout()
    data, idx, starts = c.operands
    sizes = list(c.config["slice_sizes"])
    nb, ns = lay.n_batch, lay.n_sparse
    first = _clamped_starts(starts, lay.shape, sizes)
    zero = b.scalar(0, b.elem_of(starts))

    def batch_part(buf: Value) -> tuple[list[Value], list[int]]:
        full = [b.shape_of(buf)[i] == lay.shape[i] for i in range(nb)]
        return ([first[i] if full[i] else zero for i in range(nb)], [sizes[i] if full[i] else 1 for i in range(nb)])

    st, sz = batch_part(data)
    data = b.dynamic_slice(data, [*st, zero, *first[nb + ns :]], [*sz, lay.nse, *sizes[nb + ns :]])
    st, sz = batch_part(idx)
    idx = b.dynamic_slice(idx, [*st, zero, zero], [*sz, lay.nse, ns])
    if ns:
        elem = b.elem_of(idx)
        lead = b.shape_of(idx)
        offsets = b.concat([b.reshape(b.convert(s, elem), [1]) for s in first[nb : nb + ns]], 0)
        shifted = b.sub(idx, b.broadcast(offsets, lead, [len(lead) - 1]))
        keep = ix.valid(shifted, sizes[nb : nb + ns])
        idx = ix.where(keep, shifted, sizes[nb : nb + ns])
        batch = c.result_shape(0)[:nb]
        data = ix.mask(ix.broadcast_batch(data, batch), ix.broadcast_batch(keep, batch))
    return [data, idx]


def lower_conv(c: BcooOp) -> list[Value]:
    lhs, rhs = c.layout(0), c.layout(2, "rhs_shape")
    low = c.config["padding"][0]
    batch = lhs.batch_shape
    bs = math.prod(batch)
    size = shapes.conv(lhs, rhs, c.config["padding"])[0][-1]
    ld, li, rd, ri = c.operands
    nl, nr = lhs.nse, rhs.nse
    pair = [bs, nl, nr]
    elem = b.elem_of(li)
    li, ri = ix.canonical(li, batch), ix.canonical(ri, batch)
    at = b.sub(b.add(b.broadcast(b.reshape(li, [bs, nl]), pair, [0, 1]), b.full(pair, low, elem)),
               b.broadcast(b.reshape(ri, [bs, nr]), pair, [0, 2]))
    both = b.and_(b.broadcast(ix.valid(li, lhs.sparse_shape), pair, [0, 1]),
                  b.broadcast(ix.valid(ri, rhs.sparse_shape), pair, [0, 2]))
    keep = b.and_(both, b.reshape(ix.in_range(b.reshape(at, [*pair, 1]), [size]), pair))
    product = b.mul(b.broadcast(ix.canonical(ld, batch), pair, [0, 1]),
                    b.broadcast(ix.canonical(rd, batch), pair, [0, 2]))
    data = b.select(keep, product, b.zeros_like(product))
    idx = b.select(keep, at, b.full(pair, size, elem))
    return [b.reshape(data, c.result_shape(0)), b.reshape(idx, c.result_shape(1))]


def first_occurrences(idx: Value, sizes: Sequence[int]) -> Value:
    """For canonical `idx[B, N, S]`: i1 `[B, N]`, true at the first entry (lowest position) with each index."""
    bs, n, _ = b.shape_of(idx)
    key = ix.linear_key(idx, sizes, math.prod(sizes), ix.key_type(sizes))
    key_s, pos_s = ix.sort_positions(key)  # equal keys keep their order: the first of a run is the first entry
    first, _ = ix.segments(key_s)
    it = b.elem_of(pos_s)
    flags = ix.scatter_rows(b.full([bs, n], 0, it), pos_s, b.convert(first, it), "set")
    return b.compare(flags, b.zeros_like(flags), "NE")
