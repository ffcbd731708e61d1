"""`hlopt.bcoo.squeeze`: size-1 `dimensions` of a BCOO array removed (a squeezed sparse dim drops
its index column; an entry out of range there becomes padding)."""

from __future__ import annotations

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.record import DATA, DATA_LINEAR, INDICES, INTS, BcooOp, Record, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


RECORDS = (Record("squeeze", Signature((DATA, INDICES), 2, {"dimensions": INTS}),
                   lambda c, d, i: list(shapes.squeeze(shapes.operand(c, d, i), c["dimensions"])[1:]), lower_squeeze,
                   batched=lambda p, size: {**p, "dimensions": tuple(d + 1 for d in p["dimensions"])},
                   derivative=DATA_LINEAR),)
