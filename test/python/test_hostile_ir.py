"""hlopt-opt, `hlopt compile prog.mlir` and the parse helpers on hostile input.

Every case ends in one error line that starts `file:line:col: error:` (or
`hlopt-opt: error:` for a pipeline), exit status 1 and no traceback, within
a bounded time; never a crash, a hang or a silent success. Inputs that used
to kill the process run in a subprocess.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from nesting_limits import GENERATORS

import hlopt
from hlopt.cli.opt import main
from hlopt.compiler.parse_guard import (
    MAX_NESTING,
    MAX_RANK,
    MAX_REGION_NESTING,
    ParseError,
    check_text,
    parse_source,
)
from hlopt.compiler.pipeline import MAX_PIPELINE_ELEMENTS, PipelineError
from hlopt.passes.locations import ERROR_LINE_LIMIT

GOOD = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""

HLOPT_OPT = [sys.executable, "-c", "import sys; from hlopt.cli.opt import main; sys.exit(main())"]
HLOPT = [sys.executable, "-c", "import sys; from hlopt.cli.main import main; sys.exit(main())"]


def run_tool(command, path, *args, timeout=300):
    start = time.monotonic()
    run = subprocess.run([*command, str(path), *args], capture_output=True, text=True, timeout=timeout)
    return run, time.monotonic() - start


def assert_one_error_line(returncode, stderr, prefix):
    """Exit status 1 and one line on stderr that starts with `prefix` (a regular expression)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert returncode == 1, (returncode, stderr[-2000:])
    assert len(lines) == 1, stderr[-2000:]
    assert re.match(prefix, lines[0]), lines[0][:300]
    assert "Traceback" not in stderr and len(lines[0]) <= ERROR_LINE_LIMIT


# Depths at which the unguarded parser, printer or XLA killed the process (test/python/nesting_limits.py).
CRASHING_DEPTHS = {
    "tuple": 20_000, "function-type": 20_000, "array": 100_000, "dictionary": 100_000, "module": 5_000,
    "generic-op": 3_000, "callsite-location": 40_000, "fused-location": 40_000, "array-aliases": 30_000,
    "type-aliases": 30_000, "location-aliases": 30_000, "while": 250, "if": 250,
}


@pytest.mark.parametrize("kind", CRASHING_DEPTHS)
def test_deep_nesting_is_refused_before_parsing(tmp_path, kind):
    path = tmp_path / f"{kind}.mlir"
    path.write_text(GENERATORS[kind](CRASHING_DEPTHS[kind]))
    run, seconds = run_tool(HLOPT_OPT, path, "-p", "canonicalize", "--debug-info")
    assert_one_error_line(run.returncode, run.stderr, rf"{re.escape(str(path))}:\d+:\d+: error: (this alias holds )?more than \d+ ")
    assert seconds < 120


# (kind, depth) just inside the bounds: brackets for types, attributes and locations (two per location alias);
# braces for regions.
WITHIN_BOUNDS = [("tuple", MAX_NESTING - 2), ("function-type", MAX_NESTING - 2), ("array", MAX_NESTING - 2),
                 ("callsite-location", MAX_NESTING - 2), ("type-aliases", MAX_NESTING - 2),
                 ("location-aliases", MAX_NESTING // 2 - 2), ("dictionary", MAX_REGION_NESTING - 1),
                 ("generic-op", MAX_REGION_NESTING - 1), ("while", MAX_REGION_NESTING - 2)]


@pytest.mark.parametrize("kind,depth", WITHIN_BOUNDS, ids=[k for k, _ in WITHIN_BOUNDS])
def test_nesting_within_the_bounds_is_parsed_printed_and_rewritten(tmp_path, kind, depth):
    """The bounds leave a wide margin: the whole default pipeline and the printer survive them."""
    path = tmp_path / f"{kind}.mlir"
    path.write_text(GENERATORS[kind](depth))
    run, _ = run_tool(HLOPT_OPT, path, "-p", "hlopt-default", "--debug-info")
    assert run.returncode == 0, run.stderr[-2000:]


def test_control_flow_within_the_bound_compiles(tmp_path):
    """XLA:CPU died at 203 nested loops; the bound lets 98 through, and `hlopt compile` refuses 150."""
    deep, deeper = tmp_path / "deep.mlir", tmp_path / "deeper.mlir"
    deep.write_text(GENERATORS["while"](MAX_REGION_NESTING - 2))
    deeper.write_text(GENERATORS["while"](150))
    run, _ = run_tool(HLOPT, "compile", deep, "-o", str(tmp_path / "deep.hlx"))
    assert run.returncode == 0, run.stderr[-2000:]
    run, _ = run_tool(HLOPT, "compile", deeper, "-o", str(tmp_path / "deeper.hlx"))
    assert_one_error_line(run.returncode, run.stderr, rf"{re.escape(str(deeper))}:\d+:\d+: error: more than "
                                                      rf"{MAX_REGION_NESTING} nested regions")


def ranked(rank: int) -> str:
    dims = "x".join(["1"] * rank)
    return f"func.func @main(%a: tensor<{dims}xf32>) -> tensor<{dims}xf32> {{\n  return %a : tensor<{dims}xf32>\n}}\n"


def test_a_shape_of_huge_rank_is_refused_fast(tmp_path):
    """MLIR parses dimension lists in quadratic time: rank 100,000 took minutes."""
    path = tmp_path / "rank.mlir"
    path.write_text(ranked(100_000))
    run, seconds = run_tool(HLOPT_OPT, path, "-p", "cse", timeout=120)
    assert_one_error_line(run.returncode, run.stderr,
                          rf"{re.escape(str(path))}:1:\d+: error: a shape with more than {MAX_RANK} dimensions")
    assert seconds < 60


def test_ranks_up_to_the_bound_parse(tmp_path, capsys):
    assert run_opt(tmp_path, ranked(MAX_RANK)) == 0
    assert run_opt(tmp_path, ranked(MAX_RANK + 1)) == 1
    assert f"more than {MAX_RANK} dimensions" in capsys.readouterr().err
    dynamic = "x".join(["?"] * (MAX_RANK + 1))
    with pytest.raises(ParseError, match=f"more than {MAX_RANK} dimensions"):
        check_text(f"func.func private @f(tensor<{dynamic}xf32>)")
    for text in ("%x = xxxxxxxxxxxxxxxxxxxx" * 100, '"' + "1x" * 1000 + '"', "// " + "1x" * 1000):
        check_text(text)  # names, strings and comments hold no dimension list


def run_opt(tmp_path, text, *args):
    path = tmp_path / "in.mlir"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return main([str(path), *args])


def test_strings_and_comments_do_not_count_as_nesting(tmp_path, capsys):
    text = f'// {"(" * 5000}\nmodule attributes {{x.y = "{"[" * 5000}", x.z = "-> >= )))"}} {{\n}}\n'
    assert run_opt(tmp_path, text) == 0
    assert '"[[[' in capsys.readouterr().out


@pytest.mark.parametrize("data,message", [
    (b"ML\xefR\x00bytecode", "MLIR bytecode is not accepted here"),
    (b"module {\n}\n\xff\xfe", r"not UTF-8 text \(byte 11 is 0xff\)"),
])
def test_bytecode_and_binary_input_are_refused(tmp_path, capsys, data, message):
    assert run_opt(tmp_path, data) == 1
    err = capsys.readouterr().err
    assert_one_error_line(1, err, rf"{re.escape(str(tmp_path / 'in.mlir'))}: error: {message}")
    with pytest.raises(ParseError, match=message):
        parse_source(data, "prog.mlir")


def test_parse_source_reports_mlir_errors_with_the_file_name():
    with pytest.raises(ParseError, match=r"^prog.mlir:2:\d+: error: "):
        parse_source("func.func @f() {\n  %0 = stablehlo.add %a, %a : tensor<f32>\n}\n", "prog.mlir")
    with pytest.raises(ParseError, match=r"^prog.mlir:1:\d+: error: more than"):
        parse_source(GENERATORS["tuple"](MAX_NESTING + 1), "prog.mlir")


# --- errors that echo the input are capped -----------------------------------------------------

def test_an_error_echoing_a_huge_name_is_one_short_line(tmp_path, capfd):
    name = "f" * 200_000
    text = f"func.func @main() {{\n  func.call @{name}() : () -> ()\n  return\n}}\n"
    assert run_opt(tmp_path, text, "-p", "cse") == 1
    assert_one_error_line(1, capfd.readouterr().err, r".*in.mlir:2:\d+: error: .*fff \.\.\.\[\d+ characters\]\.\.\. fff")


def test_an_error_echoing_big_types_is_capped(tmp_path, capfd):
    dims = "x".join(["7"] * MAX_RANK)
    text = f"func.func @main(%a: tensor<{dims}xf32>) -> tensor<{dims}xi32> {{\n  return %a : tensor<{dims}xf32>\n}}\n"
    assert run_opt(tmp_path, text) == 1
    assert_one_error_line(1, capfd.readouterr().err, r".*in.mlir:2:\d+: error: ")


def test_a_pass_error_echoing_an_option_is_capped(tmp_path, capfd):
    assert run_opt(tmp_path, GOOD, "-p", f"jet-expand{{func={'g' * 50_000} order=2}}") == 1
    assert_one_error_line(1, capfd.readouterr().err, r".*error: ")


def test_api_errors_echoing_arguments_are_capped():
    compiled = hlopt.lower(lambda t: t[0] * 2, [np.float32(1)]).compile()
    with pytest.raises(TypeError) as info:
        compiled([np.float32(1)] * 20_000)
    assert "argument t has t[1], t[2]" in str(info.value) and len(str(info.value)) <= ERROR_LINE_LIMIT
    with pytest.raises(PipelineError) as info:
        hlopt.lower(lambda x: x, np.float32(1)).apply("no-such-pass" + "," * 10 + "x" * 50_000)
    assert len(str(info.value)) <= ERROR_LINE_LIMIT


# --- pipelines ---------------------------------------------------------------------------------

BAD_PIPELINES = [
    ("inline{default-pipeline=jet-expand}", "'jet-expand' is an hlopt pass or pipeline: it runs on the whole module"),
    ("inline{default-pipeline=no-such-pass}", "unknown pass or pipeline 'no-such-pass' in 'inline{"),
    # LLVM prints why an option value is bad (": for the --max-iterations option: ...") to stderr, except
    # after XLA set up its flags: then MLIR's exception names the value only
    ("inline{default-pipeline=canonicalize{max-iterations=x}}", "max-iterations=x"),
    ("inline{op-pipelines=func.func(jet-expand)}", "'jet-expand' is an hlopt pass"),
    ("func.func(lower-bcoo)", "'lower-bcoo' is an hlopt pass"),
    ("builtin.module(func.func(hlopt-default))", "'hlopt-default' is an hlopt pass or pipeline"),
    ("builtin.module(builtin.module(check-key-reuse))", "'check-key-reuse' is an hlopt pass"),
    ("canonicalize{max-iterations=99999999999999999999}", "max-iterations=99999999999999999999"),
    ("inline{inlining-threshold=-1}", "inlining-threshold=-1"),
    ("canonicalize{no-such-option=1}", "no such option no-such-option"),
    ("jet-expand{no-such-option=1}", "pass 'jet-expand' has no option 'no-such-option'"),
    ("jet-expand{func=main order=2 order=3}", "option 'order' is given twice"),
    ("lower-bcoo{x}", "option 'x' is not of the form key=value"),
    (",".join(["cse"] * 20_000),
     f"pipeline of {MAX_PIPELINE_ELEMENTS + 1} passes; hlopt runs at most {MAX_PIPELINE_ELEMENTS}"),
    (",".join(["hlopt-default"] * 200), f"runs at most {MAX_PIPELINE_ELEMENTS}"),
    (",", "empty entry 1 in pipeline ','"),
    ("cse,", "empty entry 2 in pipeline 'cse,'"),
    ("cse,,canonicalize", "empty entry 2 in pipeline 'cse,,canonicalize': remove the extra ','"),
    ("builtin.module(" * 40 + "cse" + ")" * 40, "pipeline nested more than 32 levels deep"),
    ("cse," + "x" * 200_000, "pipeline of 200004 characters; hlopt takes at most 100000"),
    ("builtin.module(cse", "unbalanced brackets"),
]


@pytest.mark.parametrize("pipeline,message", BAD_PIPELINES, ids=[p[:40] for p, _ in BAD_PIPELINES])
def test_every_pipeline_error_is_one_line_and_exit_1(tmp_path, capfd, pipeline, message):
    start = time.monotonic()
    assert run_opt(tmp_path, GOOD, "-p", pipeline) == 1
    captured = capfd.readouterr()  # file descriptors: what MLIR prints from C++ too
    assert_one_error_line(1, captured.err, r"hlopt-opt: error: ")
    assert message in captured.err
    assert captured.out == ""
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("pipeline", ["", "builtin.module()", "builtin.module(cse)", "inline{default-pipeline=}",
                                      "inline{default-pipeline=canonicalize}", "builtin.module(func.func(cse))",
                                      "any(canonicalize),builtin.module(builtin.module(cse))"])
def test_well_formed_pipelines_still_run(tmp_path, capfd, pipeline):
    assert run_opt(tmp_path, GOOD, "-p", pipeline) == 0
    captured = capfd.readouterr()
    assert "func.func @main" in captured.out and captured.err == ""


def test_the_api_raises_the_same_pipeline_errors():
    lowered = hlopt.lower(lambda x: x + 1, np.float32(1))
    with pytest.raises(PipelineError, match="'jet-expand' is an hlopt pass"):
        lowered.apply("inline{default-pipeline=jet-expand}")
    with pytest.raises(PipelineError, match="at most 1000"):
        lowered.compile(",".join(["cse"] * 2000))
