"""The import graph of hlopt's packages, read from the source (every import, function-level ones too).

hlopt (python/) -> hlopt.compiler -> hlopt.passes, and hlopt.runtime -> hlopt.compiler,
hlopt.passes; never back, no cycles. Private jax/jaxlib APIs only in the two seams.
"""

from __future__ import annotations

import ast
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


def files(package: str) -> list[pathlib.Path]:
    return sorted(PACKAGES[package].rglob("*.py"))


def module_name(package: str, path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGES[package]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    prefix = ["hlopt"] if package == "hlopt" else ["hlopt", package]
    return ".".join(prefix + parts)


def imports(package: str, path: pathlib.Path) -> list[tuple[int, str]]:
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
    return found


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
