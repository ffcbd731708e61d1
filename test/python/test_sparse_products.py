"""Sparse products against jax.experimental.sparse and lax.dot_general of the dense arrays:
bcoo_dot_general (sparse x dense, dense x sparse, sparse x sparse), bcoo_dot_general_sampled,
bcoo_spdot_general's nse, `@`; grad and vmap of each; bad input. JAX references run under jax.jit
(one XLA program, not an op-by-op dispatch of each primitive); dense arrays of buffers in numpy."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs

from support.sparse_util import (DTYPES, assert_close, buffers, dense_of, fromdense_nse, pair, random_data,  # noqa: F401
                                 strict_promotion, x64)



@st.composite
def dot_cases(draw):
    """A BCOO layout, a dense operand and dimension numbers: every lhs dim is a batch pair, a
    contracting pair or free, whatever its role in the BCOO; rhs dims in random order."""
    nb = draw(st.integers(0, 2))
    ns = draw(st.integers(1, 2))
    nd = draw(st.integers(0, 1))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=nb + ns + nd, max_size=nb + ns + nd)))
    roles = draw(st.lists(st.sampled_from("bcf"), min_size=len(shape), max_size=len(shape)))
    rhs_free = draw(st.lists(st.integers(1, 3), max_size=2))
    rhs_dims = [(r, d) for d, r in enumerate(roles) if r != "f"] + [("f", s) for s in rhs_free]
    order = draw(st.permutations(range(len(rhs_dims))))
    rhs_dims = [rhs_dims[i] for i in order]
    rhs_shape = tuple(shape[d] if r != "f" else d for r, d in rhs_dims)
    lc = tuple(d for d, r in enumerate(roles) if r == "c")
    lb = tuple(d for d, r in enumerate(roles) if r == "b")
    rc = tuple(rhs_dims.index(("c", d)) for d in lc)
    rb = tuple(rhs_dims.index(("b", d)) for d in lb)
    return shape, nb, nd, rhs_shape, ((lc, rc), (lb, rb)), draw(st.integers(0, 2**31 - 1))


def jax_allows(nb: int, ns: int, dims) -> bool:
    """jax.experimental.sparse's bcoo_dot_general: batch dims among the BCOO's batch dims, no dense contraction."""
    (lc, _), (lb, _) = dims
    return all(d < nb for d in lb) and all(d < nb + ns for d in lc)


@settings(derandomize=True, max_examples=30, deadline=None)
@given(dot_cases())
def test_dot_general_random_layouts_and_dims(case):
    shape, nb, nd, rhs_shape, dims, seed = case
    rng = np.random.RandomState(seed % 2**32)
    ns = len(shape) - nb - nd
    bufs = buffers(rng, shape, nb, nd, nse=5)
    m, jm = pair(bufs, shape)
    rhs = random_data(rng, rhs_shape, "float32")
    (lc, rc), (lb, rb) = dims
    rdims = ((rc, lc), (rb, lb))
    allowed = jax_allows(nb, ns, dims)
    want, want_r, *want_jax = jax.jit(lambda x, r, jm: (
        lax.dot_general(x, r, dims), lax.dot_general(r, x, rdims),
        *((js.bcoo_dot_general(jm, r, dimension_numbers=dims), js.bcoo_dot_general(r, jm, dimension_numbers=rdims))
          if allowed else ())))(dense_of(m), rhs, jm)
    got = hlopt.jit(lambda m, r: hs.bcoo_dot_general(m, r, dimension_numbers=dims))(m, rhs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got_r = hlopt.jit(lambda r, m: hs.bcoo_dot_general(r, m, dimension_numbers=rdims))(rhs, m)
    np.testing.assert_allclose(got_r, want_r, rtol=1e-5, atol=1e-5)
    if allowed:
        assert_close(got, want_jax[0])
        assert_close(got_r, want_jax[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_batch,n_dense", [(0, 0), (1, 0), (0, 1), (2, 0)])
def test_matmul_against_jax(dtype, n_batch, n_dense):
    """`@` on both sides and bcoo_dot_general's matmul dims, every dtype, against JAX."""
    with x64(dtype):
        rng = np.random.RandomState(n_batch * 2 + n_dense)
        shape = {(0, 0): (4, 5), (1, 0): (2, 4, 5), (0, 1): (4, 5), (2, 0): (2, 3, 4, 5)}[n_batch, n_dense]
        bufs = buffers(rng, shape, n_batch, n_dense, nse=6, dtype=dtype)
        m, jm = pair(bufs, shape)
        v = random_data(rng, (shape[-1], 3), dtype)
        w = random_data(rng, (3, shape[-2]), dtype)
        if n_dense:  # JAX does not contract dense dims: against the dense product
            jm = jax.device_put(dense_of(m))
        want = jax.jit(lambda jm, v, w: (jm @ v, w @ jm, jm @ v[:, 0]))(jm, v, w)
        assert_close(hlopt.jit(lambda m, v: m @ v)(m, v), want[0], dtype)
        assert_close(hlopt.jit(lambda m, w: w @ m)(m, w), want[1], dtype)
        assert_close(hlopt.jit(lambda m, v: m @ v[:, 0])(m, v), want[2], dtype)


# BCOO shape, n_batch, other operand's shape: batch dims that broadcast (size 1 against n, missing dims)
BROADCAST_MATMUL = [((1, 4, 5), 1, (3, 5, 2)), ((2, 1, 4, 5), 2, (3, 5, 2)), ((1, 4, 5), 0, (3, 5, 2)),
                    ((3, 1, 4, 5), 1, (1, 2, 5, 2)), ((1, 4, 5), 1, (5,)), ((5,), 0, (3, 5, 2)),
                    ((1, 4, 5), 1, (1, 5, 2))]


def test_matmul_broadcasts_batch_dims():
    """`@` on both sides with batch dims that broadcast against each other, against jnp.matmul of the
    dense arrays and JAX's BCOO `@` (one program); sparse x sparse too; shapes that do not broadcast
    raise ValueError, as jnp.matmul."""
    rng = np.random.RandomState(16)
    mats, others = [], []
    for shape, nb, other in BROADCAST_MATMUL:
        x = (rng.randn(*shape) * (rng.rand(*shape) < 0.6)).astype(np.float32)
        mats.append((x, nb))
        others.append(random_data(rng, other, "float32"))

    def swap(x):
        return x if np.ndim(x) < 2 else jnp.swapaxes(x, -1, -2)

    ms = [hs.BCOO.fromdense(x, n_batch=nb) for x, nb in mats]
    mts = [hs.BCOO.fromdense(np.asarray(swap(x)), n_batch=nb) for x, nb in mats]
    got = hlopt.jit(lambda ms, mts, ys: ([m @ y for m, y in zip(ms, ys)], [swap(y) @ m for m, y in zip(mts, ys)]))(
        ms, mts, others)
    nses = [fromdense_nse(x, nb) for x, nb in mats]
    want = jax.jit(lambda xs, ys: [(jnp.matmul(x, y), jnp.matmul(swap(y), swap(x)),
                                    js.BCOO.fromdense(x, n_batch=nb, nse=nse) @ y)
                                   for x, (_, nb), nse, y in zip(xs, mats, nses, ys)])([x for x, _ in mats], others)
    for g, gr, (w, wr, wj) in zip(*got, want, strict=True):
        assert_close(g, w)
        assert_close(gr, wr)
        assert_close(g, wj)
    a = (rng.randn(3, 4, 5) * (rng.rand(3, 4, 5) < 0.6)).astype(np.float32)
    b = (rng.randn(1, 5, 2) * (rng.rand(1, 5, 2) < 0.6)).astype(np.float32)
    for lhs, rhs in [(a, b), (a[:1], b)]:
        got = hlopt.jit(lambda p, q: p @ q)(hs.BCOO.fromdense(lhs, n_batch=1), hs.BCOO.fromdense(rhs, n_batch=1))
        nses = fromdense_nse(lhs, 1), fromdense_nse(rhs, 1)
        want = jax.jit(lambda p, q: js.BCOO.fromdense(p, n_batch=1, nse=nses[0]) @ js.BCOO.fromdense(q, n_batch=1, nse=nses[1]))(
            lhs, rhs)
        assert (got.shape, got.n_batch, got.nse) == (want.shape, want.n_batch, want.nse)
        assert_close(got.todense(), jnp.matmul(lhs, rhs))
    with pytest.raises(ValueError, match="do not broadcast"):
        hs.BCOO.fromdense(a, n_batch=1) @ jnp.ones((2, 5, 2), jnp.float32)
    with pytest.raises(ValueError, match="do not broadcast"):
        jnp.ones((2, 2, 4), jnp.float32) @ hs.BCOO.fromdense(a, n_batch=1)


@pytest.mark.parametrize("pet", [None, "float32", "float64"])
def test_preferred_element_type(pet):
    with jax.enable_x64(True):
        rng = np.random.RandomState(1)
        m, jm = pair(buffers(rng, (4, 5), 0, 0, nse=6, dtype="bfloat16"), (4, 5))
        v = random_data(rng, (5, 2), "bfloat16")
        dims = (((1,), (0,)), ((), ()))
        got = hlopt.jit(lambda m, v: hs.bcoo_dot_general(m, v, dimension_numbers=dims, preferred_element_type=pet))(m, v)
        want = jax.jit(lambda jm, v: js.bcoo_dot_general(jm, v, dimension_numbers=dims, preferred_element_type=pet))(jm, v)
        assert_close(got, want, "bfloat16" if pet is None else "float32")


def test_mixed_dtypes_promote_as_jax():
    rng = np.random.RandomState(2)
    m, jm = pair(buffers(rng, (4, 5), 0, 0, nse=6, dtype="int32"), (4, 5))
    v = random_data(rng, (5, 2), "float32")
    with jax.numpy_dtype_promotion("standard"):
        got = hlopt.jit(lambda m, v: hs.bcoo_dot_general(m, v, dimension_numbers=(((1,), (0,)), ((), ()))))(m, v)
        want = jax.jit(lambda jm, v: js.bcoo_dot_general(jm, v, dimension_numbers=(((1,), (0,)), ((), ()))))(jm, v)
    assert_close(got, want)


def test_sorted_indices_use_the_sorted_scatter():
    """indices_sorted marks the scatter sorted; the result is the same as unsorted."""
    rng = np.random.RandomState(3)
    mat = rng.randn(40, 30).astype(np.float32) * (rng.rand(40, 30) < 0.2)
    m = hs.BCOO.fromdense(mat)
    assert m.indices_sorted
    v = rng.randn(30, 8).astype(np.float32)
    f = lambda m, v: m @ v  # noqa: E731
    text = hlopt.lower(f, m, v).apply("lower-bcoo").as_text()
    assert "indices_are_sorted = true" in text
    np.testing.assert_allclose(hlopt.jit(f)(m, v), mat @ v, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# SDDMM


@pytest.mark.parametrize("n_batch", [0, 1, 2])
@pytest.mark.parametrize("lc,rc", [(1, 0), (0, 0), (1, 1)])
def test_dot_general_sampled_against_jax(n_batch, lc, rc):
    rng = np.random.RandomState(n_batch)
    a = random_data(rng, (4, 3) if lc == 1 else (3, 4), "float32")
    b = random_data(rng, (3, 5) if rc == 0 else (5, 3), "float32")
    _, indices = buffers(rng, (4, 5), n_batch, 0, nse=6)
    dims = (((lc,), (rc,)), ((), ()))
    got = hlopt.jit(lambda a, b, i: hs.bcoo_dot_general_sampled(a, b, i, dimension_numbers=dims))(a, b, indices)
    assert_close(got, jax.jit(lambda a, b, i: js.bcoo_dot_general_sampled(a, b, i, dimension_numbers=dims))(a, b, indices))


def test_dot_general_sampled_batched_and_dense_dims():
    rng = np.random.RandomState(4)
    a = random_data(rng, (2, 4, 3), "float32")
    b = random_data(rng, (2, 3, 5), "float32")
    dims = (((2,), (1,)), ((0,), (0,)))
    for nb, nd in [(1, 0), (1, 1), (0, 1), (2, 1)]:
        _, indices = buffers(rng, (2, 4, 5), nb, nd, nse=4)
        got = hlopt.jit(lambda a, b, i: hs.bcoo_dot_general_sampled(a, b, i, dimension_numbers=dims))(a, b, indices)
        assert_close(got, jax.jit(lambda a, b, i: js.bcoo_dot_general_sampled(a, b, i, dimension_numbers=dims))(a, b, indices))


# ---------------------------------------------------------------------------
# sparse x sparse


SPDOT_CASES = [
    # lhs shape, lhs n_batch, rhs shape, rhs n_batch, dims
    ((4, 5), 0, (5, 3), 0, (((1,), (0,)), ((), ()))),
    ((4, 5), 0, (3, 5), 0, (((1,), (1,)), ((), ()))),
    ((5,), 0, (5, 3), 0, (((0,), (0,)), ((), ()))),
    ((4, 5), 0, (5,), 0, (((1,), (0,)), ((), ()))),
    ((2, 4, 5), 1, (2, 5, 3), 1, (((2,), (1,)), ((0,), (0,)))),
    ((2, 4, 5), 1, (5, 3), 0, (((2,), (0,)), ((), ()))),
    ((3, 4), 0, (2, 4), 0, (((1,), (1,)), ((), ()))),
    ((3, 4, 2), 0, (4, 2, 5), 0, (((1, 2), (0, 1)), ((), ()))),
    ((4, 5), 0, (6, 3), 0, (((), ()), ((), ()))),
]


@pytest.mark.parametrize("lshape,lnb,rshape,rnb,dims", SPDOT_CASES)
def test_spdot_general_against_jax(lshape, lnb, rshape, rnb, dims):
    rng = np.random.RandomState(len(lshape) + len(rshape))
    lm, jl = pair(buffers(rng, lshape, lnb, 0, nse=5), lshape)
    rm, jr = pair(buffers(rng, rshape, rnb, 0, nse=4), rshape)
    got = hlopt.jit(lambda a, b: hs.bcoo_dot_general(a, b, dimension_numbers=dims))(lm, rm)
    want, want_dense = jax.jit(lambda a, b: (lambda c: (c, c.todense()))(js.bcoo_dot_general(a, b, dimension_numbers=dims)))(
        jl, jr)
    assert got.shape == want.shape and got.nse == want.nse and got.n_batch == want.n_batch
    assert_close(got.todense(), want_dense)
    assert_close(got.todense(), lax.dot_general(dense_of(lm), dense_of(rm), dims))


def test_spdot_general_nse_bound_keeps_the_first_outputs():
    """With nse below the number of distinct outputs, the smallest row-major outputs are kept;
    at the exact count every product is there (output indices sorted and unique)."""
    rng = np.random.RandomState(5)
    a = rng.randn(20, 30).astype(np.float32) * (rng.rand(20, 30) < 0.1)
    b = rng.randn(30, 25).astype(np.float32) * (rng.rand(30, 25) < 0.1)
    dims = (((1,), (0,)), ((), ()))
    full = a @ b
    exact = int((np.abs(full) > 0).sum())
    lm, rm = hs.BCOO.fromdense(a), hs.BCOO.fromdense(b)
    f = hlopt.jit(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=dims, nse=exact))
    out = f(lm, rm)
    np.testing.assert_allclose(out.todense(), full, rtol=1e-5, atol=1e-5)
    keys = np.asarray(out.indices[:, 0]) * 25 + np.asarray(out.indices[:, 1])
    assert (np.diff(keys) > 0).all()
    k = exact // 2
    part = hlopt.jit(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=dims, nse=k))(lm, rm)
    rows, cols = np.nonzero(np.abs(full) > 0)
    kept = np.zeros_like(full)
    kept[rows[:k], cols[:k]] = full[rows[:k], cols[:k]]
    np.testing.assert_allclose(part.todense(), kept, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# grad and vmap


def test_grad_of_sparse_dense_products():
    rng = np.random.RandomState(6)
    shape = (2, 4, 5)
    (data, indices) = buffers(rng, shape, 1, 0, nse=5)
    v = random_data(rng, (2, 5, 3), "float32")
    dims = (((2,), (1,)), ((0,), (0,)))

    def ours(d, v):
        return (hs.bcoo_dot_general(hs.BCOO((d, indices), shape=shape), v, dimension_numbers=dims) ** 2).sum()

    def ref(d, v):
        return (js.bcoo_dot_general(js.BCOO((d, indices), shape=shape), v, dimension_numbers=dims) ** 2).sum()

    got = hlopt.jit(jax.grad(ours, argnums=(0, 1)))(data, v)
    want = jax.jit(jax.grad(ref, argnums=(0, 1)))(data, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)

    def ours_r(d, w):
        return (hs.bcoo_dot_general(w, hs.BCOO((d, indices), shape=shape), dimension_numbers=dims) ** 2).sum()

    def ref_r(d, w):
        return (js.bcoo_dot_general(w, js.BCOO((d, indices), shape=shape), dimension_numbers=dims) ** 2).sum()

    w = random_data(rng, (2, 3, 4), "float32")
    got = hlopt.jit(jax.grad(ours_r, argnums=(0, 1)))(data, w)
    want = jax.jit(jax.grad(ref_r, argnums=(0, 1)))(data, w)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@settings(derandomize=True, max_examples=12, deadline=None)
@given(dot_cases())
def test_grad_of_dot_general_random_dims(case):
    """Data and dense cotangents against jax.grad of the dense computation (any dims)."""
    shape, nb, nd, rhs_shape, dims, seed = case
    rng = np.random.RandomState(seed % 2**32)
    data, indices = buffers(rng, shape, nb, nd, nse=4, padding=True, duplicates=True)
    rhs = random_data(rng, rhs_shape, "float32")
    weights = random_data(rng, lax.dot_general(np.zeros(shape, np.float32), rhs, dims).shape, "float32")

    def ours(d, r):
        return (hs.bcoo_dot_general(hs.BCOO((d, indices), shape=shape), r, dimension_numbers=dims) * weights).sum()

    def ref(d, r):
        return (lax.dot_general(js.BCOO((d, indices), shape=shape).todense(), r, dims) * weights).sum()

    got = hlopt.jit(jax.grad(ours, argnums=(0, 1)))(data, rhs)
    want = jax.jit(jax.grad(ref, argnums=(0, 1)))(data, rhs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_grad_of_sampled_product():
    rng = np.random.RandomState(7)
    a, b = random_data(rng, (2, 4, 3), "float32"), random_data(rng, (2, 5, 3), "float32")
    _, indices = buffers(rng, (2, 4, 5), 1, 0, nse=5)
    dims = (((2,), (2,)), ((0,), (0,)))
    w = random_data(rng, (2, 5), "float32")

    def loss(fn):
        return lambda a, b: (fn(a, b, indices, dimension_numbers=dims) * w).sum()

    got = hlopt.jit(jax.grad(loss(hs.bcoo_dot_general_sampled), argnums=(0, 1)))(a, b)
    want = jax.jit(jax.grad(loss(js.bcoo_dot_general_sampled), argnums=(0, 1)))(a, b)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lshape,lnb,rshape,rnb,dims", SPDOT_CASES[:6])
def test_grad_of_sparse_sparse_product(lshape, lnb, rshape, rnb, dims):
    """JAX has no transpose for bcoo_spdot_general: against the dense computation."""
    rng = np.random.RandomState(8)
    ld, li = buffers(rng, lshape, lnb, 0, nse=5)
    rd, ri = buffers(rng, rshape, rnb, 0, nse=4)
    out_shape = lax.dot_general(np.zeros(lshape, np.float32), np.zeros(rshape, np.float32), dims).shape
    w = random_data(rng, out_shape, "float32")

    def ours(a, b):
        out = hs.bcoo_dot_general(hs.BCOO((a, li), shape=lshape), hs.BCOO((b, ri), shape=rshape),
                                  dimension_numbers=dims)
        return (out.todense() * w).sum()

    def ref(a, b):
        x, y = js.BCOO((a, li), shape=lshape).todense(), js.BCOO((b, ri), shape=rshape).todense()
        return (lax.dot_general(x, y, dims) * w).sum()

    got = hlopt.jit(jax.grad(ours, argnums=(0, 1)))(ld, rd)
    want = jax.jit(jax.grad(ref, argnums=(0, 1)))(ld, rd)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def _dense(data, indices, shape, n_batch):
    """The dense array of BCOO buffers by a scatter-add in jnp (out-of-range entries dropped), so
    that jax.hessian of it is JAX's own second derivative (JAX's BCOO todense has no batched extract)."""
    grid = np.indices(indices.shape[:-1])[:n_batch]
    cols = tuple(np.moveaxis(np.asarray(indices), -1, 0))
    return jnp.zeros(shape, data.dtype).at[(*grid, *cols)].add(data, mode="drop")


def test_second_order_of_sparse_sparse_products():
    """jax.hessian (jacfwd of jacrev) and grad of grad through sparse x sparse products (the
    transpose of the sampled product), all layouts in one program, against the dense products in
    float64; padding and duplicate entries included."""
    with jax.enable_x64(True):
        rng = np.random.RandomState(14)
        cases = [c for i, c in enumerate(SPDOT_CASES) if i in (0, 1, 4, 7)]
        bufs = [(buffers(rng, ls, lnb, 0, nse=5, dtype="float64"), buffers(rng, rs, rnb, 0, nse=4, dtype="float64"))
                for ls, lnb, rs, rnb, _ in cases]
        data = [(l[0], r[0]) for l, r in bufs]

        def losses(product):
            def f(k, a, b):
                ls, lnb, rs, rnb, dims = cases[k]
                return jnp.sin(product(k, a, b, dims)).sum() + (a ** 3).sum() * b.sum()
            return f

        def ours(k, a, b, dims):
            (_, li), (_, ri) = bufs[k]
            ls, _, rs, _, _ = cases[k]
            return hs.bcoo_dot_general(hs.BCOO((a, li), shape=ls), hs.BCOO((b, ri), shape=rs),
                                       dimension_numbers=dims).todense()

        def ref(k, a, b, dims):
            (_, li), (_, ri) = bufs[k]
            ls, lnb, rs, rnb, _ = cases[k]
            return lax.dot_general(_dense(a, li, ls, lnb), _dense(b, ri, rs, rnb), dims)

        def derivatives(product):
            f = losses(product)
            out = []
            for k, (a, b) in enumerate(data):
                fk = functools.partial(f, k)
                out.append(jax.hessian(fk, argnums=(0, 1))(a, b))
                out.append(jax.grad(lambda a, b: (jax.grad(fk, argnums=(0, 1))(a, b)[1] ** 2).sum(),
                                    argnums=(0, 1))(a, b))
            return out

        got = hlopt.jit(lambda: derivatives(ours))()
        want = jax.jit(lambda: derivatives(ref))()
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_vmap_of_sampled_sparse_sparse_product():
    """jax.vmap of the gradient of a sparse x sparse product (the sampled product batched) with the
    operands mapped, one of them only, and the cotangent only, against the dense gradients."""
    rng = np.random.RandomState(15)
    ls, rs, dims = (4, 5), (5, 3), (((1,), (0,)), ((), ()))
    (ad_, li), (bd, ri) = buffers(rng, ls, 0, 0, nse=5), buffers(rng, rs, 0, 0, nse=4)
    As = random_data(rng, (3, *ad_.shape), "float32")
    Bs = random_data(rng, (3, *bd.shape), "float32")
    Ws = random_data(rng, (3, 4, 3), "float32")

    def grads(product):
        def g(a, b, w):
            return jax.grad(lambda a, b: (product(a, b) * w).sum(), argnums=(0, 1))(a, b)
        return g

    def ours(a, b):
        return hs.bcoo_dot_general(hs.BCOO((a, li), shape=ls), hs.BCOO((b, ri), shape=rs), dimension_numbers=dims).todense()

    def ref(a, b):
        return _dense(a, li, ls, 0) @ _dense(b, ri, rs, 0)

    for axes in [(0, 0, 0), (0, None, None), (None, 0, None), (None, None, 0)]:
        got = hlopt.jit(jax.vmap(grads(ours), in_axes=axes))(As if axes[0] == 0 else ad_,
                                                              Bs if axes[1] == 0 else bd, Ws if axes[2] == 0 else Ws[0])
        want = jax.jit(jax.vmap(grads(ref), in_axes=axes))(As if axes[0] == 0 else ad_, Bs if axes[1] == 0 else bd,
                                                           Ws if axes[2] == 0 else Ws[0])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_jvp_of_sparse_sparse_product():
    rng = np.random.RandomState(9)
    ld, li = buffers(rng, (4, 5), 0, 0, nse=5)
    rd, ri = buffers(rng, (5, 3), 0, 0, nse=4)
    dims = (((1,), (0,)), ((), ()))
    td, tr = random_data(rng, ld.shape, "float32"), random_data(rng, rd.shape, "float32")

    def ours(a, b):
        return hs.bcoo_dot_general(hs.BCOO((a, li), shape=(4, 5)), hs.BCOO((b, ri), shape=(5, 3)),
                                   dimension_numbers=dims).todense()

    def ref(a, b):
        return js.BCOO((a, li), shape=(4, 5)).todense() @ js.BCOO((b, ri), shape=(5, 3)).todense()

    got = hlopt.jit(lambda a, b, x, y: jax.jvp(ours, (a, b), (x, y)))(ld, rd, td, tr)
    want = jax.jit(lambda a, b, x, y: jax.jvp(ref, (a, b), (x, y)))(ld, rd, td, tr)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_vmap_of_each_product():
    rng = np.random.RandomState(10)
    mats = rng.randn(3, 4, 5).astype(np.float32) * (rng.rand(3, 4, 5) < 0.5)
    vs = rng.randn(3, 5, 2).astype(np.float32)
    dims = (((1,), (0,)), ((), ()))
    ms = hs.BCOO.fromdense(mats, n_batch=1)
    # sparse x dense: both mapped, only the sparse one, only the dense one
    got = hlopt.jit(jax.vmap(lambda m, v: hs.bcoo_dot_general(m, v, dimension_numbers=dims)))(ms, vs)
    np.testing.assert_allclose(got, mats @ vs, rtol=1e-5, atol=1e-5)
    got = hlopt.jit(jax.vmap(lambda m: m @ vs[0]))(ms)
    np.testing.assert_allclose(got, mats @ vs[0], rtol=1e-5, atol=1e-5)
    m0 = hs.BCOO.fromdense(mats[0])
    got = hlopt.jit(jax.vmap(lambda v: m0 @ v))(vs)
    np.testing.assert_allclose(got, mats[0] @ vs, rtol=1e-5, atol=1e-5)
    ws = rng.randn(3, 2, 4).astype(np.float32)
    got = hlopt.jit(jax.vmap(lambda w: w @ m0, in_axes=0))(ws)
    np.testing.assert_allclose(got, ws @ mats[0], rtol=1e-5, atol=1e-5)
    # SDDMM: a mapped, b shared
    a = rng.randn(3, 4, 6).astype(np.float32)
    b = rng.randn(6, 5).astype(np.float32)
    got = hlopt.jit(jax.vmap(lambda a: hs.bcoo_dot_general_sampled(a, b, m0.indices, dimension_numbers=dims)))(a)
    want = jax.jit(jax.vmap(lambda a: js.bcoo_dot_general_sampled(a, b, m0.indices, dimension_numbers=dims)))(a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # sparse x sparse
    rs = hs.BCOO.fromdense(np.swapaxes(mats, 1, 2).copy(), n_batch=1)
    got = hlopt.jit(jax.vmap(lambda x, y: hs.bcoo_dot_general(x, y, dimension_numbers=dims).todense()))(ms, rs)
    np.testing.assert_allclose(got, mats @ np.swapaxes(mats, 1, 2), rtol=1e-5, atol=1e-5)


def test_grad_under_vmap():
    rng = np.random.RandomState(11)
    m = hs.BCOO.fromdense(rng.randn(4, 5).astype(np.float32) * (rng.rand(4, 5) < 0.6))
    vs = rng.randn(3, 5).astype(np.float32)
    got = hlopt.jit(jax.vmap(jax.grad(lambda d, v: (hs.BCOO((d, m.indices), shape=m.shape) @ v).sum())))(
        jnp.broadcast_to(m.data, (3, m.nse)), vs)
    jm = js.BCOO((m.data, m.indices), shape=m.shape)
    want = jax.jit(jax.vmap(jax.grad(lambda d, v: (js.BCOO((d, jm.indices), shape=m.shape) @ v).sum())))(
        jnp.broadcast_to(m.data, (3, m.nse)), vs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Bad input


def test_errors():
    rng = np.random.RandomState(12)
    m = hs.BCOO(buffers(rng, (4, 5), 0, 0, nse=4), shape=(4, 5))
    v = jnp.ones((6, 2), jnp.float32)
    with pytest.raises(TypeError, match="contracting dimensions to have the same shape"):
        hs.bcoo_dot_general(m, v, dimension_numbers=(((1,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="nonnegative and less than"):
        hs.bcoo_dot_general(m, jnp.ones((5, 2)), dimension_numbers=(((2,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="distinct"):
        hs.bcoo_dot_general(m, jnp.ones((5, 5)), dimension_numbers=(((1, 1), (0, 1)), ((), ())))
    with pytest.raises(TypeError, match="dimension_numbers must be"):
        hs.bcoo_dot_general(m, jnp.ones((5, 2)), dimension_numbers=(1, 0))
    keys = jax.random.split(jax.random.key(0), 10).reshape(5, 2)
    with pytest.raises(TypeError, match="operands must be numbers"):
        hs.bcoo_dot_general(m, keys, dimension_numbers=(((1,), (0,)), ((), ())))
    with pytest.raises(TypeError, match="indices must be integers"):
        hs.bcoo_dot_general_sampled(jnp.ones((4, 3)), jnp.ones((3, 5)), jnp.zeros((4, 2), jnp.float32),
                                    dimension_numbers=(((1,), (0,)), ((), ())))
    with pytest.raises(ValueError, match="at least 1-dimensional"):
        m @ jnp.float32(2)
    with pytest.raises(TypeError, match="contracting dimensions"):
        hs.bcoo_dot_general(m, m, dimension_numbers=(((1,), (0,)), ((), ())))


def test_error_points_at_the_users_line(tmp_path):
    """Under hlopt.jit the shape error is raised at trace time, from the line that calls the product."""
    rng = np.random.RandomState(13)
    m = hs.BCOO(buffers(rng, (4, 5), 0, 0, nse=4), shape=(4, 5))

    def f(m, v):
        return m @ v  # the offending line

    with pytest.raises(TypeError) as info:
        hlopt.jit(f)(m, jnp.ones((3, 2), jnp.float32))
    assert any(e.name == "f" for e in info.traceback)
