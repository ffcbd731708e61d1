"""Errors point at the user's line: `file:line:col: error: ...` first, from the CLI and the API.

One case per error family: a jet without a Taylor rule, a sparse annotation,
a custom partitioner that raises, PRNG key reuse, and a malformed `.mlir` file.
The expected lines are computed from the source written here, never taken
from hlopt's output.
"""

from __future__ import annotations

import importlib
import re
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.cli.main import main

SOURCES = {
    "jet": """
        import jax, hlopt

        def h(x):
            return jax.lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)  # @error

        def f(x):
            return hlopt.jet(h, (x,), ((x,),))[1][0]
    """,
    "partitioning": """
        import hlopt

        @hlopt.custom_partitioning
        def op(x):
            return x * 2

        def partition(mesh, arg_shapes, result_shape):
            raise ValueError("this layout is not supported")

        op.def_partition(partition, sharding_rule="i -> i")

        def f(x):
            y = x + 1
            return op(y)  # @error
    """,
    "key_reuse": """
        import jax

        def f(key):
            a = jax.random.normal(key, (3,))  # @note
            b = jax.random.normal(key, (3,))  # @error
            return a + b
    """,
}

MLIR = {
    "sparse": """
        func.func @main(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
          %0 = stablehlo.custom_call @hlopt.bcoo.frobnicate(%data, %indices) {api_version = 4 : i32, backend_config = {shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>  // @error
          return %0 : tensor<4x5xf32>
        }
    """,
    "partitioning": """
        func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
          %0 = stablehlo.add %a, %a : tensor<4xf32>
          %1 = stablehlo.custom_call @hlopt.custom_partitioning(%0) {api_version = 4 : i32, backend_config = {}, called_computations = [@body]} : (tensor<4xf32>) -> tensor<4xf32>  // @error
          return %1 : tensor<4xf32>
        }
        func.func private @body(%a: tensor<4xf32>) -> tensor<4xf32> {
          return %a : tensor<4xf32>
        }
    """,
    "syntax": """
        func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
          return %b : tensor<4xf32>  // @error
        }
    """,
}


def marked(text: str, mark: str, column_of: str) -> tuple[int, int]:
    """(line, column) of `column_of` on the line of `text` that ends with `# @mark` or `// @mark`.

    Columns of Python source are 0-based, as JAX records and prints them
    (`source_info_util.summarize`); MLIR's parser counts from 1.
    """
    for i, line in enumerate(text.splitlines(), 1):
        if re.search(rf"(#|//) @{mark}$", line):
            return i, line.index(column_of)
    raise AssertionError(mark)


@pytest.fixture
def user_module(tmp_path, monkeypatch, request):
    """Writes SOURCES[kind] as a module of its own in a directory on sys.path; returns (name, path, text)."""

    def write(kind: str):
        name = f"errs_{kind}_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
        text = textwrap.dedent(SOURCES[kind])
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.chdir(tmp_path)
        return importlib.import_module(name), str(path), text

    yield write
    for name in [m for m in sys.modules if m.startswith("errs_")]:
        del sys.modules[name]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_jet_error_api_and_cli(user_module, capsys):
    module, path, text = user_module("jet")
    line, col = marked(text, "error", "jax.lax.reduce_precision")
    want = f"{path}:{line}:{col}: error: jet-expand: no Taylor rule for 'stablehlo.reduce_precision'"
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.jit(module.f)(np.ones(4, np.float32))
    assert str(info.value) == want
    assert any("hlopt/jet.py" in n and "note: called from here" in n for n in info.value.notes)
    assert main(["compile", f"{module.__name__}:f", "--arg", "f32[4]", "-o", "o.hlx"]) == 1
    assert one_error_line(capsys.readouterr().err) == want
    assert main(["--debug", "compile", f"{module.__name__}:f", "--arg", "f32[4]", "-o", "o.hlx"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and f"\n{want}\n" in err
    assert re.search(r"\n.*hlopt/jet\.py:\d+:\d+: note: called from here", err)


def test_partitioner_error_api_and_cli(user_module, capsys):
    module, path, text = user_module("partitioning")
    line, col = marked(text, "error", "op(y)")
    prefix = f"{path}:{line}:{col}: error: custom_partitioning '{module.__name__}:op' with operands"
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))  # as --mesh x=8 builds it
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.jit(module.f, mesh=mesh, in_shardings=(P("x"),))(np.ones(8, np.float32))
    message = str(info.value)
    assert message.startswith(prefix) and message.endswith("the partitioner raised ValueError: this layout is "
                                                           "not supported")
    argv = ["compile", f"{module.__name__}:f", "--arg", "f32[8]", "--mesh", "x=8", "--in-sharding", "x", "-o", "o.hlx"]
    assert main(argv) == 1
    assert one_error_line(capsys.readouterr().err) == message


def test_key_reuse_error_api_and_cli(user_module, capsys):
    module, path, text = user_module("key_reuse")
    (line, col), (note_line, note_col) = marked(text, "error", "jax.random"), marked(text, "note", "jax.random")
    want = (f"{path}:{line}:{col}: error: PRNG key is consumed a second time\n"
            f"{path}:{note_line}:{note_col}: note: the key was first consumed here")
    key = jax.random.key_data(jax.random.key(0))
    with pytest.raises(hlopt.KeyReuseError) as info:
        hlopt.lower(module.f, key, check_key_reuse=True)
    assert str(info.value) == want
    argv = ["compile", f"{module.__name__}:f", "--arg", "u32[2]", "--pipeline", "check-key-reuse", "-o", "o.hlx"]
    assert main(argv) == 1
    assert capsys.readouterr().err.strip() == want


@pytest.mark.parametrize("kind, message", [
    ("sparse", "unknown sparse op @hlopt.bcoo.frobnicate"),
    ("partitioning", "malformed @hlopt.custom_partitioning annotation: no 'key'"),
    ("syntax", "use of undeclared SSA value name"),
])
def test_mlir_file_errors_name_the_file(tmp_path, monkeypatch, capsys, kind, message):
    monkeypatch.chdir(tmp_path)
    text = textwrap.dedent(MLIR[kind]).lstrip("\n")
    (tmp_path / "prog.mlir").write_text(text)
    line = marked(text, "error", "%")[0]
    assert main(["compile", "prog.mlir", "-o", "o.hlx"]) == 1
    err = one_error_line(capsys.readouterr().err)
    assert re.match(rf"prog\.mlir:{line}:\d+: error: {re.escape(message)}", err), err
    from hlopt.cli.opt import main as opt_main

    assert opt_main(["prog.mlir", "-p", "hlopt-default"]) == 1
    assert one_error_line(capsys.readouterr().err) == err
