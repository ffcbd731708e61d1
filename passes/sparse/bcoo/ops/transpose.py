"""`hlopt.bcoo.transpose`: `lax.transpose` of a BCOO array (batch, sparse and dense dims permuted
among themselves)."""

from __future__ import annotations

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INTS, BcooOp, Derivative, Record, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


def transpose_transpose(t: terms.Terms, ct, data, indices, *, shape, permutation, **_):
    """The data cotangent, permuted back."""
    lay = shapes.layout(shape, t.aval(data).shape, indices.shape)
    nb, ns = lay.n_batch, lay.n_sparse
    data_perm = [*permutation[:nb], nb, *(p - ns + 1 for p in permutation[nb + ns :])]
    return t.transpose(ct, [data_perm.index(i) for i in range(len(data_perm))])


RECORDS = (Record("transpose", Signature((DATA, INDICES), 2, {"permutation": INTS}),
                   lambda c, d, i: list(shapes.transpose(shapes.operand(c, d, i), c["permutation"])[1:]),
                   lower_transpose,
                   batched=lambda p, size: {**p, "permutation": (0, *(x + 1 for x in p["permutation"]))},
                   derivative=Derivative(transpose=transpose_transpose)),)
