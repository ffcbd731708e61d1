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


def symbols_named(attr: ir.Attribute) -> list[str]:
    """The symbols an attribute refers to (the root of `@a::@b`), in arrays and dictionaries too."""
    found, stack = [], [attr]
    while stack:
        a = stack.pop()
        if isinstance(a, ir.FlatSymbolRefAttr):
            found.append(a.value)
        elif isinstance(a, ir.SymbolRefAttr):
            found.append(a.value[0])
        elif isinstance(a, ir.ArrayAttr):
            stack.extend(a)
        elif isinstance(a, ir.DictAttr):
            stack.extend(a[i].attr for i in range(len(a)))
    return found


def call_cycle(module: ir.Module) -> tuple[ir.Operation, str] | None:
    """An op that closes a cycle of calls among the module's functions, and what is wrong (naming the
    functions around the cycle); None if no function reaches itself.

    A call is any op in a function whose attributes name another function
    (`func.call`'s callee, `called_computations`, a composite's decomposition...).
    """
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                 if op.operation.name == "func.func"}
    calls: dict[str, list[tuple[str, ir.Operation]]] = {}
    for name, func_op in functions.items():
        calls[name] = [(callee, op) for op in walk_ops(func_op.operation) if op != func_op.operation
                       for i in range(len(op.attributes)) for callee in symbols_named(op.attributes[i].attr)
                       if callee in functions]
    done: set[str] = set()
    for root in calls:
        if root in done:
            continue
        path, on_path, stack = [root], {root}, [iter(calls[root])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                stack.pop()
                continue
            callee, op = step
            if callee in on_path:
                cycle = " -> ".join(f"@{name}" for name in path[path.index(callee):] + [callee])
                return op, (f"@{callee} calls itself ({cycle}); hlopt refuses recursive functions: the passes "
                            "and XLA expand every call, and a cycle would never end")
            if callee not in done:
                path.append(callee)
                on_path.add(callee)
                stack.append(iter(calls[callee]))
    return None
