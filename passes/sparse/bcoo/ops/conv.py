"""`hlopt.bcoo.conv`: the 1-d convolution (cross-correlation) of two BCOO arrays of
`bcoo_conv_general_dilated`. Every pair of an lhs and an rhs entry gives one entry, `lhs * rhs` at
`i_lhs + padding_low - i_rhs`; pairs with a padding entry or an index outside the output are padding
(data 0)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo import terms
from hlopt.passes.sparse.bcoo.record import DATA, INDICES, INTS, SHAPE, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


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


def result_shapes(config: Mapping[str, Any], ld: Shape, li: Shape, rd: Shape, ri: Shape) -> list[Shape]:
    """The result buffer shapes with this backend_config and these operand shapes."""
    lhs, rhs = shapes.operand(config, ld, li), shapes.layout(config["rhs_shape"], rd, ri)
    return list(shapes.conv(lhs, rhs, config["padding"])[1:])


def transpose_conv(t: terms.Terms, ct, ld, li, rd, ri, *, shape, rhs_shape, padding, **_):
    """Each operand entry's cotangent: the output cotangents of its pairs, times the partner's data."""
    lda, rda = t.aval(ld), t.aval(rd)
    batch = tuple(shape[:-1])
    nl, nr = li.shape[-2], ri.shape[-2]
    size = shapes.conv(shapes.layout(shape, lda.shape, li.shape), shapes.layout(rhs_shape, rda.shape, ri.shape),
                       padding)[0][-1]
    lcol = t.broadcast_to(li, (*batch, nl, 1))[..., :, 0]
    rcol = t.broadcast_to(ri, (*batch, nr, 1))[..., :, 0]
    at = lcol[..., :, None] + padding[0] - rcol[..., None, :]
    keep = ((lcol >= 0) & (lcol < shape[-1]))[..., :, None] & ((rcol >= 0) & (rcol < rhs_shape[-1]))[..., None, :]
    keep = keep & (at >= 0) & (at < size)
    ct = t.where(keep, ct.reshape(*batch, nl, nr), 0)
    if t.is_undefined(ld):
        return t.sum_to_shape(t.einsum("...ij,...j->...i", ct, t.broadcast_to(rd, (*batch, nr))), lda.shape)
    return t.sum_to_shape(t.einsum("...ij,...i->...j", ct, t.broadcast_to(ld, (*batch, nl))), rda.shape)


RECORDS = (Record("conv", Signature((DATA, INDICES, DATA, INDICES), 2, {"rhs_shape": SHAPE, "padding": INTS}),
                   result_shapes, lower_conv, batched=lambda p, size: {**p, "rhs_shape": (size, *p["rhs_shape"])},
                   derivative=Derivative(linear=(0, 2), transpose=transpose_conv)),)
