"""How the platform passes read the ops their patterns match: a dot_general's dimension
numbers and free dimensions, a sum's summed dimension, the op that holds a use.

The passes declare their rewrites as pattern sets (`hlopt.passes.rewrite.patterns`).
"""

from __future__ import annotations

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir, stablehlo

# the attributes of a dot_general whose meaning a rewrite of it keeps
DOT_ATTRIBUTES = {"dot_dimension_numbers", "precision_config"}


def dot_dims(op: ir.Operation) -> tuple[list[int], list[int], list[int], list[int]]:
    """A dot_general's (lhs batch, rhs batch, lhs contracting, rhs contracting) dimensions."""
    d = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    return (list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions),
            list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions))


def free_dims(v: ir.Value, batch: list[int], contract: list[int]) -> list[int]:
    """The free dimensions of dot operand `v`."""
    return [d for d in range(len(builders.shape_of(v))) if d not in batch and d not in contract]


def wide_float(v: ir.Value) -> bool:
    """Whether `v` is float32 or float64: in a narrower float a reduce rounds its sum, and a
    dot_general each batch's result, so moving a sum into a product changes the rounding."""
    return isinstance(builders.elem_of(v), (ir.F32Type, ir.F64Type))


def summed_dim(op: ir.Operation) -> int | None:
    """The dimension a one-operand floating `reduce` add from zero sums over, if one alone, of
    static size, with the operand's element type and no attributes but its dimensions (a sum
    annotated with a sharding or frontend attributes is left as it is)."""
    if len(op.operands) != 2 or builders.reducer_kind(op) != "stablehlo.add" or set(op.attributes) != {"dimensions"}:
        return None
    x = op.operands[0]
    if not builders.is_differentiable(x.type) or builders.elem_of(op.results[0]) != builders.elem_of(x):
        return None
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    if len(dims) != 1 or builders.shape_of(x)[dims[0]] < 0 or not builders.is_zero_constant(op.operands[1]):
        return None
    return dims[0]


def owner_op(use: ir.OpOperand) -> ir.Operation:
    """The operation that holds `use`."""
    return use.owner.operation if hasattr(use.owner, "operation") else use.owner
