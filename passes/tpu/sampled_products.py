"""The TPU form of a sampled product (SDDMM), `(A @ B)` read at a BCOO matrix's indices: `tpu-sparse-products`' rule
for `@hlopt.bcoo.dot_general_sampled`.

Each entry `(i, j)` gathers row i of A and column j of B (a row of B transposed, so both are
contiguous rows of K values), multiplies them and sums the K products: one gather a side and a
reduce, no `[E, K] x [E, K]` batched dot (the TPU would run it as E one-row products on the matrix
unit) and never the dense `[M, N]` product. Entries with an index out of range give 0.

Taken where A and B are matrices with one contracted dimension each and the sampled matrix is
plain (no batch or dense dims), of one float type; anything else is left to `lower-bcoo`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlopt.passes.ir import builders as b
from hlopt.passes.mlir import ir
from hlopt.passes.sparse import index as ix

if TYPE_CHECKING:
    from hlopt.passes.sparse.bcoo import BcooOp

Value = ir.Value


def _rows(x: Value, index: Value) -> Value:
    """`x[index[e], :]` for `x[R, K]` and `index[E]`: `[E, K]` (indices clamped into range)."""
    k = b.shape_of(x)[1]
    e = b.shape_of(index)[0]
    return b.gather(x, b.reshape(index, [e, 1]), offset_dims=[1], collapsed_slice_dims=[0], operand_batching_dims=[],
                    start_indices_batching_dims=[], start_index_map=[0], index_vector_dim=1, slice_sizes=[1, k])


def _contracted_last(x: Value, contracted: int) -> Value:
    """Matrix `x` with its contracted dimension second: `[free, K]`."""
    return x if contracted == 1 else b.transpose(x, [1, 0])


def sampled_product(c: BcooOp) -> Value | None:
    """`data[e] = sum_k A[i_e, k] B[k, j_e]` by two row gathers and a reduce, or None where the op is not taken."""
    a, bb, idx = c.operands
    (lc, rc), (lb, rb) = c.config["dimension_numbers"]
    elem = b.elem_of(a)
    shapes_ok = len(b.shape_of(a)) == len(b.shape_of(bb)) == 2 and len(lc) == len(rc) == 1 and not (lb or rb)
    idx_shape = b.shape_of(idx)
    if not (shapes_ok and isinstance(elem, ir.FloatType) and b.elem_of(bb) == elem == c.result_elem(0)
            and len(idx_shape) == 2 and idx_shape[1] == 2 and isinstance(b.elem_of(idx), ir.IntegerType)
            and c.result_shape(0) == idx_shape[:1]):
        return None
    perm = tuple(c.config.get("permutation") or (0, 1))  # sampled dim s is dot dim perm[s]: 0 A's rows, 1 B's columns
    ar, br = _contracted_last(a, lc[0]), _contracted_last(bb, rc[0])
    sizes = [b.shape_of(ar)[0], b.shape_of(br)[0]]
    if max(sizes) >= 2**31 - 1:
        return None
    cols = b.convert(idx, b.i32())
    i, j = ix.column(cols, perm.index(0)), ix.column(cols, perm.index(1))
    products = b.reduce(b.mul(_rows(ar, i), _rows(br, j)), [1])
    e = idx_shape[0]
    return ix.mask(products, ix.valid(b.concat([b.reshape(i, [e, 1]), b.reshape(j, [e, 1])], 1), sizes))
