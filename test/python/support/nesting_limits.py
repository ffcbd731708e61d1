"""Deeply nested MLIR, and the search for the depth at which MLIR's parser (or XLA) kills the process.

`GENERATORS[kind](n)` is a module nested `n` levels deep in one way;
test_hostile_ir.py and the lit tests feed them to hlopt-opt
(`python -m support.nesting_limits --emit KIND N` prints one). Run it as a module to
measure where each kind crashes without hlopt's guard (each try in a fresh
process; takes minutes): `cd test/python && python -m support.nesting_limits [KIND ...]`.
compiler/parse_guard.py sets its limits below the depths it finds.
"""

from __future__ import annotations

import subprocess
import sys


def _alias_chain(first: str, step: str, use: str, n: int) -> str:
    return "\n".join([first.format(0)] + [step.format(i, i - 1) for i in range(1, n)] + [use.format(n - 1)])


def _nested_control_flow(op: str, n: int) -> str:
    """`n` stablehlo.while (or stablehlo.if) ops, each in the body of the one before."""
    lines = ["func.func @main(%p: tensor<i1>, %x: tensor<f32>) -> tensor<f32> {"]
    arg = "%x"
    for i in range(n):
        if op == "while":
            lines += [f'%v{i} = "stablehlo.while"({arg}) ({{', f"^bb0(%a{i}: tensor<f32>):",
                      f"%c{i} = stablehlo.compare LT, %a{i}, %a{i} : (tensor<f32>, tensor<f32>) -> tensor<i1>",
                      f"stablehlo.return %c{i} : tensor<i1>", "}, {", f"^bb0(%a{i}: tensor<f32>):"]
            arg = f"%a{i}"
        else:
            lines += [f'%v{i} = "stablehlo.if"(%p) ({{']
    lines += [f"%r = stablehlo.add {arg}, {arg} : tensor<f32>", "stablehlo.return %r : tensor<f32>"]
    for i in reversed(range(n)):
        if op == "while":
            lines += ["}) : (tensor<f32>) -> tensor<f32>"]
        else:
            lines += ["}, {", "stablehlo.return %x : tensor<f32>", "}) : (tensor<i1>) -> tensor<f32>"]
        lines += [f"{'return' if i == 0 else 'stablehlo.return'} %v{i} : tensor<f32>"]
    return "\n".join(lines + ["}"])


GENERATORS = {
    "tuple": lambda n: f"func.func @f(%a: {'tuple<' * n}f32{'>' * n}) {{\n  return\n}}",
    "function-type": lambda n: f"func.func @f(%a: {'(' * n}{') -> ()' * n}) {{\n  return\n}}",
    "array": lambda n: f"module attributes {{x.y = {'[' * n}1{']' * n}}} {{\n}}",
    "dictionary": lambda n: f"module attributes {{x.y = {'{a = ' * n}1{'}' * n}}} {{\n}}",
    "module": lambda n: "module {" * n + "}" * n,
    "generic-op": lambda n: '"builtin.module"() ({' * n + "\n^bb0:\n" + "}) : () -> ()" * n,
    "callsite-location": lambda n: 'module {\n} loc(' + "callsite(" * n + '"a"' + ' at "b")' * n + ")",
    "fused-location": lambda n: "module {\n} loc(" + "fused[" * n + '"a"' + "]" * n + ")",
    "array-aliases": lambda n: _alias_chain("#a0 = [1]", "#a{} = [#a{}]", "module attributes {{x.y = #a{}}} {{\n}}", n),
    "type-aliases": lambda n: _alias_chain("!t0 = tuple<f32>", "!t{} = tuple<!t{}>", "func.func @f(%a: !t{}) {{\n  return\n}}", n),
    "location-aliases": lambda n: _alias_chain('#loc0 = loc("a":1:1)', "#loc{} = loc(callsite(#loc{} at #loc0))",
                                               "module {{\n}} loc(#loc{})", n),
    "while": lambda n: _nested_control_flow("while", n),
    "if": lambda n: _nested_control_flow("if", n),
}

# Parse, print with locations, write bytecode (and compile through PJRT for control flow), unguarded.
_PROBE = """
import io, sys
from hlopt.passes.mlir import get_context, ir
with get_context():
    try:
        module = ir.Module.parse(sys.stdin.read())
    except ir.MLIRError:
        sys.exit(0)
    module.operation.get_asm(enable_debug_info=True)
    module.operation.write_bytecode(io.BytesIO())
    if {compile}:
        import jax
        from hlopt.compiler.program import module_to_bytecode
        from hlopt.runtime.pjrt import compile_module
        compile_module(module_to_bytecode(module), jax.devices()[:1], True)
"""


def crashes(kind: str, n: int) -> bool:
    """Whether the unguarded parser, printer, bytecode writer (or XLA) kill a process on `kind` at depth `n`."""
    probe = _PROBE.format(compile=kind in ("while", "if"))
    run = subprocess.run([sys.executable, "-c", probe], input=GENERATORS[kind](n), capture_output=True, text=True)
    return run.returncode < 0


def first_crash(kind: str, low: int = 10, high: int = 60_000) -> int | None:
    """The smallest depth (within 2%) at which `kind` crashes, or None if not even `high` does."""
    if not crashes(kind, high):
        return None
    while high - low > max(low // 50, 1):
        mid = (low + high) // 2
        low, high = (low, mid) if crashes(kind, mid) else (mid, high)
    return high


if __name__ == "__main__" and sys.argv[1:2] == ["--emit"]:
    print(GENERATORS[sys.argv[2]](int(sys.argv[3])))
elif __name__ == "__main__":
    for kind in sys.argv[1:] or GENERATORS:
        print(f"{kind:20s} crashes at depth {first_crash(kind, high=400 if kind in ('while', 'if') else 60_000)}",
              flush=True)
