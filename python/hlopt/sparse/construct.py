"""Constructors of BCOO arrays with JAX's names: `eye`, `empty`, `random_bcoo`, and the
bodies of `BCOO._empty`, `BCOO._eye` and `BCOO.from_scipy_sparse`."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlopt.compiler.jax_compat import concrete_or_error
from hlopt.sparse.bcoo import BCOO

_FORMATS = ("bcoo",)


def _split(shape: Sequence[int], n_batch: int, n_dense: int) -> tuple[tuple[int, ...], ...]:
    """`shape` cut into its batch, sparse and dense parts."""
    n_sparse = len(shape) - n_batch - n_dense
    return tuple(shape[:n_batch]), tuple(shape[n_batch : n_batch + n_sparse]), tuple(shape[n_batch + n_sparse :])


def _check_format(sparse_format: str) -> None:
    if sparse_format not in _FORMATS:
        raise ValueError(f"sparse_format={sparse_format!r} not supported: hlopt.sparse has only the 'bcoo' "
                         "format (JAX's bcsr, coo, csr and csc are not implemented).")


def bcoo_empty(shape: Sequence[int], *, dtype: Any = None, index_dtype: Any = "int32", n_dense: int = 0,
               n_batch: int = 0, nse: int = 0) -> BCOO:
    """An all-zero BCOO array of `shape` whose `nse` entries are all padding (`BCOO._empty`)."""
    shape = tuple(operator.index(s) for s in shape)
    n_dense, n_batch, nse = operator.index(n_dense), operator.index(n_batch), operator.index(nse)
    n_sparse = len(shape) - n_dense - n_batch
    if n_sparse < 0 or n_dense < 0 or n_batch < 0 or nse < 0:
        raise ValueError(f"Invalid inputs: shape={shape}, n_dense={n_dense}, n_batch={n_batch}, nse={nse}")
    batch, sparse, dense = _split(shape, n_batch, n_dense)
    data = jnp.zeros((*batch, nse, *dense), dtype)
    indices = jnp.full((*batch, nse, n_sparse), jnp.array(sparse, index_dtype), index_dtype)
    return BCOO((data, indices), shape=shape, indices_sorted=True, unique_indices=True)


def bcoo_eye(N: int, M: int, k: int, *, dtype: Any = None, index_dtype: Any = "int32", n_batch: int = 0,
             n_dense: int = 0) -> BCOO:
    """The `N x M` array with ones on the `k`-th diagonal (`BCOO._eye`), laid out as JAX's."""
    n_sparse = 2 - n_batch - n_dense
    if n_sparse < 0 or n_dense < 0 or n_batch < 0:
        raise ValueError(f"Invalid inputs: shape={(N, M)}, n_dense={n_dense}, n_batch={n_batch}")
    diag_size = min(N, M - k) if k > 0 else min(N + k, M)
    if diag_size <= 0:
        return bcoo_empty((N, M), dtype=dtype, index_dtype=index_dtype, n_batch=n_batch, n_dense=n_dense)
    if n_dense > 0 or n_batch > 1:  # every zero is stored: the dense route, as JAX
        return BCOO.fromdense(jnp.eye(N, M, k, dtype=dtype), n_batch=n_batch, n_dense=n_dense,
                              index_dtype=index_dtype)
    if n_batch == 0:
        idx = np.arange(diag_size)
        indices = np.stack([idx - min(k, 0), idx + max(k, 0)], axis=1)
        data = jnp.ones(diag_size, dtype)
    else:  # one entry per row: column row + k, padding where that column is outside [0, M)
        cols = np.arange(N) + k
        inside = (cols >= 0) & (cols < M)
        indices = np.where(inside, cols, M)[:, None, None]
        ones = jnp.ones(N, dtype)
        data = jnp.where(jnp.asarray(inside), ones, jnp.zeros_like(ones))[:, None]
    return BCOO((data, jnp.asarray(indices, index_dtype)), shape=(N, M), indices_sorted=True, unique_indices=True)


def empty(shape: Sequence[int], dtype: Any = None, index_dtype: Any = "int32", sparse_format: str = "bcoo",
          **kwds: Any) -> BCOO:
    """An empty sparse array (JAX's sparse `empty`).

    Args:
      shape: the array's shape.
      dtype: the data's dtype (default float).
      index_dtype: the indices' dtype.
      sparse_format: `"bcoo"`, the only one supported.
      **kwds: `n_batch`, `n_dense`, `nse`.

    Returns:
      A `BCOO` of zeros.

    Example:
      >>> z = sparse.empty((2, 3))
      >>> z.shape, z.nse, z.todense().sum().item()
      ((2, 3), 0, 0.0)
    """
    _check_format(sparse_format)
    return BCOO._empty(tuple(shape), dtype=dtype, index_dtype=index_dtype, **kwds)


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None, index_dtype: Any = "int32",
        sparse_format: str = "bcoo", **kwds: Any) -> BCOO:
    """A 2-D sparse identity with ones on the `k`-th diagonal (JAX's sparse `eye`).

    Args:
      N: the number of rows.
      M: the number of columns (default N).
      k: the diagonal: 0 the main one, above it positive.
      dtype: the data's dtype (default float).
      index_dtype: the indices' dtype.
      sparse_format: `"bcoo"`, the only one supported.
      **kwds: `n_batch`, `n_dense`.

    Returns:
      A `BCOO`.

    Example:
      >>> sparse.eye(3, k=1).todense().tolist()
      [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    """
    _check_format(sparse_format)
    if M is None:
        M = N
    N, M, k = (concrete_or_error(operator.index, v, f"{name} argument of sparse.eye")
               for name, v in (("N", N), ("M", M), ("k", k)))
    return BCOO._eye(N=N, M=M, k=k, dtype=dtype, index_dtype=index_dtype, **kwds)


def random_bcoo(key: jax.Array, shape: Sequence[int], *, dtype: Any = jnp.float_, indices_dtype: Any = None,
                nse: float | int = 0.2, n_batch: int = 0, n_dense: int = 0, unique_indices: bool = True,
                sorted_indices: bool = False, generator: Callable[..., jax.Array] = jax.random.uniform,
                **kwds: Any) -> BCOO:
    """A random BCOO array (JAX's sparse `random_bcoo`, same key use, so the same buffers).

    Args:
      key: a `jax.random` key.
      shape: the array's shape.
      dtype: the data's dtype.
      indices_dtype: the indices' dtype (default int32).
      nse: a count, or a fraction of the sparse size when `0 < nse < 1`.
      n_batch: leading batch dimensions.
      n_dense: trailing dense dimensions.
      unique_indices: draw distinct indices per batch.
      sorted_indices: sort the indices.
      generator: `generator(key, shape=, dtype=, **kwds)` draws the data.
      **kwds: passed to `generator`.

    Returns:
      A `BCOO`.

    Example:
      >>> import jax
      >>> a = sparse.random_bcoo(jax.random.key(0), (4, 5), dtype=jnp.float32, nse=0.25)
      >>> a.shape, a.nse
      ((4, 5), 5)
    """
    shape = tuple(operator.index(s) for s in shape)
    n_batch, n_dense = operator.index(n_batch), operator.index(n_dense)
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > len(shape):
        raise ValueError(f"Invalid n_batch={n_batch}, n_dense={n_dense} for shape={shape}")
    batch, sparse, dense = _split(shape, n_batch, n_dense)
    sparse_size = math.prod(sparse)
    if not 0 <= nse < sparse_size:
        raise ValueError(f"got nse={nse}, expected to be between 0 and {sparse_size}")
    if 0 < nse < 1:
        nse = int(math.ceil(nse * sparse_size))
    nse = operator.index(nse)
    indices_dtype = jax.dtypes.canonicalize_dtype(jnp.int_ if indices_dtype is None else indices_dtype)
    if sparse_size > jnp.iinfo(indices_dtype).max:
        raise ValueError(f"indices_dtype={indices_dtype} does not have enough range to generate sparse indices "
                         f"of size {sparse_size}.")

    def draw_indices(k: jax.Array) -> jax.Array:
        if not sparse:
            return jnp.zeros((nse, 0), indices_dtype)
        flat = jax.random.choice(k, sparse_size, shape=(nse,), replace=not unique_indices).astype(indices_dtype)
        return jnp.column_stack(jnp.unravel_index(flat, sparse))

    keys = jax.random.split(key, math.prod(batch) + 1)
    data = generator(keys[0], shape=(*batch, nse, *dense), dtype=dtype, **kwds)
    indices = jax.vmap(draw_indices)(keys[1:]).reshape((*batch, nse, len(sparse)))
    mat = BCOO((data, indices), shape=shape)
    return mat.sort_indices() if sorted_indices else mat


def from_scipy_sparse(mat: Any, *, index_dtype: Any = None, n_dense: int = 0, n_batch: int = 0) -> BCOO:
    """The BCOO array of a `scipy.sparse` array or matrix (any format; its entries as stored).

    What scipy knows of the order is kept: a CSR matrix with sorted indices gives
    `indices_sorted=True` (and `unique_indices=True` when it is canonical, without
    duplicates), as does a canonical COO matrix, so products take the sorted path.
    """
    if n_dense != 0 or n_batch != 0:
        raise NotImplementedError("BCOO.from_scipy_sparse with nonzero n_dense/n_batch")
    sorted_, unique = _row_major_order(mat)
    mat = mat.tocoo()
    indices = jnp.column_stack((mat.row, mat.col)).astype(index_dtype or jnp.int32)
    return BCOO((jnp.asarray(mat.data), indices), shape=mat.shape, indices_sorted=sorted_, unique_indices=unique)


def _row_major_order(mat: Any) -> tuple[bool, bool]:
    """Whether scipy knows the entries of `mat` (as `tocoo` lists them) to be in row-major order,
    and to hold no duplicates."""
    if mat.format == "csr":
        return bool(mat.has_sorted_indices), bool(mat.has_canonical_format)
    if mat.format == "coo":
        return (bool(mat.has_canonical_format),) * 2
    return False, False
