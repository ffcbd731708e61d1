"""A newcomer's first minutes: lazy imports, no log lines, `python -m hlopt`, versions, reprs."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hlopt

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLAIN = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  %1 = func.call @g(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @g(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
"""
# What hlopt-opt must not load: jax, and jaxlib's XLA client (PJRT and the C++ runtime).
HEAVY = r"^(jax(\.|$)|jaxlib\._jax|jaxlib\.xla_client)"


def python(code: str, *, env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, with C++ log levels as a user has them (not as conftest sets them)."""
    base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=cwd, timeout=300)


def loaded(code: str) -> list[str]:
    """The heavy modules loaded after running `code` in a fresh interpreter."""
    check = "import re, sys\nprint('loaded:', *(m for m in sys.modules if re.match(%r, m)))" % HEAVY
    proc = python(textwrap.dedent(code) + "\n" + check)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1].split()[1:]


def test_import_hlopt_loads_no_jax():
    assert loaded("import hlopt") == []


def test_hlopt_opt_loads_no_jax(tmp_path):
    path = tmp_path / "plain.mlir"
    path.write_text(PLAIN)
    out = tmp_path / "out.mlir"
    assert loaded(f"""
        from hlopt.cli.opt import main
        assert main(["--list-passes"]) == 0
        assert main([{str(path)!r}, "-p", "hlopt-default,inline,check-key-reuse", "-o", {str(out)!r}]) == 0
    """) == []
    assert "call @g" not in out.read_text()  # `inline` ran


def test_first_jit_of_a_jet_loads_only_what_it_uses():
    # jax.extend's package imports Pallas (about 16 ms), the BCOO records, the linear-algebra records
    # and the key-reuse checker a few more: a process's first compile of a dense jet pays for none of them
    proc = python("""
        import sys
        import jax.numpy as jnp
        import hlopt
        f = hlopt.jit(lambda x: hlopt.jet(jnp.sin, (x,), ((jnp.ones(3),),))[1][0])
        assert jnp.allclose(f(jnp.zeros(3)), 1.0)
        print(*sorted(m for m in sys.modules if m == "jax.extend" or m.startswith(("jax.extend.", "jax._src.pallas",
              "hlopt.passes.sparse.bcoo.", "hlopt.passes.analyses.check_key_reuse", "hlopt.passes.autodiff.linalg_rules"))) or ["none"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["none"]


def test_no_log_lines_on_stderr():
    # the bindings loaded before jax (hlopt-opt's order), then a PJRT client, a compile and a run
    proc = python("import hlopt.passes.mlir, jax, numpy as np; jax.devices(); import hlopt\n"
                  "hlopt.jit(lambda x: x + 1)(np.ones(3))")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_log_level_of_the_user_is_kept():
    proc = python("import os, hlopt.passes.mlir; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])",
                  env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert proc.stdout.strip() == "0"


def test_python_dash_m_hlopt_and_versions():
    proc = subprocess.run([sys.executable, "-m", "hlopt", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: hlopt ")
    assert "compile" in proc.stdout and "--version" in proc.stdout
    assert hlopt.__version__ == importlib.metadata.version("hlopt")  # pyproject reads it from hlopt/__init__.py
    want = f"{hlopt.__version__} (jax {importlib.metadata.version('jax')}, jaxlib {importlib.metadata.version('jaxlib')})"
    for argv in (["-m", "hlopt", "--version"], ["-m", "hlopt.cli.opt", "--version"]):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.strip().endswith(want), proc


def test_jax_is_left_as_it_was():
    """Importing hlopt and compiling with it changes nothing jax's own programs depend on: jax's config,
    the environment (XLA_FLAGS...), the thread count, and what jax.jit lowers and compiles a function to."""
    proc = python("""
        import json, os, threading
        import jax, jax.numpy as jnp, numpy as np

        def f(x):
            return jnp.fft.fft(jax.nn.sigmoid(x) @ x.T + jnp.tanh(x)).real.sum(0)

        def state():
            lowered = jax.jit(f).lower(np.ones((8, 8), np.float32))
            return {"config": {k: repr(v) for k, v in jax.config.values.items()}, "env": dict(os.environ),
                    "threads": threading.active_count(), "lowered": lowered.as_text(),
                    "compiled": lowered.compile().as_text()}

        before = state()
        import hlopt
        hlopt.jit(f)(np.ones((8, 8), np.float32))
        hlopt.deserialize(hlopt.lower(f, np.ones((8, 8), np.float32)).compile().serialize())
        after = state()
        print(json.dumps([k for k in before if before[k] != after[k]]))
    """)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []  # what changed


def test_public_names_resolve_lazily():
    assert set(hlopt.__all__) <= set(dir(hlopt))
    for name in hlopt.__all__:
        assert getattr(hlopt, name) is not None, name
    importlib.import_module("hlopt.taylor")  # the submodules defining them, imported again
    importlib.import_module("hlopt.staging")
    assert callable(hlopt.jit) and hlopt.jit.__module__ == "hlopt.staging"  # the function, not its module
    assert callable(hlopt.jet) and hlopt.jet.__name__ == "jet"
    assert isinstance(hlopt.custom_partitioning, type) and hlopt.sparse.BCOO is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        hlopt.nope  # noqa: B018


def test_submodule_imported_first_keeps_the_function():
    proc = python("import hlopt.staging, hlopt.taylor, hlopt.partitioning, hlopt\n"
                  "print(callable(hlopt.jit), hlopt.jet.__name__, isinstance(hlopt.custom_partitioning, type))")
    assert proc.stdout.split() == ["True", "jet", "True"], proc.stderr


def test_reprs_and_ir_printing_go_to_stderr(capsys):
    lowered = hlopt.lower(lambda x, y: {"s": x * y}, np.ones((2, 3), np.float32), np.float32(2))
    assert repr(lowered) == "<hlopt.Lowered <lambda>(float32[2,3], float32[]) -> (float32[2,3]) on 1 device(s)>"
    after = lowered.apply("cse", print_ir_after_all=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "// -----// IR Dump After cse //----- //" in captured.err
    assert repr(after).endswith("on 1 device(s), after 'cse'>")
    compiled = after.compile("canonicalize")
    assert re.fullmatch(r"<hlopt\.Compiled <lambda>\(float32\[2,3\], float32\[\]\) -> \(float32\[2,3\]\) "
                        r"on 1 device\(s\), after 'cse,canonicalize'>", repr(compiled))


def test_list_passes_shows_options():
    from hlopt.cli.opt import list_passes

    text = list_passes()
    assert re.search(r"^\s+target=shardy\|gspmd\s+\(default shardy\)$", text, re.M)
    assert re.search(r"^\s+fold-in-consumes=true\|false\s+\(default false\)$", text, re.M)
    assert re.search(r"^\s+order=1\.\.64\s+\(default none\)$", text, re.M)


def test_inliner_extension_missing_disables_only_inline(tmp_path):
    path = tmp_path / "plain.mlir"
    path.write_text(PLAIN)
    stub = """
        import sys, types
        sys.modules["jaxlib.mlir._mlir_libs._mosaic_gpu_ext"] = types.ModuleType("_mosaic_gpu_ext")  # no inliner
        import hlopt
        from hlopt.cli.opt import main
        sys.exit(main(sys.argv[1:]))
    """
    run = lambda *argv: subprocess.run([sys.executable, "-c", textwrap.dedent(stub), str(path), *argv],  # noqa: E731
                                       capture_output=True, text=True)
    proc = run("-p", "cse")
    assert proc.returncode == 0 and "call @g" in proc.stdout
    proc = run("-p", "hlopt-default")
    assert proc.returncode == 1 and proc.stdout == ""
    assert re.fullmatch(r"hlopt-opt: error: 'inline' needs the func dialect's inliner interface, which this "
                        r"jaxlib does not provide \(ImportError: .*register_inliner_extensions.*\).*\n", proc.stderr)


def test_import_from_the_folder_above_a_clone(tmp_path):
    """A clone named hlopt in the current folder (a namespace package to Python, first on
    sys.path) does not shadow the installed package."""
    for part in ("python/hlopt", "passes", "compiler", "runtime"):
        (tmp_path / "hlopt" / part).mkdir(parents=True)
    proc = python("import hlopt, hlopt.passes.registry\nprint(hlopt.__file__, callable(hlopt.lower))", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    where, lower = proc.stdout.split()
    assert lower == "True" and not where.startswith(str(tmp_path)), proc.stdout
