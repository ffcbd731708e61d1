"""hlopt.sparse.BCSR, the type: layout, pytree and conversions against JAX's experimental BCSR and scipy.

JAX's `jax.experimental.sparse.BCSR` and scipy's CSR are the references: the same
`fromdense` buffers, the same dense matrix from `todense`, `to_bcoo` / `from_bcoo`
round trips (unsorted, duplicate, padded and negative-row BCOO entries included),
`from_scipy_sparse` of CSR, COO and unsorted CSR matrices; under `hlopt.jit` and
`jax.jit`, gradients w.r.t. the data, and the errors for layouts hlopt does not store.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st
from jax.experimental import sparse as jsparse

import hlopt
from hlopt import sparse as hs

DTYPES = [np.float32, pytest.param(np.float64, marks=pytest.mark.float64), np.complex64]


pytestmark = pytest.mark.usefixtures("x64_module")


def dense(shape, dtype, density=0.4, seed=0, empty_rows=()):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    a[rng.random(shape) > density] = 0
    for r in empty_rows:
        a[r] = 0
    return a.astype(dtype)


SHAPES = [((1, 1), ()), ((5, 7), (2,)), ((8, 3), (0, 7)), ((3, 9), ()), ((0, 4), ()), ((4, 0), ())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,empty_rows", SHAPES)
def test_fromdense_todense_equal_jax(dtype, shape, empty_rows):
    a = dense(shape, dtype, empty_rows=empty_rows)
    ours, ref = hs.BCSR.fromdense(a), jsparse.BCSR.fromdense(a)
    assert (ours.shape, ours.nse, ours.dtype, ours.n_batch, ours.n_dense) == (ref.shape, ref.nse, ref.dtype, 0, 0)
    for got, want in zip(ours._bufs, ref._bufs):
        np.testing.assert_array_equal(got, want)
    assert ours.indices.dtype == ref.indices.dtype == ours.indptr.dtype
    np.testing.assert_array_equal(ours.todense(), a)
    np.testing.assert_array_equal(hlopt.jit(lambda m: m.todense())(ours), a)
    np.testing.assert_array_equal(jax.jit(lambda m: m.todense())(ours), a)


@pytest.mark.float64
@pytest.mark.parametrize("nse", [0, 3, 12])
def test_fromdense_with_nse_pads_as_jax(nse):
    a = dense((4, 5), np.float64, seed=3)
    ours, ref = hs.BCSR.fromdense(a, nse=nse), jsparse.BCSR.fromdense(a, nse=nse)
    for got, want in zip(ours._bufs, ref._bufs):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ours.todense(), ref.todense())
    traced = hlopt.jit(lambda x: hs.BCSR.fromdense(x, nse=nse).todense())(a)
    np.testing.assert_array_equal(traced, ref.todense())


def test_index_dtype_and_repr():
    a = dense((3, 4), np.float32)
    m = hs.BCSR.fromdense(a, index_dtype=np.int64)
    assert m.indices.dtype == m.indptr.dtype == np.int64
    assert repr(hs.BCSR.fromdense(a)) == repr(jsparse.BCSR.fromdense(a))
    assert "BCSR(float32[3, 4], nse=" in repr(m)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc"])
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.float64)])
def test_from_scipy_sparse(fmt, dtype):
    mat = sp.random(9, 6, density=0.3, format=fmt, dtype=dtype, random_state=1)
    ours, ref = hs.BCSR.from_scipy_sparse(mat), jsparse.BCSR.from_scipy_sparse(mat)
    for got, want in zip(ours._bufs, ref._bufs):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ours.todense(), mat.toarray())
    assert ours.indices_sorted == mat.tocsr().has_sorted_indices


@pytest.mark.float64
def test_from_scipy_unsorted_and_duplicate_csr():
    # Row 0 holds columns 3, 1, 3 (unsorted, a duplicate); row 1 nothing; row 2 one entry.
    mat = sp.csr_matrix((np.array([1.0, 2.0, 4.0, 8.0]), np.array([3, 1, 3, 0]), np.array([0, 3, 3, 4])),
                        shape=(3, 4))
    assert not mat.has_sorted_indices
    ours = hs.BCSR.from_scipy_sparse(mat, index_dtype=np.int64)
    assert not ours.indices_sorted and ours.indices.dtype == np.int64
    np.testing.assert_array_equal(ours.todense(), mat.toarray())
    np.testing.assert_array_equal(ours.to_bcoo().todense(), mat.toarray())


def bcoo_entries(seed, m, k, nse, sort):
    """A BCOO matrix's entries: rows in [-2, m + 1], columns in [0, k + 1] (padding out of range), repeats."""
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.integers(-2, m + 2, nse), rng.integers(0, k + 2, nse)], 1).astype(np.int32)
    if sort:
        idx = idx[np.lexsort((idx[:, 1], idx[:, 0]))]
    return rng.standard_normal(nse), idx


def in_range_dense(data, idx, shape):
    ok = (idx >= 0).all(1) & (idx[:, 0] < shape[0]) & (idx[:, 1] < shape[1])
    return sp.coo_matrix((data[ok], (idx[ok, 0], idx[ok, 1])), shape=shape).toarray()


@pytest.mark.float64
@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 9), nse=st.integers(0, 30), seed=st.integers(0, 2**16),
       claim_sorted=st.booleans())
def test_from_bcoo_to_bcoo_random_layouts(m, k, nse, seed, claim_sorted):
    data, idx = bcoo_entries(seed, m, k, nse, sort=claim_sorted)
    arr = hs.BCOO((data, idx), shape=(m, k), indices_sorted=claim_sorted)
    want = in_range_dense(data, idx, (m, k))
    mat = hs.BCSR.from_bcoo(arr)
    assert mat.indices_sorted and mat.nse == nse and mat.indptr.shape == (m + 1,)
    ptr = np.asarray(mat.indptr)
    assert ptr[0] >= 0 and (np.diff(ptr) >= 0).all() and ptr[-1] <= nse
    np.testing.assert_allclose(mat.todense(), want, rtol=1e-12, atol=1e-12)
    back = mat.to_bcoo()
    assert isinstance(back, hs.BCOO) and back.shape == (m, k)
    np.testing.assert_allclose(back.todense(), want, rtol=1e-12, atol=1e-12)
    # The same under both compilers (the structure conversions are traced too).
    for jit in (hlopt.jit, jax.jit):
        np.testing.assert_allclose(jit(lambda a: hs.BCSR.from_bcoo(a).todense())(arr), want, rtol=1e-12,
                                   atol=1e-12)
    # JAX's BCSR of JAX's BCOO of the in-range entries gives the same matrix.
    ref = jsparse.BCSR.from_bcoo(jsparse.BCOO.fromdense(want))
    np.testing.assert_allclose(ref.todense(), mat.todense(), rtol=1e-12, atol=1e-12)


@pytest.mark.float64
def test_to_bcoo_rows_as_jax():
    a = dense((6, 5), np.float64, empty_rows=(0, 3, 5))
    ours, ref = hs.BCSR.fromdense(a, nse=14), jsparse.BCSR.fromdense(a, nse=14)
    ob, rb = ours.to_bcoo(), ref.to_bcoo()
    in_range = np.asarray(rb.indices[:, 0]) < a.shape[0]
    np.testing.assert_array_equal(np.asarray(ob.indices)[in_range], np.asarray(rb.indices)[in_range])
    assert (np.asarray(ob.indices)[~in_range, 0] >= a.shape[0]).all()  # padding stays out of range
    np.testing.assert_array_equal(ob.todense(), a)


@pytest.mark.float64
def test_hostile_indptr_reads_nothing_out_of_bounds():
    # Pointers past nse, negative, decreasing: the portable conversion stays in bounds (unspecified values).
    data, indices = jnp.arange(1.0, 5.0), jnp.array([0, 1, 2, 3], jnp.int32)
    for ptr in ([0, 9, 2, 4], [-5, 1, 3, 2], [4, 0, 0, 0], [0, 2, 4, 2**31 - 1]):
        m = hs.BCSR((data, indices, jnp.array(ptr, jnp.int32)), shape=(3, 4))
        out = np.asarray(hlopt.jit(lambda x: x.todense())(m))
        assert out.shape == (3, 4) and np.isfinite(out).all()


def test_pytree_and_jit_round_trip():
    a = dense((5, 6), np.float32, seed=4)
    m = hs.BCSR.fromdense(a)
    leaves, tree = jax.tree_util.tree_flatten(m)
    assert len(leaves) == 3
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(back, hs.BCSR) and back.shape == m.shape and back.indices_sorted
    for jit in (hlopt.jit, jax.jit):
        out = jit(lambda x: x)(m)
        assert isinstance(out, hs.BCSR) and out.shape == m.shape
        np.testing.assert_array_equal(out.todense(), a)
    with pytest.raises(ValueError, match="invalid aux_data"):
        hs.BCSR.tree_unflatten({"shape": (1, 1)}, leaves)


@pytest.mark.float64
def test_grad_with_respect_to_data_equals_jax():
    a = dense((5, 4), np.float64, seed=5)
    ours, ref = hs.BCSR.fromdense(a), jsparse.BCSR.fromdense(a)
    w = np.random.default_rng(6).standard_normal(a.shape)

    def loss(cls, m):
        return lambda d: jnp.sum(w * cls((d, m.indices, m.indptr), shape=m.shape).todense() ** 2)

    want = jax.grad(loss(jsparse.BCSR, ref))(ref.data)
    np.testing.assert_allclose(jax.grad(loss(hs.BCSR, ours))(ours.data), want, rtol=1e-12)
    np.testing.assert_allclose(hlopt.jit(jax.grad(loss(hs.BCSR, ours)))(ours.data), want, rtol=1e-12)
    # through fromdense: d/dA sum(w * todense(fromdense(A))) is w at the nonzeros of A
    got = jax.grad(lambda x: jnp.sum(w * hs.BCSR.fromdense(x, nse=ours.nse).todense()))(jax.device_put(a))
    np.testing.assert_allclose(got, np.where(a != 0, w, 0), rtol=1e-12)


def test_vmap_of_todense_over_data():
    a = dense((4, 3), np.float32, seed=7)
    m = hs.BCSR.fromdense(a)
    stack = jnp.stack([m.data, 2 * m.data])
    out = jax.vmap(lambda d: hs.BCSR((d, m.indices, m.indptr), shape=m.shape).todense())(stack)
    np.testing.assert_allclose(out, np.stack([a, 2 * a]), rtol=1e-6)


def test_empty():
    m = hs.BCSR._empty((3, 4), dtype=np.float32, nse=5)
    ref = jsparse.BCSR._empty((3, 4), dtype=np.float32, nse=5)
    for got, want in zip(m._bufs, ref._bufs):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(m.todense(), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="2 sparse dimensions"):
        hs.BCSR._empty((3, 4, 5))


@pytest.mark.float64
def test_errors():
    data, idx, ptr = jnp.ones(3), jnp.zeros(3, jnp.int32), jnp.array([0, 1, 3], jnp.int32)
    with pytest.raises(ValueError, match=r"indptr must have shape \[M \+ 1\] = \[3\]"):
        hs.BCSR((data, idx, ptr[:2]), shape=(2, 4))
    with pytest.raises(ValueError, match="one shape"):
        hs.BCSR((data[:2], idx, ptr), shape=(2, 4))
    with pytest.raises(TypeError, match="indices must be integers"):
        hs.BCSR((data, idx.astype(np.float32), ptr), shape=(2, 4))
    with pytest.raises(TypeError, match="one dtype"):
        hs.BCSR((data, idx, ptr.astype(np.int64)), shape=(2, 4))
    with pytest.raises(NotImplementedError, match="matrices only"):
        hs.BCSR((jnp.ones((2, 3)), jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3), jnp.int32)), shape=(2, 2, 4))
    with pytest.raises(NotImplementedError, match="matrices only"):
        hs.BCSR.fromdense(np.ones((2, 3, 4)), n_batch=1)
    with pytest.raises(NotImplementedError, match="n_batch = n_dense = 0"):
        hs.BCSR.from_bcoo(hs.BCOO.fromdense(np.ones((2, 3, 4)), n_batch=1))
    with pytest.raises(NotImplementedError, match="n_dense"):
        hs.BCSR.from_scipy_sparse(sp.eye(3, format="csr"), n_dense=1)
    with pytest.raises(NotImplementedError, match="Transpose"):
        hs.BCSR.fromdense(np.eye(2)).transpose()
    with pytest.raises(Exception, match="nse"):
        jax.jit(lambda x: hs.BCSR.fromdense(x).todense())(np.eye(2))
