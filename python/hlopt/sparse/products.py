"""Sparse products: `bcoo_dot_general` (sparse x dense, dense x sparse, sparse x sparse),
`bcoo_dot_general_sampled` (SDDMM) and `bcoo_spdot_general`, with the primitives behind them.

Each primitive lowers to one `hlopt.bcoo.<op>` annotation (`dot_general`, `dot_general_sampled`,
`spdot_general`, `spdot_general_sampled`) whose record is in `hlopt.passes.sparse.bcoo.ops.products`; the
primitives are defined wholly from the records (shapes, `lax.dot_general`'s dtypes, batching,
and the derivatives: each product is linear in each operand's data, its transposes the
products that JAX's `lax.dot_general` transpose gives, read at the operand's indices, so a
gradient never builds the dense operand of a sparse one); here is the API that binds them.

Sparse x sparse stores `nse` output entries; the entries are the distinct output indices,
sorted, and when more exist than `nse`, those with the smallest row-major index are kept. By
default `nse` is exact when the indices are concrete (eagerly, or closed over by a traced
function): the symbolic phase (`hlopt.sparse.symbolic`) computes the output structure on the
host first, as scipy does, and the values are a gather, product and sorted segment sum over the
matching pairs (plain JAX ops: their gradients are JAX's). With traced indices the default is
JAX's bound (`lhs.nse * rhs.nse`, or one factor when that side has no free sparse dim, capped
by the output's sparse size), which never drops an entry; a bound of more than
`TRACED_BOUND_LIMIT` stored entries is refused (`SparseEfficiencyError`) with the ways to give
`nse`.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlopt.passes.sparse import shapes
from hlopt.sparse import rules, spgemm, symbolic
from hlopt.sparse.bcoo import BCOO, SparseEfficiencyError, bcoo_squeeze, bcoo_transpose
from hlopt.sparse.structure import bcoo_broadcast_in_dim


# The most output entries (all batches) that JAX's bound may give a product with traced indices:
# 2**24 entries are 200 MB of float32 data and two int32 index columns.
TRACED_BOUND_LIMIT = 1 << 24


def _dims_key(dimension_numbers: Any) -> shapes.DotDims:
    """dimension_numbers as nested tuples of ints (hashable: the primitives' parameter)."""
    try:
        (lc, rc), (lb, rb) = dimension_numbers
        norm = [tuple(operator.index(d) for d in x) for x in (lc, rc, lb, rb)]
    except TypeError as e:
        raise TypeError("dimension_numbers must be ((lhs_contracting_dims, rhs_contracting_dims), "
                        f"(lhs_batch_dims, rhs_batch_dims)), got {dimension_numbers!r}") from e
    return (norm[0], norm[1]), (norm[2], norm[3])


dot_general_p = rules.primitive("dot_general")
dot_general_sampled_p = rules.primitive("dot_general_sampled")
spdot_general_p = rules.primitive("spdot_general")
spdot_general_sampled_p = rules.primitive("spdot_general_sampled")


def dot_general_sampled(a: Any, b: Any, indices: Any, dimension_numbers: Any,
                        permutation: Sequence[int] | None = None) -> jax.Array:
    """`dot_general(a, b)`, its dims permuted (dim i is dot dim `permutation[i]`), at `indices`."""
    return dot_general_sampled_p.bind(jnp.asarray(a), jnp.asarray(b), jnp.asarray(indices),
                                      dimension_numbers=_dims_key(dimension_numbers),
                                      permutation=None if permutation is None else tuple(permutation))


# ---------------------------------------------------------------------------
# The API


def bcoo_dot_general(lhs: BCOO | Any, rhs: BCOO | Any, *, dimension_numbers: Any, precision: None = None,
                     preferred_element_type: Any = None, out_sharding: Any = None) -> BCOO | jax.Array:
    """`lax.dot_general` where either operand (or both) is a BCOO array.

    Sparse x dense and dense x sparse give a dense array; sparse x sparse a BCOO array
    (`bcoo_spdot_general` with JAX's nse bound). `a @ x` calls it.

    Args:
      lhs: a `BCOO` or a dense array.
      rhs: a `BCOO` or a dense array.
      dimension_numbers: `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`.
      precision: unused, as in JAX.
      preferred_element_type: the result's dtype.
      out_sharding: unused, as in JAX.

    Returns:
      A dense array, or a `BCOO` when both operands are.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> x = jnp.array([1.0, 1.0, 1.0])
      >>> sparse.bcoo_dot_general(a, x, dimension_numbers=(((1,), (0,)), ((), ()))).tolist()
      [3.0, 3.0]
    """
    del precision, out_sharding
    dims = _dims_key(dimension_numbers)
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    if isinstance(lhs, BCOO) and isinstance(rhs, BCOO):
        return bcoo_spdot_general(lhs, rhs, dimension_numbers=dims, preferred_element_type=pet)
    if isinstance(lhs, BCOO):
        return dot_general_p.bind(lhs.data, lhs.indices, jnp.asarray(rhs), shape=lhs.shape, dimension_numbers=dims,
                                  preferred_element_type=pet, indices_sorted=lhs.indices_sorted,
                                  unique_indices=lhs.unique_indices)
    if isinstance(rhs, BCOO):
        (lc, rc), (lb, rb) = dims
        out = bcoo_dot_general(rhs, lhs, dimension_numbers=((rc, lc), (rb, lb)), preferred_element_type=pet)
        n_swap = len(rhs.shape) - len(rc)
        return lax.transpose(out, (*range(len(lb)), *range(n_swap, out.ndim), *range(len(lb), n_swap)))
    return lax.dot_general(lhs, rhs, dims, preferred_element_type=pet)


def bcoo_spdot_general(lhs: BCOO, rhs: BCOO, *, dimension_numbers: Any, preferred_element_type: Any = None,
                       nse: int | None = None) -> BCOO:
    """The product of two BCOO arrays as a BCOO array with `nse` stored entries (hlopt's extension
    of JAX's `bcoo_spdot_general`).

    Output batch dims: the batch pairs, lhs's other batch dims, rhs's; sparse dims: lhs's free
    sparse dims, then rhs's. Entries are the distinct output indices in row-major order; with more
    distinct indices than `nse`, the first `nse` are kept. The product is the `spdot_general`
    annotation (portable: its work and memory are linear in the operands' nse, `nse` and the pairs
    processed per chunk, never `lhs.nse * rhs.nse` at once; on CPU, products of two matrices run on
    hlopt's SpGEMM kernels). With concrete indices and no `nse`, the exact count of two matrices is
    taken on the host by the CPU count kernel (`hlopt.sparse.spgemm`); other layouts, or an install
    without the kernels, compute the structure on the host (`hlopt.sparse.symbolic`) and the values
    as one gather of each operand's data, a product and a sorted segment sum over the matching pairs.

    Args:
      lhs: a `BCOO`.
      rhs: a `BCOO`.
      dimension_numbers: as in `lax.dot_general`.
      preferred_element_type: the result's dtype.
      nse: the stored entries of the result; None: the exact count when the indices are
        concrete (`bcoo_spdot_nse`), else JAX's bound.

    Returns:
      A `BCOO`.

    Raises:
      SparseEfficiencyError: traced indices and JAX's bound above `TRACED_BOUND_LIMIT` entries:
        give `nse`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> dims = (((1,), (1,)), ((), ()))                      # a a^T
      >>> sparse.bcoo_spdot_general(a, a, dimension_numbers=dims).todense().tolist()
      [[5.0, 0.0], [0.0, 9.0]]
    """
    dims = _dims_key(dimension_numbers)
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    lay_l, lay_r = _layouts(lhs, rhs)
    nse = None if nse is None else operator.index(nse)
    if nse is None and not rules.is_traced(lhs.indices, rhs.indices):
        nse = spgemm.exact_nse(lay_l, lay_r, dims, lhs.indices, rhs.indices)
        if nse is None:
            structure = symbolic.spdot_structure(np.asarray(lhs.indices), lay_l, np.asarray(rhs.indices), lay_r, dims)
            if structure is not None:
                return _structured_product(lhs, rhs, lay_l, lay_r, dims, pet, structure)
    plan = shapes.spdot_general(lay_l, lay_r, dims, _traced_nse(lhs, rhs, dims) if nse is None else nse)
    data, indices = spdot_general_p.bind(lhs.data, lhs.indices, rhs.data, rhs.indices.astype(lhs.indices.dtype),
                                         shape=lhs.shape, rhs_shape=rhs.shape, dimension_numbers=dims,
                                         nse=plan.data[-1], preferred_element_type=pet,
                                         indices_sorted=lhs.indices_sorted, unique_indices=lhs.unique_indices)
    return BCOO((data, indices), shape=plan.shape, indices_sorted=True, unique_indices=True)


def bcoo_spdot_nse(lhs: BCOO, rhs: BCOO, *, dimension_numbers: Any) -> int:
    """The exact nse of `bcoo_spdot_general(lhs, rhs)`: the most distinct output positions of any
    output batch, counted on the host from the operands' concrete indices (padding excluded).

    Call it outside `jit` (or on indices a traced function closes over) and pass the count as
    `nse=` to a traced `bcoo_spdot_general`.

    Args:
      lhs: a `BCOO` with concrete indices.
      rhs: a `BCOO` with concrete indices.
      dimension_numbers: as in `lax.dot_general`.

    Returns:
      The count, an int.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_spdot_nse(a, a, dimension_numbers=(((1,), (1,)), ((), ())))
      2
    """
    dims = _dims_key(dimension_numbers)
    if rules.is_traced(lhs.indices, rhs.indices):
        raise jax.errors.ConcretizationTypeError(
            lhs.indices if rules.is_traced(lhs.indices) else rhs.indices,
            "bcoo_spdot_nse counts the output structure from concrete indices: call it outside jit, "
            "on the arrays whose product a traced bcoo_spdot_general takes with nse=")
    lay_l, lay_r = _layouts(lhs, rhs)
    counted = spgemm.exact_nse(lay_l, lay_r, dims, lhs.indices, rhs.indices)
    if counted is not None:
        return counted
    structure = symbolic.spdot_structure(np.asarray(lhs.indices), lay_l, np.asarray(rhs.indices), lay_r, dims)
    return shapes.spdot_general(lay_l, lay_r, dims).bound if structure is None else structure.nse


def _layouts(lhs: BCOO, rhs: BCOO) -> tuple[shapes.Layout, shapes.Layout]:
    return (shapes.layout(lhs.shape, lhs.data.shape, lhs.indices.shape),
            shapes.layout(rhs.shape, rhs.data.shape, rhs.indices.shape))


def _traced_nse(lhs: BCOO, rhs: BCOO, dims: shapes.DotDims) -> int:
    """JAX's bound, refused above TRACED_BOUND_LIMIT entries."""
    plan = shapes.spdot_general(*_layouts(lhs, rhs), dims)
    total = plan.bound * math.prod(plan.batch)
    if total > TRACED_BOUND_LIMIT:
        raise SparseEfficiencyError(
            f"bcoo_spdot_general of {lhs.shape} (nse {lhs.nse}) and {rhs.shape} (nse {rhs.nse}) with traced "
            f"indices: JAX's output bound is {total} stored entries, over hlopt's limit of {TRACED_BOUND_LIMIT} "
            "(hlopt.sparse.products.TRACED_BOUND_LIMIT). Give the output nse: "
            "bcoo_spdot_general(lhs, rhs, dimension_numbers=..., nse=N), with N counted outside jit by "
            "hlopt.sparse.bcoo_spdot_nse(lhs, rhs, dimension_numbers=...), or compute the product outside jit, "
            "where the exact count is taken.")
    return plan.bound


def _structured_product(lhs: BCOO, rhs: BCOO, lay_l: shapes.Layout, lay_r: shapes.Layout, dims: shapes.DotDims,
                        pet: Any, structure: symbolic.Structure) -> BCOO:
    """The numeric phase on the host-computed structure: each operand's data broadcast and
    flattened as the structure numbers its entries, then `_pair_values`."""
    (_, _), (lb, rb) = dims
    plan = shapes.spdot_general(lay_l, lay_r, dims, structure.nse)
    flat = []
    for m, lay, pairs in ((lhs, lay_l, lb), (rhs, lay_r, rb)):
        nb = lay.n_batch
        target = symbolic.batch_target(lay, pairs)
        data = jnp.broadcast_to(m.data, (*target, lay.nse))
        flat.append(jnp.transpose(data, (*pairs, *shapes.free_dims(nb, pairs), nb)).reshape(-1))
    size = math.prod(plan.data)
    it = np.int32 if max(size, flat[0].size, flat[1].size) < 2**31 else np.int64
    pairs = (jnp.asarray(a.astype(it)) for a in (structure.lhs_entry, structure.rhs_entry, structure.slot))
    values = _pair_values(*flat, *pairs, size=size, dtype=rules.TERMS.dot_dtype(lhs.dtype, rhs.dtype, dims, pet))
    indices = jnp.asarray(structure.indices.astype(lhs.indices.dtype))
    return BCOO((values.reshape(plan.data), indices), shape=plan.shape, indices_sorted=True, unique_indices=True)


@functools.partial(jax.jit, static_argnames=("size", "dtype"))
def _pair_values(ld: jax.Array, rd: jax.Array, lhs_entry: jax.Array, rhs_entry: jax.Array, slot: jax.Array, *,
                 size: int, dtype: np.dtype) -> jax.Array:
    """`out[slot[p]] += ld[lhs_entry[p]] * rd[rhs_entry[p]]` (slots sorted), formed in the result
    dtype or a wider float operand's, as lax.dot_general accumulates."""
    boolean = dtype == np.bool_
    compute = np.int32 if boolean else jnp.promote_types(dtype, jnp.result_type(ld.dtype, rd.dtype))
    prod = ld[lhs_entry].astype(compute) * rd[rhs_entry].astype(compute)
    out = jax.ops.segment_sum(prod, slot, num_segments=size, indices_are_sorted=True)
    return out != 0 if boolean else out.astype(dtype)


def bcoo_dot_general_sampled(A: Any, B: Any, indices: Any, *, dimension_numbers: Any) -> jax.Array:
    """`lax.dot_general(A, B)` at the BCOO `indices` only (SDDMM): the data of
    `bcoo_extract(indices, A . B)`.

    Args:
      A: a dense array.
      B: a dense array.
      indices: the indices of a `BCOO` of the product's shape.
      dimension_numbers: as in `lax.dot_general`.

    Returns:
      The product's values at `indices`, laid out as a BCOO's data.

    Example:
      >>> mask = sparse.BCOO.fromdense(jnp.eye(2))
      >>> A, B = jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> sparse.bcoo_dot_general_sampled(A, B, mask.indices, dimension_numbers=(((1,), (0,)), ((), ()))).tolist()
      [1.0, 4.0]
    """
    return dot_general_sampled(A, B, indices, dimension_numbers)


def matmul(a: Any, b: Any) -> Any:
    """`a @ b` with `jnp.matmul`'s rules where either side is a BCOO array: leading batch dims
    broadcast against each other (a size-1 dim is squeezed and the other side's becomes a free dim
    of the product), as `jnp.matmul` and JAX's BCOO `@` do."""
    a_shape, b_shape = tuple(np.shape(a)), tuple(np.shape(b))
    if not a_shape or not b_shape:
        raise ValueError(f"matmul: inputs must be at least 1-dimensional, got shapes {a_shape} and {b_shape}")
    a_mat, b_mat = len(a_shape) > 1, len(b_shape) > 1
    n = max(len(a_shape) - 2, len(b_shape) - 2, 0)
    a_batch = (None,) * (n - max(len(a_shape) - 2, 0)) + a_shape[:-2]
    b_batch = (None,) * (n - max(len(b_shape) - 2, 0)) + b_shape[:-2]
    a_squeeze, b_squeeze, both_squeeze = [], [], []
    a_pairs, b_pairs = [], []  # positions of the batch pairs in the squeezed operands
    idx_batch, idx_a, idx_b = [], [], []  # the output dim of each product dim
    for i, (sa, sb) in enumerate(zip(a_batch, b_batch)):
        if sa is None:
            idx_b.append(i)
        elif sb is None:
            idx_a.append(i)
        elif sa == sb == 1:
            a_squeeze.append(len(idx_batch) + len(idx_a) + len(a_squeeze))
            b_squeeze.append(len(idx_batch) + len(idx_b) + len(b_squeeze))
            both_squeeze.append(i)
        elif sa == 1:
            idx_b.append(i)
            a_squeeze.append(len(idx_batch) + len(idx_a) + len(a_squeeze))
        elif sb == 1:
            idx_a.append(i)
            b_squeeze.append(len(idx_batch) + len(idx_b) + len(b_squeeze))
        elif sa == sb:
            a_pairs.append(len(idx_batch) + len(idx_a))
            b_pairs.append(len(idx_batch) + len(idx_b))
            idx_batch.append(i)
        else:
            raise ValueError(f"matmul: batch dims of shapes {a_shape} and {b_shape} do not broadcast")
    if a_mat:
        idx_a.append(n)
    if b_mat:
        idx_b.append(n + a_mat)
    a, b = _squeeze(a, a_squeeze), _squeeze(b, b_squeeze)
    contracting = ((len(a_shape) - len(a_squeeze) - 1,), (len(b_shape) - len(b_squeeze) - 1 - b_mat,))
    out = bcoo_dot_general(a, b, dimension_numbers=(contracting, (tuple(a_pairs), tuple(b_pairs))))
    perm = tuple(int(p) for p in np.argsort([*idx_batch, *idx_a, *idx_b]))
    out = out if perm == tuple(range(len(perm))) else _transpose(out, perm)
    return _expand_dims(out, both_squeeze) if both_squeeze else out


def _squeeze(x: Any, dims: Sequence[int]) -> Any:
    if not dims:
        return x
    return bcoo_squeeze(x, dimensions=dims) if isinstance(x, BCOO) else lax.squeeze(x, dims)


def _expand_dims(x: Any, dims: Sequence[int]) -> Any:
    if isinstance(x, BCOO):
        shape = list(x.shape)
        for d in sorted(dims):
            shape.insert(d, 1)
        kept = [d for d in range(len(shape)) if d not in dims]
        return bcoo_broadcast_in_dim(x, shape=tuple(shape), broadcast_dimensions=tuple(kept))
    return lax.expand_dims(x, dims)


def _transpose(x: Any, perm: Sequence[int]) -> Any:
    if isinstance(x, BCOO):
        return bcoo_transpose(x, permutation=perm)
    return jnp.transpose(x, perm)
