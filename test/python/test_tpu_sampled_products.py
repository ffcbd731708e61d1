"""`tpu-sparse-products` on sampled products (SDDMM) and transposed products `A^T @ x` (a gradient's), checked on CPU.

Made plain as for a TPU and compiled here, the programs must give numpy's dense results on drawn
operands: every contracted dimension of A and B, permuted sampled dims, entries unsorted, repeated,
out of range (padding) or absent, float types; the transposed product from the registered kernel
(in Pallas's interpreter) and from the gathers and scatter-adds; the two-layer GCN's loss and
gradient against JAX's on the dense matrix. Layouts the rule does not take (batch and dense dims)
keep the annotation for `lower-bcoo` and still compute JAX's product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from hlopt.passes.tpu import sparse_products
from hlopt.sparse import products


def for_tpu(lowered: hlopt.Lowered) -> hlopt.Compiled:
    """`lowered` made plain as for a TPU (hlopt-default), compiled here."""
    return lowered.apply("hlopt-default", platform="tpu").compile("")


def sampled_indices(rng: np.random.Generator, m: int, n: int, nse: int) -> np.ndarray:
    """Unsorted `[nse, 2]` indices up to one past the shape (padding), a third of them repeats."""
    idx = np.stack([rng.integers(0, m + 1, nse), rng.integers(0, n + 1, nse)], 1).astype(np.int32)
    idx[2::3] = idx[: len(idx[2::3])]
    return idx


def dense_sampled(a: np.ndarray, bm: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """numpy's `(a @ bm)` at `idx` in float64, 0 where an index is out of range."""
    full = a.astype(np.float64) @ bm.astype(np.float64)
    ok = (idx[:, 0] < full.shape[0]) & (idx[:, 1] < full.shape[1])
    return np.where(ok, full[np.minimum(idx[:, 0], full.shape[0] - 1), np.minimum(idx[:, 1], full.shape[1] - 1)], 0)


DIMS = {"A @ B": (1, 0), "A^T @ B": (0, 0), "A @ B^T": (1, 1)}


def sampled(a, bm, idx, contracted, permutation=None):
    """hlopt's sampled product, A and B stored with the contracted dims `contracted`, compiled as for a TPU."""
    lc, rc = contracted
    a_in, b_in = (a if lc == 1 else a.T), (bm if rc == 0 else bm.T)
    dims = (((lc,), (rc,)), ((), ()))
    f = lambda x, y, i: products.dot_general_sampled(x, y, i, dims, permutation)  # noqa: E731
    lowered = hlopt.lower(f, a_in, b_in, idx)
    text = lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    if len(idx):  # an empty result is left to lower-bcoo's zeros
        assert "hlopt.bcoo" not in text and "stablehlo.dot_general" not in text
    return np.asarray(for_tpu(lowered)(a_in, b_in, idx), np.float64)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), m=st.integers(1, 13), k=st.integers(1, 9), n=st.integers(1, 11),
       nse=st.integers(0, 40), contracted=st.sampled_from(sorted(DIMS.values())))
def test_sampled_matches_numpy(seed, m, k, n, nse, contracted):
    rng = np.random.default_rng(seed)
    a, bm = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    idx = sampled_indices(rng, m, n, nse)
    want = dense_sampled(a, bm, idx)
    np.testing.assert_allclose(sampled(a, bm, idx, contracted), want, atol=1e-5 * (1 + np.abs(want).max(initial=0)))


def test_sampled_permuted_dims():
    """Permutation (1, 0): the index's first column is B's column."""
    rng = np.random.default_rng(1)
    a, bm = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 9)).astype(np.float32)
    idx = sampled_indices(rng, 9, 6, 25)
    want = dense_sampled(a, bm, idx[:, ::-1])
    np.testing.assert_allclose(sampled(a, bm, idx, (1, 0), (1, 0)), want, atol=1e-5)


@pytest.mark.parametrize(("dtype", "tol"), [(np.float64, 1e-12), (jnp.bfloat16, 5e-2)])
def test_sampled_float_types(x64_module, dtype, tol):
    rng = np.random.default_rng(2)
    a, bm = rng.standard_normal((7, 5)), rng.standard_normal((5, 8))
    idx = sampled_indices(rng, 7, 8, 30)
    got = sampled(a.astype(dtype), bm.astype(dtype), idx, (1, 0))
    want = dense_sampled(np.asarray(a.astype(dtype), np.float64), np.asarray(bm.astype(dtype), np.float64), idx)
    np.testing.assert_allclose(got, want, atol=tol * (1 + np.abs(want).max()))


@pytest.mark.parametrize(("n_batch", "n_dense"), [(1, 0), (0, 1)])
def test_sampled_layouts_left_to_lower_bcoo(n_batch, n_dense):
    """A batched sampled matrix, or one with a dense dim, keeps its annotation for `lower-bcoo`, which computes it."""
    rng = np.random.default_rng(3)
    a, bm = rng.standard_normal((2, 4, 3)).astype(np.float32), rng.standard_normal((2, 3, 5)).astype(np.float32)
    dims = (((2,), (1,)), ((0,), (0,)))
    m = hs.BCOO.fromdense(jnp.asarray(rng.standard_normal((2, 4, 5)) > 0, jnp.float32), n_batch=n_batch,
                          n_dense=n_dense)
    f = lambda x, y, i: hs.bcoo_dot_general_sampled(x, y, i, dimension_numbers=dims)  # noqa: E731
    lowered = hlopt.lower(f, a, bm, m.indices)
    assert "hlopt.bcoo.dot_general_sampled" in lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    want = js.bcoo_dot_general_sampled(a, bm, m.indices, dimension_numbers=dims)
    np.testing.assert_allclose(np.asarray(for_tpu(lowered)(a, bm, m.indices)), np.asarray(want), atol=1e-5)


@pytest.fixture
def no_kernel():
    kept = sparse_products.register_product_kernel(None)
    yield
    sparse_products.register_product_kernel(kept)


def dense_of(data: np.ndarray, idx: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The float64 dense matrix of the in-range entries, duplicates added."""
    out = np.zeros(shape)
    ok = (idx[:, 0] < shape[0]) & (idx[:, 1] < shape[1])
    np.add.at(out, (idx[ok, 0], idx[ok, 1]), data[ok].astype(np.float64))
    return out


@pytest.mark.parametrize("kernel", ["no_kernel", "interpreted"])
@pytest.mark.parametrize("columns", [None, 5])
@pytest.mark.parametrize("sort", [False, True])
def test_transposed_product(request, kernel, columns, sort):
    """`A^T @ x` (contracting the matrix's rows) is rewritten, by the kernel where registered, and is numpy's."""
    request.getfixturevalue(kernel)
    m, k, nse = 23, 140, 300
    rng = np.random.default_rng(4)
    idx = np.stack([rng.integers(0, m + 2, nse), rng.integers(0, k + 2, nse)], 1).astype(np.int32)
    idx[::5, 1] = 3  # a column with many entries
    idx[idx[:, 1] == 7, 1] = 8  # and an empty one
    if sort:
        idx = idx[np.lexsort(idx.T[::-1])]
    data = rng.standard_normal(nse).astype(np.float32)
    x = rng.standard_normal((m,) if columns is None else (m, columns)).astype(np.float32)
    dims = (((0,), (0,)), ((), ()))
    f = lambda d, i, v: hs.bcoo_dot_general(hs.BCOO((d, i), shape=(m, k), indices_sorted=sort), v,  # noqa: E731
                                            dimension_numbers=dims)
    lowered = hlopt.lower(f, data, idx, x)
    text = lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    assert "hlopt.bcoo" not in text and ("call @hlopt_tpu_product_main" in text) == (kernel == "interpreted")
    want = dense_of(data, idx, (m, k)).T @ x
    np.testing.assert_allclose(np.asarray(for_tpu(lowered)(data, idx, x), np.float64), want,
                               atol=1e-5 * (1 + np.abs(want).max()))


def gcn_loss(w1, w2, x, a):
    """A two-layer GCN's squared output, `a` a BCOO matrix or a dense one."""
    h = jax.nn.relu(a @ (x @ w1))
    return jnp.mean((a @ (h @ w2)) ** 2)


@pytest.mark.parametrize("kernel", ["no_kernel", "interpreted"])
def test_gcn_forward_and_gradient(request, kernel):
    """The GCN's loss and gradient in its weights (two products and two transposed ones) are JAX's on the dense matrix."""
    request.getfixturevalue(kernel)
    n, f, nse = 40, 8, 200
    rng = np.random.default_rng(5)
    idx = np.stack([rng.integers(0, n, nse), rng.integers(0, n, nse)], 1).astype(np.int32)
    idx = idx[np.lexsort(idx.T[::-1])]
    data = rng.standard_normal(nse).astype(np.float32)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((n, f), (f, f), (f, f)))

    def step(w1, w2, d, i):
        return jax.value_and_grad(gcn_loss, argnums=(0, 1))(w1, w2, x, hs.BCOO((d, i), shape=(n, n), indices_sorted=True))

    lowered = hlopt.lower(step, w1, w2, data, idx)
    assert "hlopt.bcoo" not in lowered.apply("tpu-sparse-products", platform="tpu").as_text()
    got = for_tpu(lowered)(w1, w2, data, idx)
    want = jax.value_and_grad(gcn_loss, argnums=(0, 1))(w1, w2, x, jnp.asarray(dense_of(data, idx, (n, n)), jnp.float32))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4 * (1 + np.abs(w).max()))
