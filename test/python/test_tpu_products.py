"""The Pallas TPU sparse product kernels (`hlopt.sparse.tpu_products`), compiled on a TPU and in
Pallas's interpreter elsewhere, and `tpu-sparse-products` calling them.

The kernels' results (SpMV and SpMM) must be numpy's on entries with empty rows, duplicates, rows
and columns out of range (padding), no entries, several chunks, chunks whose rows span many output
windows, sorted and unsorted entries, 3 to 256 columns, float32 and bfloat16; their products of
bfloat16 parts keep one pass under any default_matmul_precision. The pass must call the kernel for a
product it takes (BCOO sorted or not, BCSR) and keep its gathers and scatter-adds for the rest; a
TPU compile holds the kernel as Mosaic's `tpu_custom_call` (lowered here, compiled only on a TPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlopt
from hlopt import sparse as hs
from hlopt.sparse import tpu_products

INTERPRET = jax.default_backend() != "tpu"  # on a TPU, the kernels as Mosaic compiles them


def draw(seed: int, m: int, k: int, nse: int, sort: bool, dtype=np.float32, columns: int | None = None):
    """Entries with rows and columns from -1 to 1 past the shape and repeats; data; x."""
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(-1, m + 2, nse), rng.integers(-1, k + 2, nse)
    rows[1::7], cols[1::7] = rows[::7][: len(rows[1::7])], cols[::7][: len(cols[1::7])]  # duplicates
    if sort:
        order = np.argsort(rows, kind="stable")
        rows, cols = rows[order], cols[order]
    data = rng.standard_normal(nse).astype(dtype)
    x = rng.standard_normal((k,) if columns is None else (k, columns)).astype(dtype)
    return rows.astype(np.int32), cols.astype(np.int32), data, x


@pytest.mark.parametrize(("m", "k", "nse", "sort", "columns"), [
    (1, 1, 0, True, None),  # no entries
    (5, 7, 13, False, None),
    (300, 1000, 1100, True, None),  # three chunks, a row window boundary inside each
    (1000, 130, 700, False, None),  # unsorted: each chunk spans every window
    (2000, 20000, 600, True, None),  # few entries over many rows: empty windows between a chunk's rows
    (3, 4, 0, True, 5),
    (300, 70, 1100, True, 64),
    (130, 50, 900, True, 256),
    (140, 60, 700, False, 256),  # unsorted: each chunk spans both windows
    (500, 90, 600, False, 3),
])
def test_matches_numpy(m, k, nse, sort, columns):
    rows, cols, data, x = draw(m + nse, m, k, nse, sort, columns=columns)
    got = tpu_products.product(rows, cols, data, x, m=m, interpret=INTERPRET)
    want = tpu_products.reference(rows, cols, data, x, m)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=2e-6 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("columns", [None, 4])
def test_bfloat16(columns):
    rows, cols, data, x = draw(3, 40, 50, 200, True, jnp.bfloat16, columns)
    got = tpu_products.product(rows, cols, data, x, m=40, interpret=INTERPRET)
    want = tpu_products.reference(rows, cols, np.asarray(data, np.float32), np.asarray(x, np.float32), 40)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-2, atol=1e-2 * (1 + np.abs(want).max()))


def _equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs inside its equations (a jit's, a pallas_call's kernel)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                yield from _equations(inner)


@pytest.mark.parametrize("columns", [None, 4])
def test_products_of_parts_take_one_pass_under_any_default_precision(columns):
    """Under default_matmul_precision('highest') the kernels' products stay DEFAULT: Mosaic refuses a
    float32-precision product of bfloat16 operands (SpMV and SpMM alike)."""
    rows, cols, data, x = draw(1, 40, 50, 200, True, columns=columns)
    with jax.default_matmul_precision("highest"):
        jaxpr = jax.make_jaxpr(lambda *a: tpu_products.product(*a, m=40, interpret=False))(rows, cols, data, x)
    dots = [eqn for eqn in _equations(jaxpr.jaxpr) if eqn.primitive.name == "dot_general"]
    assert dots and all(eqn.params["precision"] == (lax.Precision.DEFAULT,) * 2 for eqn in dots), dots


def test_takes_and_refuses():
    t = tpu_products
    assert t.takes(10, (t.MAX_COLUMNS,), "float32") and not t.takes(10, (t.MAX_COLUMNS + 1,), "float32")
    assert not t.takes(t.MAX_ROWS + 1, (10,), "float32") and not t.takes(10, (10,), "float64")
    rows = t.MAX_OUTPUT // t.MAX_WIDTH - 1  # and the output's row of dropped entries
    assert t.takes(rows, (10, t.MAX_WIDTH), "float32") and not t.takes(rows + 1, (10, t.MAX_WIDTH), "float32")
    assert not t.takes(10, (10, t.MAX_WIDTH + 1), "float32") and not t.takes(10, (10, 2, 2), "float32")
    with pytest.raises(ValueError, match=r"not a \[4, 3\] matrix with a float16 x\[3\].*takes"):
        t.product(np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(2, np.float16), np.zeros(3, np.float16),
                  m=4, interpret=True)


@pytest.mark.parametrize("columns", [None, 6])
@pytest.mark.parametrize("layout", ["BCOO", "BCOO sorted", "BCSR"])
def test_pass_calls_the_kernel(interpreted, layout, columns):
    m, k = 37, 300
    rows, cols, data, x = draw(11, m, k, 900, layout != "BCOO", columns=columns)
    ok = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    if layout == "BCSR":
        rows, cols, data = np.sort(rows[ok]), cols[ok], data[ok]  # rows from indptr
        indptr = np.searchsorted(rows, np.arange(m + 1)).astype(np.int32)
        args = (data, cols, indptr, x)
        f = lambda d, i, p, v: hs.BCSR((d, i, p), shape=(m, k)) @ v  # noqa: E731
    else:
        args = (data, np.stack([np.where(ok, rows, m), cols], 1), x)  # padding as JAX marks it
        f = lambda d, i, v: hs.BCOO((d, i), shape=(m, k), indices_sorted=layout != "BCOO") @ v  # noqa: E731
    lowered = hlopt.lower(f, *args)
    assert "call @hlopt_tpu_product_main" in lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    got = lowered.apply("hlopt-default", platform="tpu").compile("")(*args)
    want = tpu_products.reference(rows, cols, data, x, m)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=2e-6 * (1 + np.abs(want).max()))


def test_tpu_compile_holds_the_mosaic_kernel_where_it_takes_the_product():
    rng = np.random.default_rng(12)
    f = lambda d, i, v: hs.BCOO((d, i), shape=(6, v.shape[0])) @ v  # noqa: E731
    for k, kernel in ((9, True), (tpu_products.MAX_COLUMNS + 1, False)):
        idx = np.stack([rng.integers(0, 6, 20), rng.integers(0, k, 20)], 1).astype(np.int32)
        text = hlopt.lower(f, np.ones(20, np.float32), idx, np.ones(k, np.float32)).apply(
            "hlopt-default", platform="tpu").as_text()
        assert ("@tpu_custom_call" in text) == kernel and ("stablehlo.scatter" in text) != kernel
