"""`tpu-sparse-products`: BCOO SpMV and SpMM for a TPU compile, checked on CPU.

The pass emits plain StableHLO (gathers, a sort, a scatter-add), so its programs run on CPU
too: made plain for a TPU (`Lowered.apply(..., platform="tpu")`), then compiled here, their results must be numpy's
dense products on drawn matrices with empty rows, duplicates, padding indices (index >= the
dimension), no entries, sizes that are not multiples of the 8-lane window, every float type,
sorted and unsorted entries, and through the sort-first and the chunked paths. Without a TPU
target the annotation stays for `lower-bcoo`. The Pallas kernels are unregistered here, so products
take the gathers and scatter-adds (test_tpu_products.py tests the kernels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hlopt
from hlopt import sparse as hs
from hlopt.passes import registry
from hlopt.passes.tpu import sparse_products

TOL = {np.float32: 1e-5, np.float64: 1e-12, jnp.bfloat16: 5e-2}

pytestmark = pytest.mark.usefixtures("x64_module", "no_kernel")


@pytest.fixture
def no_kernel():
    kept = sparse_products.register_product_kernel(None)
    yield
    sparse_products.register_product_kernel(kept)


def entries(rng: np.random.Generator, m: int, k: int, nse: int, sort: bool) -> np.ndarray:
    """`indices[nse, 2]` with rows and columns up to 2 past the shape (padding) and repeats (duplicates)."""
    idx = np.stack([rng.integers(0, m + 2, nse), rng.integers(0, k + 2, nse)], 1).astype(np.int32)
    return idx[np.lexsort(idx.T[::-1])] if sort else idx


def dense_product(data: np.ndarray, idx: np.ndarray, shape: tuple[int, int], x: np.ndarray) -> np.ndarray:
    """numpy's `A @ x` of the in-range entries, in float64."""
    a = np.zeros(shape)
    ok = (idx[:, 0] < shape[0]) & (idx[:, 1] < shape[1])
    np.add.at(a, (idx[ok, 0], idx[ok, 1]), data[ok].astype(np.float64))
    return a @ x.astype(np.float64)


def for_tpu(lowered: hlopt.Lowered) -> hlopt.Compiled:
    """`lowered` made plain as for a TPU (hlopt-default, `tpu-sparse-products` included), compiled here."""
    return lowered.apply("hlopt-default", platform="tpu").compile("")


def product(data, idx, shape, x, sort: bool) -> np.ndarray:
    f = lambda d, i, v: hs.BCOO((d, i), shape=shape, indices_sorted=sort) @ v  # noqa: E731
    return np.asarray(for_tpu(hlopt.lower(f, data, idx, x))(data, idx, x), np.float64)


def check(seed: int, m: int, k: int, nse: int, columns: int | None, sort: bool, dtype=np.float32) -> None:
    rng = np.random.default_rng(seed)
    idx = entries(rng, m, k, nse, sort)
    data = rng.standard_normal(nse).astype(dtype)
    x = rng.standard_normal((k,) if columns is None else (k, columns)).astype(dtype)
    got = product(data, idx, (m, k), x, sort)
    want = dense_product(data, idx, (m, k), x)
    scale = 1 + np.abs(want).max(initial=0)
    np.testing.assert_allclose(got, want, atol=TOL[dtype] * scale * np.sqrt(max(nse, 1)))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), m=st.integers(1, 19), k=st.integers(1, 21), nse=st.integers(0, 60),
       columns=st.sampled_from([None, 1, 3, 8]), sort=st.booleans())
def test_matches_numpy_on_drawn_matrices(seed, m, k, nse, columns, sort):
    check(seed, m, k, nse, columns, sort)


@pytest.mark.parametrize("dtype", [np.float64, jnp.bfloat16])
@pytest.mark.parametrize("columns", [None, 5])
def test_float_types(dtype, columns):
    check(1, 9, 17, 40, columns, True, dtype)


def test_sorted_first_when_large(monkeypatch):
    """An unsorted SpMM at or above the sort thresholds is sorted by row first; the result is unchanged."""
    monkeypatch.setattr(sparse_products, "SORT_MIN_ENTRIES", 8)
    monkeypatch.setattr(sparse_products, "SORT_MIN_COLUMNS", 2)
    rng = np.random.default_rng(2)
    idx = entries(rng, 11, 13, 50, sort=False)
    data, x = rng.standard_normal(50).astype(np.float32), rng.standard_normal((13, 4)).astype(np.float32)
    f = lambda d, i, v: hs.BCOO((d, i), shape=(11, 13)) @ v  # noqa: E731
    text = hlopt.lower(f, data, idx, x).apply("tpu-sparse-products", platform="tpu").as_text()
    assert "stablehlo.sort" in text and "indices_are_sorted = true" in text
    np.testing.assert_allclose(product(data, idx, (11, 13), x, False), dense_product(data, idx, (11, 13), x),
                               atol=1e-4)


@pytest.mark.parametrize("columns", [None, 3])
def test_chunked(monkeypatch, columns):
    """Past CHUNK_BYTES of gathered rows the product runs as a loop over chunks, padding entries included."""
    monkeypatch.setattr(sparse_products, "CHUNK_BYTES", 100)
    rng = np.random.default_rng(3)
    idx = entries(rng, 7, 10, 37, sort=True)
    data = rng.standard_normal(37).astype(np.float32)
    x = rng.standard_normal((10,) if columns is None else (10, columns)).astype(np.float32)
    f = lambda d, i, v: hs.BCOO((d, i), shape=(7, 10), indices_sorted=True) @ v  # noqa: E731
    assert "stablehlo.while" in hlopt.lower(f, data, idx, x).apply("tpu-sparse-products", platform="tpu").as_text()
    np.testing.assert_allclose(product(data, idx, (7, 10), x, True), dense_product(data, idx, (7, 10), x), atol=1e-4)


def test_rewrites_only_for_a_tpu_target():
    rng = np.random.default_rng(4)
    idx = entries(rng, 6, 9, 20, sort=False)
    data, x = rng.standard_normal(20).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    lowered = hlopt.lower(lambda d, i, v: hs.BCOO((d, i), shape=(6, 9)) @ v, data, idx, x)
    assert "hlopt.bcoo.dot_general" in lowered.apply("tpu-sparse-products").as_text()
    assert "hlopt.bcoo.dot_general" in lowered.apply("tpu-sparse-products", platform="cpu").as_text()
    text = lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    assert "hlopt.bcoo" not in text and "slice_sizes = array<i64: 1, 8>" in text


def test_gradient_through_the_rewrite():
    """jax.grad of a product (its transpose is another dot_general) matches JAX's gradient of the dense product."""
    rng = np.random.default_rng(5)
    idx = entries(rng, 8, 12, 30, sort=False)
    data, x = rng.standard_normal(30).astype(np.float32), rng.standard_normal((12, 3)).astype(np.float32)
    f = lambda d, v: jnp.sum(jnp.sin(hs.BCOO((d, idx), shape=(8, 12)) @ v))  # noqa: E731
    got = for_tpu(hlopt.lower(jax.grad(f, argnums=1), data, x))(data, x)
    mask = (idx[:, 0] < 8) & (idx[:, 1] < 12)
    dense = np.zeros((8, 12), np.float32)
    np.add.at(dense, (idx[mask, 0], idx[mask, 1]), data[mask])
    want = jax.grad(lambda v: jnp.sum(jnp.sin(jax.device_put(dense) @ v)))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_registered_before_lower_bcoo_and_tpu_only():
    cls = registry.get_pass_class("tpu-sparse-products")
    assert cls.platforms == ("tpu",)
    default = registry.PIPELINES["hlopt-default"].split(",")
    assert default.index("tpu-sparse-products") < default.index("lower-bcoo")


@pytest.mark.parametrize("columns", [None, 4])
def test_bcsr(columns):
    """A CSR matrix with empty rows, duplicates and a column past the shape (padding) gives numpy's product."""
    rng = np.random.default_rng(6)
    m, k = 9, 11
    counts = rng.integers(0, 4, m)
    counts[3] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    nse = int(indptr[-1])
    cols = rng.integers(0, k + 2, nse).astype(np.int32)
    cols[1] = cols[0]
    data = rng.standard_normal(nse).astype(np.float32)
    x = rng.standard_normal((k,) if columns is None else (k, columns)).astype(np.float32)
    f = lambda d, i, p, v: hs.BCSR((d, i, p), shape=(m, k)) @ v  # noqa: E731
    lowered = hlopt.lower(f, data, cols, indptr, x)
    assert "hlopt.bcoo" not in lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    got = for_tpu(lowered)(data, cols, indptr, x)
    rows = np.repeat(np.arange(m), counts)
    want = dense_product(data, np.stack([rows, cols], 1), (m, k), x)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=1e-5)
