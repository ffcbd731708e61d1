"""`hlopt.bcoo.fromdense`: the BCOO array of `nse` entries of a dense array (its nonzeros in
row-major order, then padding); `n_batch` and `n_dense` are the layout it produces."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DENSE, INT, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


def result_shapes(config: Mapping[str, Any], mat: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    if tuple(config["shape"]) != tuple(mat):
        raise ValueError(f"shape {tuple(config['shape'])} is not the shape of the dense operand {tuple(mat)}")
    return list(shapes.fromdense(mat, config["nse"], config["n_batch"], config["n_dense"]))


def jvp_fromdense(t: terms.Terms, primals, tangents, outs, **params):
    """Not linear (the indices depend on the values): the data tangent is the dense tangent at the
    result's indices."""
    (mat_dot,) = tangents
    return None if t.is_zero(mat_dot) else terms.extract(t, outs[1], mat_dot)


def batch_fromdense(t: terms.Terms, args, dims, *, n_batch, **params):
    """The mapped axis becomes a new leading batch dim of the result."""
    return t.bind("fromdense", t.moveaxis(args[0], dims[0], 0), n_batch=n_batch + 1, **params), (0, 0)


RECORDS = (Record("fromdense", Signature((DENSE,), 2, {"nse": INT}), result_shapes, lower_fromdense,
                   array_shape=lambda params, operands: operands[0], indices_operand=None, type_only=("index_dtype",),
                   derivative=Derivative(linear=(), jvp=jvp_fromdense), batch=batch_fromdense),)
