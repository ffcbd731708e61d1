"""hlopt-opt: pipelines, split input, IR printing, timing, errors, round trips."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re
import subprocess
import sys
import typing

import pytest

from hlopt.cli.opt import ANALYSES_HEADING, LOWERINGS_HEADING, PLATFORM_HEADING, main
from hlopt.compiler.pipeline import PipelineError, parse_pipeline, without_bookkeeping
from hlopt.passes.registry import PASSES, PIPELINES, all_passes

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIT = ROOT / "test" / "lit"

GOOD = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  %1 = stablehlo.add %a, %a : tensor<4xf32>
  %2 = stablehlo.multiply %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
"""

BAD_SECOND = GOOD + """// -----
func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def run(tmp_path, text, *args):
    path = tmp_path / "in.mlir"
    path.write_text(text)
    return main([str(path), *args])


def test_pipeline_and_output_file(tmp_path, capsys):
    out = tmp_path / "out.mlir"
    assert run(tmp_path, GOOD, "-p", "canonicalize,cse", "-o", str(out)) == 0
    text = out.read_text()
    assert text.count("stablehlo.add") == 1 and "stablehlo.multiply %0, %0" in text
    assert capsys.readouterr().out == ""


def test_split_input_file_reports_each_chunk(tmp_path, capsys):
    assert run(tmp_path, BAD_SECOND, "-p", "cse", "--split-input-file") == 1
    captured = capsys.readouterr()
    assert "func.func @f" in captured.out  # the good chunk is still printed
    # the error names the line in the whole file, not in the chunk
    assert re.search(r"in.mlir:9:\d+: error: use of undeclared SSA value name", captured.err)


def test_print_ir_after_all_and_timing(tmp_path, capsys):
    assert run(tmp_path, GOOD, "-p", "canonicalize,cse", "--print-ir-after-all", "--timing") == 0
    err = capsys.readouterr().err
    assert "IR Dump After canonicalize" in err and "IR Dump After cse" in err
    assert err.index("After canonicalize") < err.index("After cse")


def test_timing_report(tmp_path):
    path = tmp_path / "in.mlir"
    path.write_text(GOOD)
    proc = subprocess.run([sys.executable, "-m", "hlopt.cli.opt", str(path), "-p", "cse,canonicalize", "--timing",
                           "--print-ir-after-all"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "Execution time report" in proc.stderr and "CSE" in proc.stderr and "Canonicalizer" in proc.stderr
    assert "hlopt-record-ir" not in proc.stderr  # hlopt's bookkeeping between passes is not a row
    rows = re.findall(r"^\s+(\d+\.\d+) \(\s*(\d+\.\d+)%\)\s+(\S+)$", proc.stderr, re.M)
    assert [name for *_, name in rows] == ["CSEPass", "CanonicalizerPass", "Rest", "Total"], rows
    # each row is rounded to 4 decimals (at most half a unit off): the rows' sum is the total's within that
    half_unit = 0.5e-4
    assert abs(sum(float(s) for s, _, name in rows if name != "Total") - float(rows[-1][0])) <= \
        len(rows) * half_unit + 1e-12


def test_without_bookkeeping_counts_hidden_rows_in_rest():
    report = ("  ----User Time----  ----Wall Time----  ----Name----\n"
              "    0.0100 ( 10.0%)    0.0200 ( 20.0%)  lower-bcoo\n"
              "    0.0300 ( 30.0%)    0.0300 ( 30.0%)  hlopt-record-ir\n"
              "    0.0100 ( 10.0%)    0.0100 ( 10.0%)  hlopt-progress\n"
              "    0.0500 ( 50.0%)    0.0400 ( 40.0%)  Rest\n"
              "    0.1000 (100.0%)    0.1000 (100.0%)  Total\n")
    assert without_bookkeeping(report) == (
        "  ----User Time----  ----Wall Time----  ----Name----\n"
        "    0.0100 ( 10.0%)    0.0200 ( 20.0%)  lower-bcoo\n"
        "    0.0900 ( 90.0%)    0.0800 ( 80.0%)  Rest\n"
        "    0.1000 (100.0%)    0.1000 (100.0%)  Total\n")


def test_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(GOOD))
    assert main(["-", "-p", "cse"]) == 0
    assert capsys.readouterr().out.count("stablehlo.add") == 1


def test_list_passes(capsys):
    assert main(["--list-passes"]) == 0
    out = capsys.readouterr().out
    for name in list(PASSES) + list(PIPELINES):
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", out, re.M), name


def test_list_passes_prints_first_sentences_in_columns(capsys):
    assert main(["--list-passes"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.split("Pipelines:")[0].splitlines()) <= 100
    joined = " ".join(out.split())
    for name, cls in all_passes().items():
        first_paragraph = " ".join(inspect.cleandoc(cls.__doc__).split("\n\n")[0].split())
        sentence = cls.summary()
        assert first_paragraph.startswith(sentence) and sentence.endswith((".", ":")), name  # never cut mid-sentence
        assert f"{name} {sentence}" in joined, name
    assert re.search(r"^    order=1\.\.64 +\(default none\)$", out, re.M), out
    assert re.search(r"^    target=shardy\|gspmd +\(default shardy\)$", out, re.M), out
    default_columns = {line.index("(default") for line in out.splitlines() if "(default" in line}
    assert len(default_columns) == 1, default_columns  # the longest option range does not shift its column


def test_list_passes_groups_lowerings_analyses_and_platform_passes(capsys):
    assert main(["--list-passes"]) == 0
    out = capsys.readouterr().out
    headings = re.findall(r"^(\S.*):$", out, re.M)
    cpu, tpu = PLATFORM_HEADING.format("cpu"), PLATFORM_HEADING.format("tpu")
    assert headings == [LOWERINGS_HEADING, ANALYSES_HEADING, tpu, cpu, "Pipelines"]  # platform passes by name
    sections = dict(zip(headings, re.split(r"^\S.*:$", out, flags=re.M)[1:]))
    listed = {heading: re.findall(r"^  (\S+)", text, re.M) for heading, text in sections.items()}
    assert listed[ANALYSES_HEADING] == ["check-key-reuse"]
    assert set(listed[cpu]) == {n for n in PASSES if n.startswith("xla-cpu-")}
    assert set(listed[tpu]) == {n for n in PASSES if n.startswith("tpu-")}
    assert set(listed[LOWERINGS_HEADING]) == set(PASSES) - {"check-key-reuse"} - set(listed[cpu]) - set(listed[tpu])


def _out_of_range(cls, field) -> list[str]:
    """Values outside the range `field` of pass `cls` declares; fails for an option that declares none."""
    hint = typing.get_type_hints(cls)[field.name]
    meta = field.metadata
    if hint is bool:  # MLIR's spellings only: true and false
        return ["maybe", "2", "1", "0", "yes", "on", "TRUE", "False"]
    if typing.get_origin(hint) is typing.Literal:
        return ["no-such-choice", typing.get_args(hint)[0].upper()]
    if hint is int:
        assert meta.get("low") is not None or meta.get("high") is not None, f"{cls.name}: '{field.name}' has no range"
        low, high = meta.get("low"), meta.get("high")
        return [str(v) for v in (None if low is None else low - 1, None if high is None else high + 1) if v is not None]
    if hint is str:
        assert meta.get("pattern"), f"{cls.name}: option '{field.name}' declares no pattern"
        bad = [v for v in ("0starts-with-a-digit", "has/a/slash", "'quoted'") if not re.fullmatch(meta["pattern"], v)]
        assert bad, f"{cls.name}: option '{field.name}' accepts any string"
        return bad
    raise AssertionError(f"{cls.name}: option '{field.name}' of type {hint} has no out-of-range test")


OPTIONS = [(name, cls, f) for name, cls in all_passes().items() for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("name, cls, field", OPTIONS, ids=[f"{n}-{f.name}" for n, _, f in OPTIONS])
def test_every_option_rejects_an_out_of_range_value(tmp_path, capsys, name, cls, field):
    key = field.name.replace("_", "-")
    for value in _out_of_range(cls, field):
        pipeline = f"{name}{{{key}={value}}}"
        with pytest.raises(PipelineError) as info:
            parse_pipeline(pipeline)
        message = str(info.value)
        assert message.startswith(f"pass '{name}': option '{key}' must be ") and message.endswith(f", got '{value}'")
        assert run(tmp_path, GOOD, "-p", pipeline) == 1
        assert capsys.readouterr().err == f"hlopt-opt: error: {message}\n"


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_annotated_attribute_of_a_pass_is_an_option(name):
    """A pass without options subclasses Pass undecorated; an option added to such a class
    without its own @dataclass would be a plain class attribute, never parsed: refused here."""
    cls = all_passes()[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls, include_extras=True)
    declared = {attr for klass in cls.__mro__ for attr in vars(klass).get("__annotations__", {})}
    options = {attr for attr in declared if typing.get_origin(hints[attr]) is not typing.ClassVar}
    assert options == fields, f"{name}: annotated {sorted(options)}, options {sorted(fields)}"
    instance = cls()
    assert instance == cls() and hash(instance) == hash(cls()) and repr(instance).startswith(cls.__name__)
    for option in fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(instance, option, getattr(instance, option))


def test_bool_options_take_true_and_false():
    (true,), (false,) = (parse_pipeline(f"check-key-reuse{{fold-in-consumes={v}}}") for v in ("true", "false"))
    assert (true.python_pass.fold_in_consumes, false.python_pass.fold_in_consumes) == (True, False)


def test_the_range_check_covers_the_lowest_and_highest_order():
    assert parse_pipeline("jet-expand{func=f order=1},jet-expand{func=f order=64}")
    with pytest.raises(PipelineError, match=r"^pass 'jet-expand': option 'order' needs 'func' "):
        parse_pipeline("jet-expand{order=2}")
    with pytest.raises(PipelineError, match=r"^pass 'jet-expand': option 'func' needs 'order' "):
        parse_pipeline("jet-expand{func=f}")


@pytest.mark.parametrize("pipeline, entry", [("canonicalize,,cse", 2), ("cse,", 2), (",cse", 1),
                                             ("hlopt-default, ,cse", 2)])
def test_empty_pipeline_entries_are_refused(tmp_path, pipeline, entry):
    path = tmp_path / "in.mlir"
    path.write_text(GOOD)
    proc = subprocess.run(["hlopt-opt", str(path), "-p", pipeline], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"hlopt-opt: error: empty entry {entry} in pipeline '{pipeline}': remove the extra ','\n"


@pytest.mark.parametrize("pipeline, message", [
    ("canonicalize,,cse", "empty entry 2 in pipeline 'canonicalize,,cse'"),
    ("jet-expand{func=f order=0}", "pass 'jet-expand': option 'order' must be between 1 and 64, got '0'"),
    ("no-such-pass", "unknown pass or pipeline 'no-such-pass'"),
])
def test_the_api_refuses_bad_pipelines_before_running(pipeline, message):
    import numpy as np

    import hlopt

    traced = []

    def f(x):
        traced.append(x)
        return x * 2

    with pytest.raises(hlopt.PipelineError, match=re.escape(message)):
        hlopt.jit(f, pipeline=pipeline)
    assert not traced
    lowered = hlopt.lower(f, np.ones(3, np.float32))
    for call in (lambda: lowered.apply(pipeline), lambda: lowered.compile(pipeline=pipeline)):
        with pytest.raises(hlopt.PipelineError, match=re.escape(message)):
            call()


@pytest.mark.parametrize("pipeline,message", [
    ("no-such-pass", "unknown pass or pipeline 'no-such-pass'"),
    ("canonicalize{nope=1}", "cannot parse pipeline element 'canonicalize{nope=1}'"),
    ("cse,(", "unbalanced"),
    ("hlopt-default{x=1}", "pipeline 'hlopt-default' takes no options"),
])
def test_bad_pipelines(tmp_path, capsys, pipeline, message):
    assert run(tmp_path, GOOD, "-p", pipeline) == 1
    err = capsys.readouterr().err
    assert err.startswith("hlopt-opt: error: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_option_of_an_hlopt_pass(tmp_path, capsys):
    name = "jet-expand"
    assert run(tmp_path, GOOD, "-p", f"{name}{{no-such-option=1}}") == 1
    err = capsys.readouterr().err
    assert f"pass '{name}' has no option 'no-such-option'" in err


def test_malformed_ir_one_line_with_location(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %b : tensor<4xf32>\n}\n")
    proc = subprocess.run(["hlopt-opt", str(path), "-p", "cse"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert re.fullmatch(rf"{re.escape(str(path))}:2:10: error: use of undeclared SSA value name\n", proc.stderr)


def test_missing_file(capsys):
    assert main(["/nonexistent/x.mlir", "-p", "cse"]) == 1
    assert "cannot read '/nonexistent/x.mlir'" in capsys.readouterr().err


def _lit_inputs():
    return sorted(p for p in LIT.rglob("*.mlir") if "Output" not in p.relative_to(LIT).parts)  # lit's temporaries


@pytest.mark.parametrize("path", _lit_inputs(), ids=lambda p: str(p.relative_to(LIT)))
def test_round_trips_every_lit_input(path, tmp_path, capsys):
    """Printing and parsing again gives the same text, chunk by chunk."""
    status = main([str(path), "--split-input-file"])
    first = capsys.readouterr()
    if status != 0:
        # only inputs that test diagnostics may fail to parse
        assert "not hlopt-opt" in path.read_text() or "expected-error" in path.read_text(), first.err
        return
    again = tmp_path / "again.mlir"
    again.write_text(first.out)
    assert main([str(again), "--split-input-file"]) == 0
    assert capsys.readouterr().out == first.out


def test_lowered_apply_matches_hlopt_opt(tmp_path, capsys):
    import jax.numpy as jnp
    import numpy as np

    import hlopt

    def f(x, y):
        a = jnp.sin(x) * y + jnp.sin(x) * y
        return a.sum(axis=0), jnp.dot(a, a.T)

    lowered = hlopt.lower(f, np.ones((3, 4), np.float32), np.float32(2))
    path = tmp_path / "lowered.mlir"
    path.write_text(lowered.as_text())
    for pipeline in ("canonicalize,cse", "hlopt-default", "inline,symbol-dce,cse"):
        assert main([str(path), "-p", pipeline]) == 0
        assert capsys.readouterr().out == lowered.apply(pipeline).as_text(), pipeline
