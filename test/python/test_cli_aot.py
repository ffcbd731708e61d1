"""`hlopt compile`, `hlopt run`, `hlopt inspect` against jax.jit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from hlopt.cli import aot
from hlopt.cli.main import main

from support.sandbox import Outcome, run_forked

MODULE = """
import jax.numpy as jnp

def f(x, y):
    return {"a": jnp.tanh(x) @ y, "b": [x.sum(axis=0), (y * 2).astype(jnp.int32)]}

not_callable = 3
"""


def ref(x, y):
    return {"a": jnp.tanh(x) @ y, "b": [x.sum(axis=0), (y * 2).astype(jnp.int32)]}


RNG = np.random.default_rng(3)
X = RNG.standard_normal((8, 4)).astype(np.float32)
Y = RNG.standard_normal((4, 2)).astype(np.float32)


@pytest.fixture
def workdir(tmp_path, monkeypatch, request):
    name = f"clitest_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    np.savez(tmp_path / "xy.npz", X, Y)
    monkeypatch.chdir(tmp_path)
    return tmp_path, name


def hlopt(*argv: str) -> int:
    return main(list(argv))


def check_outputs(path, want):
    got = np.load(path)
    assert sorted(got.files) == ["a", "b.0", "b.1"]
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["b.0"], want["b"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["b.1"], want["b"][1])
    assert got["b.1"].dtype == np.int32


def test_compile_inspect_run(workdir, capsys):
    tmp, name = workdir
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "float32[4,2]", "-o", "f.hlx") == 0
    assert "wrote f.hlx" in capsys.readouterr().out
    assert hlopt("inspect", "f.hlx") == 0
    text = capsys.readouterr().out
    for expected in ("program:    f", "devices:    1", "pipeline:   hlopt-default", "float32[8,4]",
                     "b.1              int32[4,2]", "executable", "module"):
        assert expected in text
    assert hlopt("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", "--output", "out.npz") == 0
    check_outputs(tmp / "out.npz", jax.jit(ref)(X, Y))
    assert hlopt("run", "f.hlx", "--input", "xy.npz", "--output", "out2.npz") == 0
    check_outputs(tmp / "out2.npz", jax.jit(ref)(X, Y))
    capsys.readouterr()
    assert hlopt("run", "f.hlx", "--input", "xy.npz") == 0
    assert "b.1: int32[4, 2]" in capsys.readouterr().out


def test_compile_sharded(workdir, capsys):
    tmp, name = workdir
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--mesh", "x=4,y=2",
                 "--in-sharding", "x,y", "--in-sharding", "y,_", "--pipeline", "hlopt-default,cse",
                 "-o", "s.hlx") == 0
    capsys.readouterr()
    assert hlopt("inspect", "s.hlx", "--ir") == 0
    text = capsys.readouterr().out
    assert "devices:    8, mesh x=4 y=2" in text
    assert "P('x', 'y')" in text and "P('y')" in text
    assert "pipeline:   hlopt-default,cse" in text
    assert "sdy.mesh @mesh" in text and "func.func public @main" in text
    assert hlopt("run", "s.hlx", "--input", "x.npy", "--input", "y.npy", "--output", "out.npz") == 0
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    want = jax.jit(ref, in_shardings=(NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y"))))(X, Y)
    check_outputs(tmp / "out.npz", want)


def test_compile_mlir_file(workdir, capsys):
    tmp, _ = workdir
    (tmp / "prog.mlir").write_text(textwrap.dedent("""
        func.func @main(%x: tensor<8x4xf32>, %y: tensor<4x2xf32>) -> tensor<8x2xf32> {
          %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
          %1 = stablehlo.add %0, %0 : tensor<8x2xf32>
          return %1 : tensor<8x2xf32>
        }"""))
    assert hlopt("compile", "prog.mlir", "--pipeline", "canonicalize", "-o", "p.hlx") == 0
    assert hlopt("run", "p.hlx", "--input", "xy.npz", "--output", "out.npz") == 0
    np.testing.assert_allclose(np.load(tmp / "out.npz")["out"], 2 * (X @ Y), rtol=1e-5)
    capsys.readouterr()
    assert hlopt("inspect", "p.hlx", "--json") == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["signature"]["name"] == "prog" and manifest["pipeline"] == "canonicalize"


def test_progress_line_for_long_compiles(workdir, capsys, monkeypatch):
    _, name = workdir
    monkeypatch.setattr(aot, "PROGRESS_AFTER_S", 0.0)
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx") == 0
    err = capsys.readouterr().err
    assert "hlopt: compiling f: done in" in err


@pytest.mark.parametrize("argv,message", [
    (["compile", "{m}:f", "--arg", "f32[8,4", "-o", "o.hlx"], "cannot parse argument type 'f32[8,4'"),
    (["compile", "{m}:f", "--arg", "q7[2]", "-o", "o.hlx"], "unknown dtype 'q7'"),
    (["compile", "{m}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--mesh", "x=4,y", "-o", "o.hlx"],
     "cannot parse mesh 'x=4,y'"),
    (["compile", "{m}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--mesh", "x=16", "-o", "o.hlx"],
     "mesh 'x=16' needs 16 devices but 8 are available"),
    (["compile", "{m}:f", "--arg", "f32[8,4]", "--in-sharding", "x", "-o", "o.hlx"], "need a --mesh"),
    (["compile", "{m}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--mesh", "x=8", "--in-sharding", "x,!",
      "-o", "o.hlx"], "cannot parse sharding 'x,!'"),
    (["compile", "no_such_module_xyz:f", "-o", "o.hlx"], "cannot import 'no_such_module_xyz'"),
    (["compile", "{m}:g", "-o", "o.hlx"], "has no attribute 'g'"),
    (["compile", "{m}:not_callable", "-o", "o.hlx"], "is not callable"),
    (["compile", "nonsense", "-o", "o.hlx"], "neither a .mlir file nor pkg.module:function"),
    (["compile", "missing.mlir", "-o", "o.hlx"], "cannot read 'missing.mlir'"),
    (["compile", "{m}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--pipeline", "no-such-pass", "-o", "o.hlx"],
     "unknown pass or pipeline 'no-such-pass'"),
    (["run", "missing.hlx"], "cannot read 'missing.hlx'"),
    (["run", "x.npy"], "not an hlopt file"),
    (["inspect", "x.npy"], "not an hlopt file"),
])
def test_errors_are_one_line(workdir, capsys, argv, message):
    _, name = workdir
    assert hlopt(*[a.replace("{m}", name) for a in argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("hlopt: error: ") and message in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_a_tracing_error_names_the_arg_each_parameter_got(workdir, capsys):
    """A pytree's .npz given in another parameter's place fails inside the user's code; the one line
    says which --arg each parameter got, by name, in order."""
    tmp, _ = workdir
    (tmp / "cli_params.py").write_text("def predict(params, x):\n    return x @ params['w'] + params['b']\n")
    np.savez(tmp / "params.npz", w=np.ones((3, 2), np.float32), b=np.ones(2, np.float32))
    assert hlopt("compile", "cli_params:predict", "--arg", "f32[4,3]", "--arg", "params.npz", "-o", "o.hlx") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.match(r".*cli_params\.py:2:\d+: error: ", err), err  # located at the user's line
    assert err.endswith("(while tracing predict with params = f32[4,3], x = params.npz: --arg gives the arguments "
                        "in order)"), err
    assert hlopt("compile", "cli_params:predict", "--arg", "params.npz", "--arg", "f32[4,3]", "-o", "o.hlx") == 0
    capsys.readouterr()


def test_run_errors(workdir, capsys):
    tmp, name = workdir
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx") == 0
    capsys.readouterr()
    assert hlopt("run", "f.hlx", "--input", "x.npy") == 1
    assert capsys.readouterr().err == "hlopt: error: f takes 2 arrays (x, y), 1 was given (--input)\n"
    assert hlopt("run", "f.hlx", "x.npy", "y.npy") == 1
    assert capsys.readouterr().err == ("hlopt: error: inputs are given with --input, one per .npy or .npz, in "
                                       "argument order: hlopt run f.hlx --input x.npy --input y.npy\n")
    assert hlopt("run", "f.hlx", "--input", "x.npy", "y.npy") == 1  # the second after a --input's one value
    assert capsys.readouterr().err.endswith(": hlopt run f.hlx --input x.npy --input y.npy\n")
    assert hlopt("compile", f"{name}:f", "-o", "o.hlx") == 1
    assert capsys.readouterr().err == (
        "hlopt: error: f takes 2 arguments (x, y), 0 --arg were given: give one --arg per argument, in order, each "
        f"a type (f32[8,4], int32[]) or a .npz of a pytree's arrays: hlopt compile {name}:f --arg <x> --arg <y> "
        "-o out.hlx\n")
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "-o", "o.hlx") == 1
    assert "f takes 2 arguments (x, y), 1 --arg was given" in capsys.readouterr().err
    assert not (tmp / "o.hlx").exists()
    assert hlopt("run", "f.hlx", "--input", "x.npy", "--input", "x.npy") == 1
    assert "input 'x.npy' holds float32[8, 4] but f takes float32[4, 2] as input 1" in capsys.readouterr().err
    np.save(tmp / "x64.npy", np.ones((8, 4)))  # numpy's default dtype, float64: the shape fits, the dtype not
    assert hlopt("run", "f.hlx", "--input", "x64.npy", "--input", "y.npy") == 1
    assert capsys.readouterr().err == ("hlopt: error: input 'x64.npy' holds float64[8, 4] but f takes float32[8, 4] as "
                                       "input 0: save it as float32, `a.astype(np.float32)`\n")
    (tmp / "bad.npy").write_bytes(b"nope")
    assert hlopt("run", "f.hlx", "--input", "bad.npy", "--input", "y.npy") == 1
    assert "input 'bad.npy' is neither a .npy nor a .npz file" in capsys.readouterr().err
    damaged = bytearray((tmp / "f.hlx").read_bytes())
    damaged[-5] ^= 1
    (tmp / "d.hlx").write_bytes(bytes(damaged))
    assert hlopt("inspect", "d.hlx") == 1
    assert "section 'module' checksum mismatch" in capsys.readouterr().err


def test_trust_flags(workdir, capsys, monkeypatch):
    tmp, name = workdir
    monkeypatch.setenv("HLOPT_KEY", "the key of the machine that compiled " * 2)
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx") == 0
    capsys.readouterr()
    assert hlopt("inspect", "f.hlx", "--trust", "signed") == 0
    out = capsys.readouterr().out
    assert "MAC:        verified with HLOPT_KEY" in out
    assert out.rstrip().endswith("passes the checks of --trust signed (those that need no devices)")
    monkeypatch.setenv("HLOPT_KEY", "the key of another machine, not shared " * 2)
    assert hlopt("inspect", "f.hlx") == 0
    assert "MAC:        DOES NOT VERIFY with HLOPT_KEY: written under another key, or changed since" in (
        capsys.readouterr().out)
    for argv in (["inspect", "f.hlx", "--trust", "signed"], ["run", "f.hlx", "--input", "xy.npz"]):
        assert hlopt(*argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("hlopt: error: f.hlx: its MAC does not verify with HLOPT_KEY") and "\n" not in err
    assert hlopt("inspect", "f.hlx", "--trust", "portable") == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("passes the checks of --trust portable (those that need no devices)")
    assert hlopt("run", "f.hlx", "--input", "xy.npz", "--trust", "portable", "--output", "out.npz") == 0
    check_outputs(tmp / "out.npz", jax.jit(ref)(X, Y))
    assert capsys.readouterr().err == ("hlopt: warning: f.hlx: not authenticated (--trust portable); "
                                       "compiling it from its portable artifact\n")
    monkeypatch.delenv("HLOPT_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp / "no-config"))
    assert hlopt("inspect", "f.hlx") == 0
    assert "MAC:        not checked: no key (" in capsys.readouterr().out
    assert not (tmp / "no-config").exists()  # inspecting makes no key


def test_mlir_errors(workdir, capsys):
    tmp, _ = workdir
    (tmp / "bad.mlir").write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %y : tensor<4xf32>\n}\n")
    assert hlopt("compile", "bad.mlir", "-o", "o.hlx") == 1
    assert "bad.mlir:2:" in capsys.readouterr().err
    (tmp / "nomain.mlir").write_text("func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}\n")
    assert hlopt("compile", "nomain.mlir", "-o", "o.hlx") == 1
    assert "no func.func @main" in capsys.readouterr().err
    (tmp / "dyn.mlir").write_text("func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {\n  return %x : tensor<?xf32>\n}\n")
    assert hlopt("compile", "dyn.mlir", "-o", "o.hlx") == 1
    assert "only static shapes" in capsys.readouterr().err
    (tmp / "ok.mlir").write_text("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x : tensor<4xf32>\n}\n")
    assert hlopt("compile", "ok.mlir", "--arg", "f32[5]", "-o", "o.hlx") == 1
    assert "--arg gives float32[5] but ok.mlir's @main takes float32[4]" in capsys.readouterr().err
    assert hlopt("compile", "ok.mlir", "--mesh", "x=2", "-o", "o.hlx") == 1
    assert "partitioned for 1 device(s)" in capsys.readouterr().err


def test_command_line_in_a_fresh_process(workdir):
    tmp, name = workdir
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one host device unless asked
    env_run = lambda *argv: subprocess.run(["hlopt", *argv], capture_output=True, text=True, cwd=tmp,  # noqa: E731
                                           env=env, timeout=120)
    proc = env_run("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "--mesh", "x=8",
                   "--in-sharding", "x,_", "--in-sharding", "", "-o", "fresh.hlx")
    assert proc.returncode == 0, proc.stderr
    proc = env_run("run", "fresh.hlx", "--input", "x.npy", "--input", "y.npy", "--output", "fresh.npz")
    assert proc.returncode == 0, proc.stderr  # the run sets up the 8 host devices the file needs
    check_outputs(tmp / "fresh.npz", jax.jit(ref)(X, Y))
    proc = env_run("run", "x.npy")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("hlopt: error: ")


def _cli(cwd, env, *argv: str) -> Outcome:
    """`python -m hlopt ARGV` in a process of its own (sandbox.run_forked); `env`: variables to set, None to unset."""
    return run_forked(["-m", "hlopt", *argv], cwd=cwd, env=env)


SHARE = ("Share the key between the machines that share files (HLOPT_KEY), or, if you trust its source, load it "
         "with --trust portable (compiled from its StableHLO, never running its native code)\n")


def test_refusals_name_the_flags(workdir):
    tmp, name = workdir
    env = {"HLOPT_KEY": "the key of the machine that compiled " * 2, "PYTHONPATH": str(tmp)}
    made = _cli(tmp, env, "compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx")
    assert made.returncode == 0, made.stderr
    other = _cli(tmp, {**env, "HLOPT_KEY": "the key of another machine, not shared " * 2}, "run", "f.hlx",
                 "--input", "xy.npz")
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr == ("hlopt: error: f.hlx: its MAC does not verify with HLOPT_KEY: it was written under "
                            "another key, or changed since. " + SHARE)
    config = tmp / "fresh-config"
    none = _cli(tmp, {**env, "HLOPT_KEY": None, "XDG_CONFIG_HOME": str(config)}, "run", "f.hlx", "--input", "xy.npz")
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr == ("hlopt: error: f.hlx: it was written under another user's or machine's key, and this "
                           f"user has none to check it with (HLOPT_KEY is not set and {config}/hlopt/key does not "
                           "exist). " + SHARE)
    inspected = _cli(tmp, {**env, "HLOPT_KEY": "the key of another machine, not shared " * 2}, "inspect", "f.hlx")
    assert "it loads only with --trust portable (compiled from its StableHLO)" in inspected.stdout
    assert "trust=" not in inspected.stdout + other.stderr + none.stderr


def test_run_reports_the_file_it_wrote_and_counts_inputs(workdir, capsys):
    tmp, name = workdir
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx") == 0
    capsys.readouterr()
    assert hlopt("run", "f.hlx", "--input", "xy.npz", "--output", "results") == 0
    assert capsys.readouterr().out == "wrote results.npz: a, b.0, b.1\n"
    check_outputs(tmp / "results.npz", jax.jit(ref)(X, Y))
    assert hlopt("run", "f.hlx", "--input", "xy.npz", "--input", "x.npy") == 1
    assert capsys.readouterr().err == "hlopt: error: f takes 2 arrays (x, y), 3 were given (--input)\n"


NAMED = """
import jax.numpy as jnp

def predict(W1, b1, x):
    return jnp.tanh(x @ W1 + b1)
"""


def test_files_keep_parameter_names_and_inspect_shows_them(workdir, capsys):
    tmp, _ = workdir
    (tmp / "named_model.py").write_text(NAMED)
    assert hlopt("compile", "named_model:predict", "--arg", "f32[3,4]", "--arg", "f32[4]", "--arg", "f32[2,3]",
                 "-o", "p.hlx") == 0
    capsys.readouterr()
    assert hlopt("inspect", "p.hlx") == 0
    text = capsys.readouterr().out
    inputs = text[text.index("inputs:\n") + 8 : text.index("outputs:")].splitlines()
    assert [line.split()[:2] for line in inputs] == [["W1", "float32[3,4]"], ["b1", "float32[4]"],
                                                    ["x", "float32[2,3]"]]
    assert hlopt("inspect", "p.hlx", "--json") == 0
    assert json.loads(capsys.readouterr().out)["in_names"] == ["W1", "b1", "x"]
    np.save(tmp / "w.npy", np.ones((3, 4), np.float32))
    assert hlopt("run", "p.hlx", "--input", "w.npy") == 1
    assert capsys.readouterr().err == "hlopt: error: predict takes 3 arrays (W1, b1, x), 1 was given (--input)\n"


def test_pytree_paths_are_kept_through_save_and_load(tmp_path, capsys):
    import hlopt as api

    def tree(params, x, *rest):
        return jnp.tanh(x @ params["W1"] + params["b1"]) @ params["layers"][0] + rest[0]

    params = {"W1": np.ones((3, 4), np.float32), "b1": np.ones(4, np.float32), "layers": [np.ones((4, 2), np.float32)]}
    compiled = api.lower(tree, params, np.ones((2, 3), np.float32), np.float32(1)).compile()
    names = ("params['W1']", "params['b1']", "params['layers'][0]", "x", "args[2]")
    assert compiled.signature.in_names == names
    compiled.save(tmp_path / "t.hlx")
    assert api.load(tmp_path / "t.hlx").signature.in_names == names
    assert hlopt("inspect", str(tmp_path / "t.hlx")) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^  {re.escape(n)} +float32", out, re.M) for n in names), out


def test_files_without_names_still_load_and_malformed_names_are_refused(workdir, capsys):
    from support.forge import resign, unpack

    import hlopt as api

    tmp, name = workdir
    assert hlopt("compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]", "-o", "f.hlx") == 0
    manifest, sections = unpack((tmp / "f.hlx").read_bytes())
    assert manifest.pop("in_names") == ["x", "y"]
    (tmp / "old.hlx").write_bytes(resign(manifest, sections))  # as files written before the field
    old = api.load(tmp / "old.hlx")
    assert old.signature.in_names == ()
    np.testing.assert_allclose(old(X, Y)["a"], jax.jit(ref)(X, Y)["a"], rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    assert hlopt("inspect", "old.hlx") == 0
    text = capsys.readouterr().out
    assert re.search(r"^  0 +float32\[8,4\]", text, re.M) and re.search(r"^  1 +float32\[4,2\]", text, re.M)
    for bad in (["x"], ["x", "y\x1b[2J"], ["x", 3], "xy"):
        (tmp / "bad.hlx").write_bytes(resign({**manifest, "in_names": bad}, sections))
        with pytest.raises(api.ExecutableFileError, match=r"bad\.hlx: manifest: malformed (in_names|input name)"):
            api.load(tmp / "bad.hlx")
        assert hlopt("inspect", "bad.hlx") == 1
        assert re.fullmatch(r"hlopt: error: bad\.hlx: cannot describe the program's signature: malformed "
                            r"(in_names|input name).*\n",
                            capsys.readouterr().err)


def test_compile_verbose_prints_each_stage_with_its_time(workdir):
    from hlopt.compiler.pipeline import parse_pipeline

    tmp, name = workdir
    proc = _cli(tmp, {"PYTHONPATH": str(tmp)}, "compile", f"{name}:f", "--arg", "f32[8,4]", "--arg", "f32[4,2]",
                "-o", "f.hlx", "-v")
    assert proc.returncode == 0, proc.stderr
    passes = [el.text for el in parse_pipeline("hlopt-default")]
    stages = [f"importing {name}", f"lowering {name}:f", *[f"pass {p}" for p in passes], "PJRT compile",
              "writing f.hlx"]
    assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines()
                                        if re.fullmatch(r"hlopt: .+: \d+\.\d\d s", line)]
    assert [line.split(": ")[1] for line in proc.stderr.splitlines()] == stages
    assert proc.stdout.startswith("wrote f.hlx (")
    assert hlopt("run", "f.hlx", "--input", "xy.npz", "--output", "out.npz") == 0
    check_outputs(tmp / "out.npz", jax.jit(ref)(X, Y))


FLAX_MODEL = """
import flax.linen as nn


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.tanh(nn.Dense(3)(x)))


def predict(params, x):
    return Model().apply(params, x)
"""


def test_flax_params_from_an_npz_and_inputs_matched_by_name(workdir, capsys, monkeypatch):
    """`--arg params.npz` describes a flax model's params; `hlopt run` takes .npz arrays by the
    names `hlopt inspect` prints (in any order), the compile-time .npz's names too, else in order."""
    from flax import traverse_util

    tmp, _ = workdir
    (tmp / "flax_model.py").write_text(FLAX_MODEL)
    monkeypatch.syspath_prepend(str(tmp))
    import flax_model

    x = RNG.standard_normal((5, 4)).astype(np.float32)
    params = flax_model.Model().init(jax.random.key(0), x)
    flat = traverse_util.flatten_dict(params, sep="/")
    np.savez(tmp / "params.npz", **flat)
    np.save(tmp / "x5.npy", x)
    assert hlopt("compile", "flax_model:predict", "--arg", "params.npz", "--arg", "f32[5,4]", "-o", "m.hlx") == 0
    capsys.readouterr()
    assert hlopt("inspect", "m.hlx") == 0
    text = capsys.readouterr().out
    names = [line.split()[0] for line in text[text.index("inputs:\n") + 8: text.index("outputs:")].splitlines()]
    assert names == [f"params['params']['{k.split('/')[1]}']['{k.split('/')[2]}']" for k in sorted(flat)] + ["x"]
    by_path = {f"params['params']['{k.split('/')[1]}']['{k.split('/')[2]}']": v for k, v in flat.items()}
    np.savez(tmp / "reordered.npz", x=x, **dict(reversed(list(by_path.items()))))
    want = flax_model.predict(params, x)
    for inputs in (["reordered.npz"], ["params.npz", "x5.npy"]):
        assert hlopt("run", "m.hlx", *[a for i in inputs for a in ("--input", i)], "--output", "o.npz") == 0
        assert "warning" not in capsys.readouterr().err
        np.testing.assert_allclose(np.load(tmp / "o.npz")["out"], want, rtol=1e-5, atol=1e-6)
    np.savez(tmp / "unnamed.npz", *[by_path[n] for n in names[:-1]], x)
    np.savez(tmp / "misnamed.npz", **{f"p{i}": by_path[n] for i, n in enumerate(names[:-1])}, z=x)
    for path, warned in (("unnamed.npz", False), ("misnamed.npz", True)):
        assert hlopt("run", "m.hlx", "--input", path, "--output", "o.npz") == 0
        err = capsys.readouterr().err
        assert ("hlopt: warning: .npz arrays p0, p1, p2, p3 are not named as the program's inputs" in err) == warned
        np.testing.assert_allclose(np.load(tmp / "o.npz")["out"], want, rtol=1e-5, atol=1e-6)
    np.savez(tmp / "clash.npz", **{"a": x, "a/b": x})
    assert hlopt("compile", "flax_model:predict", "--arg", "clash.npz", "--arg", "f32[5,4]", "-o", "c.hlx") == 1
    assert "'a/b' lies inside the array 'a'" in capsys.readouterr().err


EQUINOX_MODEL = """
import equinox as eqx
import jax

PARAMS, STATIC = eqx.partition(eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0)), eqx.is_array)


def predict(params, x):
    return jax.vmap(eqx.combine(params, STATIC))(x)
"""


def test_run_and_inspect_import_the_modules_that_define_a_files_classes(workdir, monkeypatch):
    """A program taking an equinox model saved from Python: a fresh `hlopt run` (which imports no
    equinox) names `--import`, and runs it as jax.jit does with it; inspect too."""
    tmp, _ = workdir
    (tmp / "eqx_model.py").write_text(EQUINOX_MODEL)
    monkeypatch.syspath_prepend(str(tmp))
    import eqx_model

    key = "the key of the machine that compiled " * 2
    monkeypatch.setenv("HLOPT_KEY", key)
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    import hlopt as api

    api.jit(eqx_model.predict).lower(eqx_model.PARAMS, x).compile().save(tmp / "m.hlx")
    np.savez(tmp / "in.npz", *jax.tree_util.tree_leaves(eqx_model.PARAMS), x)
    env = {"HLOPT_KEY": key, "PYTHONPATH": os.environ.get("PYTHONPATH")}
    for command in (["run", "m.hlx", "--input", "in.npz"], ["inspect", "m.hlx"]):
        refused = _cli(tmp, env, *command)
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert re.search(r"pytree nodes of type equinox\.nn\._\w+\.\w+, which is not defined in this process: "
                         r"pass --import equinox\.nn\b", refused.stderr), refused.stderr
        ran = _cli(tmp, env, *command, "--import", "equinox", *(["--output", "o.npz"] if command[0] == "run" else []))
        assert ran.returncode == 0, ran.stderr
    np.testing.assert_allclose(np.load(tmp / "o.npz")["out"], jax.jit(eqx_model.predict)(eqx_model.PARAMS, x),
                               rtol=1e-5, atol=1e-6)
    missing = _cli(tmp, env, "run", "m.hlx", "--input", "in.npz", "--import", "no_such_module")
    assert missing.returncode == 1 and "hlopt: error: cannot import 'no_such_module': no no_such_module.py" \
        in missing.stderr


EXPORT_REGISTERED = """
import dataclasses
import json

import jax


@dataclasses.dataclass
class Scaled:
    w: jax.Array
    scale: float


jax.tree_util.register_pytree_node(Scaled, lambda s: ((s.w,), s.scale), lambda scale, kids: Scaled(kids[0], scale))
jax.export.register_pytree_node_serialization(
    Scaled, serialized_name="clitest.Scaled", serialize_auxdata=lambda scale: json.dumps(scale).encode(),
    deserialize_auxdata=json.loads)
"""


def test_a_class_registered_with_jax_export_names_import_for_its_unnamed_module(workdir, monkeypatch):
    """A file holding a class registered with jax.export names the registration, not a module: the load's
    error says to import the module that registers it; the command line's says `--import MODULE`."""
    tmp, _ = workdir
    (tmp / "export_registered.py").write_text(EXPORT_REGISTERED)
    monkeypatch.syspath_prepend(str(tmp))
    import export_registered

    key = "the key of the machine that compiled " * 2
    monkeypatch.setenv("HLOPT_KEY", key)
    import hlopt as api

    arg = export_registered.Scaled(np.arange(3, dtype=np.float32), 2.0)
    api.jit(lambda s: s.w * s.scale).lower(arg).compile().save(tmp / "m.hlx")
    np.savez(tmp / "in.npz", arg.w)
    env = {"HLOPT_KEY": key, "PYTHONPATH": os.environ.get("PYTHONPATH")}
    python = subprocess.run([sys.executable, "-c", "import hlopt; hlopt.load('m.hlx')"], cwd=tmp, capture_output=True,
                            text=True, env={k: v for k, v in {**os.environ, **env}.items() if v is not None})
    assert python.returncode == 1
    assert ("registered with jax.export as 'clitest.Scaled', which this process has not registered: import MODULE, "
            "the module whose jax.export.register_pytree_node_serialization call registers that class, before loading"
            ) in python.stderr, python.stderr
    for command in (["run", "m.hlx", "--input", "in.npz"], ["inspect", "m.hlx"]):
        refused = _cli(tmp, env, *command)
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert ("which this process has not registered: pass --import MODULE, the module whose "
                "jax.export.register_pytree_node_serialization call registers that class") in refused.stderr
        assert "before loading" not in refused.stderr, refused.stderr
    ran = _cli(tmp, env, "run", "m.hlx", "--input", "in.npz", "--import", "export_registered", "--output", "o.npz")
    assert ran.returncode == 0, ran.stderr
    np.testing.assert_array_equal(np.load(tmp / "o.npz")["out"], arg.w * 2.0)
