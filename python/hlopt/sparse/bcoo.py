"""`BCOO` and the `bcoo_*` functions: the API of JAX's experimental sparse module, lowered by lower-bcoo."""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from hlopt.compiler.jax_compat import Primitive, concrete_or_error
from hlopt.compiler.program import aval_str
from hlopt.passes.sparse import shapes
from hlopt.sparse import indexing, ops, rules


class SparseEfficiencyError(ValueError):
    """An operation would store far more elements than its input.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> try:
      ...     sparse.bcoo_update_layout(a, n_batch=1)      # a batch of 2 rows of nse 3 each
      ... except sparse.SparseEfficiencyError:
      ...     print("refused")
      refused
    """

    __module__ = "hlopt.sparse"  # raised and printed as users import it


class SparseEfficiencyWarning(UserWarning):
    """An operation stores far more elements than its input (with `on_inefficient="warn"`).

    Example:
      >>> import warnings
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     warnings.simplefilter("always")
      ...     b = sparse.bcoo_update_layout(a, n_batch=1, on_inefficient="warn")
      >>> caught[0].category.__name__, b.todense().tolist() == a.todense().tolist()
      ('SparseEfficiencyWarning', True)
    """

    __module__ = "hlopt.sparse"  # raised and printed as users import it


_TRACED_NSE_ERROR = (
    "The error arose for the nse argument of bcoo_fromdense. In order for BCOO.fromdense() "
    "to be used in traced/compiled code, you must pass a concrete value to the nse "
    "(number of stored elements) argument."
)


class SparseInfo(NamedTuple):
    """The static part of a BCOO (its pytree aux data), as JAX's `BCOO._info`."""

    shape: tuple[int, ...]
    indices_sorted: bool = False
    unique_indices: bool = False


def node_problem(aux: dict[str, Any], children: Sequence[Any]) -> str | None:
    """What is wrong with a BCOO pytree node an executable file holds (None: nothing): its aux
    data and its children's avals must be a BCOO's, by the one layout rule (`shapes.layout`,
    as the constructor checks) with integer indices that address every sparse dim. The
    runtime calls it for each such node (registered in `hlopt.sparse` and `hlopt.saved`)."""
    shape = aux.get("shape")
    if len(children) != 2 or not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        return f"malformed BCOO shape {repr(shape)[:60]}"
    data, indices = children
    what = f"BCOO of shape {shape} with data {aval_str(data)} and indices {aval_str(indices)}"
    if not np.issubdtype(indices.dtype, np.integer):
        return f"{what}: indices must be integers"
    try:
        lay = shapes.layout(shape, data.shape, indices.shape)
    except ValueError as e:
        return f"{what}: {e}"
    if any(s - 1 > np.iinfo(indices.dtype).max for s in lay.sparse_shape):
        return f"{what}: {indices.dtype} indices cannot address every sparse dim"
    return None


@jax.tree_util.register_pytree_node_class
class BCOO:
    """A batched-COO sparse array: `data[*batch, nse, *dense]`, `indices[*batch, nse, n_sparse]`.

    Same layout and meaning as the BCOO of JAX's experimental sparse module; an index outside
    `[0, size)` in any sparse dimension marks a padding entry. Build one with `fromdense`,
    `from_scipy_sparse` or from its buffers; it is a pytree, so it passes through `hlopt.jit`,
    `jax.jit`, `jax.vmap` and `jax.grad`, and `a @ x`, `a * x`, `a.T`, `a.sum()` work on it.

    Args:
      args: `(data, indices)`.
      shape: the shape of the array it represents.
      indices_sorted: the indices are in row-major order (products take a faster path).
      unique_indices: no index is stored twice.

    Raises:
      TypeError: the indices are not integers.
      ValueError: the buffers' shapes do not fit `shape`.

    Example:
      >>> a = sparse.BCOO((jnp.array([1.0, 2.0]), jnp.array([[0, 1], [1, 0]])), shape=(2, 2))
      >>> a
      BCOO(float32[2, 2], nse=2)
      >>> (a @ jnp.array([1.0, 10.0])).tolist()
      [10.0, 2.0]
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
        return self._info._asdict()

    @property
    def _info(self) -> SparseInfo:
        return SparseInfo(self.shape, self.indices_sorted, self.unique_indices)

    def __repr__(self) -> str:
        name = type(self).__name__
        try:
            extra = f", nse={self.nse}"
            if self.n_batch:
                extra += f", n_batch={self.n_batch}"
            if self.n_dense:
                extra += f", n_dense={self.n_dense}"
            text = f"{name}({self.dtype}{list(self.shape)}{extra})"
        except Exception:  # noqa: BLE001 - buffers replaced by something that is no BCOO layout
            text = f"{name}(<invalid>)"
        if isinstance(self.data, jax.core.Tracer):
            text = f"{type(self.data).__name__}[{text}]"
        return text

    def tree_flatten(self):
        return (self.data, self.indices), self._params

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

    @classmethod
    def from_scipy_sparse(cls, mat: Any, *, index_dtype: Any = None, n_dense: int = 0, n_batch: int = 0) -> "BCOO":
        """The BCOO array of a `scipy.sparse` array (its stored entries, as JAX's)."""
        from hlopt.sparse import construct  # construct builds on this module

        return construct.from_scipy_sparse(mat, index_dtype=index_dtype, n_dense=n_dense, n_batch=n_batch)

    @classmethod
    def _empty(cls, shape: Sequence[int], **kwds: Any) -> "BCOO":
        """An all-padding BCOO array; the public form is `sparse.empty`."""
        from hlopt.sparse import construct

        return construct.bcoo_empty(shape, **kwds)

    @classmethod
    def _eye(cls, N: int, M: int, k: int, **kwds: Any) -> "BCOO":
        """A sparse identity; the public form is `sparse.eye`."""
        from hlopt.sparse import construct

        return construct.bcoo_eye(N, M, k, **kwds)

    def todense(self) -> jax.Array:
        """The dense array (`bcoo_todense`)."""
        return bcoo_todense(self)

    def update_layout(self, *, n_batch: int | None = None, n_dense: int | None = None,
                      on_inefficient: str | None = "error") -> "BCOO":
        """The same array with other numbers of batch and dense dimensions (`bcoo_update_layout`)."""
        return bcoo_update_layout(self, n_batch=n_batch, n_dense=n_dense, on_inefficient=on_inefficient)

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> "BCOO":
        """Sorted indices with duplicates summed (and explicit zeros dropped when `remove_zeros`)."""
        mat = _eliminate_zeros(self) if remove_zeros else self
        return bcoo_sum_duplicates(mat, nse=nse)

    def sort_indices(self) -> "BCOO":
        """The entries in row-major order of their indices, for the faster row-sorted products (`bcoo_sort_indices`)."""
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

    def sum(self, axis: int | Sequence[int] | None = None, dtype: Any = None, keepdims: bool = False) -> Any:
        """`jnp.sum` of the array: a BCOO, or a dense scalar when every axis is summed (as JAX's BCOO)."""
        out = jax.eval_shape(lambda x: jnp.sum(x, axis=axis, dtype=dtype, keepdims=keepdims),
                             jax.ShapeDtypeStruct(self.shape, self.dtype))
        axes = tuple(range(self.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        summed = bcoo_reduce_sum(self.astype(out.dtype), axes=[a % self.ndim for a in axes])
        if not summed.shape and not out.shape:
            return summed.data.sum()
        return _reshape(summed, out.shape) if summed.shape != out.shape else summed

    def astype(self, dtype: Any) -> "BCOO":
        """The array with data of `dtype` (the indices are unchanged)."""
        return BCOO((self.data.astype(dtype), self.indices), **self._params)

    def block_until_ready(self) -> "BCOO":
        self.data.block_until_ready()
        self.indices.block_until_ready()
        return self

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __mul__(self, other: Any) -> "BCOO":
        if isinstance(other, BCOO):
            return bcoo_multiply_sparse(self, other)
        other = jnp.asarray(other)
        data = bcoo_multiply_dense(self, other)
        return BCOO((data, self.indices), shape=self.shape, indices_sorted=self.indices_sorted,
                    unique_indices=self.unique_indices)

    __rmul__ = __mul__

    def __matmul__(self, other: Any) -> Any:
        from hlopt.sparse import products  # products builds on this module

        return products.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        from hlopt.sparse import products

        return products.matmul(other, self)

    def __truediv__(self, other: Any) -> "BCOO":
        if isinstance(other, BCOO):
            raise NotImplementedError(_DENSE_RESULT.format("Division by a sparse array"))
        dtype = jax.eval_shape(jnp.true_divide, jax.ShapeDtypeStruct((), self.dtype), other).dtype
        return self.astype(dtype) * (1.0 / jnp.asarray(other, dtype))

    def __rtruediv__(self, other: Any) -> Any:
        raise NotImplementedError(_DENSE_RESULT.format("Division by a sparse array"))

    def __add__(self, other: Any) -> Any:
        """BCOO + BCOO of one shape stores both entry lists; BCOO + dense of the output shape is dense."""
        if not isinstance(other, BCOO):
            other = jnp.asarray(other)
            out_shape = jnp.broadcast_shapes(self.shape, other.shape)
            if other.shape != out_shape:
                raise NotImplementedError(
                    "Addition between a sparse array X and a dense array Y is not implemented when the output "
                    "shape is larger than Y.shape. This is to prevent silent densification of a large sparse "
                    "array. If this is your intent, you can explicitly cast the sparse array to a dense matrix.")
            return self.todense() + other
        try:
            jnp.broadcast_shapes(self.shape, other.shape)
        except ValueError:
            raise TypeError(f"add got incompatible shapes for broadcasting: {self.shape}, {other.shape}.") from None
        if self.shape != other.shape:
            raise NotImplementedError("Addition between sparse matrices of different shapes.")
        if (self.n_batch, self.n_dense) != (other.n_batch, other.n_dense):
            raise NotImplementedError("Addition between sparse matrices with different batch/dense dimensions.")
        dtype = jnp.result_type(self.dtype, other.dtype)
        nb = self.n_batch
        batch = self.shape[:nb]
        data = [jnp.broadcast_to(m.data.astype(dtype), (*batch, *m.data.shape[nb:])) for m in (self, other)]
        indices = [jnp.broadcast_to(m.indices, (*batch, *m.indices.shape[nb:])) for m in (self, other)]
        index_dtype = jnp.promote_types(*(i.dtype for i in indices))
        return BCOO((jnp.concatenate(data, axis=nb), jnp.concatenate([i.astype(index_dtype) for i in indices], axis=nb)),
                    shape=self.shape)

    __radd__ = __add__

    def __sub__(self, other: Any) -> "BCOO":
        if not isinstance(other, BCOO):
            raise NotImplementedError("Subtraction between sparse and dense array.")
        return self + (-other)

    def __rsub__(self, other: Any) -> Any:
        raise NotImplementedError("Subtraction between sparse and dense array.")

    def __neg__(self) -> "BCOO":
        return BCOO((-self.data, self.indices), **self._params)

    def __pos__(self) -> "BCOO":
        return self

    def __abs__(self) -> "BCOO":
        return BCOO((abs(self.data), self.indices), **self._params)

    def __pow__(self, y: Any) -> "BCOO":
        if not isinstance(y, (int, np.integer)) or isinstance(y, bool):
            raise NotImplementedError("sparse rule for pow is not implemented; only positive integer powers "
                                      "of a BCOO array keep it sparse")
        if y <= 0:
            raise NotImplementedError(
                f"sparse rule for integer_pow with non-positive exponent {y} is not implemented because it "
                "would result in dense output. If this is your intent, use sparse.todense() to convert your "
                "argument to a dense array.")
        return BCOO((self.data**y, self.indices), **self._params)

    def __rpow__(self, other: Any) -> Any:
        raise NotImplementedError(_DENSE_RESULT.format("A power with a sparse exponent"))

    def _densifying(self, other: Any) -> Any:
        raise NotImplementedError(_DENSE_RESULT.format("A comparison with a sparse array"))

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _densifying
    __hash__ = None  # type: ignore[assignment] - a mutable array, as JAX's BCOO

    def __getitem__(self, index: Any) -> "BCOO":
        """NumPy indexing: integers, slices of any step, None, ..., integer arrays, boolean masks."""
        return _getitem(self, index)


_DENSE_RESULT = ("{} is not implemented because it would result in dense output. If this is your intent, use "
                 "sparse.todense() to convert your arguments to a dense array.")


def _getitem(mat: BCOO, index: Any) -> BCOO:
    """`mat[index]` with NumPy's rules (see `indexing.plan`); array indices are clamped into range, as in JAX."""
    steps = indexing.plan(index, mat.shape)
    if steps.arrays and not math.prod(steps.shape):  # JAX's gather path builds an empty BCOO from zeros
        return BCOO.fromdense(jnp.zeros(steps.shape, mat.dtype), nse=0)
    out = mat
    if (steps.start, steps.limit, steps.strides) != ((0,) * mat.ndim, mat.shape, (1,) * mat.ndim):
        out = bcoo_slice(out, start_indices=steps.start, limit_indices=steps.limit, strides=steps.strides)
    if steps.reverse:
        out = bcoo_rev(out, steps.reverse)
    if steps.squeeze:
        out = bcoo_squeeze(out, dimensions=steps.squeeze)
    if steps.arrays:
        out = _take(out, steps.arrays, steps.broadcast, steps.block_at)
    return out if out.shape == steps.shape else _reshape(out, steps.shape)


def _take(mat: BCOO, arrays: dict[int, jax.Array], broadcast: Sequence[int], block_at: int) -> BCOO:
    """`mat` indexed by the (broadcast, non-negative) integer arrays along their dims and by full
    slices elsewhere; the broadcast dims go first among the remaining dims, or at `block_at`."""
    windows = math.prod(broadcast)
    columns = [jnp.zeros((windows,), np.int32)] * mat.ndim
    for d, a in arrays.items():
        columns[d] = jnp.clip(a.ravel(), 0, mat.shape[d] - 1).astype(np.int32)
    sizes = [1 if d in arrays else n for d, n in enumerate(mat.shape)]
    out = _gather_windows(mat, jnp.stack(columns, axis=1), sizes)
    out = bcoo_squeeze(out, dimensions=[d + 1 for d in arrays])
    rest = out.shape[1:]
    out = _reshape(out, (*broadcast, *rest))
    k = len(broadcast)
    if block_at:
        perm = (*range(k, k + block_at), *range(k), *range(k + block_at, out.ndim))
        out = bcoo_transpose(_movable(out, perm), permutation=perm)
    return out


def _movable(mat: BCOO, perm: Sequence[int]) -> BCOO:
    """`mat` with as many batch and dense dims as `perm` leaves in place (transpose cannot mix them)."""
    n_batch = next((k for k in range(mat.n_batch + 1) if k == mat.n_batch or perm[k] != k), 0)
    n_dense = 0
    while n_dense < mat.n_dense and perm[mat.ndim - 1 - n_dense] == mat.ndim - 1 - n_dense:
        n_dense += 1
    return bcoo_update_layout(mat, n_batch=n_batch, n_dense=n_dense)


def _gather_windows(mat: BCOO, starts: jax.Array, slice_sizes: Sequence[int]) -> BCOO:
    """Windows of `slice_sizes` at `starts[G, ndim]` (clamped into the array) as a BCOO array of shape
    `(G, *slice_sizes)` whose first dim is a new batch dim; nse shrinks to what a window can hold."""
    sizes = tuple(int(s) for s in slice_sizes)
    bufs = ops.gather_p.bind(mat.data, mat.indices, starts, slice_sizes=sizes, **mat._params)
    out = _result(bufs, (starts.shape[0], *sizes), unique=mat.unique_indices)
    window_nse = math.prod(sizes[mat.n_batch : mat.n_batch + mat.n_sparse])
    if mat.n_sparse and mat.nse > window_nse:
        out = bcoo_sum_duplicates(out, nse=window_nse)
    return out


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


# The generic todense of JAX's sparse module: one primitive over the flattened buffers of a BCOO or
# of a dense array and their pytree, whose transpose is `extract` for a BCOO and the identity otherwise.
todense_p = Primitive("todense")
todense_p.__doc__ = """The primitive that `todense` binds (JAX's `todense_p`), taking a sparse array's leaves and
giving its dense array.

Example:
  >>> import jax
  >>> a = sparse.BCOO.fromdense(jnp.eye(2))
  >>> [eqn.primitive is sparse.todense_p for eqn in jax.make_jaxpr(sparse.todense)(a).eqns]
  [True]
"""
bcoo_todense_p = ops.todense_p
bcoo_todense_p.__doc__ = """The primitive that `bcoo_todense` binds (JAX's `bcoo_todense_p`), lowered to the
`hlopt.bcoo.todense` annotation.

Example:
  >>> import jax
  >>> jaxpr = jax.make_jaxpr(sparse.bcoo_todense)(sparse.eye(2))
  >>> jaxpr.eqns[0].primitive is sparse.bcoo_todense_p
  True
"""


def todense(arr: Any) -> Any:
    """The dense array of a sparse array; any other array is returned unchanged (JAX's `sparse.todense`).

    Args:
      arr: a `BCOO` or an array.

    Returns:
      A dense array.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.todense(a).tolist()
      [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    """
    bufs, tree = jax.tree_util.tree_flatten(arr)
    return todense_p.bind(*bufs, tree=tree)


def _unflatten(bufs: Sequence[Any], tree: Any) -> Any:
    """The BCOO or array that `todense_p`'s operands are the leaves of (an hlopt BCOO or one array)."""
    arr = jax.tree_util.tree_unflatten(tree, bufs)
    if not isinstance(arr, BCOO) and len(bufs) != 1:
        raise TypeError(f"sparse.todense: expected an hlopt.sparse.BCOO or an array, got {type(arr).__name__} "
                        "(hlopt has only the BCOO format: convert other sparse formats to BCOO first)")
    return arr


def _todense_impl(*bufs: Any, tree: Any) -> Any:
    arr = _unflatten(bufs, tree)
    return arr.todense() if isinstance(arr, BCOO) else arr


def _todense_abstract_eval(*bufs: Any, tree: Any) -> Any:
    arr = _unflatten(bufs, tree)
    if not isinstance(arr, BCOO):
        return arr
    return jax.core.ShapedArray(arr.shape, arr.data.dtype, weak_type=arr.data.weak_type)


def _todense_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, tree: Any) -> tuple[Any, Any]:
    out = todense_p.bind(*primals, tree=tree)
    if type(tangents[0]) is ad.Zero:
        return out, ad.Zero(out.aval.to_tangent_aval())
    return out, todense_p.bind(tangents[0], *primals[1:], tree=tree)


def _todense_transpose(ct: Any, *bufs: Any, tree: Any) -> list[Any]:
    obj = jax.tree_util.tree_unflatten(tree, [None] * len(bufs))
    if not isinstance(obj, BCOO):
        return [ct]
    data, indices = bufs
    return ad.primitive_transposes[ops.todense_p](ct, data, indices, **obj._params)


def _todense_batch(args: Sequence[Any], dims: Sequence[int | None], *, tree: Any) -> tuple[Any, int]:
    return jax.vmap(functools.partial(_todense_impl, tree=tree), dims)(*args), 0


todense_p.def_impl(_todense_impl)
todense_p.def_abstract_eval(_todense_abstract_eval)
ad.primitive_jvps[todense_p] = _todense_jvp
ad.primitive_transposes[todense_p] = _todense_transpose
batching.primitive_batchers[todense_p] = _todense_batch
mlir.register_lowering(todense_p, mlir.lower_fun(_todense_impl, multiple_results=False))


def bcoo_todense(mat: BCOO) -> jax.Array:
    """The dense array `mat` represents (duplicates summed, padding ignored).

    Args:
      mat: a `BCOO`.

    Returns:
      A dense array of shape `mat.shape`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_todense(a).tolist()
      [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    """
    return ops.todense_p.bind(mat.data, mat.indices, **mat._params)


def bcoo_fromdense(mat: Any, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0,
                   index_dtype: Any = jnp.int32) -> BCOO:
    """The nonzeros of `mat` (first `nse` per batch, in row-major order) as a BCOO array.

    Args:
      mat: a dense array.
      nse: the number of stored entries (per batch); None: the largest count, which needs a
        concrete `mat` (outside `jit`). Under `jit` give it.
      n_batch: leading dimensions that are batch dimensions.
      n_dense: trailing dimensions that are dense.
      index_dtype: the dtype of the indices.

    Returns:
      A `BCOO` with sorted, unique indices.

    Example:
      >>> a = sparse.bcoo_fromdense(jnp.array([[0.0, 5.0], [6.0, 0.0]]))
      >>> a.data.tolist(), a.indices.tolist()
      ([5.0, 6.0], [[0, 1], [1, 0]])
    """
    mat = jnp.asarray(mat)
    if nse is None:
        mask = mat != 0
        if n_dense:
            mask = mask.any(tuple(range(mat.ndim - n_dense, mat.ndim)))
        nse = mask.sum(tuple(range(n_batch, mask.ndim))).max(initial=0)
    nse = concrete_or_error(operator.index, nse, _TRACED_NSE_ERROR)
    bufs = ops.fromdense_p.bind(mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=np.dtype(index_dtype))
    return _result(bufs, mat.shape, True, True)


def bcoo_multiply_dense(sp_mat: BCOO, v: Any) -> jax.Array:
    """The data of `sp_mat * v` for a dense `v` that broadcasts to `sp_mat.shape`.

    Args:
      sp_mat: a `BCOO`.
      v: a dense array.

    Returns:
      The product's data, laid out as `sp_mat.data` (its indices are `sp_mat.indices`).

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_multiply_dense(a, jnp.array([10.0, 20.0, 30.0])).tolist()
      [10.0, 60.0, 60.0]
    """
    v = jnp.asarray(v)
    dtype = jnp.result_type(sp_mat.data, v)  # a Python scalar stays weakly typed
    return ops.multiply_dense_p.bind(sp_mat.data.astype(dtype), sp_mat.indices, v.astype(dtype), **sp_mat._params)


def bcoo_multiply_sparse(lhs: BCOO, rhs: BCOO) -> BCOO:
    """The elementwise product of two BCOO arrays (their shapes broadcast).

    The output stores one entry per entry of the operand whose sparse shape is the output's
    (the smaller one when both are), not `lhs.nse * rhs.nse`.

    Args:
      lhs: a `BCOO`.
      rhs: a `BCOO`.

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_multiply_sparse(a, a).todense().tolist()
      [[1.0, 0.0, 4.0], [0.0, 9.0, 0.0]]
    """
    dtype = jnp.result_type(lhs.dtype, rhs.dtype)
    bufs = ops.multiply_sparse(lhs.data.astype(dtype), lhs.indices, rhs.data.astype(dtype),
                               rhs.indices.astype(lhs.indices.dtype), lhs.shape, rhs.shape)
    return _result(bufs, shapes.broadcast_shapes(lhs.shape, rhs.shape))


def bcoo_update_layout(mat: BCOO, *, n_batch: int | None = None, n_dense: int | None = None,
                       on_inefficient: str | None = "error") -> BCOO:
    """The same array with `n_batch` batch and `n_dense` dense dimensions.

    Args:
      mat: a `BCOO`.
      n_batch: the new number of batch dimensions (None: unchanged).
      n_dense: the new number of dense dimensions (None: unchanged).
      on_inefficient: what to do when the new layout stores far more elements: `"error"`,
        `"warn"` or None.

    Returns:
      A `BCOO` representing the same array.

    Raises:
      SparseEfficiencyError: the new layout is inefficient and `on_inefficient="error"`.
      ValueError: a negative count, or more batch and dense dimensions than `mat` has.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> b = sparse.bcoo_update_layout(a, n_dense=1, on_inefficient=None)   # each entry a row
      >>> b.data.shape, b.todense().tolist() == a.todense().tolist()
      ((3, 3), True)
    """
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
    """The sum over `axes` (batch, sparse or dense) of a BCOO array.

    Args:
      mat: a `BCOO`.
      axes: the dimensions to sum over.

    Returns:
      A `BCOO` without those dimensions.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_reduce_sum(a, axes=(0,)).todense().tolist()
      [1.0, 3.0, 2.0]
    """
    axes = tuple(sorted({operator.index(a) for a in axes}))
    if not all(0 <= a < mat.ndim for a in axes):
        raise ValueError(f"bcoo_reduce_sum: axes {axes} out of range for an array of rank {mat.ndim}")
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    bufs = ops.reduce_sum_p.bind(mat.data, mat.indices, axes=axes, **mat._params)
    return _result(bufs, shapes.reduce_sum(lay, axes).shape)


def bcoo_reshape(mat: BCOO, *, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None,
                 sharding: Any = None) -> BCOO:
    """`lax.reshape` of a BCOO array; batch, sparse and dense dims may not mix.

    As JAX's, it refuses an array whose data or indices broadcast along a batch dim (their batch
    shape is not the array's batch shape).

    Args:
      mat: a `BCOO`.
      new_sizes: the new shape.
      dimensions: a permutation applied first (as in `lax.reshape`), or None.
      sharding: unused, as in JAX.

    Returns:
      A `BCOO` of shape `new_sizes`.

    Raises:
      ValueError: the reshape would mix batch, sparse or dense dimensions.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_reshape(a, new_sizes=(3, 2)).todense().tolist()
      [[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]
    """
    if sharding is not None:
        raise NotImplementedError("bcoo_reshape: sharding is not supported")
    batch = mat.shape[: mat.n_batch]
    if mat.data.shape[: mat.n_batch] != batch or mat.indices.shape[: mat.n_batch] != batch:
        raise NotImplementedError(
            "reshape of arrays with broadcasted batch dimensions. "
            f"Batch shape {batch}, data batch shape {mat.data.shape[: mat.n_batch]}, indices batch shape "
            f"{mat.indices.shape[: mat.n_batch]}: build the BCOO from data and indices broadcast to the batch "
            "shape (jnp.broadcast_to) first.")
    return _reshape(mat, new_sizes, dimensions)


def _reshape(mat: BCOO, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None) -> BCOO:
    """`bcoo_reshape` that also takes broadcast batch buffers (for indexing, gather and `sum`)."""
    new_sizes = tuple(operator.index(s) for s in new_sizes)
    dims = None if dimensions is None else tuple(operator.index(d) for d in dimensions)
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    shapes.reshape(lay, new_sizes, dims)
    bufs = ops.reshape_p.bind(mat.data, mat.indices, new_sizes=new_sizes, dimensions=dims, **mat._params)
    return _result(bufs, new_sizes)


def bcoo_slice(mat: BCOO, *, start_indices: Sequence[int], limit_indices: Sequence[int],
               strides: Sequence[int] | None = None) -> BCOO:
    """`lax.slice` of a BCOO array; nse shrinks (duplicates summed) when the slice holds fewer elements.

    Args:
      mat: a `BCOO`.
      start_indices: the first index of each dimension.
      limit_indices: one past the last index of each dimension.
      strides: the step of each dimension (None: 1).

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_slice(a, start_indices=(0, 1), limit_indices=(2, 3)).todense().tolist()
      [[0.0, 2.0], [3.0, 0.0]]
    """
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
    """The entries reordered so the indices are in row-major order (padding last), by one stable sort.

    Sorted indices (`indices_sorted=True`) let products take the faster row-sorted path.

    Args:
      mat: a `BCOO`.

    Returns:
      A `BCOO` with `indices_sorted=True`.

    Example:
      >>> a = sparse.BCOO((jnp.array([1.0, 2.0]), jnp.array([[1, 0], [0, 1]])), shape=(2, 2))
      >>> b = sparse.bcoo_sort_indices(a)
      >>> b.indices.tolist(), b.data.tolist(), b.indices_sorted
      ([[0, 1], [1, 0]], [2.0, 1.0], True)
    """
    bufs = ops.sort_indices_p.bind(mat.data, mat.indices, **mat._params)
    return _result(bufs, mat.shape, True, mat.unique_indices)


def bcoo_squeeze(arr: BCOO, *, dimensions: Sequence[int]) -> BCOO:
    """`lax.squeeze` of a BCOO array: the size-1 `dimensions` removed.

    Args:
      arr: a `BCOO`.
      dimensions: the dimensions of size 1 to remove.

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[0.0, 4.0, 0.0]]))
      >>> sparse.bcoo_squeeze(a, dimensions=(0,)).todense().tolist()
      [0.0, 4.0, 0.0]
    """
    dims = tuple(sorted({operator.index(d) % arr.ndim for d in dimensions}))
    lay = shapes.layout(arr.shape, arr.data.shape, arr.indices.shape)
    shape, _, _ = shapes.squeeze(lay, dims)
    bufs = ops.squeeze_p.bind(arr.data, arr.indices, dimensions=dims, **arr._params)
    return _result(bufs, shape, arr.indices_sorted, arr.unique_indices)


def bcoo_sum_duplicates(mat: BCOO, nse: int | None = None) -> BCOO:
    """Sorted unique indices with the data of duplicates summed; `nse` entries per batch.

    Args:
      mat: a `BCOO`.
      nse: the entries to keep; None: the smallest sufficient count, computed from the
        indices, which needs concrete (not traced) arrays.

    Returns:
      A `BCOO` with `indices_sorted=True` and `unique_indices=True`.

    Example:
      >>> a = sparse.BCOO((jnp.array([1.0, 2.0, 3.0]), jnp.array([[1], [0], [1]])), shape=(3,))
      >>> b = sparse.bcoo_sum_duplicates(a)
      >>> b.data.tolist(), b.indices.tolist()
      ([2.0, 4.0], [[0], [1]])
    """
    if nse is None:
        if rules.is_traced(mat.indices):
            raise ValueError(
                "bcoo_sum_duplicates: nse must be specified when using the function within "
                "jit, vmap, and other transformations requiring abstract evaluation."
            )
        nse = ops.unique_count(np.asarray(mat.indices), mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse])
    nse = concrete_or_error(operator.index, nse, "nse argument of bcoo_sum_duplicates.")
    bufs = ops.sum_duplicates_p.bind(mat.data, mat.indices, nse=nse, **mat._params)
    return _result(bufs, mat.shape, True, True)


def bcoo_gather(operand: BCOO, start_indices: Any, dimension_numbers: jax.lax.GatherDimensionNumbers,
                slice_sizes: Sequence[int], *, unique_indices: bool = False, indices_are_sorted: bool = False,
                mode: Any = None, fill_value: Any = None) -> BCOO:
    """`lax.gather` of a BCOO array. Start indices are clamped into range.

    Args:
      operand: a `BCOO`.
      start_indices: as in `lax.gather`.
      dimension_numbers: a `lax.GatherDimensionNumbers`.
      slice_sizes: as in `lax.gather`.
      unique_indices: as in `lax.gather`.
      indices_are_sorted: as in `lax.gather`.
      mode: as in `lax.gather`.
      fill_value: as in `lax.gather`.

    Returns:
      A `BCOO` of the gathered windows.

    Example:
      >>> from jax import lax
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> dims = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
      >>> rows = sparse.bcoo_gather(a, jnp.array([[1], [0]]), dims, slice_sizes=(1, 3))   # rows 1 and 0
      >>> rows.todense().tolist()
      [[0.0, 3.0, 0.0], [1.0, 0.0, 2.0]]
    """
    if mode is not None and jax.lax.GatherScatterMode.from_any(mode) != jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS:
        raise NotImplementedError(f"bcoo_gather: mode={mode!r} not yet supported.")
    dnums = dimension_numbers
    if dnums.operand_batching_dims or dnums.start_indices_batching_dims:
        raise NotImplementedError("bcoo_gather: operand batching dims are not supported")
    start_indices = jnp.asarray(start_indices)
    out = jax.eval_shape(
        lambda x, i: jax.lax.gather(x, i, dnums, tuple(slice_sizes), unique_indices=unique_indices,
                                    indices_are_sorted=indices_are_sorted, mode=mode, fill_value=fill_value),
        jax.ShapeDtypeStruct(operand.shape, operand.dtype), start_indices)
    batch = start_indices.shape[:-1]
    rows = start_indices.reshape(math.prod(batch), start_indices.shape[-1]).astype(np.int32)
    columns = [jnp.zeros((rows.shape[0],), np.int32)] * operand.ndim
    for k, d in enumerate(dnums.start_index_map):
        columns[d] = rows[:, k]
    windows = _gather_windows(operand, jnp.stack(columns, axis=1), slice_sizes)
    windows = bcoo_squeeze(windows, dimensions=[d + 1 for d in dnums.collapsed_slice_dims])
    result = _reshape(windows, (*batch, *windows.shape[1:]))
    offsets = iter(range(len(batch), result.ndim))
    batches = iter(range(len(batch)))
    perm = tuple(next(offsets) if i in dnums.offset_dims else next(batches) for i in range(result.ndim))
    if perm != tuple(range(result.ndim)):
        result = bcoo_transpose(_movable(result, perm), permutation=perm)
    assert result.shape == out.shape, (result.shape, out.shape)
    return result


def bcoo_rev(operand: BCOO, dimensions: Sequence[int]) -> BCOO:
    """`lax.rev` of a BCOO array: batch and dense dims flip their buffers, sparse dims their indices.

    Args:
      operand: a `BCOO`.
      dimensions: the dimensions to reverse.

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_rev(a, dimensions=(1,)).todense().tolist()
      [[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]]
    """
    dims = tuple(operator.index(d) for d in dimensions)
    if len(set(dims)) != len(dims) or not all(0 <= d < operand.ndim for d in dims):
        raise ValueError(f"rev dimensions must be unique and in range for an array of rank {operand.ndim}, "
                         f"got {dims}")
    nb, ns = operand.n_batch, operand.n_sparse
    data, indices = operand.data, operand.indices
    batch = [d for d in dims if d < nb]
    data = jnp.flip(data, [d for d in batch if data.shape[d] > 1] + [d - ns + 1 for d in dims if d >= nb + ns])
    indices = jnp.flip(indices, [d for d in batch if indices.shape[d] > 1])
    flipped = [d - nb for d in dims if nb <= d < nb + ns]
    if flipped:
        sizes = [operand.shape[nb + k] for k in range(ns)]
        top = ops.per_column([sizes[k] - 1 if k in flipped else 0 for k in range(ns)], indices)
        sign = ops.per_column([-1 if k in flipped else 1 for k in range(ns)], indices)
        indices = top + sign * indices  # a padding index (outside [0, size)) stays outside
    return BCOO((data, indices), shape=operand.shape, unique_indices=operand.unique_indices)


def bcoo_transpose(mat: BCOO, *, permutation: Sequence[int]) -> BCOO:
    """The dimensions of a BCOO array permuted; batch, sparse and dense dims each permute among themselves.

    Args:
      mat: a `BCOO`.
      permutation: the new order of the dimensions.

    Returns:
      A `BCOO`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
      >>> sparse.bcoo_transpose(a, permutation=(1, 0)).todense().tolist()
      [[1.0, 0.0], [0.0, 3.0], [2.0, 0.0]]
    """
    perm = tuple(operator.index(p) for p in permutation)
    lay = shapes.layout(mat.shape, mat.data.shape, mat.indices.shape)
    shape, _, _ = shapes.transpose(lay, perm)
    if perm == tuple(range(mat.ndim)):
        return mat
    bufs = ops.transpose_p.bind(mat.data, mat.indices, permutation=perm, **mat._params)
    return _result(bufs, shape, False, mat.unique_indices)


# ---------------------------------------------------------------------------
# JAX's private buffer-level functions, with JAX's signatures, for JAX-compatible test code (JAX's
# own tests build expected values with them). Not part of the API (not in __all__).


def _spinfo_params(spinfo: Any) -> dict[str, Any]:
    """BCOO keywords of a SparseInfo (hlopt's or JAX's: the same fields)."""
    return dict(shape=spinfo.shape, indices_sorted=spinfo.indices_sorted, unique_indices=spinfo.unique_indices)


def _bcoo_extract(indices: Any, arr: Any, *, assume_unique: bool = True) -> jax.Array:
    """The data of `arr` at BCOO `indices` (`bcoo_extract` on buffers; JAX's private `_bcoo_extract`)."""
    return ops.extract(jnp.asarray(indices), jnp.asarray(arr), assume_unique=assume_unique)


def _bcoo_fromdense(mat: Any, *, nse: int, n_batch: int = 0, n_dense: int = 0,
                    index_dtype: Any = jnp.int32) -> tuple[jax.Array, jax.Array]:
    """The (data, indices) of `bcoo_fromdense` (JAX's private `_bcoo_fromdense`; `nse` required)."""
    mat = bcoo_fromdense(mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype)
    return mat.data, mat.indices


def _bcoo_todense(data: Any, indices: Any, *, spinfo: Any) -> jax.Array:
    """The dense array of BCOO buffers (`bcoo_todense`; JAX's private `_bcoo_todense`)."""
    return bcoo_todense(BCOO((data, indices), **_spinfo_params(spinfo)))


def _bcoo_dot_general(lhs_data: Any, lhs_indices: Any, rhs: Any, *, dimension_numbers: Any,
                      preferred_element_type: Any, lhs_spinfo: Any) -> jax.Array:
    """`bcoo_dot_general` of BCOO buffers and a dense `rhs` (JAX's private `_bcoo_dot_general`)."""
    from hlopt.sparse import products  # products builds on this module

    lhs = BCOO((lhs_data, lhs_indices), **_spinfo_params(lhs_spinfo))
    return products.bcoo_dot_general(lhs, jnp.asarray(rhs), dimension_numbers=dimension_numbers,
                                     preferred_element_type=preferred_element_type)
