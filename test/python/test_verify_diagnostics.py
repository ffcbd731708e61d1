"""`hlopt-opt --verify-diagnostics`: expected-error comments against the errors a pipeline reports."""

from __future__ import annotations

import pytest

from hlopt.cli.diagnostics import Diagnostic, check, expectations, produced
from hlopt.cli.opt import main

BODY = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {{
  %0 = stablehlo.sine %x : tensor<4xf32>
{before}  %1 = stablehlo.reduce_precision %0, format = e5m10 : tensor<4xf32>{same}
{after}  return %1 : tensor<4xf32>
}}
"""
MESSAGE = "jet-expand: no Taylor rule for 'stablehlo.reduce_precision'"


def run(tmp_path, capsys, text: str, *extra: str) -> tuple[int, str]:
    path = tmp_path / "case.mlir"
    path.write_text(text)
    rc = main([str(path), "-p", "jet-expand{func=f order=2}", "--verify-diagnostics", *extra])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("before, same, after", [
    (f"  // expected-error@+1 {{{{{MESSAGE}}}}}\n", "", ""),
    ("", f"  // expected-error {{{{no Taylor rule}}}}", ""),
    ("", "", "  // expected-error@-1 {{reduce_precision'}}\n"),
])
def test_expected_error_met(tmp_path, capsys, before, same, after):
    assert run(tmp_path, capsys, BODY.format(before=before, same=same, after=after)) == (0, "")


def test_wrong_text_wrong_line_and_missing_expectation_fail(tmp_path, capsys):
    rc, err = run(tmp_path, capsys, BODY.format(before="  // expected-error@+1 {{no Taylor rule for 'stablehlo.sine'}}\n",
                                                same="", after=""))
    assert rc == 1
    assert f"case.mlir:4: error: unexpected error: {MESSAGE}" in err
    assert "case.mlir:4: error: expected error \"no Taylor rule for 'stablehlo.sine'\" was not produced" in err
    rc, err = run(tmp_path, capsys, BODY.format(before="  // expected-error@+2 {{no Taylor rule}}\n", same="", after=""))
    assert rc == 1 and "case.mlir:5: error: expected error \"no Taylor rule\" was not produced" in err
    rc, err = run(tmp_path, capsys, BODY.format(before="", same="", after=""))
    assert rc == 1 and f"unexpected error: {MESSAGE}" in err


def test_expectation_without_error_fails_and_chunks_are_separate(tmp_path, capsys):
    ok = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32> // expected-error {{nothing}}\n}\n"
    rc, err = run(tmp_path, capsys, ok)
    assert rc == 1 and "case.mlir:2: error: expected error \"nothing\" was not produced" in err
    two = BODY.format(before=f"// expected-error@+1 {{{{{MESSAGE}}}}}\n", same="", after="") + "// -----\n" + \
        "// expected-error@unknown {{no function @f in the module}}\nfunc.func @g() {\n  return\n}\n"
    assert run(tmp_path, capsys, two, "--split-input-file") == (0, "")
    rc, err = run(tmp_path, capsys, two)  # one chunk: @g's expectation is not met
    assert rc == 1 and "expected error \"no function @f in the module\" was not produced" in err


def test_parsing_of_comments_and_diagnostics():
    text = "a // expected-error@+2 {{one}}\nb // expected-note {{two}} // expected-warning@-1 {{three}}\n"
    assert [(e.kind, e.line, e.message) for e in expectations(text, 10)] == [
        ("error", 13, "one"), ("note", 12, "two"), ("warning", 11, "three")]
    error = Exception("x.mlir:3:5: error: bad\nx.mlir:1:2: note: first here")
    assert [(d.kind, d.line, d.message) for d in produced(error)] == [("error", 3, "bad"), ("note", 1, "first here")]
    assert [(d.kind, d.line) for d in produced(Exception("hlopt-opt: error: no"))] == [("error", None)]
    # notes count only where a note is expected
    assert check([Diagnostic("error", 3, "bad")], produced(error), "x.mlir") == []
    assert check([Diagnostic("error", 3, "bad"), Diagnostic("note", 2, "first")], produced(error), "x.mlir") == [
        "x.mlir:1: error: unexpected note: first here", "x.mlir:2: error: expected note \"first\" was not produced"]


def test_above_and_below_skip_lines_of_expectations():
    text = ("a\n"                                  # 11
            "// expected-note@above {{n}}\n"       # 12 -> 11
            "// expected-error@below {{e}}\n"      # 13 -> 15
            "// expected-error@below {{f}}\n"      # 14 -> 15
            "b\n"                                  # 15
            "c // expected-error {{g}} // expected-error {{h}}\n"  # 16, twice
            "// expected-warning@above {{w}}\n")   # 17 -> 15 (16 holds expectations)
    assert [(e.kind, e.line, e.message) for e in expectations(text, 10)] == [
        ("note", 11, "n"), ("error", 15, "e"), ("error", 15, "f"), ("error", 16, "g"), ("error", 16, "h"),
        ("warning", 15, "w")]
    dangling = expectations("a\n// expected-error@below {{x}}\n", 0)
    assert [e.line for e in dangling] == [3]  # past the chunk: never met


def test_several_diagnostics_of_one_op_each_need_an_expectation():
    error = Exception("x.mlir:3:5: error: first\nx.mlir:3:5: error: second\nx.mlir:1:1: note: why")
    got = produced(error)
    assert check([Diagnostic("error", 3, "first"), Diagnostic("error", 3, "second")], got, "x.mlir") == []
    assert check([Diagnostic("error", 3, "first")], got, "x.mlir") == ["x.mlir:3: error: unexpected error: second"]
    assert check([Diagnostic("error", 3, "first"), Diagnostic("error", 3, "first")], got, "x.mlir") == [
        "x.mlir:3: error: unexpected error: second", "x.mlir:3: error: expected error \"first\" was not produced"]


def test_chunks_that_succeed_are_printed(tmp_path, capsys):
    good = "func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}\n"
    text = good + "// -----\n" + BODY.format(before=f"  // expected-error@below {{{{{MESSAGE}}}}}\n", same="", after="")
    path = tmp_path / "case.mlir"
    path.write_text(text)
    rc = main([str(path), "-p", "jet-expand{func=f order=2}", "--verify-diagnostics", "--split-input-file"])
    out, err = capsys.readouterr()
    # the first chunk has no @f: its error is expected nowhere, so it fails, and nothing of it is printed
    assert rc == 1 and "unexpected error: jet-expand: no function @f in the module" in err and "@g" not in out
    rc = main([str(path), "-p", "canonicalize", "--verify-diagnostics", "--split-input-file"])
    out, err = capsys.readouterr()
    assert rc == 1 and "func.func @g" in out and "func.func @f" in out and "was not produced" in err
