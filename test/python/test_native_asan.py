"""hlopt's CPU kernels (runtime/native/) never read or write outside their buffers, error paths included.

`support/native_kernel_child.py` hands every kernel forged operands (negative and oversized indices,
non-monotone and overlong indptr, attributes that disagree with the buffers, no entries, empty
dims, sizes past int64) and checks numpy's numbers or an error. It runs on the built extension
in a capped child, and on an AddressSanitizer build (`HLOPT_SANITIZE=address`, setup.py) made
here in a temporary folder, which must finish without a report; a control shows that a read
past a heap buffer in such a run is reported. Skipped only where no C++ compiler is present.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from support import script
from support.sandbox import assert_survived, run_capped

ROOT = Path(__file__).resolve().parents[2]
CHILD = script("native_kernel_child")


def compiler() -> str | None:
    """The C++ compiler setuptools builds the extension with (CXX, else Python's), if it is installed."""
    command = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    return shutil.which(command[0]) if command else None


CXX = compiler()
needs_compiler = pytest.mark.skipif(CXX is None, reason="no C++ compiler: the AddressSanitizer build needs one")


def sanitizer_env() -> dict[str, str]:
    """The environment of a process that loads an AddressSanitizer build into python: its runtime and
    libstdc++ (whose exceptions it intercepts) preloaded, leak checks off (python's are not ours)."""
    libraries = []
    for name in ("libasan.so", "libstdc++.so"):
        path = subprocess.run([CXX, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout
        assert os.path.isabs(path.strip()), f"{CXX} has no {name}: install its AddressSanitizer runtime"
        libraries.append(path.strip())
    return dict(os.environ, LD_PRELOAD=" ".join(libraries), ASAN_OPTIONS="detect_leaks=0")


def run_sanitized(*args: str) -> subprocess.CompletedProcess:
    """The child run with the AddressSanitizer runtime (no address-space cap: its shadow memory needs terabytes)."""
    return subprocess.run([*CHILD, *args], capture_output=True, text=True, timeout=300,
                          env=sanitizer_env())


@pytest.fixture(scope="module")
def asan_extension(tmp_path_factory) -> Path:
    """hlopt.runtime._native built with HLOPT_SANITIZE=address into a temporary folder."""
    out = tmp_path_factory.mktemp("asan")
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "-j", "3", "--build-lib", str(out / "lib"),
                            "--build-temp", str(out / "tmp")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, HLOPT_SANITIZE="address"))
    assert build.returncode == 0, build.stderr[-3000:]
    (library,) = (out / "lib").rglob("_native*.so")
    return library


def test_forged_operands_on_the_built_kernels():
    from hlopt.runtime import kernels

    if not kernels.available():
        pytest.skip("hlopt's CPU kernels are not built (installed without a C++ compiler)")
    outcome = run_capped(CHILD, env={"JAX_PLATFORMS": "cpu"})
    assert_survived(outcome)
    assert "survived" in outcome.stdout, outcome.stdout


@needs_compiler
def test_forged_operands_under_address_sanitizer(asan_extension):
    run = run_sanitized(str(asan_extension))
    assert "AddressSanitizer" not in run.stderr, run.stderr[-6000:]
    assert run.returncode == 0 and "survived" in run.stdout, run.stderr[-3000:]


@needs_compiler
def test_a_read_past_a_buffer_is_reported():
    run = run_sanitized("--control")
    assert run.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in run.stderr, run.stderr[-3000:]
    assert "unseen" not in run.stdout
