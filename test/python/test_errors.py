"""Errors point at the user's line: `file:line:col: error: ...` first, from the CLI and the API.

One case per error family: a jet without a Taylor rule, a sparse annotation,
a custom partitioner that raises, PRNG key reuse, and a malformed `.mlir` file.
The expected lines are computed from the source written here, never taken
from hlopt's output.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import textwrap
import traceback

import equinox as eqx
import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.cli.main import main

from support.sandbox import Outcome, run_forked

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
    assert any("hlopt/taylor.py" in n and "note: called from here" in n for n in info.value.notes)
    assert main(["compile", f"{module.__name__}:f", "--arg", "f32[4]", "-o", "o.hlx"]) == 1
    assert one_error_line(capsys.readouterr().err) == want
    assert main(["--debug", "compile", f"{module.__name__}:f", "--arg", "f32[4]", "-o", "o.hlx"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and f"\n{want}\n" in err
    assert re.search(r"\n.*hlopt/taylor\.py:\d+:\d+: note: called from here", err)


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
    ("sparse", "@hlopt.bcoo.frobnicate: unknown sparse op"),
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


# --- errors raised by JAX while tracing the user's function, at the CLI --------------------

TRACING = {
    "shape": ("""
        import jax.numpy as jnp

        def f(a, b):
            return a + b  # @error
    """, ["--arg", "f32[8,31]", "--arg", "f32[32]"], "a + b",
        "Incompatible shapes for broadcasting: shapes=[(8, 31), (32,)]"),
    "dtype": ("""
        import jax

        def f(a, b):
            return jax.lax.add(a, b)  # @error
    """, ["--arg", "f32[4]", "--arg", "i32[4]"], "jax.lax.add",
        "lax.add requires arguments to have the same dtypes, got float32, int32. (Tip: jnp.add is a similar "
        "function that does automatic type promotion on inputs)."),
    # lowering fails after tracing: the operation's own traceback locates it (at its line's first column)
    "primitive": ("""
        from jax.extend.core import Primitive

        frob_p = Primitive("frob")
        frob_p.def_abstract_eval(lambda x: x)

        def f(x):
            return frob_p.bind(x * 2)  # @error
    """, ["--arg", "f32[4]"], "return", "MLIR translation rule for primitive 'frob' not found for platform cpu"),
    "import": ("""
        import no_such_module_anywhere  # @error
    """, ["--arg", "f32[4]"], "import", "No module named 'no_such_module_anywhere'"),
    "syntax": ("""
        def f(x)  # @error
            return x
    """, ["--arg", "f32[4]"], "# @error", "SyntaxError: expected ':'"),  # where Python's parser reports it
    "concrete": ("""
        def f(x):
            if x.sum() > 0:  # @error
                return x
            return -x
    """, ["--arg", "f32[4]"], "x.sum() > 0",
        "Attempted boolean conversion of traced array with shape bool[]. "
        "(`hlopt --debug` shows the rest of this message)"),
}


def hlopt_cli(cwd, *argv: str, pythonpath: str = "") -> Outcome:
    """`python -m hlopt ARGV` in a process of its own (sandbox.run_forked) with PYTHONPATH set to `pythonpath`."""
    return run_forked(["-m", "hlopt", *argv], cwd=cwd, env={"PYTHONPATH": pythonpath})


@pytest.mark.parametrize("kind", list(TRACING))
def test_tracing_errors_at_the_users_line(tmp_path, kind):
    source, args, column_of, message = TRACING[kind]
    text = textwrap.dedent(source).lstrip("\n")
    path = tmp_path / f"user_{kind}.py"
    path.write_text(text)
    line, col = marked(text, "error", column_of)
    proc = hlopt_cli(tmp_path, "compile", f"user_{kind}:f", *args, "-o", "o.hlx")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"{path}:{line}:{col}: error: {message}\n"
    assert not (tmp_path / "o.hlx").exists()
    debug = hlopt_cli(tmp_path, "--debug", "compile", f"user_{kind}:f", *args, "-o", "o.hlx")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    assert f"\n{path}:{line}:{col}: error: {message.split(' (`hlopt --debug')[0]}" in debug.stderr


def test_a_missing_module_says_where_hlopt_looked(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mymodel.py").write_text("def predict(x):\n    return x\n")
    proc = hlopt_cli(tmp_path, "compile", "mymodel:predict", "--arg", "f32[4]", "-o", "o.hlx")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"hlopt: error: cannot import 'mymodel': no mymodel.py or mymodel/ in the working directory ({tmp_path}) "
        "or on PYTHONPATH (not set); run hlopt from the folder that holds it, or add that folder to PYTHONPATH "
        "(PYTHONPATH=/path/to/folder hlopt ...)\n")
    ok = hlopt_cli(tmp_path, "compile", "mymodel:predict", "--arg", "f32[4]", "-o", "o.hlx",
                   pythonpath=str(tmp_path / "models"))
    assert ok.returncode == 0, ok.stderr
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    proc = hlopt_cli(tmp_path, "compile", "pkg.nomod:f", "--arg", "f32[4]", "-o", "o.hlx")
    assert proc.stderr == f"hlopt: error: cannot import 'pkg.nomod': package 'pkg' ({tmp_path / 'pkg'}) has no " \
                          "module 'nomod'\n"


# --- the public classes, with hlopt's own frames hidden ------------------------------------


def _hlopt_frames(error: BaseException) -> list[str]:
    """Frames of hlopt's own files in everything `error`'s printed traceback shows (its chain included)."""
    from hlopt.passes.ir.locations import hlopt_dirs

    text = "".join(traceback.format_exception(error))
    files = re.findall(r'File "([^"]+)"', text)
    return [f for f in files if os.path.realpath(f).startswith(tuple(os.path.join(d, "") for d in hlopt_dirs()))]


def test_api_errors_are_the_public_classes_without_hlopts_frames(user_module, tmp_path):
    module, path, text = user_module("jet")
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.jit(module.f)(np.ones(4, np.float32))
    assert type(info.value) is hlopt.PipelineError and type(info.value).__module__ == "hlopt"
    assert "\nhlopt.PipelineError: " in "".join(traceback.format_exception(info.value))
    assert _hlopt_frames(info.value) == []
    lowered = hlopt.lower(module.f, np.ones(4, np.float32))
    for call in (lambda: lowered.apply("hlopt-default"), lambda: lowered.compile()):
        with pytest.raises(hlopt.PipelineError) as info:
            call()
        assert _hlopt_frames(info.value) == []

    bad = tmp_path / "bad.hlx"
    bad.write_bytes(b"not an executable")
    with pytest.raises(hlopt.ExecutableFileError) as info:
        hlopt.load(bad)
    assert type(info.value).__module__ == "hlopt" and _hlopt_frames(info.value) == []

    def reuse(key):
        return jax.random.normal(key, (3,)) + jax.random.normal(key, (3,))

    with pytest.raises(hlopt.KeyReuseError) as info:
        hlopt.lower(reuse, jax.random.key_data(jax.random.key(0)), check_key_reuse=True)
    assert type(info.value).__module__ == "hlopt" and _hlopt_frames(info.value) == []


def test_a_tracing_error_keeps_the_users_frames_only(tmp_path, monkeypatch):
    (tmp_path / "shapes_api.py").write_text("def f(a, b):\n    return a + b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import shapes_api

    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting") as info:
        hlopt.jit(shapes_api.f)(np.ones((8, 31), np.float32), np.ones(32, np.float32))
    assert _hlopt_frames(info.value) == []
    assert any(f.filename == str(tmp_path / "shapes_api.py") and f.lineno == 2
               for f in traceback.extract_tb(info.value.__traceback__))



# --- API messages name arguments, with types as the caller passed them ---------------------


def test_a_string_argument_gets_the_static_argnums_hint():
    def predict(x, activation):
        return x

    with pytest.raises(TypeError) as info:
        hlopt.jit(predict)(np.ones(3, np.float32), "relu")
    assert str(info.value) == ("predict: argument 1 (activation) is str 'relu', not an array; if it is a setting "
                               "rather than data, mark it static: hlopt.jit(predict, static_argnums=1)")
    np.testing.assert_array_equal(hlopt.jit(predict, static_argnums=1)(np.ones(3, np.float32), "relu"), np.ones(3))


@pytest.mark.parametrize("stage", ["lower", "call"])
def test_a_model_holding_functions_is_named_with_how_to_pass_arrays_only(stage):
    """An equinox model passed whole holds its activation function beside its arrays: the error names
    the leaf's path and how to split the arrays out, as lowering and as calling; the split runs as jax.jit."""
    model = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(0))
    x = np.ones(3, np.float32)
    run = hlopt.jit(lambda m, x: m(x))
    with pytest.raises(TypeError) as info:
        run.lower(model, x) if stage == "lower" else run(model, x)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("<lambda>: argument 0 (m).activation is ")
    assert "not an array; pass arrays only" in message
    assert "equinox.partition(model, equinox.is_array)" in message and "static_argnums=0" in message
    params, static = eqx.partition(model, eqx.is_array)
    split = hlopt.jit(lambda p, x: eqx.combine(p, static)(x))
    np.testing.assert_allclose(split(params, x), jax.jit(lambda x: model(x))(x), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.uint64])
def test_a_64_bit_input_is_reported_as_passed(dtype):
    assert not jax.config.jax_enable_x64
    compiled = hlopt.lower(lambda x: x * 2, np.ones((4, 3), np.int16)).compile()
    jax_reads = jax.dtypes.canonicalize_dtype(dtype).name  # what jax makes of it without jax_enable_x64
    assert jax_reads != np.dtype(dtype).name
    with pytest.raises(TypeError) as info:
        compiled(np.ones((4, 3), dtype))
    assert str(info.value) == (f"<lambda>: argument 0 is {np.dtype(dtype).name}[4, 3] (which jax reads as "
                               f"{jax_reads}: jax_enable_x64 is off) but the program was compiled for int16[4, 3]")
    with pytest.raises(TypeError, match=r"^<lambda>: argument 0 is int32\[4, 3\] but the program was compiled"):
        compiled(np.ones((4, 3), np.int32))  # no note where jax takes the dtype as it is


def test_hlopt_compile_refuses_a_bad_pipeline_before_importing_the_program(tmp_path, monkeypatch, capsys):
    (tmp_path / "never_imported.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.chdir(tmp_path)
    for pipeline, message in (("cse,,canonicalize", "empty entry 2 in pipeline 'cse,,canonicalize': remove the "
                                                     "extra ','"),
                              ("jet-expand{func=f order=65}", "pass 'jet-expand': option 'order' must be between 1 "
                                                              "and 64, got '65'")):
        assert main(["compile", "never_imported:f", "--arg", "f32[4]", "--pipeline", pipeline, "-o", "o.hlx"]) == 1
        assert capsys.readouterr().err == f"hlopt: error: {message}\n"
    assert "never_imported" not in sys.modules


def test_argument_structure_errors_name_the_parameters(tmp_path):
    """A call whose arguments differ from the compiled program's is named by parameter and path, from
    the program as compiled and as loaded, with none of hlopt's frames."""
    def predict(w, x):
        return x @ w["a"] + w["b"]

    w, x = {"a": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)}, np.ones((4, 3), np.float32)
    compiled = hlopt.jit(predict).lower(w, x).compile()
    compiled.save(tmp_path / "p.hlx")
    cases = [
        ((w,), {}, "predict takes 2 arguments (w, x), 1 was given"),
        (({"a": w["a"]}, x), {}, "predict: argument w lacks w['b']"),
        (({"a": w["a"], "c": w["b"]}, x), {},
         "predict: argument w lacks w['b'] and has w['c'], which the program was not compiled for"),
        ((w, x), {"y": x}, "predict: unexpected keyword argument y"),
        ((), {"w": w, "x": x}, "predict takes 2 arguments (w, x), 0 were given (and w, x by keyword: the program "
                               "takes them by position)"),
        (((w["a"], w["b"]), x), {}, "predict: argument w lacks w['a'], w['b'] and has w[0], w[1], which the "
                                    "program was not compiled for"),
    ]
    for program in (compiled, hlopt.load(tmp_path / "p.hlx")):
        for args, kwargs, message in cases:
            with pytest.raises(TypeError) as info:
                program(*args, **kwargs)
            assert str(info.value) == message
            assert _hlopt_frames(info.value) == []
    same_paths = hlopt.lower(lambda t: t[0] + t[1], [x, x]).compile()
    with pytest.raises(TypeError, match=r"^<lambda>: argument t has structure PyTreeDef\(\(\*, \*\)\) but the "
                                        r"program was compiled for PyTreeDef\(\[\*, \*\]\)"):
        same_paths((x, x))


def test_something_other_than_a_function_is_refused_first_by_name():
    for api, call in (("hlopt.jit", lambda: hlopt.jit(3)), ("hlopt.lower", lambda: hlopt.lower("f", np.float32(1)))):
        with pytest.raises(TypeError) as info:
            call()
        given = "int 3" if api == "hlopt.jit" else "str 'f'"
        assert str(info.value) == f"{api} takes the function to compile first (a callable), got {given}"
        assert _hlopt_frames(info.value) == []


def test_a_pde_operators_refusal_arrives_without_hlopts_frames():
    with pytest.raises(TypeError) as info:
        hlopt.laplacian(lambda x: jax.numpy.sum(x ** 2))(np.arange(3))  # integers: no second derivative
    assert str(info.value).startswith("hlopt.laplacian: argument 0 must be a real floating-point array, got int32")
    assert _hlopt_frames(info.value) == []


def test_a_misspelled_pass_is_suggested_without_hlopts_frames():
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.jit(lambda x: x, pipeline="inline,canonicalise")
    assert str(info.value).startswith("unknown pass or pipeline 'canonicalise' (did you mean 'canonicalize'?)")
    assert _hlopt_frames(info.value) == []
    for pipeline, suggestion in (("lower-bcco", "lower-bcoo"), ("hlopt-defualt", "hlopt-default"),
                                 ("symbol-dec", "symbol-dce")):
        with pytest.raises(hlopt.PipelineError, match=f"did you mean '{suggestion}'"):
            hlopt.lower(lambda x: x, np.float32(1)).apply(pipeline)
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.lower(lambda x: x, np.float32(1)).apply("zzz-nothing-like-it")
    assert "did you mean" not in str(info.value)


def test_the_command_line_suggests_what_was_meant(tmp_path, monkeypatch, capsys):
    (tmp_path / "suggested_model.py").write_text("def predict(w, x):\n    return x @ w\n")
    monkeypatch.chdir(tmp_path)
    types = ["--arg", "f32[3,2]", "--arg", "f32[4,3]", "-o", "m.hlx"]
    for argv, message in (
            (["compile", "suggested_model.py:predict", *types],
             "'suggested_model.py:predict' names a file; name its module (did you mean 'suggested_model:predict'?)"),
            (["compile", "suggested_model:predcit", *types],
             "'suggested_model' has no attribute 'predcit' (did you mean 'predict'?)"),
            (["compile", "suggested_model:predict", "--arg", "flaot32[3,2]", *types[2:]],
             "unknown dtype 'flaot32' in 'flaot32[3,2]' (did you mean 'float32'?)"),
            (["compile", "suggested_model:predict", "--pipeline", "canonicalise", *types],
             "unknown pass or pipeline 'canonicalise' (did you mean 'canonicalize'?) (hlopt-opt --list-passes "
             "shows hlopt's passes)"),
            (["compile", "suggested_model", *types],
             "'suggested_model' is neither a .mlir file nor pkg.module:function: name the function after a colon "
             "(suggested_model defines predict: 'suggested_model:predict')"),
            (["compile", "suggested_model:predict", "-p", "canonicalise", *types],  # hlopt-opt's -p
             "unknown pass or pipeline 'canonicalise' (did you mean 'canonicalize'?)"),
            (["demo", "sparce"], "no demo section 'sparce' (did you mean 'sparse'?) (sections: ")):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"hlopt: error: {message}") and len(err.splitlines()) == 1, err
    for misspelled, meant in (("complie", " (did you mean 'compile'?)"), ("inpsect", " (did you mean 'inspect'?)"),
                              ("frobnicate", "")):
        with pytest.raises(SystemExit) as exited:
            main(["--debug", misspelled, "x.hlx"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f"hlopt: error: unknown command '{misspelled}'{meant} (commands: compile, run, inspect, demo)" in err
