"""hlopt-opt, `hlopt compile prog.mlir` and the parse helpers on hostile input.

Every case ends in one error line that starts `file:line:col: error:` (or
`hlopt-opt: error:` for a pipeline), exit status 1 and no traceback, within
a bounded time; never a crash, a hang or a silent success. Inputs that used
to kill the process run in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import hlopt
from hlopt.cli.main import main as hlopt_main
from hlopt.cli.opt import main
from hlopt.compiler.parse_guard import (
    MAX_NESTING,
    MAX_RANK,
    MAX_SOURCE_BYTES,
    MAX_REGION_NESTING,
    ParseError,
    check_text,
    parse_source,
)
from hlopt.compiler.pipeline import MAX_PIPELINE_ELEMENTS, PipelineError
from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered
from hlopt.passes.ir.locations import ERROR_LINE_LIMIT
from hlopt.passes.mlir import get_context, ir, serialize_portable_artifact
from hlopt.passes.ir.walk import MAX_CALL_DEPTH
from hlopt.runtime.compile import compile_lowered

from support import TESTS, forge, script
from support.nesting_limits import GENERATORS
from support.sandbox import run_capped, run_forked

GOOD = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""

F32 = "tensor<f32>"
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


# Depths at which the unguarded parser, printer or XLA killed the process (test/python/support/nesting_limits.py).
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
    # a pass pipeline adds its passes unchecked: nested under an operation, MLIR's pass manager aborted
    ("canonicalize(sdy-propagation-pipeline)", "'sdy-propagation-pipeline' is a pass pipeline: hlopt runs one only "
                                               "at the module level, not nested under 'canonicalize'"),
    ("func.func(sdy-propagation-pipeline)", "not nested under 'func.func'"),
    ("any(sdy-propagation-pipeline)", "not nested under 'any'"),
    ("builtin.module(x.y(cse,sdy-propagation-pipeline))", "not nested under 'x.y'"),
    ("inline{default-pipeline=sdy-propagation-pipeline}", "cannot be given in the options"),
    ("inline{op-pipelines=func.func(sdy-propagation-pipeline)}", "cannot be given in the options"),
    ("chlo-legalize-to-stablehlo", "restricted to 'func.func'"),
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
                                      "sdy-propagation-pipeline", "builtin.module(sdy-propagation-pipeline),cse",
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


def test_a_nested_pass_pipeline_aborted_mlir(tmp_path):
    """The control: MLIR's own parser, given the nested pipeline hlopt now refuses, kills the process."""
    script = ("from hlopt.passes.mlir import get_context, passmanager\nwith get_context():\n"
              "    passmanager.PassManager.parse('builtin.module(canonicalize(sdy-propagation-pipeline))')")
    assert run_capped(["-c", script], timeout=120).signal == "SIGABRT"


def test_shardy_passes_need_an_entry_function(tmp_path, capfd):
    """Shardy's passes look up the module's entry and abort without one (found by the text fuzzer)."""
    for text in ("module {\n}\n", "func.func private @main() {\n  return\n}\n"):
        assert run_opt(tmp_path, text, "-p", "cse,sdy-propagation-pipeline") == 1
        assert_one_error_line(1, capfd.readouterr().err, "hlopt-opt: error: 'sdy-propagation-pipeline' needs an "
                                                         "entry function, a public func.func")
    control = run_capped(["-c", "from hlopt.passes.mlir import get_context, ir, passmanager\nwith get_context():\n"
                                "    passmanager.PassManager.parse('builtin.module(sdy-propagation-pipeline)')"
                                ".run(ir.Module.parse('module {}').operation)"], timeout=120)
    assert control.signal == "SIGABRT", control.describe()


# --- every line terminator MLIR's lexer accepts ------------------------------------------------

def carriage_returns(text: str) -> str:
    """`text` as one line for a reader that ends lines at '\n' only: MLIR ends a comment at '\r' too."""
    return "//\r" + text.replace("\n", "\r")


def test_a_comment_ended_by_a_carriage_return_hides_nothing(tmp_path):
    """The scan ended comments at '\n' only: after `//\r` it skipped the whole module, and MLIR parsed it."""
    cases = [(HLOPT_OPT, "array.mlir", carriage_returns(GENERATORS["array"](20_000)), "more than 512 levels"),
             (HLOPT, "if.mlir", carriage_returns(GENERATORS["if"](300)), "more than 100 nested regions"),
             (HLOPT_OPT, "rank.mlir", carriage_returns(ranked(60_000)), "a shape with more than 256 dimensions")]
    for command, name, text, message in cases:
        path = tmp_path / name
        path.write_bytes(text.encode())
        argv = [*command, "compile", str(path), "-o", str(tmp_path / "out.hlx")] if command is HLOPT else \
            [*command, str(path)]
        start = time.monotonic()
        outcome = run_forked(argv, timeout=120)
        assert_one_error_line(outcome.returncode, outcome.stderr, rf"{re.escape(str(path))}:1:\d+: error: {message}")
        assert time.monotonic() - start < 60
    # the control: MLIR's parser, unguarded, dies on the first
    probe = "import sys\nfrom hlopt.passes.mlir import get_context, ir\nwith get_context():\n    ir.Module.parse(sys.stdin.read())"
    control = run_capped(["-c", probe], input=cases[0][2].encode(), timeout=120)
    assert control.signal == "SIGSEGV", control.describe()


@pytest.mark.parametrize("separator", [" x ", "x//c\r", "x\r", "x // c\n"])
def test_dimension_lists_are_read_as_mlir_lexes_them(separator):
    """Whitespace and comments between a list's tokens: MLIR parses the list, so the rank bound counts it."""
    with get_context():
        assert ir.RankedTensorType(ir.Type.parse(f"tensor<2{separator}3{separator}f32>")).shape == [2, 3]
    check_text(f"func.func private @f(tensor<{separator.join(['1'] * MAX_RANK)}{separator}f32>)")
    with pytest.raises(ParseError, match=f"more than {MAX_RANK} dimensions"):
        check_text(f"func.func private @f(tensor<{separator.join(['1'] * (MAX_RANK + 1))}{separator}f32>)")
    with pytest.raises(ParseError, match=f"more than {MAX_RANK} dimensions"):
        check_text(f"func.func private @f(vector<{separator.join(['[1]'] * (MAX_RANK + 1))}{separator}f32>)")


def test_a_60000_dimension_list_is_refused_in_linear_time():
    for separator in ("x", " x ", "x//\r"):
        start = time.perf_counter()
        with pytest.raises(ParseError, match=f"more than {MAX_RANK} dimensions"):
            check_text(carriage_returns(f"func.func private @f(tensor<{separator.join(['1'] * 60_000)}xf32>)"))
        assert time.perf_counter() - start < 5


# --- calls: cycles and repetition ----------------------------------------------------------------

RECURSIVE = f"""func.func @main(%x: {F32}) -> {F32} {{
  %0 = func.call @f(%x) : ({F32}) -> {F32}
  return %0 : {F32}
}}
func.func private @f(%x: {F32}) -> {F32} {{
  %0 = func.call @g(%x) : ({F32}) -> {F32}
  return %0 : {F32}
}}
func.func private @g(%x: {F32}) -> {F32} {{
  %0 = func.call @f(%x) : ({F32}) -> {F32}
  return %0 : {F32}
}}
"""
SELF_JET = f"""func.func @main(%x: {F32}) -> {F32} {{
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x) {{api_version = 4 : i32, backend_config = {{order = 1 : i64}}, called_computations = [@main]}} : ({F32}, {F32}) -> ({F32}, {F32})
  return %r#1 : {F32}
}}
"""
CYCLE = r"error: @f calls itself \(@f -> @g -> @f\); hlopt refuses recursive functions"


def doubling_chain(levels: int, annotate: str = "hlopt.vjp") -> str:
    """@main: the vjp (or plain call) of @c{levels}, each @c{i} calling @c{i-1} twice: 2^levels sines inlined."""
    out = [f"func.func private @c0(%x: {F32}) -> {F32} {{\n  %0 = stablehlo.sine %x : {F32}\n  return %0 : {F32}\n}}"]
    out += [f"func.func private @c{i}(%x: {F32}) -> {F32} {{\n  %0 = func.call @c{i - 1}(%x) : ({F32}) -> {F32}\n"
            f"  %1 = func.call @c{i - 1}(%0) : ({F32}) -> {F32}\n  return %1 : {F32}\n}}" for i in range(1, levels + 1)]
    out.append(f"func.func public @main(%x: {F32}, %c: {F32}) -> {F32} {{\n  %0 = stablehlo.custom_call @{annotate}(%x, %c) "
               f"{{api_version = 4 : i32, backend_config = {{}}, called_computations = [@c{levels}]}} : ({F32}, {F32}) "
               f"-> {F32}\n  return %0 : {F32}\n}}")
    return "\n".join(out)


def test_recursion_is_refused_before_any_pass_or_compile(tmp_path, capfd):
    path = tmp_path / "rec.mlir"
    path.write_text(RECURSIVE)
    for argv in ([*HLOPT, "compile", str(path), "-o", str(tmp_path / "r.hlx")],
                 [*HLOPT, "compile", str(path), "--pipeline", "", "-o", str(tmp_path / "r.hlx")]):
        outcome = run_forked(argv, timeout=120)
        assert_one_error_line(outcome.returncode, outcome.stderr, rf"{re.escape(str(path))}:10:8: {CYCLE}")
    assert main([str(path), "-p", "hlopt-default"]) == 1
    assert_one_error_line(1, capfd.readouterr().err, rf"{re.escape(str(path))}:10:8: {CYCLE}")
    assert run_opt(tmp_path, SELF_JET, "-p", "jet-expand") == 1
    assert_one_error_line(1, capfd.readouterr().err, r".*in.mlir:2:\d+: error: @main calls itself \(@main -> @main\)")
    lowered = Lowered(parse_module(RECURSIVE), hlopt.lower(lambda x: x, np.float32(1)).signature, backend=compile_lowered)
    for pipeline in ("", "cse"):
        with pytest.raises(PipelineError, match=CYCLE):
            lowered.compile(pipeline)


def call_chain(levels: int) -> str:
    """@main calling @f{levels}, each @f{i} calling @f{i-1} once."""
    out = [f"func.func private @f0(%x: {F32}) -> {F32} {{\n  %0 = stablehlo.sine %x : {F32}\n  return %0 : {F32}\n}}"]
    out += [f"func.func private @f{i}(%x: {F32}) -> {F32} {{\n  %0 = func.call @f{i - 1}(%x) : ({F32}) -> {F32}\n"
            f"  return %0 : {F32}\n}}" for i in range(1, levels + 1)]
    out.append(f"func.func @main(%x: {F32}) -> {F32} {{\n  %0 = func.call @f{levels}(%x) : ({F32}) -> {F32}\n"
               f"  return %0 : {F32}\n}}")
    return "\n".join(out)


def test_a_deep_call_chain_is_refused(tmp_path):
    """20,000 functions each calling the next: XLA's compiler recursed per level and died."""
    path = tmp_path / "deep.mlir"
    path.write_text(call_chain(20_000))
    outcome = run_forked([*HLOPT, "compile", str(path), "--pipeline", "", "-o", str(tmp_path / "d.hlx")], timeout=120)
    assert_one_error_line(outcome.returncode, outcome.stderr, rf"{re.escape(str(path))}:\d+:1: error: @f2000 starts a "
                                                              rf"chain of more than {MAX_CALL_DEPTH} nested calls")


@pytest.mark.parametrize("text", [RECURSIVE, call_chain(20_000)], ids=["recursion", "deep-chain"])
def test_unchecked_calls_crashed_xla(text):
    """The controls: XLA's compiler, given these modules unchecked, dies."""
    script = ("import sys, jax\nfrom hlopt.compiler.program import module_to_bytecode, parse_module\n"
              "from hlopt.runtime.pjrt import compile_module\n"
              "compile_module(module_to_bytecode(parse_module(sys.stdin.read())), jax.devices()[:1], True)")
    outcome = run_capped(["-c", script], input=text.encode(), timeout=200)
    assert outcome.signal is not None, outcome.describe()


def test_a_forged_recursive_file_fails_the_portable_checks(tmp_path):
    """Signed by another key, it is compiled only with trust='portable', after the checks: inspect, run
    and load all refuse it (they segfaulted after inspect said it passed)."""
    manifest, sections = forge.unpack(hlopt.lower(lambda x: x, np.float32(1)).compile().serialize())
    artifact = forge.retag(serialize_portable_artifact(parse_module(RECURSIVE)), manifest["signature"])
    path = tmp_path / "rec.hlx"
    path.write_bytes(forge.forge(manifest, dict(sections, module=artifact)))
    np.save(tmp_path / "x.npy", np.float32(1))
    for argv in (["inspect", str(path), "--trust", "portable"],
                 ["run", str(path), "--trust", "portable", "--input", str(tmp_path / "x.npy")]):
        outcome = run_forked([*HLOPT, *argv], timeout=200)
        assert outcome.returncode == 1 and outcome.signal is None, outcome.describe()
        last = outcome.stderr.strip().splitlines()[-1]
        assert "Traceback" not in outcome.stderr and "refused to compile the module section" in last
        assert "@f calls itself (@f -> @g -> @f)" in last
    with pytest.warns(hlopt.RecompileWarning), \
            pytest.raises(hlopt.ExecutableFileError, match=r"@f calls itself \(@f -> @g -> @f\)"):
        hlopt.load(str(path), trust="portable")


def test_a_doubling_call_chain_is_refused_fast(tmp_path, capfd):
    """Functions that each call the next twice: 8 KB of text, 2^40 ops once inlined (hlopt-default's inline
    and XLA inline every call). The bound is on the inlined size; within it the chain runs."""
    for levels, pipeline, message in ((40, "hlopt-default", r"error: @c20 holds about 5.24e\+06 ops once its calls are "
                                                            r"inlined \(it calls @c19"),
                                      (19, "vjp-expand", r"error: vjp-expand: the vjp of @c19 would hold about 7.86e\+06 "
                                                         r"ops once its calls are inlined")):
        start = time.monotonic()
        assert run_opt(tmp_path, doubling_chain(levels), "-p", pipeline) == 1
        assert_one_error_line(1, capfd.readouterr().err, r".*in.mlir:\d+:\d+: " + message)
        assert time.monotonic() - start < 30
    types = ", ".join([F32] * 9)
    jet = (doubling_chain(17).rsplit("func.func public @main", 1)[0] + f"func.func public @main(%x: {F32}) -> {F32} {{\n"
           f"  %r:9 = stablehlo.custom_call @hlopt.jet({', '.join(['%x'] * 9)}) {{api_version = 4 : i32, backend_config = "
           f"{{order = 8 : i64}}, called_computations = [@c17]}} : ({types}) -> ({types})\n  return %r#8 : {F32}\n}}")
    start = time.monotonic()  # within the inlined bound, but its jet, inlined, is not: it segfaulted past 2.5 GB
    assert run_opt(tmp_path, jet, "-p", "hlopt-default") == 1
    assert_one_error_line(1, capfd.readouterr().err, r".*in.mlir:\d+:\d+: error: jet-expand: the order-8 jet of @c17 would "
                                                     r"build about 5.77e\+07 ops once its calls are inlined")
    assert time.monotonic() - start < 30
    assert run_opt(tmp_path, doubling_chain(8), "-p", "hlopt-default") == 0
    out = capfd.readouterr().out
    assert "hlopt.vjp" not in out and out.count("stablehlo.sine") > 2 ** 7  # inlined: a sine per call


def test_the_inlined_bound_is_what_stops_a_doubling_chain(tmp_path):
    """The control: with the bounds lifted, hlopt-default on a 26-level chain runs past its time or memory."""
    path = tmp_path / "chain.mlir"
    path.write_text(doubling_chain(26))
    script = ("import sys, hlopt.passes.ir.walk as w, hlopt.passes.autodiff.vjp_expand as v\nw.MAX_INLINED_OPS = v.MAX_INLINED_OPS = 1 << 62\n"
              "from hlopt.cli.opt import main\nsys.exit(main([sys.argv[1], '-p', 'hlopt-default', '-o', '/dev/null']))")
    outcome = run_capped(["-c", script, str(path)], timeout=10, memory=2 << 30)
    assert outcome.timed_out or outcome.returncode != 0, outcome.describe()


# --- special files ---------------------------------------------------------------------------------

def test_only_regular_files_are_read(tmp_path, capsys):
    """A FIFO blocked both tools forever, a link to /dev/zero was read until memory ran out."""
    fifo, zero, folder, big = tmp_path / "f.mlir", tmp_path / "zero.mlir", tmp_path / "d.mlir", tmp_path / "big.mlir"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    folder.mkdir()
    with open(big, "wb") as f:
        f.truncate(MAX_SOURCE_BYTES + 1)  # sparse: no disk used
    for argv, prog in (([*HLOPT_OPT, str(fifo)], "hlopt-opt"),  # in capped processes: a block is a timeout
                       ([*HLOPT, "compile", str(fifo), "-o", str(tmp_path / "o.hlx")], "hlopt")):
        outcome = run_capped(argv, timeout=60, memory=2 << 30)
        assert_one_error_line(outcome.returncode, outcome.stderr, rf"{prog}: error: cannot read '{re.escape(str(fifo))}': "
                                                                  r"not a regular file \(a FIFO\)")
    for path, message in ((zero, r"not a regular file \(a character device\)"), (folder, r"not a regular file \(a folder\)"),
                          (big, f"larger than the {MAX_SOURCE_BYTES} bytes hlopt reads")):
        for run, prog in ((lambda: main([str(path)]), "hlopt-opt"),
                          (lambda: hlopt_main(["compile", str(path), "-o", str(tmp_path / "o.hlx")]), "hlopt")):
            assert run() == 1
            assert_one_error_line(1, capsys.readouterr().err, rf"{prog}: error: cannot read '{re.escape(str(path))}': {message}")
    # the control: a plain read of the FIFO waits for a writer that never comes
    assert run_capped(["-c", f"open({str(fifo)!r}, 'rb').read()"], timeout=5).timed_out


# --- malformed annotation attributes ---------------------------------------------------------------

def test_a_batched_jet_order_that_is_not_an_integer_is_located(tmp_path, capfd):
    """jet-collapse read `order` first, under hlopt-default, and raised a bare ValueError."""
    t, d = F32, "tensor<3xf32>"
    text = (f"func.func private @f(%x: {t}) -> {t} {{\n  %0 = stablehlo.sine %x : {t}\n  return %0 : {t}\n}}\n"
            f"func.func @main(%x: {t}, %d: {d}) -> {t} {{\n  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %d, %d) "
            f"{{api_version = 4 : i32, backend_config = {{order = \"x\" : i64, directions = 3 : i64}}, "
            f"called_computations = [@f]}} : ({t}, {d}, {d}) -> ({t}, {d}, {d})\n"
            f"  %z = stablehlo.constant dense<0.0> : {t}\n"
            f"  %s = stablehlo.reduce(%r#2 init: %z) applies stablehlo.add across dimensions = [0] : ({d}, {t}) -> {t}\n"
            f"  return %s : {t}\n}}\n")
    for pipeline in ("hlopt-default", "jet-collapse,jet-expand"):
        assert run_opt(tmp_path, text, "-p", pipeline) == 1
        assert_one_error_line(1, capfd.readouterr().err,
                              r".*in.mlir:6:\d+: error: jet-expand: @hlopt.jet 'order' must be an integer, got \"x\"")


# --- the standing fuzz target ----------------------------------------------------------------------

FUZZ_WORKER = script("fuzz_worker")
FUZZ_SEED, FUZZ_CASES = 20261206, 60


def test_mutated_modules_end_in_success_or_one_typed_line(tmp_path):
    """hlopt-opt and hlopt compile on mutated valid modules (line terminators, nesting, huge dimension lists,
    recursion, doubling chains, random pipelines, random bytes), in one capped process: a crash or a hang
    fails the test naming the case it stopped at; a traceback, an untyped error or more lines fail it too."""
    outcome = run_capped([*FUZZ_WORKER, "--text", str(FUZZ_SEED), str(FUZZ_CASES), str(tmp_path)], timeout=240)
    current = (tmp_path / "current").read_text() if (tmp_path / "current").exists() else "none"
    assert not outcome.timed_out and outcome.signal is None and outcome.returncode == 0, (
        f"{outcome.describe()}\nstopped at case {current}")
    counts = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert counts["errors"] == [], counts["errors"][:5]
    assert counts["ok"] + counts["refused"] == FUZZ_CASES and counts["ok"] > 0 and counts["refused"] > 0


def test_the_text_fuzzer_reports_a_crash_and_an_untyped_error(tmp_path):
    """The controls: a worker whose tool segfaults dies with SIGSEGV; one whose tool raises a bare KeyError
    lists it."""
    prefix = (f"import sys, ctypes; sys.path.insert(0, {str(TESTS)!r}); from support import fuzz_worker\n"
              "import hlopt.cli.opt as opt\n")
    run = f"sys.argv = ['w', '--text', '{FUZZ_SEED}', '9', {str(tmp_path)!r}]\nfuzz_worker.main()"
    crash = run_capped(["-c", prefix + "opt.process = lambda *a, **k: ctypes.string_at(0)\n" + run], timeout=120)
    assert crash.signal == "SIGSEGV", crash.describe()

    untyped = run_capped(["-c", prefix + "def process(*a, **k):\n    raise KeyError('x')\nopt.process = process\n" + run],
                         timeout=120)
    counts = json.loads(untyped.stdout.strip().splitlines()[-1])
    assert any("KeyError" in error[-1] for error in counts["errors"]), counts
