"""jet-expand's work budget: nested high-order jets end in one line, exit 1, fast, with the bound stated.

Three nested order-64 `@hlopt.jet` annotations of `sin(x) * x` make a 7 KB
module whose expansion grows as K^2 per level; the order cap alone let it run
for minutes and die past 5 GB. It runs in a capped process (2 GiB, a timeout);
the control raises the budget and shows the harness sees the blow-up.
"""

from __future__ import annotations

import time

import pytest

from hlopt.passes.jet_expand import MAX_WORK
from sandbox import run_capped

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
    assert f"past the budget of {MAX_WORK} ops per module (ops x order^2 per jet function)" in lines[0]
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_the_budget_is_what_stops_it(tmp_path):
    """The control: with the budget lifted the same module is still expanding at the timeout (or dies)."""
    path = tmp_path / "nested.mlir"
    path.write_text(nested_jets(64, 2))
    script = ("import sys, hlopt.passes.jet_expand as j\nj.MAX_WORK = 1 << 62\n"
              "from hlopt.cli.opt import main\nsys.exit(main([sys.argv[1], '-p', 'jet-expand', '-o', '/dev/null']))")
    outcome = run_capped(["-c", script, str(path)], timeout=15, memory=2 << 30)
    assert outcome.timed_out or outcome.returncode != 0, outcome.describe()


def test_jets_within_the_budget_expand(tmp_path):
    path = tmp_path / "nested.mlir"
    path.write_text(nested_jets(16, 2))
    outcome = run_capped(["hlopt-opt", str(path), "-p", "jet-expand"], timeout=120, memory=2 << 30)
    assert outcome.returncode == 0, outcome.describe()
    assert "hlopt.jet" not in outcome.stdout and outcome.stdout.count("stablehlo.") > 10_000
