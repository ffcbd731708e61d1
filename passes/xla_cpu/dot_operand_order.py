"""`xla-cpu-dot-operand-order`: a dot_general whose result is transposed to swap its free
dimensions of the two sides becomes the dot_general of the swapped operands.

`dot_general` puts its result's dimensions in the order batch, lhs free, rhs free;
a transpose that puts the rhs free ones first is the same product with the
operands swapped. XLA:CPU folds such a transpose into its dot
as a transposed copy of an operand before the matmul (a weight gradient
x^T ct of x @ W copies ct), where the swapped dot reads both in place
(`bench/xla_cpu_tuning.py` measures it).
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.matching import dot_dims

# the attributes of a dot_general this pass knows how to swap
SWAPPABLE = {"dot_dimension_numbers", "precision_config"}


def _free(rank: int, batch: list[int], contract: list[int]) -> int:
    return rank - len(batch) - len(contract)


def _swapped_dot(op: ir.Operation) -> list[ir.Value] | None:
    """The dot_general of swapped operands that transpose `op` of a dot_general's result is, or None."""
    source = op.operands[0]
    if not isinstance(source, ir.OpResult) or source.owner.operation.name != "stablehlo.dot_general":
        return None
    dot = source.owner.operation
    if len(list(source.uses)) != 1 or set(dot.attributes) - SWAPPABLE:
        return None
    lhs, rhs = dot.operands
    lb, rb, lc, rc = dot_dims(dot)
    nb = len(lb)
    nl = _free(len(builders.shape_of(lhs)), lb, lc)
    nr = _free(len(builders.shape_of(rhs)), rb, rc)
    swap = [*range(nb), *range(nb + nl, nb + nl + nr), *range(nb, nb + nl)]
    perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    if not nl or not nr or perm != swap:
        return None
    precision = builders.precision_of(dot)
    return [builders.dot_general(rhs, lhs, lhs_batch=rb, rhs_batch=lb, lhs_contract=rc, rhs_contract=lc,
                                 elem=builders.elem_of(source), precision_config=builders.swapped_precision(precision))]


class DotOperandOrder(PatternPass):
    """Swap dot_general operands instead of transposing the result.

    Backend: XLA:CPU folds a transpose of a dot's result into the dot as a transposed copy of an
    operand; benchmark: `bench/xla_cpu_tuning.py`.

    A transpose of a dot_general's result that swaps the lhs and rhs free dimensions
    becomes the dot_general of the operands swapped, without a transpose.

        %d = stablehlo.dot_general %ct, %y, contracting_dims = [0] x [0]
             : (tensor<8x3xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
        %t = stablehlo.transpose %d, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>

    becomes

        %t = stablehlo.dot_general %y, %ct, contracting_dims = [0] x [0]
             : (tensor<8x5xf32>, tensor<8x3xf32>) -> tensor<5x3xf32>
    """

    name: ClassVar[str] = "xla-cpu-dot-operand-order"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    PATTERNS: ClassVar[PatternSet] = PatternSet(Pattern("stablehlo.transpose", _swapped_dot))
