"""The `tpu-sparse-products` pass: sparse x dense products in the gathers and scatters a TPU runs fastest.

A TPU runs XLA's gathers and scatters one index at a time, and the cost of each index
barely depends on how wide its slice is (bench/tpu_gather_bound.py records the pieces): a
gather of one float an index costs about as much as a gather of a 64-float row, and a scatter
costs the same for every update, whether or not the update falls outside the output and is
dropped. So a product is as fast as its number of indexed slices allows, and the rewrite
minimizes those:

- A product where a kernel is registered (`register_product_kernel`; `hlopt.sparse` registers its
  Pallas TPU kernels, `hlopt.sparse.tpu_products`, which add the products up on the matrix unit
  with no scatter) and takes it: a call of the kernel's function, the entries sorted by row first
  unless `indices_sorted` says they are. Otherwise:
- SpMV `A @ x[K]`: x is read as `[K/8, 8]` windows (x padded with zeros), each entry
  gathers the window holding its column and keeps that column's lane (a select and a sum of
  8 lanes, fused by XLA); the products are added into the output by a scatter-add of one
  value an entry.
- SpMM `A @ X[K, N]`: each entry gathers its row of X, the products are added into the
  output's rows by a scatter-add marked `indices_are_sorted` when the entries are sorted by row
  (sorted targets run through the output in order). Unsorted entries of a large product
  (`SORT_MIN_ENTRIES` entries and `SORT_MIN_COLUMNS` columns or more) are first sorted by row
  (one sort of rows, columns and values), which costs less than the unsorted scatter it saves.
- A product whose gathered rows would take more than `CHUNK_BYTES` runs as a loop over
  chunks of entries of that size, so a product with 256 columns and 10^7 entries fits in HBM.

Each output element sums the same products as in `lower-bcoo`'s lowering (the sort is stable,
so a row's entries keep their order): the result is the portable lowering's, to its rounding. Padding entries (a row or column index out of range)
add nothing; duplicate entries add up.

Rewritten, each only where all of its conditions hold (anything else is left to `lower-bcoo`):

- `@hlopt.bcoo.dot_general` of a BCOO matrix `[M, K]` (n_batch = n_dense = 0, integer indices,
  M and K below 2^31) with a dense `x[K]` or `x[K, N]` contracting the matrix's columns with x's
  rows, data, x and result of one float type; or its transpose `A^T @ x[M, ...]` (contracting the
  matrix's rows, as a gradient does): the same product of the entries with rows and columns
  swapped, which are not sorted by their new rows.
- `@hlopt.bcoo.dot_general_sampled` (SDDMM) of two matrices at a plain matrix's indices:
  `hlopt.passes.tpu.sampled_products`.
- `@hlopt.bcoo.bcsr_dot_general` of a CSR matrix (`hlopt.sparse.BCSR`) with at least one entry,
  the same types: each entry's row comes from `indptr` as in `lower-bcoo` (a prefix sum, so the
  rows are sorted and the SpMM's scatter is marked sorted), then the same product.

Platform: declared `tpu`, so it rewrites only a module compiled for a TPU (`hlopt-opt --platform
tpu` for IR work). Products inside functions another annotation calls are left alone
(`hlopt.passes.sparse.substitute`).

Before:
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32,
         backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]],
         indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, ...}}
         : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf32>) -> tensor<4xf32>
After (SpMV):
  %w = stablehlo.reshape (pad %x to 8) : tensor<1x8xf32>
  %g = "stablehlo.gather"(%w, %cols / 8) {slice_sizes = array<i64: 1, 8>} : tensor<6x8xf32>
  %v = reduce(select(iota == %cols % 8, %g, 0)) over the lanes, times %data, zero where %cols >= 5
  %0 = "stablehlo.scatter"(zeros, %rows, %v) ({add}) : tensor<4xf32>
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from hlopt.passes.sparse import index as ix
from hlopt.passes.ir import builders as b
from hlopt.passes.ir.dtypes import dtype_name
from hlopt.passes.rewrite.patterns import PatternPass, PatternSet
from hlopt.passes.sparse.substitute import MATMUL, plain_matrix, product_patterns
from hlopt.passes.tpu.sampled_products import sampled_product
from hlopt.passes.mlir import ir

if TYPE_CHECKING:
    from hlopt.passes.sparse.bcoo import BcooOp

Value = ir.Value

# Lanes of the windows an SpMV reads x in: a gather of 8 floats costs what a gather of one does.
WINDOW = 8
# Unsorted SpMM entries are sorted by row first from this many entries and columns.
SORT_MIN_ENTRIES = 1 << 20
SORT_MIN_COLUMNS = 64
# Most bytes of gathered rows one step of a product builds.
CHUNK_BYTES = 1 << 30
# The products taken, by dot_general's dimension numbers: the matrix dimension the output's rows come from
# (`A @ x` and `A^T @ x`, the transpose a gradient brings).
OUTPUT_DIM = {MATMUL: 0, (((0,), (0,)), ((), ())): 1}

# `(rows, x's shape, entries, value dtype, index dtype) -> StableHLO text` of a module whose `@main(rows[E],
# cols[E], data[E], x) -> y` is a sparse x dense product kernel, or None where the kernel does not take the product.
ProductKernel = Callable[[int, tuple[int, ...], int, str, str], "str | None"]
_KERNEL: list[ProductKernel] = []


def register_product_kernel(kernel: ProductKernel | None) -> ProductKernel | None:
    """Make `kernel` the product the pass calls (hlopt's Pallas kernels, registered by `hlopt.sparse`; None: the
    gathers and scatter-adds of `_add_products` for every product); the one it replaces."""
    kept = _KERNEL[0] if _KERNEL else None
    _KERNEL[:] = [] if kernel is None else [kernel]
    return kept


def registered_kernel() -> ProductKernel | None:
    """The kernel the pass calls where it takes a product (None: none is registered)."""
    return _KERNEL[0] if _KERNEL else None


def _kernel_text(c: BcooOp, data: Value, x: Value) -> str | None:
    """The registered kernel's function for this product, None where there is none or it does not take it."""
    if not _KERNEL:
        return None
    return _KERNEL[0](c.result_shape(0)[0], tuple(b.shape_of(x)), b.shape_of(data)[0],
                      dtype_name(str(b.elem_of(data))), "int32")


def _call_kernel(c: BcooOp, text: str, rows: Value, cols: Value, data: Value, x: Value) -> Value:
    """`A @ x` by the kernel function `text`, brought into the module."""
    module = c.op
    while module.name != "builtin.module":
        module = module.parent
    name = b.import_functions(module, text, "hlopt_tpu_product")
    return b.call(name, [rows, cols, data, x], [c.result_types[0]])[0]


def _rows_of(x: Value, index: Value) -> Value:
    """`x[index[e], :]` for `x[R, W]` and `index[E]`: `[E, W]` (indices clamped into range)."""
    r, w = b.shape_of(x)
    e = b.shape_of(index)[0]
    return b.gather(x, b.reshape(index, [e, 1]), offset_dims=[1], collapsed_slice_dims=[0], operand_batching_dims=[],
                    start_indices_batching_dims=[], start_index_map=[0], index_vector_dim=1, slice_sizes=[1, w])


def _elements_of(x: Value, index: Value) -> Value:
    """`x[index[e]]` for `x[K]` and `index[E]`, read in windows of `WINDOW` lanes: `[E]` (an index out of range
    reads some element of x; the caller masks it)."""
    k = b.shape_of(x)[0]
    e = b.shape_of(index)[0]
    padded = b.pad(x, [0], [-k % WINDOW], [0], b.scalar(0, b.elem_of(x)))
    windows = _rows_of(b.reshape(padded, [-(-k // WINDOW), WINDOW]), b.div(index, b.full([e], WINDOW, b.elem_of(index))))
    lane = b.rem(index, b.full([e], WINDOW, b.elem_of(index)))
    pick = b.compare(b.iota([e, WINDOW], 1, b.elem_of(index)), b.broadcast(lane, [e, WINDOW], [0]), "EQ")
    return b.reduce(b.select(pick, windows, b.zeros_like(windows)), [1])


def _add_products(out: Value, rows: Value, cols: Value, data: Value, x: Value, sorted_: bool) -> Value:
    """`out[rows[e]] += data[e] * x[cols[e]]` over the entries; entries with a column out of range add nothing,
    those with a row out of range are dropped."""
    xs = b.shape_of(x)
    e = b.shape_of(rows)[0]
    gathered = _elements_of(x, cols) if len(xs) == 1 else _rows_of(x, cols)
    products = b.mul(b.broadcast(data, [e, *xs[1:]], [0]), gathered)
    products = ix.mask(products, ix.valid(b.reshape(cols, [e, 1]), [xs[0]]))
    window = list(range(1, len(xs)))
    return b.scatter(out, b.reshape(rows, [e, 1]), products, update_window_dims=window, inserted_window_dims=[0],
                     input_batching_dims=[], scatter_indices_batching_dims=[], scattered_dims_to_operand_dims=[0],
                     index_vector_dim=1, sorted_indices=sorted_)


def _chunked_products(out: Value, rows: Value, cols: Value, data: Value, x: Value, sorted_: bool) -> Value:
    """`_add_products` over chunks of entries whose gathered rows take at most `CHUNK_BYTES`."""
    xs = b.shape_of(x)
    nse = b.shape_of(rows)[0]
    row_bytes = math.prod(xs[1:]) * max(ir.FloatType(b.elem_of(x)).width // 8, 1) * (WINDOW if len(xs) == 1 else 1)
    chunks = -(-nse * row_bytes // CHUNK_BYTES)
    if chunks <= 1:
        return _add_products(out, rows, cols, data, x, sorted_)
    size = -(-nse // chunks)
    fill = chunks * size - nse
    m = b.shape_of(out)[0]
    # padding entries: a row past the output (dropped), after every real row (sortedness kept)
    rows, cols, data = (b.reshape(b.pad(v, [0], [fill], [0], b.scalar(pad, b.elem_of(v))), [chunks, size])
                        for v, pad in ((rows, m), (cols, 0), (data, 0)))
    i32 = b.elem_of(rows)

    def step(t: Value, acc: Value) -> list[Value]:
        zero = b.scalar(0, i32)
        part = [b.reshape(b.dynamic_slice(v, [t, zero], [1, size]), [size]) for v in (rows, cols, data)]
        return [b.add(t, b.scalar(1, i32)), _add_products(acc, *part, x, sorted_)]

    return b.while_loop([b.scalar(0, i32), out], lambda t, _: b.compare(t, b.scalar(chunks, i32), "LT"), step)[1]


def _one_float_type(c: BcooOp, data: Value, x: Value) -> bool:
    """Data, x and the result of one float type, the matrix's sizes within int32."""
    elem = b.elem_of(data)
    return (isinstance(elem, ir.FloatType) and b.elem_of(x) == elem == c.result_elem(0)
            and max(c.config["shape"]) < 2**31 - 1)


def _product(c: BcooOp) -> Value | None:
    data, indices, x = c.operands
    shape, xs = c.config["shape"], b.shape_of(x)
    out_dim = OUTPUT_DIM.get(c.config["dimension_numbers"])
    fits = (plain_matrix(c) and out_dim is not None and len(xs) in (1, 2) and xs[0] == shape[1 - out_dim]
            and c.result_shape(0) == [shape[out_dim], *xs[1:]] and isinstance(b.elem_of(indices), ir.IntegerType)
            and _one_float_type(c, data, x))
    if not fits:
        return None
    elem = b.elem_of(data)
    idx = b.convert(indices, b.i32())
    # `A^T @ x` is the product of the matrix whose rows are A's columns: its entries, unsorted by those rows
    rows, cols = ix.column(idx, out_dim), ix.column(idx, 1 - out_dim)
    sorted_ = bool(c.config.get("indices_sorted")) and out_dim == 0
    text = _kernel_text(c, data, x)
    if text is not None:
        # the kernel's work grows with the rows each chunk of entries spans: entries sorted by row first
        return _call_kernel(c, text, *((rows, cols, data) if sorted_ else b.sort([rows, cols, data], 0, num_keys=1)), x)
    if not sorted_ and len(xs) == 2 and b.shape_of(data)[0] >= SORT_MIN_ENTRIES and xs[1] >= SORT_MIN_COLUMNS:
        rows, cols, data = b.sort([rows, cols, data], 0, num_keys=1)
        sorted_ = True
    out = b.full(c.result_shape(0), 0, elem)
    # a scatter of single values runs faster with its targets unsorted: only rows are marked sorted
    return _chunked_products(out, rows, cols, data, x, sorted_ and len(xs) == 2)


def _csr_product(c: BcooOp) -> Value | None:
    data, indices, indptr, x = c.operands
    nse = b.shape_of(data)[0]
    if not (nse and nse < 2**31 - 1 and _one_float_type(c, data, x)):
        return None
    # the op records: imported only for a module that has sparse products
    from hlopt.passes.sparse.bcoo.ops.bcsr_dot_general import entry_rows_of

    i32 = b.i32()
    rows = entry_rows_of(b.convert(indptr, i32), nse, i32)  # non-decreasing: the scatter's targets are sorted
    cols = b.convert(indices, i32)
    text = _kernel_text(c, data, x)
    if text is not None:
        return _call_kernel(c, text, rows, cols, data, x)
    out = b.full(c.result_shape(0), 0, b.elem_of(data))
    return _chunked_products(out, rows, cols, data, x, len(b.shape_of(x)) == 2)


REWRITES = {"dot_general": _product, "bcsr_dot_general": _csr_product, "dot_general_sampled": sampled_product}


@dataclasses.dataclass(frozen=True)
class SparseProducts(PatternPass):
    """Rewrite BCOO and BCSR sparse x dense products (SpMV, SpMM, and `A^T @ x`) into hlopt's TPU kernels or the gathers and scatter-adds a TPU runs fastest, and sampled products (SDDMM) into row gathers and a reduce.

    For TPU compiles only. A product calls the registered kernel where it takes it.

    Backend: a TPU runs XLA's gathers and scatters one index at a time, at a cost that barely
    depends on the slice's width, so the rewrite minimizes indexed slices; benchmark:
    `bench/sparse_tpu.py` (against JAX's BCOO; `bench/tpu_gather_bound.py` for the bound),
    `bench/sparse_tpu_patterns.py` (SDDMM and a GCN step).

    Before:
      %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {backend_config = {...}}
             : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
    After:
      %g = "stablehlo.gather"(%x, %cols) {slice_sizes = array<i64: 1, 3>} : tensor<6x3xf32>
      %0 = "stablehlo.scatter"(zeros, %rows, %data * %g) ({add}) : tensor<4x3xf32>
    """

    name: ClassVar[str] = "tpu-sparse-products"
    platforms: ClassVar[tuple[str, ...]] = ("tpu",)

    def patterns(self, module: ir.Operation) -> tuple[PatternSet, ...]:
        return product_patterns(module, REWRITES)
