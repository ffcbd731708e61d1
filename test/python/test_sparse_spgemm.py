"""Sparse x sparse products with the exact output structure: `A @ B` and `bcoo_spdot_general` with
concrete indices store exactly the structural nonzeros (scipy's count, or the dense pattern
product's), their values equal scipy's / numpy's in float64; traced indices take JAX's bound or
`nse=`, and a dense-sized bound is refused with the way to give it; gradients match the dense ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import hlopt
from hlopt import sparse as hs
from hlopt.sparse import products

MM = (((1,), (0,)), ((), ()))


def from_csr(m: sp.csr_matrix, sorted_: bool = True) -> hs.BCOO:
    coo = m.tocoo()
    idx = np.stack([coo.row, coo.col], 1).astype(np.int32)
    return hs.BCOO((jnp.asarray(coo.data), jnp.asarray(idx)), shape=m.shape, indices_sorted=sorted_,
                   unique_indices=sorted_)


def pattern(m: hs.BCOO) -> np.ndarray:
    """The dense 0/1 structure of a BCOO array (padding dropped, duplicates counted once), float64."""
    ones = hs.BCOO((jnp.ones(m.data.shape, jnp.float32), m.indices), shape=m.shape)
    return (np.asarray(ones.todense()) != 0).astype(np.float64)


def structural_nse(lhs: hs.BCOO, rhs: hs.BCOO, dims, n_batch: int) -> int:
    """The most nonzeros of any output batch of the product of the patterns (exact in float64)."""
    counts = np.asarray(lax.dot_general(pattern(lhs), pattern(rhs), dims)) != 0
    return int(counts.reshape(int(np.prod(counts.shape[:n_batch])), -1).sum(1).max(initial=0))


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.floats(0.0, 0.3), st.integers(0, 10**6))
def test_matmul_nse_and_values_equal_scipy(n, k, m, density, seed):
    """Eager `A @ B` of row-sorted CSR-like operands: nse is scipy's structural count, values scipy's."""
    with jax.enable_x64(True):
        a = sp.random(n, k, density=density, format="csr", random_state=seed, dtype=np.float64)
        b = sp.random(k, m, density=density, format="csr", random_state=seed + 1, dtype=np.float64)
        want = a @ b
        got = from_csr(a) @ from_csr(b)
        ones = (a != 0).astype(np.float64) @ (b != 0).astype(np.float64)
        assert got.nse == ones.nnz
        np.testing.assert_allclose(np.asarray(got.todense()), want.toarray(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("graph", ["random", "power-law"])
def test_matmul_of_a_graph_squared_equals_scipy(graph):
    rng = np.random.default_rng(3)
    n = 300
    if graph == "random":
        rows, cols = np.repeat(np.arange(n), 4), rng.integers(0, n, 4 * n)
    else:
        p = np.arange(1, n + 1) ** -0.8
        p /= p.sum()
        rows, cols = rng.choice(n, 3 * n, p=p), rng.choice(n, 3 * n, p=p)
    with jax.enable_x64(True):
        a = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))
        a.sum_duplicates()
        got = from_csr(a) @ from_csr(a)
        want = a @ a
        assert got.nse == want.nnz
        assert got.indices_sorted and got.unique_indices
        keys = np.asarray(got.indices[:, 0]) * n + np.asarray(got.indices[:, 1])
        assert (np.diff(keys) > 0).all()
        np.testing.assert_allclose(np.asarray(got.todense()), want.toarray(), rtol=1e-12, atol=1e-12)


LAYOUTS = [
    # lhs shape, lhs n_batch, rhs shape, rhs n_batch, dims
    ((6, 7), 0, (7, 5), 0, MM),
    ((6, 7), 0, (5, 7), 0, (((1,), (1,)), ((), ()))),
    ((7,), 0, (7, 5), 0, (((0,), (0,)), ((), ()))),
    ((6, 7), 0, (7,), 0, (((1,), (0,)), ((), ()))),
    ((3, 6, 7), 1, (3, 7, 5), 1, (((2,), (1,)), ((0,), (0,)))),
    ((3, 6, 7), 1, (7, 5), 0, (((2,), (0,)), ((), ()))),
    ((2, 3, 6, 7), 2, (3, 7, 4), 1, (((3,), (1,)), ((1,), (0,)))),
    ((5, 4, 3), 0, (4, 3, 6), 0, (((1, 2), (0, 1)), ((), ()))),
    ((4, 5), 0, (6, 3), 0, (((), ()), ((), ()))),
]


def random_bcoo(rng: np.random.RandomState, shape, n_batch: int, nse: int) -> hs.BCOO:
    """Unsorted indices with duplicates and a padding entry per batch (an index equal to the size)."""
    batch, sparse = shape[:n_batch], shape[n_batch:]
    idx = np.stack([rng.randint(0, s, size=(*batch, nse)) for s in sparse], -1)
    idx[..., -1, :] = sparse
    data = rng.randn(*batch, nse)
    return hs.BCOO((jnp.asarray(data), jnp.asarray(idx.astype(np.int32))), shape=shape)


@pytest.mark.parametrize("lshape,lnb,rshape,rnb,dims", LAYOUTS)
def test_spdot_general_exact_on_layouts(lshape, lnb, rshape, rnb, dims):
    """bcoo_dot_general of concrete BCOO arrays: nse is the structural count of the densest output
    batch, values are the dense product's (float64, 1e-12); the same nse under jit when given."""
    rng = np.random.RandomState(len(lshape) * 10 + len(rshape))
    with jax.enable_x64(True):
        lhs, rhs = random_bcoo(rng, lshape, lnb, 9), random_bcoo(rng, rshape, rnb, 8)
        got = hs.bcoo_dot_general(lhs, rhs, dimension_numbers=dims)
        want = lax.dot_general(np.asarray(lhs.todense()), np.asarray(rhs.todense()), dims)
        n_batch = len(dims[1][0]) + (lnb - len(dims[1][0])) + (rnb - len(dims[1][1]))
        exact = structural_nse(lhs, rhs, dims, n_batch)
        assert got.nse == exact == hs.bcoo_spdot_nse(lhs, rhs, dimension_numbers=dims)
        np.testing.assert_allclose(np.asarray(got.todense()), np.asarray(want), rtol=1e-12, atol=1e-12)
        f = hlopt.jit(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=dims, nse=exact))
        np.testing.assert_allclose(np.asarray(f(lhs, rhs).todense()), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_concrete_nse_below_the_count_keeps_the_first_outputs_as_traced_does():
    """nse= below the exact count keeps each batch's first row-major positions, eagerly (host
    structure) as under jit (the annotation); nse= above it pads."""
    rng = np.random.RandomState(8)
    lhs, rhs = random_bcoo(rng, (3, 6, 7), 1, 12), random_bcoo(rng, (3, 7, 5), 1, 12)
    dims = (((2,), (1,)), ((0,), (0,)))
    exact = hs.bcoo_spdot_nse(lhs, rhs, dimension_numbers=dims)
    for nse in (exact // 2, exact + 3):
        eager = hs.bcoo_spdot_general(lhs, rhs, dimension_numbers=dims, nse=nse)
        traced = hlopt.jit(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=dims, nse=nse))(lhs, rhs)
        assert eager.nse == traced.nse == nse
        np.testing.assert_array_equal(np.asarray(eager.indices), np.asarray(traced.indices))
        np.testing.assert_allclose(np.asarray(eager.data), np.asarray(traced.data), rtol=1e-5, atol=1e-6)


def test_broadcast_batch_buffers_and_no_pairs():
    """An operand whose indices broadcast over a batch dim, and operands that share no contracting index."""
    rng = np.random.RandomState(1)
    idx = rng.randint(0, 5, size=(1, 6, 2)).astype(np.int32)
    lhs = hs.BCOO((jnp.asarray(rng.randn(3, 6).astype(np.float32)), jnp.asarray(idx)), shape=(3, 5, 5))
    rhs = random_bcoo(rng, (3, 5, 4), 1, 7)
    dims = (((2,), (1,)), ((0,), (0,)))
    got = hs.bcoo_dot_general(lhs, rhs, dimension_numbers=dims)
    want = lax.dot_general(np.asarray(lhs.todense()), np.asarray(rhs.todense()), dims)
    assert got.nse == structural_nse(lhs, rhs, dims, 1)
    np.testing.assert_allclose(np.asarray(got.todense()), np.asarray(want), rtol=1e-5, atol=1e-5)
    a = hs.BCOO((jnp.ones(2), jnp.asarray([[0, 0], [1, 0]], jnp.int32)), shape=(2, 3))
    b = hs.BCOO((jnp.ones(2), jnp.asarray([[1, 0], [2, 1]], jnp.int32)), shape=(3, 2))
    empty = a @ b
    assert empty.nse == 0 and not np.asarray(empty.todense()).any()


def test_concrete_indices_closed_over_by_jit_are_counted():
    """Indices that a traced function closes over are concrete: the exact nse, data traced."""
    a = sp.random(30, 30, density=0.05, format="csr", random_state=4, dtype=np.float32)
    A = from_csr(a)
    f = hlopt.jit(lambda d: hs.BCOO((d, A.indices), shape=A.shape) @ A)
    got = f(A.data)
    assert got.nse == (a @ a).nnz
    np.testing.assert_allclose(np.asarray(got.todense()), (a @ a).toarray(), rtol=1e-5, atol=1e-5)


def test_traced_indices_take_jax_bound_and_refuse_a_dense_sized_one(monkeypatch):
    a = sp.random(40, 40, density=0.05, format="csr", random_state=2, dtype=np.float32)
    A = from_csr(a)
    bound = min(A.nse * A.nse, 40 * 40)
    assert hlopt.jit(lambda x: x @ x)(A).nse == bound
    monkeypatch.setattr(products, "TRACED_BOUND_LIMIT", bound - 1)
    with pytest.raises(hs.SparseEfficiencyError, match=r"nse=N.*bcoo_spdot_nse"):
        hlopt.jit(lambda x: x @ x)(A)
    exact = hs.bcoo_spdot_nse(A, A, dimension_numbers=MM)
    got = hlopt.jit(lambda x: hs.bcoo_spdot_general(x, x, dimension_numbers=MM, nse=exact))(A)
    assert got.nse == exact == (a @ a).nnz
    np.testing.assert_allclose(np.asarray(got.todense()), (a @ a).toarray(), rtol=1e-5, atol=1e-5)


def test_spdot_nse_refuses_traced_indices():
    A = from_csr(sp.random(8, 8, density=0.3, format="csr", random_state=0, dtype=np.float32))
    with pytest.raises(jax.errors.ConcretizationTypeError, match="outside jit"):
        jax.jit(lambda x: hs.bcoo_spdot_nse(x, x, dimension_numbers=MM))(A)


def test_gradients_through_exact_product_match_dense():
    """jax.grad of both operands' data through eager `A @ B` (exact nse) against the dense product's."""
    rng = np.random.RandomState(6)
    lhs, rhs = random_bcoo(rng, (6, 7), 0, 12), random_bcoo(rng, (7, 5), 0, 10)
    w = jnp.asarray(rng.randn(6, 5).astype(np.float32))

    def sparse_loss(ld, rd):
        out = hs.BCOO((ld, lhs.indices), shape=lhs.shape) @ hs.BCOO((rd, rhs.indices), shape=rhs.shape)
        return jnp.sum(jnp.sin(out.todense()) * w)

    def dense_loss(ld, rd):
        dl = hs.BCOO((ld, lhs.indices), shape=lhs.shape).todense()
        dr = hs.BCOO((rd, rhs.indices), shape=rhs.shape).todense()
        return jnp.sum(jnp.sin(dl @ dr) * w)

    args = (lhs.data.astype(jnp.float32), rhs.data.astype(jnp.float32))
    for got, want in zip(jax.grad(sparse_loss, (0, 1))(*args), jax.grad(dense_loss, (0, 1))(*args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
