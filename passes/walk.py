"""Finding operations: every op nested in another, in MLIR's walk order, optionally by name."""

from __future__ import annotations

from hlopt.passes.mlir import ir


def walk_ops(root: ir.Operation, *names: str) -> list[ir.Operation]:
    """The operations nested in `root` (`root` included), in MLIR's walk order (post-order).

    With `names`, only operations of those names. The list is taken before the
    caller changes anything, so the ops may be rewritten or erased in a loop over it.
    """
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if not names or op.name in names:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def call_target(op: ir.Operation) -> str | None:
    """The `call_target_name` of a `stablehlo.custom_call`, None for any other op."""
    if op.name != "stablehlo.custom_call":
        return None
    return ir.StringAttr(op.attributes["call_target_name"]).value


def custom_calls(root: ir.Operation, target: str) -> list[ir.Operation]:
    """The `stablehlo.custom_call @target` operations nested in `root`, in walk order."""
    return [op for op in walk_ops(root, "stablehlo.custom_call") if call_target(op) == target]


def custom_calls_once(func_op: ir.Operation, target: str, seen: set[str]) -> list[ir.Operation]:
    """The `stablehlo.custom_call @target` operations of `func_op`, or none if its symbol is in `seen`
    (a function reached again through another caller); the symbol is added to `seen`."""
    name = ir.StringAttr(func_op.attributes["sym_name"]).value
    if name in seen:
        return []
    seen.add(name)
    return custom_calls(func_op, target)


def callee_of(op: ir.Operation) -> str:
    """The symbol a `func.call` calls."""
    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def annotation_bodies(module: ir.Operation) -> set[str]:
    """The functions an hlopt annotation's `called_computations` reach (through calls and further annotations).

    Passes that substitute a platform's formulation leave these alone: the passes that expand
    those annotations read plain StableHLO.
    """
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in walk_ops(module, "func.func")}
    pending = [name for op in walk_ops(module, "stablehlo.custom_call")
               if (call_target(op) or "").startswith("hlopt.") and "called_computations" in op.attributes
               for name in _symbols(op.attributes["called_computations"])]
    reached: set[str] = set()
    while pending:
        name = pending.pop()
        if name in reached or name not in funcs:
            continue
        reached.add(name)
        for op in walk_ops(funcs[name], "func.call", "stablehlo.custom_call"):
            if op.name == "func.call":
                pending.append(callee_of(op))
            elif "called_computations" in op.attributes:
                pending.extend(_symbols(op.attributes["called_computations"]))
    return reached


def _symbols(attr: ir.Attribute) -> list[str]:
    return [ir.FlatSymbolRefAttr(a).value for a in ir.ArrayAttr(attr)]


def enclosing_function(op: ir.Operation) -> str | None:
    """The symbol of the `func.func` that holds `op`; None outside any function."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return None if parent is None else ir.StringAttr(parent.attributes["sym_name"]).value
