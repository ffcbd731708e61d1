"""`hlopt.bcoo.bcsr_dot_general`: `A @ x` for a CSR matrix `A = BCSR(data[nse], indices[nse],
indptr[M + 1])` of `shape = (M, K)` and a dense `x[K]` (SpMV) or `x[K, N]` (SpMM).

Entry `e` belongs to row `r` when `indptr[r] <= e < indptr[r + 1]`; entries outside
`[indptr[0], indptr[M])` and entries whose column is outside `[0, K)` add nothing, duplicates add
up (JAX's BCSR). The portable lowering gives each entry its row as JAX's `_csr_to_coo` does (a
scatter of ones at the row pointers and a prefix sum: how many pointers are <= the entry's
position, less one; pointers outside `[0, nse)` mark nothing), then gathers `x` at the columns
(out-of-range columns masked), multiplies and scatter-adds into the rows (out-of-range rows
dropped). With an `indptr` that is not non-decreasing the result is unspecified but every read
stays in bounds; `xla-cpu-sparse-kernels` replaces the op on CPU by `hlopt_csr_spmm`, which
refuses such an `indptr`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hlopt.passes.sparse import index as ix
from hlopt.passes.ir import builders as b
from hlopt.passes.sparse.bcoo.ops.products import batch_dot_general, transpose_dot_general
from hlopt.passes.sparse.bcoo.record import DATA, DENSE, INDICES, NUMBERS, BcooOp, Derivative, Record, Shape, Signature
from hlopt.passes.mlir import ir

Value = ir.Value


def bcsr_dot_general_shapes(config: Mapping[str, Any], data: Shape, indices: Shape, indptr: Shape,
                            x: Shape) -> list[Shape]:
    shape = tuple(config["shape"])
    if len(shape) != 2 or config["n_batch"] or config["n_dense"]:
        raise ValueError(f"a CSR matrix (shape of 2 dims, n_batch = n_dense = 0), got shape {list(shape)}, "
                         f"n_batch={config['n_batch']}, n_dense={config['n_dense']}")
    m, k = shape
    if len(data) != 1 or tuple(indices) != tuple(data) or tuple(indptr) != (m + 1,):
        raise ValueError(f"needs data[nse], indices[nse] and indptr[{m + 1}] for shape {list(shape)}, got "
                         f"data{list(data)}, indices{list(indices)} and indptr{list(indptr)}")
    if len(x) not in (1, 2) or x[0] != k:
        raise ValueError(f"needs x[{k}] or x[{k}, N] for shape {list(shape)}, got x{list(x)}")
    return [(m, *x[1:])]


def entry_rows_of(indptr: Value, nse: int, elem: ir.Type) -> Value:
    """`rows[nse]`: how many of `indptr` are <= each entry's position, less one (JAX's `_csr_to_coo`); a prefix
    sum, so non-decreasing whatever `indptr` holds."""
    m1 = b.shape_of(indptr)[0]
    marks = b.scatter(b.full([nse], 0, elem), b.reshape(indptr, [m1, 1]), b.full([m1], 1, elem),
                      update_window_dims=[], inserted_window_dims=[0], input_batching_dims=[],
                      scatter_indices_batching_dims=[], scattered_dims_to_operand_dims=[0], index_vector_dim=1)
    return b.sub(b.prefix_scan(marks, 0), b.full([nse], 1, elem))


def lower_bcsr_dot_general(c: BcooOp) -> list[Value]:
    data, indices, indptr, x = c.operands
    m, k = c.config["shape"]
    nse = b.shape_of(data)[0]
    out_shape, out_elem = c.result_shape(0), c.result_elem(0)
    if nse == 0 or k == 0:
        return [b.full(out_shape, 0, out_elem)]
    wide = ir.IntegerType(b.elem_of(indices)).width > 32 or max(m, k, nse) >= 2**31 - 1
    it = b.i64() if wide else b.i32()
    cols, rows = b.convert(indices, it), entry_rows_of(b.convert(indptr, it), nse, it)
    window = out_shape[1:]
    # x[cols] (the gather clamps an out-of-range column into range; the mask zeroes its product)
    xs = ix.gather_rows(b.reshape(b.convert(x, out_elem), [1, k, *window]), b.reshape(cols, [1, nse]))
    products = b.mul(b.broadcast(b.reshape(b.convert(data, out_elem), [1, nse]), [1, nse, *window], [0, 1]), xs)
    ok = ix.in_range(b.reshape(cols, [1, nse, 1]), [k])
    products = ix.mask(products, b.reshape(ok, [1, nse]))
    out = ix.scatter_rows(b.full([1, m, *window], 0, out_elem), b.reshape(rows, [1, nse]), products, "add")
    return [b.reshape(out, out_shape)]


MATMUL = (((1,), (0,)), ((), ()))  # A's columns with x's first dim


def entry_rows(t, indices, indptr):
    """The row of each entry (JAX's `_csr_to_coo`): how many of `indptr` are <= its position, less 1.
    A pointer outside [0, nse) marks no entry. `indices[..., nse]` and `indptr[..., M + 1]` may
    share leading batch dims."""
    shape = t.aval(indices).shape
    nse = shape[-1]
    ptr = t.where((indptr >= 0) & (indptr < nse), indptr, nse)
    if len(shape) == 1:
        index = ptr
    else:  # one batch dim: each matrix marks its own row of the counts
        index = (t.arange(0, shape[0], ptr.dtype).reshape(shape[0], 1), ptr)
    return t.cumsum(t.add_at(t.zeros(shape, indices.dtype), index, 1), len(shape) - 1) - 1


def coo_indices(t, indices, indptr):
    """`indices[nse, 2]` of the BCOO matrix with these entries: (row, column) pairs."""
    axis = len(t.aval(indices).shape)
    return t.concatenate([t.expand_dims(entry_rows(t, indices, indptr), axis), t.expand_dims(indices, axis)], axis)


def _dtypes(t, avals, params):
    return [t.dot_dtype(avals[0].dtype, avals[3].dtype, MATMUL, params.get("preferred_element_type"))]


def _coo_params(shape, preferred_element_type=None, **_):
    return dict(shape=shape, dimension_numbers=MATMUL, preferred_element_type=preferred_element_type,
                indices_sorted=False, unique_indices=False)


def transpose_bcsr_dot_general(t, ct, data, indices, indptr, x, **params):
    """The BCOO product's transpose at the entries' (row, column) pairs."""
    return transpose_dot_general(t, ct, data, coo_indices(t, indices, indptr), x, **_coo_params(**params))


def batch_bcsr_dot_general(t, args, dims, **params):
    """A mapped matrix: the BCOO product's batching rule on its (row, column) pairs; only x mapped:
    x's mapped axis becomes its last free dim, then the result's."""
    data, indices, indptr, x = args
    if tuple(dims[:3]) != (None, None, None):
        if dims[1] is None and dims[2] is None:  # one structure for every matrix
            pairs, pairs_dim = coo_indices(t, indices, indptr), None
        else:
            size = t.mapped_size(args, dims)
            indices = t.broadcast_to(t.to_front(indices, dims[1]), (size, t.aval(indices).shape[-1]))
            indptr = t.broadcast_to(t.to_front(indptr, dims[2]), (size, t.aval(indptr).shape[-1]))
            pairs, pairs_dim = coo_indices(t, indices, indptr), 0
        return batch_dot_general(t, [data, pairs, x], [dims[0], pairs_dim, dims[3]], **_coo_params(**params))
    moved = t.moveaxis(x, dims[3], -1)
    flat = moved.reshape(moved.shape[0], -1)
    out = t.bind("bcsr_dot_general", data, indices, indptr, flat, **params)
    return out.reshape((params["shape"][0], *moved.shape[1:])), moved.ndim - 1


RECORDS = (Record("bcsr_dot_general", Signature((DATA, INDICES, INDICES, DENSE), 1), bcsr_dot_general_shapes,
                  lower_bcsr_dot_general, elements=NUMBERS, indices_operand=None,
                  type_only=("preferred_element_type",), dtypes=_dtypes, batch=batch_bcsr_dot_general,
                  derivative=Derivative(linear=(0, 3), transpose=transpose_bcsr_dot_general)),)
