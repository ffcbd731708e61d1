"""The Pallas TPU sparse product kernels (`hlopt.sparse.tpu_products`), compiled on a TPU and in Pallas's
interpreter elsewhere, and `tpu-sparse-products` calling them.

The kernels' results (SpMV and SpMM, resident and one-hot) must be numpy's on entries with empty rows,
duplicates, rows and columns out of range (padding), no entries, several chunks, a row spanning chunks,
chunks whose rows span many output windows, sorted and unsorted entries, x's columns in blocks,
64 and 256 columns, float32 and bfloat16. The pass must call the kernel for a
product it takes (BCOO sorted or not, BCSR) and keep its gathers and scatter-adds for the rest; a
TPU compile holds the kernel as Mosaic's `tpu_custom_call` (lowered here, compiled only on a TPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt import sparse as hs
from hlopt.passes.tpu import sparse_products
from hlopt.sparse import tpu_products

# Compiled on a TPU, in Pallas's interpreter elsewhere.
INTERPRET = jax.default_backend() != "tpu"


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


def check(rows, cols, data, x, m, **kw):
    got = tpu_products.product(rows, cols, data, x, m=m, interpret=INTERPRET, **kw)
    want = tpu_products.reference(rows, cols, data, x, m)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=2e-6 * (1 + np.abs(want).max()))


@pytest.mark.parametrize(("m", "k", "nse", "sort", "columns"), [
    (1, 1, 0, True, None),  # no entries
    (5, 7, 13, False, None),  # resident SpMV, unsorted: sorted first
    (300, 1000, 2100, True, None),  # two chunks, rows packed 128 to a register row
    (2000, 20000, 600, True, None),  # few entries over many rows: empty rows between an entry's and the next
    (3, 4, 0, True, 5),  # one-hot kernel
    (300, 70, 2100, True, 64),  # resident, two rows of 64 a register row
    (301, 70, 700, False, 64),
    (130, 50, 900, True, 256),  # resident, 256 lanes a row
    (500, 90, 600, False, 3),  # one-hot kernel, unsorted: each chunk spans every window
    (300, 1000, 1100, True, 3),  # one-hot kernel, three chunks, a row window boundary inside each
])
def test_matches_numpy(m, k, nse, sort, columns):
    check(*draw(m + nse, m, k, nse, sort, columns=columns), m)


@pytest.mark.parametrize("columns", [None, 64])
def test_row_spanning_chunks(columns):
    """A row's entries in three chunks of the resident kernel: each chunk adds to the sum the last one stored."""
    rows, cols, data, x = draw(5, 4, 9, 3 * tpu_products.RESIDENT_CHUNK, False, columns=columns)
    rows[:] = np.where(np.arange(rows.size) % 3 == 0, 1, 2)
    check(np.sort(rows), cols, data, x, 4, rows_sorted=True)


def test_rows_sorted_is_taken_at_its_word():
    """The resident kernel adds sorted rows' entries as given: unsorted ones marked sorted are not sorted first."""
    rows, cols = np.array([200, 0, 200], np.int32), np.zeros(3, np.int32)
    data, x = np.ones(3, np.float32), np.ones(1, np.float32)
    sorted_first = tpu_products.product(rows, cols, data, x, m=201, interpret=INTERPRET)
    as_given = tpu_products.product(rows, cols, data, x, m=201, rows_sorted=True, interpret=INTERPRET)
    assert np.asarray(sorted_first)[200] == 2
    assert np.asarray(as_given)[200] == 1  # row 200's second run (another register row between) starts its sum again


@pytest.mark.parametrize(("budget", "width"), [(400 << 10, 128), (200 << 10, 64)])
def test_column_blocks(monkeypatch, budget, width):
    """x and the output in VMEM a block of columns at a time where the whole does not fit."""
    monkeypatch.setattr(tpu_products, "RESIDENT_BYTES", budget)
    m, k = 298, 300
    assert tpu_products.resident_width(m, (k, 256)) == width
    check(*draw(width, m, k, 1400 + width, True, columns=256), m)  # shapes of their own: traced again


@pytest.mark.parametrize("columns", [None, 4])
def test_bfloat16(columns):
    rows, cols, data, x = draw(3, 40, 50, 200, True, jnp.bfloat16, columns)
    got = tpu_products.product(rows, cols, data, x, m=40, interpret=INTERPRET)
    want = tpu_products.reference(rows, cols, np.asarray(data, np.float32), np.asarray(x, np.float32), 40)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-2, atol=1e-2 * (1 + np.abs(want).max()))


def test_takes_and_refuses():
    t = tpu_products
    vector = t.RESIDENT_BYTES // 8  # x's and the output's elements, 4 bytes each
    assert t.resident_width(vector - 2048, (vector - 2048,)) == 0 and t.resident_width(vector, (vector,)) is None
    assert [t.resident_width(10, (10, n)) for n in (64, 256, 384, 96, 32)] == [64, 256, 384, None, None]
    assert t.takes(10, (10, 96), "float32") and t.takes(10, (10, 3), "float32")  # the one-hot kernel
    rows = t.MAX_OUTPUT // t.MAX_WIDTH - 1  # and the output's row of dropped entries
    assert t.takes(rows, (10, t.MAX_WIDTH), "float32") and not t.takes(rows + 1, (10, t.MAX_WIDTH + 8), "float32")
    assert not t.takes(t.MAX_ROWS + 1, (10,), "float32") and not t.takes(10, (10,), "float64")
    assert not t.takes(10, (10, t.MAX_WIDTH + 8), "float32") and not t.takes(10, (10, 2, 2), "float32")
    assert not t.takes(vector, (vector,), "float32")
    with pytest.raises(ValueError, match=r"not a \[4, 3\] matrix with a float16 x\[3\].*takes"):
        t.product(np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(2, np.float16), np.zeros(3, np.float16),
                  m=4, interpret=INTERPRET)


@pytest.fixture
def interpreted():
    """The pass's kernel in Pallas's interpreter (portable StableHLO, which runs here) while the test runs."""
    kept = sparse_products.register_product_kernel(
        lambda m, shape, nse, dtype, index: tpu_products.lowered_text(m, shape, nse, dtype, index, interpret=True)
        if tpu_products.takes(m, shape, dtype) else None)
    yield
    sparse_products.register_product_kernel(kept)


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
    for m, x_shape, kernel in ((6, (9,), True), (6, (9, 64), True), (tpu_products.MAX_ROWS + 1, (9, 64), False)):
        f = lambda d, i, v, m=m: hs.BCOO((d, i), shape=(m, v.shape[0])) @ v  # noqa: E731
        idx = np.stack([rng.integers(0, 6, 20), rng.integers(0, 9, 20)], 1).astype(np.int32)
        text = hlopt.lower(f, np.ones(20, np.float32), idx, np.ones(x_shape, np.float32)).apply(
            "hlopt-default", platform="tpu").as_text()
        assert ("@tpu_custom_call" in text) == kernel and ("stablehlo.scatter" in text) != kernel
