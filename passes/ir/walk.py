"""Finding operations: every op nested in another, in MLIR's walk order, optionally by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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


# The attributes by which an op calls functions. Only these are read: the bindings abort on
# reading some others (complex dense constants).
CALL_ATTRIBUTES = ("callee", "called_computations", "decomposition")
# The most ops a module's functions may hold once every call is inlined (XLA inlines them all):
# functions that each call the next twice double it per level.
MAX_INLINED_OPS = 1 << 22
# The longest chain of nested calls: XLA's compiler recurses once per level and died between
# 10,000 and 20,000 levels (functions each calling the next once); a fifth of the deepest that compiled.
MAX_CALL_DEPTH = 2000


@dataclasses.dataclass
class CallGraph:
    """The module's functions and the calls among them.

    A call is any op in a function that names another in a CALL_ATTRIBUTES
    attribute (`func.call`'s callee, a custom call's `called_computations`, a
    composite's decomposition): the references XLA and the passes follow.
    """

    functions: dict[str, ir.Operation]
    calls: dict[str, list[tuple[str, ir.Operation]]]  # caller -> (callee, the op that calls it), in order
    own_ops: dict[str, int]  # ops of each function (or their weights), calls counted as one

    @classmethod
    def of(cls, module: ir.Module | ir.Operation, weigh: Callable[[str], int] | None = None) -> "CallGraph":
        """The call graph of `module`'s functions; with `weigh`, an op of name N counts as `weigh(N)` ops."""
        body = module.body if isinstance(module, ir.Module) else module.regions[0].blocks[0]
        functions = {ir.StringAttr(op.attributes["sym_name"]).value: op.operation for op in body.operations
                     if op.operation.name == "func.func"}
        calls, own_ops = {}, {}
        for name, func_op in functions.items():
            ops = walk_ops(func_op)[:-1]  # post-order: the function itself comes last
            own_ops[name] = len(ops) if weigh is None else sum(weigh(op.name) for op in ops)
            calls[name] = [(callee, op) for op in ops for key in CALL_ATTRIBUTES if key in op.attributes
                           for callee in symbols_named(op.attributes[key]) if callee in functions]
        return cls(functions, calls, own_ops)

    def post_order(self) -> tuple[list[str], tuple[ir.Operation, str] | None]:
        """The functions, each after those it calls, and a cycle if there is one: the op that closes it and
        what is wrong (naming the functions around it). An explicit stack: call chains are as long as the input."""
        done: dict[str, None] = {}
        for root in self.calls:
            if root in done:
                continue
            path, on_path, stack = [root], {root}, [iter(self.calls[root])]
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    finished = path.pop()
                    on_path.discard(finished)
                    done[finished] = None
                    stack.pop()
                    continue
                callee, op = step
                if callee in on_path:
                    cycle = " -> ".join(f"@{name}" for name in path[path.index(callee):] + [callee])
                    return list(done), (op, f"@{callee} calls itself ({cycle}); hlopt refuses recursive functions: "
                                            "the passes and XLA expand every call, and a cycle would never end")
                if callee not in done:
                    path.append(callee)
                    on_path.add(callee)
                    stack.append(iter(self.calls[callee]))
        return list(done), None

    def inlined_ops(self, order: list[str]) -> dict[str, int]:
        """How many ops each function holds once every call in it is inlined; `order` is `post_order`'s, of a
        call graph without a cycle."""
        sizes: dict[str, int] = {}
        for name in order:
            sizes[name] = self.own_ops[name] + sum(sizes[callee] for callee, _ in self.calls[name])
        return sizes


def call_graph_problem(module: ir.Module) -> tuple[ir.Operation, str] | None:
    """What is wrong with the calls among the module's functions, and the op it is at: a function that calls
    itself, directly or through others, one that starts a chain of more than MAX_CALL_DEPTH nested calls, or
    one whose calls make it hold more than MAX_INLINED_OPS ops once they are inlined. None if nothing is."""
    graph = CallGraph.of(module)
    order, cycle = graph.post_order()
    if cycle is not None:
        return cycle
    depth: dict[str, int] = {}
    for name in order:
        depth[name] = 1 + max((depth[callee] for callee, _ in graph.calls[name]), default=0)
        if depth[name] > MAX_CALL_DEPTH:
            return graph.functions[name], (
                f"@{name} starts a chain of more than {MAX_CALL_DEPTH} nested calls, hlopt's bound: XLA's compiler "
                "recurses once per level of calls. Inline some of the functions, or loop (stablehlo.while)")
    sizes = graph.inlined_ops(order)
    over = [name for name in order if sizes[name] > MAX_INLINED_OPS and graph.calls[name]]
    if not over:
        return None
    name = min(over, key=sizes.__getitem__)  # where the repetition crosses the bound
    repeated = max(graph.calls[name], key=lambda call: sizes[call[0]])[0]
    return graph.functions[name], (
        f"@{name} holds about {sizes[name]:.3g} ops once its calls are inlined (it calls @{repeated}, of "
        f"{sizes[repeated]:.3g} ops inlined, and more), more than hlopt's bound of {MAX_INLINED_OPS}: XLA inlines "
        "every call. Call a function once per loop iteration (stablehlo.while) instead of repeating calls")


def annotation_bodies(module: ir.Operation) -> set[str]:
    """The functions an hlopt annotation's `called_computations` reach (through calls and further annotations).

    Passes that substitute a platform's formulation leave these alone: the passes that expand
    those annotations read plain StableHLO.
    """
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in walk_ops(module, "func.func")}
    pending = [name for op in walk_ops(module, "stablehlo.custom_call")
               if (call_target(op) or "").startswith("hlopt.") and "called_computations" in op.attributes
               for name in symbols_named(op.attributes["called_computations"])]
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
                pending.extend(symbols_named(op.attributes["called_computations"]))
    return reached


def enclosing_function(op: ir.Operation) -> str | None:
    """The symbol of the `func.func` that holds `op`; None outside any function."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return None if parent is None else ir.StringAttr(parent.attributes["sym_name"]).value
