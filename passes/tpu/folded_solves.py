"""`tpu-folded-solves`: a triangular solve of many stacked right-hand sides as a product with the factor's inverse.

The Taylor and reverse rules of LU, Cholesky and triangular solves solve one
system for a whole stack of right-hand sides (a coefficient along every direction
of a jet) by folding the stack into the solve's free matrix dimension: the
right-hand sides `R[*B, m, n, p]` (a transpose of the stacked coefficients) are
reshaped to `[*B, m, n * p]`, solved, and unfolded again. XLA's TPU compiler
expands a triangular solve of an `m x m` factor with `m` up to its block size
(`BLOCK`) into the inverse of the factor's triangle and one product with it at
`HIGHEST` precision; but the fold makes it copy the stack into the solve's
layout and back, copies that cost several times that product.

Here the solve becomes that same computation without the fold: the inverse is
the solve of the identity (the factor's triangle inverted as XLA inverts it, once
per factor, shared with the factor's other solves), and the product with it runs
on the unfolded right-hand sides `R` at `HIGHEST` precision, the precision of
XLA's own expansion: the values are those of the solve, to its rounding. XLA folds
the transposes around the product into its dimension numbers and layouts.

Rewritten, each only where all of its conditions hold: a `stablehlo.triangular_solve`
of a float32 factor `[*B, m, m]` with `m` at most `BLOCK`, whose right-hand side is
the reshape of `R` (of the same element type) that joins two adjacent dimensions
of the solve's free side into one: `[*B, m, n, p] -> [*B, m, n * p]` for a solve from
the left, `[*B, n, m, p] -> [*B, n * m, p]` from the right.

Platform: declared `tpu`, so it rewrites only a module compiled for a TPU (`hlopt-opt
--platform tpu` for IR work).
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet

# The largest factor XLA's TPU compiler inverts as one block (its triangular-solve expander's block size).
BLOCK = 128
_HIGHEST = "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"


def _unfolded(rhs: ir.Value, left: bool) -> ir.Value | None:
    """`R` where `rhs` is `reshape(R)` joining the two dimensions of the solve's free side
    (the last two from the left, the two before the last from the right); else None."""
    if not isinstance(rhs, ir.OpResult) or rhs.owner.name != "stablehlo.reshape":
        return None
    r = rhs.owner.operands[0]
    if builders.elem_of(r) != builders.elem_of(rhs):
        return None
    folded, shape = builders.shape_of(rhs), builders.shape_of(r)
    if len(shape) != len(folded) + 1 or min(shape) < 0:
        return None
    at = len(folded) - 1 if left else len(folded) - 2  # the joined dimension of `rhs`
    joined = shape[:at] + [shape[at] * shape[at + 1]] + shape[at + 2:]
    return r if joined == folded else None


def _solve(op: ir.Operation) -> list[ir.Value] | None:
    """The product of the factor's inverse with the unfolded right-hand sides, folded as the solve's result."""
    a, rhs = op.operands
    m = builders.shape_of(a)[-1]
    if not isinstance(builders.elem_of(a), ir.F32Type) or not 0 < m <= BLOCK:
        return None
    left = ir.BoolAttr(op.attributes["left_side"]).value
    r = _unfolded(rhs, left)
    if r is None:
        return None
    nb = len(builders.shape_of(a)) - 2
    batch = list(range(nb))
    eye = builders.convert(builders.compare(builders.iota(builders.shape_of(a), nb, builders.i32()),
                                            builders.iota(builders.shape_of(a), nb + 1, builders.i32()), "EQ"),
                           builders.elem_of(a))
    inverse = stablehlo.triangular_solve(a, eye, ir.BoolAttr.get(True), op.attributes["lower"],
                                         op.attributes["unit_diagonal"], op.attributes["transpose_a"])
    highest = ir.Attribute.parse(_HIGHEST)
    if left:  # inverse[*B, i, l] R[*B, l, n, p] -> [*B, i, n, p]
        x = builders.dot_general(inverse, r, lhs_batch=batch, rhs_batch=batch, lhs_contract=[nb + 1],
                                 rhs_contract=[nb], elem=builders.elem_of(r), precision_config=highest)
    else:  # R[*B, n, m, l] inverse[*B, l, q] -> [*B, n, m, q]
        x = builders.dot_general(r, inverse, lhs_batch=batch, rhs_batch=batch, lhs_contract=[nb + 2],
                                 rhs_contract=[nb], elem=builders.elem_of(r), precision_config=highest)
    return [builders.reshape(x, builders.shape_of(op.results[0]))]


class FoldedSolves(PatternPass):
    """Triangular solves of folded stacks of right-hand sides as products with the factor's inverse.

    Backend: XLA's TPU compiler copies a folded stack of right-hand sides into the solve's layout
    and back, copies that cost more than the solve; benchmark: `bench/taylor_tpu.py --without
    tpu-folded-solves` (kinetic, gradient).

    A float32 `triangular_solve` of a factor of at most `BLOCK` rows whose right-hand side
    joins two dimensions of a stack `R` becomes the product of the factor's inverse (the
    solve of the identity) with `R` at HIGHEST precision, reshaped as the solve's result.

        %t = stablehlo.transpose %c, dims = [1, 2, 0, 3] : (tensor<96x1024x32x32xf32>) -> tensor<1024x32x96x32xf32>
        %r = stablehlo.reshape %t : (tensor<1024x32x96x32xf32>) -> tensor<1024x32x3072xf32>
        %x = "stablehlo.triangular_solve"(%a, %r) <{left_side = true, lower = true, unit_diagonal = true,
               transpose_a = #stablehlo<transpose NO_TRANSPOSE>}> : (tensor<1024x32x32xf32>, ...) -> tensor<1024x32x3072xf32>

    becomes

        %eye = (iota dim 1 == iota dim 2) as f32 : tensor<1024x32x32xf32>
        %inv = "stablehlo.triangular_solve"(%a, %eye) <{left_side = true, lower = true, unit_diagonal = true, ...}>
        %p = stablehlo.dot_general %inv, %t, batching_dims = [0] x [0], contracting_dims = [2] x [1],
               precision = [HIGHEST, HIGHEST] : (...) -> tensor<1024x32x96x32xf32>
        %x = stablehlo.reshape %p : (tensor<1024x32x96x32xf32>) -> tensor<1024x32x3072xf32>
    """

    name: ClassVar[str] = "tpu-folded-solves"
    platforms: ClassVar[tuple[str, ...]] = ("tpu",)
    PATTERNS: ClassVar[PatternSet] = PatternSet(Pattern("stablehlo.triangular_solve", _solve), erase_feeders=False)
