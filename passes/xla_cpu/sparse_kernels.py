"""The `xla-cpu-sparse-kernels` pass: row-sorted sparse x dense products become calls of hlopt's CPU kernels.

Replaces what XLA:CPU makes of `lower-bcoo`'s products: a gather of the dense
operand's rows, a multiply and a sorted scatter-add (SpMV, SpMM) or two gathers
and a batched dot (SDDMM). XLA:CPU runs the gather alone slower than
scipy.sparse runs the whole CSR product (bench/sparse_scipy.py --breakdown),
so no formulation in plain StableHLO reaches scipy; the kernels of
runtime/native/csr.cc (`hlopt_bcoo_spmm`, `hlopt_bcoo_sddmm`, `hlopt_csr_spmm`) walk the rows in
one pass, split over XLA's intra-op threads when the product is large. On a
2-core machine with nothing else running (bench/sparse_scipy.py, float32, 10
entries a row; scipy's time / hlopt's, median of interleaved rounds) SpMM runs at
1.0-6.5x scipy's speed from 1e4 to 1e6 rows, SDDMM at 3.4-4.1x, SpMV at 0.8-3.2x
(below scipy at 1e4 rows, above from 1e5).

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

from hlopt.passes import builders as b
from hlopt.passes.base import Pass
from hlopt.passes.bcoo_substitute import MATMUL, plain_matrix, substitute_products
from hlopt.passes.mlir import ir, stablehlo

if TYPE_CHECKING:
    from hlopt.passes.bcoo import BcooOp

SPMM = "hlopt_bcoo_spmm"
SDDMM = "hlopt_bcoo_sddmm"
CSR_SPMM = "hlopt_csr_spmm"



def _floats(*types: ir.Type) -> bool:
    """All of `types` one type, f32 or f64."""
    first = types[0]
    return str(first) in ("f32", "f64") and all(t == first for t in types)


def _i32(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 32 and ir.IntegerType(t).is_signless


def _spmm(c: BcooOp) -> ir.Value | None:
    data, indices, x = c.operands
    shape, xs, out = c.config["shape"], b.shape_of(x), c.result_shape(0)
    fits = (plain_matrix(c) and c.config.get("indices_sorted", False) and c.config["dimension_numbers"] == MATMUL
            and len(xs) in (1, 2) and xs[0] == shape[1] and out == [shape[0], *xs[1:]]
            and _i32(b.elem_of(indices)) and _floats(b.elem_of(data), b.elem_of(x), c.result_elem(0)))
    if not fits:
        return None
    return _kernel(SPMM, [data, indices, x], c.result_types[0])


def _sddmm(c: BcooOp) -> ir.Value | None:
    p, q, indices = c.operands
    shape, ps, qs = c.config["shape"], b.shape_of(p), b.shape_of(q)
    perm = c.config.get("permutation")
    fits = (plain_matrix(c) and c.config["dimension_numbers"] == MATMUL and perm in (None, (0, 1))
            and len(ps) == 2 and len(qs) == 2 and ps[1] == qs[0] and [ps[0], qs[1]] == list(shape)
            and _i32(b.elem_of(indices)) and _floats(b.elem_of(p), b.elem_of(q), c.result_elem(0)))
    if not fits:
        return None
    return _kernel(SDDMM, [p, b.transpose(q, [1, 0]), indices], c.result_types[0])


def _csr_spmm(c: BcooOp) -> ir.Value | None:
    data, indices, indptr, x = c.operands
    fits = (_i32(b.elem_of(indices)) and _i32(b.elem_of(indptr))
            and _floats(b.elem_of(data), b.elem_of(x), c.result_elem(0)))
    return _kernel(CSR_SPMM, [data, indices, indptr, x], c.result_types[0]) if fits else None


def _kernel(target: str, operands: list[ir.Value], result: ir.Type) -> ir.Value:
    """A typed (FFI) call of one of hlopt's kernels, which reads no attributes."""
    op = stablehlo.CustomCallOp([result], operands, target, backend_config=ir.DictAttr.get({}),
                                api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4))
    return op.result


REWRITES = {"dot_general": _spmm, "dot_general_sampled": _sddmm, "bcsr_dot_general": _csr_spmm}


@dataclasses.dataclass(frozen=True)
class SparseKernels(Pass):
    """Sparse x dense products as calls of hlopt's CPU kernels.

    Rewrite row-sorted BCOO and BCSR sparse x dense products (SpMV, SpMM, SDDMM) into calls of hlopt's CPU kernels.

    For CPU compiles in this process only (the kernels are hlopt's runtime's).
    """

    name: ClassVar[str] = "xla-cpu-sparse-kernels"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    calls_runtime: ClassVar[bool] = True

    def apply(self, module: ir.Operation) -> None:
        substitute_products(module, REWRITES)
