"""The BCOO module API against jax.experimental.sparse: eye, empty, random_bcoo,
BCOO.from_scipy_sparse, the pytree/vmap protocol, and the sparse-aware grad, value_and_grad,
jacfwd, jacrev and jacobian; plus the ops whose lowering scans or binary-searches long arrays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from test_sparse_util import assert_close, strict_promotion, x64  # noqa: F401


def assert_same_bcoo(got: hs.BCOO, want: js.BCOO, dtype: str = "float32") -> None:
    """Same type, layout, flags, buffers and dense value as JAX's BCOO."""
    assert isinstance(got, hs.BCOO)
    assert (got.shape, got.n_batch, got.n_dense, got.nse) == (want.shape, want.n_batch, want.n_dense, want.nse)
    assert (got.indices_sorted, got.unique_indices) == (want.indices_sorted, want.unique_indices)
    assert got.indices.dtype == want.indices.dtype
    assert_close(got.data, want.data, dtype)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert_close(got.todense(), want.todense(), dtype)


# -- eye and empty -------------------------------------------------------------------------


@pytest.mark.parametrize("N, M, k", [(1, None, 0), (3, 5, 1), (5, 3, -2), (4, 4, -3), (2, 3, 5), (0, 3, 0)])
@pytest.mark.parametrize("n_batch, n_dense", [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)])
def test_eye_matches_jax(N, M, k, n_batch, n_dense):
    got = hs.eye(N, M, k, n_batch=n_batch, n_dense=n_dense)
    want = js.eye(N, M, k, n_batch=n_batch, n_dense=n_dense)
    assert_same_bcoo(got, want)


@pytest.mark.parametrize("dtype, index_dtype", [("float32", "int32"), ("int32", "int8"), ("complex64", "int16"),
                                                ("float64", "int64")])
def test_eye_dtypes(dtype, index_dtype):
    with x64("float64"):
        got = hs.eye(4, 6, 1, dtype=dtype, index_dtype=index_dtype)
        want = js.eye(4, 6, 1, dtype=dtype, index_dtype=index_dtype)
        assert_same_bcoo(got, want, dtype)


def test_eye_default_dtype_and_positional_dtype():
    assert hs.eye(3).dtype == js.eye(3).dtype == jnp.zeros(()).dtype
    assert hs.eye(3, 3, 0, jnp.int32).dtype == js.eye(3, 3, 0, jnp.int32).dtype == jnp.int32


@pytest.mark.parametrize("shape", [(2, 5), (5, 3), (4,), (2, 3, 4), (0, 3), ()])
@pytest.mark.parametrize("n_batch, n_dense, nse", [(0, 0, 0), (0, 0, 2), (1, 0, 3), (0, 1, 1), (1, 1, 0)])
def test_empty_matches_jax(shape, n_batch, n_dense, nse):
    if n_batch + n_dense > len(shape):
        with pytest.raises(ValueError, match="Invalid inputs"):
            hs.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse)
        return
    got = hs.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse)
    want = js.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse)
    assert_same_bcoo(got, want)
    assert hs.empty(shape, "int8", "int16").todense().dtype == jnp.int8


def test_constructor_errors():
    for fn in (lambda f: hs.empty((2, 3), sparse_format=f), lambda f: hs.eye(3, sparse_format=f)):
        for fmt in ("csr", "bcsr", "coo", "dense"):
            with pytest.raises(ValueError, match="only the 'bcoo' format"):
                fn(fmt)
    with pytest.raises(ValueError, match="Invalid inputs"):
        hs.empty((2, 3), nse=-1)
    with pytest.raises(ValueError, match="Invalid inputs"):
        hs.eye(3, n_batch=2, n_dense=1)
    with pytest.raises(TypeError):
        hs.eye(3.5)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(lambda n: hs.eye(n))(3)


def test_eye_and_empty_in_jit_and_vmap():
    """Built inside hlopt.jit, and returned from vmap as a batched BCOO (JAX's from_elt)."""
    out = hlopt.jit(lambda x: (hs.eye(4, 5, -1) * x).todense())(jnp.float32(2))
    np.testing.assert_array_equal(out, 2 * np.eye(4, 5, -1, dtype=np.float32))
    batched = jax.vmap(lambda x: hs.empty(x.shape, x.dtype))(jnp.zeros((3, 2, 4), jnp.int32))
    assert isinstance(batched, hs.BCOO) and batched.n_batch == 1 and batched.shape == (3, 2, 4)
    np.testing.assert_array_equal(batched.todense(), np.zeros((3, 2, 4), np.int32))


def test_info_and_pytree_round_trip():
    m = hs.BCOO.fromdense(jnp.arange(12.0).reshape(3, 4), n_batch=1)
    ref = js.BCOO.fromdense(jnp.arange(12.0).reshape(3, 4), n_batch=1)
    assert tuple(m._info) == tuple(ref._info) and m._info._fields == ref._info._fields
    bufs, tree = jax.tree.flatten(m)
    assert all(isinstance(b, jax.Array) for b in bufs)
    back = jax.tree.unflatten(tree, bufs)
    assert back._info == m._info and back.nse == m.nse
    x, y = jax.vmap(lambda *a: a, in_axes=(0, None), out_axes=(0, None))(m, m)
    assert x._info == m._info and y._info == m._info


# -- random_bcoo ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, n_batch, n_dense", [((5,), 0, 0), ((5, 8), 0, 0), ((5, 8), 1, 0), ((5, 8), 0, 1),
                                                      ((3, 4, 5), 1, 1), ((3, 4, 5), 2, 0), ((3, 4, 3, 2), 1, 1)])
@pytest.mark.parametrize("dtype, indices_dtype", [("float32", "int32"), ("float32", "int8"), ("bfloat16", "int16")])
def test_random_bcoo_same_buffers_as_jax(shape, n_batch, n_dense, dtype, indices_dtype):
    key = jax.random.key(1701)
    kw = dict(dtype=dtype, indices_dtype=indices_dtype, n_batch=n_batch, n_dense=n_dense)
    assert_same_bcoo(hs.random_bcoo(key, shape, **kw), js.random_bcoo(key, shape, **kw), dtype)


@pytest.mark.parametrize("kw", [dict(nse=3), dict(nse=0.5, unique_indices=False), dict(nse=0.3, sorted_indices=True),
                                dict(nse=0), dict(generator=jax.random.normal),
                                dict(generator=jax.random.randint, dtype="int32", minval=1, maxval=9)])
def test_random_bcoo_options(kw):
    key = jax.random.key(3)
    got, want = hs.random_bcoo(key, (4, 6), **kw), js.random_bcoo(key, (4, 6), **kw)
    assert_same_bcoo(got, want, "int32" if kw.get("dtype") == "int32" else "float32")


def test_random_bcoo_errors():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="Invalid n_batch"):
        hs.random_bcoo(key, (3, 4), n_batch=2, n_dense=1)
    with pytest.raises(ValueError, match="between 0 and 12"):
        hs.random_bcoo(key, (3, 4), nse=12)
    with pytest.raises(ValueError, match="enough range"):
        hs.random_bcoo(key, (20, 20), indices_dtype="int8")


# -- from_scipy_sparse ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil", "dok"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "complex64"])
def test_from_scipy_sparse_matches_jax(fmt, dtype):
    import scipy.sparse as sp  # a test dependency only (pyproject test extra)
    r = np.random.RandomState(0)
    x = (r.randn(5, 7) * (r.rand(5, 7) < 0.4)).astype(dtype)
    mat = sp.coo_matrix(x).asformat(fmt)
    assert_same_bcoo(hs.BCOO.from_scipy_sparse(mat), js.BCOO.from_scipy_sparse(mat), dtype)
    got = hs.BCOO.from_scipy_sparse(sp.coo_array(x), index_dtype="int16")
    assert got.indices.dtype == jnp.int16
    np.testing.assert_array_equal(got.todense(), x)


def test_from_scipy_sparse_duplicates_and_errors():
    import scipy.sparse as sp  # a test dependency only (pyproject test extra)
    mat = sp.coo_matrix((np.array([1.0, 2.0, 3.0], np.float32), (np.array([0, 0, 2]), np.array([1, 1, 0]))),
                        shape=(3, 2))
    got = hs.BCOO.from_scipy_sparse(mat)
    assert (got.nse, got.unique_indices, got.indices_sorted) == (3, False, False)
    np.testing.assert_array_equal(got.todense(), mat.toarray())
    with pytest.raises(NotImplementedError, match="n_dense/n_batch"):
        hs.BCOO.from_scipy_sparse(mat, n_batch=1)


# -- sparse-aware grad family -------------------------------------------------------------------


def _operands(seed=0, n_batch=0):
    r = np.random.RandomState(seed)
    x = (r.randn(4, 5) * (r.rand(4, 5) < 0.5)).astype(np.float32)
    y = r.randn(5).astype(np.float32)
    return x, y, hs.BCOO.fromdense(x, n_batch=n_batch), js.BCOO.fromdense(x, n_batch=n_batch)


def _f(X, y, with_aux=False):
    """A scalar loss through sparse products, elementwise ops and todense."""
    dense = X.todense()
    out = jnp.sum(jnp.sin(X @ y)) + jnp.sum(dense**2 * y[None, :])
    return (out, {"shape": jnp.array(X.shape)}) if with_aux else out


def _check_tree(got, want, dtype="float32"):
    got_leaves = jax.tree.leaves(got, is_leaf=lambda v: isinstance(v, (hs.BCOO, js.BCOO)))
    want_leaves = jax.tree.leaves(want, is_leaf=lambda v: isinstance(v, (hs.BCOO, js.BCOO)))
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, js.BCOO):
            assert_same_bcoo(g, w, dtype)
        else:
            assert not isinstance(g, hs.BCOO)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("has_aux", [False, True])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0), (0,)])
@pytest.mark.parametrize("n_batch", [0, 1])
def test_grad_and_value_and_grad_match_jax(has_aux, argnums, n_batch):
    x, y, Xh, Xj = _operands(n_batch=n_batch)
    f = lambda X, y: _f(X, y, has_aux)  # noqa: E731
    with jax.default_matmul_precision("highest"):
        _check_tree(hs.grad(f, argnums, has_aux)(Xh, y), js.grad(f, argnums, has_aux)(Xj, y))
        (vh, gh), (vj, gj) = (hs.value_and_grad(f, argnums, has_aux)(Xh, y),
                              js.value_and_grad(f, argnums, has_aux)(Xj, y))
    _check_tree(vh, vj)
    _check_tree(gh, gj)
    grad_sp = hs.grad(f, has_aux=has_aux)(Xh, y)
    grad_sp = grad_sp[0] if has_aux else grad_sp
    dense_grad = jax.grad(lambda d: _f(hs.BCOO((d, Xh.indices), shape=Xh.shape), y))(Xh.data)
    np.testing.assert_allclose(grad_sp.data, dense_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["jacfwd", "jacrev", "jacobian"])
@pytest.mark.parametrize("has_aux", [False, True])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians_match_jax(name, has_aux, argnums):
    """Jacobians with respect to a BCOO are BCOOs whose leading batch dims are the output dims."""
    x, y, Xh, Xj = _operands(1)

    def f(X, y):
        out = X @ y + jnp.sum(X.todense(), axis=1) * y[:4]
        return (out, out.sum()) if has_aux else out

    with jax.default_matmul_precision("highest"):
        got = getattr(hs, name)(f, argnums, has_aux)(Xh, y)
        want = getattr(js, name)(f, argnums, has_aux)(Xj, y)
    _check_tree(got, want)
    jac = (got[0] if has_aux else got)
    jac = jac[0] if isinstance(argnums, tuple) else jac
    assert isinstance(jac, hs.BCOO) and jac.n_batch == 1 and jac.shape == (4, 4, 5)


def test_grad_of_pytree_of_bcoos_and_kwargs():
    x, y, Xh, Xj = _operands(2)
    f = lambda t, y, scale=1.0: scale * (_f(t["a"], y) + jnp.sum(t["b"][0].todense()))  # noqa: E731
    th = {"a": Xh, "b": (Xh.T, jnp.ones(2))}
    tj = {"a": Xj, "b": (Xj.T, jnp.ones(2))}
    with jax.default_matmul_precision("highest"):
        # Call-time keywords reach the function (JAX's sparse.grad passes them to jax.grad instead and fails).
        ga, (gb, gc) = (lambda g: (g["a"], g["b"]))(js.grad(f)(tj, y))
        twice = lambda m: js.BCOO((2 * m.data, m.indices), **m._info._asdict())  # noqa: E731
        want = {"a": twice(ga), "b": (twice(gb), 2 * gc)}
        _check_tree(hs.grad(f)(th, y, scale=2.0), want)
        _check_tree(hs.grad(f, argnums=(0, 1))(th, y), js.grad(f, argnums=(0, 1))(tj, y))


def test_grad_options_and_errors():
    x, y, Xh, _ = _operands()
    with pytest.raises(ValueError, match="out of range"):
        hs.grad(_f, argnums=2)(Xh, y)
    with pytest.raises(TypeError, match="scalar-output"):
        hs.grad(lambda X: X.todense())(Xh)
    with pytest.raises(TypeError):
        hs.grad(_f, argnums=1.5)
    ints = hs.BCOO.fromdense(jnp.array([0, 2, 3], jnp.int32))
    with pytest.raises(TypeError, match="integer"):
        hs.grad(lambda X: jnp.sum(X.todense()).astype(jnp.float32))(ints)
    g = hs.grad(lambda X: jnp.sum(X.todense()).astype(jnp.float32), allow_int=True)(ints)
    assert isinstance(g, hs.BCOO) and g.data.dtype == jax.dtypes.float0
    z = hs.BCOO.fromdense(jnp.array([1 + 1j, 0, 2j], jnp.complex64))
    gz = hs.grad(lambda X: jnp.sum(X.todense() ** 2), holomorphic=True)(z)
    np.testing.assert_allclose(gz.data, 2 * z.data, rtol=1e-6)
    assert hs.grad(_f).__name__ == "_f"


# -- long scans and searches in the lowering (blocked prefix scan, looped binary search) ------


@pytest.mark.parametrize("n", [15, 16, 17, 257, 5000])
def test_fromdense_and_sum_duplicates_long_rows(n):
    """Row lengths around and past the scan's block sizes (16, 256, 4096), against JAX."""
    r = np.random.RandomState(n)
    x = (r.randn(2, n) * (r.rand(2, n) < 0.3)).astype(np.float32)
    nse = int((x != 0).sum(1).max())
    got = hlopt.jit(lambda x: hs.BCOO.fromdense(x, nse=nse, n_batch=1).todense())(x)
    np.testing.assert_array_equal(got, x)
    idx = r.randint(0, 40, size=(n, 2)).astype(np.int32)
    data = r.randn(n).astype(np.float32)
    want = js.bcoo_sum_duplicates(js.BCOO((data, idx), shape=(40, 40)), nse=n)
    out = hlopt.jit(lambda d, i: hs.bcoo_sum_duplicates(hs.BCOO((d, i), shape=(40, 40)), nse=n))(data, idx)
    np.testing.assert_allclose(out.todense(), want.todense(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nse", [17, 300])
def test_spdot_and_multiply_sparse_long_entry_lists(nse):
    r = np.random.RandomState(nse)
    mats = []
    for _ in range(2):
        idx = r.randint(0, 30, size=(nse, 2)).astype(np.int32)
        mats.append((r.randn(nse).astype(np.float32), idx))
    (a, ai), (c, ci) = mats
    H = lambda d, i: hs.BCOO((d, i), shape=(30, 30))  # noqa: E731
    J = lambda d, i: js.BCOO((d, i), shape=(30, 30))  # noqa: E731
    mm = (((1,), (0,)), ((), ()))
    got = hlopt.jit(lambda *b: hs.bcoo_spdot_general(H(*b[:2]), H(*b[2:]), dimension_numbers=mm).todense())(a, ai, c, ci)
    want = (J(a, ai) @ J(c, ci)).todense()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    got = hlopt.jit(lambda *b: (H(*b[:2]) * H(*b[2:])).todense())(a, ai, c, ci)
    np.testing.assert_allclose(got, (J(a, ai) * J(c, ci)).todense(), rtol=1e-5, atol=1e-5)
