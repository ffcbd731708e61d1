"""`xla-cpu-update-in-place`: a sum with an update written into zeros becomes that update
written into the other summand.

The cotangent of a `dynamic_slice` or a `gather` is a `dynamic_update_slice` or
a scatter-add into zeros; vjp-expand adds it to the other cotangents of the
same value, as in every step of a scan's backward loop. XLA:CPU
materializes the zeros and adds the whole array each time; the update applied
to the other summand touches only the updated window (`bench/xla_cpu_tuning.py`
measures it on a scan).
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.mlir import ir


def _update_into_zeros(v: ir.Value) -> ir.Operation | None:
    """The op of `v` when it is a dynamic_update_slice or a one-operand scatter-add into a zero
    constant, used only once; else None."""
    if not isinstance(v, ir.OpResult) or len(list(v.uses)) != 1:
        return None
    op = v.owner.operation
    if op.name == "stablehlo.dynamic_update_slice" or (
            op.name == "stablehlo.scatter" and len(op.operands) == 3 and builders.reducer_kind(op) == "stablehlo.add"):
        return op if builders.is_zero_constant(op.operands[0]) else None
    return None


def _update_in_place(op: ir.Operation) -> list[ir.Value] | None:
    """`a + u` (`op`) as the update `u` writes into zeros applied to `a`, or None."""
    for a, c in (tuple(op.operands), tuple(op.operands)[::-1]):
        into = _update_into_zeros(c)
        if into is None or into.operands[0].type != a.type:
            continue
        if into.name == "stablehlo.dynamic_update_slice":
            update, starts = into.operands[1], list(into.operands)[2:]
            old = builders.dynamic_slice(a, starts, builders.shape_of(update))
            return [builders.dynamic_update_slice(a, builders.add(old, update), starts)]
        new = into.clone(ip=ir.InsertionPoint.current)
        new.operands[0] = a
        return [new.results[0]]
    return None


class UpdateInPlace(PatternPass):
    """`a + (update into zeros)` as the update applied to `a`.

    Backend: XLA:CPU materializes the zeros an update is written into and adds the whole array;
    benchmark: `bench/xla_cpu_tuning.py --workloads loop_grad`.

    `a + u`, where `u` writes a window (dynamic_update_slice) or adds rows (scatter add)
    into zeros, becomes that update applied to `a`.

        %z = stablehlo.dynamic_update_slice %zeros, %u, %i : (tensor<8x4xf32>, tensor<1x4xf32>, ...)
        %s = stablehlo.add %a, %z : tensor<8x4xf32>

    becomes

        %w = stablehlo.dynamic_slice %a, %i, ..., sizes = [1, 4]
        %n = stablehlo.add %w, %u : tensor<1x4xf32>
        %s = stablehlo.dynamic_update_slice %a, %n, %i, ...
    """

    name: ClassVar[str] = "xla-cpu-update-in-place"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    PATTERNS: ClassVar[PatternSet] = PatternSet(Pattern("stablehlo.add", _update_in_place))
