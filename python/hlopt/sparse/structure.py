"""Structure ops of BCOO arrays: `bcoo_concatenate`, `bcoo_broadcast_in_dim`, `bcoo_dynamic_slice`,
`bcoo_extract` and `bcoo_conv_general_dilated`, with JAX's names, signatures and semantics.

Each is one primitive lowering to one `hlopt.bcoo.<op>` annotation (`concatenate`,
`broadcast_in_dim`, `dynamic_slice`, `extract`, `conv`), defined wholly from the op's record
(`hlopt.passes.sparse.bcoo.ops.<op>`: its lowering, result shapes, batching and derivative): here
are only the API functions that bind them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlopt.passes.sparse import shapes
from hlopt.sparse import ops, rules
from hlopt.sparse.bcoo import BCOO, bcoo_sum_duplicates, bcoo_update_layout

broadcast_in_dim_p = rules.primitive("broadcast_in_dim")
dynamic_slice_p = rules.primitive("dynamic_slice")
concatenate_p = rules.primitive("concatenate")
conv_p = rules.primitive("conv")


def _layout(mat: BCOO) -> shapes.Layout:
    return shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)


# ---------------------------------------------------------------------------
# broadcast_in_dim


def bcoo_broadcast_in_dim(mat: BCOO, *, shape: Sequence[int], broadcast_dimensions: Sequence[int],
                          sharding: Any = None) -> BCOO:
    """`lax.broadcast_in_dim` of a BCOO array.

    New dims before the first sparse dim are batch dims, new dims among the sparse ones must
    have size 1, new dims after them are dense when the array has dense dims (JAX's rules).

    Args:
      mat: a `BCOO`.
      shape: the result's shape.
      broadcast_dimensions: where `mat`'s dimensions go in it.
      sharding: unused, as in JAX.

    Returns:
      A `BCOO` of shape `shape`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> b = sparse.bcoo_broadcast_in_dim(a, shape=(2, 2, 3), broadcast_dimensions=(1, 2))
      >>> b.shape, b.n_batch, b.todense()[1].tolist()
      ((2, 2, 3), 1, [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    """
    if sharding is not None:
        raise NotImplementedError("bcoo_broadcast_in_dim: sharding is not supported")
    shape = tuple(operator.index(s) for s in shape)
    dims = tuple(operator.index(d) for d in broadcast_dimensions)
    plan = shapes.broadcast_in_dim(_layout(mat), shape, dims)
    bufs = broadcast_in_dim_p.bind(mat.data, mat.indices, new_shape=shape, broadcast_dimensions=dims, **mat._params)
    return BCOO(tuple(bufs), shape=plan.shape)


# ---------------------------------------------------------------------------
# dynamic_slice


def bcoo_dynamic_slice(mat: BCOO, start_indices: Sequence[Any], slice_sizes: Sequence[int]) -> BCOO:
    """`lax.dynamic_slice` of a BCOO array.

    Starts may be traced, and are wrapped once when negative and clamped so the slice fits, as
    lax does; nse shrinks (duplicates summed) when the slice holds fewer elements than nse.

    Args:
      mat: a `BCOO`.
      start_indices: the first index of each dimension (traced or not).
      slice_sizes: the size of each dimension of the slice.

    Returns:
      A `BCOO` of shape `slice_sizes`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_dynamic_slice(a, (1, 0), (1, 3)).todense().tolist()
      [[0.0, 3.0, 0.0]]
    """
    if not isinstance(mat, BCOO):
        raise TypeError(f"bcoo_dynamic_slice: input should be BCOO array, got type(mat)={type(mat)}")
    slice_sizes = tuple(operator.index(i) for i in slice_sizes)
    jax.eval_shape(functools.partial(lax.dynamic_slice, slice_sizes=slice_sizes),
                   jax.ShapeDtypeStruct(mat.shape, mat.dtype), list(start_indices))
    starts = [jnp.asarray(i) for i in start_indices]
    dtype = jnp.result_type(*starts) if starts else np.int32
    starts = jnp.stack([s.astype(dtype) for s in starts]) if starts else jnp.zeros((0,), np.int32)
    lay = _layout(mat)
    shape, _, _ = shapes.dynamic_slice(lay, slice_sizes)
    bufs = dynamic_slice_p.bind(mat.data, mat.indices, starts, slice_sizes=slice_sizes, **mat._params)
    out = BCOO(tuple(bufs), shape=shape)
    new_nse = int(np.prod(shape[mat.n_batch : mat.n_batch + mat.n_sparse]))
    if mat.n_sparse and mat.nse > new_nse:
        out = bcoo_sum_duplicates(out, nse=new_nse)
    return out


# ---------------------------------------------------------------------------
# concatenate


def bcoo_concatenate(operands: Sequence[BCOO], *, dimension: int) -> BCOO:
    """`lax.concatenate` of BCOO arrays along a batch or sparse `dimension`.

    JAX's rules: one layout, an operand with n_batch 0 or 1 aligned when the leading dim has
    size 1; along a batch dim nse is the largest operand's, along a sparse dim the sum.

    Args:
      operands: the `BCOO` arrays.
      dimension: the dimension to join along.

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_concatenate([a, a], dimension=0).todense().tolist()
      [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    """
    dimension = operator.index(dimension)
    operands = list(operands)
    if not all(isinstance(op, BCOO) for op in operands):
        raise ValueError(f"bcoo_concatenate: expected operands to be a sequence of BCOO arrays. Got {operands}")
    jax.eval_shape(functools.partial(lax.concatenate, dimension=dimension),
                   [jax.ShapeDtypeStruct(op.shape, op.dtype) for op in operands])
    if len({op.n_dense for op in operands}) > 1:
        raise ValueError("bcoo_concatenate requires inputs to have matching nse dimensions.")
    n_batches = {op.n_batch for op in operands}
    if len(n_batches) != 1 and max(n_batches) == 1:
        if all(op.shape[0] == 1 for op in operands if op.n_batch == 0):
            operands = [bcoo_update_layout(op, n_batch=1) if op.n_batch == 0 else op for op in operands]
        elif all(op.shape[0] == 1 for op in operands if op.n_batch == 1):
            operands = [bcoo_update_layout(op, n_batch=0) if op.n_batch == 1 else op for op in operands]
        n_batches = {op.n_batch for op in operands}
    if len(n_batches) != 1:
        raise ValueError("bcoo_concatenate requires inputs to have matching batch dimensions.")
    index_dtype = jnp.result_type(*(op.indices.dtype for op in operands))
    shape, _, _ = shapes.concatenate([_layout(op) for op in operands], dimension)
    buffers = [x for op in operands for x in (op.data, op.indices.astype(index_dtype))]
    first = operands[0]
    bufs = concatenate_p.bind(*buffers, shape=first.shape, dimension=dimension,
                              sizes=tuple(op.shape[dimension] for op in operands),
                              indices_sorted=False, unique_indices=False)
    return BCOO(tuple(bufs), shape=shape)


# ---------------------------------------------------------------------------
# extract


def bcoo_extract(sparr: BCOO, arr: Any, *, assume_unique: bool | None = None) -> BCOO:
    """The values of the dense `arr` at the indices of `sparr`, as a BCOO array with its indices.

    Args:
      sparr: a `BCOO` whose indices are read.
      arr: a dense array of `sparr`'s shape.
      assume_unique: with False (default: `not sparr.unique_indices`), an index stored more than
        once gets the value at its first entry and 0 at the others (so `todense` gives `arr`
        there once).

    Returns:
      A `BCOO` with `sparr`'s indices.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_extract(a, jnp.arange(6.0).reshape(2, 3)).data.tolist()
      [0.0, 2.0, 4.0]
    """
    if not isinstance(sparr, BCOO):
        raise TypeError(f"First argument to bcoo_extract should be a BCOO array. Got type(sparr)={type(sparr)}")
    a = jnp.asarray(arr)
    if a.shape != sparr.shape:
        raise ValueError(f"shape mismatch: sparr.shape={sparr.shape} a.shape={a.shape}")
    if assume_unique is None:
        assume_unique = sparr.unique_indices
    data = ops.extract(sparr.indices, a, assume_unique=bool(assume_unique))
    return BCOO((data, sparr.indices), **sparr._params)


# ---------------------------------------------------------------------------
# conv_general_dilated


def bcoo_conv_general_dilated(lhs: Any, rhs: Any, *, window_strides: Sequence[int], padding: Any,
                              lhs_dilation: Sequence[int] | None = None, rhs_dilation: Sequence[int] | None = None,
                              dimension_numbers: Any = None, feature_group_count: int = 1,
                              batch_group_count: int = 1, precision: Any = None,
                              preferred_element_type: Any = None, out_sharding: Any = None) -> BCOO:
    """`lax.conv_general_dilated` where either operand (or both) is a BCOO array.

    In the cases JAX supports: 1-d, one batch and one feature (leading dims (1, 1)), unit
    strides and dilations, group counts 1. The result is a BCOO array of shape (1, 1, width)
    with one entry per pair of stored entries; `precision` and `preferred_element_type` are
    checked and unused, as in JAX.

    Args:
      lhs: the input, `BCOO` or dense, shaped (1, 1, width).
      rhs: the kernel, `BCOO` or dense, shaped (1, 1, size).
      window_strides: as in `lax.conv_general_dilated` (ones).
      padding: as in `lax.conv_general_dilated`.
      lhs_dilation: ones or None.
      rhs_dilation: ones or None.
      dimension_numbers: as in `lax.conv_general_dilated`.
      feature_group_count: 1.
      batch_group_count: 1.
      precision: checked, unused.
      preferred_element_type: checked, unused.
      out_sharding: unused, as in JAX.

    Returns:
      A `BCOO`.

    Raises:
      NotImplementedError: a case JAX does not support either.

    Example:
      >>> x = sparse.BCOO.fromdense(jnp.array([[[0.0, 1.0, 0.0, 2.0]]]))
      >>> kernel = jnp.array([[[1.0, 1.0]]])
      >>> y = sparse.bcoo_conv_general_dilated(x, kernel, window_strides=(1,), padding="VALID")
      >>> y.todense().tolist()
      [[[1.0, 1.0, 2.0]]]
    """
    for x in (lhs, rhs):
        if not isinstance(x, (BCOO, jax.Array, np.ndarray)):
            raise TypeError(f"bcoo_conv_general_dilated: input of type {type(x)} not recognized.")
    func = functools.partial(
        lax.conv_general_dilated, window_strides=window_strides, padding=padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision, preferred_element_type=preferred_element_type,
        out_sharding=out_sharding)
    jaxpr = jax.make_jaxpr(func)(jax.ShapeDtypeStruct(lhs.shape, lhs.dtype), jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
    params = jaxpr.eqns[0].params
    if params["lhs_dilation"] != (1,) * (lhs.ndim - 2):
        raise NotImplementedError("bcoo convolution with lhs_dilation.")
    if params["rhs_dilation"] != (1,) * (rhs.ndim - 2):
        raise NotImplementedError("bcoo convolution with rhs_dilation.")
    if params["window_strides"] != (1,) * (lhs.ndim - 2):
        raise NotImplementedError("bcoo convolution with non-unit window_strides.")
    if params["batch_group_count"] != 1 or params["feature_group_count"] != 1:
        raise NotImplementedError("bcoo convolution with non-unit group counts.")
    if lhs.ndim != 3 or lhs.shape[:2] != (1, 1) or rhs.shape[:2] != (1, 1):
        raise NotImplementedError("bcoo convolution with leading dimensions other than (1, 1), "
                                  f"got {lhs.shape} and {rhs.shape}: only 1-d convolutions of one example")
    dnums = params["dimension_numbers"]
    if any(tuple(s) != (0, 1, 2) for s in (dnums.lhs_spec, dnums.rhs_spec, dnums.out_spec)):
        raise NotImplementedError(f"bcoo convolution with dimension_numbers other than ('NCH', 'OIH', 'NCH'), got "
                                  f"{dimension_numbers!r}")
    index_dtype = (lhs.indices.dtype if isinstance(lhs, BCOO) else rhs.indices.dtype if isinstance(rhs, BCOO)
                   else np.dtype(np.int32))
    (low, high), = params["padding"]
    l, r = _for_conv(lhs, index_dtype), _for_conv(rhs, index_dtype)
    bufs = conv_p.bind(l.data, l.indices, r.data, r.indices, shape=l.shape, rhs_shape=r.shape,
                       padding=(int(low), int(high)), indices_sorted=False, unique_indices=False)
    out_shape, _, _ = shapes.conv(_layout(l), _layout(r), (int(low), int(high)))
    return BCOO(tuple(bufs), shape=out_shape)


def _for_conv(mat: Any, index_dtype: Any) -> BCOO:
    """An operand as a BCOO array with n_batch 2, one sparse dim, no dense dims (a dense one stores every element)."""
    if isinstance(mat, BCOO):
        mat = bcoo_update_layout(mat, n_batch=2, n_dense=0)
        return BCOO((mat.data, mat.indices.astype(index_dtype)), shape=mat.shape)
    if isinstance(mat, (jax.Array, np.ndarray)):
        n = mat.shape[-1]
        indices = jnp.arange(n, dtype=index_dtype).reshape(1, 1, n, 1)
        return BCOO((jnp.asarray(mat), indices), shape=mat.shape)
    raise TypeError(f"bcoo_conv_general_dilated: input of type {type(mat)} not recognized.")
