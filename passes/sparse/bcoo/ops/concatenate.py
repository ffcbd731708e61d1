"""`hlopt.bcoo.concatenate`: `lax.concatenate` of BCOO arrays of one layout. Along a batch dim the
buffers are concatenated there, each operand's entry list first padded to the largest nse with
padding entries; along a sparse dim the entry lists are concatenated and each operand's indices in
that dim offset by the sizes before it (a padding entry stays padding: it gets the out-of-range
index of the result in every dim)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INT, SHAPE, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


def result_shapes(config: Mapping[str, Any], *buffers: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    sizes, dim = config["sizes"], config["dimension"]
    if len(buffers) != 2 * len(sizes):
        raise ValueError(f"concatenate: {len(sizes)} operand sizes for {len(buffers) // 2} operands")
    if not 0 <= dim < len(config["shape"]):
        raise ValueError(f"concatenate dimension {dim} out of range for shape {tuple(config['shape'])}")
    lays = []
    for k, size in enumerate(sizes):
        shape = tuple(size if d == dim else s for d, s in enumerate(config["shape"]))
        lays.append(shapes.operand({**config, "shape": shape}, buffers[2 * k], buffers[2 * k + 1]))
    return list(shapes.concatenate(lays, dim)[1:])


def transpose_concatenate(t: terms.Terms, ct, *operands, shape, dimension, sizes, **_):
    """Each operand's data cotangent is its part of the output's (batch: its rows and first nse
    entries; sparse: its run of entries), summed over the batch dims its buffer broadcasts."""
    avals = [t.aval(x) for x in operands]
    lays = [shapes.layout(tuple(s if d == dimension else n for d, n in enumerate(shape)), avals[2 * k].shape,
                          avals[2 * k + 1].shape) for k, s in enumerate(sizes)]
    nb = lays[0].n_batch
    grads, start = [], 0
    for k, lay in enumerate(lays):
        index = [slice(None)] * ct.ndim
        if dimension < nb:
            index[dimension] = slice(start, start + lay.shape[dimension])
            index[nb] = slice(0, lay.nse)
            start += lay.shape[dimension]
        else:
            index[nb] = slice(start, start + lay.nse)
            start += lay.nse
        grads.append(t.sum_to_shape(ct[tuple(index)], avals[2 * k].shape) if t.is_undefined(operands[2 * k]) else None)
    return grads


RECORDS = (Record("concatenate", Signature((DATA, INDICES), 2, {"dimension": INT, "sizes": SHAPE}, variadic=True),
                   result_shapes, lower_concatenate, batched=lambda p, size: {**p, "dimension": p["dimension"] + 1},
                   derivative=Derivative(linear=DATA, joint=True, transpose=transpose_concatenate)),)
