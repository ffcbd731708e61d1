"""What the XLA:CPU tuning passes share: a pass that offers each op of some names to a rewrite,
and how they read a dot_general (its dimension numbers and free dimensions).

A tuning pass names the ops it looks at (`anchors`) and says, in `rewrite(op)`,
the values that replace the op's results, built at the op (insertion point
before it, its location), or None to leave it. The ops it left without uses
are erased afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.base import Pass
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.ir.walk import walk_ops

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
    dot_general each batch's result, where XLA:CPU accumulates a product in float32."""
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


class OpRewrite(Pass):
    """Base of the tuning passes: `rewrite` each op named in `anchors`, in walk order."""

    anchors: ClassVar[tuple[str, ...]] = ()

    def rewrite(self, op: ir.Operation) -> Sequence[ir.Value] | None:
        """The values replacing `op`'s results, or None to keep `op`."""
        raise NotImplementedError

    def apply(self, module: ir.Operation) -> None:
        rewrite_ops(module, self.anchors, self.rewrite)


def rewrite_ops(module: ir.Operation, anchors: Sequence[str],
                rewrite: Callable[[ir.Operation], Sequence[ir.Value] | None]) -> None:
    """Replace the results of each op named in `anchors` (in walk order) by what `rewrite` builds
    at it (insertion point before it, its location), where that is not None; then erase them."""
    replaced: list[ir.Operation] = []
    for op in walk_ops(module, *anchors):
        with ir.InsertionPoint(op), op.location:
            values = rewrite(op)
        if values is not None:
            for old, new in zip(op.results, values, strict=True):
                old.replace_all_uses_with(new)
            replaced.append(op)
    erase_unused(replaced)


def erase_unused(ops: Sequence[ir.Operation]) -> None:
    """Erase `ops` and then every op that fed only them, as far as nothing else uses it
    (ops without regions, not custom calls)."""
    pending = list(dict.fromkeys(ops))  # an op may be listed twice (a dot stacked from both sides)
    erased: set[ir.Operation] = set()
    while pending:
        op = pending.pop()
        if op in erased or any(next(iter(r.uses), None) is not None for r in op.results):
            continue
        feeders = [v.owner.operation for v in op.operands if isinstance(v, ir.OpResult)]
        erased.add(op)
        op.erase()
        pending.extend(f for f in feeders if not len(f.regions) and f.name != "stablehlo.custom_call"
                       and f not in pending and f not in erased)
