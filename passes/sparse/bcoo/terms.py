"""The abstract terms a BCOO record's derivative and batching declarations are written over.

A record builds no arrays itself; its rules (the transpose of a `Derivative`, a JVP,
batching and dtype hooks) are functions whose first argument `t` is an interpreter of the
`Terms` below, which `hlopt.sparse.rules` supplies. The values a rule handles are opaque
array terms: it may use their `shape`, `dtype` and `ndim`, arithmetic and comparison
operators, basic indexing (`x[...]`), and the methods `reshape`, `sum` and `astype`;
everything else goes through `t`. `t.bind(name, ...)` applies
another BCOO op (the registry in use resolves it), so a rule can be written through other ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Term = Any  # an array term of the interpreter


class Terms(Protocol):
    """What the interpreter gives a record's rules (numpy's names where one exists)."""

    # BCOO ops and the transposition state of operands
    def bind(self, name: str, *operands: Term, **params: Any) -> Any:
        """The results of `hlopt.bcoo.<name>` on these operands (a list for two results)."""

    def is_undefined(self, x: Any) -> bool:
        """Whether `x` is the operand a transpose rule gives the cotangent of (its value unknown)."""

    def aval(self, x: Any) -> Any:
        """The abstract value (`shape`, `dtype`) of an operand, known or not."""

    def is_zero(self, tangent: Any) -> bool:
        """Whether a tangent is the symbolic zero."""

    # arrays
    def zeros(self, shape: Sequence[int], dtype: Any) -> Term: ...
    def ones(self, shape: Sequence[int], dtype: Any) -> Term: ...
    def arange(self, start: int, stop: int, dtype: Any) -> Term: ...
    def asarray(self, values: Any, dtype: Any = None) -> Term: ...
    def where(self, cond: Term, x: Term, y: Term) -> Term: ...
    def all(self, x: Term, axis: int) -> Term: ...
    def transpose(self, x: Term, perm: Sequence[int]) -> Term: ...
    def broadcast_to(self, x: Term, shape: Sequence[int]) -> Term: ...
    def expand_dims(self, x: Term, axes: Any) -> Term: ...
    def moveaxis(self, x: Term, source: int, destination: int) -> Term: ...
    def concatenate(self, xs: Sequence[Term], axis: int) -> Term: ...
    def einsum(self, spec: str, *xs: Term) -> Term: ...

    def sum_to_shape(self, x: Term, shape: Sequence[int]) -> Term:
        """`x` summed over the leading dims `shape` lacks and the dims it has as 1."""

    def set_at(self, x: Term, index: Any, values: Term) -> Term:
        """`x` with `x[index]` replaced by `values`."""

    def add_at(self, x: Term, index: Any, values: Term) -> Term:
        """`x` with `values` added at `x[index]` (indices out of range dropped)."""

    def cumsum(self, x: Term, axis: int) -> Term:
        """The running sum along `axis`, in `x`'s dtype."""

    def dot_dtype(self, lhs: Any, rhs: Any, dimension_numbers: Any, preferred_element_type: Any) -> Any:
        """`dot_general`'s result dtype for operands of these dtypes (a TypeError for non-numbers)."""

    # batching
    def to_front(self, x: Term, bdim: int | None) -> Term:
        """The mapped axis as a new leading dim (size 1 when `x` is not mapped)."""

    def from_front(self, outs: Any, size: int, multiple: bool) -> tuple[Any, Any]:
        """Results with a leading dim: mapped along 0, or (size 1) the same for every example."""

    def mapped_size(self, args: Sequence[Term], dims: Sequence[int | None]) -> int:
        """The size of the mapped axis."""


# Terms the rules of several ops build.


def per_column(t: Terms, values: Sequence[int], indices: Term) -> Term:
    """`values[k]` for index column k, with the rank of `indices` (no implicit rank promotion)."""
    return t.asarray(values, indices.dtype).reshape((1,) * (indices.ndim - 1) + (len(values),))


def valid(t: Terms, indices: Term, sizes: Sequence[int]) -> Term:
    """True where every index of an entry lies in `[0, size)`."""
    return t.all((indices >= 0) & (indices < per_column(t, sizes, indices)), -1)


def expand_dense(mask: Term, n_dense: int) -> Term:
    """A mask over entries, with size-1 dense dims after them."""
    return mask.reshape(*mask.shape, *(1,) * n_dense)


def todense(t: Terms, data: Term, indices: Term, shape: Sequence[int]) -> Term:
    """The dense array of BCOO buffers."""
    return t.bind("todense", data, indices, shape=tuple(shape), indices_sorted=False, unique_indices=False)


def extract(t: Terms, indices: Term, arr: Term, assume_unique: bool = True) -> Term:
    """`arr` at the stored indices (0 at padding; without `assume_unique`, at repeats too)."""
    return t.bind("extract", arr, indices, assume_unique=bool(assume_unique))
