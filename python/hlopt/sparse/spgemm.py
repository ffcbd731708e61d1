"""Sparse x sparse matrix products on hlopt's native CSR kernels (runtime/native/spgemm.cc).

Two XLA FFI custom calls compute a product of two BCOO matrices (no batch or dense dims, one
contracting dim each) in the two phases of a CSR SpGEMM: `hlopt_spgemm_count` gives the number of
output entries (distinct columns) of each run of `SPGEMM_ROWS_PER_COUNT` output rows (the symbolic
phase), `hlopt_spgemm_fill` the first `nse` entries in row-major order, padded (the numeric phase).
A count a run rather than a row keeps the one buffer besides the output small: the BCOO output
(12 bytes an entry in float32) is already 1.5 times scipy's CSR one. With concrete indices the
counts are taken first, on the host, and their sum is the exact nse (scipy's count); with traced
ones both calls run in the program and `nse` is given. Out-of-range indices are dropped and duplicates
add, as in JAX's BCOO; the kernels check every index, count and size they read.

The output data is differentiable: its tangent is the sampled product of the tangents at the
output indices (`sampled`, a primitive that JAX can transpose), so `jax.grad` works through it.
Layouts and dtypes the kernels do not cover (batch or dense dims, vectors, several contracting
dims, integer or half-precision data), and every product when the kernels are not built (they are
optional), take the caller's other path (`plan` returns None).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlopt.passes import bcoo_shapes as shapes
from hlopt.runtime import kernels
from hlopt.runtime.portable import spgemm_count_runs
from hlopt.sparse import rules

COUNT_TARGET = "hlopt_spgemm_count"
FILL_TARGET = "hlopt_spgemm_fill"

# Data dtypes the fill kernel computes in.
DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))

# The most output columns the kernels take: each thread keeps a marker and a running sum per
# column (as scipy's CSR product does), 16 bytes each at most.
MAX_COLS = 1 << 24

MM = (((1,), (0,)), ((), ()))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A product the kernels compute: `rows x inner` times `inner x cols`, each operand's index
    columns swapped first when its contracting dim is the other one."""

    rows: int
    inner: int
    cols: int
    swap_lhs: bool
    swap_rhs: bool
    dtype: np.dtype
    index_dtype: np.dtype

    @property
    def attrs(self) -> dict[str, np.int64]:
        return {"rows": np.int64(self.rows), "inner": np.int64(self.inner), "cols": np.int64(self.cols)}


def plan(lhs: shapes.Layout, rhs: shapes.Layout, dimension_numbers: shapes.DotDims, lhs_dtype: Any, rhs_dtype: Any,
         preferred_element_type: Any, lhs_index_dtype: Any, rhs_index_dtype: Any) -> Plan | None:
    """How the kernels compute `bcoo_spdot_general` of these layouts and dtypes, or None where
    they do not (batch or dense dims, not two matrices with one contracting dim each, a result
    dtype (lax.dot_general's for float or complex data) other than DTYPES, indices not
    int32/int64, more than MAX_COLS output columns) or are not built (`kernels.available`)."""
    if not kernels.available():
        return None
    (lc, rc), (lb, rb) = dimension_numbers
    dtype = np.dtype(preferred_element_type if preferred_element_type is not None else
                     jax.dtypes.canonicalize_dtype(jnp.promote_types(lhs_dtype, rhs_dtype)))
    matrices = all(x.n_batch == 0 and x.n_dense == 0 and x.n_sparse == 2 for x in (lhs, rhs))
    if not matrices or lb or rb or len(lc) != 1 or len(rc) != 1 or np.dtype(dtype) not in DTYPES:
        return None
    index_dtype = np.dtype(lhs_index_dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or np.dtype(rhs_index_dtype) not in (
            np.dtype(np.int32), np.dtype(np.int64)):
        return None
    rows, inner = lhs.shape[1 - lc[0]], lhs.shape[lc[0]]
    cols = rhs.shape[1 - rc[0]]
    if cols > MAX_COLS or max(rows, cols) >= np.iinfo(index_dtype).max:
        return None
    return Plan(rows, inner, cols, lc[0] == 0, rc[0] == 1, np.dtype(dtype), index_dtype)


def run_counts(plan: Plan, lhs_indices: Any, rhs_indices: Any) -> jax.Array:
    """The output entries of each run of SPGEMM_ROWS_PER_COUNT rows (`hlopt_spgemm_count`)."""
    kernels.register()
    return _counts(plan, lhs_indices, rhs_indices)


def exact_nse(plan: Plan, lhs_indices: Any, rhs_indices: Any) -> int:
    """The product's structural nonzero count, from concrete indices (counted now, on the host)."""
    return _concrete_counts(plan, lhs_indices, rhs_indices)[1]


def product(plan: Plan, lhs_data: Any, lhs_indices: Any, rhs_data: Any, rhs_indices: Any, nse: int | None,
            sampled: Any) -> tuple[jax.Array, jax.Array]:
    """The product's (data, indices) with `nse` entries (None: the exact count, which needs
    concrete indices). `sampled` is the primitive `spdot_general_sampled`, for the tangents."""
    if nse is None:
        counts, nse = _concrete_counts(plan, lhs_indices, rhs_indices)
    else:
        counts = run_counts(plan, lhs_indices, rhs_indices)
    return _product(_Static(plan, nse, sampled), lhs_data, lhs_indices, rhs_data, rhs_indices, counts)


def _concrete_counts(plan: Plan, lhs_indices: Any, rhs_indices: Any) -> tuple[jax.Array, int]:
    """The run counts of concrete indices, computed now (also inside a trace), and their sum."""
    with jax.ensure_compile_time_eval():
        counts = run_counts(plan, lhs_indices, rhs_indices)
    return counts, int(np.asarray(counts).sum(dtype=np.int64))


@functools.partial(jax.jit, static_argnums=0)
def _counts(plan: Plan, lhs_indices: Any, rhs_indices: Any) -> jax.Array:
    li, ri = _oriented(plan, lhs_indices, rhs_indices)
    out = jax.ShapeDtypeStruct((spgemm_count_runs(plan.rows),), plan.index_dtype)
    return jax.ffi.ffi_call(COUNT_TARGET, out, vmap_method="sequential")(li, ri, **plan.attrs)


@dataclasses.dataclass(frozen=True)
class _Static:
    plan: Plan
    nse: int
    sampled: Any


@functools.partial(jax.jit, static_argnums=0)
def _product(static: _Static, lhs_data: Any, lhs_indices: Any, rhs_data: Any, rhs_indices: Any,
             counts: Any) -> tuple[jax.Array, jax.Array]:
    li, ri = _oriented(static.plan, lhs_indices, rhs_indices)
    ld, rd = (d.astype(static.plan.dtype) for d in (lhs_data, rhs_data))
    return _fill(ld, li, rd, ri, counts, static)


def _oriented(plan: Plan, lhs_indices: Any, rhs_indices: Any) -> tuple[jax.Array, jax.Array]:
    """Both operands' indices as (row, column) of `rows x inner` and `inner x cols`, of one dtype."""
    li, ri = lhs_indices.astype(plan.index_dtype), rhs_indices.astype(plan.index_dtype)
    return (li[:, ::-1] if plan.swap_lhs else li), (ri[:, ::-1] if plan.swap_rhs else ri)


def _fill_call(ld: Any, li: Any, rd: Any, ri: Any, counts: Any, static: _Static) -> tuple[jax.Array, jax.Array]:
    p = static.plan
    out = (jax.ShapeDtypeStruct((static.nse,), p.dtype), jax.ShapeDtypeStruct((static.nse, 2), p.index_dtype))
    data, indices = jax.ffi.ffi_call(FILL_TARGET, out, vmap_method="sequential")(ld, li, rd, ri, counts, **p.attrs)
    return data, indices


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _fill(ld, li, rd, ri, counts, static):
    return _fill_call(ld, li, rd, ri, counts, static)


@functools.partial(_fill.defjvp, symbolic_zeros=True)
def _fill_jvp(static, primals, tangents):
    """Bilinear in the data: d(A B) = dA B + A dB, each read at the output's indices."""
    ld, li, rd, ri, counts = primals
    dl, _, dr, _, _ = tangents
    data, indices = _fill(ld, li, rd, ri, counts, static)
    p = static.plan
    params = dict(lhs_shape=(p.rows, p.inner), rhs_shape=(p.inner, p.cols), dimension_numbers=MM, permutation=None)
    terms = [static.sampled.bind(a, li, b, ri, indices, **params)
             for a, b, t in ((dl, rd, dl), (ld, dr, dr)) if type(t) is not jax.custom_derivatives.SymbolicZero]
    data_dot = functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(data)
    return (data, indices), (data_dot.astype(data.dtype), np.zeros(indices.shape, jax.dtypes.float0))


# ---- CSR operands and output (hlopt.sparse.BCSR's buffers) ----

CSR_COUNT_TARGET = "hlopt_spgemm_csr_count"
CSR_FILL_TARGET = "hlopt_spgemm_csr_fill"


def csr_plan(lhs_shape: tuple[int, int], rhs_shape: tuple[int, int], lhs_dtype: Any, rhs_dtype: Any,
             preferred_element_type: Any, lhs_index_dtype: Any, rhs_index_dtype: Any) -> Plan | None:
    """How the CSR kernels compute the matrix product of CSR matrices of these shapes and dtypes,
    or None where they do not (as `plan`: a result dtype other than DTYPES, indices not int32/int64,
    more than MAX_COLS output columns). A ValueError if the inner sizes differ."""
    (rows, inner), (inner_r, cols) = lhs_shape, rhs_shape
    if inner != inner_r:
        raise ValueError(f"a matrix product of shapes {tuple(lhs_shape)} and {tuple(rhs_shape)}: inner sizes differ")
    square = shapes.layout((rows, inner), (0,), (0, 2)), shapes.layout((inner, cols), (0,), (0, 2))
    return plan(*square, MM, lhs_dtype, rhs_dtype, preferred_element_type, lhs_index_dtype, rhs_index_dtype)


def csr_product(plan: Plan, lhs_data: Any, lhs_indices: Any, lhs_indptr: Any, rhs_data: Any, rhs_indices: Any,
                rhs_indptr: Any, nse: int | None, sampled: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The CSR product's (data, indices, indptr) of two CSR matrices (`plan` from `csr_plan`), its
    columns ascending within each row. `nse` None: the exact count, the output's `indptr[-1]` counted
    now (concrete indices needed); given: the first `nse` entries (indptr capped at nse), padding
    after the last (column `cols`, value 0). `sampled` is `spdot_general_sampled`, for the tangents."""
    kernels.register()
    if nse is None:
        if rules.is_traced(lhs_indices, lhs_indptr, rhs_indices, rhs_indptr):
            raise jax.errors.ConcretizationTypeError(
                lhs_indices, "the exact nse of a CSR product needs concrete indices: under jit give nse= "
                "(the count of the same product outside jit, its indptr[-1])")
        with jax.ensure_compile_time_eval():
            indptr = _csr_counts(plan, lhs_indices, lhs_indptr, rhs_indices, rhs_indptr)
        exact, nse = True, int(np.asarray(indptr)[-1])
    else:
        indptr, exact = _csr_counts(plan, lhs_indices, lhs_indptr, rhs_indices, rhs_indptr), False
    data, indices = _csr_product(_Static(plan, nse, sampled), lhs_data, lhs_indices, lhs_indptr, rhs_data,
                                 rhs_indices, rhs_indptr, indptr)
    return data, indices, indptr if exact else jnp.minimum(indptr, nse)


@functools.partial(jax.jit, static_argnums=0)
def _csr_counts(plan: Plan, lhs_indices: Any, lhs_indptr: Any, rhs_indices: Any, rhs_indptr: Any) -> jax.Array:
    li, lp, ri, rp = (x.astype(plan.index_dtype) for x in (lhs_indices, lhs_indptr, rhs_indices, rhs_indptr))
    out = jax.ShapeDtypeStruct((plan.rows + 1,), plan.index_dtype)
    return jax.ffi.ffi_call(CSR_COUNT_TARGET, out, vmap_method="sequential")(lp, li, rp, ri, **plan.attrs)


@functools.partial(jax.jit, static_argnums=0)
def _csr_product(static: _Static, lhs_data: Any, lhs_indices: Any, lhs_indptr: Any, rhs_data: Any, rhs_indices: Any,
                 rhs_indptr: Any, indptr: Any) -> tuple[jax.Array, jax.Array]:
    p = static.plan
    ld, rd = (d.astype(p.dtype) for d in (lhs_data, rhs_data))
    li, lp, ri, rp = (x.astype(p.index_dtype) for x in (lhs_indices, lhs_indptr, rhs_indices, rhs_indptr))
    return _csr_fill(ld, lp, li, rd, rp, ri, indptr, static)


@functools.partial(jax.custom_jvp, nondiff_argnums=(7,))
def _csr_fill(ld, lp, li, rd, rp, ri, indptr, static):
    p = static.plan
    out = (jax.ShapeDtypeStruct((static.nse,), p.dtype), jax.ShapeDtypeStruct((static.nse,), p.index_dtype))
    return jax.ffi.ffi_call(CSR_FILL_TARGET, out, vmap_method="sequential")(ld, lp, li, rd, rp, ri, indptr, **p.attrs)


@functools.partial(_csr_fill.defjvp, symbolic_zeros=True)
def _csr_fill_jvp(static, primals, tangents):
    """As `_fill_jvp`, on each operand's and the output's entries as (row, column) pairs."""
    ld, lp, li, rd, rp, ri, indptr = primals
    dl, dr = tangents[0], tangents[3]
    data, indices = _csr_fill(ld, lp, li, rd, rp, ri, indptr, static)
    p = static.plan
    lc, rc = _coo(li, lp, p.rows, p.inner), _coo(ri, rp, p.inner, p.cols)
    oc = _coo(indices, indptr, p.rows, p.cols)
    params = dict(lhs_shape=(p.rows, p.inner), rhs_shape=(p.inner, p.cols), dimension_numbers=MM, permutation=None)
    terms = [static.sampled.bind(a, lc, b, rc, oc, **params)
             for a, b, t in ((dl, rd, dl), (ld, dr, dr)) if type(t) is not jax.custom_derivatives.SymbolicZero]
    data_dot = functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(data)
    return (data, indices), (data_dot.astype(data.dtype), np.zeros(indices.shape, jax.dtypes.float0))


def _coo(indices: jax.Array, indptr: jax.Array, rows: int, cols: int) -> jax.Array:
    """CSR entries as BCOO indices[nse, 2]: padding (outside [indptr[0], indptr[rows])) and columns out
    of range get the index (rows, cols), which BCOO drops."""
    at = jnp.arange(indices.shape[0], dtype=indptr.dtype)
    row = jnp.searchsorted(indptr, at, side="right").astype(indptr.dtype) - 1
    keep = (at >= indptr[0]) & (at < indptr[-1]) & (indices >= 0) & (indices < cols)
    return jnp.stack([jnp.where(keep, row, rows), jnp.where(keep, indices, cols)], axis=1)
