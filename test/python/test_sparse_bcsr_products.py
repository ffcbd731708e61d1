"""BCSR x dense products: `A @ x`, `x @ A`, `bcsr_dot_general`, and the `hlopt_csr_spmm` kernel.

`A @ x` of a `hlopt.sparse.BCSR` matrix is one `hlopt.bcoo.bcsr_dot_general` annotation, which
`xla-cpu-sparse-kernels` turns into `hlopt_csr_spmm` when hlopt compiles for CPU (f32/f64, i32
indices) and lower-bcoo lowers portably otherwise (plain `jax.jit`, complex numbers). Both must
give scipy's CSR product (float64 to 1e-12) on drawn layouts with empty rows, duplicates,
unsorted columns, padding after `indptr[M]`, entries before `indptr[0]`, out-of-range and
negative columns and no entries; gradients (data and x) and vmap must be JAX's BCSR's. Hostile
operands handed to the kernel directly (pointers decreasing, negative, past nse, at the int32
extremes; columns at the extremes; buffers of the wrong shapes) run in a capped child, which
must survive with the right numbers or an error. The portable allowlist refuses forged calls.
"""

from __future__ import annotations

import re
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st
from jax.experimental import sparse as jsparse

import hlopt
from hlopt import sparse as hs
from hlopt.compiler.program import parse_module
from hlopt.runtime.portable import PortableCheckError, check_portable

from support.references import hostile_csr_layout
from support.sandbox import run_hostile_kernel_child

TOL = {np.float32: 2e-5, np.float64: 1e-12, np.complex64: 2e-5, np.complex128: 1e-12}
MATMUL = (((1,), (0,)), ((), ()))


pytestmark = pytest.mark.usefixtures("x64_module")


@st.composite
def csr_layouts(draw, max_rows: int = 10, max_cols: int = 8, max_per_row: int = 5):
    """(data, indices, indptr, shape): rows of 0..max_per_row entries at columns in [-2, K + 1]
    (out of range: padding), repeats and any order; up to 3 entries before indptr[0] and after indptr[M]."""
    m, k = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    counts = draw(st.lists(st.integers(0, max_per_row), min_size=m, max_size=m))
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    nse = before + sum(counts) + after
    cols = np.array(draw(st.lists(st.integers(-2, k + 1), min_size=nse, max_size=nse)), np.int32)
    indptr = (before + np.concatenate([[0], np.cumsum(counts)])).astype(np.int32)
    data = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(nse)
    return data, cols, indptr, (m, k)


def scipy_of(data, cols, indptr, shape) -> sp.csr_matrix:
    """The CSR matrix of the entries in [indptr[0], indptr[M]) with in-range columns (duplicates summed)."""
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    sl = slice(indptr[0], indptr[-1])
    c, d = cols[sl], data[sl]
    ok = (c >= 0) & (c < shape[1])
    return sp.csr_matrix((d[ok], (rows[ok], c[ok])), shape=shape)


def operand(shape_k, columns, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((shape_k,) if columns is None else (shape_k, columns))
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(x.shape)
    return x.astype(dtype)


def matmul(data, cols, indptr, x, shape):
    return hs.BCSR((data, cols, indptr), shape=shape) @ x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("columns", [None, 1, 3, 16])
@settings(max_examples=10, deadline=None, derandomize=True)
@given(layout=csr_layouts(), seed=st.integers(0, 2**16))
def test_products_equal_scipy_on_both_paths(dtype, columns, layout, seed):
    data, cols, indptr, shape = layout
    data = data.astype(dtype)
    x = operand(shape[1], columns, dtype, seed)
    fun = lambda d, c, p, x: matmul(d, c, p, x, shape)  # noqa: E731
    compiled = hlopt.lower(fun, data, cols, indptr, x).compile()
    kernel = not np.issubdtype(dtype, np.complexfloating)
    assert ("hlopt_csr_spmm" in compiled.as_text()) == kernel
    want = scipy_of(data.astype(np.complex128), cols, indptr, shape) @ x.astype(np.complex128)
    tol = TOL[dtype]
    for got in (compiled(data, cols, indptr, x), jax.jit(fun)(data, cols, indptr, x)):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["no entries", "only padding", "one row", "empty rows between", "k = 1"])
def test_edge_matrices(case):
    data, cols, indptr, shape = {
        "no entries": (np.zeros(0), np.zeros(0, np.int32), np.zeros(5, np.int32), (4, 5)),
        "only padding": (np.ones(3), np.array([5, 0, 1], np.int32), np.array([0, 0, 0, 1, 1], np.int32), (4, 5)),
        "one row": (np.arange(1.0, 5.0), np.array([4, 0, 4, 2], np.int32), np.array([0, 4], np.int32), (1, 5)),
        "empty rows between": (np.arange(1.0, 4.0), np.array([1, 0, 3], np.int32),
                               np.array([0, 1, 1, 1, 3, 3], np.int32), (5, 5)),
        "k = 1": (np.arange(1.0, 4.0), np.array([0, 0, -1], np.int32), np.array([0, 2, 3], np.int32), (2, 1)),
    }[case]
    for x in (operand(shape[1], None, np.float64, 0), operand(shape[1], 3, np.float64, 1)):
        want = scipy_of(data, cols, indptr, shape) @ x
        compiled = hlopt.lower(lambda d, c, p, x: matmul(d, c, p, x, shape), data, cols, indptr, x).compile()
        assert "hlopt_csr_spmm" in compiled.as_text()
        np.testing.assert_allclose(compiled(data, cols, indptr, x), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(matmul(data, cols, indptr, x, shape), want, rtol=1e-12, atol=1e-12)


def test_large_matrix_over_threads_equals_scipy():
    # Enough work for several blocks of the kernel (the thread-pool split); float64 to 1e-12. The
    # 240,000 entries are drawn at random positions (repeats summed by scipy): sp.random draws them
    # without replacement from all 6e8 positions, a far larger job than the product.
    rng = np.random.default_rng(3)
    entries = 240_000
    rows, columns = rng.integers(0, 30_000, entries), rng.integers(0, 20_000, entries)
    m = sp.csr_matrix((rng.standard_normal(entries), (rows, columns)), shape=(30_000, 20_000))
    a = hs.BCSR.from_scipy_sparse(m)
    for x in (operand(20_000, None, np.float64, 2), operand(20_000, 8, np.float64, 3)):
        got = hlopt.jit(lambda a, x: a @ x)(a, x)
        np.testing.assert_allclose(got, m @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3000, 120_000, 400_000])
@pytest.mark.parametrize("k", [300_000, 2**21 + 7])
def test_large_spmv_equals_scipy(dtype, rows, k):
    # x of 1.2 MB (float32) or 2.4 MB (float64), and of 8 or 16 MB: past any core's L2 (the loop
    # that prefetches the entries and x ahead, and stops prefetching x in the rows that end less
    # than its distance before nse); one row, one block, and several blocks over the threads
    # (400_000 rows: 2.2e6 entries); padding after indptr[M] and none (the last rows end at nse).
    data, cols, indptr = hostile_csr_layout(rows, k, rows)
    data = data.astype(dtype)
    x = operand(k, None, dtype, 4)
    spmv = hlopt.jit(lambda d, c, p, x: hs.BCSR((d, c, p), shape=(rows, k)) @ x)
    for nse in (len(cols), int(indptr[-1])):
        d, c = data[:nse], cols[:nse]
        want = scipy_of(d.astype(np.float64), c, indptr, (rows, k)) @ x.astype(np.float64)
        np.testing.assert_allclose(spmv(d, c, indptr, x), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.float64
def test_gradients_and_vmap_equal_jax():
    m = sp.random(30, 20, density=0.2, random_state=2, format="csr")
    ours, ref = hs.BCSR.from_scipy_sparse(m), jsparse.BCSR.from_scipy_sparse(m)
    rng = np.random.default_rng(1)
    x, xs = rng.standard_normal(20), rng.standard_normal((3, 20))

    def loss(mat, cls):
        def f(data, x):
            a = cls((data, mat.indices, mat.indptr), shape=mat.shape)
            return jnp.sum(jnp.sin(a @ x)) + jnp.sum((a @ jnp.outer(x, x)) ** 2)
        return f

    want = jax.grad(loss(ref, jsparse.BCSR), argnums=(0, 1))(ref.data, x)
    ours_grad = hlopt.jit(jax.grad(loss(ours, hs.BCSR), argnums=(0, 1)))
    assert "hlopt_csr_spmm" in ours_grad.lower(ours.data, x).compile().as_text()
    for grads in (ours_grad(ours.data, x), jax.grad(loss(ours, hs.BCSR), argnums=(0, 1))(ours.data, x)):
        for g, r in zip(grads, want):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    # forward mode
    jvp = jax.jvp(lambda d: hs.BCSR((d, ours.indices, ours.indptr), shape=ours.shape) @ x, (ours.data,),
                  (jnp.ones_like(ours.data),))[1]
    np.testing.assert_allclose(jvp, (m != 0).astype(float) @ x, rtol=1e-12)
    # vmap over x (either axis of a matrix operand), and over a batch of matrices with one structure
    for f in (hlopt.jit, jax.jit):
        np.testing.assert_allclose(f(jax.vmap(lambda v: ours @ v))(xs), (m @ xs.T).T, rtol=1e-12)
        np.testing.assert_allclose(jax.vmap(lambda v: ref @ v)(xs), f(jax.vmap(lambda v: ours @ v))(xs), rtol=1e-12)
    x3 = rng.standard_normal((20, 2, 4))
    got = hlopt.jit(jax.vmap(lambda v: ours @ v, in_axes=1, out_axes=1))(x3)
    np.testing.assert_allclose(got, np.einsum("mk,kbn->mbn", m.toarray(), x3), rtol=1e-12)
    datas = jnp.stack([ours.data, 2 * ours.data])
    got = jax.vmap(lambda d: hs.BCSR((d, ours.indices, ours.indptr), shape=ours.shape) @ x)(datas)
    np.testing.assert_allclose(got, np.stack([m @ x, 2 * (m @ x)]), rtol=1e-12)


@pytest.mark.float64
def test_other_contractions_and_sides():
    m = sp.random(7, 5, density=0.5, random_state=4, format="csr")
    a, d = hs.BCSR.from_scipy_sparse(m), m.toarray()
    rng = np.random.default_rng(5)
    y, z = rng.standard_normal((3, 7)), rng.standard_normal((2, 5, 4))
    np.testing.assert_allclose(y @ a, y @ d, rtol=1e-12)
    np.testing.assert_allclose(a @ z, d @ z, rtol=1e-12)  # batched matmul: the BCOO product
    at_y = hs.bcsr_dot_general(a, y.T, dimension_numbers=(((0,), (0,)), ((), ())))
    np.testing.assert_allclose(at_y, d.T @ y.T, rtol=1e-12)
    np.testing.assert_allclose(hs.bcsr_dot_general(y, a, dimension_numbers=MATMUL), y @ d, rtol=1e-12)
    np.testing.assert_allclose(hs.bcsr_dot_general(y, y.T, dimension_numbers=MATMUL), y @ y.T, rtol=1e-12)
    sparse = a @ hs.BCSR.from_scipy_sparse(m.T.tocsr())
    np.testing.assert_allclose(sparse.todense(), d @ d.T, rtol=1e-12)
    out = hs.bcsr_dot_general(a, np.ones(5, np.float32), dimension_numbers=MATMUL,
                              preferred_element_type=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, d.sum(1), rtol=1e-6)
    np.testing.assert_allclose(a @ np.ones(5, np.int32), d.sum(1), rtol=1e-12)


def test_portable_modules_never_name_the_kernel():
    a = hs.BCSR.fromdense(np.eye(3))
    lowered = hlopt.lower(lambda a, x: a @ x, a, np.ones(3))
    assert "hlopt_csr" not in lowered.apply("hlopt-default").as_text()
    assert "hlopt_csr_spmm" in lowered.compile().as_text()
    exported = jax.export.export(jax.jit(lambda a, x: a @ x))(a, np.ones(3))
    assert "hlopt_csr" not in exported.mlir_module() and "hlopt.bcoo" not in exported.mlir_module()


def test_a_bad_indptr_is_refused_when_the_program_runs():
    a = hs.BCSR.from_scipy_sparse(sp.random(6, 4, density=0.5, random_state=0, format="csr"))
    f = hlopt.jit(lambda a, x: a @ x)
    for ptr in ([0, 3, 2, 5, 6, 8, 12], [-1, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 13]):
        bad = hs.BCSR((a.data, a.indices, jnp.array(ptr, jnp.int32)), shape=a.shape)
        with pytest.raises(Exception, match=r"hlopt_csr_spmm: indptr must be non-decreasing from indptr\[0\] >= 0 "
                                            r"to indptr\[M\] <= nse = 12; at row \d"):
            np.asarray(f(bad, np.ones(4)))


CALL = ("%0 = stablehlo.custom_call @hlopt_csr_spmm(%d, %i, %p, %x) {api_version = 4 : i32, backend_config = {}}"
        " : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>")


def kernel_module(call: str = CALL, result: str = "tensor<4x3xf32>") -> str:
    return ("func.func @main(%d: tensor<6xf32>, %i: tensor<6xi32>, %p: tensor<5xi32>, %x: tensor<5x3xf32>, "
            "%p64: tensor<5xi64>, %x64: tensor<5x3xf64>, %p6: tensor<6xi32>) -> " + result + " {\n"
            f"  {call}\n  return %0 : {result}\n}}")


FORGED = {
    "int64 indptr": (CALL.replace("%p, %x)", "%p64, %x)").replace("tensor<5xi32>", "tensor<5xi64>"),
                     "is not data[nse], indices[nse], indptr[M + 1] (i32)"),
    "indptr not M + 1": (CALL.replace("%p, %x)", "%p6, %x)").replace("tensor<5xi32>", "tensor<6xi32>"),
                         "indptr[M + 1] (i32)"),
    "types mixed": (CALL.replace("%p, %x)", "%p, %x64)").replace("tensor<5x3xf32>)", "tensor<5x3xf64>)"),
                    "all f32 or all f64"),
    "three operands": (CALL.replace("(%d, %i, %p, %x)", "(%d, %i, %x)").replace("tensor<5xi32>, ", ""),
                       "takes 4 operands and returns 1 result, not 3 and 1"),
    "an attribute": (CALL.replace("backend_config = {}", "backend_config = {n = 3 : i64}"),
                     "has attributes {n}; its kernel reads exactly {none}"),
    "untyped call": (CALL.replace("api_version = 4 : i32, backend_config = {}", "api_version = 2 : i32"),
                     "is not a typed (FFI) call"),
}


def test_the_allowlist_accepts_the_call_the_pass_emits():
    check_portable(parse_module(kernel_module()))
    compiled = hlopt.lower(lambda a, x: a @ x, hs.BCSR.fromdense(np.eye(3, dtype=np.float32)),
                           np.ones((3, 2), np.float32)).compile()
    assert "@hlopt_csr_spmm(" in str(compiled.module)
    check_portable(compiled.module)


@pytest.mark.parametrize("case", list(FORGED))
def test_forged_kernel_calls_are_refused(case):
    call, match = FORGED[case]
    with pytest.raises(PortableCheckError, match=re.escape(match)):
        check_portable(parse_module(kernel_module(call)))


_HOSTILE_CHILD = textwrap.dedent("""
    call = lambda out, *ops: np.asarray(jax.jit(jax.ffi.ffi_call("hlopt_csr_spmm", out))(*ops))
    rng = np.random.default_rng(0)
    m, k = 4, 3
    cols = np.array([0, big, small, -1, 2, 1, 3, 2, 0, big], np.int32)
    data = rng.standard_normal(len(cols))
    good = np.array([1, 3, 3, 6, 8], np.int32)  # entry 0 before indptr[0], entries 8, 9 after indptr[M]
    for n in (None, 1, 4):
        x = rng.standard_normal((k,) if n is None else (k, n))
        want = np.zeros((m,) if n is None else (m, n))
        for r in range(m):
            for e in range(good[r], good[r + 1]):
                if 0 <= cols[e] < k:
                    want[r] += data[e] * x[cols[e]]
        np.testing.assert_allclose(call(S(want.shape, np.float64), data, cols, good, x), want, rtol=1e-12, atol=1e-12)
        for ptr in ([0, 3, 2, 5, 6], [-1, 0, 0, 0, 0], [0, 1, 2, 3, 11], [big, big, big, big, big],
                    [small, 0, 0, 0, 0], [0, 0, 0, 0, big], [5, 4, 3, 2, 1]):
            try:
                call(S(want.shape, np.float64), data, cols, np.array(ptr, np.int32), x)
            except Exception as e:
                assert "hlopt_csr_spmm: indptr must be non-decreasing" in str(e), (ptr, str(e))
            else:
                raise AssertionError(f"indptr {ptr}: the kernel ran")
    x = rng.standard_normal((k, 2))
    # no columns (k = 0): zeros, the pointers still checked
    np.testing.assert_array_equal(call(S((m,), np.float64), data, cols, good, np.zeros(0)), np.zeros(m))
    wrong = {
        "indptr not M + 1": (S((m, 2), np.float64), data, cols, good[:4], x),
        "indices 2-d": (S((m, 2), np.float64), data, np.zeros((10, 2), np.int32), good, x),
        "data shorter than indices": (S((m, 2), np.float64), data[:5], cols, good, x),
        "result wider than x": (S((m, 3), np.float64), data, cols, good, x),
        "x of rank 3": (S((m, 2, 1), np.float64), data, cols, good, x[..., None]),
        "f16 data": (S((m, 2), np.float16), data.astype(np.float16), cols, good, x.astype(np.float16)),
        "int64 indptr": (S((m, 2), np.float64), data, cols, good.astype(np.int64), x),
        "mixed types": (S((m, 2), np.float64), data.astype(np.float32), cols, good, x),
    }
    expect_refused(call, wrong, "hlopt_csr_spmm", "dtype")
""")


def test_hostile_operands_handed_to_the_kernel_are_dropped_or_refused():
    run_hostile_kernel_child(_HOSTILE_CHILD)
