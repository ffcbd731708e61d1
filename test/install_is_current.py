"""Whether `pip install -e '.[test,docs]'` would change nothing, so run_all.sh can skip it.

Exits 0 when `import hlopt` finds this checkout's python/hlopt (an editable install of this
tree, or PYTHONPATH), hlopt is installed, every requirement of this tree's pyproject.toml (its
dependencies and its test and docs extras) is installed at a version it allows, and the C++
kernels runtime/_native*.so are newer than their sources in runtime/native/; otherwise prints
why on one line and exits 1. Imports nothing of hlopt or jax.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

try:
    from packaging.requirements import Requirement
except ImportError:  # a test dependency: installing installs it
    Requirement = None

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("test", "docs")


def requirements() -> list[Any]:
    """This tree's requirements: the dependencies and those of the extras run_all.sh installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    return [Requirement(r) for r in project.get("dependencies", []) + [r for e in EXTRAS for r in extras.get(e, [])]]


def why_not_current() -> str | None:
    """Why a reinstall is needed, or None."""
    if Requirement is None:
        return "packaging is not installed"
    spec = importlib.util.find_spec("hlopt")
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != ROOT / "python" / "hlopt" / "__init__.py":
        return f"hlopt does not import from {ROOT}"
    try:
        metadata.version("hlopt")
    except metadata.PackageNotFoundError:
        return "hlopt is not installed"
    for req in requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return f"{req.name} is not installed"
        if not req.specifier.contains(version, prereleases=True):
            return f"{req.name} {version} is installed but {req} is required"
    built = sorted((ROOT / "runtime").glob("_native*.so"))
    sources = [p for p in (ROOT / "runtime" / "native").rglob("*") if p.is_file()]
    if not built:
        return "the C++ kernels are not built"
    newest = max((p.stat().st_mtime for p in sources), default=0.0)
    if any(p.stat().st_mtime < newest for p in built):
        return "the C++ kernels are older than their sources"
    return None


if __name__ == "__main__":
    reason = why_not_current()
    if reason:
        print(f"reinstalling: {reason}")
    sys.exit(1 if reason else 0)
