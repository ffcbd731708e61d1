"""BCOO layouts and the shape math of the ops, shared by their records (`hlopt.passes.sparse.bcoo`), the
jax rules of `hlopt.sparse` and the symbolic phase of sparse x sparse products.

A BCOO array of `shape` stores `data[*batch, nse, *dense]` and
`indices[*batch, nse, n_sparse]`; a batch dim of either buffer may be 1 and then
broadcasts. These pure functions take buffer shapes and op parameters and
return the result buffer shapes (and, where the lowering needs it, the plan
that produced them). They raise ValueError for inputs no layout fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

Shape = tuple[int, ...]


def broadcast_dim(*sizes: int) -> int:
    """The size that dims of these sizes broadcast to (any size other than 1, which may be 0)."""
    return next((s for s in sizes if s != 1), 1)


class Layout(NamedTuple):
    """The layout of one BCOO array, derived from its buffers as JAX does."""

    shape: Shape
    data: Shape
    indices: Shape

    @property
    def n_batch(self) -> int:
        return len(self.indices) - 2

    @property
    def n_sparse(self) -> int:
        return self.indices[-1]

    @property
    def n_dense(self) -> int:
        return len(self.shape) - self.n_batch - self.n_sparse

    @property
    def nse(self) -> int:
        return self.indices[-2]

    @property
    def batch_shape(self) -> Shape:
        return self.shape[: self.n_batch]

    @property
    def sparse_shape(self) -> Shape:
        return self.shape[self.n_batch : self.n_batch + self.n_sparse]

    @property
    def dense_shape(self) -> Shape:
        return self.shape[self.n_batch + self.n_sparse :]

    @property
    def max_batch(self) -> Shape:
        """Batch dims of the two buffers broadcast together."""
        return tuple(map(broadcast_dim, self.data[: self.n_batch], self.indices[: self.n_batch]))


def layout(shape: Sequence[int], data: Sequence[int], indices: Sequence[int]) -> Layout:
    """Check that the buffers fit `shape` (the rules of jax's `_validate_bcoo`)."""
    shape, data, indices = tuple(shape), tuple(data), tuple(indices)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    if len(indices) < 2:
        raise ValueError(f"indices must have rank >= 2, got shape {indices}")
    lay = Layout(shape, data, indices)
    if lay.n_dense < 0:
        raise ValueError(f"indices shape {indices} does not fit an array of shape {shape}")
    for name, buf in (("data", data), ("indices", indices)):
        if any(b not in (1, s) for b, s in zip(buf[: lay.n_batch], shape[: lay.n_batch])):
            raise ValueError(f"{name} batch dimensions {buf[:lay.n_batch]} do not fit shape {shape}")
    if data[lay.n_batch :] != (lay.nse, *lay.dense_shape):
        raise ValueError(
            f"data shape {data} does not fit shape {shape} with nse={lay.nse}, "
            f"n_batch={lay.n_batch}, n_dense={lay.n_dense} (the buffers hold {lay.n_batch} batch, {lay.n_sparse} "
            f"sparse and {max(len(data) - 1 - lay.n_batch, 0)} dense dims)"
        )
    return lay



def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> Shape:
    """Numpy broadcasting of two shapes of equal rank."""
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(broadcast_dim(x, y))
    return tuple(out)


def todense(lay: Layout) -> Shape:
    return lay.shape


def extract_layout(arr: Sequence[int], indices: Sequence[int]) -> Layout:
    """The layout of the BCOO array with these `indices` and the shape of the dense `arr`."""
    arr, indices = tuple(arr), tuple(indices)
    n_batch = len(indices) - 2
    data = (*arr[:n_batch], indices[-2], *arr[n_batch + indices[-1] :])
    return layout(arr, data, indices)


def extract(lay: Layout) -> Shape:
    """Data extracted from a dense array at `lay`'s indices: full batch dims."""
    return (*lay.batch_shape, lay.nse, *lay.dense_shape)


def _check_target(shape: Shape, n_batch: int, n_dense: int) -> None:
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > len(shape):
        raise ValueError(f"invalid layout n_batch={n_batch}, n_dense={n_dense} for shape {shape}")


def _check_nse(nse: int) -> None:
    if nse < 0:
        raise ValueError(f"nse must be non-negative, got {nse}")


def _check_dims(dims: Sequence[int], rank: int, what: str) -> None:
    if len(set(dims)) != len(dims) or not all(0 <= d < rank for d in dims):
        raise ValueError(f"{what} {tuple(dims)} must be distinct dimensions in [0, {rank})")


def fromdense(shape: Sequence[int], nse: int, n_batch: int, n_dense: int) -> tuple[Shape, Shape]:
    shape = tuple(shape)
    n_sparse = len(shape) - n_batch - n_dense
    _check_target(shape, n_batch, n_dense)
    _check_nse(nse)
    return (*shape[:n_batch], nse, *shape[n_batch + n_sparse :]), (*shape[:n_batch], nse, n_sparse)


def sort_indices(lay: Layout) -> tuple[Shape, Shape]:
    if lay.n_sparse == 0:
        return lay.data, lay.indices
    return (*lay.max_batch, *lay.data[lay.n_batch :]), lay.indices


def sum_duplicates(lay: Layout, nse: int) -> tuple[Shape, Shape]:
    _check_nse(nse)
    return (
        (*lay.max_batch, nse, *lay.dense_shape),
        (*lay.indices[: lay.n_batch], nse, lay.n_sparse),
    )


def transpose(lay: Layout, permutation: Sequence[int]) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) after transposing; batch, sparse and dense dims may not mix."""
    nb, ns = lay.n_batch, lay.n_sparse
    perm = tuple(permutation)
    if sorted(perm) != list(range(len(lay.shape))):
        raise TypeError(f"transpose permutation {perm} is not a permutation of {len(lay.shape)} dimensions")
    if sorted(perm[:nb]) != list(range(nb)):
        raise NotImplementedError(
            f"transpose permutation cannot permute batch axes with non-batch axes; got {perm} with n_batch={nb}"
        )
    if sorted(perm[nb + ns :]) != list(range(nb + ns, len(perm))):
        raise NotImplementedError(
            f"transpose permutation cannot permute dense axes with non-dense axes; got {perm} "
            f"with n_dense={lay.n_dense}"
        )
    dense = [p - ns + 1 for p in perm[nb + ns :]]
    return (
        tuple(lay.shape[p] for p in perm),
        tuple(lay.data[p] for p in (*perm[:nb], nb, *dense)),
        tuple(lay.indices[p] for p in (*perm[:nb], nb, nb + 1)),
    )


def squeeze(lay: Layout, dimensions: Sequence[int]) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) after squeezing size-1 `dimensions` (non-negative)."""
    nb, ns = lay.n_batch, lay.n_sparse
    _check_dims(dimensions, len(lay.shape), "squeeze dimensions")
    dims = set(dimensions)
    if any(lay.shape[d] != 1 for d in dims):
        raise ValueError(
            "cannot select an axis to squeeze out which has size not equal to one, "
            f"got shape={lay.shape} and dimensions={tuple(dimensions)}"
        )
    squeezed_sparse = any(nb <= d < nb + ns for d in dims)
    kept_sparse = sum(1 for d in range(nb, nb + ns) if d not in dims)
    data_batch = lay.max_batch if squeezed_sparse and kept_sparse == 0 else lay.data[:nb]
    data = [s for i, s in enumerate(data_batch) if i not in dims]
    data += [lay.nse] + [s for i, s in enumerate(lay.dense_shape) if nb + ns + i not in dims]
    indices = [s for i, s in enumerate(lay.indices[:nb]) if i not in dims] + [lay.nse, kept_sparse]
    shape = tuple(s for i, s in enumerate(lay.shape) if i not in dims)
    return shape, tuple(data), tuple(indices)


def slice_shapes(
    lay: Layout, start: Sequence[int], limit: Sequence[int], strides: Sequence[int]
) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) of `lax.slice` applied to the array, before any deduplication."""
    nb, ns = lay.n_batch, lay.n_sparse
    if not len(start) == len(limit) == len(strides) == len(lay.shape):
        raise ValueError(f"slice start, limit and strides must each have {len(lay.shape)} entries")
    if not all(0 <= s <= e <= n and st > 0 for s, e, st, n in zip(start, limit, strides, lay.shape)):
        raise ValueError(f"invalid slice start={tuple(start)}, limit={tuple(limit)}, strides={tuple(strides)} "
                         f"for shape {lay.shape}")
    shape = tuple((e - s + st - 1) // st for s, e, st in zip(start, limit, strides, strict=True))

    def batch(buf: Shape) -> list[int]:
        return [shape[i] if buf[i] == lay.shape[i] else 1 for i in range(nb)]

    data_batch = batch(lay.data)
    if ns:
        data_batch = list(map(broadcast_dim, data_batch, batch(lay.indices)))
    data = (*data_batch, lay.nse, *shape[nb + ns :])
    indices = (*batch(lay.indices), lay.nse, ns)
    return shape, data, indices


def gather(lay: Layout, slice_sizes: Sequence[int], windows: int) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) of `windows` windows of `slice_sizes` cut from the array.

    The windows become a new leading batch dim; a batch dim that a buffer broadcasts stays 1.
    """
    nb, ns = lay.n_batch, lay.n_sparse
    sizes = tuple(slice_sizes)
    if len(sizes) != len(lay.shape) or not all(0 <= s <= n for s, n in zip(sizes, lay.shape)):
        raise ValueError(f"slice_sizes {sizes} do not fit an array of shape {lay.shape}")
    if windows < 0:
        raise ValueError(f"the number of windows must be non-negative, got {windows}")

    def batch(buf: Shape) -> list[int]:
        return [sizes[i] if buf[i] == lay.shape[i] else 1 for i in range(nb)]

    data_batch = batch(lay.data)
    if ns:
        data_batch = list(map(broadcast_dim, data_batch, batch(lay.indices)))
    data = (windows, *data_batch, lay.nse, *sizes[nb + ns :])
    indices = (windows, *batch(lay.indices), lay.nse, ns)
    return (windows, *sizes), data, indices


class ReduceSumPlan(NamedTuple):
    """How reduce_sum treats each reduced batch axis: `scale` (both buffers broadcast) or `fold` into nse."""

    scale: tuple[int, ...]
    fold: tuple[int, ...]
    batch: Shape
    data: Shape
    indices: Shape
    shape: Shape


def reduce_sum(lay: Layout, axes: Sequence[int]) -> ReduceSumPlan:
    nb, ns = lay.n_batch, lay.n_sparse
    _check_dims(axes, len(lay.shape), "reduce_sum axes")
    axes = sorted(set(axes))
    data_batch = lay.max_batch if ns > 0 else lay.data[:nb]
    scale = tuple(a for a in axes if a < nb and data_batch[a] == 1 and lay.indices[a] == 1)
    fold = tuple(a for a in axes if a < nb and a not in scale)
    kept = [a for a in range(nb) if a not in axes]
    batch = tuple(broadcast_dim(data_batch[a], lay.indices[a]) for a in kept)
    nse = lay.nse * math.prod(lay.shape[a] for a in fold)
    dense = tuple(lay.shape[d] for d in range(nb + ns, len(lay.shape)) if d not in axes)
    n_sparse = sum(1 for d in range(nb, nb + ns) if d not in axes)
    shape = tuple(s for i, s in enumerate(lay.shape) if i not in axes)
    return ReduceSumPlan(scale, fold, batch, (*batch, nse, *dense), (*batch, nse, n_sparse), shape)


def reduce_sum_zeroes_data(lay: Layout, axes: Sequence[int]) -> bool:
    """Whether reduce_sum zeroes the data of padding entries: only when every sparse dim is summed
    (no index is left to mark padding); otherwise padding stays padding in the kept indices."""
    return lay.n_sparse > 0 and all(d in axes for d in range(lay.n_batch, lay.n_batch + lay.n_sparse))


class ReshapePlan(NamedTuple):
    batch: Shape
    sparse: Shape
    dense: Shape
    batch_perm: tuple[int, ...]
    sparse_perm: tuple[int, ...]
    dense_perm: tuple[int, ...]


def reshape(lay: Layout, new_sizes: Sequence[int], dimensions: Sequence[int] | None) -> ReshapePlan:
    """Split `new_sizes` into batch, sparse and dense parts (the rules of jax's bcoo_reshape)."""
    nb, ns = lay.n_batch, lay.n_sparse
    new_sizes = tuple(new_sizes)
    if any(n < 0 for n in new_sizes):
        raise ValueError(f"reshape new_sizes {new_sizes} has a negative size")
    dims = tuple(range(len(lay.shape))) if dimensions is None else tuple(dimensions)
    transpose(lay, dims)
    if math.prod(new_sizes) != math.prod(lay.shape):
        raise TypeError(f"reshape total size must be unchanged, got new_sizes {new_sizes} for shape {lay.shape}")
    # The new batch dims are the longest prefix of new_sizes holding the batch elements, the new
    # sparse dims the longest run after them holding the sparse ones (jax's rule, which also
    # decides where size-1 dims go); with a size-0 dim several splits multiply out, so each is tried.
    parts = (math.prod(lay.batch_shape), math.prod(lay.sparse_shape), math.prod(lay.dense_shape))
    n = len(new_sizes)
    firsts = [i for i in range(n + 1) if math.prod(new_sizes[:i]) == parts[0]]
    if not firsts:
        raise ValueError(
            "bcoo_reshape: new shape cannot mix batch and sparse dimensions; "
            f"got shape={lay.shape} new_shape={new_sizes} with n_batch={nb}"
        )
    splits = [(i1, i2) for i1 in firsts for i2 in range(i1, n + 1)
              if math.prod(new_sizes[i1:i2]) == parts[1] and math.prod(new_sizes[i2:]) == parts[2]]
    if not splits:
        raise ValueError(
            "bcoo_reshape: new shape cannot mix sparse and dense dimensions; "
            f"got shape={lay.shape} new_shape={new_sizes} with n_dense={lay.n_dense}"
        )
    i1, i2 = max(splits)
    return ReshapePlan(
        new_sizes[:i1],
        new_sizes[i1:i2],
        new_sizes[i2:],
        dims[:nb],
        tuple(d - nb for d in dims[nb : nb + ns]),
        tuple(d - nb - ns for d in dims[nb + ns :]),
    )


def reshape_buffers(lay: Layout, plan: ReshapePlan) -> tuple[Shape, Shape]:
    return (*plan.batch, lay.nse, *plan.dense), (*plan.batch, lay.nse, len(plan.sparse))


def update_layout(lay: Layout, n_batch: int, n_dense: int) -> tuple[Shape, Shape]:
    """Buffers after moving dims between batch, sparse and dense (the steps of jax's bcoo_update_layout)."""
    nb, nd, nse = lay.n_batch, lay.n_dense, lay.nse
    _check_target(lay.shape, n_batch, n_dense)
    if n_dense < nd:
        nse *= math.prod(lay.dense_shape[: nd - n_dense])
    if n_batch < nb:
        nse *= math.prod(lay.batch_shape[n_batch:])
    n_sparse = len(lay.shape) - n_batch - n_dense
    return (*lay.shape[:n_batch], nse, *lay.shape[n_batch + n_sparse :]), (*lay.shape[:n_batch], nse, n_sparse)


class MultiplyPlan(NamedTuple):
    """multiply_sparse after both operands have `n_batch` batch dims.

    `driver` is `lhs` or `rhs` when that operand's sparse shape is the output's
    (each of its entries then meets at most one entry of the other, so the
    output has its nse), or `pairs` when both broadcast along sparse dims.
    """

    n_batch: int
    driver: str
    batch: Shape
    lhs_nse: int
    rhs_nse: int
    shape: Shape
    data: Shape
    indices: Shape


def multiply_sparse(lhs: Layout, rhs: Layout, driver: str | None = None) -> MultiplyPlan:
    if len(lhs.shape) != len(rhs.shape):
        raise TypeError(
            "bcoo_multiply_sparse: arrays must have same number of dimensions, "
            f"got {lhs.shape}, {rhs.shape}"
        )
    if lhs.n_dense != rhs.n_dense:
        raise NotImplementedError(
            "bcoo_multiply_sparse: arrays with differing numbers of dense dimensions: "
            f"n_dense={lhs.n_dense} and n_dense={rhs.n_dense}"
        )
    shape = broadcast_shapes(lhs.shape, rhs.shape)
    nb = min(lhs.n_batch, rhs.n_batch)
    lhs_nse = lhs.nse * math.prod(lhs.batch_shape[nb:])
    rhs_nse = rhs.nse * math.prod(rhs.batch_shape[nb:])
    n_sparse = len(shape) - nb - lhs.n_dense
    out_sparse = shape[nb : nb + n_sparse]
    lhs_full = lhs.shape[nb : nb + n_sparse] == out_sparse
    rhs_full = rhs.shape[nb : nb + n_sparse] == out_sparse
    if driver is None:
        if lhs_full and (not rhs_full or lhs_nse <= rhs_nse):
            driver = "lhs"
        elif rhs_full:
            driver = "rhs"
        else:
            driver = "pairs"
    elif (driver == "lhs" and not lhs_full) or (driver == "rhs" and not rhs_full):
        raise ValueError(f"multiply_sparse: the {driver} operand broadcasts, so it cannot drive the output")
    nse = {"lhs": lhs_nse, "rhs": rhs_nse, "pairs": lhs_nse * rhs_nse}[driver]
    batch = shape[:nb]
    return MultiplyPlan(
        nb, driver, batch, lhs_nse, rhs_nse, shape,
        (*batch, nse, *shape[nb + n_sparse :]), (*batch, nse, n_sparse),
    )


def multiply_dense(lay: Layout, v: Sequence[int]) -> Shape:
    """The data shape of sparse * dense, where the dense operand broadcasts to the sparse shape."""
    v = tuple(v)
    if not v:
        return lay.data
    padded = (1,) * (len(lay.shape) - len(v)) + v
    if len(v) > len(lay.shape) or any(a not in (1, b) for a, b in zip(padded, lay.shape)):
        raise NotImplementedError(
            "multiplication between sparse and dense is only implemented for cases "
            f"where the output shape matches the sparse matrix shape. Got shape={lay.shape}, v.shape={v}"
        )
    batch = tuple(map(broadcast_dim, lay.data, lay.indices, padded[: lay.n_batch]))
    return (*batch, *lay.data[lay.n_batch :])


# ---------------------------------------------------------------------------
# The BCOO operand a backend_config describes


def operand(config: Mapping[str, Any], data: Shape, indices: Shape) -> Layout:
    """The layout of the op's BCOO operand; `n_batch` and `n_dense` in the config must match it."""
    lay = layout(config["shape"], data, indices)
    if (config["n_batch"], config["n_dense"]) != (lay.n_batch, lay.n_dense):
        raise ValueError(
            f"n_batch={config['n_batch']} and n_dense={config['n_dense']} do not describe the operands: "
            f"indices of shape {lay.indices} in an array of shape {lay.shape} have n_batch={lay.n_batch}, "
            f"n_dense={lay.n_dense}"
        )
    return lay


# ---------------------------------------------------------------------------
# Products (bcoo_dot_general and its sampled and sparse x sparse forms)

DotDims = tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]


def dot_dims(dimension_numbers: Any) -> DotDims:
    """`((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))` as tuples of ints."""
    try:
        (lc, rc), (lb, rb) = dimension_numbers
        return (tuple(map(int, lc)), tuple(map(int, rc))), (tuple(map(int, lb)), tuple(map(int, rb)))
    except (TypeError, ValueError) as e:
        raise TypeError("dimension_numbers must be ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), "
                        f"got {dimension_numbers!r}") from e


def free_dims(rank: int, *used: Sequence[int]) -> tuple[int, ...]:
    """The dims of a rank-`rank` operand of a dot that are neither contracted nor batched, ascending."""
    taken = {d for dims in used for d in dims}
    return tuple(d for d in range(rank) if d not in taken)


def dot_shape(lhs: Sequence[int], rhs: Sequence[int], dimension_numbers: Any) -> Shape:
    """The shape of `lax.dot_general(lhs, rhs, dimension_numbers)`: batch dims, lhs free dims, rhs free dims.

    Raises TypeError with lax.dot_general's checks (counts, ranges, repeats, sizes).
    """
    lhs, rhs = tuple(lhs), tuple(rhs)
    (lc, rc), (lb, rb) = dot_dims(dimension_numbers)
    for side, shape, c, b in (("lhs", lhs, lc, lb), ("rhs", rhs, rc, rb)):
        if not all(0 <= d < len(shape) for d in (*c, *b)):
            raise TypeError(f"dot_general requires {side} dimension numbers to be nonnegative and less than the "
                            f"number of axes of the {side} value, got {side}_batch of {b} and {side}_contracting "
                            f"of {c} for {side} of rank {len(shape)}")
        if len(set((*c, *b))) != len(c) + len(b):
            raise TypeError(f"dot_general requires {side} batch and contracting dimensions to be distinct, got "
                            f"{side}_batch of {b} and {side}_contracting of {c}")
    if len(lb) != len(rb):
        raise TypeError(f"dot_general requires equal numbers of lhs_batch and rhs_batch dimensions, got "
                        f"lhs_batch {lb} and rhs_batch {rb}")
    if len(lc) != len(rc):
        raise TypeError(f"dot_general requires equal numbers of lhs_contracting and rhs_contracting dimensions, "
                        f"got {lc} and {rc}")
    if [lhs[d] for d in lb] != [rhs[d] for d in rb]:
        raise TypeError(f"dot_general requires lhs batch dimensions and rhs batch dimensions to have the same "
                        f"shape, got {tuple(lhs[d] for d in lb)} and {tuple(rhs[d] for d in rb)}")
    if [lhs[d] for d in lc] != [rhs[d] for d in rc]:
        raise TypeError(f"dot_general requires contracting dimensions to have the same shape, got "
                        f"{tuple(lhs[d] for d in lc)} and {tuple(rhs[d] for d in rc)}")
    return (*(lhs[d] for d in lb), *(lhs[d] for d in free_dims(len(lhs), lc, lb)),
            *(rhs[d] for d in free_dims(len(rhs), rc, rb)))


def check_permutation(permutation: Sequence[int], rank: int) -> tuple[int, ...]:
    perm = tuple(permutation)
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"permutation {perm} is not a permutation of {rank} dimensions")
    return perm


def dot_general_sampled(a: Sequence[int], b: Sequence[int], indices: Sequence[int], dimension_numbers: Any,
                        permutation: Sequence[int] | None = None) -> tuple[Shape, Layout]:
    """(data shape, layout of the sampled array) of `dot_general(a, b)`, its dims permuted (sampled
    dim i is dot dim `permutation[i]`), read at `indices`: the data of `bcoo_extract`."""
    out = dot_shape(a, b, dimension_numbers)
    perm = check_permutation(range(len(out)) if permutation is None else permutation, len(out))
    lay = extract_layout(tuple(out[p] for p in perm), indices)
    return extract(lay), lay


class SpdotPlan(NamedTuple):
    """Sparse x sparse dot_general: the output array and its buffers.

    Output batch dims are the batch pairs, then the free batch dims of lhs, then those of rhs;
    its sparse dims the free sparse dims of lhs, then those of rhs. `bound` is JAX's nse (every
    pair of entries may give a distinct output position, at most the sparse size).
    """

    shape: Shape
    batch: Shape
    n_batch: int
    n_sparse: int
    bound: int
    data: Shape
    indices: Shape


def spdot_general(lhs: Layout, rhs: Layout, dimension_numbers: Any, nse: int | None = None) -> SpdotPlan:
    """The output of `bcoo_dot_general` of two BCOO arrays (jax's bcoo_spdot_general rules)."""
    out = dot_shape(lhs.shape, rhs.shape, dimension_numbers)
    (lc, rc), (lb, rb) = dot_dims(dimension_numbers)
    if lhs.n_dense or rhs.n_dense:
        raise NotImplementedError("bcoo_spdot_general with dense dimensions.")
    if any(d >= lhs.n_batch for d in lb) or any(d >= rhs.n_batch for d in rb):
        raise NotImplementedError("bcoo_spdot_general: batch_dims must correspond to batch dimensions of the "
                                  "sparse representation.")
    for lay, c in ((lhs, lc), (rhs, rc)):
        if any(not lay.n_batch <= d < lay.n_batch + lay.n_sparse for d in c):
            raise NotImplementedError("bcoo_spdot_general only supports contraction of sparse indices.")
    if rhs.n_batch > len(rb) and lhs.n_sparse > len(lc):
        raise ValueError("bcoo_spdot_general: cannot have unused batch dims on rhs with unused sparse dims on lhs.")
    lfb = free_dims(lhs.n_batch, lb)
    rfb = free_dims(rhs.n_batch, rb)
    n_batch = len(lb) + len(lfb) + len(rfb)
    n_sparse = lhs.n_sparse + rhs.n_sparse - 2 * len(lc)
    bound = (lhs.nse if lhs.n_sparse > len(lc) else 1) * (rhs.nse if rhs.n_sparse > len(rc) else 1)
    bound = min(bound, math.prod(out[n_batch:]))
    nse = bound if nse is None else nse
    _check_nse(nse)
    batch = (*(lhs.shape[d] for d in lb), *(lhs.max_batch[d] for d in lfb), *(rhs.max_batch[d] for d in rfb))
    return SpdotPlan(out, batch, n_batch, n_sparse, bound, (*batch, nse), (*batch, nse, n_sparse))


def spdot_general_sampled(lhs: Layout, rhs: Layout, indices: Sequence[int], dimension_numbers: Any,
                          permutation: Sequence[int] | None = None) -> tuple[Shape, Layout]:
    """(data shape, sampled layout) of the product of two BCOO arrays without dense dims, its dims
    permuted, read at `indices` (the transpose of `spdot_general`)."""
    if lhs.n_dense or rhs.n_dense:
        raise NotImplementedError("a sampled sparse x sparse product of arrays with dense dimensions")
    data, lay = dot_general_sampled(lhs.shape, rhs.shape, indices, dimension_numbers, permutation)
    if lay.n_dense:
        raise NotImplementedError("a sampled sparse x sparse product with dense output dimensions")
    return data, lay


# ---------------------------------------------------------------------------
# Structure ops (concatenate, broadcast_in_dim, dynamic_slice, conv)


class BroadcastPlan(NamedTuple):
    """bcoo_broadcast_in_dim: the new layout and where the operand's sparse dims go among the new ones."""

    shape: Shape
    n_batch: int
    n_dense: int
    sparse_cols: tuple[int, ...]
    data: Shape
    indices: Shape


def broadcast_in_dim(lay: Layout, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> BroadcastPlan:
    """The rules of jax's bcoo_broadcast_in_dim: new dims before the first sparse (or dense) dim are
    batch dims, new dims among the sparse ones must have size 1."""
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    nb, ns, nd = lay.n_batch, lay.n_sparse, lay.n_dense
    if len(lay.shape) != len(dims):
        raise ValueError(f"spinfo.shape={lay.shape} and broadcast_dimensions={dims} must have the same length")
    if any(s < 0 for s in shape):
        raise ValueError(f"broadcast_in_dim shape {shape} has a negative dimension")
    batch, sparse, dense = dims[:nb], dims[nb : nb + ns], dims[nb + ns :]
    if max(batch, default=0) > min(sparse, default=len(shape)):
        raise ValueError("Cannot mix batch and sparse dimensions during broadcast_in_dim")
    if max(sparse, default=0) > min(dense, default=len(shape)):
        raise ValueError("Cannot mix sparse and dense dimensions during broadcast_in_dim")
    if len(set(dims)) != len(dims) or not all(0 <= d < len(shape) for d in dims) or list(dims) != sorted(dims):
        raise TypeError(f"broadcast_in_dim broadcast_dimensions must be strictly increasing dimensions of the "
                        f"result shape {shape}, got {dims}")
    if any(lay.shape[i] not in (1, shape[d]) for i, d in enumerate(dims)):
        raise TypeError(f"broadcast_in_dim operand dimension sizes must either be 1, or be equal to their "
                        f"corresponding dimensions in the target broadcast shape; got operand of shape {lay.shape}, "
                        f"target broadcast shape {shape}, broadcast_dimensions {dims}")
    n_batch = min(dims[nb:], default=len(shape))
    n_dense = nd and len(shape) - min(dense)
    n_sparse = len(shape) - n_batch - n_dense
    if math.prod(lay.sparse_shape) != math.prod(shape[n_batch : n_batch + n_sparse]):
        raise NotImplementedError("Adding sparse dimensions with lengths != 1")
    if any(lay.shape[d] != shape[dims[d]] for d in range(nb, nb + ns)):
        raise NotImplementedError("Broadcasting sparse dimensions of size 1 to a larger size")
    return BroadcastPlan(shape, n_batch, n_dense, tuple(d - n_batch for d in sparse),
                         (*shape[:n_batch], lay.nse, *shape[n_batch + n_sparse :]),
                         (*shape[:n_batch], lay.nse, n_sparse))


def concatenate(lays: Sequence[Layout], dimension: int) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) of the concatenation of BCOO arrays of one layout along `dimension`
    (batch: nse is the largest operand's; sparse: the operands' entries one after another)."""
    if not lays:
        raise ValueError("concatenate needs at least one operand")
    first = lays[0]
    rank = len(first.shape)
    if not 0 <= dimension < rank:
        raise ValueError(f"concatenate dimension {dimension} out of range for arrays of rank {rank}")
    for lay in lays:
        if (lay.n_batch, lay.n_dense, len(lay.shape)) != (first.n_batch, first.n_dense, rank):
            raise ValueError(f"concatenate operands need one layout, got shapes {[x.shape for x in lays]} with "
                             f"n_batch {[x.n_batch for x in lays]} and n_dense {[x.n_dense for x in lays]}")
        if any(a != b for d, (a, b) in enumerate(zip(lay.shape, first.shape)) if d != dimension):
            raise TypeError(f"Cannot concatenate arrays with shapes that differ in dimensions other than the one "
                            f"being concatenated: concatenating along dimension {dimension} for shapes "
                            f"{', '.join(str(x.shape) for x in lays)}.")
    nb, ns = first.n_batch, first.n_sparse
    if dimension >= nb + ns:
        raise NotImplementedError("Concatenation along dense dimensions.")
    shape = tuple(sum(x.shape[d] for x in lays) if d == dimension else s for d, s in enumerate(first.shape))
    nse = max(x.nse for x in lays) if dimension < nb else sum(x.nse for x in lays)
    return shape, (*shape[:nb], nse, *shape[nb + ns :]), (*shape[:nb], nse, ns)


def dynamic_slice(lay: Layout, slice_sizes: Sequence[int]) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) of `lax.dynamic_slice` applied to the array (before deduplication)."""
    sizes = tuple(slice_sizes)
    if len(sizes) != len(lay.shape):
        raise ValueError(f"bcoo_dynamic_slice: slice_sizes must have size mat.ndim={len(lay.shape)}, got {sizes}")
    if not all(0 <= s <= n for s, n in zip(sizes, lay.shape)):
        raise TypeError(f"slice_sizes must be less than or equal to operand shape, got slice_sizes {sizes} for "
                        f"operand shape {lay.shape}")
    return slice_shapes(lay, (0,) * len(sizes), sizes, (1,) * len(sizes))


def conv(lhs: Layout, rhs: Layout, padding: Sequence[int]) -> tuple[Shape, Shape, Shape]:
    """(shape, data, indices) of the 1-d convolution (cross-correlation) of two BCOO arrays with one
    sparse dim and equal batch shapes: one entry per pair of entries, at `i_lhs + padding[0] - i_rhs`."""
    if len(padding) != 2:
        raise ValueError(f"conv padding must be (low, high), got {tuple(padding)}")
    for lay in (lhs, rhs):
        if lay.n_sparse != 1 or lay.n_dense:
            raise NotImplementedError(f"bcoo conv of an array of shape {lay.shape} with n_sparse={lay.n_sparse}, "
                                      f"n_dense={lay.n_dense}: only one sparse dim and no dense dims")
    if lhs.batch_shape != rhs.batch_shape:
        raise ValueError(f"bcoo conv operands need one batch shape, got {lhs.batch_shape} and {rhs.batch_shape}")
    size = max(0, lhs.shape[-1] + padding[0] + padding[1] - rhs.shape[-1] + 1)
    batch = lhs.batch_shape
    nse = lhs.nse * rhs.nse
    return (*batch, size), (*batch, nse), (*batch, nse, 1)


