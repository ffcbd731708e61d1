"""Operands of an hlopt operation that jax's module computes from constants alone.

When jax lowers an hlopt operation, the operation is rewritten in a module of
its own, where its operands are arguments. Some of them are constants in
jax's module (the zero series and the identity directions of a Laplacian, for
example), and the passes produce far better code when they see them: `jet-
expand` drops the terms of a zero coefficient, canonicalization folds a one-hot
direction. `constant_slices` finds such operands and `constants_module` copies
the small computations that produce them into a function of their own, whose
ops `use_constants` moves to the top of the operation's module in place of the
arguments, as they are in the program.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlopt.passes.mlir import func, ir

# Ops a constant operand may be computed with: no regions, no effects, cheap to copy.
CONSTANT_OPS = frozenset({
    "stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
    "stablehlo.convert", "stablehlo.compare", "stablehlo.select", "stablehlo.add", "stablehlo.subtract",
    "stablehlo.multiply", "stablehlo.divide", "stablehlo.negate", "stablehlo.transpose",
    "stablehlo.concatenate", "stablehlo.slice", "stablehlo.and", "stablehlo.or", "stablehlo.not",
})
MAX_OPS = 64  # per operand: more is not a small constant computation
MAX_DENSE_ELEMENTS = 4096  # a non-splat literal larger than this stays an operand

CONSTANTS_FUNCTION = "hlopt_constant_operands"


def _small_literal(op: ir.Operation) -> bool:
    if math.prod(ir.RankedTensorType(op.result.type).shape) <= MAX_DENSE_ELEMENTS:
        return True
    try:
        return ir.DenseElementsAttr(op.attributes["value"]).is_splat
    except TypeError:  # the bindings read no complex literal: a large one stays an operand
        return False


def constant_slice(value: ir.Value) -> list[ir.Operation] | None:
    """The ops computing `value` from constants alone, producers first; None if it depends on anything else."""
    order: list[ir.Operation] = []

    def visit(v: ir.Value) -> bool:
        owner = v.owner
        if isinstance(owner, ir.Block):
            return False
        op = owner.operation
        if any(op == seen for seen in order):
            return True
        if op.name not in CONSTANT_OPS or len(op.regions) or (op.name == "stablehlo.constant"
                                                              and not _small_literal(op)):
            return False
        if not all(visit(operand) for operand in op.operands):
            return False
        order.append(op)
        return len(order) <= MAX_OPS

    return order if visit(value) else None


def constant_positions(operands: Sequence[ir.Value]) -> dict[int, list[ir.Operation]]:
    """Operand position -> the ops computing it, for the operands computed from constants alone."""
    found = {}
    for i, value in enumerate(operands):
        ops = constant_slice(value)
        if ops is not None:
            found[i] = ops
    return found


def constants_module(operands: Sequence[ir.Value], positions: dict[int, list[ir.Operation]]) -> ir.Module:
    """A module in the operands' context whose `@hlopt_constant_operands()` returns the operands at
    `positions`, in order, computed by copies of their ops."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        function = func.FuncOp(CONSTANTS_FUNCTION, ([], [operands[i].type for i in positions]))
    block = function.add_entry_block()
    copies: list[tuple[ir.Operation, ir.Operation]] = []

    def copied(v: ir.Value) -> ir.Value:
        result = ir.OpResult(v)
        original = result.owner.operation
        return next(new for old, new in copies if old == original).results[result.result_number]

    with ir.InsertionPoint(block):
        for ops in positions.values():
            for op in ops:
                if any(op == old for old, _ in copies):
                    continue
                new = op.clone()
                for j, operand in enumerate(op.operands):
                    new.operands[j] = copied(operand)
                copies.append((op, new))
        func.ReturnOp([copied(operands[i]) for i in positions])
    return module


def use_constants(module: ir.Module, constants: ir.Module, positions: Sequence[int]) -> None:
    """Move the ops of `constants`' function to the top of `module`'s `@main` and use their results
    instead of the arguments at `positions` (which stay, unused, so that the signature does not
    change): the passes see constants where jax's module has them."""
    (function,) = list(constants.body.operations)
    body = function.regions[0].blocks[0]
    main_block = ir.SymbolTable(module.operation)["main"].regions[0].blocks[0]
    first = main_block.operations[0]
    *ops, ret = list(body.operations)
    for op in ops:
        op.operation.move_before(first)
    for position, value in zip(positions, ret.operands):
        main_block.arguments[position].replace_all_uses_with(value)
