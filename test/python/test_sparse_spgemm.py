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
from hlopt.passes.registry import PIPELINES
from hlopt.sparse import products

from support.sparse_util import dense, dense_of

MM = (((1,), (0,)), ((), ()))


def from_csr(m: sp.csr_matrix, sorted_: bool = True) -> hs.BCOO:
    coo = m.tocoo()
    idx = np.stack([coo.row, coo.col], 1).astype(np.int32)
    return hs.BCOO((jax.device_put(coo.data), jax.device_put(idx)), shape=m.shape, indices_sorted=sorted_,
                   unique_indices=sorted_)


def pattern(m: hs.BCOO) -> np.ndarray:
    """The dense 0/1 structure of a BCOO array (padding dropped, duplicates counted once), float64."""
    return (dense(np.ones(m.data.shape), m.indices, m.shape) != 0).astype(np.float64)


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


def graph_csr(rng: np.random.Generator, graph: str, n: int, per_row: int, exponent: float,
              symmetric: bool) -> sp.csr_matrix:
    """n x n float64: `per_row` uniform columns a row ("random"), or n * per_row edges whose ends
    are drawn with weight (node + 1) ** -exponent ("power-law"), both directions if `symmetric`."""
    if graph == "random":
        rows, cols = np.repeat(np.arange(n), per_row), rng.integers(0, n, per_row * n)
    else:
        p = np.arange(1, n + 1) ** -exponent
        p /= p.sum()
        rows, cols = rng.choice(n, per_row * n, p=p), rng.choice(n, per_row * n, p=p)
        if symmetric:
            rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    a = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    return a


@pytest.mark.parametrize("graph", ["random", "power-law"])
def test_matmul_of_a_graph_squared_equals_scipy(graph):
    rng = np.random.default_rng(3)
    n = 300
    with jax.enable_x64(True):
        a = graph_csr(rng, graph, n, 4 if graph == "random" else 3, 0.8, symmetric=False)
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
    return hs.BCOO((jax.device_put(data), jax.device_put(idx.astype(np.int32))), shape=shape)


@pytest.mark.parametrize("lshape,lnb,rshape,rnb,dims", LAYOUTS)
def test_spdot_general_exact_on_layouts(lshape, lnb, rshape, rnb, dims):
    """bcoo_dot_general of concrete BCOO arrays: nse is the structural count of the densest output
    batch, values are the dense product's (float64, 1e-12); the same nse under jit when given."""
    rng = np.random.RandomState(len(lshape) * 10 + len(rshape))
    with jax.enable_x64(True):
        lhs, rhs = random_bcoo(rng, lshape, lnb, 9), random_bcoo(rng, rshape, rnb, 8)
        got = hs.bcoo_dot_general(lhs, rhs, dimension_numbers=dims)
        want = lax.dot_general(dense_of(lhs), dense_of(rhs), dims)
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
    lhs = hs.BCOO((jax.device_put(rng.randn(3, 6).astype(np.float32)), jax.device_put(idx)), shape=(3, 5, 5))
    rhs = random_bcoo(rng, (3, 5, 4), 1, 7)
    dims = (((2,), (1,)), ((0,), (0,)))
    got = hs.bcoo_dot_general(lhs, rhs, dimension_numbers=dims)
    want = lax.dot_general(dense_of(lhs), dense_of(rhs), dims)
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
    w = jax.device_put(rng.randn(6, 5).astype(np.float32))

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


# ---------------------------------------------------------------------------
# The native CSR kernels (hlopt.sparse.spgemm): 2-d x 2-d products of float or complex data

ORIENTED = {  # lhs contracting dim, rhs contracting dim -> dimension_numbers
    (1, 0): MM, (0, 0): (((0,), (0,)), ((), ())), (1, 1): (((1,), (1,)), ((), ())), (0, 1): (((0,), (1,)), ((), ())),
}


def coo_operand(rng: np.random.Generator, shape, nse: int, dtype, index_dtype, hostile: bool) -> hs.BCOO:
    """Unsorted entries with duplicates; `hostile` adds padding, negative and far out-of-range indices."""
    idx = np.stack([rng.integers(0, s, nse) for s in shape], 1).astype(index_dtype)
    if hostile and nse >= 3:
        idx[-1] = shape
        idx[-2] = (-1, 0)
        idx[-3] = (0, np.iinfo(index_dtype).max)
    data = rng.standard_normal(nse)
    if np.issubdtype(dtype, np.complexfloating):
        data = data + 1j * rng.standard_normal(nse)
    return hs.BCOO((jax.device_put(data.astype(dtype)), jax.device_put(idx)), shape=shape)



def pattern_of(m: hs.BCOO) -> np.ndarray:
    idx = np.asarray(m.indices).astype(np.int64)
    keep = np.all((idx >= 0) & (idx < m.shape), axis=1)
    out = np.zeros(m.shape)
    out[idx[keep, 0], idx[keep, 1]] = 1
    return out


def uses_kernel(f, *args) -> bool:
    """Whether the program hlopt compiles for CPU calls the SpGEMM kernel (traced indices)."""
    return "hlopt_spgemm_fill" in hlopt.jit(f).lower(*args).apply(PIPELINES["hlopt-default"], platform="cpu").as_text()


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 30), st.integers(0, 60), st.integers(0, 60),
       st.sampled_from(sorted(ORIENTED)), st.sampled_from([np.float32, np.float64, np.complex128]),
       st.sampled_from([np.int32, np.int64]), st.booleans(), st.integers(0, 10**6))
def test_kernel_product_equals_numpy_eager_and_traced(n, k, m, lnse, rnse, orient, dtype, index_dtype, hostile, seed):
    """Eager: nse is the structural count, values numpy's (float64: 1e-12), indices row-major and
    unique. hlopt.jit and jax.jit with traced indices and nse= give the same entries."""
    rng = np.random.default_rng(seed)
    dims = ORIENTED[orient]
    with jax.enable_x64(True):
        lhs = coo_operand(rng, (k, n) if orient[0] == 0 else (n, k), lnse, dtype, index_dtype, hostile)
        rhs = coo_operand(rng, (m, k) if orient[1] == 1 else (k, m), rnse, dtype, index_dtype, hostile)
        prod = lambda x, y: hs.bcoo_dot_general(x, y, dimension_numbers=dims)  # noqa: E731
        assert uses_kernel(prod, lhs, rhs) == (lnse * rnse > 0)  # an empty product is zeros, no call
        got = prod(lhs, rhs)
        want = lax.dot_general(dense_of(lhs), dense_of(rhs), dims)
        exact = int((lax.dot_general(pattern_of(lhs), pattern_of(rhs), dims) != 0).sum())
        assert got.nse == exact == hs.bcoo_spdot_nse(lhs, rhs, dimension_numbers=dims)
        tol = 1e-12 if dtype != np.float32 else 1e-5
        np.testing.assert_allclose(np.asarray(got.todense()), np.asarray(want), rtol=tol, atol=tol)
        keys = np.asarray(got.indices[:, 0]).astype(np.int64) * m + np.asarray(got.indices[:, 1])
        assert (np.diff(keys) > 0).all() and got.indices.dtype == index_dtype
        spdot = lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=dims, nse=exact + 2)  # noqa: E731
        for traced in (hlopt.jit(spdot)(lhs, rhs), jax.jit(spdot)(lhs, rhs)):
            np.testing.assert_array_equal(np.asarray(traced.indices[:exact]), np.asarray(got.indices))
            np.testing.assert_array_equal(np.asarray(traced.indices[exact:]), np.full((2, 2), (n, m)))
            np.testing.assert_allclose(np.asarray(traced.data[:exact]), np.asarray(got.data), rtol=tol, atol=tol)
            assert not np.asarray(traced.data[exact:]).any()


@pytest.mark.parametrize("graph", ["random", "power-law"])
def test_kernel_square_of_a_graph_equals_scipy(graph):
    """A @ A at 3000 rows (power-law hubs' rows are ordered by a scan of the dense marker, the
    others by rank): scipy's nnz, and its entries in row-major order."""
    rng = np.random.default_rng(11)
    with jax.enable_x64(True):
        a = graph_csr(rng, graph, 3000, 5 if graph == "random" else 8, 0.9, symmetric=True)
        got = from_csr(a) @ from_csr(a)
        want = (a @ a).tocoo()
        want.sum_duplicates()  # row-major, as hlopt's entries are
        assert got.nse == want.nnz
        np.testing.assert_array_equal(np.asarray(got.indices), np.stack([want.row, want.col], 1))
        np.testing.assert_allclose(np.asarray(got.data), want.data, rtol=1e-12, atol=1e-12)


def test_kernel_orders_a_long_sparse_row_by_sorting():
    """An output row of 300 distinct columns out of 20000 (neither rank-ordered nor dense) equals scipy's."""
    rng = np.random.default_rng(4)
    lhs = sp.csr_matrix((rng.standard_normal(300), (np.zeros(300, int), np.arange(300))), shape=(2, 300))
    rhs = sp.csr_matrix((rng.standard_normal(300), (np.arange(300), rng.permutation(20000)[:300])),
                        shape=(300, 20000))
    with jax.enable_x64(True):
        got = from_csr(lhs) @ from_csr(rhs)
        want = (lhs @ rhs).tocoo()
        want.sum_duplicates()
        assert got.nse == want.nnz == 300
        np.testing.assert_array_equal(np.asarray(got.indices), np.stack([want.row, want.col], 1))
        np.testing.assert_allclose(np.asarray(got.data), want.data, rtol=1e-12, atol=1e-12)


# Output rows of these many distinct columns: none, under one vector of ranks (8 int32 or 4 int64
# columns), whole vectors, one more, a pass of 4 vectors and the passes after it, up to the longest
# row ordered by rank (256) and past it.
RANK_ROW_LENGTHS = [0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 63, 64, 65, 100, 128, 200, 255, 256, 257]


def rank_rows_operands(rng: np.random.Generator, cols: int, dtype) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """lhs row i sums rhs rows 2i and 2i + 1, which share about a third of their columns, so output row i
    has RANK_ROW_LENGTHS[i] distinct columns (some of them sums of two products), out of `cols`."""
    lhs_rows, lhs_cols, rhs_rows, rhs_cols = [], [], [], []
    for i, n in enumerate(RANK_ROW_LENGTHS):
        picked = rng.choice(cols, n, replace=False)
        shared = n // 3
        first, second = picked[: (n + shared) // 2], np.concatenate([picked[(n + shared) // 2:], picked[:shared]])
        for j, part in ((2 * i, first), (2 * i + 1, second)):
            if len(part):
                lhs_rows.append(i)
                lhs_cols.append(j)
            rhs_rows += [j] * len(part)
            rhs_cols += list(part)
    lhs = sp.csr_matrix((rng.standard_normal(len(lhs_rows)).astype(dtype), (lhs_rows, lhs_cols)),
                        shape=(len(RANK_ROW_LENGTHS), 2 * len(RANK_ROW_LENGTHS)))
    rhs = sp.csr_matrix((rng.standard_normal(len(rhs_rows)).astype(dtype), (rhs_rows, rhs_cols)),
                        shape=(2 * len(RANK_ROW_LENGTHS), cols))
    return lhs, rhs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("cols", [4096, 1 << 20])
def test_kernel_orders_rows_by_rank_across_vector_and_pass_boundaries(dtype, index_dtype, cols):
    """Rows of every length around the rank vectors' and passes' boundaries (int32 and int64 columns;
    out of 2^20 rank ordering is the cheapest up to 256 columns and sorting after, out of 4096 rank
    up to about 32 and the bitmap after), their entries unsorted within the rhs's rows: scipy's
    columns ascending and values, as BCOO (eager, and with nse cutting rows short) and as BCSR."""
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        lhs, rhs = rank_rows_operands(rng, cols, dtype)
        want = (lhs.astype(np.float64) @ rhs.astype(np.float64)).tocoo()
        want.sum_duplicates()
        assert np.array_equal(np.diff(want.tocsr().indptr), RANK_ROW_LENGTHS)
        want_idx = np.stack([want.row, want.col], 1)
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)

        def bcoo(m: sp.csr_matrix, shuffle: bool) -> hs.BCOO:
            coo = m.tocoo()
            order = rng.permutation(coo.nnz) if shuffle else np.arange(coo.nnz)
            idx = np.stack([coo.row, coo.col], 1)[order].astype(index_dtype)
            return hs.BCOO((jax.device_put(coo.data[order]), jax.device_put(idx)), shape=m.shape)

        a, b = bcoo(lhs, False), bcoo(rhs, True)
        got = a @ b
        assert got.nse == want.nnz
        np.testing.assert_array_equal(np.asarray(got.indices), want_idx)
        np.testing.assert_allclose(np.asarray(got.data), want.data, **tol)
        ends = np.cumsum(RANK_ROW_LENGTHS)
        for nse in (int(ends[12]) - 5, int(ends[20]) - 100, int(ends[-2]) + 1):  # mid-row cuts
            cut = hs.bcoo_spdot_general(a, b, dimension_numbers=MM, nse=nse)
            np.testing.assert_array_equal(np.asarray(cut.indices), want_idx[:nse])
            np.testing.assert_allclose(np.asarray(cut.data), want.data[:nse], **tol)

        shuffled = rhs.copy()
        for r in range(shuffled.shape[0]):  # columns out of order within each row, as BCSR allows
            lo, hi = shuffled.indptr[r], shuffled.indptr[r + 1]
            perm = lo + rng.permutation(hi - lo)
            shuffled.indices[lo:hi], shuffled.data[lo:hi] = shuffled.indices[perm], shuffled.data[perm]
        to_bcsr = lambda m: BCSR((jax.device_put(m.data), jax.device_put(m.indices.astype(index_dtype)),  # noqa: E731
                                  jax.device_put(m.indptr.astype(index_dtype))), shape=m.shape)
        c = bcsr_spdot_general(to_bcsr(lhs), to_bcsr(shuffled))
        np.testing.assert_array_equal(np.asarray(c.indptr), want.tocsr().indptr)
        np.testing.assert_array_equal(np.asarray(c.indices), want.col)
        np.testing.assert_allclose(np.asarray(c.data), want.data, **tol)


def test_kernel_nse_below_the_count_keeps_the_first_row_major_entries():
    a = sp.random(40, 30, density=0.2, format="csr", random_state=3, dtype=np.float64)
    b = sp.random(30, 50, density=0.2, format="csr", random_state=4, dtype=np.float64)
    with jax.enable_x64(True):
        want = (a @ b).tocoo()
        want.sum_duplicates()
        for nse in (0, 1, want.nnz // 3):
            for got in (hs.bcoo_spdot_general(from_csr(a), from_csr(b), dimension_numbers=MM, nse=nse),
                        hlopt.jit(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=MM, nse=nse))(
                            from_csr(a), from_csr(b))):
                assert got.nse == nse
                np.testing.assert_array_equal(np.asarray(got.indices), np.stack([want.row, want.col], 1)[:nse])
                np.testing.assert_allclose(np.asarray(got.data), want.data[:nse], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("where", ["eager", "hlopt.jit", "jax.jit"])
def test_kernel_gradients_match_dense(where):
    """grad and jvp of both operands' data through the kernel product (traced indices, nse above
    the count, so padding is differentiated too) equal the dense product's."""
    rng = np.random.default_rng(9)
    with jax.enable_x64(True):
        lhs, rhs = coo_operand(rng, (8, 6), 20, np.float64, np.int32, True), coo_operand(
            rng, (9, 6), 15, np.float64, np.int32, True)
        dims = ORIENTED[(1, 1)]
        w = jax.device_put(rng.standard_normal((8, 9)))
        exact = hs.bcoo_spdot_nse(lhs, rhs, dimension_numbers=dims)

        def sparse_loss(ld, li, rd, ri):
            out = hs.bcoo_spdot_general(hs.BCOO((ld, li), shape=lhs.shape), hs.BCOO((rd, ri), shape=rhs.shape),
                                        dimension_numbers=dims, nse=None if where == "eager" else exact + 3)
            return jnp.sum(jnp.sin(out.todense()) * w)

        def dense_loss(ld, rd):
            dl = hs.BCOO((ld, lhs.indices), shape=lhs.shape).todense()
            dr = hs.BCOO((rd, rhs.indices), shape=rhs.shape).todense()
            return jnp.sum(jnp.sin(dl @ dr.T) * w)

        grad = jax.grad(sparse_loss, (0, 2))
        grad = {"eager": grad, "hlopt.jit": hlopt.jit(grad), "jax.jit": jax.jit(grad)}[where]
        got = grad(lhs.data, lhs.indices, rhs.data, rhs.indices)
        want = jax.grad(dense_loss, (0, 1))(lhs.data, rhs.data)
        for g, e in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-10, atol=1e-12)
        tangents = (jax.device_put(rng.standard_normal(20)), jax.device_put(rng.standard_normal(15)))
        _, got_t = jax.jvp(lambda a, b: sparse_loss(a, lhs.indices, b, rhs.indices), (lhs.data, rhs.data), tangents)
        _, want_t = jax.jvp(dense_loss, (lhs.data, rhs.data), tangents)
        np.testing.assert_allclose(float(got_t), float(want_t), rtol=1e-10)


def test_kernel_product_under_vmap_of_data():
    """vmap over the data of both operands (indices shared) runs the kernel per batch element."""
    rng = np.random.default_rng(2)
    lhs, rhs = coo_operand(rng, (7, 5), 12, np.float32, np.int32, False), coo_operand(
        rng, (5, 6), 10, np.float32, np.int32, False)
    ld = jax.device_put(rng.standard_normal((3, 12)).astype(np.float32))
    rd = jax.device_put(rng.standard_normal((3, 10)).astype(np.float32))
    f = lambda a, b: (hs.BCOO((a, lhs.indices), shape=lhs.shape) @ hs.BCOO((b, rhs.indices), shape=rhs.shape)  # noqa: E731
                      ).todense()
    got = jax.vmap(f)(ld, rd)
    for i in range(3):
        want = dense_of(hs.BCOO((ld[i], lhs.indices), shape=lhs.shape)) @ dense_of(
            hs.BCOO((rd[i], rhs.indices), shape=rhs.shape))
        np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-5, atol=1e-5)


def test_layouts_the_kernels_do_not_cover_take_the_host_structure():
    """Batched, vector and integer-data products fall back (no kernel call), with exact nse as before."""
    rng = np.random.RandomState(0)
    batched = (random_bcoo(rng, (3, 6, 7), 1, 9), random_bcoo(rng, (3, 7, 5), 1, 8), (((2,), (1,)), ((0,), (0,))))
    vector = (random_bcoo(rng, (7,), 0, 4), random_bcoo(rng, (7, 5), 0, 8), (((0,), (0,)), ((), ())))
    a, b = random_bcoo(rng, (6, 7), 0, 9), random_bcoo(rng, (7, 5), 0, 8)
    as_int = lambda m: hs.BCOO((m.data.astype(jnp.int32), m.indices), shape=m.shape)  # noqa: E731
    ints = (as_int(a), as_int(b), MM)
    for lhs, rhs, dims in (batched, vector, ints):
        prod = lambda x, y, dims=dims: hs.bcoo_dot_general(x, y, dimension_numbers=dims)  # noqa: E731
        assert not uses_kernel(prod, lhs, rhs)
        assert prod(lhs, rhs).nse == hs.bcoo_spdot_nse(lhs, rhs, dimension_numbers=dims)


def _raw_fill(ld, li, rd, ri, counts, nse, rows, inner, cols):
    from hlopt.runtime import kernels

    kernels.register()
    out = (jax.ShapeDtypeStruct((nse,), ld.dtype), jax.ShapeDtypeStruct((nse, 2), li.dtype))
    return jax.ffi.ffi_call("hlopt_spgemm_fill", out)(ld, li, rd, ri, counts, rows=np.int64(rows),
                                                       inner=np.int64(inner), cols=np.int64(cols))


def _run_counts(csr: sp.csr_matrix, per: int) -> np.ndarray:
    """The output entries of each run of `per` rows of a CSR product (scipy's), what hlopt_spgemm_count gives."""
    ptr = csr.indptr.astype(np.int64)
    return np.diff(ptr[np.minimum(np.arange(0, -(-csr.shape[0] // per) * per + 1, per), csr.shape[0])])


def messy_coo(rng: np.random.Generator, shape, density: float, dtype, index_dtype) -> tuple[hs.BCOO, np.ndarray]:
    """A BCOO matrix claimed sorted and unique whose entries are neither: runs of empty rows (two runs
    of counted rows and some single rows), a quarter of the entries repeated, all shuffled out of
    row order. Also its dense value (duplicates added)."""
    from hlopt.passes.xla_cpu.sparse_kernels import SPGEMM_ROWS_PER_COUNT as per

    m = sp.random(*shape, density=density, format="lil", random_state=int(rng.integers(2**31)), dtype=np.float64)
    m[per:3 * per] = 0  # two whole runs of empty rows
    m[rng.choice(shape[0], shape[0] // 10, replace=False)] = 0
    coo = m.tocoo()
    rows, cols, vals = coo.row, coo.col, coo.data
    dup = rng.choice(rows.size, rows.size // 4)
    rows, cols = np.concatenate([rows, rows[dup]]), np.concatenate([cols, cols[dup]])
    vals = np.concatenate([vals, rng.standard_normal(dup.size)])
    order = rng.permutation(rows.size)
    idx = np.stack([rows[order], cols[order]], 1).astype(index_dtype)
    dense = np.zeros(shape)
    np.add.at(dense, (rows, cols), vals)
    mat = hs.BCOO((jax.device_put(vals[order].astype(dtype)), jax.device_put(idx)), shape=shape, indices_sorted=True,
                  unique_indices=True)
    return mat, dense


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_runs_of_counted_rows_on_messy_layouts_equal_scipy(dtype, index_dtype):
    """A product of 1000 rows: many runs of SPGEMM_ROWS_PER_COUNT counted rows, shared out to the
    threads, with empty rows and runs, duplicates and entries out of row order though claimed
    sorted. Eager: scipy's nnz and entries (float64: 1e-12). Under hlopt.jit with nse cut inside a
    run, at a run's end and past the count: the first nse of them, then padding."""
    from hlopt.passes.xla_cpu.sparse_kernels import SPGEMM_ROWS_PER_COUNT as per

    rng = np.random.default_rng(5)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    with jax.enable_x64(True):
        a, ad = messy_coo(rng, (1000, 300), 0.02, dtype, index_dtype)
        b, bd = messy_coo(rng, (300, 700), 0.02, dtype, index_dtype)
        want = (sp.csr_matrix(pattern_of(a)) @ sp.csr_matrix(pattern_of(b))).tocsr()
        want.sort_indices()
        values = (ad @ bd)[want.nonzero()]
        got = a @ b
        assert got.nse == want.nnz and got.indices.dtype == index_dtype
        np.testing.assert_array_equal(np.asarray(got.indices), np.stack(want.nonzero(), 1))
        np.testing.assert_allclose(np.asarray(got.data), values, **tol)
        runs = np.cumsum(_run_counts(want, per))
        assert runs[0] > 0 and runs[1] == runs[2] == runs[0]  # the second and third runs are empty
        for nse in (int(runs[4]) + 3, int(runs[6]), want.nnz + 5):
            out = hlopt.jit(lambda x, y, nse=nse: hs.bcoo_spdot_general(x, y, dimension_numbers=MM, nse=nse))(a, b)
            k = min(nse, want.nnz)
            np.testing.assert_array_equal(np.asarray(out.indices[:k]), np.stack(want.nonzero(), 1)[:k])
            np.testing.assert_allclose(np.asarray(out.data[:k]), values[:k], **tol)
            np.testing.assert_array_equal(np.asarray(out.indices[k:]), np.tile([1000, 700], (nse - k, 1)))


def test_fill_kernel_takes_counts_of_any_run_length_and_refuses_forged_ones():
    """hlopt_spgemm_fill reads the run length off the counts' shape (ceil(rows / runs) rows each, the
    last run short): a count per row, one for all rows and ragged runs give the same product; counts
    that move entries between runs, or more counts than rows, are errors (never a write outside a run)."""
    from hlopt.runtime import kernels

    kernels.register()
    a = sp.random(150, 40, density=0.05, format="csr", random_state=1, dtype=np.float64)
    b = sp.random(40, 60, density=0.05, format="csr", random_state=2, dtype=np.float64)
    want = (a @ b).tocsr()
    want.sort_indices()
    with jax.enable_x64(True):
        A, B = from_csr(a), from_csr(b)
        li, ri = A.indices, B.indices
        for runs in (150, 1, 2, 7, 100):
            per = -(-150 // runs)
            counts = np.zeros(runs, np.int32)
            counts[: -(-150 // per)] = _run_counts(want, per)
            data, idx = _raw_fill(A.data, li, B.data, ri, jax.device_put(counts), want.nnz, 150, 40, 60)
            np.testing.assert_array_equal(np.asarray(idx), np.stack(want.nonzero(), 1))
            np.testing.assert_allclose(np.asarray(data), (a @ b).toarray()[want.nonzero()], rtol=1e-12)
            out = jax.ffi.ffi_call("hlopt_spgemm_count", jax.ShapeDtypeStruct((runs,), np.int32))(
                li, ri, rows=np.int64(150), inner=np.int64(40), cols=np.int64(60))
            np.testing.assert_array_equal(np.asarray(out), counts)
        counts = _run_counts(want, 10).astype(np.int32)
        moved = counts.copy()
        j = int(np.flatnonzero(counts)[0])
        moved[j] -= 1
        moved[j + 1] += 1
        short = counts.copy()
        short[np.flatnonzero(counts)[-1]] = 0  # a run's entries not counted: its rows would spill past its end
        for forged in (moved, short):
            with pytest.raises(Exception, match="do not match"):
                jax.block_until_ready(_raw_fill(A.data, li, B.data, ri, jax.device_put(forged), want.nnz, 150, 40, 60))
        with pytest.raises(Exception, match="counts"):
            jax.block_until_ready(_raw_fill(A.data, li, B.data, ri, jnp.zeros(151, np.int32), 3, 150, 40, 60))


def test_fill_kernel_refuses_forged_counts_and_shapes():
    """Counts that disagree with the operands, negative counts and inconsistent shapes are errors
    (never a read or write out of bounds); huge or negative indices are dropped."""
    li = jnp.asarray([[0, 0], [1, 1], [2**31 - 1, 0], [-5, 1], [0, -1]], jnp.int32)
    ld = jnp.ones(5, jnp.float32)
    ri = jnp.asarray([[0, 0], [1, 1], [1, 2**30]], jnp.int32)
    rd = jnp.ones(3, jnp.float32)
    good = jnp.asarray([1, 1], jnp.int32)
    data, idx = _raw_fill(ld, li, rd, ri, good, 3, 2, 2, 2)
    np.testing.assert_array_equal(np.asarray(idx), [[0, 0], [1, 1], [2, 2]])
    np.testing.assert_array_equal(np.asarray(data), [1, 1, 0])
    for counts, match in ((jnp.asarray([2, 0], jnp.int32), "do not match"),
                          (jnp.asarray([-1, 3], jnp.int32), "negative"),
                          (jnp.asarray([2**31 - 1, 2**31 - 1], jnp.int32), "above cols")):
        with pytest.raises(Exception, match=match):
            jax.block_until_ready(_raw_fill(ld, li, rd, ri, counts, 3, 2, 2, 2))
    with pytest.raises(Exception, match="counts"):
        jax.block_until_ready(_raw_fill(ld, li, rd, ri, jnp.asarray([1, 1, 1], jnp.int32), 3, 2, 2, 2))
    with pytest.raises(Exception, match="rows, inner and cols"):
        jax.block_until_ready(_raw_fill(ld, li, rd, ri, good, 3, 2, 2, -1))


def test_portable_rules_accept_the_kernel_calls_and_refuse_changed_ones():
    """A saved program's hlopt_spgemm calls pass runtime/portable.py's rules; a changed attribute,
    an extra one, an i32 one or a result of another size is refused."""
    from hlopt.passes.mlir import ir
    from hlopt.passes.xla_cpu.sparse_kernels import SPGEMM_ROWS_PER_COUNT
    from hlopt.runtime.portable import PortableCheckError, check_portable

    a = from_csr(sp.random(6, 7, density=0.3, format="csr", random_state=0, dtype=np.float32))
    b = from_csr(sp.random(7, 5, density=0.3, format="csr", random_state=1, dtype=np.float32))
    module = hlopt.lower(lambda x, y: hs.bcoo_spdot_general(x, y, dimension_numbers=MM, nse=9).todense(), a,
                         b).compile().module
    check_portable(module)
    calls = []

    def visit(op):
        if op.name == "stablehlo.custom_call":
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    assert {ir.StringAttr(op.attributes["call_target_name"]).value for op in calls} == {
        "hlopt_spgemm_count", "hlopt_spgemm_fill"}
    with module.context:
        i64 = lambda v: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)  # noqa: E731
        for op in calls:
            config = ir.DictAttr(op.attributes["backend_config"])  # the pass emits StableHLO's typed form
            names = {config[i].name: config[i].attr for i in range(len(config))}
            # rows moved into another run of counts (the count's result and the fill's counts then disagree with it)
            edits = [dict(names, rows=i64(6 + SPGEMM_ROWS_PER_COUNT)), dict(names, extra=i64(1)),
                     {k: v for k, v in names.items() if k != "cols"},
                     dict(names, cols=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 5)), dict(names, inner=i64(-1))]
            for edit in edits:
                op.attributes["backend_config"] = ir.DictAttr.get(edit)
                with pytest.raises(PortableCheckError, match="hlopt_spgemm"):
                    check_portable(module)
            op.attributes["backend_config"] = config
        check_portable(module)


# ---- BCSR @ BCSR (hlopt.sparse.bcsr_spgemm): the BCOO product, on CPU the SpGEMM kernels ----

from hlopt.sparse.bcsr import BCSR  # noqa: E402
from hlopt.sparse.bcsr_spgemm import bcsr_spdot_general  # noqa: E402


def messy_csr(rng: np.random.Generator, shape, density, dtype, index_dtype, shuffle: bool, dupes: bool,
              lead: int, pad: int, bad_cols: bool) -> tuple[BCSR, np.ndarray]:
    """A BCSR matrix and its dense value: columns unsorted within rows (`shuffle`), repeated (`dupes`),
    `lead` padding entries before indptr[0] and `pad` after indptr[-1], out-of-range columns (dropped)."""
    m, k = shape
    dense = np.zeros(shape, np.complex128)
    data, cols, ptr = [], [], [lead]
    for r in range(m):
        row = list(np.flatnonzero(rng.random(k) < density))
        if dupes and row:
            row += list(rng.choice(row, size=len(row) // 2 + 1))
        if bad_cols:
            row += [k + 3, -2][: rng.integers(0, 3)]
        if shuffle:
            rng.shuffle(row)
        for c in row:
            v = rng.standard_normal() + (1j * rng.standard_normal() if np.iscomplexobj(np.zeros(1, dtype)) else 0)
            if 0 <= c < k:
                dense[r, c] += v
            data.append(v)
            cols.append(c)
        ptr.append(ptr[-1] + len(row))
    junk = rng.standard_normal(lead + pad)
    data = np.concatenate([junk[:lead], np.asarray(data, np.complex128), junk[lead:]])
    data = (data if np.iscomplexobj(np.zeros(1, dtype)) else data.real).astype(dtype)
    cols = np.concatenate([rng.integers(0, max(k, 1), lead), np.asarray(cols, np.int64), rng.integers(0, max(k, 1), pad)])
    mat = BCSR((jax.device_put(data), jax.device_put(cols.astype(index_dtype)), jax.device_put(np.asarray(ptr, index_dtype))),
               shape=shape)
    return mat, dense.astype(dtype) if np.iscomplexobj(np.zeros(1, dtype)) else dense.real.astype(dtype)


def structural(a: np.ndarray, b: np.ndarray, ap: np.ndarray, bp: np.ndarray) -> int:
    """Nonzeros of the product of the patterns (stored in-range entries, even ones that cancel)."""
    return int(((ap.astype(np.float64) @ bp.astype(np.float64)) != 0).sum())


def stored_pattern(mat: BCSR) -> np.ndarray:
    ptr, cols = np.asarray(mat.indptr), np.asarray(mat.indices)
    out = np.zeros(mat.shape, bool)
    for r in range(mat.shape[0]):
        for c in cols[ptr[r]:ptr[r + 1]]:
            if 0 <= c < mat.shape[1]:
                out[r, c] = True
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.floats(0.0, 0.6), st.integers(0, 10**6),
       st.sampled_from([np.float32, np.float64, np.complex64, np.complex128]), st.sampled_from([np.int32, np.int64]),
       st.booleans(), st.booleans(), st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_bcsr_product_equals_scipy_on_messy_layouts(n, k, m, density, seed, dtype, index_dtype, shuffle, dupes, lead,
                                                     pad, bad_cols):
    """Eager BCSR @ BCSR: exactly the structural nonzeros, columns ascending and distinct in each row,
    values those of scipy's CSR product of the same entries (float64 / complex128: 1e-12)."""
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        a, ad = messy_csr(rng, (n, k), density, dtype, index_dtype, shuffle, dupes, lead, pad, bad_cols)
        b, bd = messy_csr(rng, (k, m), density, dtype, index_dtype, shuffle, dupes, lead, pad, bad_cols)
        c = bcsr_spdot_general(a, b)
        assert c.nse == structural(ad, bd, stored_pattern(a), stored_pattern(b))
        assert c.indices.dtype == index_dtype and c.indptr.shape == (n + 1,) and int(c.indptr[-1]) == c.nse
        ptr, cols = np.asarray(c.indptr), np.asarray(c.indices)
        for r in range(n):
            assert np.all(np.diff(cols[ptr[r]:ptr[r + 1]]) > 0)
        want = (sp.csr_matrix(ad.astype(np.complex128)) @ sp.csr_matrix(bd.astype(np.complex128))).toarray()
        tol = 1e-12 if np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128)) else 2e-5
        want = want if np.iscomplexobj(np.zeros(1, dtype)) else want.real
        np.testing.assert_allclose(np.asarray(c.todense()), want.astype(dtype), rtol=tol, atol=tol)


def test_bcsr_product_is_the_bcoo_product_on_the_spgemm_kernels_for_cpu():
    """Under jit BCSR @ BCSR is the spdot_general annotation: for CPU the SpGEMM kernels, portable
    StableHLO for no platform; either way scipy's product."""
    a = sp.random(6, 7, density=0.3, format="csr", random_state=0, dtype=np.float32)
    b = sp.random(7, 5, density=0.3, format="csr", random_state=1, dtype=np.float32)
    A, B = BCSR.from_scipy_sparse(a), BCSR.from_scipy_sparse(b)
    product = lambda x, y: bcsr_spdot_general(x, y, nse=30).todense()  # noqa: E731
    assert uses_kernel(product, A, B)
    portable = hlopt.jit(product).lower(A, B).apply(PIPELINES["hlopt-default"]).as_text()
    assert "custom_call @hlopt" not in portable
    np.testing.assert_allclose(hlopt.jit(product)(A, B), (a @ b).toarray(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.jit(product)(A, B), (a @ b).toarray(), rtol=1e-6, atol=1e-6)


def test_bcsr_product_edge_matrices():
    """Empty matrices, empty rows, all-padding operands and a dense row: the exact nse, scipy's values."""
    with jax.enable_x64(True):
        cases = [sp.csr_matrix((0, 4)), sp.csr_matrix((3, 0)), sp.csr_matrix((3, 4)),
                 sp.random(5, 6, density=1.0, format="csr", random_state=0),
                 sp.csr_matrix(np.diag([1.0, 0, 2, 0]))]
        for a in cases:
            for b in (sp.random(a.shape[1], 3, density=0.5, format="csr", random_state=1),
                      sp.csr_matrix((a.shape[1], 0))):
                c = bcsr_spdot_general(BCSR.from_scipy_sparse(a), BCSR.from_scipy_sparse(b))
                want = a @ b
                want.sum_duplicates()
                assert c.nse == ((abs(a) > 0).astype(float) @ (abs(b) > 0).astype(float)).nnz
                np.testing.assert_allclose(np.asarray(c.todense()), want.toarray(), rtol=1e-12, atol=1e-12)
        empty = BCSR._empty((4, 5), dtype=jnp.float64, nse=3)
        assert bcsr_spdot_general(empty, BCSR.from_scipy_sparse(sp.random(5, 2, density=1.0, format="csr"))).nse == 0


def test_bcsr_product_under_jit_takes_nse():
    """Traced indices: nse= given (more entries: padding after indptr[-1]; fewer: the first ones,
    indptr capped); none given is refused saying how to give it; JAX's BCSR reads the result."""
    from jax.experimental import sparse as jsparse

    with jax.enable_x64(True):
        a = sp.random(9, 8, density=0.3, format="csr", random_state=3)
        b = sp.random(8, 7, density=0.3, format="csr", random_state=4)
        A, B = BCSR.from_scipy_sparse(a), BCSR.from_scipy_sparse(b)
        exact = bcsr_spdot_general(A, B).nse
        want = (a @ b).toarray()
        for nse in (exact, exact + 4):
            c = jax.jit(lambda x, y, nse=nse: bcsr_spdot_general(x, y, nse=nse))(A, B)
            assert c.nse == nse and int(c.indptr[-1]) == exact
            np.testing.assert_allclose(np.asarray(c.todense()), want, rtol=1e-12, atol=1e-12)
            ref = jsparse.BCSR((c.data, c.indices, c.indptr), shape=c.shape)
            np.testing.assert_allclose(np.asarray(ref.todense()), want, rtol=1e-12, atol=1e-12)
        c = jax.jit(lambda x, y: bcsr_spdot_general(x, y, nse=5))(A, B)
        full = bcsr_spdot_general(A, B)
        assert np.all(np.asarray(c.indptr) == np.minimum(np.asarray(full.indptr), 5))
        np.testing.assert_array_equal(np.asarray(c.indices), np.asarray(full.indices)[:5])
        with pytest.raises(jax.errors.ConcretizationTypeError, match="nse="):
            jax.jit(bcsr_spdot_general)(A, B)


def test_bcsr_product_gradients_match_dense():
    """grad and jvp of the product's data with respect to both operands' data: the dense product's,
    read at the output's entries."""
    with jax.enable_x64(True):
        a = sp.random(6, 5, density=0.4, format="csr", random_state=5)
        b = sp.random(5, 4, density=0.4, format="csr", random_state=6)
        A, B = BCSR.from_scipy_sparse(a), BCSR.from_scipy_sparse(b)
        out = bcsr_spdot_general(A, B)
        rows = np.repeat(np.arange(6), np.diff(np.asarray(out.indptr)))
        cols = np.asarray(out.indices)
        w = np.random.default_rng(0).standard_normal(out.nse)

        def sparse_loss(ad, bd):
            c = bcsr_spdot_general(BCSR((ad, A.indices, A.indptr), shape=A.shape),
                                   BCSR((bd, B.indices, B.indptr), shape=B.shape))
            return jnp.sum(c.data * w)

        ar, ac = a.tocoo().row, a.tocoo().col
        br, bc = b.tocoo().row, b.tocoo().col
        dense = lambda ad, bd: jnp.sum((jnp.zeros((6, 5)).at[ar, ac].set(ad) @ jnp.zeros((5, 4)).at[br, bc].set(bd)  # noqa: E731
                                        )[rows, cols] * w)
        got, want = jax.grad(sparse_loss, (0, 1))(A.data, B.data), jax.grad(dense, (0, 1))(A.data, B.data)
        for g, h in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(h), rtol=1e-12, atol=1e-12)
        t = (jnp.ones_like(A.data), jnp.arange(B.nse, dtype=jnp.float64))
        np.testing.assert_allclose(jax.jvp(sparse_loss, (A.data, B.data), t)[1], jax.jvp(dense, (A.data, B.data), t)[1],
                                   rtol=1e-12, atol=1e-12)


_HOSTILE_CHILD = """
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from hlopt.runtime import kernels
kernels.register()
S = jax.ShapeDtypeStruct
dims = lambda r, i, c: dict(rows=np.int64(r), inner=np.int64(i), cols=np.int64(c))
i32 = lambda *v: np.asarray(v, np.int32)
def refused(f, match):
    try:
        f()
    except Exception as e:
        assert match in str(e), (match, str(e))
    else:
        raise AssertionError("ran: " + match)
# the BCOO kernels: a lying nse (shorter or longer than the structure) truncates or pads, never more
coo = lambda *rows: np.asarray(rows, np.int32).reshape(-1, 2)
for nse in (0, 1, 5):
    out = (S((nse,), np.float64), S((nse, 2), np.int32))
    d, ix = jax.ffi.ffi_call("hlopt_spgemm_fill", out)(np.ones(2), coo(0, 0, 1, 1), np.ones(2), coo(0, 0, 1, 1),
                                                        i32(1, 1), **dims(2, 2, 2))
    assert np.asarray(d).sum() == min(nse, 2), (nse, d)
refused(lambda: jax.block_until_ready(jax.ffi.ffi_call("hlopt_spgemm_count", S((2,), np.int32))(
    coo(0, 0), coo(0, 0), **dims(2, 2, 2**30))), "cols")
print("survived")
"""


def test_hostile_operands_handed_to_the_spgemm_kernels_are_dropped_or_refused():
    """Forged calls (an nse shorter or longer than the structure, huge cols) in a capped child:
    truncated, padded or refused with the kernel's error, never a crash."""
    from support.sandbox import assert_survived, run_capped

    outcome = run_capped(["-c", _HOSTILE_CHILD], env={"JAX_PLATFORMS": "cpu"})
    assert_survived(outcome)
    assert "survived" in outcome.stdout, outcome.describe()
