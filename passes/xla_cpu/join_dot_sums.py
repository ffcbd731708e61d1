"""`xla-cpu-join-dot-sums`: a sum of two dot_generals that differ along one contracted
dimension becomes one dot_general of the operands concatenated along it.

The weight gradient of a layer in a jet's reverse pass is a sum over the Taylor
coefficients (primal, directions, collapsed coefficient) of x_k^T ct_k, one
dot_general each. XLA:CPU runs them as separate matmuls plus
adds; concatenated along the contracted axis they are one matmul
(`bench/xla_cpu_tuning.py` measures it on bench/pinn_grad.py's workload).

The concatenations copy all four operands, which pays where the product is at least
comparable to them (pinn_grad's wide weights over few points) or they are small. Where the
operands are far larger than the product (bench/wavefunction.py's narrow weights over many
walkers) the copies cost more than the separate dot and add: the sum is joined only when the
operands number at most `JOIN_RATIO` (16) times the product's elements, or `FEW_COPIED` (2^16)
elements in all.
"""

from __future__ import annotations

import math
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.rewrite.matching import DOT_ATTRIBUTES, dot_dims


# Two dots are joined only where the operands the concatenations copy (elements of all four)
# number at most JOIN_RATIO times the sum's, or FEW_COPIED in all.
JOIN_RATIO = 16
FEW_COPIED = 1 << 16


def _dot(v: ir.Value) -> ir.Operation | None:
    """The dot_general of `v` if it is used once and has no attributes but its dimensions and precision."""
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.dot_general" or len(list(v.uses)) != 1:
        return None
    op = v.owner.operation
    return None if set(op.attributes) - DOT_ATTRIBUTES else op


def _lifted(op: ir.Operation, like: ir.Operation) -> tuple[ir.Value, ir.Value] | None:
    """The operands of `op` shaped as those of `like` with size 1 along `like`'s first
    contracted dimension, when `like` has one more (leading) contracted dimension on each
    side and is otherwise `op` with every dimension shifted by one; else None."""
    lb, rb, lc, rc = dot_dims(op)
    LB, RB, LC, RC = dot_dims(like)
    lhs, rhs = op.operands
    if (LB, RB) != ([b + 1 for b in lb], [b + 1 for b in rb]) or \
            (LC, RC) != ([0] + [c + 1 for c in lc], [0] + [c + 1 for c in rc]):
        return None
    if [builders.shape_of(v) for v in (lhs, rhs)] != [builders.shape_of(v)[1:] for v in like.operands]:
        return None
    return builders.reshape(lhs, [1, *builders.shape_of(lhs)]), builders.reshape(rhs, [1, *builders.shape_of(rhs)])


def _joined_dots(op: ir.Operation) -> list[ir.Value] | None:
    """The sum `op` of two alike dot_generals as one of their operands concatenated, or None."""
    a, b = (_dot(v) for v in op.operands)
    if a is None or b is None or a == b or str(builders.precision_of(a)) != str(builders.precision_of(b)) or \
            builders.elem_of(a.result) != builders.elem_of(b.result):
        return None
    pieces = [(a, tuple(a.operands)), (b, tuple(b.operands))]
    if dot_dims(a) != dot_dims(b):
        low, high = sorted((a, b), key=lambda d: len(builders.shape_of(d.operands[0])))
        lifted = _lifted(low, high)
        if lifted is None:
            return None
        pieces = [(high, tuple(high.operands)), (high, lifted)]
    like = pieces[0][0]
    copied = sum(math.prod(builders.shape_of(v)) for _, ops in pieces for v in ops)
    if copied > max(JOIN_RATIO * math.prod(builders.shape_of(op.result)), FEW_COPIED):
        return None  # the concatenations would copy far more than the separate dot and add cost
    lb, rb, lc, rc = dot_dims(like)
    pair = _contracted_pair([builders.shape_of(v) for _, ops in pieces for v in ops], lc, rc)
    if pair is None:
        return None
    lhs = builders.concat([ops[0] for _, ops in pieces], lc[pair])
    rhs = builders.concat([ops[1] for _, ops in pieces], rc[pair])
    return [builders.dot_general(lhs, rhs, lhs_batch=lb, rhs_batch=rb, lhs_contract=lc, rhs_contract=rc,
                                 elem=builders.elem_of(op.result), precision_config=builders.precision_of(like))]


class JoinDotSums(PatternPass):
    """Join a sum of two alike dot_generals into one dot_general.

    Backend: XLA:CPU runs each dot_general of a sum as its own matmul plus an add; benchmark:
    `bench/xla_cpu_tuning.py` (pinn_grad).

    `dot_general(a1, b1) + dot_general(a2, b2)` with the same dimensions and precision,
    the operands alike but along one contracted dimension pair (or one dot lacking a
    leading contracted pair), becomes one dot_general of a1, a2 and of b1, b2
    concatenated along it, unless the operands are more than `JOIN_RATIO` (16) times the sum's
    size and more than `FEW_COPIED` (2^16) elements.

        %p = stablehlo.dot_general %a1, %b1, contracting_dims = [0] x [0]
             : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
        %q = stablehlo.dot_general %a2, %b2, contracting_dims = [0] x [0]
             : (tensor<1x16xf32>, tensor<1x8xf32>) -> tensor<16x8xf32>
        %s = stablehlo.add %p, %q : tensor<16x8xf32>

    becomes

        %a = stablehlo.concatenate %a1, %a2, dim = 0
        %b = stablehlo.concatenate %b1, %b2, dim = 0
        %s = stablehlo.dot_general %a, %b, contracting_dims = [0] x [0]
             : (tensor<5x16xf32>, tensor<5x8xf32>) -> tensor<16x8xf32>
    """

    name: ClassVar[str] = "xla-cpu-join-dot-sums"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    PATTERNS: ClassVar[PatternSet] = PatternSet(Pattern("stablehlo.add", _joined_dots))


def _contracted_pair(shapes: list[list[int]], lc: list[int], rc: list[int]) -> int | None:
    """For the operand shapes [a1, b1, a2, b2] of two dots with contracted pairs (lc, rc), the
    index of the one pair along which they differ, both sides alike (0 if they do not
    differ); None if they differ elsewhere."""
    if not lc or len(shapes[0]) != len(shapes[2]) or len(shapes[1]) != len(shapes[3]):
        return None
    left = {d for d in range(len(shapes[0])) if shapes[0][d] != shapes[2][d]}
    right = {d for d in range(len(shapes[1])) if shapes[1][d] != shapes[3][d]}
    pairs = [i for i in range(len(lc)) if lc[i] in left or rc[i] in right]
    if len(pairs) > 1 or left - {lc[i] for i in pairs} or right - {rc[i] for i in pairs}:
        return None
    return pairs[0] if pairs else 0
