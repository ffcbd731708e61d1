"""The BCOO object against jax.experimental.sparse's: repr, sum, operators, len/iter and NumPy indexing.
JAX's BCOO operations run under jax.jit (one XLA program, not an op-by-op dispatch of each primitive)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs

from support.sparse_util import assert_close, buffers, fromdense_nse, pair, random_data, strict_promotion  # noqa: F401

# (shape, index): the indexing cases of JAX's BCOO tests plus negative steps, Ellipsis and mixed forms.
INDEX_CASES = [
    ((5,), np.index_exp[:]),
    ((5,), np.index_exp[4]),
    ((5,), np.index_exp[::2]),
    ((5,), np.index_exp[1::2]),
    ((5,), 1),
    ((5,), np.index_exp[::-1]),
    ((5,), np.index_exp[3:0:-2]),
    ((3, 4), np.index_exp[1]),
    ((3, 4), np.index_exp[1, 2]),
    ((3, 4), np.index_exp[-1, -2]),
    ((3, 4), np.index_exp[np.array([1, 2])]),
    ((3, 4), np.index_exp[np.array([[1], [2]]), 0]),
    ((3, 4), np.index_exp[np.array([[1], [2]]), 1:]),
    ((3, 4), np.index_exp[np.array([True, False, True])]),
    ((3, 4), np.index_exp[:2, np.array([True, False, True, False])]),
    ((3, 4), np.index_exp[None, 0, np.array([[2]])]),
    ((3, 4), np.index_exp[np.array([-1, 0, 2]), ::-1]),
    ((3, 4), np.index_exp[..., np.array([3, 0])]),
    ((3, 4, 5), np.index_exp[2]),
    ((3, 4, 5), np.index_exp[:, 2]),
    ((3, 4, 5), np.index_exp[np.array([0, 2]), :, np.array([1, 4])]),
    ((3, 4, 5), np.index_exp[1, :, np.array([0, 4])]),
    ((3, 4, 5), np.index_exp[:, None, 1:3, None]),
    ((3, 4, 5), np.index_exp[np.array([[True, False, True, False]] * 3)]),
]


def _sparse(shape, n_batch, seed=0, dtype="float32"):
    r = np.random.RandomState(seed)
    x = np.asarray(random_data(r, shape, dtype)) * (r.rand(*shape) < 0.6)
    ref = jax.jit(lambda x: js.BCOO.fromdense(x, n_batch=n_batch, nse=fromdense_nse(x_np, n_batch)))(x_np := x.astype(dtype))
    return x_np, hs.BCOO.fromdense(x, n_batch=n_batch), ref


@pytest.mark.parametrize("shape, n_batch", [(s, n) for s in sorted({s for s, _ in INDEX_CASES})
                                             for n in range(min(len(s), 2) + 1)])
def test_indexing_matches_numpy_and_jax(shape, n_batch):
    """Every index of this shape in one hlopt.jit, against numpy on the dense array (the values JAX's
    BCOO gives) and JAX's result type and shape (traced only: JAX's eager sparse indexing is slow)."""
    cases = [idx for s, idx in INDEX_CASES if s == shape]
    x, m, ref = _sparse(shape, n_batch)
    def index_all(d, i):
        outs = [hs.BCOO((d, i), shape=shape)[idx] for idx in cases]
        return outs, [o.todense() for o in outs]

    got, dense = hlopt.jit(index_all)(m.data, m.indices)
    for idx, out, values in zip(cases, got, dense):
        want = jax.eval_shape(lambda r: r[idx], ref)
        assert isinstance(out, hs.BCOO) and isinstance(want, js.BCOO) and out.shape == want.shape, idx
        assert_close(values, x[idx])


@pytest.mark.parametrize("dtype", ["int32", "complex64"])
def test_indexing_dtypes(dtype):
    x, m, _ = _sparse((3, 4), 1, seed=1, dtype=dtype)
    cases = [np.index_exp[np.array([2, 0])], np.index_exp[::-1, 1], np.index_exp[:, np.array([True, False] * 2)]]
    got = hlopt.jit(lambda d, i: [hs.BCOO((d, i), shape=(3, 4))[idx].todense() for idx in cases])(m.data, m.indices)
    for idx, out in zip(cases, got):
        assert_close(out, x[idx], dtype)


def test_indexing_with_traced_arrays_and_gradient():
    """Array indices may be traced (they are operands of the gather); gradients flow to data."""
    x, m, _ = _sparse((4, 5), 1, seed=2)
    rows = np.array([3, 0, 3], np.int32)
    got = hlopt.jit(lambda d, i, r: hs.BCOO((d, i), shape=(4, 5))[r, 1:].todense())(m.data, m.indices, rows)
    assert_close(got, x[rows, 1:])
    w = np.asarray(random_data(np.random.RandomState(3), (3, 4), "float32"))
    grad = hlopt.jit(jax.grad(lambda d: (hs.BCOO((d, m.indices), shape=(4, 5))[rows, 1:].todense() * w).sum()))
    want = jax.jit(jax.grad(lambda d: (js.BCOO((d, m.indices), shape=(4, 5)).todense()[rows, 1:] * w).sum()))
    assert_close(grad(m.data), want(m.data))


def test_indexing_out_of_range_arrays_clamp_as_jax():
    _, m, ref = _sparse((3, 4), 0, seed=4)
    idx = np.index_exp[np.array([5, -7]), 1:]
    assert_close(m[idx].todense(), jax.jit(lambda r: r[idx].todense())(ref))


def test_indexing_errors():
    _, m, _ = _sparse((3, 4), 0)
    with pytest.raises(IndexError, match="out of bounds"):
        m[3]
    with pytest.raises(IndexError, match="Too many indices"):
        m[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        m[..., ...]
    with pytest.raises(TypeError, match="non-tuple sequence"):
        m[[0, 1]]
    with pytest.raises(TypeError, match="integer or boolean type"):
        m[np.array([0.5])]
    with pytest.raises(jax.errors.NonConcreteBooleanIndexError):
        hlopt.jit(lambda mask: m[mask].data)(np.array([True, False, True]))


def test_len_and_iter():
    x, m, _ = _sparse((3, 4), 1)
    assert len(m) == 3
    rows = list(m)
    assert len(rows) == 3 and all(isinstance(r, hs.BCOO) for r in rows)
    for row, want in zip(rows, x):
        assert_close(row.todense(), want)
    with pytest.raises(TypeError, match="unsized"):
        len(hs.BCOO.fromdense(np.float32(1)))


def test_repr_matches_jax():
    x = jnp.arange(6, dtype="float32").reshape(2, 3)
    for kwargs in [dict(), dict(n_batch=1), dict(n_batch=1, n_dense=1)]:
        assert repr(hs.BCOO.fromdense(x, **kwargs)) == repr(js.BCOO.fromdense(x, **kwargs))
    ours, ref = hs.BCOO.fromdense(x), js.BCOO.fromdense(x)
    ours.indices = ref.indices = jnp.array([])
    assert repr(ours) == repr(ref) == "BCOO(<invalid>)"
    m = hs.BCOO.fromdense(jnp.arange(5, dtype="float32"))
    seen = []
    hlopt.jit(lambda d, i: seen.append(repr(hs.BCOO((d, i), shape=(5,)))))(m.data, m.indices)
    jax.jit(lambda d, i: seen.append(repr(js.BCOO((d, i), shape=(5,)))))(m.data, m.indices)
    assert seen[0] == seen[1] == "DynamicJaxprTracer[BCOO(float32[5], nse=4)]"


@pytest.mark.parametrize("n_batch,n_dense", [(0, 0), (1, 1), (2, 0)])
def test_sum_matches_jax(n_batch, n_dense):
    bufs = buffers(np.random.RandomState(5), n_batch=n_batch, n_dense=n_dense)
    ours, ref = pair(bufs, (2, 3, 4, 2))
    want, ref_dense = jax.jit(lambda r: (r.sum(), r.todense()))(ref)
    total = ours.sum()
    assert not isinstance(total, hs.BCOO) and total.shape == () and total.dtype == want.dtype
    assert_close(total, want)
    for kwargs in [dict(axis=1), dict(axis=(0, -1)), dict(axis=2, keepdims=True), dict(axis=None, keepdims=True)]:
        out = ours.sum(**kwargs)
        assert isinstance(out, hs.BCOO)
        assert_close(out.todense(), np.asarray(ref_dense).sum(**kwargs))
    ints = hs.BCOO((bufs[0].astype(jnp.int8), bufs[1]), shape=(2, 3, 4, 2))
    assert ints.sum().dtype == jnp.sum(ints.todense()).dtype  # narrow integers sum as jnp.sum does


def test_operators_match_jax():
    r = np.random.RandomState(6)
    x = np.asarray(random_data(r, (3, 4), "float32")) * (r.rand(3, 4) < 0.5)
    y = np.asarray(random_data(r, (3, 4), "float32")) * (r.rand(3, 4) < 0.5)
    a, b = hs.BCOO.fromdense(x), hs.BCOO.fromdense(y)
    cases = {
        "a + b": lambda a, b: a + b,
        "a - b": lambda a, b: a - b,
        "a + a": lambda a, b: a + a,
        "a + a.T.T": lambda a, b: a + a.T.T,
        "-a": lambda a, b: -a,
        "+a": lambda a, b: +a,
        "abs(a)": lambda a, b: abs(a),
        "a * 2": lambda a, b: a * 2,
        "2 * a": lambda a, b: 2 * a,
        "a / 2": lambda a, b: a / 2,
        "a / y": lambda a, b: a / (y + 10),
        "a ** 3": lambda a, b: a**3,
        "a * b": lambda a, b: a * b,
        "a.astype(int)": lambda a, b: a.astype(jnp.int32),
    }
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)

    def jax_results(x, y, ints_):
        ja, jb = js.BCOO.fromdense(x, nse=a.nse), js.BCOO.fromdense(y, nse=b.nse)
        outs = {name: op(ja, jb) for name, op in cases.items()}
        return ({name: (out, out.todense()) for name, out in outs.items()}, ja + y, y + ja,
                (js.BCOO.fromdense(ints_, nse=fromdense_nse(ints)) / 2).todense())

    wants, a_plus_y, y_plus_a, ints_half = jax.jit(jax_results)(x, y, ints)
    for name, op in cases.items():
        got, (want, want_dense) = op(a, b), wants[name]
        assert isinstance(got, hs.BCOO), name
        # a * b stores one entry per entry of the smaller operand, not every pair (docs/sparse.md)
        assert got.nse == want.nse if name != "a * b" else got.nse == min(a.nse, b.nse) < want.nse, name
        assert_close(got.todense(), want_dense, "int32" if got.dtype == jnp.int32 else "float32")
    assert_close(a + y, a_plus_y)  # sparse + dense of the full shape is dense
    assert_close(y + a, y_plus_a)  # numpy + a JAX BCOO is an object array; a jnp array + a JAX BCOO is dense
    assert_close((hs.BCOO.fromdense(ints) / 2).todense(), ints_half)


@pytest.mark.parametrize(
    "expr,error",
    [
        (lambda a, y: a + 1.0, "output shape is larger"),
        (lambda a, y: a + y[0], "output shape is larger"),
        (lambda a, y: a - y, "sparse and dense"),
        (lambda a, y: y - a, "sparse and dense"),
        (lambda a, y: a + a[:1], "different shapes"),
        (lambda a, y: a + a.update_layout(n_batch=1, on_inefficient=None), "batch/dense"),
        (lambda a, y: y / a, "Division by a sparse array"),
        (lambda a, y: a / a, "Division by a sparse array"),
        (lambda a, y: a**0, "non-positive exponent"),
        (lambda a, y: a**0.5, "pow"),
        (lambda a, y: a > 0, "dense output"),
        (lambda a, y: a == a, "dense output"),
    ],
)
def test_operators_refuse_as_jax(expr, error):
    """Where JAX's BCOO raises NotImplementedError, so does hlopt's (and for the same reason)."""
    y = np.ones((3, 4), np.float32)
    a = hs.BCOO.fromdense(np.eye(3, 4, dtype=np.float32))
    ja = js.BCOO.fromdense(np.eye(3, 4, dtype=np.float32))
    with pytest.raises(NotImplementedError, match=error):
        expr(a, y)
    with pytest.raises(NotImplementedError), jax.numpy_rank_promotion("allow"):  # else JAX fails earlier
        expr(ja, y)


def test_add_of_shapes_that_do_not_broadcast_is_a_type_error_as_in_jax():
    a = hs.BCOO.fromdense(np.eye(3, 4, dtype=np.float32))
    ja = js.BCOO.fromdense(np.eye(3, 4, dtype=np.float32))
    with pytest.raises(TypeError, match="incompatible shapes"):
        a + a[:2]
    with pytest.raises(TypeError, match="incompatible shapes"):
        ja + ja[:2]


def test_hash_is_refused_as_jax():
    with pytest.raises(TypeError):
        hash(hs.BCOO.fromdense(np.eye(2, dtype=np.float32)))
    with pytest.raises(TypeError):
        hash(js.BCOO.fromdense(np.eye(2, dtype=np.float32)))


def test_rev_matches_jax():
    bufs = buffers(np.random.RandomState(7), n_batch=1, n_dense=1, nse=6)
    ours, ref = pair(bufs, (2, 3, 4, 2))
    all_dims = [(0,), (1, 2), (3,), (0, 1, 2, 3)]
    wants = jax.jit(lambda r: [js.bcoo_rev(r, dims).todense() for dims in all_dims])(ref)
    for dims, want in zip(all_dims, wants, strict=True):
        assert_close(hs.bcoo_rev(ours, dims).todense(), want)
    with pytest.raises(ValueError, match="unique and in range"):
        hs.bcoo_rev(ours, (4,))


def test_todense_passes_dense_values_through():
    x = np.eye(2, dtype=np.float32)
    assert_close(hs.todense(hs.BCOO.fromdense(x)), x)
    assert hs.todense(1.0) == js.todense(1.0) == 1.0
    assert_close(hs.todense(x), js.todense(x))
    with pytest.raises(TypeError, match="expected an hlopt.sparse.BCOO or an array, got BCOO"):
        hs.todense(js.BCOO.fromdense(x))  # JAX's BCOO (any other format likewise)
    with pytest.raises(TypeError, match="got CSR"):
        jax.jit(hs.todense)(js.CSR.fromdense(x))


def test_todense_primitives_have_jax_names():
    from hlopt.sparse import ops

    assert hs.bcoo_todense_p is ops.todense_p and hs.bcoo_todense_p.name == js.bcoo_todense_p.name
    assert hs.todense_p.name == js.todense_p.name == "todense"
    jaxpr = jax.make_jaxpr(hs.todense)(hs.BCOO.fromdense(np.eye(2, dtype=np.float32)))
    assert [e.primitive for e in jaxpr.eqns] == [hs.todense_p]


# (shape, n_batch, n_dense, nse) of the BCOOs whose generic todense is differentiated and mapped
TODENSE_LAYOUTS = [((3,), 0, 0, 3), ((3,), 0, 0, 5), ((2, 3), 0, 0, 6), ((2, 3), 1, 0, 4), ((2, 3), 0, 1, 3),
                   ((2, 3, 2), 1, 1, 4), ((0, 3), 1, 0, 2), ((2, 3), 0, 0, 0)]


@pytest.mark.parametrize("obj", ["dense", "bcoo"])
def test_todense_p_jacobians_are_the_identity_on_dense_and_bcoo(obj):
    """JAX's test_todense_ad case: the generic primitive bound on flattened buffers and their pytree."""
    x = jnp.array([1.0, 2.0, 3.0])
    for mod in (hs, js):
        m = x if obj == "dense" else mod.BCOO.fromdense(x)
        bufs, tree = jax.tree.flatten(m)
        f = lambda *b: mod.todense_p.bind(*b, tree=tree)  # noqa: B023 - called in this iteration
        jac1, jac2 = jax.jacfwd(f)(*bufs), jax.jacrev(f)(*bufs)
        np.testing.assert_array_equal(jac1, jac2)
        np.testing.assert_array_equal(jac2, np.eye(3, dtype=np.float32))


@pytest.mark.parametrize("shape, n_batch, n_dense, nse", TODENSE_LAYOUTS)
def test_todense_p_jacobians_match_jax(shape, n_batch, n_dense, nse):
    """jacfwd == jacrev of the generic todense with respect to the data, against JAX's (duplicates, padding)."""
    bufs = buffers(np.random.RandomState(nse), shape, n_batch, n_dense, nse)
    ours, ref = pair(bufs, shape)
    got = []
    for mod, m, run in ((hs, ours, lambda f: f), (js, ref, jax.jit)):  # ours eagerly, JAX's reference in one program
        leaves, tree = jax.tree.flatten(m)
        f = lambda d, i: mod.todense_p.bind(d, i, tree=tree)  # noqa: B023 - called in this iteration
        fwd, rev = run(lambda *a: (jax.jacfwd(f)(*a), jax.jacrev(f)(*a)))(*leaves)  # noqa: B023
        assert_close(fwd, rev)
        got.append(fwd)
    assert_close(*got)


@pytest.mark.parametrize("shape, n_batch, n_dense, nse", TODENSE_LAYOUTS)
def test_todense_grad_vmap_jit_match_jax(shape, n_batch, n_dense, nse):
    """grad (through the transpose: extract for a BCOO), vmap over a batch dim and hlopt.jit of
    `sparse.todense`, against JAX's on the same buffers; a dense array passes through all of them."""
    bufs = buffers(np.random.RandomState(nse + 1), shape, n_batch, n_dense, nse)
    ours, ref = pair(bufs, shape)
    w = np.random.RandomState(0).randn(*shape).astype(np.float32)

    def loss(mod, m):
        return lambda d: jnp.sum(mod.todense(mod.BCOO((d, m.indices), shape=m.shape)) * w)

    stacked = jnp.stack([ours.data, 2 * ours.data])  # data mapped, indices shared: dims (0, None)
    want_grad, want_dense, want_mapped, want_stacked = jax.jit(lambda r, stacked: (
        jax.grad(loss(js, r))(r.data), js.todense(r), jax.vmap(js.todense)(r) if n_batch else None,
        jax.vmap(lambda d: js.todense(js.BCOO((d, r.indices), shape=shape)))(stacked)))(ref, stacked)
    assert_close(hlopt.jit(jax.grad(loss(hs, ours)))(ours.data), want_grad)
    assert_close(hlopt.jit(hs.todense)(ours), want_dense)
    assert_close(jax.grad(lambda a: jnp.sum(hs.todense(a) * w))(w), w)
    if n_batch:
        assert_close(jax.vmap(hs.todense)(ours), want_mapped)
        assert_close(hlopt.jit(jax.vmap(hs.todense))(ours), want_mapped)
    assert_close(jax.vmap(hs.todense)(w), w)
    assert_close(jax.vmap(lambda d: hs.todense(hs.BCOO((d, ours.indices), shape=shape)))(stacked), want_stacked)
    assert_close(jax.vmap(hs.todense)(ours.todense()), want_dense)



def _gather_dnums(offset, collapsed, start_map):
    return jax.lax.GatherDimensionNumbers(offset_dims=offset, collapsed_slice_dims=collapsed, start_index_map=start_map)


@pytest.mark.parametrize(
    "shape,n_batch,indices,dnums,slice_sizes",
    [
        ((4, 5), 0, [[1], [3], [0]], _gather_dnums((1,), (0,), (0,)), (1, 5)),  # rows
        ((4, 5), 1, [[1, 2], [3, 0]], _gather_dnums((1, 2), (), (0, 1)), (2, 3)),  # 2x3 windows
        ((4, 5), 0, [[[4], [1]]], _gather_dnums((0,), (1,), (1,)), (4, 1)),  # columns, offset dim first
        ((3, 4, 5), 1, [[2, 1], [0, 0], [1, 3]], _gather_dnums((1,), (0, 2), (0, 2)), (1, 4, 1)),
        ((3, 4, 5), 2, [[9, 9]], _gather_dnums((1, 2), (0,), (0, 2)), (1, 2, 3)),  # clamped starts
    ],
)
def test_bcoo_gather_matches_lax_gather_and_jax(shape, n_batch, indices, dnums, slice_sizes):
    x, m, ref = _sparse(shape, n_batch, seed=8)
    indices = np.asarray(indices, np.int32)
    got = hs.bcoo_gather(m, indices, dnums, slice_sizes)
    want = jax.lax.gather(jax.device_put(x), indices, dnums, slice_sizes, mode="clip")
    assert_close(got.todense(), want)
    if all(slice_sizes[d] == n for d, n in enumerate(shape) if d not in dnums.start_index_map):
        assert_close(got.todense(), jax.jit(lambda r: js.bcoo_gather(r, indices, dnums, slice_sizes).todense())(ref))
    else:  # JAX cuts unindexed dims to their full size, then fails to reshape
        with pytest.raises(TypeError, match="cannot reshape"):
            jax.jit(lambda r: js.bcoo_gather(r, indices, dnums, slice_sizes))(ref)
    with pytest.raises(NotImplementedError, match="mode"):
        hs.bcoo_gather(m, indices, dnums, slice_sizes, mode="fill")
