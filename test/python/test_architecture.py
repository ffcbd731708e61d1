"""The import graph of hlopt's packages, read from the source (every import, function-level ones too).

hlopt (python/) -> hlopt.compiler -> hlopt.passes, and hlopt.runtime -> hlopt.compiler,
hlopt.passes; never back, no cycles. Inside hlopt.passes the folders (and top-level modules)
import one another without cycles too: the op data (`optable/`) below the rules and the op
table (`autodiff/`), the IR vocabulary (`ir/`) below both; and a pass imports from the registry,
which names every pass, only what loads a user's object. Private jax/jaxlib APIs only in the two seams.
No test file imports another: the tests share cases, helpers and fixtures through support/ and conftest.py.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = {"hlopt": ROOT / "python" / "hlopt", "compiler": ROOT / "compiler", "passes": ROOT / "passes",
            "runtime": ROOT / "runtime"}
ALLOWED = {
    "hlopt": {"hlopt", "compiler", "passes", "runtime"},
    "compiler": {"compiler", "passes"},
    "runtime": {"runtime", "compiler", "passes"},
    "passes": {"passes"},
}
JAX_SEAM = ROOT / "compiler" / "jax_compat.py"
MLIR_SEAM = ROOT / "passes" / "mlir.py"
# private attributes of jax objects hlopt relies on (their one home is JAX_SEAM)
PRIVATE_ATTRIBUTES = re.compile(r"\._(lowering|aval|committed|impl|to_xla_hlo_sharding)\b")
TESTS = ROOT / "test" / "python"


def files(package: str) -> list[pathlib.Path]:
    return sorted(PACKAGES[package].rglob("*.py"))


def module_name(package: str, path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGES[package]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    prefix = ["hlopt"] if package == "hlopt" else ["hlopt", package]
    return ".".join(prefix + parts)


@functools.cache
def imports(package: str, path: pathlib.Path) -> tuple[tuple[int, str], ...]:
    """(line, absolute module name) of every import in the file, wherever it is."""
    here = module_name(package, path)
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parent + ([base] if base else []))
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return tuple(found)


def owner(name: str) -> str | None:
    """The hlopt package a module name belongs to, None outside hlopt."""
    parts = name.split(".")
    if parts[0] != "hlopt":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ("compiler", "passes", "runtime") else "hlopt"


@pytest.mark.parametrize("package", list(PACKAGES))
def test_imports_run_one_way(package):
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
             for path in files(package) for line, name in imports(package, path)
             if owner(name) is not None and owner(name) not in ALLOWED[package]]
    assert not wrong, "\n".join(wrong)


def test_no_cycles_between_packages():
    edges = {p: {owner(n) for path in files(p) for _, n in imports(p, path)} - {None, p} for p in PACKAGES}
    order: list[str] = []
    while edges:
        leaves = [p for p, deps in edges.items() if not deps - set(order)]
        assert leaves, f"cycle among {sorted(edges)}"
        order += sorted(leaves)
        for p in leaves:
            del edges[p]
    assert order.index("passes") < order.index("compiler") < order.index("runtime") < order.index("hlopt")


def passes_part(name: str) -> str | None:
    """The folder (or top-level module) of hlopt.passes that module `name` belongs to, None outside."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["hlopt", "passes"] and len(parts) > 2 else None


def passes_graph() -> dict[str, set[str]]:
    """Folder or top-level module of hlopt.passes -> those it imports (the package's `__init__` aside:
    it re-exports the registry)."""
    edges: dict[str, set[str]] = {}
    for path in files("passes"):
        here = passes_part(module_name("passes", path))
        if here is not None:
            edges.setdefault(here, set()).update(
                {passes_part(n) for _, n in imports("passes", path)} - {None, here})
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph `edges`, as the nodes along it, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_pass_folders_import_one_way():
    edges = passes_graph()
    assert {"optable", "autodiff", "ir", "rewrite"} <= set(edges)
    assert cycle(edges) is None, " -> ".join(cycle(edges))
    assert "autodiff" not in edges["optable"] and "optable" in edges["autodiff"]


def test_the_cycle_check_sees_a_cycle():
    # an edge back from the op data to the rules would be the cycle this file keeps out
    edges = passes_graph()
    edges["optable"] = edges["optable"] | {"autodiff"}
    found = cycle(edges)
    assert found is not None and {"optable", "autodiff"} <= set(found)


def test_passes_import_from_the_registry_only_what_loads_a_user_object():
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
             for path in files("passes") if path.parent != PACKAGES["passes"]
             for line, name in imports("passes", path)
             if name.startswith("hlopt.passes.registry") and name not in ("hlopt.passes.registry",
                                                                         "hlopt.passes.registry.import_object")]
    assert not wrong, "\n".join(wrong)


def test_passes_import_no_jax():
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
             for path in files("passes") for line, name in imports("passes", path)
             if name.split(".")[0] == "jax" or (name.split(".")[0] == "jaxlib" and path != MLIR_SEAM)]
    assert not wrong, "\n".join(wrong)


def test_private_apis_only_in_the_seams():
    wrong = []
    for package in PACKAGES:
        for path in files(package):
            for line, name in imports(package, path):
                parts = name.split(".")
                private = parts[0] in ("jax", "jaxlib") and any(p.startswith("_") for p in parts[1:])
                seam = MLIR_SEAM if parts[0] == "jaxlib" and parts[1:2] == ["mlir"] else JAX_SEAM
                if private and path != seam:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
            if path != JAX_SEAM:
                for i, text in enumerate(path.read_text().splitlines(), 1):
                    if PRIVATE_ATTRIBUTES.search(text):
                        wrong.append(f"{path.relative_to(ROOT)}:{i}: {text.strip()}")
    assert not wrong, "\n".join(wrong)


def test_the_walk_sees_function_level_imports():
    # the check above would be blind if it only read module-level imports
    found = dict((name, line) for line, name in imports("hlopt", PACKAGES["hlopt"] / "cli" / "aot.py"))
    assert "hlopt.runtime.files" in found or "hlopt.runtime" in found
    assert owner("hlopt.runtime.files") == "runtime" and owner("hlopt.sparse") == "hlopt" and owner("numpy") is None


def imported_tests(source: str, tests: set[str]) -> list[tuple[int, str]]:
    """(line, module) of each import in Python `source`, wherever it is, that names one of the test
    modules `tests`: importing one, importing from one, or importing one from a package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if set(name.split(".")) & tests]
    return found


def test_no_test_file_imports_another():
    tests = {path.stem for path in TESTS.rglob("test_*.py")}
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {name}" for path in sorted(TESTS.rglob("*.py"))
             for line, name in imported_tests(path.read_text(), tests)]
    assert not wrong, "\n".join(wrong) + ("\nmove what the tests share into test/python/support/ "
                                           "(a shared fixture into conftest.py) and import it from there")


def test_the_test_import_check_sees_every_form():
    a, b, c = "test_a", "test_b", "test_c"
    source = f"import numpy, {a}\nfrom {b} import case\nfrom support import jet_cases\ndef f():\n    from . import {c}\n"
    assert imported_tests(source, {a, b, c}) == [(1, a), (2, b), (5, c)]
