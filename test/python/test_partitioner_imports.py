"""Reading IR never imports code: a partitioner key resolves among those registered in this process.

A `.mlir` whose `@hlopt.custom_partitioning` key names a module (a `.py` in
the working directory, a stdlib module with import side effects, a package's
`__main__`) is run through `hlopt-opt`, `hlopt compile`, `python -m hlopt
compile` and `Lowered.apply`, each in a fresh capped process whose working
directory holds the payload. Nothing runs without the opt-in (`--allow-import`,
`import_partitioners=True`); with it, a module on `sys.path` is imported (the
control: the harness sees the payload run) but never one from the working
directory, and never a `__main__`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from support.sandbox import Outcome, run_capped

MODULE = textwrap.dedent("""\
    sdy.mesh @mesh = <["x"=8]>
    func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
      %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {
        in_tree = "(0,)", key = "KEY", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"},
        called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
      return %0 : tensor<8xf32>
    }
    func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
      return %arg0 : tensor<8xf32>
    }
    """)
PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\nop = None\n"
ZEN = "Beautiful is better than ugly"  # what importing the stdlib module `this` prints
REFUSED = "is not registered in this process: import the module that defines it first"
APPLY = ("import sys, numpy as np, hlopt\nfrom hlopt.compiler.program import parse_module\n"
         "from hlopt.compiler.stages import Lowered\n"
         "lowered = Lowered(parse_module(open('x.mlir').read()), hlopt.lower(lambda x: x, np.ones(8, np.float32)).signature)\n"
         "try:\n    lowered.apply('lower-custom-partitioning', import_partitioners=sys.argv[1] == 'allow')\n"
         "except hlopt.PipelineError as e:\n    print(str(e).splitlines()[0])\n")


@pytest.fixture
def workdir(tmp_path) -> Path:
    """A working directory holding a payload module (`payload_mod.py`) and a package with a `__main__`."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "payload_mod.py").write_text(PAYLOAD.format(marker=str(tmp_path / "ran-from-cwd")))
    return work


def write_module(folder: Path, key: str) -> None:
    (folder / "x.mlir").write_text(MODULE.replace("KEY", key))


def commands(allow: bool) -> dict[str, list[str]]:
    flag = ["--allow-import"] if allow else []
    return {
        "hlopt-opt": ["hlopt-opt", *flag, "x.mlir", "-p", "lower-custom-partitioning"],
        "hlopt-opt hlopt-default": ["hlopt-opt", *flag, "x.mlir", "-p", "hlopt-default"],
        "hlopt compile": ["hlopt", "compile", *flag, "x.mlir", "-o", "x.hlx"],
        "python -m hlopt compile": ["-m", "hlopt", "compile", *flag, "x.mlir", "-o", "x.hlx"],
        "Lowered.apply": ["-c", APPLY, "allow" if allow else "refuse"],
    }


def run_in(folder: Path, argv: list[str], env: dict | None = None) -> Outcome:
    outcome = run_capped(argv, cwd=folder, env=env)
    assert not outcome.timed_out and outcome.signal is None, outcome.describe()
    return outcome


def one_error(outcome: Outcome) -> str:
    """The error a command reported: one line, exit status 1 (the API prints it on stdout, exit 0)."""
    text = (outcome.stderr or outcome.stdout).strip()
    assert outcome.returncode in (0, 1) and len(text.splitlines()) == 1 and "Traceback" not in text, outcome.describe()
    return text


@pytest.mark.parametrize("name", list(commands(False)))
def test_a_module_in_the_working_directory_never_runs(workdir, tmp_path, name):
    write_module(workdir, "payload_mod:op")
    refused = one_error(run_in(workdir, commands(False)[name]))
    assert REFUSED in refused
    allowed = one_error(run_in(workdir, commands(True)[name]))  # opted in: still never from the working directory
    assert "importing 'payload_mod' failed: No module named 'payload_mod'" in allowed
    assert not (tmp_path / "ran-from-cwd").exists(), "the payload in the working directory ran"


@pytest.mark.parametrize("name", list(commands(False)))
def test_a_module_on_the_path_runs_only_with_the_opt_in(workdir, tmp_path, name):
    elsewhere = tmp_path / "site"
    elsewhere.mkdir()
    marker = tmp_path / "ran-from-path"
    (elsewhere / "payload_elsewhere.py").write_text(PAYLOAD.format(marker=str(marker)))
    write_module(workdir, "payload_elsewhere:op")
    env = {"PYTHONPATH": str(elsewhere)}
    assert REFUSED in one_error(run_in(workdir, commands(False)[name], env))
    assert not marker.exists(), "the payload ran without the opt-in"
    allowed = one_error(run_in(workdir, commands(True)[name], env))
    assert "names no custom partitioning after importing 'payload_elsewhere'" in allowed
    assert marker.exists(), "the opted-in import did not run the module: the test proves nothing"


def test_stdlib_import_side_effects_need_the_opt_in(workdir):
    write_module(workdir, "this:op")
    refused = run_in(workdir, commands(False)["hlopt-opt"])
    assert REFUSED in one_error(refused) and ZEN not in refused.stdout
    allowed = run_in(workdir, commands(True)["hlopt-opt"])
    assert ZEN in allowed.stdout, "importing `this` printed nothing: the test proves nothing"


def test_a_main_module_is_never_imported(workdir, tmp_path):
    package = tmp_path / "site" / "payload_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(PAYLOAD.format(marker=str(tmp_path / "main-ran")))
    write_module(workdir, "payload_pkg.__main__:op")
    env = {"PYTHONPATH": str(tmp_path / "site")}
    assert "cannot be imported" in one_error(run_in(workdir, commands(True)["hlopt-opt"], env))
    assert not (tmp_path / "main-ran").exists()
    control = run_in(workdir, ["-c", "import payload_pkg.__main__"], env)  # importing it does run it
    assert control.returncode == 0 and (tmp_path / "main-ran").exists()
