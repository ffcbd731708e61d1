"""jet-expand's work budget: nested high-order jets end in one line, exit 1, fast, with the bound stated.

Three nested order-64 `@hlopt.jet` annotations of `sin(x) * x` make a 7 KB
module whose expansion grows as K^2 per level; the order cap alone let it run
for minutes and die past 5 GB. It runs in a capped process (2 GiB, a timeout);
the control raises the budget and shows the harness sees the blow-up. Each
rule is charged by its family's growth in K (jet_expand.rule_growth), which is
checked here against the ops jet-expand builds for every elementwise op: 255
lgamma, power or atan2 ops at order 64 passed an ops x K^2 budget and built
20 times that.
"""

from __future__ import annotations

import time

import pytest

from hlopt.passes.optable import derivatives
from hlopt.passes.ir.builders import nested_ops
from hlopt.passes.autodiff.jet_expand import MAX_WORK, rule_growth
from hlopt.passes.autodiff.jet_rules import CUBIC, LINEAR, QUADRATIC
from hlopt.passes.mlir import get_context, ir
from hlopt.compiler.pipeline import run_pipeline

from support.sandbox import run_capped

T = "tensor<f32>"


def nested_jets(order: int, levels: int) -> str:
    """`@f{levels}`: the order-`order` coefficient of the jet of `@f{levels-1}`, ..., of `sin(x) * x`."""
    out = [f"func.func private @f0(%x: {T}) -> {T} {{\n  %0 = stablehlo.sine %x : {T}\n"
           f"  %1 = stablehlo.multiply %0, %x : {T}\n  return %1 : {T}\n}}"]
    for i in range(1, levels + 1):
        operands, types = ", ".join(["%x"] * (order + 1)), ", ".join([T] * (order + 1))
        out.append(f"func.func private @f{i}(%x: {T}) -> {T} {{\n  %r:{order + 1} = stablehlo.custom_call "
                   f"@hlopt.jet({operands}) {{api_version = 4 : i32, backend_config = {{order = {order} : i64}}, "
                   f"called_computations = [@f{i - 1}]}} : ({types}) -> ({types})\n  return %r#{order} : {T}\n}}")
    out.append(f"func.func public @main(%x: {T}) -> {T} {{\n  %0 = func.call @f{levels}(%x) : ({T}) -> {T}\n"
               f"  return %0 : {T}\n}}")
    return "\n".join(out)


@pytest.mark.parametrize("pipeline", ["jet-expand", "hlopt-default"])
def test_nested_order_64_jets_end_fast_in_one_line(tmp_path, pipeline):
    path = tmp_path / "nested.mlir"
    path.write_text(nested_jets(64, 3))
    assert path.stat().st_size < 8000
    start = time.perf_counter()
    outcome = run_capped(["hlopt-opt", str(path), "-p", pipeline], timeout=60, memory=2 << 30)
    elapsed = time.perf_counter() - start
    assert not outcome.timed_out and outcome.returncode == 1, outcome.describe()
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in outcome.stderr, outcome.stderr
    assert f"nested.mlir:7:11: error: jet-expand: the order-64 jet of @f0_jet64" in lines[0]
    assert f"past the budget of {MAX_WORK} ops per module; lower the order" in lines[0]
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_the_budget_is_what_stops_it(tmp_path):
    """The control: with the budget lifted the same module is still expanding at the timeout (or dies)."""
    path = tmp_path / "nested.mlir"
    path.write_text(nested_jets(64, 2))
    script = ("import sys, hlopt.passes.autodiff.jet_expand as j\nj.MAX_WORK = 1 << 62\n"
              "from hlopt.cli.opt import main\nsys.exit(main([sys.argv[1], '-p', 'jet-expand', '-o', '/dev/null']))")
    outcome = run_capped(["-c", script, str(path)], timeout=15, memory=2 << 30)
    assert outcome.timed_out or outcome.returncode != 0, outcome.describe()


def test_jets_within_the_budget_expand(tmp_path):
    path = tmp_path / "nested.mlir"
    path.write_text(nested_jets(16, 2))
    outcome = run_capped(["hlopt-opt", str(path), "-p", "jet-expand"], timeout=120, memory=2 << 30)
    assert outcome.returncode == 0, outcome.describe()
    assert "hlopt.jet" not in outcome.stdout and outcome.stdout.count("stablehlo.") > 10_000


BINARY = ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.atan2",
          "stablehlo.power", "stablehlo.remainder", "stablehlo.maximum", "stablehlo.minimum")
UNARY = tuple(sorted(set(derivatives.DERIVATIVES) - {"chlo.polygamma"} - set(BINARY))) + (
    "chlo.square", "stablehlo.abs", "stablehlo.negate", "stablehlo.convert", "stablehlo.floor", "stablehlo.sign")


def ops_built(name: str, order: int) -> int:
    """The ops of the order-`order` jet function of one `name` op."""
    operands, types = ("%x, %y", f"{T}, {T}") if name in BINARY else ("%x", T)
    text = (f'func.func public @f(%x: {T}, %y: {T}) -> {T} {{\n  %0 = "{name}"({operands}) : ({types}) -> {T}\n'
            f"  return %0 : {T}\n}}")
    with get_context():
        module = ir.Module.parse(text)
        run_pipeline(module, f"jet-expand{{func=f order={order}}}")
        (jet,) = [op for op in module.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == f"f_jet{order}"]
        return len(nested_ops(jet.operation))


@pytest.mark.parametrize("name", BINARY + UNARY)
def test_each_rule_is_charged_at_least_what_it_builds(name):
    """The charge bounds the ops built from above, and not loosely: within 12 times at order 24 (but for
    abs, charged for complex operands, whose rule is a square root)."""
    growth = rule_growth(name)
    for order in (2, 24):
        built = ops_built(name, order)
        assert built <= growth.ops(order), (name, order, built, growth.ops(order))
    assert growth.ops(24) <= 12 * built or name == "stablehlo.abs", (name, built, growth)


def test_the_families_grow_as_measured():
    assert rule_growth("stablehlo.negate") == LINEAR and rule_growth("stablehlo.sine") == QUADRATIC
    assert rule_growth("chlo.lgamma") == rule_growth("chlo.digamma") == rule_growth("stablehlo.power") == CUBIC
    # the cubic ones grow faster than K^2 between orders 8 and 16, the others no faster
    assert ops_built("chlo.lgamma", 16) > 6 * ops_built("chlo.lgamma", 8)
    assert ops_built("stablehlo.atan2", 16) < 4 * ops_built("stablehlo.atan2", 8)


def ops_chain(name: str, count: int, order: int) -> str:
    """@main: the order-`order` jet of `count` `name` ops applied one after another."""
    binary = name in BINARY
    lines = [f"func.func private @f(%x: {T}) -> {T} {{"]
    previous = "%x"
    for i in range(count):
        lines.append(f'  %v{i} = "{name}"({previous}{", %x" if binary else ""}) : ({T}{", " + T if binary else ""}) -> {T}')
        previous = f"%v{i}"
    operands, types = ", ".join(["%x"] * (order + 1)), ", ".join([T] * (order + 1))
    lines += [f"  return {previous} : {T}", "}",
              f"func.func public @main(%x: {T}) -> {T} {{\n  %r:{order + 1} = stablehlo.custom_call @hlopt.jet("
              f"{operands}) {{api_version = 4 : i32, backend_config = {{order = {order} : i64}}, called_computations "
              f"= [@f]}} : ({types}) -> ({types})\n  return %r#{order} : {T}\n}}"]
    return "\n".join(lines)


@pytest.mark.parametrize("name", ["chlo.lgamma", "stablehlo.power", "stablehlo.atan2"])
def test_255_costly_ops_at_order_64_are_refused_fast(tmp_path, name):
    """These passed the ops x K^2 budget (255 x 64^2 < 2^20) and then ran out of memory or time."""
    path = tmp_path / "ops.mlir"
    path.write_text(ops_chain(name, 255, 64))
    start = time.perf_counter()
    outcome = run_capped(["hlopt-opt", str(path), "-p", "hlopt-default"], timeout=60, memory=2 << 30)
    lines = outcome.stderr.strip().splitlines()
    assert outcome.returncode == 1 and len(lines) == 1 and "Traceback" not in outcome.stderr, outcome.describe()
    assert lines[0].startswith(f"{path}:260:11: error: jet-expand: the order-64 jet of @f would build about ")
    assert f"past the budget of {MAX_WORK} ops per module" in lines[0]
    assert time.perf_counter() - start < 30
