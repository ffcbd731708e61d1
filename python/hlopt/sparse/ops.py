"""The jax primitives behind `hlopt.sparse`: one per `hlopt.bcoo.*` op.

Each primitive computes its result shapes with `hlopt.passes.bcoo_shapes` (the
same rules the `lower-bcoo` pass relies on), lowers to its annotation, and has
JVP rules; the ops that are linear in `data` (or in a dense operand) also have
transpose rules so that `jax.grad` works. vmap turns the mapped axis into a
leading batch dim (`BATCHED_PARAMS`).

Operands are `(data, indices, ...)`; `extract` takes `(arr, indices)`, the dense
array in the data slot. Every BCOO operand comes with the parameters `shape`,
`indices_sorted` and `unique_indices`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.interpreters import ad, batching

from hlopt.passes import bcoo_shapes as shapes
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

PREFIX = "hlopt.bcoo."


def _aval(shape: Sequence[int], dtype: Any) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(tuple(int(s) for s in shape), dtype)


def _layout(data: Any, indices: Any, shape: Sequence[int]) -> shapes.Layout:
    return shapes.layout(shape, data.shape, indices.shape)


def _zero_tangent(x: Any) -> ad.Zero:
    return ad.Zero(_aval(np.shape(x), x.dtype).to_tangent_aval())


def _config(name: str, avals_in: Sequence[Any], params: dict[str, Any]) -> dict[str, Any]:
    """`backend_config` of a BCOO op: shape, n_batch, n_dense, flags and the op's own parameters.

    For `fromdense` and `update_layout`, `n_batch` and `n_dense` are the op's
    parameters (the layout it produces), as in JAX's experimental sparse module.
    """
    config = {k: v for k, v in params.items() if v is not None and k != "index_dtype"}
    if name in ("extract", "fromdense"):
        config["shape"] = tuple(avals_in[0].shape)
    if name != "fromdense":
        shape, indices = config["shape"], avals_in[1]
        n_batch = len(indices.shape) - 2
        config.setdefault("n_batch", n_batch)
        config.setdefault("n_dense", len(shape) - n_batch - indices.shape[-1])
    config.setdefault("indices_sorted", False)
    config.setdefault("unique_indices", False)
    return config


def _abstract_eval(name: str) -> Callable[..., Any]:
    """Result avals of an op: shapes from `bcoo_shapes.result_shapes` (the rule lower-bcoo checks
    against), data of the data operand's dtype, indices of the index operand's (or `index_dtype`)."""
    def abstract_eval(*operands, **params):
        if name == "gather" and not jnp.issubdtype(operands[2].dtype, jnp.integer):
            raise TypeError(f"bcoo gather: start indices must be integers, got {operands[2].dtype}")
        out = shapes.result_shapes(name, _config(name, operands, params), [x.shape for x in operands])
        dtypes = [operands[0].dtype, params["index_dtype"] if name == "fromdense" else operands[1].dtype]
        if name == "multiply_sparse":
            dtypes[0] = jnp.result_type(operands[0].dtype, operands[2].dtype)
        avals = [_aval(s, d) for s, d in zip(out, dtypes)]
        return avals if len(avals) > 1 else avals[0]

    return abstract_eval


def _define(name: str, abstract_eval: Callable[..., Any], *, multiple_results: bool = True) -> jex_core.Primitive:
    def lowering(ctx, *operands, **params):
        return emit_annotation(PREFIX + name, operands, result_types(ctx), _config(name, ctx.avals_in, params))

    prim = annotation_primitive(f"bcoo_{name}", abstract_eval, lowering, multiple_results=multiple_results)
    batching.primitive_batchers[prim] = _batch_rule(prim, name)  # fromdense replaces it below
    return prim


def _to_front(x: Any, bdim: int | None) -> jax.Array:
    """The mapped axis of a buffer as a new leading batch dim (size 1 when the buffer is not mapped)."""
    return jnp.expand_dims(x, 0) if bdim is None else jnp.moveaxis(x, bdim, 0)


def _from_front(outs: Any, size: int, multiple: bool) -> tuple[Any, Any]:
    """Results with a leading batch dim: mapped along 0, or (size 1) the same for every example."""
    def split(x):
        return (x, 0) if x.shape[0] == size else (x[0], None)

    if not multiple:
        return split(outs)
    pairs = [split(x) for x in outs]
    return [x for x, _ in pairs], [d for _, d in pairs]


# op name -> its parameters for an array with one more leading batch dim of `size`
BATCHED_PARAMS: dict[str, Callable[[dict[str, Any], int], dict[str, Any]]] = {
    "todense": lambda p, size: p,
    "sort_indices": lambda p, size: p,
    "sum_duplicates": lambda p, size: p,
    "transpose": lambda p, size: {**p, "permutation": (0, *(x + 1 for x in p["permutation"]))},
    "squeeze": lambda p, size: {**p, "dimensions": tuple(d + 1 for d in p["dimensions"])},
    "slice": lambda p, size: {**p, "start_indices": (0, *p["start_indices"]), "limit_indices": (size, *p["limit_indices"]),
                              "strides": (1, *p["strides"])},
    "reduce_sum": lambda p, size: {**p, "axes": tuple(a + 1 for a in p["axes"])},
    "reshape": lambda p, size: {**p, "new_sizes": (size, *p["new_sizes"]), "dimensions": None if p["dimensions"] is None
                                else (0, *(d + 1 for d in p["dimensions"]))},
    "update_layout": lambda p, size: {**p, "n_batch": p["n_batch"] + 1},
    "multiply_dense": lambda p, size: p,
    "multiply_sparse": lambda p, size: {**p, "rhs_shape": (size, *p["rhs_shape"])},
    "extract": lambda p, size: p,
}


def _batch_rule(prim: jex_core.Primitive, name: str) -> Callable:
    """vmap of an op: the mapped axis of every operand becomes a leading batch dim."""
    def rule(args, dims, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        batched = [_to_front(a, d) for a, d in zip(args, dims)]
        if name == "multiply_dense":  # the dense operand, brought to the batched array's rank
            v = batched[2]
            batched[2] = jnp.reshape(v, (v.shape[0],) + (1,) * (len(params["shape"]) - v.ndim + 1) + v.shape[1:])
        if name == "extract":  # the dense array defines the shape: it needs every example
            batched[0] = jnp.broadcast_to(batched[0], (size, *batched[0].shape[1:]))
        if "shape" in params:
            params = {**params, "shape": (size, *params["shape"])}
        outs = prim.bind(*batched, **BATCHED_PARAMS[name](params, size))
        return _from_front(outs, size, prim.multiple_results)

    return rule


def _sum_to_shape(x: jax.Array, shape: Sequence[int]) -> jax.Array:
    """Sum `x` over the dims that `shape` (same rank, or trailing dims) has as 1 or lacks."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    x = x.sum(tuple(range(lead))) if lead else x
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
    return x.sum(axes, keepdims=True) if axes else x


def _ct(ct: Any, aval_like: Any) -> jax.Array:
    return jnp.zeros(aval_like.shape, aval_like.dtype) if type(ct) is ad.Zero else ct


def _primal_aval(x: Any) -> Any:
    return x.aval if ad.is_undefined_primal(x) else x


# ---------------------------------------------------------------------------
# todense / extract: mutual transposes


_todense_abstract = _abstract_eval("todense")
todense_p = _define("todense", _todense_abstract, multiple_results=False)


_extract_abstract = _abstract_eval("extract")
extract_p = _define("extract", _extract_abstract, multiple_results=False)


def todense(data: jax.Array, indices: jax.Array, shape: Sequence[int]) -> jax.Array:
    """The dense array of BCOO buffers (used by transpose rules)."""
    return todense_p.bind(data, indices, shape=tuple(shape), indices_sorted=False, unique_indices=False)


def extract(indices: jax.Array, arr: jax.Array, assume_unique: bool = True) -> jax.Array:
    """`arr` at each stored index of a BCOO array with these `indices` (0 at padding; without
    `assume_unique`, 0 also at every repeat of an index after its first occurrence)."""
    return extract_p.bind(arr, indices, assume_unique=bool(assume_unique))


def _todense_transpose(ct, data, indices, *, shape, **_):
    if ad.is_undefined_primal(indices):
        raise ValueError("Cannot transpose with respect to sparse indices")
    return [_sum_to_shape(extract(indices, _ct(ct, _aval(shape, data.aval.dtype))), data.aval.shape), None]


def _extract_transpose(ct, arr, indices, *, assume_unique):
    if ad.is_undefined_primal(indices):
        raise ValueError("Cannot transpose with respect to sparse indices")
    ct = _ct(ct, _extract_abstract(arr.aval, indices, assume_unique=assume_unique))
    if not assume_unique:  # only first occurrences read arr: 1 there, 0 at repeats and padding
        ct = ct * extract(indices, jnp.ones(arr.aval.shape, ct.dtype), assume_unique=False)
    return [todense(ct, indices, arr.aval.shape), None]


ad.defjvp(todense_p, lambda g, data, indices, **p: todense_p.bind(g, indices, **p), None)
ad.primitive_transposes[todense_p] = _todense_transpose
ad.defjvp(extract_p, lambda g, arr, indices, **p: extract_p.bind(g, indices, **p), None)
ad.primitive_transposes[extract_p] = _extract_transpose


# ---------------------------------------------------------------------------
# fromdense


fromdense_p = _define("fromdense", _abstract_eval("fromdense"))


def _fromdense_jvp(primals, tangents, **params):
    (mat,), (mat_dot,) = primals, tangents
    data, indices = fromdense_p.bind(mat, **params)
    data_dot = _zero_tangent(data) if type(mat_dot) is ad.Zero else extract(indices, mat_dot)
    return (data, indices), (data_dot, _zero_tangent(indices))


ad.primitive_jvps[fromdense_p] = _fromdense_jvp


def _fromdense_batch(args, dims, *, n_batch, **params):
    (mat,), (bdim,) = args, dims
    return fromdense_p.bind(jnp.moveaxis(mat, bdim, 0), n_batch=n_batch + 1, **params), (0, 0)


batching.primitive_batchers[fromdense_p] = _fromdense_batch


# ---------------------------------------------------------------------------
# Ops linear in data with indices that depend on indices only


def _data_linear_jvp(prim: jex_core.Primitive) -> Callable:
    def jvp(primals, tangents, **params):
        data, *rest = primals
        out_data, out_indices = prim.bind(data, *rest, **params)
        g = tangents[0]
        data_dot = _zero_tangent(out_data) if type(g) is ad.Zero else prim.bind(g, *rest, **params)[0]
        return (out_data, out_indices), (data_dot, _zero_tangent(out_indices))

    return jvp


def _selection_transpose(prim: jex_core.Primitive) -> Callable:
    """The transpose of an op each of whose output data elements is one input data element or 0.

    The op runs once more on the 1-based positions of the input data elements (0 stays 0), so
    each output element names its source; the cotangents are added into their sources (an input
    element broadcast to several outputs receives the sum of theirs).
    """
    def transpose(ct, data, *rest, **params):
        size = math.prod(data.shape)
        if size >= np.iinfo(np.int32).max and not jax.config.read("jax_enable_x64"):
            raise NotImplementedError(f"the gradient of {prim.name} needs jax_enable_x64 for "
                                      f"data with {size} elements")
        dtype = np.int32 if size < np.iinfo(np.int32).max else np.int64
        positions = jnp.arange(1, size + 1, dtype=dtype).reshape(data.shape)
        source = prim.bind(positions, *rest, **params)[0]
        targets = jnp.where(source == 0, size, source - 1).ravel()
        summed = jnp.zeros((size,), ct.dtype).at[targets].add(ct.ravel(), mode="drop")
        return summed.reshape(data.shape)

    return transpose


def _data_linear(name: str, transpose: Callable | None = None) -> jex_core.Primitive:
    """An op linear in data whose output indices depend on the indices only.

    `transpose(ct, data_aval, indices, *rest, **params)` is the data cotangent (`rest`: the
    op's other operands, not differentiable); None means the op only selects data elements
    (`_selection_transpose`).
    """
    abstract_eval = _abstract_eval(name)
    prim = _define(name, abstract_eval)
    ad.primitive_jvps[prim] = _data_linear_jvp(prim)
    transpose = transpose or _selection_transpose(prim)

    def rule(cts, data, *rest, **params):
        if any(map(ad.is_undefined_primal, rest)):
            raise ValueError("Cannot transpose with respect to sparse indices")
        out = abstract_eval(data.aval, *rest, **params)[0]
        ct = _ct(cts[0], out)
        return [transpose(ct, data.aval, *rest, **params), *(None for _ in rest)]

    ad.primitive_transposes[prim] = rule
    return prim


def _sum_duplicates_transpose(ct, data, indices, *, shape, nse, **_):
    """Each input entry receives the cotangent of the unique entry it was summed into."""
    lay = _layout(data, indices, shape)
    nb = lay.n_batch
    if lay.n_sparse == 0:
        first = ct[(slice(None),) * nb + (slice(0, 1),)] if nse else _zeros(ct.shape[:nb] + (1,) + ct.shape[nb + 1 :], ct.dtype)
        return _sum_to_shape(jnp.broadcast_to(first, (*first.shape[:nb], lay.nse, *first.shape[nb + 1 :])), data.shape)
    _, out_indices = sum_duplicates_p.bind(_zeros(data.shape, data.dtype), indices, shape=shape, nse=nse,
                                           indices_sorted=False, unique_indices=False)
    ones = jnp.ones(data.shape, data.dtype)
    looked_up, _ = multiply_sparse(ones, indices, ct, out_indices, shape, shape, driver="lhs")
    return _sum_to_shape(looked_up, data.shape)


def _transpose_transpose(ct, data, indices, *, shape, permutation, **_):
    lay = _layout(data, indices, shape)
    nb, ns = lay.n_batch, lay.n_sparse
    data_perm = [*permutation[:nb], nb, *(p - ns + 1 for p in permutation[nb + ns :])]
    return jnp.transpose(ct, np.argsort(data_perm))


def per_column(values: Sequence[int], indices: Any) -> jax.Array:
    """`values[k]` for index column k, with the rank of `indices` (no implicit rank promotion)."""
    return jnp.asarray(values, indices.dtype).reshape((1,) * (indices.ndim - 1) + (len(values),))


def _valid(indices: jax.Array, sizes: Sequence[int]) -> jax.Array:
    """True where every index of an entry lies in `[0, size)`."""
    return jnp.all((indices >= 0) & (indices < per_column(sizes, indices)), axis=-1)


def _expand_dense(mask: jax.Array, n_dense: int) -> jax.Array:
    return mask.reshape(*mask.shape, *(1,) * n_dense)


def _slice_transpose(ct, data, indices, *, shape, start_indices, limit_indices, strides, **_):
    lay = _layout(data, indices, shape)
    nb, ns = lay.n_batch, lay.n_sparse
    if ns:
        sl = [slice(None)] * nb
        for i in range(nb):
            if indices.shape[i] == lay.shape[i]:
                sl[i] = slice(start_indices[i], limit_indices[i], strides[i])
        idx = indices[tuple(sl)]
        st, lim, sd = (per_column(x[nb : nb + ns], idx) for x in (start_indices, limit_indices, strides))
        keep = jnp.all((idx >= st) & (idx < lim) & ((idx - st) % sd == 0), axis=-1)
        ct = jnp.where(_expand_dense(keep, lay.n_dense), ct, 0)
    sliced_shape = list(data.shape)
    index = []
    for i in range(len(data.shape)):
        d = i if i < nb else (None if i == nb else i + ns - 1)
        if d is not None and (i >= nb or data.shape[i] == lay.shape[i]):
            index.append(slice(start_indices[d], limit_indices[d], strides[d]))
            sliced_shape[i] = len(range(start_indices[d], limit_indices[d], strides[d]))
        else:
            index.append(slice(None))
    ct = _sum_to_shape(ct, sliced_shape)
    return jnp.zeros(data.shape, ct.dtype).at[tuple(index)].set(ct)


def _reduce_sum_transpose(ct, data, indices, *, shape, axes, **_):
    lay = _layout(data, indices, shape)
    plan = shapes.reduce_sum(lay, axes)
    nb, ns = lay.n_batch, lay.n_sparse
    axes = sorted(set(axes))
    kept = [a for a in range(nb) if a not in axes]
    scale = [a for a in range(nb) if a in plan.scale]
    order = [*kept, *plan.fold, *scale]
    target = [lay.shape[a] if a in plan.fold else 1 if a in plan.scale else plan.batch[kept.index(a)] for a in range(nb)]
    dense_kept = ct.shape[len(plan.batch) + 1 :]
    x = ct.reshape(*[target[a] for a in order], lay.nse, *dense_kept)
    x = jnp.transpose(x, [*np.argsort(order), *range(nb, x.ndim)])
    factor = math.prod(lay.shape[a] for a in plan.scale)
    if factor != 1:
        x = x * jnp.asarray(factor, x.dtype)
    if shapes.reduce_sum_zeroes_data(lay, axes):
        x = jnp.where(_expand_dense(_valid(indices, lay.sparse_shape), len(dense_kept)), x, 0)
    dense_axes = [a - ns + 1 for a in axes if a >= nb + ns]
    x = jnp.expand_dims(x, dense_axes)
    return _sum_to_shape(jnp.broadcast_to(x, (*x.shape[: nb + 1], *data.shape[nb + 1 :])), data.shape)


def _reshape_transpose(ct, data, indices, *, shape, new_sizes, dimensions, **_):
    lay = _layout(data, indices, shape)
    plan = shapes.reshape(lay, new_sizes, dimensions)
    nb = lay.n_batch
    if lay.n_sparse and not plan.sparse:
        ct = jnp.where(_expand_dense(_valid(indices, lay.sparse_shape), len(plan.dense)), ct, 0)
    perm = [*plan.batch_perm, nb, *(p + nb + 1 for p in plan.dense_perm)]
    permuted = [(*lay.batch_shape, lay.nse, *lay.dense_shape)[p] for p in perm]
    x = jnp.transpose(ct.reshape(permuted), np.argsort(perm))
    return _sum_to_shape(x, data.shape)


sort_indices_p = _data_linear("sort_indices")
sum_duplicates_p = _data_linear("sum_duplicates", _sum_duplicates_transpose)
transpose_p = _data_linear("transpose", _transpose_transpose)
squeeze_p = _data_linear("squeeze")
slice_p = _data_linear("slice", _slice_transpose)
reduce_sum_p = _data_linear("reduce_sum", _reduce_sum_transpose)
reshape_p = _data_linear("reshape", _reshape_transpose)
update_layout_p = _data_linear("update_layout")
gather_p = _data_linear("gather")


def _gather_batch(args, dims, *, shape, slice_sizes, **params):
    """vmap of gather: example s's windows read batch row s of the operand (one window list)."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    data, indices, starts = (_to_front(a, d) for a, d in zip(args, dims))
    windows = starts.shape[1]
    starts = jnp.broadcast_to(starts, (size, *starts.shape[1:]))
    rows = jnp.broadcast_to(jnp.arange(size, dtype=starts.dtype).reshape(size, 1, 1), (size, windows, 1))
    starts = jnp.concatenate([rows, starts], axis=2).reshape(size * windows, len(shape) + 1)
    outs = gather_p.bind(data, indices, starts, shape=(size, *shape), slice_sizes=(1, *slice_sizes), **params)
    return [x.reshape(size, windows, *x.shape[2:]) for x in outs], [0, 0]


batching.primitive_batchers[gather_p] = _gather_batch


# ---------------------------------------------------------------------------
# multiply_dense: bilinear in (data, v)


_multiply_dense_abstract = _abstract_eval("multiply_dense")
multiply_dense_p = _define("multiply_dense", _multiply_dense_abstract, multiple_results=False)


def _multiply_dense_transpose(ct, data, indices, v, *, shape, **params):
    if ad.is_undefined_primal(indices):
        raise ValueError("Cannot transpose with respect to sparse indices")
    if ad.is_undefined_primal(data):
        ct = _ct(ct, _multiply_dense_abstract(data.aval, indices, v, shape=shape))
        return [_sum_to_shape(multiply_dense_p.bind(ct, indices, v, shape=shape, **params), data.aval.shape), None, None]
    v_aval = v.aval
    ct = _ct(ct, _multiply_dense_abstract(data, indices, v_aval, shape=shape))
    product = ct * data
    if not v_aval.shape:
        return [None, None, product.sum().astype(v_aval.dtype)]
    dense = todense(product, indices, shape)
    return [None, None, _sum_to_shape(dense, v_aval.shape).reshape(v_aval.shape)]


def bilinear_jvp(prim: Any, first: int, second: int) -> Callable:
    """The JVP rule of `prim`, linear in each of operands `first` and `second` (the others are
    indices): d prim(a, b) = prim(da, b) + prim(a, db). A `prim` with results (data, indices)
    differentiates its data; its indices get a zero tangent."""
    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        terms = []
        for k in (first, second):
            if type(tangents[k]) is not ad.Zero:
                term = prim.bind(*primals[:k], tangents[k], *primals[k + 1:], **params)
                terms.append(term[0] if prim.multiple_results else term)
        data = out[0] if prim.multiple_results else out
        data_dot = (terms[0] if len(terms) == 1 else terms[0] + terms[1]) if terms else _zero_tangent(data)
        return out, ([data_dot, _zero_tangent(out[1])] if prim.multiple_results else data_dot)
    return jvp


ad.primitive_jvps[multiply_dense_p] = bilinear_jvp(multiply_dense_p, 0, 2)
ad.primitive_transposes[multiply_dense_p] = _multiply_dense_transpose


# ---------------------------------------------------------------------------
# multiply_sparse: bilinear in (lhs data, rhs data)


def _multiply_sparse_plan(ld, li, rd, ri, lhs_shape, rhs_shape, driver) -> shapes.MultiplyPlan:
    return shapes.multiply_sparse(_layout(ld, li, lhs_shape), _layout(rd, ri, rhs_shape), driver)


_multiply_sparse_abstract = _abstract_eval("multiply_sparse")
multiply_sparse_p = _define("multiply_sparse", _multiply_sparse_abstract)


def multiply_sparse(ld, li, rd, ri, lhs_shape, rhs_shape, driver=None) -> tuple[jax.Array, jax.Array]:
    """(data, indices) of the elementwise product; `driver` None picks the cheapest valid one."""
    driver = _multiply_sparse_plan(ld, li, rd, ri, lhs_shape, rhs_shape, driver).driver
    return multiply_sparse_p.bind(
        ld, li, rd, ri, shape=tuple(lhs_shape), rhs_shape=tuple(rhs_shape), driver=driver,
        indices_sorted=False, unique_indices=False,
    )


def _aligned(data: Any, lay: shapes.Layout, plan: shapes.MultiplyPlan) -> jax.Array:
    """An operand's data arranged like the plan's entries: `[*plan.batch, nse, *dense]`."""
    nb, rest = plan.n_batch, data.shape[lay.n_batch + 1 :]
    full = jnp.broadcast_to(data, (*lay.batch_shape, lay.nse, *rest))
    merged = full.reshape(*lay.batch_shape[:nb], math.prod(lay.batch_shape[nb:]) * lay.nse, *rest)
    return jnp.broadcast_to(merged, (*plan.batch, *merged.shape[nb:]))


def _multiply_sparse_transpose(cts, ld, li, rd, ri, *, shape, rhs_shape, driver, **params):
    """Driver side: elementwise; lookup side: through the dense product; pairs: summed over partners."""
    if ad.is_undefined_primal(li) or ad.is_undefined_primal(ri):
        raise ValueError("Cannot transpose with respect to sparse indices")
    left = ad.is_undefined_primal(ld)
    lda, rda = _primal_aval(ld), _primal_aval(rd)
    plan = _multiply_sparse_plan(lda, li, rda, ri, shape, rhs_shape, driver)
    out_aval = _multiply_sparse_abstract(lda, li, rda, ri, shape=shape, rhs_shape=rhs_shape, driver=driver)[0]
    ct = _ct(cts[0], out_aval)
    kw = dict(shape=shape, rhs_shape=rhs_shape, driver=driver, **params)
    side = "lhs" if left else "rhs"
    me, my_idx, my_shape = (lda, li, shape) if left else (rda, ri, rhs_shape)
    other, other_idx, other_shape = (rd, ri, rhs_shape) if left else (ld, li, shape)
    my_lay, other_lay = _layout(me, my_idx, my_shape), _layout(other, other_idx, other_shape)
    nb, dense = plan.n_batch, ct.shape[plan.n_batch + 1 :]
    entries = (*plan.batch, *my_lay.batch_shape[nb:], my_lay.nse, *dense)
    ones = jnp.ones(me.shape, me.dtype)
    if plan.driver == side:
        args = (ones, li, rd, ri) if left else (ld, li, ones, ri)
        grad = (ct * multiply_sparse_p.bind(*args, **kw)[0]).reshape(entries)
    else:
        args = (_zeros(me.shape, me.dtype), li, rd, ri) if left else (ld, li, _zeros(me.shape, me.dtype), ri)
        _, out_indices = multiply_sparse_p.bind(*args, **kw)
        aligned = _aligned(other, other_lay, plan)
        if plan.driver == "pairs":
            split = (*plan.batch, plan.lhs_nse, plan.rhs_nse)
            match = _valid(out_indices, plan.shape[nb : nb + out_indices.shape[-1]]).reshape(split)
            weighted = ct.reshape(*split, *dense) * _expand_dense(match, len(dense)).astype(ct.dtype)
            mine, partner = (nb, nb + 1) if left else (nb + 1, nb)
            grad = (weighted * jnp.expand_dims(aligned, mine)).sum(partner).reshape(entries)
        elif tuple(my_shape) == plan.shape and my_lay.n_batch == nb:
            # Each of my entries receives the summed cotangents at its index: the same
            # lookup with me driving, so nothing of the dense shape is built.
            looked_up = (ones, my_idx, ct * aligned, out_indices) if left else (ct * aligned, out_indices, ones, my_idx)
            lookup_kw = dict(kw, shape=plan.shape if not left else shape, rhs_shape=plan.shape if left else rhs_shape,
                             driver=side)
            grad = multiply_sparse_p.bind(*looked_up, **lookup_kw)[0]
        else:  # I broadcast against the output: sum the cotangents over my size-1 dims densely
            product = todense(ct * aligned, out_indices, plan.shape)
            grad = extract(my_idx, _sum_to_shape(product, my_shape))
    grad = _sum_to_shape(grad, me.shape).astype(me.dtype)
    return [grad, None, None, None] if left else [None, None, grad, None]


ad.primitive_jvps[multiply_sparse_p] = bilinear_jvp(multiply_sparse_p, 0, 2)
ad.primitive_transposes[multiply_sparse_p] = _multiply_sparse_transpose


def _zeros(shape: Sequence[int], dtype: Any) -> jax.Array:
    return jnp.zeros(tuple(shape), dtype)


def unique_count(indices: np.ndarray, sizes: Sequence[int]) -> int:
    """The largest number of distinct in-range indices in any batch (host-side, for nse=None)."""
    indices = np.asarray(indices)
    if indices.shape[-1] == 0:
        return 1
    if indices.shape[-2] == 0:
        return 0
    valid = np.all((indices >= 0) & (indices < np.array(sizes)), axis=-1)
    strides = np.array([math.prod(sizes[k + 1 :]) for k in range(len(sizes))], dtype=np.int64)
    keys = np.where(valid, (indices.astype(np.int64) * strides).sum(-1), -1)
    keys = np.sort(keys, axis=-1)
    first = np.concatenate([np.ones_like(keys[..., :1], bool), keys[..., 1:] != keys[..., :-1]], axis=-1)
    counts = (first & (keys >= 0)).sum(-1)
    return int(counts.max(initial=0))


def is_traced(*xs: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)
