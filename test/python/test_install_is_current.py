"""test/install_is_current.py, which lets test/run_all.sh skip `pip install -e` when it would
change nothing: each reason to reinstall, on a copy of the tree's layout."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

TEST_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TEST_DIR))
import install_is_current  # noqa: E402

sys.path.remove(str(TEST_DIR))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A tree whose hlopt imports from it, with built kernels newer than their sources."""
    shutil.copy(TEST_DIR.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "python" / "hlopt").mkdir(parents=True)
    (tmp_path / "python" / "hlopt" / "__init__.py").write_text("")
    (tmp_path / "runtime" / "native").mkdir(parents=True)
    (tmp_path / "runtime" / "native" / "csr.cc").write_text("")
    (tmp_path / "runtime" / "_native.cpython-311-x86_64-linux-gnu.so").write_text("")
    os.utime(tmp_path / "runtime" / "native" / "csr.cc", (1, 1))
    monkeypatch.setattr(install_is_current, "ROOT", tmp_path)
    origin = str(tmp_path / "python" / "hlopt" / "__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: importlib.machinery.ModuleSpec(name, None, origin=origin))
    return tmp_path


def test_nothing_to_do_when_current(tree):
    assert install_is_current.why_not_current() is None


def test_each_reason_to_reinstall(tree, monkeypatch):
    os.utime(tree / "runtime" / "native" / "csr.cc")  # a source edited after the build
    assert install_is_current.why_not_current() == "the C++ kernels are older than their sources"
    (tree / "runtime" / "_native.cpython-311-x86_64-linux-gnu.so").unlink()
    assert install_is_current.why_not_current() == "the C++ kernels are not built"
    pyproject = (tree / "pyproject.toml").read_text()
    for requirement, reason in (('"no-such-package-for-hlopt>=1"', "no-such-package-for-hlopt is not installed"),
                                ('"numpy<1"', "numpy .* is installed but numpy<1 is required")):
        (tree / "pyproject.toml").write_text(pyproject.replace('"numpy>=1.26"', requirement))
        assert re.fullmatch(reason, install_is_current.why_not_current())
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert install_is_current.why_not_current() == f"hlopt does not import from {tree}"
