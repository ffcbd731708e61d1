"""The import graph of hlopt's packages, read from the source (every import, function-level ones too).

hlopt (python/) -> hlopt.compiler -> hlopt.passes, and hlopt.runtime -> hlopt.compiler,
hlopt.passes; never back, no cycles. Inside hlopt.passes the folders (and top-level modules)
import one another without cycles too: the op data (`optable/`) below the rules and the op
table (`autodiff/`), the IR vocabulary (`ir/`) below both; and a pass imports from the registry,
which names every pass, only what loads a user's object. Private jax/jaxlib APIs only in the two seams.
No test file imports another: the tests share cases, helpers and fixtures through support/ and conftest.py.
Tests use no private name of hlopt's modules, but for the few listed in `PRIVATE_USES_ALLOWED`.
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


# Private names of hlopt's modules that a test may still use, by test file: the name (a trailing `.*`: any
# private name of that module) and why it cannot be a public one. Tests use hlopt as its users do; a helper
# a test needs is tested through what it does, or given a public, documented name in its module.
PRIVATE_USES_ALLOWED: dict[str, dict[str, str]] = {
    # the seam's own test: the private jax modules and functions jax_compat binds still hold what hlopt calls
    "test/python/test_jax_compat.py": {"hlopt.compiler.jax_compat.*": "the private jax APIs the seam binds"},
    # jax has no public dead-code elimination of a jaxpr: the test runs jax's own, as the seam binds it,
    # to see the jet's DCE rule (registered through jax_compat.register_dce_rule) prune its results
    "test/python/test_plain_jax.py": {"hlopt.compiler.jax_compat._pe": "jax's partial_eval, for dce_jaxpr"},
    # jax.experimental.sparse.bcoo's private functions, which hlopt.sparse.bcoo mirrors for code that calls
    # them; the test compares them with jax's and checks they stay out of hlopt.sparse's public names
    "test/python/test_sparse_api2.py": {"hlopt.sparse.bcoo._bcoo_fromdense": "a jax-compatible private function",
                                        "hlopt.sparse.bcoo._bcoo_todense": "a jax-compatible private function"},
    # the C++ extension's module name; the child puts an AddressSanitizer build in its place
    "test/python/support/native_kernel_child.py": {"hlopt.runtime._native": "the CPU kernels' extension module"},
}


def hlopt_module(name: str) -> bool:
    """Whether the dotted `name` is a module (or package) of hlopt, found on disk."""
    parts = name.split(".")
    if parts[0] != "hlopt":
        return False
    package = parts[1] if len(parts) > 1 and parts[1] in PACKAGES and parts[1] != "hlopt" else "hlopt"
    rest = parts[1:] if package == "hlopt" else parts[2:]
    path = PACKAGES[package].joinpath(*rest)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private(part: str) -> bool:
    return part.startswith("_") and not part.endswith("__")


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each private name of an hlopt module that Python `source` imports or reads,
    wherever it is: `from hlopt.m import _x`, a private module (`import hlopt.m._x`, `from hlopt.m._x import
    y`), and `m._x` where `m` names an hlopt module (`import hlopt.m as m`, `from hlopt import m`, `hlopt.m`).
    Code a test runs from a string, in a child process, is not read."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # a name the source binds -> the hlopt module it is
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "hlopt":
                    modules[alias.asname or "hlopt"] = alias.name if alias.asname else "hlopt"
                    found += [(node.lineno, alias.name)] if any(map(private, alias.name.split("."))) else []
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "hlopt":
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if any(map(private, name.split("."))):
                    found.append((node.lineno, name))
                if hlopt_module(name):
                    modules[alias.asname or alias.name] = name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                module = ".".join([modules[value.id], *chain])
                if hlopt_module(module):
                    found.append((node.lineno, f"{module}.{node.attr}"))
    return sorted(set(found))


def allowed_private_use(path: str, name: str) -> bool:
    return any(name == allowed or (allowed.endswith(".*") and name.rsplit(".", 1)[0] == allowed[:-2])
               for allowed in PRIVATE_USES_ALLOWED.get(path, {}))


def test_tests_use_no_private_names_of_hlopt():
    wrong = [f"{path.relative_to(ROOT)}:{line}: uses {name}" for path in sorted((ROOT / "test").rglob("*.py"))
             for line, name in private_uses(path.read_text())
             if not allowed_private_use(str(path.relative_to(ROOT)), name)]
    assert not wrong, "\n".join(wrong) + (
        "\ntest through hlopt's public behaviour, or give the helper a public, documented name in its module "
        "(PRIVATE_USES_ALLOWED in this file lists the exceptions, each with its reason)")


def test_the_private_use_check_sees_every_form():
    source = ("import hlopt.runtime.cache as c, hlopt\nfrom hlopt.taylor import _for_taylor, jet\n"
              "from hlopt.runtime import portable\nfrom hlopt.runtime._native import spmm\n"
              "def f(x):\n    import hlopt.passes\n"
              "    return (c._state, portable._op_problem, hlopt.passes.mlir._ctx, x._cache, c.ENV_DIR,\n"
              "            hlopt.__version__)\n")
    assert private_uses(source) == [(2, "hlopt.taylor._for_taylor"), (4, "hlopt.runtime._native.spmm"),
                                    (7, "hlopt.passes.mlir._ctx"), (7, "hlopt.runtime.cache._state"),
                                    (7, "hlopt.runtime.portable._op_problem")]
    assert allowed_private_use("test/python/test_jax_compat.py", "hlopt.compiler.jax_compat._pe")
    assert not allowed_private_use("test/python/test_cache.py", "hlopt.compiler.jax_compat._pe")
