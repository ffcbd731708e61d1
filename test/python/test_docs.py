"""The README and the docs cannot drift: every code block runs, and the generated pages are fresh.

Block kinds (the info string of a fenced block):
  python        run as a script in a fresh process, in an empty folder (forked from one that has
                imported jax: support/zygote.py)
  sh            run by bash in an empty folder holding a copy of examples/
  mlir          a lit test (`RUN:` lines) must be a file of examples/lit/, which a sh block runs;
                any other block must parse with hlopt-opt
  console       commands shown, not run (installs and whole test runs): each line is `$ ` and
                one of CONSOLE_COMMANDS
  text          output, listings and diagrams: not run
MyST directives (`{literalinclude}`, `{toctree}`, `{eval-rst}`) are checked by the docs build, which also
runs the tutorials' `{code-cell}`s (docs/tutorials/, MyST-NB notebooks) and fails on any error.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.zygote import Zygote

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)
RUN_KINDS = {"python", "sh", "mlir"}
CONSOLE_COMMANDS = ("python3 -m pip install -e ", "hlopt demo", "bash test/run_all.sh", "python3 -m sphinx ",
                    "XLA_FLAGS=--xla_backend_optimization_level=3 python -m pytest ")
TIMEOUT_S = 240


def blocks() -> list[tuple[str, int, str, str]]:
    """(page, line, kind, text) of every fenced block of the README and the docs."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            kind = m[1].split()[0] if m[1].strip() else ""
            found.append((page.relative_to(ROOT).as_posix(), line, kind, m[2]))
    return found


def of_kind(*kinds: str) -> list:
    return [pytest.param(text, id=f"{page}:{line}") for page, line, kind, text in blocks() if kind in kinds]


def environment(home: Path) -> dict[str, str]:
    """What a user's shell has: hlopt's tools on PATH, a key of their own in a fresh config folder,
    no cache, and XLA_FLAGS without a forced device count (examples choose their devices)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HLOPT_")}
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), JAX_PLATFORMS="cpu",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def run(command: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, cwd=cwd, env=environment(cwd), input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n" \
                                 f"--- stderr\n{proc.stderr[-3000:]}"
    return proc


def test_every_block_has_a_known_kind():
    kinds = {kind for _, _, kind, _ in blocks()}
    directives = {k for k in kinds if k.startswith("{")}
    assert kinds - directives <= RUN_KINDS | {"console", "text"}, kinds
    assert directives <= {"{literalinclude}", "{toctree}", "{eval-rst}", "{code-cell}"}, directives


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """Forks each python block's process from one that imported jax with a user's environment."""
    server = Zygote(environment(tmp_path_factory.mktemp("zygote")))
    yield server
    server.close()


@pytest.mark.parametrize("code", of_kind("python"))
def test_python_block(code, tmp_path, zygote):
    folder = tmp_path / "block"  # the block's folder, empty but for it; its output goes to tmp_path
    folder.mkdir()
    (folder / "example.py").write_text(code, encoding="utf-8")
    returncode, timed_out = zygote.run(["example.py"], tmp_path, cwd=folder, env=environment(folder), timeout=TIMEOUT_S)
    assert not timed_out, f"the block ran past {TIMEOUT_S} s"
    out, err = ((tmp_path / name).read_text(errors="backslashreplace") for name in ("stdout.txt", "stderr.txt"))
    assert returncode == 0, f"exit status {returncode}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"


@pytest.mark.parametrize("script", of_kind("sh"))
def test_shell_block(script, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    run(["bash", "-euo", "pipefail", "-c", script], tmp_path)


@pytest.mark.parametrize("ir", of_kind("mlir"))
def test_mlir_block(ir, tmp_path):
    if "RUN:" in ir:
        lit_tests = {p.read_text(encoding="utf-8") for p in (ROOT / "examples" / "lit").glob("*.mlir")}
        assert ir in lit_tests, "a lit test shown in the docs must be a file of examples/lit/ (which a test runs)"
    else:
        run(["hlopt-opt", "-"], tmp_path, stdin=ir)


@pytest.mark.parametrize("commands", of_kind("console"))
def test_console_blocks_show_only_known_commands(commands):
    for line in commands.splitlines():
        assert line.startswith("$ ") and line[2:].startswith(CONSOLE_COMMANDS), line


def test_examples_lit_folder_passes(tmp_path):
    shutil.copytree(ROOT / "examples" / "lit", tmp_path / "lit")
    proc = run([sys.executable, "-c", "import lit.main; lit.main.main()", "-v", "lit"], tmp_path)
    assert "Passed: 3" in proc.stdout, proc.stdout


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pass_reference_is_generated_from_the_registry():
    gen = _module(ROOT / "docs" / "gen_passes.py")
    assert (ROOT / "docs" / "passes.md").read_text(encoding="utf-8") == gen.render(), \
        "docs/passes.md is stale: run python docs/gen_passes.py"


def test_pass_reference_lists_every_pass_and_option():
    from hlopt.passes.registry import all_passes

    page = (ROOT / "docs" / "passes.md").read_text(encoding="utf-8")
    for name, cls in all_passes().items():
        assert f"## `{name}`" in page
        for option, _ in cls.options_help():
            assert f"`{option.split('=')[0]}`" in page, (name, option)


def test_benchmark_page_is_rendered_from_the_latest_records():
    render = _module(ROOT / "bench" / "render.py")
    page, plots = render.render()
    assert (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8") == page, \
        "docs/benchmarks.md is stale: run python bench/render.py"
    for _, _, png in plots:
        assert png.is_file(), f"{png} is missing: run python bench/render.py (needs matplotlib)"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


INSIDER = re.compile(r"\b(this stop|last stop|merged tree|the issue|branch [`']?\w+\d|as the issue asks|"
                     r"\d{1,2} Dec 20\d\d|\d\d:\d\d UTC)\b", re.I)


def test_no_words_only_the_authors_understand():
    for page in [*PAGES, *(ROOT / "examples").rglob("*.py")]:
        if page.name == "benchmarks.md":  # record names are times, by design
            continue
        found = INSIDER.findall(page.read_text(encoding="utf-8"))
        assert not found, (page, found)


def public_names() -> list[tuple[str, object]]:
    """(qualified name, object) of every name in `hlopt.__all__` and `hlopt.sparse.__all__` but `__version__`."""
    import hlopt
    import hlopt.sparse

    return [(f"{module.__name__}.{name}", getattr(module, name))
            for module in (hlopt, hlopt.sparse) for name in module.__all__ if not name.startswith("__")]


def test_api_reference_documents_exactly_the_public_names():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. (?:auto\w+|py:\w+):: ([\w.]+)", page, re.M))
    top_level = {name for name in documented
                 if re.fullmatch(r"hlopt\.\w+", name) or re.fullmatch(r"hlopt\.sparse\.\w+", name)}
    public = {name for name, _ in public_names()}
    assert public - top_level == set(), "public names missing from docs/api.md"
    assert top_level - public == set(), "docs/api.md documents names that are not in __all__"


@pytest.mark.parametrize("name,obj", [pytest.param(n, o, id=n) for n, o in public_names()])
def test_public_docstring_example_runs(name, obj):
    import doctest

    import jax.numpy as jnp

    from hlopt import sparse

    # a class's methods' examples run with it; a module's functions are public names of their own. The
    # examples of hlopt.sparse assume jnp and sparse imported, as its module docstring says; nothing else.
    globs = {"jnp": jnp, "sparse": sparse} if name.startswith("hlopt.sparse.") else {}
    tests = doctest.DocTestFinder(recurse=not inspect.ismodule(obj)).find(obj, name, globs=globs)
    examples = [ex for test in tests for ex in test.examples]
    assert examples, f"{name}'s docstring has no example (>>> lines)"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"{name}'s docstring example fails (output above)"


def test_tutorials_are_notebooks_the_docs_build_runs():
    conf = _module(ROOT / "docs" / "conf.py")
    assert conf.nb_execution_mode == "force" and conf.nb_execution_raise_on_error
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    tutorials = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
    assert tutorials
    for page in tutorials:
        text = page.read_text(encoding="utf-8")
        assert text.startswith("---\nfile_format: mystnb\n") and "{code-cell}" in text, page
        assert f"tutorials/{page.stem}" in index, f"{page.name} is not in the index's table of contents"
