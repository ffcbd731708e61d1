"""hlopt without its CPU kernels (installed without a C++ compiler): sparse products run in plain StableHLO.

A plain (not editable) install holds every package of the tree: pyproject.toml lists each one.

A child process hides `hlopt.runtime._native` (an import hook refuses it) and computes sparse x
dense and sparse x sparse products of BCOO and BCSR matrices eagerly, under `hlopt.jit` (nse
given) and under `jax.jit`: each equals numpy's product, and no compiled program names one of
hlopt's kernels. A control with the kernels built shows such a program does name them.
"""

from __future__ import annotations

import os
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

import hlopt
from hlopt import sparse as hs

from support.sandbox import assert_survived, run_capped

_CHILD = textwrap.dedent("""
    import importlib.abc, sys

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "hlopt.runtime._native":
                raise ImportError("hidden by the test")
            return None

    sys.meta_path.insert(0, Hide())
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import hlopt
    from hlopt import sparse as hs
    from hlopt.runtime import kernels

    assert not kernels.available()
    rng = np.random.default_rng(0)
    dense = lambda shape: np.where(rng.random(shape) < 0.3, rng.standard_normal(shape), 0.0)
    a, b, x = dense((7, 5)), dense((5, 6)), rng.standard_normal((5, 3))
    A, B = hs.BCOO.fromdense(a), hs.BCOO.fromdense(b)
    As, Bs = hs.BCSR.fromdense(a), hs.BCSR.fromdense(b)
    nse = int(((a != 0).astype(int) @ (b != 0).astype(int) > 0).sum())
    close = lambda got, want: np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    named = []
    for f, args, want in [
        (lambda A, x: A @ x, (A, x), a @ x),
        (lambda A, x: A @ x[:, 0], (A, x), a @ x[:, 0]),
        (lambda A, x: A @ x, (As, x), a @ x),
        (lambda A, B: hs.bcoo_spdot_general(A, B, dimension_numbers=(((1,), (0,)), ((), ())), nse=nse).todense(),
         (A, B), a @ b),
        (lambda A, B: (A @ B).todense(), (A, hs.BCOO.fromdense(b.T).T), a @ b),
    ]:
        close(hlopt.jit(f)(*args), want)
        close(jax.jit(f)(*args), want)
        named.append("hlopt_" in hlopt.jit(f).lower(*args).compile().as_text())
    close((A @ B).todense(), a @ b)
    close((As @ Bs).todense(), a @ b)
    close((A @ x), a @ x)

    @jax.jit
    def hlopt_scaled(v):  # a function of the program whose name starts as the kernels' do
        return 2 * v

    close(hlopt.jit(lambda v: hlopt_scaled(v) + 1)(x), 2 * x + 1)
    print("kernels named:", any(named))
""")


def test_sparse_products_without_the_kernels_equal_numpy():
    outcome = run_capped(["-c", _CHILD], env={"JAX_PLATFORMS": "cpu"})
    assert_survived(outcome)
    assert "kernels named: False" in outcome.stdout, outcome.stdout


def test_control_the_programs_name_the_kernels_when_they_are_built():
    from hlopt.runtime import kernels

    if not kernels.available():
        pytest.skip("hlopt's CPU kernels are not built (installed without a C++ compiler)")
    a = np.eye(4)
    text = hlopt.jit(lambda A, x: A @ x).lower(hs.BCOO.fromdense(a), np.ones(4)).compile().as_text()
    assert "hlopt_bcoo_spmm" in text


def test_an_install_holds_every_package():
    root = Path(__file__).resolve().parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = root / "python"
    # through the symbolic links python/hlopt/{compiler,passes,runtime}, which rglob does not enter
    found = {".".join(Path(folder).relative_to(tree).parts)
             for folder, _, files in os.walk(tree / "hlopt", followlinks=True) if "__init__.py" in files}
    assert found == listed, f"pyproject.toml packages: missing {sorted(found - listed)}, extra {sorted(listed - found)}"
