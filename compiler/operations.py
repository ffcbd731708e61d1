"""Each hlopt operation of a module, made plain in a module of its own.

`hlopt-default` makes a program's hlopt operations plain StableHLO one at a
time, as the plain-JAX lowering rule makes the one operation jax hands it:
each operation of the program's own code (an annotation outside every other
annotation's body) is copied into a module of its own, with the functions it
calls and those of its operands that the program computes from constants
alone, returning the results the program reads; the pipeline runs there; the
operation becomes a call of the result. So the passes, tuning included, see the
same code whichever jit compiles the program, and the program's own code
reaches XLA as under `jax.jit`.

`hlopt.custom_partitioning` is the exception (`registry.WHOLE_MODULE_LOWERINGS`):
its lowering propagates shardings through the whole program, and runs on it.
"""

from __future__ import annotations

from collections.abc import Callable

from hlopt.compiler.constant_operands import constant_positions, constants_module, use_constants
from hlopt.passes.mlir import func, ir
from hlopt.passes.base import lowering_pass_for
from hlopt.passes.registry import WHOLE_MODULE_LOWERINGS
from hlopt.passes.ir.walk import CALL_ATTRIBUTES, CallGraph, call_target, symbols_named, walk_ops

# The name, in the module of one operation, of the function computing it.
OPERATION_FUNCTION = "main"


def _annotation(op: ir.Operation) -> str | None:
    """The pass lowering `op`, if it is an hlopt annotation (else None)."""
    target = call_target(op)
    return None if target is None else lowering_pass_for(target)


def _program_functions(graph: CallGraph) -> list[str]:
    """The functions of the program's own code: the public ones and what they call, not counting what
    an annotation calls (its body, which its lowering reads)."""
    public = [name for name, op in graph.functions.items() if "sym_visibility" not in op.attributes
              or ir.StringAttr(op.attributes["sym_visibility"]).value == "public"]
    reached: dict[str, None] = {}
    pending = list(public)
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached[name] = None
        pending.extend(callee for callee, op in graph.calls[name] if _annotation(op) is None)
    return list(reached)


def _body(module: ir.Operation) -> ir.Block:
    return module.regions[0].blocks[0]


def program_operations(module: ir.Operation) -> list[ir.Operation]:
    """The hlopt operations of the program's own code (`module`: a `builtin.module`) that are made
    plain one by one."""
    graph = CallGraph.of(module)
    return [op for name in _program_functions(graph) for op in walk_ops(graph.functions[name], "stablehlo.custom_call")
            if _annotation(op) not in (None, *WHOLE_MODULE_LOWERINGS)]


def _called(op: ir.Operation, graph: CallGraph) -> list[str]:
    """The functions `op` calls, directly or through others, in the module's order (the passes
    expand nested annotations in it)."""
    pending = [callee for key in CALL_ATTRIBUTES if key in op.attributes
               for callee in symbols_named(op.attributes[key]) if callee in graph.functions]
    reached: dict[str, None] = {}
    while pending:
        name = pending.pop()
        if name not in reached:
            reached[name] = None
            pending.extend(callee for callee, _ in graph.calls[name])
    return [name for name in graph.functions if name in reached]


def read_results(op: ir.Operation) -> list[ir.Value]:
    """The results of `op` that the program reads: those its module returns (jax's lowering rule
    module returns only those jax's dead-code elimination keeps)."""
    return [result for result in op.results if any(True for _ in result.uses)]


def operation_module(op: ir.Operation, module: ir.Operation, graph: CallGraph) -> ir.Module:
    """A module whose public `@main` computes the results the program reads of the annotation `op`
    (`read_results`) from its operands, with copies of the functions it calls and of `module`'s
    meshes, and with the operands computed from constants alone computed there from those constants
    (`use_constants`)."""
    operands = list(op.operands)
    read = [result.result_number for result in read_results(op)]
    with ir.Location.unknown():
        isolated = ir.Module.create()
        with ir.InsertionPoint(isolated.body):
            for top in _body(module).operations:
                if top.operation.name == "sdy.mesh":
                    top.operation.clone()
            for name in _called(op, graph):
                graph.functions[name].clone()
            main = func.FuncOp(OPERATION_FUNCTION, ([v.type for v in operands], [op.results[i].type for i in read]))
        block = main.add_entry_block()
        with ir.InsertionPoint(block):
            copy = op.clone()
            for i, argument in enumerate(block.arguments):
                copy.operands[i] = argument
            func.ReturnOp([copy.results[i] for i in read])
        positions = constant_positions(operands)
        if positions:
            use_constants(isolated, constants_module(operands, positions), list(positions))
    return isolated


def _fresh_name(taken: ir.SymbolTable, base: str) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def replace_with_call(op: ir.Operation, plain: ir.Module, module: ir.Operation) -> None:
    """Move `plain`'s functions (the operation made plain) into `module`, renamed apart and private,
    and replace the annotation `op` by a call of its `@main` (`operation_module`'s). `plain` is consumed; its module
    attributes (an XLA option a pass records) are not moved, as jax's module has no place for them."""
    table = ir.SymbolTable(module)
    # Named after the annotation without hlopt's prefix: `hlopt_` names hlopt's CPU kernels, and a program
    # naming one has them registered before it compiles (runtime/pjrt.py's prepare_runtimes).
    base = (call_target(op) or "operation").removeprefix("hlopt.").replace(".", "_")
    entry = None
    for top in list(plain.body.operations):
        if top.operation.name != "func.func":
            continue  # a mesh: the module has it
        old = ir.StringAttr(top.attributes["sym_name"]).value
        new = _fresh_name(table, base if old == OPERATION_FUNCTION else f"{base}_{old}")
        ir.SymbolTable.replace_all_symbol_uses(old, new, plain.operation)
        top.attributes["sym_name"] = ir.StringAttr.get(new)
        top.attributes["sym_visibility"] = ir.StringAttr.get("private")
        _body(module).append(top.operation)
        table.insert(top.operation)
        if old == OPERATION_FUNCTION:
            entry = new
    read = read_results(op)
    with op.location, ir.InsertionPoint(op):
        call = func.CallOp([r.type for r in read], ir.FlatSymbolRefAttr.get(entry), list(op.operands))
    for old_result, new_result in zip(read, call.results):
        old_result.replace_all_uses_with(new_result)
    op.erase()


def lower_operations(module: ir.Operation, lower: Callable[[ir.Module], None]) -> None:
    """Make each of `module`'s own hlopt operations (`program_operations`) plain: `lower` rewrites the
    module of one operation (`operation_module`) in place, which then replaces it (`replace_with_call`)."""
    graph = CallGraph.of(module)
    for op in program_operations(module):
        isolated = operation_module(op, module, graph)
        lower(isolated)
        replace_with_call(op, isolated, module)
