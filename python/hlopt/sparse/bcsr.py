"""`BCSR`: a compressed-sparse-row matrix with the API of JAX's experimental `BCSR`.

`BCSR((data, indices, indptr), shape=(M, K))` stores row `r`'s entries at positions
`indptr[r] <= e < indptr[r + 1]` of `data[nse]` (values) and `indices[nse]` (columns), as
scipy's CSR and JAX's BCSR do. Entries outside `[indptr[0], indptr[M])` and entries whose column
is outside `[0, K)` are padding (they add nothing); duplicates add up. A valid `indptr` is
non-decreasing with `0 <= indptr[0]` and `indptr[M] <= nse`; hlopt's CPU kernel refuses any other
(an error when the program runs, never a read out of bounds), the portable lowering gives an
unspecified result for it.

Only matrices are stored (`n_batch = n_dense = 0`); a layout with batch or dense dims is refused
with a `NotImplementedError` (a BCOO array has them). Conversions: `fromdense`, `todense`,
`from_bcoo`, `to_bcoo`, `from_scipy_sparse`; the buffers are the pytree's leaves, the shape and
flags its static part, so a BCSR array passes through `hlopt.jit` and `jax.jit` and
differentiates with respect to its `data`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlopt.passes.sparse.bcoo.ops.bcsr_dot_general import MATMUL, entry_rows
from hlopt.sparse import bcsr_spgemm, products, rules
from hlopt.sparse.bcoo import BCOO, SparseInfo, bcoo_fromdense


def _check_layout(data: Any, indices: Any, indptr: Any, shape: tuple[int, ...]) -> None:
    """A TypeError, ValueError or NotImplementedError if the buffers are no BCSR matrix of `shape`."""
    for name, x in (("indices", indices), ("indptr", indptr)):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(f"BCSR {name} must be integers, got {x.dtype}")
    if indices.dtype != indptr.dtype:
        raise TypeError(f"BCSR indices and indptr must have one dtype, got {indices.dtype} and {indptr.dtype}")
    if indices.ndim != 1 or data.ndim != 1 or len(shape) != 2:
        raise NotImplementedError(
            f"hlopt.sparse.BCSR stores matrices only (n_batch = n_dense = 0: data[nse], indices[nse], "
            f"indptr[M + 1] for shape (M, K)), got data{list(data.shape)}, indices{list(indices.shape)} and "
            f"shape {shape}: use hlopt.sparse.BCOO for batch or dense dimensions")
    if data.shape != indices.shape:
        raise ValueError(f"BCSR data and indices must have one shape [nse], got data{list(data.shape)} and "
                         f"indices{list(indices.shape)}")
    if indptr.shape != (shape[0] + 1,):
        raise ValueError(f"BCSR indptr must have shape [M + 1] = [{shape[0] + 1}] for shape {shape}, got "
                         f"indptr{list(indptr.shape)}")
    if any(s < 0 for s in shape):
        raise ValueError(f"BCSR shape must have non-negative sizes, got {shape}")


def node_problem(aux: dict[str, Any], children: Sequence[Any]) -> str | None:
    """What is wrong with a BCSR pytree node an executable file holds (None: nothing): its
    children's avals must be the buffers of a matrix of its shape (`_check_layout`)."""
    if len(children) != 3:
        return f"malformed BCSR node of {len(children)} buffers"
    try:
        _check_layout(*children, aux["shape"])
    except (TypeError, ValueError, NotImplementedError) as e:
        return str(e)
    return None


@jax.tree_util.register_pytree_node_class
class BCSR:
    """A compressed-sparse-row matrix: `data[nse]`, `indices[nse]` (columns), `indptr[M + 1]`.

    Same layout and meaning as JAX's experimental `BCSR` with `n_batch = n_dense = 0`. `A @ x`
    runs on hlopt's CSR kernel on CPU.

    Args:
      args: `(data, indices, indptr)`.
      shape: the matrix's shape `(M, N)`.
      indices_sorted: the columns of each row are sorted.
      unique_indices: no position is stored twice.

    Raises:
      ValueError: the buffers do not fit `shape`.

    Example:
      >>> m = sparse.BCSR((jnp.array([1.0, 2.0, 3.0]), jnp.array([0, 2, 1]), jnp.array([0, 2, 3])), shape=(2, 3))
      >>> m.todense().tolist()
      [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
      >>> (m @ jnp.ones(3)).tolist()
      [3.0, 3.0]
    """

    __array_priority__ = 2000

    def __init__(self, args: tuple[Any, Any, Any], *, shape: Sequence[int], indices_sorted: bool = False,
                 unique_indices: bool = False):
        self.data, self.indices, self.indptr = map(jnp.asarray, args)
        self.shape = tuple(int(s) for s in shape)
        self.indices_sorted = indices_sorted
        self.unique_indices = unique_indices
        _check_layout(self.data, self.indices, self.indptr, self.shape)

    # -- layout --------------------------------------------------------------
    nse = property(lambda self: self.indices.shape[-1], doc="The number of stored entries.")
    n_batch = property(lambda self: self.indices.ndim - 1, doc="Batch dims (always 0 here).")
    n_sparse = property(lambda self: 2, doc="Sparse dims: rows and columns.")
    n_dense = property(lambda self: self.data.ndim - self.indices.ndim, doc="Dense dims (always 0 here).")

    # The properties that read only data, shape and the flags, and the repr: BCOO's (the same as JAX's).
    dtype, ndim, size, _info, __repr__ = BCOO.dtype, BCOO.ndim, BCOO.size, BCOO._info, BCOO.__repr__

    @property
    def _bufs(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        return self.data, self.indices, self.indptr

    def tree_flatten(self):
        return self._bufs, self._info._asdict()

    @classmethod
    def tree_unflatten(cls, aux, children):
        if set(aux) != set(SparseInfo._fields):
            raise ValueError(f"BCSR.tree_unflatten: invalid aux_data={aux!r}")
        obj = object.__new__(cls)
        obj.data, obj.indices, obj.indptr = children
        obj.__dict__.update(aux)
        return obj

    def block_until_ready(self) -> "BCSR":
        for buf in self._bufs:
            buf.block_until_ready()
        return self

    # -- conversions ---------------------------------------------------------
    @classmethod
    def fromdense(cls, mat: Any, *, nse: int | None = None, index_dtype: Any = np.int32, n_dense: int = 0,
                  n_batch: int = 0) -> "BCSR":
        """The nonzeros of the dense matrix `mat` (row-major, the first `nse`; padding after them)."""
        return bcsr_fromdense(mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense, n_batch=n_batch)

    def todense(self) -> jax.Array:
        """The dense matrix (duplicates summed, padding ignored)."""
        return bcsr_todense(self)

    def to_bcoo(self) -> BCOO:
        """The same entries as a BCOO matrix: each entry's row from `indptr` (padding's row is out of range)."""
        rows = _rows(self.indices, self.indptr)
        return BCOO((self.data, jnp.stack([rows, self.indices], axis=1)), shape=self.shape,
                    indices_sorted=self.indices_sorted, unique_indices=self.unique_indices)

    @classmethod
    def from_bcoo(cls, arr: BCOO) -> "BCSR":
        """The BCSR matrix of a BCOO matrix (n_batch = n_dense = 0), its entries sorted by row first
        unless `arr.indices_sorted` says they are."""
        if arr.n_sparse != 2 or arr.n_batch or arr.n_dense:
            raise NotImplementedError(f"BCSR.from_bcoo needs a BCOO matrix with n_batch = n_dense = 0 and two "
                                      f"sparse dims, got n_batch={arr.n_batch}, n_sparse={arr.n_sparse}, "
                                      f"n_dense={arr.n_dense}")
        if not arr.indices_sorted:
            arr = arr.sort_indices()
        rows, cols = arr.indices[:, 0], arr.indices[:, 1]
        indptr = _indptr(rows, arr.shape[0])
        return cls((arr.data, cols, indptr), shape=arr.shape, indices_sorted=True,
                   unique_indices=arr.unique_indices)

    @classmethod
    def from_scipy_sparse(cls, mat: Any, *, index_dtype: Any = None, n_dense: int = 0,
                          n_batch: int = 0) -> "BCSR":
        """The BCSR matrix of a `scipy.sparse` matrix or array (its stored entries, in its order)."""
        if n_dense or n_batch:
            raise NotImplementedError("BCSR from_scipy_sparse with nonzero n_dense/n_batch.")
        if mat.ndim != 2:
            raise ValueError(f"BCSR from_scipy_sparse requires 2D array; {mat.ndim}D is given.")
        mat = mat.tocsr()
        index_dtype = index_dtype or np.int32
        return cls((jnp.asarray(mat.data), jnp.asarray(mat.indices.astype(index_dtype)),
                    jnp.asarray(mat.indptr.astype(index_dtype))), shape=mat.shape,
                   indices_sorted=bool(mat.has_sorted_indices))

    @classmethod
    def _empty(cls, shape: Sequence[int], *, dtype: Any = None, index_dtype: Any = "int32", n_dense: int = 0,
               n_batch: int = 0, nse: int = 0) -> "BCSR":
        """An all-zero BCSR matrix whose `nse` entries are all padding (column K, after indptr[M] = 0)."""
        shape = tuple(shape)
        if n_dense < 0 or n_batch < 0 or nse < 0:
            raise ValueError(f"Invalid inputs: shape={shape}, n_dense={n_dense}, n_batch={n_batch}, nse={nse}")
        if len(shape) - n_dense - n_batch != 2:
            raise ValueError("BCSR sparse.empty: must have 2 sparse dimensions.")
        if n_dense or n_batch:
            raise NotImplementedError("hlopt.sparse.BCSR stores matrices only (n_batch = n_dense = 0)")
        return cls((jnp.zeros((nse,), dtype), jnp.full((nse,), shape[1], index_dtype),
                    jnp.zeros((shape[0] + 1,), index_dtype)), shape=shape)

    # -- array methods -------------------------------------------------------
    def transpose(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Transpose is not implemented (as JAX's BCSR): use .to_bcoo().T")


def _rows(indices: jax.Array, indptr: jax.Array) -> jax.Array:
    """The row of each entry (JAX's `_csr_to_coo`)."""
    return entry_rows(rules.TERMS, indices, indptr)


def _indptr(rows: jax.Array, m: int) -> jax.Array:
    """Row pointers of entries sorted by row: row r starts after the entries of negative rows and of
    rows below r (so entries of negative rows fall before indptr[0], those of rows >= m after indptr[m])."""
    below = jnp.sum(rows < 0, dtype=rows.dtype)
    counts = jnp.zeros((m,), rows.dtype).at[jnp.where(rows < 0, m, rows)].add(1, mode="drop")
    return jnp.concatenate([below[None], below + jnp.cumsum(counts, dtype=rows.dtype)])


def bcsr_fromdense(mat: Any, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype: Any = jnp.int32) -> BCSR:
    """The nonzeros of the dense matrix `mat` as a BCSR matrix.

    Args:
      mat: a dense matrix.
      nse: the number of stored entries; None: the count of nonzeros, which needs a concrete
        `mat` (outside `jit`).
      n_batch: 0 (BCSR here is a matrix).
      n_dense: 0.
      index_dtype: the dtype of `indices` and `indptr`.

    Returns:
      A `BCSR`.

    Example:
      >>> m = sparse.bcsr_fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> m.data.tolist(), m.indices.tolist(), m.indptr.tolist()
      ([1.0, 2.0, 3.0], [0, 2, 1], [0, 2, 3])
    """
    mat = jnp.asarray(mat)
    if n_batch or n_dense or mat.ndim != 2:
        raise NotImplementedError(f"hlopt.sparse.BCSR stores matrices only (n_batch = n_dense = 0), got a "
                                  f"{mat.ndim}-d array with n_batch={n_batch}, n_dense={n_dense}")
    return BCSR.from_bcoo(bcoo_fromdense(mat, nse=nse, index_dtype=index_dtype))


def bcsr_todense(mat: BCSR) -> jax.Array:
    """The dense matrix `mat` represents (duplicates summed, padding ignored).

    Args:
      mat: a `BCSR`; its batch dimensions, if it has any, stay the leading dimensions of
        the result.

    Returns:
      A dense array of shape `mat.shape`, the values of duplicate entries added, those of
      padding entries left out.

    Example:
      >>> m = sparse.bcsr_fromdense(jnp.eye(2))
      >>> sparse.bcsr_todense(m).tolist()
      [[1.0, 0.0], [0.0, 1.0]]
    """
    return mat.to_bcoo().todense()


# ---------------------------------------------------------------------------
# Products: `A @ x` for a dense x[K] or x[K, N] is the `bcsr_dot_general` annotation (its record in
# hlopt.passes.sparse.bcoo.ops.bcsr_dot_general); every other contraction is the BCOO product of `to_bcoo()`.

_MATMUL = MATMUL
bcsr_dot_general_p = rules.primitive("bcsr_dot_general")


def _bind(data: Any, indices: Any, indptr: Any, x: Any, *, shape: tuple[int, ...],
          preferred_element_type: Any = None) -> jax.Array:
    return bcsr_dot_general_p.bind(data, indices, indptr, x, shape=shape, n_batch=0, n_dense=0,
                                   preferred_element_type=preferred_element_type)


def bcsr_dot_general(lhs: BCSR | Any, rhs: Any, *, dimension_numbers: Any, precision: Any = None,
                     preferred_element_type: Any = None, out_sharding: Any = None) -> Any:
    """`lax.dot_general` where `lhs` (or `rhs`) is a BCSR matrix: a dense result.

    `A @ x` (A's columns contracted with x's first dim, x of 1 or 2 dims) is one annotation (on
    CPU hlopt's CSR kernel); any other contraction is the BCOO product of `to_bcoo()`.

    Args:
      lhs: a `BCSR` or a dense array.
      rhs: a dense array or a `BCSR`.
      dimension_numbers: as in `lax.dot_general`.
      precision: unused, as in JAX.
      preferred_element_type: the result's dtype.
      out_sharding: unused, as in JAX.

    Returns:
      A dense array.

    Example:
      >>> m = sparse.bcsr_fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcsr_dot_general(m, jnp.ones(3), dimension_numbers=(((1,), (0,)), ((), ()))).tolist()
      [3.0, 3.0]
    """
    del precision, out_sharding  # as JAX's: unused
    dims = products._dims_key(dimension_numbers)
    if isinstance(lhs, BCSR) and isinstance(rhs, BCSR) and dims == _MATMUL:
        return bcsr_spgemm.bcsr_spdot_general(lhs, rhs, preferred_element_type=preferred_element_type)
    if isinstance(lhs, BCSR) and not isinstance(rhs, (BCSR, BCOO)):
        rhs = jnp.asarray(rhs)
        if dims == _MATMUL and rhs.ndim in (1, 2):
            return _bind(lhs.data, lhs.indices, lhs.indptr, rhs, shape=lhs.shape,
                         preferred_element_type=preferred_element_type)
    to_bcoo = (lambda a: a.to_bcoo() if isinstance(a, BCSR) else a)  # noqa: E731
    lhs, rhs = to_bcoo(lhs), to_bcoo(rhs)
    if not isinstance(lhs, BCOO) and not isinstance(rhs, BCOO):
        return jax.lax.dot_general(lhs, rhs, dims, preferred_element_type=preferred_element_type)
    return products.bcoo_dot_general(lhs, rhs, dimension_numbers=dims, preferred_element_type=preferred_element_type)


def _matmul(a: Any, b: Any) -> Any:
    """`a @ b` where a or b is a BCSR matrix: `bcsr_dot_general` for `A @ x` with x of 1 or 2 dims,
    else the BCOO `@` of `to_bcoo()` (jnp.matmul's rules)."""
    if isinstance(a, BCSR) and (isinstance(b, BCSR) or not isinstance(b, BCOO) and np.ndim(b) in (1, 2)):
        return bcsr_dot_general(a, b, dimension_numbers=_MATMUL)
    to_bcoo = (lambda x: x.to_bcoo() if isinstance(x, BCSR) else x)  # noqa: E731
    return products.matmul(to_bcoo(a), to_bcoo(b))


BCSR.__matmul__ = lambda self, other: _matmul(self, other)
BCSR.__rmatmul__ = lambda self, other: _matmul(other, self)
