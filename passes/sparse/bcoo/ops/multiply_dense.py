"""`hlopt.bcoo.multiply_dense`: a BCOO array times a dense array that broadcasts to its shape
(the data of the product; the indices are the operand's)."""

from __future__ import annotations

import math

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, DENSE, INDICES, BcooOp, Derivative, Record, Signature, same_params
from hlopt.passes.mlir import ir

Value = ir.Value


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


def transpose_multiply_dense(t: terms.Terms, ct, data, indices, v, *, shape, **params):
    """Bilinear in (data, v): the data cotangent is the product with v again; v's is the dense
    array of `ct * data`, summed over the dims v broadcasts."""
    if t.is_undefined(data):
        return t.sum_to_shape(t.bind("multiply_dense", ct, indices, v, shape=shape, **params), t.aval(data).shape)
    v_shape = t.aval(v).shape
    product = ct * data
    if not v_shape:
        return product.sum()
    return t.sum_to_shape(terms.todense(t, product, indices, shape), v_shape).reshape(v_shape)


def prepare_batch(t: terms.Terms, batched: list, params: dict, size: int) -> list:
    """The dense operand, brought to the batched array's rank."""
    data, indices, v = batched
    return [data, indices, v.reshape((v.shape[0],) + (1,) * (len(params["shape"]) - v.ndim + 1) + v.shape[1:])]


RECORDS = (Record("multiply_dense", Signature((DATA, INDICES, DENSE), 1),
                   lambda c, d, i, v: [shapes.multiply_dense(shapes.operand(c, d, i), v)], lower_multiply_dense,
                   batched=same_params, prepare_batch=prepare_batch,
                   derivative=Derivative(linear=(0, 2), transpose=transpose_multiply_dense)),)
