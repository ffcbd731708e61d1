"""The jax primitives behind `hlopt.sparse`: one per `hlopt.bcoo.*` op, each defined from the
op's record (`hlopt.passes.bcoo`) by `hlopt.sparse.rules`.

A record gives the primitive its abstract evaluation (the shape rule lower-bcoo checks
against), its lowering (the annotation with the config the record's signature builds) and
its batching parameters; here are its JVP rules and, for the ops linear in `data` (or in a
dense operand), the transpose rules that make `jax.grad` work.

Operands are `(data, indices, ...)`; `extract` takes `(arr, indices)`, the dense
array in the data slot. Every BCOO operand comes with the parameters `shape`,
`indices_sorted` and `unique_indices`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching

from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes.bcoo import REGISTRY
from hlopt.sparse.rules import (
    abstract_eval,
    aval,
    bilinear_jvp,
    data_linear,
    define,
    instantiate,
    layout,
    mapped_size,
    primal_aval,
    sum_to_shape,
    to_front,
    zero_tangent,
)


# ---------------------------------------------------------------------------
# todense / extract: mutual transposes


todense_p = define(REGISTRY["todense"])


_extract_abstract = abstract_eval(REGISTRY["extract"])


def _batch_extract(batched: list, params: dict, size: int) -> list:
    """The dense array defines the shape: it needs every example."""
    arr, indices = batched
    return [jnp.broadcast_to(arr, (size, *arr.shape[1:])), indices]


extract_p = define(REGISTRY["extract"], _extract_abstract, prepare_batch=_batch_extract)


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
    return [sum_to_shape(extract(indices, instantiate(ct, aval(shape, data.aval.dtype))), data.aval.shape), None]


def _extract_transpose(ct, arr, indices, *, assume_unique):
    if ad.is_undefined_primal(indices):
        raise ValueError("Cannot transpose with respect to sparse indices")
    ct = instantiate(ct, _extract_abstract(arr.aval, indices, assume_unique=assume_unique))
    if not assume_unique:  # only first occurrences read arr: 1 there, 0 at repeats and padding
        ct = ct * extract(indices, jnp.ones(arr.aval.shape, ct.dtype), assume_unique=False)
    return [todense(ct, indices, arr.aval.shape), None]


ad.defjvp(todense_p, lambda g, data, indices, **p: todense_p.bind(g, indices, **p), None)
ad.primitive_transposes[todense_p] = _todense_transpose
ad.defjvp(extract_p, lambda g, arr, indices, **p: extract_p.bind(g, indices, **p), None)
ad.primitive_transposes[extract_p] = _extract_transpose


# ---------------------------------------------------------------------------
# fromdense


fromdense_p = define(REGISTRY["fromdense"])


def _fromdense_jvp(primals, tangents, **params):
    (mat,), (mat_dot,) = primals, tangents
    data, indices = fromdense_p.bind(mat, **params)
    data_dot = zero_tangent(data) if type(mat_dot) is ad.Zero else extract(indices, mat_dot)
    return (data, indices), (data_dot, zero_tangent(indices))


ad.primitive_jvps[fromdense_p] = _fromdense_jvp


def _fromdense_batch(args, dims, *, n_batch, **params):
    (mat,), (bdim,) = args, dims
    return fromdense_p.bind(jnp.moveaxis(mat, bdim, 0), n_batch=n_batch + 1, **params), (0, 0)


batching.primitive_batchers[fromdense_p] = _fromdense_batch


# ---------------------------------------------------------------------------
# Ops linear in data with indices that depend on indices only


def _sum_duplicates_transpose(ct, data, indices, *, shape, nse, **_):
    """Each input entry receives the cotangent of the unique entry it was summed into."""
    lay = layout(data, indices, shape)
    nb = lay.n_batch
    if lay.n_sparse == 0:
        first = ct[(slice(None),) * nb + (slice(0, 1),)] if nse else _zeros(ct.shape[:nb] + (1,) + ct.shape[nb + 1 :], ct.dtype)
        return sum_to_shape(jnp.broadcast_to(first, (*first.shape[:nb], lay.nse, *first.shape[nb + 1 :])), data.shape)
    _, out_indices = sum_duplicates_p.bind(_zeros(data.shape, data.dtype), indices, shape=shape, nse=nse,
                                           indices_sorted=False, unique_indices=False)
    ones = jnp.ones(data.shape, data.dtype)
    looked_up, _ = multiply_sparse(ones, indices, ct, out_indices, shape, shape, driver="lhs")
    return sum_to_shape(looked_up, data.shape)


def _transpose_transpose(ct, data, indices, *, shape, permutation, **_):
    lay = layout(data, indices, shape)
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
    lay = layout(data, indices, shape)
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
    ct = sum_to_shape(ct, sliced_shape)
    return jnp.zeros(data.shape, ct.dtype).at[tuple(index)].set(ct)


def _reduce_sum_transpose(ct, data, indices, *, shape, axes, **_):
    lay = layout(data, indices, shape)
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
    return sum_to_shape(jnp.broadcast_to(x, (*x.shape[: nb + 1], *data.shape[nb + 1 :])), data.shape)


def _reshape_transpose(ct, data, indices, *, shape, new_sizes, dimensions, **_):
    lay = layout(data, indices, shape)
    plan = shapes.reshape(lay, new_sizes, dimensions)
    nb = lay.n_batch
    if lay.n_sparse and not plan.sparse:
        ct = jnp.where(_expand_dense(_valid(indices, lay.sparse_shape), len(plan.dense)), ct, 0)
    perm = [*plan.batch_perm, nb, *(p + nb + 1 for p in plan.dense_perm)]
    permuted = [(*lay.batch_shape, lay.nse, *lay.dense_shape)[p] for p in perm]
    x = jnp.transpose(ct.reshape(permuted), np.argsort(perm))
    return sum_to_shape(x, data.shape)


sort_indices_p = data_linear(REGISTRY["sort_indices"])
sum_duplicates_p = data_linear(REGISTRY["sum_duplicates"], _sum_duplicates_transpose)
transpose_p = data_linear(REGISTRY["transpose"], _transpose_transpose)
squeeze_p = data_linear(REGISTRY["squeeze"])
slice_p = data_linear(REGISTRY["slice"], _slice_transpose)
reduce_sum_p = data_linear(REGISTRY["reduce_sum"], _reduce_sum_transpose)
reshape_p = data_linear(REGISTRY["reshape"], _reshape_transpose)
update_layout_p = data_linear(REGISTRY["update_layout"])
gather_p = data_linear(REGISTRY["gather"])


def _gather_batch(args, dims, *, shape, slice_sizes, **params):
    """vmap of gather: example s's windows read batch row s of the operand (one window list)."""
    size = mapped_size(args, dims)
    data, indices, starts = (to_front(a, d) for a, d in zip(args, dims))
    windows = starts.shape[1]
    starts = jnp.broadcast_to(starts, (size, *starts.shape[1:]))
    rows = jnp.broadcast_to(jnp.arange(size, dtype=starts.dtype).reshape(size, 1, 1), (size, windows, 1))
    starts = jnp.concatenate([rows, starts], axis=2).reshape(size * windows, len(shape) + 1)
    outs = gather_p.bind(data, indices, starts, shape=(size, *shape), slice_sizes=(1, *slice_sizes), **params)
    return [x.reshape(size, windows, *x.shape[2:]) for x in outs], [0, 0]


batching.primitive_batchers[gather_p] = _gather_batch


# ---------------------------------------------------------------------------
# multiply_dense: bilinear in (data, v)


_multiply_dense_abstract = abstract_eval(REGISTRY["multiply_dense"])


def _batch_multiply_dense(batched: list, params: dict, size: int) -> list:
    """The dense operand, brought to the batched array's rank."""
    data, indices, v = batched
    v = jnp.reshape(v, (v.shape[0],) + (1,) * (len(params["shape"]) - v.ndim + 1) + v.shape[1:])
    return [data, indices, v]


multiply_dense_p = define(REGISTRY["multiply_dense"], _multiply_dense_abstract, prepare_batch=_batch_multiply_dense)


def _multiply_dense_transpose(ct, data, indices, v, *, shape, **params):
    if ad.is_undefined_primal(indices):
        raise ValueError("Cannot transpose with respect to sparse indices")
    if ad.is_undefined_primal(data):
        ct = instantiate(ct, _multiply_dense_abstract(data.aval, indices, v, shape=shape))
        return [sum_to_shape(multiply_dense_p.bind(ct, indices, v, shape=shape, **params), data.aval.shape), None, None]
    v_aval = v.aval
    ct = instantiate(ct, _multiply_dense_abstract(data, indices, v_aval, shape=shape))
    product = ct * data
    if not v_aval.shape:
        return [None, None, product.sum().astype(v_aval.dtype)]
    dense = todense(product, indices, shape)
    return [None, None, sum_to_shape(dense, v_aval.shape).reshape(v_aval.shape)]


ad.primitive_jvps[multiply_dense_p] = bilinear_jvp(multiply_dense_p, 0, 2)
ad.primitive_transposes[multiply_dense_p] = _multiply_dense_transpose


# ---------------------------------------------------------------------------
# multiply_sparse: bilinear in (lhs data, rhs data)


def _multiply_sparse_plan(ld, li, rd, ri, lhs_shape, rhs_shape, driver) -> shapes.MultiplyPlan:
    return shapes.multiply_sparse(layout(ld, li, lhs_shape), layout(rd, ri, rhs_shape), driver)


_multiply_sparse_abstract = abstract_eval(REGISTRY["multiply_sparse"])
multiply_sparse_p = define(REGISTRY["multiply_sparse"], _multiply_sparse_abstract)


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
    lda, rda = primal_aval(ld), primal_aval(rd)
    plan = _multiply_sparse_plan(lda, li, rda, ri, shape, rhs_shape, driver)
    out_aval = _multiply_sparse_abstract(lda, li, rda, ri, shape=shape, rhs_shape=rhs_shape, driver=driver)[0]
    ct = instantiate(cts[0], out_aval)
    kw = dict(shape=shape, rhs_shape=rhs_shape, driver=driver, **params)
    side = "lhs" if left else "rhs"
    me, my_idx, my_shape = (lda, li, shape) if left else (rda, ri, rhs_shape)
    other, other_idx, other_shape = (rd, ri, rhs_shape) if left else (ld, li, shape)
    my_lay, other_lay = layout(me, my_idx, my_shape), layout(other, other_idx, other_shape)
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
            grad = extract(my_idx, sum_to_shape(product, my_shape))
    grad = sum_to_shape(grad, me.shape).astype(me.dtype)
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


