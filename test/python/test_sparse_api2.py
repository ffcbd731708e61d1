"""The BCOO module API against jax.experimental.sparse: eye, empty, random_bcoo,
BCOO.from_scipy_sparse, the pytree/vmap protocol, and the sparse-aware grad, value_and_grad,
jacfwd, jacrev and jacobian; plus the ops whose lowering scans or binary-searches long arrays."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from hlopt.sparse import bcoo as hbcoo

from support.sparse_util import LAYOUTS, SHAPE, assert_close, buffers, strict_promotion, x64  # noqa: F401


def assert_same_bcoo(got: hs.BCOO, want: js.BCOO, dtype: str = "float32") -> None:
    """Same type, layout, flags and buffers as JAX's BCOO."""
    assert isinstance(got, hs.BCOO)
    assert (got.shape, got.n_batch, got.n_dense, got.nse) == (want.shape, want.n_batch, want.n_dense, want.nse)
    assert (got.indices_sorted, got.unique_indices) == (want.indices_sorted, want.unique_indices)
    assert got.indices.dtype == want.indices.dtype
    assert_close(got.data, want.data, dtype)
    np.testing.assert_array_equal(got.indices, want.indices)


def assert_same_bcoos(got: list[hs.BCOO], want: list[js.BCOO], dtypes: list[str] | None = None) -> None:
    """`assert_same_bcoo` for each pair, and the same dense values: hlopt's `todense` of every
    array in ONE hlopt.jit program against JAX's in one jax.jit program (one compile per side)."""
    dtypes = dtypes or ["float32"] * len(want)
    assert len(got) == len(want) == len(dtypes)
    for g, w, d in zip(got, want, dtypes):
        assert_same_bcoo(g, w, d)
    got_dense = hlopt.jit(lambda ms: [m.todense() for m in ms])(list(got))
    want_dense = jax.jit(lambda ms: [m.todense() for m in ms])(list(want))
    for g, w, d in zip(got_dense, want_dense, dtypes):
        assert_close(g, w, d)


def dense_of_coo(data: np.ndarray, indices: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The dense array of COO buffers in float64, duplicates summed (NumPy, the reference)."""
    out = np.zeros(shape, np.float64)
    np.add.at(out, tuple(indices.T), data)
    return out


# -- eye and empty -------------------------------------------------------------------------


EYE_ARGS = [(1, None, 0), (3, 5, 1), (5, 3, -2), (4, 4, -3), (2, 3, 5), (0, 3, 0)]
EYE_LAYOUTS = [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]


def test_eye_matches_jax():
    """Every (N, M, k) x layout. Layouts with n_dense > 0 or n_batch > 1 take the dense route
    (fromdense without nse, which needs concrete values: eager only, as in JAX); the others are
    built under one hlopt.jit (one compile), and once eagerly per route."""
    cases = [(N, M, k, nb, nd) for N, M, k in EYE_ARGS for nb, nd in EYE_LAYOUTS]
    traceable = [c for c in cases if c[4] == 0 and c[3] <= 1]
    # On the dense route N, M, k only reach jnp.eye: two diagonals (above, below) per layout
    # cover it; (N, M, k) without a diagonal return hs.empty before the route and stay.
    eager = [c for c in cases if c not in traceable and (c[:3] in [(3, 5, 1), (5, 3, -2)] or c[:3] in
                                                         [(2, 3, 5), (0, 3, 0)])]
    eager += [(3, 5, 1, 0, 0), (5, 3, -2, 1, 0)]
    build = lambda mod, cs: [mod.eye(N, M, k, n_batch=nb, n_dense=nd) for N, M, k, nb, nd in cs]  # noqa: E731
    got = hlopt.jit(lambda _: build(hs, traceable))(0) + build(hs, eager)
    want = jax.jit(lambda _: build(js, traceable))(0) + build(js, eager)
    assert_same_bcoos(got, want)


def test_eye_dtypes():
    cases = [("float32", "int32"), ("int32", "int8"), ("complex64", "int16"), ("float64", "int64")]
    with x64("float64"):
        build = lambda mod: [mod.eye(4, 6, 1, dtype=d, index_dtype=i) for d, i in cases]  # noqa: E731
        assert_same_bcoos(hlopt.jit(lambda _: build(hs))(0), build(js), [d for d, _ in cases])


def test_eye_default_dtype_and_positional_dtype():
    assert hs.eye(3).dtype == js.eye(3).dtype == jnp.zeros(()).dtype
    assert hs.eye(3, 3, 0, jnp.int32).dtype == js.eye(3, 3, 0, jnp.int32).dtype == jnp.int32


EMPTY_SHAPES = [(2, 5), (5, 3), (4,), (2, 3, 4), (0, 3), ()]
EMPTY_LAYOUTS = [(0, 0, 0), (0, 0, 2), (1, 0, 3), (0, 1, 1), (1, 1, 0)]


def test_empty_matches_jax():
    """Every shape x layout (eager: hs.empty binds no hlopt op), the dense values of all in one
    program; a layout with more batch+dense dims than the shape raises as in JAX."""
    got, want = [], []
    for shape in EMPTY_SHAPES:
        for n_batch, n_dense, nse in EMPTY_LAYOUTS:
            if n_batch + n_dense > len(shape):
                with pytest.raises(ValueError, match="Invalid inputs"):
                    hs.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse)
                continue
            got.append(hs.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse))
            want.append(js.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse))
    assert_same_bcoos(got, want)
    ints = hlopt.jit(lambda _: [hs.empty(shape, "int8", "int16").todense() for shape in EMPTY_SHAPES])(0)
    for shape, dense in zip(EMPTY_SHAPES, ints):
        assert dense.dtype == jnp.int8
        np.testing.assert_array_equal(dense, np.zeros(shape, np.int8))


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


RANDOM_LAYOUTS = [((5,), 0, 0), ((5, 8), 0, 0), ((5, 8), 1, 0), ((5, 8), 0, 1), ((3, 4, 5), 1, 1), ((3, 4, 5), 2, 0),
                  ((3, 4, 3, 2), 1, 1)]
RANDOM_DTYPES = [("float32", "int32"), ("float32", "int8"), ("bfloat16", "int16")]
RANDOM_OPTIONS = [dict(nse=3), dict(nse=0.5, unique_indices=False), dict(nse=0.3, sorted_indices=True), dict(nse=0),
                  dict(generator=jax.random.normal), dict(generator=jax.random.randint, dtype="int32", minval=1, maxval=9)]


def test_random_bcoo_same_buffers_as_jax():
    """Layouts, dtype pairs and every option, all in one hlopt.jit program against one jax.jit
    program (random_bcoo is a pure function of the key); the first case also eagerly."""
    key = jax.random.key(1701)
    # The dtypes only reach the generator and one astype, independently of the layout: every layout
    # with the first pair, every pair with the layouts that have batch and dense dims.
    cases = [(shape, dict(dtype=d, indices_dtype=i, n_batch=nb, n_dense=nd)) for shape, nb, nd in RANDOM_LAYOUTS
             for d, i in RANDOM_DTYPES if (d, i) == RANDOM_DTYPES[0] or (nb, nd) == (1, 1)]
    cases += [((4, 6), kw) for kw in RANDOM_OPTIONS]
    dtypes = [kw.get("dtype", "float32") for _, kw in cases]
    build = lambda mod, k: [mod.random_bcoo(k, shape, **kw) for shape, kw in cases]  # noqa: E731
    assert_same_bcoos(hlopt.jit(partial(build, hs))(key), jax.jit(partial(build, js))(key), dtypes)
    shape, kw = cases[0]
    assert_same_bcoo(hs.random_bcoo(key, shape, **kw), js.random_bcoo(key, shape, **kw))


def test_random_bcoo_errors():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="Invalid n_batch"):
        hs.random_bcoo(key, (3, 4), n_batch=2, n_dense=1)
    with pytest.raises(ValueError, match="between 0 and 12"):
        hs.random_bcoo(key, (3, 4), nse=12)
    with pytest.raises(ValueError, match="enough range"):
        hs.random_bcoo(key, (20, 20), indices_dtype="int8")


# -- from_scipy_sparse ------------------------------------------------------------------------


def test_from_scipy_sparse_matches_jax():
    """Every scipy format x dtype (eager: from_scipy_sparse binds no hlopt op), dense values in one program."""
    import scipy.sparse as sp  # a test dependency only (pyproject test extra)
    r = np.random.RandomState(0)
    got, want, dtypes = [], [], []
    for dtype in ["float32", "int32", "complex64"]:
        x = (r.randn(5, 7) * (r.rand(5, 7) < 0.4)).astype(dtype)
        for fmt in ["csr", "csc", "coo", "lil", "dok"]:
            mat = sp.coo_matrix(x).asformat(fmt)
            got.append(hs.BCOO.from_scipy_sparse(mat))
            ref = js.BCOO.from_scipy_sparse(mat)  # JAX's flags are always False: canonical inputs give True
            canonical = fmt in ("csr", "coo") and mat.has_canonical_format
            want.append(js.BCOO((ref.data, ref.indices), shape=ref.shape, indices_sorted=canonical,
                                unique_indices=canonical))
            dtypes.append(dtype)
        narrow = hs.BCOO.from_scipy_sparse(sp.coo_array(x), index_dtype="int16")
        assert narrow.indices.dtype == jnp.int16
        got.append(narrow)
        ref = js.BCOO.from_scipy_sparse(sp.coo_array(x), index_dtype="int16")
        want.append(js.BCOO((ref.data, ref.indices), shape=ref.shape, indices_sorted=True, unique_indices=True))
        dtypes.append(dtype)
    assert_same_bcoos(got, want, dtypes)


def test_from_scipy_sparse_duplicates_and_errors():
    import scipy.sparse as sp  # a test dependency only (pyproject test extra)
    mat = sp.coo_matrix((np.array([1.0, 2.0, 3.0], np.float32), (np.array([0, 0, 2]), np.array([1, 1, 0]))),
                        shape=(3, 2))
    got = hs.BCOO.from_scipy_sparse(mat)
    assert (got.nse, got.unique_indices, got.indices_sorted) == (3, False, False)
    np.testing.assert_array_equal(got.todense(), mat.toarray())
    with pytest.raises(NotImplementedError, match="n_dense/n_batch"):
        hs.BCOO.from_scipy_sparse(mat, n_batch=1)


@pytest.mark.parametrize("fmt", ["csr", "coo", "csr_unsorted", "csr_duplicates", "csc", "coo_raw"])
def test_from_scipy_sparse_keeps_what_scipy_knows_of_the_order(fmt):
    """A canonical CSR or COO matrix gives sorted, unique indices (a CSR one with duplicates sorted
    ones); products on them equal scipy's."""
    import scipy.sparse as sp  # a test dependency only (pyproject test extra)
    r = np.random.RandomState(1)
    x = (r.randn(6, 5) * (r.rand(6, 5) < 0.5)).astype(np.float32)
    rows, cols = np.nonzero(x)
    order = r.permutation(len(rows))
    mats = {
        "csr": (sp.csr_array(x), (True, True)),
        "coo": (sp.csr_array(x).tocoo(), (True, True)),
        "csr_unsorted": (sp.csr_array((x[rows, cols][order[::-1]], (rows[order[::-1]], cols[order[::-1]])),
                                      shape=x.shape), None),
        "csr_duplicates": (sp.csr_array((np.r_[x[rows, cols], 1.0], np.r_[cols, cols[-1:]],
                                         np.r_[np.searchsorted(rows, np.arange(6)), len(rows) + 1]), shape=x.shape),
                           (True, False)),
        "csc": (sp.csc_array(x), (False, False)),
        "coo_raw": (sp.coo_array((x[rows, cols][order], (rows[order], cols[order])), shape=x.shape), (False, False)),
    }
    mat, flags = mats[fmt]
    if flags is None:  # scipy's csr constructor from (data, (row, col)) may sort: trust what it says
        flags = (bool(mat.has_sorted_indices), bool(mat.has_canonical_format))
    got = hs.BCOO.from_scipy_sparse(mat)
    assert (got.indices_sorted, got.unique_indices) == flags
    idx = np.asarray(got.indices)
    keys = idx[:, 0] * x.shape[1] + idx[:, 1]
    if flags[0]:
        assert np.all(np.diff(keys) >= 0)  # the flag is true of the buffers
    if flags[1]:
        assert len(set(keys.tolist())) == len(keys)
    v = r.randn(5).astype(np.float32)
    np.testing.assert_allclose(hs.bcoo_dot_general(got, v, dimension_numbers=(([1], [0]), ([], []))), mat @ v,
                               rtol=1e-5, atol=1e-5)


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


GRAD_CASES = [(argnums, has_aux) for argnums in (0, 1, (0, 1), (1, 0), (0,)) for has_aux in (False, True)]


@pytest.mark.parametrize("n_batch", [0, 1])
def test_grad_and_value_and_grad_match_jax(n_batch):
    """grad and value_and_grad for every argnums x has_aux, all in one hlopt.jit program against one
    jax.jit program; eagerly, the sparse gradient equals the dense gradient of the data."""
    x, y, Xh, Xj = _operands(n_batch=n_batch)

    def all_cases(mod, X, y):
        fs = [(partial(_f, with_aux=has_aux), argnums, has_aux) for argnums, has_aux in GRAD_CASES]
        return [(mod.grad(f, a, h)(X, y), mod.value_and_grad(f, a, h)(X, y)) for f, a, h in fs]

    with jax.default_matmul_precision("highest"):
        _check_tree(hlopt.jit(partial(all_cases, hs))(Xh, y), jax.jit(partial(all_cases, js))(Xj, y))
    # has_aux only adds the aux output (checked above): the eager gradient is the same function.
    grad_sp = hs.grad(_f)(Xh, y)
    dense_grad = jax.grad(lambda d: _f(hs.BCOO((d, Xh.indices), shape=Xh.shape), y))(Xh.data)
    np.testing.assert_allclose(grad_sp.data, dense_grad, rtol=1e-5, atol=1e-5)


def test_jacobians_match_jax():
    """jacfwd, jacrev and jacobian for argnums 0 and (0, 1), with and without aux, in one program per
    side. Jacobians with respect to a BCOO are BCOOs whose leading batch dims are the output dims."""
    x, y, Xh, Xj = _operands(1)
    cases = [(name, has_aux, argnums) for name in ("jacfwd", "jacrev", "jacobian") for has_aux in (False, True)
             for argnums in (0, (0, 1))]

    def f(X, y, has_aux):
        out = X @ y + jnp.sum(X.todense(), axis=1) * y[:4]
        return (out, out.sum()) if has_aux else out

    def all_cases(mod, X, y):
        return [getattr(mod, name)(partial(f, has_aux=h), a, h)(X, y) for name, h, a in cases]

    with jax.default_matmul_precision("highest"):
        got = hlopt.jit(partial(all_cases, hs))(Xh, y)
        want = jax.jit(partial(all_cases, js))(Xj, y)
    _check_tree(got, want)
    for (_, has_aux, argnums), jac in zip(cases, got):
        jac = jac[0] if has_aux else jac
        jac = jac[0] if isinstance(argnums, tuple) else jac
        assert isinstance(jac, hs.BCOO) and jac.n_batch == 1 and jac.shape == (4, 4, 5)


def test_grad_of_pytree_of_bcoos_and_kwargs():
    x, y, Xh, Xj = _operands(2)
    f = lambda t, y, scale=1.0: scale * (_f(t["a"], y) + jnp.sum(t["b"][0].todense()))  # noqa: E731
    th = {"a": Xh, "b": (Xh.T, jnp.ones(2))}
    tj = {"a": Xj, "b": (Xj.T, jnp.ones(2))}
    with jax.default_matmul_precision("highest"):
        # Call-time keywords reach the function (JAX's sparse.grad passes them to jax.grad instead and fails).
        got_kw, got = hlopt.jit(lambda t, y: (hs.grad(f)(t, y, scale=2.0), hs.grad(f, argnums=(0, 1))(t, y)))(th, y)
        want_1, want = jax.jit(lambda t, y: (js.grad(f)(t, y), js.grad(f, argnums=(0, 1))(t, y)))(tj, y)
    ga, (gb, gc) = want_1["a"], want_1["b"]
    twice = lambda m: js.BCOO((2 * m.data, m.indices), **m._info._asdict())  # noqa: E731
    _check_tree(got_kw, {"a": twice(ga), "b": (twice(gb), 2 * gc)})
    _check_tree(got, want)


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


# -- JAX's private buffer functions (for JAX-compatible test code) ------------------------------


def test_private_buffer_functions_match_jax():
    """_bcoo_fromdense, _bcoo_todense, _bcoo_extract and _bcoo_dot_general on every layout (padding,
    duplicates, batch buffers of size 1) against JAX's, one compiled program per side; their
    gradients too; and they stay out of the public API."""
    from jax.experimental.sparse import bcoo as jbcoo
    from jax.experimental.sparse.util import SparseInfo

    r = np.random.RandomState(5)
    cases = []
    for n_batch, n_dense in LAYOUTS:
        data, indices = buffers(r, SHAPE, n_batch, n_dense)
        # A data buffer with batch dims of size 1 broadcasts against the indices (JAX's partial batch).
        part = data[(slice(0, 1),) * n_batch]
        cases.append((n_batch, n_dense, data, part, indices, jnp.asarray(r.randn(*SHAPE), jnp.float32)))
    rhs = jnp.asarray(r.randn(max(SHAPE), 3), jnp.float32)  # contracted with the first sparse dim

    def run(mod, cases, rhs):
        out = []
        for n_batch, n_dense, data, part, indices, dense in cases:
            info = SparseInfo(SHAPE)
            nse = indices.shape[n_batch]
            contract = (((n_batch,), (0,)), ((), ()))
            out.append((mod._bcoo_fromdense(dense, nse=nse, n_batch=n_batch, n_dense=n_dense),
                        mod._bcoo_todense(data, indices, spinfo=info), mod._bcoo_todense(part, indices, spinfo=info),
                        mod._bcoo_extract(indices, dense), mod._bcoo_extract(indices, dense, assume_unique=False),
                        mod._bcoo_dot_general(part, indices, rhs[: SHAPE[n_batch]], dimension_numbers=contract,
                                              preferred_element_type=None, lhs_spinfo=info),
                        jax.grad(lambda d: jnp.sum(jnp.sin(mod._bcoo_todense(d, indices, spinfo=info))))(data),
                        jax.grad(lambda a: jnp.sum(mod._bcoo_extract(indices, a) ** 2))(dense)))
        return out

    static = [c[:2] for c in cases]
    arrays = [c[2:] for c in cases]
    with jax.default_matmul_precision("highest"):
        got = hlopt.jit(lambda a, rhs: run(hbcoo, [(*s, *x) for s, x in zip(static, a)], rhs))(arrays, rhs)
        want = jax.jit(lambda a, rhs: run(jbcoo, [(*s, *x) for s, x in zip(static, a)], rhs))(arrays, rhs)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    data, indices = hbcoo._bcoo_fromdense(jnp.eye(3), nse=3)  # eagerly too
    np.testing.assert_array_equal(hbcoo._bcoo_todense(data, indices, spinfo=hbcoo.SparseInfo((3, 3))), np.eye(3))
    names = ("_bcoo_fromdense", "_bcoo_todense", "_bcoo_extract", "_bcoo_dot_general")
    assert not any(name in hs.__all__ or hasattr(hs, name) for name in names)


# -- long scans and searches in the lowering (blocked prefix scan, looped binary search) ------


LONG_ROWS = [15, 16, 17, 257, 5000]  # around and past the prefix scan's block sizes (16, 256, 4096)


def test_fromdense_and_sum_duplicates_long_rows():
    """fromdense and sum_duplicates of every row length in one hlopt.jit program, against the
    dense input and NumPy's sum of the COO entries (JAX's todense of its sum_duplicates is that sum)."""
    r = np.random.RandomState(0)
    xs, coos = [], []
    for n in LONG_ROWS:
        xs.append((r.randn(2, n) * (r.rand(2, n) < 0.3)).astype(np.float32))
        coos.append((r.randn(n).astype(np.float32), r.randint(0, 40, size=(n, 2)).astype(np.int32)))

    nses = [int((x != 0).sum(1).max()) for x in xs]

    def run(xs, coos):
        dense = [hs.BCOO.fromdense(x, nse=nse, n_batch=1).todense() for x, nse in zip(xs, nses)]
        summed = [hs.bcoo_sum_duplicates(hs.BCOO(c, shape=(40, 40)), nse=n).todense() for c, n in zip(coos, LONG_ROWS)]
        return dense, summed

    dense, summed = hlopt.jit(run)(xs, coos)
    for x, got in zip(xs, dense):
        np.testing.assert_array_equal(got, x)
    for (data, idx), got in zip(coos, summed):
        np.testing.assert_allclose(got, dense_of_coo(data, idx, (40, 40)), rtol=1e-5, atol=1e-5)


def test_spdot_and_multiply_sparse_long_entry_lists():
    """bcoo_spdot_general and multiply_sparse of random COO operands (duplicates included) with 17
    and 300 entries, in one hlopt.jit program, against NumPy on the dense operands."""
    r = np.random.RandomState(17)
    operands = [[(r.randn(nse).astype(np.float32), r.randint(0, 30, size=(nse, 2)).astype(np.int32))
                 for _ in range(2)] for nse in (17, 300)]
    mm = (((1,), (0,)), ((), ()))

    def run(operands):
        out = []
        for a, c in operands:
            A, C = hs.BCOO(a, shape=(30, 30)), hs.BCOO(c, shape=(30, 30))
            out.append((hs.bcoo_spdot_general(A, C, dimension_numbers=mm).todense(), (A * C).todense()))
        return out

    for ((a, c), (prod, mul)) in zip(operands, hlopt.jit(run)(operands)):
        A, C = dense_of_coo(*a, (30, 30)), dense_of_coo(*c, (30, 30))
        np.testing.assert_allclose(prod, A @ C, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mul, A * C, rtol=1e-5, atol=1e-5)
