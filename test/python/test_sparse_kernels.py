"""hlopt's CPU kernels for row-sorted BCOO products (runtime/native/csr.cc) and the pass that calls them.

`xla-cpu-sparse-kernels` turns SpMV, SpMM and SDDMM of a row-sorted BCOO
matrix into `hlopt_bcoo_spmm` / `hlopt_bcoo_sddmm` when hlopt compiles for
CPU. Their results must be scipy's CSR products (float64 to 1e-12) and
hlopt's XLA path's (plain `jax.jit`, where the pass is off) on drawn matrices
with empty rows, duplicates, out-of-range padding, one row and no entries;
gradients and vmap must still be JAX's. A module that stays portable
(`Lowered.apply`, `jax.export`) never names the kernels. The portable
allowlist refuses forged calls; hostile operands handed to the kernels
directly (indices at the int32 extremes, rows out of order, buffers of the
wrong shapes) run in a capped child, which must survive with the right
numbers or an error.
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

MATMUL = (((1,), (0,)), ((), ()))
TOL = {np.float32: 2e-5, np.float64: 1e-12}


pytestmark = pytest.mark.usefixtures("x64_module")


@st.composite
def row_sorted(draw, max_rows: int = 12, max_cols: int = 10, max_nse: int = 40):
    """(data, indices, shape): entries sorted by (row, column); indices up to 2 past each size (padding),
    repeats (duplicates) and rows without entries."""
    m, k = draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols))
    nse = draw(st.integers(0, max_nse))
    rows = draw(st.lists(st.integers(0, m + 1), min_size=nse, max_size=nse))
    cols = draw(st.lists(st.integers(0, k + 1), min_size=nse, max_size=nse))
    indices = np.array(sorted(zip(rows, cols)), np.int32).reshape(nse, 2)
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).standard_normal(nse), indices, (m, k)


def scipy_matrix(data: np.ndarray, indices: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """The CSR matrix of the in-range entries (duplicates summed)."""
    ok = (indices[:, 0] < shape[0]) & (indices[:, 1] < shape[1]) & (indices >= 0).all(1)
    return sp.csr_matrix((data[ok], (indices[ok, 0], indices[ok, 1])), shape=shape)


def products(data, indices, x, p, q, *, shape):
    a = hs.BCOO((data, indices), shape=shape, indices_sorted=True)
    return a @ x, hs.bcoo_dot_general_sampled(p, q, indices, dimension_numbers=MATMUL)


def compiled_products(shape, args):
    fun = lambda *a: products(*a, shape=shape)  # noqa: E731
    compiled = hlopt.lower(fun, *args).compile()
    return compiled, jax.jit(fun)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("columns", [None, 1, 3, 16])
@settings(max_examples=12, deadline=None)
@given(matrix=row_sorted(), seed=st.integers(0, 2**16))
def test_kernels_equal_scipy_and_the_xla_path(dtype, columns, matrix, seed):
    data, indices, shape = matrix
    data = data.astype(dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((shape[1],) if columns is None else (shape[1], columns)).astype(dtype)
    p, q = rng.standard_normal((shape[0], 4)).astype(dtype), rng.standard_normal((4, shape[1])).astype(dtype)
    compiled, xla_path = compiled_products(shape, (data, indices, x, p, q))
    assert "hlopt_bcoo_spmm" in compiled.as_text()
    assert ("hlopt_bcoo_sddmm" in compiled.as_text()) == (len(data) > 0)  # no entries: nothing to sample
    got_mm, got_dd = compiled(data, indices, x, p, q)
    a = scipy_matrix(data.astype(np.float64), indices, shape)
    tol = TOL[dtype]
    np.testing.assert_allclose(got_mm, a @ x.astype(np.float64), rtol=tol, atol=tol)
    ok = (indices[:, 0] < shape[0]) & (indices[:, 1] < shape[1])
    pq = p.astype(np.float64) @ q.astype(np.float64)
    want_dd = np.where(ok, pq[np.minimum(indices[:, 0], shape[0] - 1), np.minimum(indices[:, 1], shape[1] - 1)], 0)
    np.testing.assert_allclose(got_dd, want_dd, rtol=tol, atol=tol)
    ref_mm, ref_dd = xla_path(data, indices, x, p, q)
    np.testing.assert_allclose(got_mm, ref_mm, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_dd, ref_dd, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["one row", "no entries", "only padding", "empty rows between", "one entry a row"])
def test_edge_matrices(case):
    rng = np.random.default_rng(0)
    indices, shape = {
        "one row": (np.array([[0, 0], [0, 2], [0, 2], [0, 4]]), (1, 5)),
        "no entries": (np.zeros((0, 2)), (4, 5)),
        "only padding": (np.array([[4, 0], [4, 5], [9, 9]]), (4, 5)),
        "empty rows between": (np.array([[0, 1], [3, 0], [3, 4], [7, 2], [8, 0]]), (8, 5)),
        "one entry a row": (np.stack([np.arange(6), np.arange(6) % 5], 1), (6, 5)),
    }[case]
    indices = indices.astype(np.int32)
    data, x = rng.standard_normal(len(indices)), rng.standard_normal((5, 3))
    p, q = rng.standard_normal((shape[0], 2)), rng.standard_normal((2, 5))
    compiled, _ = compiled_products(shape, (data, indices, x, p, q))
    assert "hlopt_bcoo_spmm" in compiled.as_text()
    got, _ = compiled(data, indices, x, p, q)
    np.testing.assert_allclose(got, scipy_matrix(data, indices, shape) @ x, rtol=1e-12, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(matrix=row_sorted(), seed=st.integers(0, 2**16))
def test_rows_claimed_sorted_but_not_are_summed_right(matrix, seed):
    data, indices, shape = matrix
    perm = np.random.default_rng(seed).permutation(len(data))
    x = np.random.default_rng(seed + 1).standard_normal((shape[1], 2))
    fun = lambda d, i, x: hs.BCOO((d, i), shape=shape, indices_sorted=True) @ x  # noqa: E731
    compiled = hlopt.lower(fun, data[perm], indices[perm], x).compile()
    assert "hlopt_bcoo_spmm" in compiled.as_text()
    want = scipy_matrix(data, indices, shape) @ x
    np.testing.assert_allclose(compiled(data[perm], indices[perm], x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3000, 120_000, 400_000])
@pytest.mark.parametrize("k", [300_000, 2**21 + 7])
def test_large_spmv_equals_scipy(dtype, rows, k):
    # x of 1.2 MB (float32) or 2.4 MB (float64), and of 8 or 16 MB: past any core's L2 (the loop
    # that prefetches the entries and x ahead, and stops prefetching x near the last entry); one
    # row, one block and several blocks over the threads (400_000 rows: 2.2e6 entries); rows of 0
    # to 40 entries (odd and even: the two-at-a-time loop and its last entry), columns out of
    # range and at the int32 extremes, the last rows' columns at both edges of x, with padding
    # rows after them and without; and the same entries claimed sorted but shuffled (the serial
    # pass).
    data, cols, indptr = hostile_csr_layout(rows, k, rows)
    nse = int(indptr[-1])
    row_of = np.concatenate([np.repeat(np.arange(rows), np.diff(indptr)), [rows, rows, rows + 3, 2**31 - 1, 2**31 - 1]])
    indices = np.stack([row_of, cols], 1).astype(np.int32)
    data = data.astype(dtype)
    rng = np.random.default_rng(rows + 1)
    x = rng.standard_normal(k).astype(dtype)
    spmv = hlopt.jit(lambda d, i, x: hs.BCOO((d, i), shape=(rows, k), indices_sorted=True) @ x)
    perm = rng.permutation(nse)
    for d, i in ((data, indices), (data[:nse], indices[:nse]), (data[:nse][perm], indices[:nse][perm])):
        want = scipy_matrix(d.astype(np.float64), i, (rows, k)) @ x.astype(np.float64)
        np.testing.assert_allclose(spmv(d, i, x), want, rtol=TOL[dtype], atol=TOL[dtype])


def test_gradients_and_vmap_match_jax():
    rng = np.random.default_rng(1)
    m = sp.random(30, 20, density=0.2, random_state=2, format="csr").tocoo()
    data, indices = m.data, np.stack([m.row, m.col], 1).astype(np.int32)
    x, xs = rng.standard_normal(20), rng.standard_normal((3, 20))

    def loss(module):
        def f(data, x):
            a = module.BCOO((data, indices), shape=(30, 20), indices_sorted=True)
            return jnp.sum(jnp.sin(a @ x)) + jnp.sum((a @ jnp.outer(x, x)) ** 2)
        return f

    def batched(module):
        a = lambda d: module.BCOO((d, indices), shape=(30, 20), indices_sorted=True)  # noqa: E731
        return lambda d, xs: jax.vmap(lambda x: a(d) @ x)(xs)

    ours = hlopt.jit(jax.grad(loss(hs), argnums=(0, 1)))
    assert "hlopt_bcoo_spmm" in ours.lower(data, x).compile().as_text()
    for g, r in zip(ours(data, x), jax.jit(jax.grad(loss(jsparse), argnums=(0, 1)))(data, x)):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hlopt.jit(batched(hs))(data, xs), batched(jsparse)(data, xs), rtol=1e-12, atol=1e-12)


def test_portable_modules_never_name_the_kernels():
    data, indices = np.ones(3), np.array([[0, 0], [1, 1], [2, 0]], np.int32)
    args = (data, indices, np.ones(2), np.ones((3, 2)), np.ones((2, 2)))
    fun = lambda *a: products(*a, shape=(3, 2))  # noqa: E731
    lowered = hlopt.lower(fun, *args)
    assert "hlopt_bcoo" not in lowered.apply("hlopt-default").as_text()
    assert "hlopt_bcoo_spmm" in lowered.compile().as_text()
    exported = jax.export.export(jax.jit(fun))(*args)
    assert "hlopt_bcoo" not in exported.mlir_module() and "hlopt.bcoo" not in exported.mlir_module()


SPMM_CALL = ("%0 = stablehlo.custom_call @hlopt_bcoo_spmm(%d, %i, %x) {api_version = 4 : i32, backend_config = {}}"
             " : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>")
SDDMM_CALL = ("%1 = stablehlo.custom_call @hlopt_bcoo_sddmm(%p, %qt, %i) {api_version = 4 : i32, backend_config = {}}"
              " : (tensor<4x2xf32>, tensor<5x2xf32>, tensor<6x2xi32>) -> tensor<6xf32>")


def kernel_module(spmm: str = SPMM_CALL, sddmm: str = SDDMM_CALL) -> str:
    return ("func.func @main(%d: tensor<6xf32>, %i: tensor<6x2xi32>, %x: tensor<5x3xf32>, %p: tensor<4x2xf32>, "
            "%qt: tensor<5x2xf32>, %i64: tensor<6x2xi64>, %x64: tensor<5x3xf64>) -> tensor<6xf32> {\n"
            f"  {spmm}\n  {sddmm}\n  return %1 : tensor<6xf32>\n}}")


FORGED = {
    "int64 indices": (SPMM_CALL.replace("(%d, %i, %x)", "(%d, %i64, %x)").replace("6x2xi32>, tensor<5", "6x2xi64>, tensor<5"),
                      None, "is not data[nse], indices[nse, 2] (i32)"),
    "result wider than x": (SPMM_CALL.replace("-> tensor<4x3xf32>", "-> tensor<4x4xf32>"), None, "x[K, N] -> [M] or [M, N]"),
    "types mixed": (SPMM_CALL.replace("(%d, %i, %x)", "(%d, %i, %x64)").replace("tensor<5x3xf32>)", "tensor<5x3xf64>)"),
                    None, "all f32 or all f64"),
    "two operands": (SPMM_CALL.replace("(%d, %i, %x)", "(%d, %i)").replace(", tensor<5x3xf32>)", ")"), None,
                     "takes 3 operands and returns 1 result, not 2 and 1"),
    "an attribute": (SPMM_CALL.replace("backend_config = {}", "backend_config = {n = 3 : i64}"), None,
                     "has attributes {n}; its kernel reads exactly {none}"),
    "operand layouts": (SPMM_CALL.replace("backend_config = {}", "backend_config = {}, operand_layouts = "
                                          "[dense<0> : tensor<1xindex>, dense<[1, 0]> : tensor<2xindex>, "
                                          "dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]"), None,
                        "sets operand_layouts, result_layouts"),
    "untyped call": (SPMM_CALL.replace("api_version = 4 : i32, backend_config = {}", "api_version = 2 : i32"), None,
                     "is not a typed (FFI) call"),
    "sddmm result not nse": (SPMM_CALL, SDDMM_CALL.replace("-> tensor<6xf32>", "-> tensor<7xf32>").replace(
        "return", "return"), "is not p[M, K], qt[N, K], indices[nse, 2]"),
    "sddmm widths differ": (SPMM_CALL, SDDMM_CALL.replace("(%p, %qt, %i)", "(%p, %x, %i)").replace(
        "tensor<5x2xf32>, tensor<6x2xi32>", "tensor<5x3xf32>, tensor<6x2xi32>"), "is not p[M, K], qt[N, K]"),
}


def test_the_allowlist_accepts_the_kernel_calls_the_pass_emits():
    check_portable(parse_module(kernel_module()))
    data, indices = np.ones(3), np.array([[0, 0], [1, 1], [2, 0]], np.int32)
    args = (data, indices, np.ones((2, 4)), np.ones((3, 2)), np.ones((2, 2)))
    compiled = hlopt.lower(lambda *a: products(*a, shape=(3, 2)), *args).compile()
    assert "@hlopt_bcoo_spmm(" in str(compiled.module)
    check_portable(compiled.module)


@pytest.mark.parametrize("case", list(FORGED))
def test_forged_kernel_calls_are_refused(case):
    spmm, sddmm, match = FORGED[case]
    text = kernel_module(spmm, sddmm or SDDMM_CALL)
    if sddmm is not None and "-> tensor<7xf32>" in sddmm:
        text = text.replace("-> tensor<6xf32> {", "-> tensor<7xf32> {").replace("return %1 : tensor<6xf32>",
                                                                              "return %1 : tensor<7xf32>")
    with pytest.raises(PortableCheckError, match=re.escape(match)):
        check_portable(parse_module(text))


_HOSTILE_CHILD = textwrap.dedent("""
    call = lambda name, out, *ops: np.asarray(jax.jit(jax.ffi.ffi_call(name, out))(*ops))
    rng = np.random.default_rng(0)
    m, k = 5, 4
    indices = np.array([[0, 1], [0, big], [1, small], [2, -1], [small, 0], [4, 3], [big, big], [1, 2], [3, 0],
                        [-1, -1], [5, 0], [2, 2]], np.int32)
    data = rng.standard_normal(len(indices))
    ok = (indices >= 0).all(1) & (indices[:, 0] < m) & (indices[:, 1] < k)
    for n in (None, 1, 4):
        x = rng.standard_normal((k,) if n is None else (k, n))
        want = np.zeros((m,) if n is None else (m, n))
        for (r, c), v, good in zip(indices, data, ok):
            if good:
                want[r] += v * x[c]
        for order in (np.arange(len(data)), np.argsort(indices[:, 0], kind="stable")):
            got = call("hlopt_bcoo_spmm", S(want.shape, np.float64), data[order], indices[order], x)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    p, qt = rng.standard_normal((m, 3)), rng.standard_normal((k, 3))
    want = np.array([p[r] @ qt[c] if good else 0.0 for (r, c), good in zip(indices, ok)])
    got = call("hlopt_bcoo_sddmm", S((len(indices),), np.float64), p, qt, indices)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x = rng.standard_normal((k, 2))
    wrong = {
        "indices with 3 columns": ("hlopt_bcoo_spmm", S((m, 2), np.float64), data, np.zeros((12, 3), np.int32), x),
        "data shorter than indices": ("hlopt_bcoo_spmm", S((m, 2), np.float64), data[:5], indices, x),
        "result wider than x": ("hlopt_bcoo_spmm", S((m, 3), np.float64), data, indices, x),
        "x of rank 3": ("hlopt_bcoo_spmm", S((m, 2, 1), np.float64), data, indices, x[..., None]),
        "f16 data": ("hlopt_bcoo_spmm", S((m, 2), np.float16), data.astype(np.float16), indices, x.astype(np.float16)),
        "int64 indices": ("hlopt_bcoo_spmm", S((m, 2), np.float64), data, indices.astype(np.int64), x),
        "mixed types": ("hlopt_bcoo_spmm", S((m, 2), np.float64), data.astype(np.float32), indices, x),
        "sddmm widths differ": ("hlopt_bcoo_sddmm", S((12,), np.float64), p, x, indices),
        "sddmm result not nse": ("hlopt_bcoo_sddmm", S((13,), np.float64), p, qt, indices),
    }
    expect_refused(call, wrong, "hlopt_bcoo", "Wrong buffer dtype", "dtype")
""")


def test_hostile_operands_handed_to_the_kernels_are_dropped_or_refused():
    run_hostile_kernel_child(_HOSTILE_CHILD)
