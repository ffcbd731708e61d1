"""NumPy indexing of a BCOO array, planned on its shape alone.

`plan(index, shape)` turns `mat[index]` (integers, slices of any step, `None`,
`...`, integer arrays, boolean masks) into the steps `BCOO.__getitem__` runs: one
static slice, reversals for negative steps, one gather for the array indices
(integers join them when any is present, as in NumPy), squeezes for integers
and a reshape for `None`. The rules are NumPy's: array indices broadcast
together, and their dims go where the first one was when they are adjacent in
the index, else first.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_SEQUENCE_ERROR = (
    "Using a non-tuple sequence for multidimensional indexing is not allowed; use `arr[array(seq)]` "
    "instead of `arr[seq]`. See https://github.com/jax-ml/jax/issues/4564 for more information."
)


class IndexPlan(NamedTuple):
    """The steps of one `mat[index]`, in order."""

    start: tuple[int, ...]
    limit: tuple[int, ...]
    strides: tuple[int, ...]
    reverse: tuple[int, ...]  # dims to reverse after slicing (negative steps)
    squeeze: tuple[int, ...]  # integer-indexed dims (no array index present)
    arrays: dict[int, jax.Array]  # dim -> integer array (negatives wrapped), all of shape `broadcast`
    broadcast: tuple[int, ...]  # the shape the array indices broadcast to
    block_at: int  # where the broadcast dims go among the remaining dims
    shape: tuple[int, ...]  # the result shape


def _is_array(i: Any) -> bool:
    return isinstance(i, (np.ndarray, jax.Array))


def _expand_bool(index: tuple[Any, ...]) -> list[Any]:
    """Boolean arrays become one integer array per dim (their nonzero positions); `True` is `None`."""
    out: list[Any] = []
    for i in index:
        if isinstance(i, (bool, np.bool_)) or (_is_array(i) and i.dtype == bool and i.ndim == 0):
            if isinstance(i, jax.core.Tracer):
                raise jax.errors.NonConcreteBooleanIndexError(jax.typeof(i))
            if not bool(i):
                raise NotImplementedError("BCOO indexing with a scalar False (an empty result)")
            out.append(None)
        elif _is_array(i) and i.dtype == bool:
            if isinstance(i, jax.core.Tracer):
                raise jax.errors.NonConcreteBooleanIndexError(jax.typeof(i))
            out.extend(jnp.asarray(nz) for nz in np.nonzero(np.asarray(i)))
        else:
            out.append(i)
    return out


def _normalize(index: Any, ndim: int) -> list[Any]:
    """The index as a list of `None`, slices, integers and integer arrays, one per dim (plus `None`s)."""
    if isinstance(index, list):
        raise TypeError(_SEQUENCE_ERROR)
    entries = _expand_bool(index if isinstance(index, tuple) else (index,))
    for i in entries:
        if isinstance(i, list):
            raise TypeError(_SEQUENCE_ERROR)
        if _is_array(i) and not jnp.issubdtype(i.dtype, jnp.integer):
            raise TypeError(f"Indexer must have integer or boolean type, got indexer with type {i.dtype}")
        if not (i is None or i is Ellipsis or isinstance(i, slice) or _is_array(i) or _is_integer(i)):
            raise TypeError(f"BCOO indexing with {type(i).__name__} is not supported; use integers, slices, "
                            "None, ..., integer arrays or boolean masks")
    if sum(i is Ellipsis for i in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(i is not None and i is not Ellipsis for i in entries)
    if used > ndim:
        raise IndexError(f"Too many indices: {ndim}-dimensional array indexed with {used} regular indices.")
    fill = [slice(None)] * (ndim - used)
    at = next((k for k, i in enumerate(entries) if i is Ellipsis), None)
    return entries + fill if at is None else entries[:at] + fill + entries[at + 1 :]


def _is_integer(i: Any) -> bool:
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def plan(index: Any, shape: Sequence[int]) -> IndexPlan:
    """The steps of `mat[index]` for a BCOO `mat` of `shape`."""
    shape = tuple(shape)
    entries = _normalize(index, len(shape))
    advanced = any(_is_array(i) for i in entries)
    start, limit, strides, reverse, squeeze = [], [], [], [], []
    arrays: dict[int, Any] = {}
    positions: list[int] = []  # positions in `entries` of the array indices
    dims = iter(range(len(shape)))
    for k, i in enumerate(entries):
        if i is None:
            continue
        d = next(dims)
        size = shape[d]
        first, last, step = 0, size, 1
        if isinstance(i, slice):
            begin, end, step = i.indices(size)
            count = len(range(begin, end, step))
            first, last = (begin, begin + max(count - 1, 0) * step + 1) if step > 0 else (
                begin + (count - 1) * step, begin + 1)
            first, last, step = (first, last, step) if count else (0, 0, 1)
            if step < 0:
                reverse.append(d)
                step = -step
        elif advanced:
            arrays[d] = jnp.asarray(i)
            positions.append(k)
        else:
            j = operator.index(i)
            if not -size <= j < size:
                raise IndexError(f"index {j} is out of bounds for axis {d} with size {size}")
            j %= size
            first, last = j, j + 1
            squeeze.append(d)
        start.append(first)
        limit.append(last)
        strides.append(step)
    broadcast = np.broadcast_shapes(*(a.shape for a in arrays.values())) if arrays else ()
    for d, a in arrays.items():
        a = jnp.broadcast_to(a, broadcast)
        arrays[d] = jnp.where(a < 0, a + jnp.asarray(shape[d], a.dtype), a)
    contiguous = positions == list(range(positions[0], positions[0] + len(positions))) if positions else True
    block_at = sum(1 for i in entries[: positions[0]] if isinstance(i, slice)) if positions and contiguous else 0
    out: list[int] = []
    d_iter = iter(range(len(shape)))
    for k, i in enumerate(entries):
        if i is None:
            out.append(1)
            continue
        d = next(d_iter)
        if isinstance(i, slice):
            out.append(len(range(start[d], limit[d], strides[d])))
        elif k in positions and k == positions[0] and contiguous:
            out.extend(broadcast)
    if positions and not contiguous:
        out = [*broadcast, *out]
    return IndexPlan(tuple(start), tuple(limit), tuple(strides), tuple(reverse), tuple(squeeze), arrays,
                     tuple(broadcast), block_at, tuple(out))
