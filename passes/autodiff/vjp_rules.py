"""Reverse-mode rules of `vjp-expand` and their constructors; the op table
(`hlopt.passes.autodiff.table`) names each op's rule, one entry per op.

A rule `rule(b, op, cts, wants) -> cotangents` receives the builder `b` (the
insertion point is in the backward part of the function, after every forward
value, and the location is the op's), the forward op, one cotangent per result
of `op` and, per operand, whether that operand needs a cotangent (it depends on
a differentiated input). It returns one cotangent per operand, of the operand's
type. `None` means "known to be zero" throughout: such terms build no ops. The
op's operands and results are the residuals: the backward part reads them
where they are. Cotangents of values that an op's regions capture from outside
(loops, branches) go to `b.scope.add_ct`.

The families, as in JAX's `ad.py` (`deflinear2`, `defbilinear`, `defjvp`):

- zero:        piecewise-constant ops (floor, sign, compare...) pass nothing back;
- linear:      the transpose of the op applied to the cotangent (negate,
               reshape, slice, pad, gather, reduce add...);
- derivative:  elementwise ops, `ct * f'(x)` (or `ct / g(x)` where f' = 1 / g),
               f' from the one derivative table (`hlopt.passes.optable.derivatives`), which
               jet-expand reads as well;
- bilinear:    multiply and dot_general: the cotangent times the other operand
               (`bilinear` for a symmetric elementwise op);
- structure:   while, case/if, func.call and sort, which rebuild or wrap
               regions (see `hlopt.passes.autodiff.vjp_expand` for the residual policy).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hlopt.passes.ir import builders
from hlopt.passes.optable import derivatives
from hlopt.passes.base import PassError, lowering_pass_for
from hlopt.passes.autodiff.jet_rules import ADD_CALL_RULES, check_stop_gradient
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.ir.terms import Term, TermAlgebra
from hlopt.passes.ir.walk import call_target

if TYPE_CHECKING:
    from hlopt.passes.autodiff.vjp_expand import Scope

Rule = Callable[["VjpBuilder", ir.Operation, list[Term], list[bool]], list[Term]]

I32 = builders.i32


class VjpBuilder(TermAlgebra):
    """Builds cotangent ops at the current insertion point; None is zero throughout."""

    def __init__(self, scope: "Scope"):
        self.scope = scope

    def accumulate(self, total: ir.Value, ct: ir.Value) -> ir.Value:
        """`total + ct`. Two cotangents that are zero-padded pieces meeting along one dim (the
        cotangents of the slices that take a stacked dot_general's result apart) are
        concatenated, not added, so the rules that read them (`slice_ct`, `_dot_transpose`)
        still see the padding. (An update written into zeros, the cotangent of a
        dynamic_slice or gather, is added here; `xla-cpu-update-in-place` applies it to
        the other side in place.)"""
        joined = _joined_pieces(total, ct)
        return joined if joined is not None else builders.add(total, ct)

    def where(self, pred: ir.Value, a: Term) -> Term:
        """`a` where `pred` holds, zero elsewhere."""
        return None if a is None else builders.select(pred, a, self.zeros(a))


def attributes_of(op: ir.Operation) -> dict[str, ir.Attribute]:
    return {name: op.attributes[name] for name in op.attributes}


def i64s(op: ir.Operation, name: str, default: Sequence[int] | None = None) -> list[int]:
    """An i64 array attribute of `op` (DenseI64ArrayAttr or dense integer elements)."""
    if name not in op.attributes:
        return list(default or [])
    attr = op.attributes[name]
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(attr)
    return [int(x) for x in ir.DenseIntElementsAttr(attr)]


def zeros_of(t: ir.Type) -> ir.Value:
    tt = ir.RankedTensorType(t)
    return builders.full(list(tt.shape), 0, tt.element_type)


def zero_padded(v: Term) -> tuple[ir.Value, list[int], list[int]] | None:
    """(x, low, high) if `v` is `x` padded with zeros at its edges only (no interior
    padding, no cropping), as the cotangent of a slice is; else None."""
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.pad":
        return None
    op = v.owner.operation
    low, high = i64s(op, "edge_padding_low"), i64s(op, "edge_padding_high")
    if any(i64s(op, "interior_padding")) or min(low + high, default=0) < 0:
        return None
    if not builders.is_zero_constant(op.operands[1]):
        return None
    return op.operands[0], low, high


def zero_pad(x: ir.Value, low: Sequence[int], high: Sequence[int]) -> ir.Value:
    """`x` padded with zeros at its edges (itself when there is no padding)."""
    if not any(low) and not any(high):
        return x
    return builders.pad(x, low, high, [0] * len(low), builders.scalar(0, builders.elem_of(x)))


def _padded_dims(low: Sequence[int], high: Sequence[int]) -> list[int]:
    return [d for d in range(len(low)) if low[d] or high[d]]


def _joined_pieces(a: ir.Value, c: ir.Value) -> ir.Value | None:
    """`a + c` as one concatenation when both are zero-padded pieces that meet along one
    dim and are padded alike along the others; else None."""
    pa, pc = zero_padded(a), zero_padded(c)
    if pa is None or pc is None:
        return None
    dims = sorted(set(_padded_dims(pa[1], pa[2])) | set(_padded_dims(pc[1], pc[2])))
    if len(dims) != 1:
        return None
    d = dims[0]
    (x1, low1, _), (x2, low2, high2) = (pa, pc) if pa[1][d] <= pc[1][d] else (pc, pa)
    if low1[d] + builders.shape_of(x1)[d] != low2[d]:
        return None
    low, high = [0] * len(low1), [0] * len(low1)
    low[d], high[d] = low1[d], high2[d]
    return zero_pad(builders.concat([x1, x2], d), low, high)


def slice_ct(ct: Term, dim: int, start: int, limit: int) -> Term:
    """`ct[start:limit]` along `dim`: None (zero) where that lies in the zero edges of a
    padded cotangent, the unpadded part's slice where it lies inside it (no zeros are
    read or copied); a plain slice otherwise."""
    if ct is None:
        return None
    padded = zero_padded(ct)
    if padded is not None:
        x, low, high = padded
        inside = builders.shape_of(x)[dim]
        if limit <= low[dim] or start >= low[dim] + inside:
            return None
        if low[dim] <= start and limit <= low[dim] + inside and _padded_dims(low, high) == [dim]:
            return builders.slice_dim(x, dim, start - low[dim], limit - low[dim])
    return builders.slice_dim(ct, dim, start, limit)


def _is_complex(v: ir.Value) -> bool:
    return isinstance(builders.elem_of(v), ir.ComplexType)


# --- rule constructors ------------------------------------------------------------

def zero(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    return [None] * len(op.operands)


def linear(transpose: Callable[[VjpBuilder, ir.Operation, ir.Value], list[Term]]) -> Rule:
    """A one-result op, linear in its differentiable operands: `transpose(b, op, ct)`."""
    return lambda b, op, cts, wants: transpose(b, op, cts[0])


def reapply(b: VjpBuilder, op: ir.Operation, ct: ir.Value) -> list[Term]:
    """The op itself on the cotangent: the transpose of a one-operand op that is its own
    adjoint (negate, conj, sharding constraints, reduce_precision)."""
    new = op.clone(ip=ir.InsertionPoint.current)
    new.operands[0] = ct
    return [new.result]


def bilinear(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """An elementwise op bilinear in its two operands and symmetric in them (multiply): the
    op of the cotangent and the other operand, for each operand that needs one (JAX's
    `defbilinear` with the op as both transposes)."""
    (ct,), (x, y) = cts, op.operands

    def times(other: ir.Value) -> ir.Value:
        new = op.clone(ip=ir.InsertionPoint.current)
        new.operands[0], new.operands[1] = ct, other
        return new.result

    return [times(y) if wants[0] else None, times(x) if wants[1] else None]


# --- elementwise ------------------------------------------------------------------

def _one(b: VjpBuilder, x: ir.Value) -> ir.Value:
    return b.constant(1, x.type)


def _square(b: VjpBuilder, x: ir.Value) -> ir.Value:
    return builders.mul(x, x)


def add(b, op, cts, wants):
    return [cts[0], cts[0]]


def subtract(b, op, cts, wants):
    return [cts[0], b.neg(cts[0])]




def divide(b, op, cts, wants):
    """x / y: ct / y and -ct x / y^2, as JAX."""
    (ct,), (x, y) = cts, op.operands
    return [b.div(ct, y) if wants[0] else None,
            b.div(b.mul(b.neg(ct), x), _square(b, y)) if wants[1] else None]


def power(b, op, cts, wants):
    """x^y: ct y x^(y-1) (zero where y = 0, even at x = 0) and ct log(x) x^y (log(1) at x = 0)."""
    (ct,), (x, y), out = cts, op.operands, op.result
    zero_, one = b.zeros(x), _one(b, x)
    dx = dy = None
    if wants[0]:
        jac = builders.mul(y, builders.op("stablehlo.power", [x, builders.sub(y, one)]))
        dx = b.mul(ct, builders.select(builders.compare(y, zero_, "EQ"), zero_, jac))
    if wants[1]:
        safe = builders.select(builders.compare(x, zero_, "EQ"), one, x)
        dy = b.mul(ct, builders.mul(builders.op("stablehlo.log", [safe]), out))
    return [dx, dy]


def atan2(b, op, cts, wants):
    (ct,), (x, y) = cts, op.operands
    den = builders.add(_square(b, x), _square(b, y))
    return [b.mul(ct, builders.div(y, den)), b.mul(ct, builders.div(builders.neg(x), den))]


def remainder(b, op, cts, wants):
    """rem(x, y) = x - trunc(x / y) y: ct and -ct sign(x/y) floor(|x/y|), as JAX."""
    (ct,), (x, y) = cts, op.operands
    q = builders.div(x, y)
    trunc = builders.mul(builders.op("stablehlo.sign", [q]),
                         builders.op("stablehlo.floor", [builders.op("stablehlo.abs", [q])]))
    return [ct, b.neg(b.mul(ct, trunc)) if wants[1] else None]


def _balanced(b: VjpBuilder, x: ir.Value, z: ir.Value, y: ir.Value) -> ir.Value:
    """JAX's `_balanced_eq`: 1 where x = z != y, 1/2 where x = y = z, 0 elsewhere."""
    one = _one(b, z)
    hit = builders.select(builders.compare(x, z, "EQ"), one, b.zeros(z))
    return builders.div(hit, builders.select(builders.compare(y, z, "EQ"), b.constant(2, z.type), one))


def choose(b, op, cts, wants):
    """max / min: the cotangent goes to the chosen operand, split evenly on ties (as JAX)."""
    (ct,), (x, y), out = cts, op.operands, op.result
    return [b.mul(ct, _balanced(b, x, out, y)) if wants[0] else None,
            b.mul(ct, _balanced(b, y, out, x)) if wants[1] else None]


def clamp(b, op, cts, wants):
    """clamp(lo, x, hi) as JAX: x gets ct where lo < x < hi, lo where lo > x and lo < hi,
    hi where hi < x; rank-0 bounds get their cotangents summed."""
    (ct,), (lo, x, hi) = cts, op.operands
    shape = builders.shape_of(x)
    lo_b = builders.broadcast(lo, shape, []) if builders.shape_of(lo) != shape else lo
    hi_b = builders.broadcast(hi, shape, []) if builders.shape_of(hi) != shape else hi

    def part(pred: ir.Value, bound: ir.Value, want: bool) -> Term:
        if not want:
            return None
        t = b.where(pred, ct)
        return builders.reduce(t, range(len(shape))) if builders.shape_of(bound) != shape else t

    inside = builders.and_(builders.compare(x, lo_b, "GT"), builders.compare(x, hi_b, "LT"))
    below = builders.and_(builders.compare(lo_b, x, "GT"), builders.compare(lo_b, hi_b, "LT"))
    return [part(below, lo, wants[0]), part(inside, x, wants[1]), part(builders.compare(hi_b, x, "LT"), hi, wants[2])]


def select(b, op, cts, wants):
    (ct,), pred = cts, op.operands[0]
    return [None, b.where(pred, ct) if wants[1] else None,
            builders.select(pred, b.zeros(ct), ct) if wants[2] else None]


def abs_(b, op, cts, wants):
    """Real: ct where x >= 0, -ct elsewhere (as JAX). Complex: ct conj(x) / |x| (0 at x = 0)."""
    (ct,), x, out = cts, op.operands[0], op.result
    if not _is_complex(x):
        return [builders.select(builders.compare(x, b.zeros(x), "GE"), ct, builders.neg(ct))]
    magnitude = builders.complex_(out, b.zeros(out))
    safe = builders.select(builders.compare(magnitude, b.zeros(magnitude), "EQ"), _one(b, magnitude), magnitude)
    conj = builders.complex_(builders.real(x), builders.neg(builders.imag(x)))
    return [builders.mul(builders.complex_(ct, b.zeros(ct)), builders.div(conj, safe))]


def convert(b, op, cts, wants):
    """The cotangent converted back: complex -> real keeps the real part, real -> complex
    takes the real part of the cotangent, as JAX's convert_element_type."""
    (ct,), x = cts, op.operands[0]
    elem = builders.elem_of(x)
    if _is_complex(ct) and not _is_complex(x):
        return [builders.convert(builders.real(ct), elem)]
    if _is_complex(x) and not _is_complex(ct):
        part = builders.convert(ct, ir.ComplexType(elem).element_type)
        return [builders.complex_(part, b.zeros(part))]
    return [builders.convert(ct, elem)]


def derivative_rule(name: str, table: derivatives.Table) -> Rule:
    """The reverse-mode rule of the entry `name` of the derivative table `table`: `ct f'(x)`,
    or `ct / g(x)` for a quotient entry (f' = 1 / g)."""
    entry = table[name]

    def rule(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        if any(wants[:entry.fixed]):
            raise PassError(f"vjp-expand: {op.name} is not differentiable in operand "
                            f"{wants.index(True)} (only in its last one)", op.location)
        d = derivatives.derivative_at(entry, b, list(op.operands), op.result)
        return [None] * entry.fixed + [b.div(cts[0], d) if entry.reciprocal else b.mul(cts[0], d)]

    return rule


# --- linear and shape ops ---------------------------------------------------------

def broadcast_in_dim(b, op, ct):
    """The sum over the broadcast dims (new ones and stretched size-1 ones), back in operand order."""
    x = op.operands[0]
    dims = i64s(op, "broadcast_dimensions")
    in_shape, out_shape = builders.shape_of(x), builders.shape_of(ct)
    kept = [i for i in range(len(in_shape)) if in_shape[i] == out_shape[dims[i]]]
    summed = builders.reduce(ct, [d for d in range(len(out_shape)) if d not in {dims[i] for i in kept}])
    order = sorted(kept, key=lambda i: dims[i])
    moved = builders.transpose(summed, [order.index(i) for i in kept])
    return [builders.reshape(moved, in_shape)]


def transpose(b, op, ct):
    perm = i64s(op, "permutation")
    return [builders.transpose(ct, [perm.index(i) for i in range(len(perm))])]


def slice_(b, op, ct):
    """A strided slice: the cotangent padded back into place with zeros."""
    x = op.operands[0]
    starts, strides = i64s(op, "start_indices"), i64s(op, "strides")
    shape, out = builders.shape_of(x), builders.shape_of(ct)
    high = [n - s - m - max(m - 1, 0) * (st - 1) for n, s, m, st in zip(shape, starts, out, strides)]
    return [builders.pad(ct, starts, high, [st - 1 for st in strides], builders.scalar(0, builders.elem_of(ct)))]


def pad(b, op, cts, wants):
    """As JAX: the operand's part is the cotangent cropped (negated edge padding) and strided;
    the padding value gets the rest of the sum."""
    (ct,), (x, value) = cts, op.operands
    low, high = i64s(op, "edge_padding_low"), i64s(op, "edge_padding_high")
    interior = i64s(op, "interior_padding")
    zero_ = builders.scalar(0, builders.elem_of(ct))
    unpadded = builders.pad(ct, [-v for v in low], [-v for v in high], [0] * len(low), zero_)
    ct_x = builders.slice_(unpadded, [0] * len(low), builders.shape_of(unpadded), [i + 1 for i in interior])
    ct_v = None
    if wants[1]:
        everything = range(len(low))
        ct_v = builders.sub(builders.reduce(ct, everything), builders.reduce(ct_x, everything))
    return [ct_x, ct_v]


def concatenate(b, op, ct):
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    out, start = [], 0
    for v in op.operands:
        size = builders.shape_of(v)[dim]
        out.append(slice_ct(ct, dim, start, start + size))
        start += size
    return out


def dynamic_slice(b, op, cts, wants):
    """Written into zeros at the same (equally clamped) start."""
    x, *starts = op.operands
    return [builders.dynamic_update_slice(b.zeros(x), cts[0], starts)] + [None] * len(starts)


def dynamic_update_slice(b, op, cts, wants):
    (ct,), (x, update, *starts) = cts, op.operands
    ct_x = builders.dynamic_update_slice(ct, b.zeros(update), starts) if wants[0] else None
    ct_u = builders.dynamic_slice(ct, starts, builders.shape_of(update)) if wants[1] else None
    return [ct_x, ct_u] + [None] * len(starts)


def _clamped_indices(idx: ir.Value, vector_dim: int, bounds: Sequence[int]) -> tuple[ir.Value, ir.Value]:
    """The start indices clamped to [0, bound] per index component (as gather clamps), and
    whether every component of a start index was in range (a mask over the batch dims)."""
    shape, elem = builders.shape_of(idx), builders.elem_of(idx)
    if vector_dim == len(shape):
        upper = builders.full(shape, bounds[0], elem)
    else:
        upper = builders.broadcast(builders.int_vector(bounds, elem), shape, [vector_dim])
    lower = builders.full(shape, 0, elem)
    inside = builders.and_(builders.compare(idx, lower, "GE"), builders.compare(idx, upper, "LE"))
    if vector_dim < len(shape):
        inside = builders.reduce(inside, [vector_dim], "and")
    return builders.clamp(lower, idx, upper), inside


def gather(b, op, cts, wants):
    """A scatter-add of the cotangent into zeros at the clamped start indices."""
    (ct,), (x, idx) = cts, op.operands
    d = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    sizes, shape = i64s(op, "slice_sizes"), builders.shape_of(x)
    starts, _ = _clamped_indices(idx, d.index_vector_dim, [shape[k] - sizes[k] for k in d.start_index_map])
    ct_x = builders.scatter(b.zeros(x), starts, ct, update_window_dims=d.offset_dims,
                            inserted_window_dims=d.collapsed_slice_dims, input_batching_dims=d.operand_batching_dims,
                            scatter_indices_batching_dims=d.start_indices_batching_dims,
                            scattered_dims_to_operand_dims=d.start_index_map, index_vector_dim=d.index_vector_dim)
    return [ct_x, None]


def scatter(b, op, cts, wants):
    """scatter add: ct to the operand, the gathered ct to the updates whose window is in range
    (XLA drops the others). scatter replace (set): JAX's id trick: scattered update ids tell
    which positions were overwritten (their operand cotangent is 0) and which update won.
    scatter max / min: the cotangent is shared evenly among the operand element and the
    updates equal to the result (as JAX). scatter multiply: the operand's is the cotangent
    scattered by the same product; the updates' needs unique indices (as JAX)."""
    kind = builders.reducer_kind(op)
    if len(op.operands) != 3 or kind not in ("stablehlo.add", "replace", "stablehlo.multiply", "stablehlo.maximum",
                                             "stablehlo.minimum"):
        raise PassError(f"vjp-expand: no reverse-mode rule for stablehlo.scatter with a {kind or 'general'} "
                        f"body over {len(op.operands) // 2} operand(s) (add, replace, multiply, maximum and "
                        "minimum have one)", op.location)
    (ct,), (x, idx, upd) = cts, op.operands
    d = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    shape, upd_shape = builders.shape_of(x), builders.shape_of(upd)
    window = iter([upd_shape[w] for w in d.update_window_dims])
    sizes = [1 if k in d.inserted_window_dims or k in d.input_batching_dims else next(window)
             for k in range(len(shape))]
    starts, inside = _clamped_indices(idx, d.index_vector_dim, [shape[k] - sizes[k] for k in d.scattered_dims_to_operand_dims])
    scatter_dims = [k for k in range(len(upd_shape)) if k not in d.update_window_dims]

    def gathered(v: ir.Value) -> ir.Value:
        return builders.gather(v, starts, offset_dims=d.update_window_dims, collapsed_slice_dims=d.inserted_window_dims,
                               operand_batching_dims=d.input_batching_dims,
                               start_indices_batching_dims=d.scatter_indices_batching_dims,
                               start_index_map=d.scattered_dims_to_operand_dims, index_vector_dim=d.index_vector_dim,
                               slice_sizes=sizes)

    mask = builders.broadcast(inside, upd_shape, scatter_dims)
    if kind == "stablehlo.add":
        return [ct, None, b.where(mask, gathered(ct)) if wants[2] else None]
    if kind == "stablehlo.multiply":
        return _scatter_product_ct(b, op, ct, wants, lambda v: b.where(mask, gathered(v)))
    if kind != "replace":
        elem = builders.elem_of(x)
        hits = b.where(mask, builders.convert(builders.compare(upd, gathered(op.result), "EQ"), elem))
        kept = builders.convert(builders.compare(x, op.result, "EQ"), elem)
        counts = builders.scatter(kept, idx, hits, update_window_dims=d.update_window_dims,
                                  inserted_window_dims=d.inserted_window_dims, input_batching_dims=d.input_batching_dims,
                                  scatter_indices_batching_dims=d.scatter_indices_batching_dims,
                                  scattered_dims_to_operand_dims=d.scattered_dims_to_operand_dims,
                                  index_vector_dim=d.index_vector_dim)
        share = builders.div(ct, counts)
        return [builders.mul(share, kept) if wants[0] else None, None,
                builders.mul(gathered(share), hits) if wants[2] else None]
    batch = [upd_shape[k] for k in scatter_dims]
    count = math.prod(batch)
    ids = builders.add(builders.reshape(builders.iota([count], 0, I32()), batch), builders.full(batch, 1, I32()))
    ids = builders.broadcast(ids, upd_shape, scatter_dims)
    won = builders.scatter(builders.full(shape, 0, I32()), idx, ids, update_window_dims=d.update_window_dims,
                           inserted_window_dims=d.inserted_window_dims, input_batching_dims=d.input_batching_dims,
                           scatter_indices_batching_dims=d.scatter_indices_batching_dims,
                           scattered_dims_to_operand_dims=d.scattered_dims_to_operand_dims,
                           index_vector_dim=d.index_vector_dim, combine="set")
    kept = builders.compare(won, builders.full(shape, 0, I32()), "EQ")
    winner = builders.compare(gathered(won), ids, "EQ")
    return [b.where(kept, ct) if wants[0] else None, None, b.where(winner, gathered(ct)) if wants[2] else None]


def _scatter_product_ct(b: VjpBuilder, op: ir.Operation, ct: ir.Value, wants: list[bool],
                        gathered: Callable[[ir.Value], ir.Value]) -> list[Term]:
    """scatter multiply: the operand's cotangent is `ct` scattered by the same product (it is
    linear in the operand); an update's is the gathered `ct` times the operand, which holds
    where no other update meets the same element: the op must promise unique indices."""
    ct_x = ct_u = None
    if wants[0]:
        again = op.clone(ip=ir.InsertionPoint.current)
        again.operands[0] = ct
        ct_x = again.result
    if wants[2]:
        unique = "unique_indices" in op.attributes and ir.BoolAttr(op.attributes["unique_indices"]).value
        if not unique:
            raise PassError("vjp-expand: the cotangent of the updates of a scatter multiply needs unique indices "
                            "(as in JAX: x.at[i].multiply(y, unique_indices=True)), where repeated indices "
                            "multiply updates together", op.location)
        ct_u = gathered(builders.mul(ct, op.operands[0]))
    return [ct_x, None, ct_u]


def _dot_transpose(ct: ir.Value, x: ir.Value, y: ir.Value, x_contract: Sequence[int], y_contract: Sequence[int],
                   x_batch: Sequence[int], y_batch: Sequence[int], swap: bool,
                   precision: ir.Attribute | None) -> ir.Value:
    """JAX's `_dot_general_transpose_lhs`: the cotangent of `x` in dot_general(x, y) (or, with
    `swap`, of the rhs `x` in dot_general(y, x)), in the cotangent's element type, then converted.

    A cotangent zero-padded along free dims (the cotangent of a slice of a stacked
    dot) is multiplied unpadded: `y` is sliced to its nonzero part where it is
    contracted with the padding, and the result is padded where it is not."""
    x_kept = [d for d in range(len(builders.shape_of(x))) if d not in x_contract and d not in x_batch]
    y_kept = [d for d in range(len(builders.shape_of(y))) if d not in y_contract and d not in y_batch]
    nb = len(x_batch)
    ans_y = range(nb, nb + len(y_kept)) if swap else range(nb + len(x_kept), nb + len(x_kept) + len(y_kept))
    ans_x = [d for d in range(nb, nb + len(x_kept) + len(y_kept)) if d not in ans_y]
    args = (x_contract, y_contract, x_batch, y_batch, swap, precision)
    padded = zero_padded(ct)
    if padded is not None and not any(padded[1][:nb]) and not any(padded[2][:nb]):
        inner, low, high = padded
        for j, d in enumerate(ans_y):
            if low[d] or high[d]:
                y = builders.slice_dim(y, y_kept[j], low[d], low[d] + builders.shape_of(inner)[d])
        x_low, x_high = [0] * len(builders.shape_of(x)), [0] * len(builders.shape_of(x))
        for j, d in enumerate(ans_x):
            x_low[x_kept[j]], x_high[x_kept[j]] = low[d], high[d]
        return zero_pad(_dot_transpose(inner, x, y, *args), x_low, x_high)
    elem = builders.elem_of(ct)
    x_contract_by_y = [x_contract[i] for i in sorted(range(len(y_contract)), key=lambda i: y_contract[i])]
    unsorted = list(x_batch) + x_kept + x_contract_by_y
    r = builders.dot_general(ct, builders.convert(y, elem), lhs_batch=range(nb), rhs_batch=y_batch,
                             lhs_contract=ans_y, rhs_contract=y_kept, elem=elem, precision_config=precision)
    return builders.convert(builders.transpose(r, [unsorted.index(i) for i in range(len(unsorted))]),
                            builders.elem_of(x))


def dot_general(b, op, cts, wants):
    (ct,), (x, y) = cts, op.operands
    d = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    precision = builders.precision_of(op)
    xc, yc = list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions)
    xb, yb = list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions)
    return [_dot_transpose(ct, x, y, xc, yc, xb, yb, False, precision) if wants[0] else None,
            _dot_transpose(ct, y, x, yc, xc, yb, xb, True, precision) if wants[1] else None]


# --- reductions -------------------------------------------------------------------

def _exclusive_products(x: ir.Value, dims: Sequence[int]) -> ir.Value:
    """For each element, the product of the other elements of its reduction group (exact at
    zeros: a prefix product from each side, as JAX's reduce_prod derivative)."""
    shape, rank = builders.shape_of(x), len(builders.shape_of(x))
    kept = [d for d in range(rank) if d not in dims]
    perm = kept + list(dims)
    n = math.prod(shape[d] for d in dims)
    flat = builders.reshape(builders.transpose(x, perm), [shape[d] for d in kept] + [n])
    axis = len(kept)
    ones = builders.full([shape[d] for d in kept] + [1], 1, builders.elem_of(x))

    def shifted_prefix(v: ir.Value) -> ir.Value:
        inclusive = builders.prefix_scan(v, axis, "mul")
        return builders.concat([ones, builders.slice_dim(inclusive, axis, 0, n - 1)], axis) if n > 1 else ones

    others = builders.mul(shifted_prefix(flat), builders.reverse(shifted_prefix(builders.reverse(flat, [axis])), [axis]))
    back = builders.reshape(others, [shape[d] for d in perm])
    return builders.transpose(back, [perm.index(d) for d in range(rank)])


def reduce(b, op, cts, wants):
    """reduce by the kind of its body: add (broadcast back), max/min (split evenly among the
    tied elements, the init value included, as JAX), multiply (the other factors)."""
    kind = builders.reducer_kind(op)
    if len(op.results) != 1 or kind not in ("stablehlo.add", "stablehlo.maximum", "stablehlo.minimum",
                                             "stablehlo.multiply"):
        raise PassError(f"vjp-expand: no reverse-mode rule for stablehlo.reduce with a {kind or 'general'} "
                        f"body over {len(op.results)} result(s)", op.location)
    (ct,), (x, init), out = cts, op.operands, op.result
    dims = i64s(op, "dimensions")
    shape = builders.shape_of(x)
    kept = [d for d in range(len(shape)) if d not in dims]
    everything = range(len(builders.shape_of(ct)))
    if kind == "stablehlo.add":
        return [builders.broadcast(ct, shape, kept), builders.reduce(ct, everything) if wants[1] else None]
    if kind == "stablehlo.multiply":
        ct_x = ct_init = None
        if wants[0] and 0 not in shape:
            factor = builders.mul(builders.broadcast(ct, shape, kept), builders.broadcast(init, shape, []))
            ct_x = builders.mul(factor, _exclusive_products(x, dims))
        if wants[1]:
            ct_init = builders.reduce(builders.mul(ct, builders.reduce(x, dims, "mul")), everything)
        return [ct_x, ct_init]
    elem = builders.elem_of(x)
    hits = builders.convert(builders.compare(x, builders.broadcast(out, shape, kept), "EQ"), elem)
    counts = builders.reduce(hits, dims)
    init_hits = None
    if wants[1]:
        init_hits = builders.convert(builders.compare(builders.broadcast(init, builders.shape_of(out), []), out, "EQ"),
                                     elem)
        counts = builders.add(counts, init_hits)
    share = builders.div(ct, counts)
    return [builders.mul(builders.broadcast(share, shape, kept), hits) if wants[0] else None,
            builders.reduce(builders.mul(share, init_hits), everything) if wants[1] else None]


@dataclasses.dataclass(frozen=True)
class Window:
    """The window attributes of a `reduce_window` (defaults filled in)."""

    dims: list
    strides: list
    padding: list
    base: list
    dilation: list

    @classmethod
    def of(cls, op: ir.Operation) -> "Window":
        rank = len(builders.shape_of(op.operands[0]))
        flat = i64s(op, "padding", [0] * (2 * rank))
        return cls(i64s(op, "window_dimensions"), i64s(op, "window_strides", [1] * rank),
                   [(flat[2 * i], flat[2 * i + 1]) for i in range(rank)], i64s(op, "base_dilations", [1] * rank),
                   i64s(op, "window_dilations", [1] * rank))

    def reduce(self, v: ir.Value, init: ir.Value, kind: str) -> ir.Value:
        """`v` reduced over these windows (the forward op again, on other values)."""
        return builders.reduce_window(v, init, kind, self.dims, self.strides, self.padding, self.base, self.dilation)

    def transpose_sum(self, ct: ir.Value, shape: Sequence[int]) -> ir.Value:
        """For each input element, the sum of `ct` over the windows that hold it (JAX's
        reduce_window_sum transpose: pad the cotangent, sum over windows again)."""
        def dilate(n: int, d: int) -> int:
            return 0 if n == 0 else 1 + d * (n - 1)

        low, high = [], []
        for n, w, s, m, (lo, _), bd, wd in zip(shape, self.dims, self.strides, builders.shape_of(ct), self.padding,
                                               self.base, self.dilation):
            before = dilate(w, wd) - lo - 1
            low.append(before)
            high.append(dilate(n, bd) + dilate(w, wd) - 1 - dilate(m, s) - before)
        elem = builders.elem_of(ct)
        padded = builders.pad(ct, low, high, [s - 1 for s in self.strides], builders.scalar(0, elem))
        rank = len(shape)
        return builders.reduce_window(padded, builders.scalar(0, elem), "add", self.dims, self.base, [(0, 0)] * rank,
                                      [1] * rank, self.dilation)


def reduce_window(b, op, cts, wants):
    """add: JAX's transpose; max/min: XLA's select_and_scatter (the first maximum of each
    window gets its cotangent, as JAX's select_and_gather_add transposes); multiply (cumprod):
    per window the product of its nonzero elements and its number of zeros, so the product
    of the others is exact at zeros."""
    kind = builders.reducer_kind(op)
    if len(op.results) != 1 or kind not in ("stablehlo.add", "stablehlo.maximum", "stablehlo.minimum",
                                             "stablehlo.multiply"):
        raise PassError(f"vjp-expand: no reverse-mode rule for stablehlo.reduce_window with a {kind or 'general'} "
                        f"body over {len(op.results)} result(s)", op.location)
    (ct,), (x, init) = cts, op.operands
    win, shape = Window.of(op), builders.shape_of(x)
    if kind == "stablehlo.add":
        return [win.transpose_sum(ct, shape), builders.reduce(ct, range(len(shape))) if wants[1] else None]
    if wants[1]:
        raise PassError(f"vjp-expand: no reverse-mode rule for a stablehlo.reduce_window with a {kind} body and a "
                        "differentiated init value", op.location)
    if kind == "stablehlo.multiply":
        zero_, one = b.zeros(x), _one(b, x)
        is_zero, init_zero = builders.compare(x, zero_, "EQ"), builders.compare(init, b.zeros(init), "EQ")
        nonzero = win.reduce(builders.select(is_zero, one, x), builders.select(init_zero, _one(b, init), init), "mul")
        zeros = win.reduce(builders.convert(is_zero, builders.elem_of(x)),
                           builders.convert(init_zero, builders.elem_of(x)), "add")

        def spread(count: int) -> ir.Value:
            hit = builders.compare(zeros, builders.full(builders.shape_of(zeros), count, builders.elem_of(x)), "EQ")
            return win.transpose_sum(b.where(hit, builders.mul(ct, nonzero)), shape)

        return [builders.select(is_zero, spread(1), builders.div(spread(0), builders.select(is_zero, one, x))), None]
    if any(d != 1 for d in win.base + win.dilation):
        raise PassError(f"vjp-expand: no reverse-mode rule for a stablehlo.reduce_window with a {kind} body and "
                        "base or window dilation", op.location)
    direction = "GE" if kind == "stablehlo.maximum" else "LE"
    return [builders.select_and_scatter_add(x, ct, direction, win.dims, win.strides, win.padding), None]


# --- ops that rebuild the forward -------------------------------------------------

def sort(b, op, cts, wants):
    """The forward sort also carries an iota (the permutation, as JAX's sort JVP); the
    cotangents are sorted back by it."""
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    shape = builders.shape_of(op.operands[0])
    elem = I32() if shape[dim] < 2**31 else builders.i64()
    with ir.InsertionPoint(op), op.location:
        operands = list(op.operands) + [builders.iota(shape, dim, elem)]
        new = ir.Operation.create("stablehlo.sort", results=[v.type for v in operands], operands=operands,
                                  attributes=attributes_of(op), regions=1)
        comparator = op.regions[0].blocks[0]
        comparator.append_to(new.regions[0])
        for _ in range(2):
            comparator.add_argument(builders.tensor([], elem), op.location)
    perm = new.results[-1]
    b.scope.replace_forward(op, list(new.results)[:-1])
    which = [i for i, (ct, w) in enumerate(zip(cts, wants)) if ct is not None and w]
    back = builders.sort([perm] + [cts[i] for i in which], dim)
    out: list[Term] = [None] * len(cts)
    for i, v in zip(which, back[1:]):
        out[i] = v
    return out


def top_k(b, op, cts, wants):
    """The values' cotangent scattered back (added) at the indices along the last dim, as JAX."""
    x, indices = op.operands[0], op.results[1]
    rank = len(builders.shape_of(x))
    batch = list(range(rank - 1))
    starts = builders.reshape(indices, builders.shape_of(indices) + [1])
    return [builders.scatter(b.zeros(x), starts, cts[0], update_window_dims=[], inserted_window_dims=[rank - 1],
                             input_batching_dims=batch, scatter_indices_batching_dims=batch,
                             scattered_dims_to_operand_dims=[rank - 1], index_vector_dim=rank)]


@dataclasses.dataclass(frozen=True)
class Counter:
    """A `while` that runs `trips` times: state value `index` goes from `start` by 1."""

    trips: int
    index: int
    start: int


def counted_loop(op: ir.Operation) -> Counter | None:
    """The counter of a `while` whose condition is `i < N` (or `N > i`) with a constant N and
    whose body adds 1 to i, starting from a constant (JAX's fori_loop and scan); else None."""
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    test = list(cond.operations)[-1].operands
    if len(test) != 1 or not isinstance(test[0], ir.OpResult) or test[0].owner.name != "stablehlo.compare":
        return None
    compare = test[0].owner
    direction = stablehlo.ComparisonDirectionAttr(compare.attributes["comparison_direction"]).value
    lhs, rhs = compare.operands
    counter, limit = (lhs, rhs) if direction == "LT" else (rhs, lhs) if direction == "GT" else (None, None)
    if not isinstance(counter, ir.BlockArgument) or counter.owner != cond:
        return None
    j = counter.arg_number
    step = list(body.operations)[-1].operands[j]
    if not isinstance(step, ir.OpResult) or step.owner.name != "stablehlo.add":
        return None
    a, c = step.owner.operands
    arg = body.arguments[j]
    if not ((a == arg and builders.int_constant(c) == 1) or (c == arg and builders.int_constant(a) == 1)):
        return None
    n, start = builders.int_constant(limit), builders.int_constant(op.operands[j])
    return None if n is None or start is None else Counter(max(0, n - start), j, start)


def _varying(body: ir.Block) -> set[ir.Value]:
    """The values of a loop body that change from one iteration to the next: those that
    depend on a state value the body does not return unchanged."""
    returned = list(body.operations)[-1].operands
    varying = {a for j, a in enumerate(body.arguments) if returned[j] != a}
    for op in list(body.operations)[:-1]:
        if any(v in varying for inner in [op, *builders.nested_ops(op)] for v in inner.operands):
            varying.update(op.results)
    return varying


def _residuals(scope: "Scope", block: ir.Block) -> list[ir.Value]:
    """The values of the recomputed forward body (those with an origin in the forward loop)
    that backward ops in `block` read."""
    found: dict[ir.Value, None] = {}
    for op in list(block.operations):
        op = op.operation
        if any(r in scope.origin for r in op.results):
            continue
        for inner in [op, *builders.nested_ops(op)]:
            found.update((v, None) for v in inner.operands if v in scope.origin)
    return list(found)


def _row(tape: ir.Value, t: ir.Value) -> ir.Value:
    """`tape[t]`."""
    shape = builders.shape_of(tape)[1:]
    row = builders.dynamic_slice(tape, [t] + [builders.scalar(0, I32())] * len(shape), [1] + shape)
    return builders.reshape(row, shape)


def while_(b, op, cts, wants):
    """A backward loop over the iterations in reverse. Known trip count: the forward loop
    fills tapes with what the backward body reads from the forward body (the residuals, as
    JAX's scan stores them) and with the state values it needs; loop-invariant values are
    not taped (the backward body recomputes them, and XLA hoists them) and the counter is
    derived from t. Unknown trip count: the forward loop counts its iterations and backward
    iteration t recomputes its state by t forward steps from the initial state (quadratic
    time, no tape). Cotangents of values the body captures are summed in the loop state."""
    scope = b.scope
    n = len(op.operands)
    carried = scope.loop_activity(op)
    counter = counted_loop(op)
    if counter is not None and counter.trips == 0:
        return [ct if c else None for ct, c in zip(cts, carried)]
    active = [j for j in range(n) if carried[j]]
    types, loc, inits = [v.type for v in op.operands], op.location, list(op.operands)
    body = op.regions[1].blocks[0]
    forward_body = scope.inline_calls([o.operation for o in body.operations][:-1])  # as the copy will be
    returned = list(body.operations)[-1].operands
    scratch = ir.Operation.create("stablehlo.while", results=[], operands=[], regions=2)
    block = scratch.regions[1].blocks.append(builders.tensor([], I32()), *[types[j] for j in active], *types)
    t, ct_args = block.arguments[0], list(block.arguments)[1:1 + len(active)]
    carry = list(block.arguments)[1 + len(active):]
    with ir.InsertionPoint(block):
        inner = scope.child(carry, carried)
        ops, term = scope.clone_region(op, 1, carry)
        if counter is not None:
            varying = _varying(body)
            inner.origin = {c: f for clone, fwd in zip(ops, forward_body)
                            for c, f in zip(clone.results, fwd.results) if f in varying}
        ops = inner.prepare(ops)
        outs = scope.returned(term)
        inner.pull_back(ops, outs, [ct_args[active.index(j)] if carried[j] else None for j in range(n)])
        state_cts = [inner.materialized_ct(carry[j]) for j in active]
        captured = list(inner.captured.items())
        sums = [b.accumulate(block.add_argument(v.type, loc), ct) for v, ct in captured]
        ir.Operation.create("stablehlo.return", operands=[builders.sub(t, builders.scalar(1, I32())), *state_cts, *sums])
    residuals = _residuals(inner, block) if counter is not None else []
    slots = [block.add_argument(v.type, loc) for v in residuals]  # until the tapes exist
    for v, slot in zip(residuals, slots):
        v.replace_all_uses_with(slot)
    scope.erase_dead(block)
    taped = [i for i, slot in enumerate(slots) if builders.has_uses(slot)]  # read by live ops
    origins = [inner.origin[residuals[i]] for i in taped]
    with ir.InsertionPoint.at_block_begin(block), loc:
        for j in range(n):
            if returned[j] == body.arguments[j]:  # loop-invariant state: read the loop's operand
                carry[j].replace_all_uses_with(inits[j])
        if counter is not None and builders.has_uses(carry[counter.index]):
            elem = builders.elem_of(carry[counter.index])
            carry[counter.index].replace_all_uses_with(
                builders.add(builders.convert(t, elem), builders.scalar(counter.start, elem)))
        used = [j for j in range(n) if builders.has_uses(carry[j])]
        if counter is None:
            _recompute_state(scope, op, t, inits, carry, used)
    if counter is None or used or taped:
        count, tapes = _record(scope, op, used if counter is not None else [], origins, counter)
        with ir.InsertionPoint.at_block_begin(block), loc:
            for v, tape in zip([carry[j] for j in used] + [slots[i] for i in taped], tapes):
                v.replace_all_uses_with(_row(tape, t))
    for index in reversed(range(1 + len(active), 1 + len(active) + n)):
        block.erase_argument(index)
    for _ in slots:
        block.erase_argument(len(block.arguments) - 1)
    with ir.InsertionPoint(scratch), loc:
        one = builders.scalar(1, I32())
        last = builders.scalar(counter.trips - 1, I32()) if counter is not None else builders.sub(count, one)
        init = [last] + [cts[j] if cts[j] is not None else zeros_of(types[j]) for j in active] + \
            [zeros_of(v.type) for v, _ in captured]
        backward = ir.Operation.create("stablehlo.while", results=[v.type for v in init], operands=init, regions=2)
        test = backward.regions[0].blocks.append(*[v.type for v in init])
        with ir.InsertionPoint(test):
            stablehlo.return_([builders.compare(test.arguments[0], builders.scalar(0, I32()), "GE")])
        block.append_to(backward.regions[1])
    scratch.erase()
    results = list(backward.results)
    for (v, _), total in zip(captured, results[1 + len(active):]):
        scope.add_ct(v, total)
    return [results[1 + active.index(j)] if carried[j] else None for j in range(n)]


def _recompute_state(scope: "Scope", op: ir.Operation, t: ir.Value, inits: Sequence[ir.Value],
                     carry: Sequence[ir.Value], used: Sequence[int]) -> None:
    """Replace the `used` state values at the start of iteration `t` by a loop that runs the
    forward body t times from `inits`."""
    if not used:
        return
    types = [builders.tensor([], I32())] + [v.type for v in inits]
    operands = [builders.scalar(0, I32())] + list(inits)
    loop = ir.Operation.create("stablehlo.while", results=types, operands=operands, regions=2)
    test = loop.regions[0].blocks.append(*types)
    with ir.InsertionPoint(test):
        stablehlo.return_([builders.compare(test.arguments[0], t, "LT")])
    body = loop.regions[1].blocks.append(*types)
    with ir.InsertionPoint(body):
        _, term = scope.clone_region(op, 1, list(body.arguments)[1:])
        outs = scope.returned(term)
        stablehlo.return_([builders.add(body.arguments[0], builders.scalar(1, I32())), *outs])
    for j in used:
        carry[j].replace_all_uses_with(loop.results[1 + j])


def _record(scope: "Scope", op: ir.Operation, states: Sequence[int], residuals: Sequence[ir.Value],
            counter: Counter | None) -> tuple[ir.Value, list]:
    """Rebuild the forward `while` with an iteration counter and, for a known trip count, a
    tape per state value in `states` (its value at the start of each iteration) and per
    body value in `residuals`. Returns the final count and the tapes."""
    n = len(op.operands)
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    args = list(body.arguments)
    recorded = [args[j] for j in states] + list(residuals)
    with ir.InsertionPoint(op), op.location:
        extra = [builders.scalar(0, I32())]
        for v in recorded:
            t = ir.RankedTensorType(v.type)
            extra.append(builders.full([counter.trips] + list(t.shape), 0, t.element_type))
        operands = list(op.operands) + extra
        new = ir.Operation.create("stablehlo.while", results=[v.type for v in operands], operands=operands,
                                  attributes=attributes_of(op), regions=2)
    cond.append_to(new.regions[0])
    body.append_to(new.regions[1])
    for v in extra:
        cond.add_argument(v.type, op.location)
        body.add_argument(v.type, op.location)
    term = list(body.operations)[-1]
    with ir.InsertionPoint(term), op.location:
        k = body.arguments[n]
        zero_ = builders.scalar(0, I32())
        writes = []
        for v, tape in zip(recorded, list(body.arguments)[n + 1:]):
            shape = builders.shape_of(v)
            writes.append(builders.dynamic_update_slice(tape, builders.reshape(v, [1] + shape),
                                                        [k] + [zero_] * len(shape)))
        stablehlo.return_(list(term.operands) + [builders.add(k, builders.scalar(1, I32()))] + writes)
    term.erase()
    results = list(new.results)
    scope.replace_forward(op, results[:n])
    return results[n], results[n + 1:]


def branches(b, op, cts, wants):
    """case / if: a backward case on the same index whose branches recompute their forward
    and return the cotangents of every value any branch captures (zeros where a branch
    has none)."""
    scope = b.scope
    scratch = ir.Operation.create(op.name, results=[], operands=[], regions=len(op.regions))
    blocks, captured = [], []
    for i, region in enumerate(scratch.regions):
        block = region.blocks.append()
        with ir.InsertionPoint(block):
            inner = scope.child([], [])
            ops, term = scope.clone_region(op, i, [])
            ops = inner.prepare(ops)
            outs = scope.returned(term)
            inner.pull_back(ops, outs, cts)
        blocks.append((block, inner.captured))
        captured += [v for v in inner.captured if v not in captured]
    if not captured:
        scratch.erase()
        return [None] * len(op.operands)
    for block, found in blocks:
        with ir.InsertionPoint(block):
            stablehlo.return_([found[v] if v in found else zeros_of(v.type) for v in captured])
        scope.erase_dead(block)
    with ir.InsertionPoint(scratch):
        backward = ir.Operation.create(op.name, results=[v.type for v in captured], operands=list(op.operands),
                                       attributes=attributes_of(op), regions=len(blocks))
    for region, (block, _) in zip(backward.regions, blocks):
        block.append_to(region)
    scratch.erase()
    for v, total in zip(captured, backward.results):
        scope.add_ct(v, total)
    return [None] * len(op.operands)


def call(b, op, cts, wants):
    """A call of the callee's vjp, specialized to the cotangents known to be zero and the
    arguments that need none."""
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    zero_cts = frozenset(i for i, ct in enumerate(cts) if ct is None)
    unwanted = frozenset(i for i, w in enumerate(wants) if not w)
    name, zero_out = b.scope.module.vjp_function(callee, zero_cts, unwanted, op.location)
    if all(not w or i in zero_out for i, w in enumerate(wants)):
        return [None] * len(wants)
    operands = list(op.operands) + [b.materialize(ct, r) for ct, r in zip(cts, op.results)]
    call = ir.Operation.create("func.call", results=[v.type for v in op.operands], operands=operands,
                               attributes={"callee": ir.FlatSymbolRefAttr.get(name)})
    return [None if i in zero_out or not w else r for i, (w, r) in enumerate(zip(wants, call.results))]


def optimization_barrier(b, op, cts, wants):
    return list(cts)


def linear_algebra(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """The reverse-mode rule of a spelling of a linear-algebra meaning (`linalg_rules.vjp`); that
    module is imported when a module first holds one, so a dense program loads none of it."""
    from hlopt.passes.autodiff import linalg_rules

    return linalg_rules.vjp(b, op, cts, wants)


# --- custom calls, by target (the op table's `CALL_ENTRIES`) -----------------------------------

def stop_gradient(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """The stop_gradient marker of a jet body (kept by jet-expand for a vjp of the jet) passes none."""
    check_stop_gradient(op, "vjp-expand")
    return [None]


def one_operand(rule: Rule) -> Rule:
    """`rule` for a custom call of one operand (the partitioner's annotations); a call of
    another arity is refused."""

    def checked(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        if len(op.operands) != 1:
            raise PassError(f"vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' @{call_target(op)} with "
                            f"{len(op.operands)} operands (it takes one)", op.location)
        return rule(b, op, cts, wants)

    return checked


def cross_shard_boundary(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """The shard_map boundary `SPMDFullToShardShape` / `SPMDShardToFullShape`, crossed the other way."""
    return [_cross_shard_boundary(op, cts[0], call_target(op))]


def unknown_call(b: VjpBuilder, op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """A custom call whose target has no entry in the op table: refused, naming the target and,
    for an annotation of another pass, the pass to run first."""
    target = call_target(op)
    lowering = lowering_pass_for(target)
    hint = "" if lowering == "vjp-expand" else f" (run '{lowering}' before 'vjp-expand')" if lowering else \
        f" ({ADD_CALL_RULES})"
    raise PassError(f"vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' @{target}{hint}", op.location)


def _cross_shard_boundary(op: ir.Operation, ct: ir.Value, target: str) -> ir.Value:
    """full -> shard (manual) becomes shard -> full with the sharding of the full operand, and back."""
    x = op.operands[0]
    own = ir.StringAttr(op.attributes["mhlo.sharding"]).value

    def custom(name: str, v: ir.Value, result: ir.Type, sharding: str) -> ir.Value:
        attrs = attributes_of(op)
        attrs.update({"call_target_name": ir.StringAttr.get(name), "mhlo.sharding": ir.StringAttr.get(sharding)})
        return ir.Operation.create("stablehlo.custom_call", results=[result], operands=[v], attributes=attrs).result

    if target == "SPMDFullToShardShape":
        source = x.owner if isinstance(x, ir.OpResult) else None
        if source is None or source.name != "stablehlo.custom_call" or \
                ir.StringAttr(source.attributes["call_target_name"]).value != "Sharding":
            raise PassError("vjp-expand: @SPMDFullToShardShape needs its operand from a @Sharding custom call "
                            "(the sharding of the full value)", op.location)
        full = ir.StringAttr(source.attributes["mhlo.sharding"]).value
        return custom("SPMDShardToFullShape", custom("Sharding", ct, ct.type, own), x.type, full)
    return custom("SPMDFullToShardShape", custom("Sharding", ct, ct.type, own), x.type, "{manual}")
