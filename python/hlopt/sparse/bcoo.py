"""`BCOO` and the `bcoo_*` functions: the API of JAX's experimental sparse module, lowered by lower-bcoo."""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.interpreters import batching

from hlopt.passes import bcoo_shapes as shapes
from hlopt.sparse import ops


class SparseEfficiencyError(ValueError):
    """An operation would store far more elements than its input."""


class SparseEfficiencyWarning(UserWarning):
    """An operation stores far more elements than its input."""


_TRACED_NSE_ERROR = (
    "The error arose for the nse argument of bcoo_fromdense. In order for BCOO.fromdense() "
    "to be used in traced/compiled code, you must pass a concrete value to the nse "
    "(number of stored elements) argument."
)


@jax.tree_util.register_pytree_node_class
class BCOO:
    """A batched-COO sparse array: `data[*batch, nse, *dense]`, `indices[*batch, nse, n_sparse]`.

    Same layout and meaning as the BCOO of JAX's experimental sparse module; an index outside
    `[0, size)` in any sparse dimension marks a padding entry.
    """

    __array_priority__ = 2000

    def __init__(self, args: tuple[Any, Any], *, shape: Sequence[int], indices_sorted: bool = False,
                 unique_indices: bool = False):
        self.data, self.indices = map(jnp.asarray, args)
        self.shape = tuple(int(s) for s in shape)
        self.indices_sorted = indices_sorted
        self.unique_indices = unique_indices
        if not jnp.issubdtype(self.indices.dtype, jnp.integer):
            raise TypeError(f"BCOO indices must be integers, got {self.indices.dtype}")
        shapes.layout(self.shape, self.data.shape, self.indices.shape)

    # -- layout --------------------------------------------------------------
    @property
    def nse(self) -> int:
        return self.indices.shape[-2]

    @property
    def n_batch(self) -> int:
        return self.indices.ndim - 2

    @property
    def n_sparse(self) -> int:
        return self.indices.shape[-1]

    @property
    def n_dense(self) -> int:
        return self.data.ndim - 1 - self.n_batch

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def _params(self) -> dict[str, Any]:
        return dict(shape=self.shape, indices_sorted=self.indices_sorted, unique_indices=self.unique_indices)

    def __repr__(self) -> str:
        extra = f", nse={self.nse}"
        if self.n_batch:
            extra += f", n_batch={self.n_batch}"
        if self.n_dense:
            extra += f", n_dense={self.n_dense}"
        return f"BCOO({self.dtype}{list(self.shape)}{extra})"

    def tree_flatten(self):
        return (self.data, self.indices), dict(
            shape=self.shape, indices_sorted=self.indices_sorted, unique_indices=self.unique_indices
        )

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.data, obj.indices = children
        obj.__dict__.update(aux)
        return obj

    # -- conversions ---------------------------------------------------------
    @classmethod
    def fromdense(cls, mat: Any, *, nse: int | None = None, index_dtype: Any = jnp.int32, n_dense: int = 0,
                  n_batch: int = 0) -> "BCOO":
        """A BCOO array holding the nonzeros of the dense `mat`."""
        return bcoo_fromdense(mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype)

    def todense(self) -> jax.Array:
        return bcoo_todense(self)

    def update_layout(self, *, n_batch: int | None = None, n_dense: int | None = None,
                      on_inefficient: str | None = "error") -> "BCOO":
        return bcoo_update_layout(self, n_batch=n_batch, n_dense=n_dense, on_inefficient=on_inefficient)

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> "BCOO":
        """Sorted indices with duplicates summed (and explicit zeros dropped when `remove_zeros`)."""
        mat = _eliminate_zeros(self) if remove_zeros else self
        return bcoo_sum_duplicates(mat, nse=nse)

    def sort_indices(self) -> "BCOO":
        return bcoo_sort_indices(self)

    # -- array methods -------------------------------------------------------
    def transpose(self, axes: Sequence[int] | None = None) -> "BCOO":
        perm = tuple(range(self.ndim)[::-1]) if axes is None else tuple(axes)
        out = bcoo_transpose(self, permutation=perm)
        sparse_perm = perm[self.n_batch : self.n_batch + self.n_sparse]
        out.indices_sorted = self.indices_sorted and sparse_perm == tuple(sorted(sparse_perm))
        return out

    @property
    def T(self) -> "BCOO":
        return self.transpose()

    def reshape(self, *new_sizes: Any, dimensions: Sequence[int] | None = None) -> "BCOO":
        sizes = new_sizes[0] if len(new_sizes) == 1 and not isinstance(new_sizes[0], int) else new_sizes
        sizes = [operator.index(s) for s in sizes]
        if sizes.count(-1) == 1:
            known = math.prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = self.size // known if known else 0
        return bcoo_reshape(self, new_sizes=sizes, dimensions=dimensions)

    def sum(self, axis: int | Sequence[int] | None = None) -> "BCOO":
        axes = range(self.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
        return bcoo_reduce_sum(self, axes=[a % self.ndim for a in axes])

    def __mul__(self, other: Any) -> "BCOO":
        if isinstance(other, BCOO):
            return bcoo_multiply_sparse(self, other)
        other = jnp.asarray(other)
        data = bcoo_multiply_dense(self, other)
        return BCOO((data, self.indices), shape=self.shape, indices_sorted=self.indices_sorted,
                    unique_indices=self.unique_indices)

    __rmul__ = __mul__

    def __neg__(self) -> "BCOO":
        return BCOO((-self.data, self.indices), **self._params)

    def __getitem__(self, index: Any) -> "BCOO":
        """Indexing by integers and slices with positive steps (an integer drops its dimension)."""
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            at = index.index(Ellipsis)
            fill = (slice(None),) * (self.ndim - len(index) + 1)
            index = index[:at] + fill + index[at + 1 :]
        if len(index) > self.ndim:
            raise IndexError(f"too many indices for a BCOO array of rank {self.ndim}")
        index = index + (slice(None),) * (self.ndim - len(index))
        start, limit, strides, squeeze = [], [], [], []
        for d, (i, size) in enumerate(zip(index, self.shape)):
            if isinstance(i, slice):
                s, e, st = i.indices(size)
                if st <= 0:
                    raise NotImplementedError("BCOO indexing with a non-positive step")
                start.append(s)
                limit.append(max(s, e))
                strides.append(st)
            elif isinstance(i, (int, np.integer)):
                j = int(i) + size if i < 0 else int(i)
                if not 0 <= j < size:
                    raise IndexError(f"index {i} is out of bounds for axis {d} with size {size}")
                start.append(j)
                limit.append(j + 1)
                strides.append(1)
                squeeze.append(d)
            else:
                raise NotImplementedError(f"BCOO indexing with {type(i).__name__}; use integers and slices")
        out = bcoo_slice(self, start_indices=start, limit_indices=limit, strides=strides)
        return bcoo_squeeze(out, dimensions=squeeze) if squeeze else out


def _to_elt(cont: Any, _: Any, mat: BCOO, axis: int | None) -> BCOO:
    """vmap of a function taking a `BCOO`: the mapped axis must be one of its batch dims."""
    if axis is None:
        return mat
    if axis >= mat.n_batch:
        raise ValueError(
            f"vmap cannot map axis {axis} of a BCOO with n_batch={mat.n_batch}: only batch dims can be "
            f"mapped. Make the axis a batch dim first (bcoo_update_layout(mat, n_batch={axis + 1})) or map "
            "mat.data and mat.indices and build the BCOO inside the function."
        )
    return BCOO((cont(mat.data, axis), cont(mat.indices, axis)), shape=mat.shape[:axis] + mat.shape[axis + 1 :],
                indices_sorted=mat.indices_sorted, unique_indices=mat.unique_indices)


def _from_elt(cont: Any, axis_size: int, mat: BCOO, axis: int | None) -> BCOO:
    """A `BCOO` returned from a vmapped function gets the mapped axis as a batch dim."""
    if axis is None:
        return mat
    if axis > mat.n_batch:
        raise ValueError(
            f"vmap cannot put out_axes={axis} into a BCOO with n_batch={mat.n_batch}: batch dims are the "
            f"leading dims, so out_axes must be at most {mat.n_batch}."
        )
    return BCOO((cont(axis_size, mat.data, axis), cont(axis_size, mat.indices, axis)),
                shape=mat.shape[:axis] + (axis_size,) + mat.shape[axis:],
                indices_sorted=mat.indices_sorted, unique_indices=mat.unique_indices)


batching.register_vmappable(BCOO, int, int, _to_elt, _from_elt, None)


def _eliminate_zeros(mat: BCOO) -> BCOO:
    """Entries whose data is all zero become padding."""
    nb = mat.n_batch
    zero = jnp.all(mat.data == 0, axis=tuple(range(nb + 1, mat.data.ndim)))
    shared = tuple(i for i in range(nb) if mat.indices.shape[i] == 1 and zero.shape[i] != 1)
    if shared:
        zero = jnp.all(zero, axis=shared, keepdims=True)
    fill = jnp.array(mat.shape[nb : nb + mat.n_sparse], mat.indices.dtype)
    indices = jnp.where(zero[..., None], fill, mat.indices)
    return BCOO((mat.data, indices), shape=mat.shape)


def _result(bufs: Sequence[jax.Array], shape: Sequence[int], sorted_: bool = False, unique: bool = False) -> BCOO:
    return BCOO(tuple(bufs), shape=shape, indices_sorted=sorted_, unique_indices=unique)


def bcoo_todense(mat: BCOO) -> jax.Array:
    """The dense array `mat` represents (duplicates summed, padding ignored)."""
    return ops.todense_p.bind(mat.data, mat.indices, **mat._params)


def bcoo_fromdense(mat: Any, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype: Any = jnp.int32) -> BCOO:
    """The nonzeros of `mat` (first `nse` per batch, in row-major order) as a BCOO array."""
    mat = jnp.asarray(mat)
    if nse is None:
        mask = mat != 0
        if n_dense:
            mask = mask.any(tuple(range(mat.ndim - n_dense, mat.ndim)))
        nse = mask.sum(tuple(range(n_batch, mask.ndim))).max(initial=0)
    nse = jex_core.concrete_or_error(operator.index, nse, _TRACED_NSE_ERROR)
    bufs = ops.fromdense_p.bind(mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=np.dtype(index_dtype))
    return _result(bufs, mat.shape, True, True)


def bcoo_multiply_dense(sp_mat: BCOO, v: Any) -> jax.Array:
    """The data of `sp_mat * v` for a dense `v` that broadcasts to `sp_mat.shape`."""
    v = jnp.asarray(v)
    dtype = jnp.result_type(sp_mat.dtype, v.dtype)
    return ops.multiply_dense_p.bind(sp_mat.data.astype(dtype), sp_mat.indices, v.astype(dtype), **sp_mat._params)


def bcoo_multiply_sparse(lhs: BCOO, rhs: BCOO) -> BCOO:
    """Elementwise product of two BCOO arrays (their shapes broadcast).

    The output stores one entry per entry of the operand whose sparse shape is
    the output's (the smaller one when both are), not `lhs.nse * rhs.nse`.
    """
    dtype = jnp.result_type(lhs.dtype, rhs.dtype)
    bufs = ops.multiply_sparse(lhs.data.astype(dtype), lhs.indices, rhs.data.astype(dtype),
                               rhs.indices.astype(lhs.indices.dtype), lhs.shape, rhs.shape)
    return _result(bufs, shapes.broadcast_shapes(lhs.shape, rhs.shape))


def bcoo_update_layout(mat: BCOO, *, n_batch: int | None = None, n_dense: int | None = None,
                       on_inefficient: str | None = "error") -> BCOO:
    """The same array with `n_batch` batch and `n_dense` dense dimensions."""
    n_batch = mat.n_batch if n_batch is None else operator.index(n_batch)
    n_dense = mat.n_dense if n_dense is None else operator.index(n_dense)
    if (n_batch, n_dense) == (mat.n_batch, mat.n_dense):
        return mat
    if on_inefficient not in ("error", "warn", None):
        raise ValueError(f"on_inefficient={on_inefficient!r}; expected one of ['error', 'warn', None].")
    if n_batch < 0:
        raise ValueError(f"n_batch must be non-negative; got {n_batch}")
    if n_dense < 0:
        raise ValueError(f"n_dense must be non-negative; got {n_dense}")
    if n_batch + n_dense > mat.ndim:
        raise ValueError(f"sum of n_batch={n_batch} and n_dense={n_dense} cannot be larger than mat.ndim={mat.ndim}.")

    def inefficient(msg: str) -> None:
        if on_inefficient == "error":
            raise SparseEfficiencyError(
                msg + " To disable this error, set the on_inefficient argument of bcoo_update_layout to 'warn' or None."
            )
        if on_inefficient == "warn":
            warnings.warn(msg + " To disable this warning, set the on_inefficient argument of "
                          "bcoo_update_layout to None.", SparseEfficiencyWarning, stacklevel=3)

    if n_dense > mat.n_dense and any(d > 1 for d in mat.shape[-n_dense : mat.ndim - mat.n_dense]):
        inefficient(f"For matrix of shape {mat.shape}, increasing n_dense from {mat.n_dense} to {n_dense} "
                    "results in inefficient storage.")
    if n_batch > mat.n_batch and any(d > 1 for d in mat.shape[mat.n_batch : n_batch]):
        inefficient(f"For matrix of shape {mat.shape}, increasing n_batch from {mat.n_batch} to {n_batch} "
                    "results in inefficient storage.")
    bufs = ops.update_layout_p.bind(mat.data, mat.indices, n_batch=n_batch, n_dense=n_dense, **mat._params)
    return _result(bufs, mat.shape)


def bcoo_reduce_sum(mat: BCOO, *, axes: Sequence[int]) -> BCOO:
    """Sum over `axes` (batch, sparse or dense)."""
    axes = tuple(sorted({operator.index(a) for a in axes}))
    if not all(0 <= a < mat.ndim for a in axes):
        raise ValueError(f"bcoo_reduce_sum: axes {axes} out of range for an array of rank {mat.ndim}")
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    bufs = ops.reduce_sum_p.bind(mat.data, mat.indices, axes=axes, **mat._params)
    return _result(bufs, shapes.reduce_sum(lay, axes).shape)


def bcoo_reshape(mat: BCOO, *, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None,
                 sharding: Any = None) -> BCOO:
    """`lax.reshape` of a BCOO array; batch, sparse and dense dims may not mix."""
    if sharding is not None:
        raise NotImplementedError("bcoo_reshape: sharding is not supported")
    new_sizes = tuple(operator.index(s) for s in new_sizes)
    dims = None if dimensions is None else tuple(operator.index(d) for d in dimensions)
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    shapes.reshape(lay, new_sizes, dims)
    bufs = ops.reshape_p.bind(mat.data, mat.indices, new_sizes=new_sizes, dimensions=dims, **mat._params)
    return _result(bufs, new_sizes)


def bcoo_slice(mat: BCOO, *, start_indices: Sequence[int], limit_indices: Sequence[int],
               strides: Sequence[int] | None = None) -> BCOO:
    """`lax.slice` of a BCOO array; nse shrinks (duplicates summed) when the slice holds fewer elements."""
    if not isinstance(mat, BCOO):
        raise TypeError(f"bcoo_slice: input should be BCOO array, got type(mat)={type(mat)}")
    start = tuple(operator.index(i) for i in start_indices)
    limit = tuple(operator.index(i) for i in limit_indices)
    strides = (1,) * mat.ndim if strides is None else tuple(operator.index(i) for i in strides)
    if not len(start) == len(limit) == len(strides) == mat.ndim:
        raise ValueError(f"bcoo_slice: indices must have size mat.ndim={mat.ndim}")
    if any(s <= 0 for s in strides):
        raise ValueError(f"strides must be a sequence of positive integers; got {list(strides)}")
    if not all(0 <= s <= e <= n for s, e, n in zip(start, limit, mat.shape)):
        raise ValueError(f"bcoo_slice: invalid indices. Got start_indices={list(start)}, "
                         f"limit_indices={list(limit)} and shape={mat.shape}")
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    shape, _, _ = shapes.slice_shapes(lay, start, limit, strides)
    bufs = ops.slice_p.bind(mat.data, mat.indices, start_indices=start, limit_indices=limit, strides=strides,
                            **mat._params)
    out = _result(bufs, shape)
    new_nse = math.prod(shape[mat.n_batch : mat.n_batch + mat.n_sparse])
    if mat.n_sparse and mat.nse > new_nse:
        out = bcoo_sum_duplicates(out, nse=new_nse)
    return out


def bcoo_sort_indices(mat: BCOO) -> BCOO:
    """Entries reordered so indices are lexicographically sorted (padding last); one stable sort."""
    bufs = ops.sort_indices_p.bind(mat.data, mat.indices, **mat._params)
    return _result(bufs, mat.shape, True, mat.unique_indices)


def bcoo_squeeze(arr: BCOO, *, dimensions: Sequence[int]) -> BCOO:
    """`lax.squeeze` of a BCOO array."""
    dims = tuple(sorted({operator.index(d) % arr.ndim for d in dimensions}))
    lay = shapes.layout(arr.shape, arr.data.shape, arr.indices.shape)
    shape, _, _ = shapes.squeeze(lay, dims)
    bufs = ops.squeeze_p.bind(arr.data, arr.indices, dimensions=dims, **arr._params)
    return _result(bufs, shape, arr.indices_sorted, arr.unique_indices)


def bcoo_sum_duplicates(mat: BCOO, nse: int | None = None) -> BCOO:
    """Sorted unique indices with the data of duplicates summed; `nse` entries per batch.

    With `nse=None` the smallest sufficient nse is computed from the indices,
    which needs concrete (not traced) arrays.
    """
    if nse is None:
        if ops.is_traced(mat.data, mat.indices):
            raise ValueError(
                "bcoo_sum_duplicates: nse must be specified when using the function within "
                "jit, vmap, and other transformations requiring abstract evaluation."
            )
        nse = ops.unique_count(np.asarray(mat.indices), mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse])
    nse = jex_core.concrete_or_error(operator.index, nse, "nse argument of bcoo_sum_duplicates.")
    bufs = ops.sum_duplicates_p.bind(mat.data, mat.indices, nse=nse, **mat._params)
    return _result(bufs, mat.shape, True, True)


def bcoo_transpose(mat: BCOO, *, permutation: Sequence[int]) -> BCOO:
    """Permute dimensions; batch, sparse and dense dims each permute among themselves."""
    perm = tuple(operator.index(p) for p in permutation)
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    shape, _, _ = shapes.transpose(lay, perm)
    if perm == tuple(range(mat.ndim)):
        return mat
    bufs = ops.transpose_p.bind(mat.data, mat.indices, permutation=perm, **mat._params)
    return _result(bufs, shape, False, mat.unique_indices)
