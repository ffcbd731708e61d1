"""The `xla-cpu-sparse-kernels` pass: row-sorted sparse x dense products become calls of hlopt's CPU kernels.

Replaces what XLA:CPU makes of `lower-bcoo`'s products: a gather of the dense
operand's rows, a multiply and a sorted scatter-add (SpMV, SpMM) or two gathers
and a batched dot (SDDMM). XLA:CPU runs the gather alone slower than
scipy.sparse runs the whole CSR product (bench/sparse_scipy.py --breakdown),
so no formulation in plain StableHLO reaches scipy; the kernels of
runtime/native/csr.cc (`hlopt_bcoo_spmm`, `hlopt_bcoo_sddmm`, `hlopt_csr_spmm`) walk the rows in
one pass, split over XLA's intra-op threads when the product is large.
bench/sparse_scipy.py compares them with scipy.sparse from 1e4 to 1e6 rows (records
in bench/results/).

Rewritten, each only where all of its conditions hold (anything else is left to `lower-bcoo`):

- `@hlopt.bcoo.dot_general` of a BCOO matrix `[M, K]` (n_batch = n_dense = 0, `indices_sorted`,
  i32 indices) with a dense `x[K]` or `x[K, N]` contracting the matrix's columns with x's rows,
  data, x and result of one type f32 or f64 -> `@hlopt_bcoo_spmm(data, indices, x)`.
- `@hlopt.bcoo.bcsr_dot_general` of a CSR matrix (`hlopt.sparse.BCSR`, i32 indices and indptr) with a
  dense `x[K]` or `x[K, N]` (the record admits no other), data, x and result of one type f32 or f64
  -> `@hlopt_csr_spmm(data, indices, indptr, x)`: 8 bytes an entry (value and column) where the
  BCOO kernel reads 12; it refuses, when the program runs, an indptr that is not non-decreasing
  from >= 0 to <= nse.
- `@hlopt.bcoo.dot_general_sampled` of `P[M, K] @ Q[K, N]` read at the entries of an `[M, N]`
  matrix (n_batch = n_dense = 0, no permutation, i32 indices), one type f32 or f64 ->
  `@hlopt_bcoo_sddmm(P, transpose(Q), indices)`.
- `@hlopt.bcoo.spdot_general` of two BCOO matrices (n_batch = n_dense = 0, one contracting dim each,
  no batch dims, i32 or i64 indices, at most `SPGEMM_MAX_COLS` output columns, a result of f32, f64,
  complex<f32> or complex<f64>) -> the two phases of a CSR SpGEMM (runtime/native/spgemm.cc):
  `@hlopt_spgemm_count(li, ri)` counts the output entries of each run of `SPGEMM_ROWS_PER_COUNT`
  rows, `@hlopt_spgemm_fill(ld, li, rd, ri, counts)` writes the first `nse` in row-major order
  (padding after them at index (rows, cols), as lower-bcoo's): each operand's index columns are
  swapped first when it contracts its other dim, its data converted to the result's type.

The kernels follow JAX's BCOO rules (out-of-range entries add nothing, duplicates add up) and
check every index, so a hostile program cannot make them read or write out of bounds; rows a
program claims sorted but are not are still summed right, by a slower serial walk.

Platform: the kernels exist only in hlopt's runtime on CPU, so the pass declares `cpu` and
`calls_runtime`: it rewrites only a module compiled for CPU in this process (`hlopt.jit`,
`Lowered.compile`, `hlopt compile`, hlopt operations inside plain `jax.jit` for CPU), never a
`jax.export` artifact, nor `hlopt-opt` output without `--platform cpu`. Products inside functions
that another annotation calls (`hlopt.vjp`, `hlopt.custom_partitioning`) are left alone: the
passes that expand those read plain StableHLO.

Before:
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32,
         backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]],
         indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, ...}}
         : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
After:
  %0 = stablehlo.custom_call @hlopt_bcoo_spmm(%data, %indices, %x) {api_version = 4 : i32,
         backend_config = {}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from hlopt.passes.sparse import shapes
from hlopt.passes.ir import builders as b
from hlopt.passes.rewrite.patterns import PatternPass, PatternSet
from hlopt.passes.sparse.substitute import MATMUL, plain_matrix, product_patterns
from hlopt.passes.mlir import ir, stablehlo

if TYPE_CHECKING:
    from hlopt.passes.sparse.bcoo import BcooOp

SPMM = "hlopt_bcoo_spmm"
SDDMM = "hlopt_bcoo_sddmm"
CSR_SPMM = "hlopt_csr_spmm"
SPGEMM_COUNT = "hlopt_spgemm_count"
SPGEMM_FILL = "hlopt_spgemm_fill"
# Every kernel a program may call (runtime/native/registry.h registers each under its name).
KERNELS = (SPMM, SDDMM, CSR_SPMM, SPGEMM_COUNT, SPGEMM_FILL)

# The output rows one count of hlopt_spgemm_count covers in the calls hlopt makes (the kernel reads
# the run length off the counts' shape): long runs keep the counts a small part of the program's memory.
SPGEMM_ROWS_PER_COUNT = 64
# The most output columns the SpGEMM kernels take: each thread keeps a marker and a running sum per
# column (as scipy's CSR product does), 16 bytes each at most.
SPGEMM_MAX_COLS = 1 << 24
SPGEMM_INDICES = {"i32": 2**31 - 1, "i64": 2**63 - 1}  # index type -> its largest value
SPGEMM_DATA = ("f32", "f64", "complex<f32>", "complex<f64>")


def _floats(*types: ir.Type) -> bool:
    """All of `types` one type, f32 or f64."""
    first = types[0]
    return str(first) in ("f32", "f64") and all(t == first for t in types)


def _i32(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 32 and ir.IntegerType(t).is_signless


def _spmm(c: BcooOp) -> list[ir.Value] | None:
    data, indices, x = c.operands
    shape, xs, out = c.config["shape"], b.shape_of(x), c.result_shape(0)
    fits = (plain_matrix(c) and c.config.get("indices_sorted", False) and c.config["dimension_numbers"] == MATMUL
            and len(xs) in (1, 2) and xs[0] == shape[1] and out == [shape[0], *xs[1:]]
            and _i32(b.elem_of(indices)) and _floats(b.elem_of(data), b.elem_of(x), c.result_elem(0)))
    if not fits:
        return None
    return _kernel(SPMM, [data, indices, x], c.result_types)


def _sddmm(c: BcooOp) -> list[ir.Value] | None:
    p, q, indices = c.operands
    shape, ps, qs = c.config["shape"], b.shape_of(p), b.shape_of(q)
    perm = c.config.get("permutation")
    fits = (plain_matrix(c) and c.config["dimension_numbers"] == MATMUL and perm in (None, (0, 1))
            and len(ps) == 2 and len(qs) == 2 and ps[1] == qs[0] and [ps[0], qs[1]] == list(shape)
            and _i32(b.elem_of(indices)) and _floats(b.elem_of(p), b.elem_of(q), c.result_elem(0)))
    if not fits:
        return None
    return _kernel(SDDMM, [p, b.transpose(q, [1, 0]), indices], c.result_types)


def _csr_spmm(c: BcooOp) -> list[ir.Value] | None:
    data, indices, indptr, x = c.operands
    fits = (_i32(b.elem_of(indices)) and _i32(b.elem_of(indptr))
            and _floats(b.elem_of(data), b.elem_of(x), c.result_elem(0)))
    return _kernel(CSR_SPMM, [data, indices, indptr, x], c.result_types) if fits else None


def spgemm_count_runs(rows: int) -> int:
    """The number of counts (runs of SPGEMM_ROWS_PER_COUNT output rows) hlopt_spgemm_count gives for `rows` rows."""
    return -(-rows // SPGEMM_ROWS_PER_COUNT)


@dataclasses.dataclass(frozen=True)
class SpgemmPlan:
    """A sparse x sparse product the SpGEMM kernels compute: `rows x inner` times `inner x cols`, each
    operand's index columns swapped first when its contracting dim is the other one."""

    rows: int
    inner: int
    cols: int
    swap_lhs: bool
    swap_rhs: bool

    @property
    def attrs(self) -> dict[str, int]:
        """The kernels' attributes."""
        return {"rows": self.rows, "inner": self.inner, "cols": self.cols}


def spgemm_plan(lhs: shapes.Layout, rhs: shapes.Layout, dimension_numbers: shapes.DotDims,
                index: str) -> SpgemmPlan | None:
    """How the SpGEMM kernels compute `spdot_general` of these layouts with indices of type `index`
    (`i32`, `i64`), or None where they do not (batch or dense dims, not two matrices with one
    contracting dim each, other indices, more than SPGEMM_MAX_COLS output columns)."""
    (lc, rc), (lb, rb) = dimension_numbers
    matrices = all(x.n_batch == 0 and x.n_dense == 0 and x.n_sparse == 2 for x in (lhs, rhs))
    if not matrices or lb or rb or len(lc) != 1 or len(rc) != 1 or index not in SPGEMM_INDICES:
        return None
    rows, inner, cols = lhs.shape[1 - lc[0]], lhs.shape[lc[0]], rhs.shape[1 - rc[0]]
    if cols > SPGEMM_MAX_COLS or max(rows, cols) >= SPGEMM_INDICES[index]:
        return None
    return SpgemmPlan(rows, inner, cols, lc[0] == 0, rc[0] == 1)


def _spgemm(c: BcooOp) -> list[ir.Value] | None:
    ld, li, rd, ri = c.operands
    data_t, index_t = c.result_types
    plan = spgemm_plan(c.layout(0), c.layout(2, "rhs_shape"), shapes.dot_dims(c.config["dimension_numbers"]),
                       str(index_t.element_type))
    if plan is None or str(data_t.element_type) not in SPGEMM_DATA or b.elem_of(ri) != index_t.element_type:
        return None
    li, ri = (b.op("stablehlo.reverse", [x], attributes={"dimensions": ir.DenseI64ArrayAttr.get([1])}) if swap else x
              for x, swap in ((li, plan.swap_lhs), (ri, plan.swap_rhs)))
    ld, rd = b.convert(ld, data_t.element_type), b.convert(rd, data_t.element_type)
    attrs = {k: ir.IntegerAttr.get(b.i64(), v) for k, v in plan.attrs.items()}
    (counts,) = _kernel(SPGEMM_COUNT, [li, ri], [b.tensor([spgemm_count_runs(plan.rows)], index_t.element_type)],
                        attrs)
    return _kernel(SPGEMM_FILL, [ld, li, rd, ri, counts], [data_t, index_t], attrs)


def _kernel(target: str, operands: list[ir.Value], results: list[ir.Type],
            attrs: dict[str, ir.Attribute] | None = None) -> list[ir.Value]:
    """A typed (FFI) call of one of hlopt's kernels with these attributes."""
    op = stablehlo.CustomCallOp(results, operands, target, backend_config=ir.DictAttr.get(attrs or {}),
                                api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4))
    return list(op.results)


REWRITES = {"dot_general": _spmm, "dot_general_sampled": _sddmm, "bcsr_dot_general": _csr_spmm,
            "spdot_general": _spgemm}


@dataclasses.dataclass(frozen=True)
class SparseKernels(PatternPass):
    """Sparse products as calls of hlopt's CPU kernels.

    Backend: XLA:CPU runs the gather of a sparse product's dense rows alone slower than a CSR
    product of the whole; benchmark: `bench/sparse_scipy.py`.

    Rewrite row-sorted BCOO and BCSR sparse x dense products (SpMV, SpMM, SDDMM) and BCOO matrix products
    (SpGEMM) into calls of hlopt's CPU kernels.

    For CPU compiles in this process only (the kernels are hlopt's runtime's).
    """

    name: ClassVar[str] = "xla-cpu-sparse-kernels"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    calls_runtime: ClassVar[bool] = True

    def patterns(self, module: ir.Operation) -> tuple[PatternSet, ...]:
        return product_patterns(module, REWRITES)
