"""How a BCOO op's record (`hlopt.passes.bcoo`) becomes a jax primitive, and the helpers that
the JVP, transpose and batching rules of every BCOO primitive share.

`define(record)` gives the primitive `bcoo_<name>`: its abstract evaluation is the record's
shape rule (with a dtype rule), its lowering emits `@hlopt.bcoo.<name>` with the
`backend_config` the record's signature builds and checks, and, when the record has batching
parameters, vmap makes the mapped axis a leading batch dim. `data_linear(record)` adds the JVP
and transpose of an op linear in its data whose output indices depend on the indices only.
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
from hlopt.passes.bcoo import Record
from hlopt.passes.bcoo.record import DATA, DENSE, INDICES, STARTS
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

# (operand avals, params) -> the dtype of each result
DtypeRule = Callable[[Sequence[Any], dict[str, Any]], list[Any]]
# (batched operands, params, size) -> the operands the batched op is bound on
BatchPrep = Callable[[list[jax.Array], dict[str, Any], int], list[jax.Array]]


def aval(shape: Sequence[int], dtype: Any) -> jax.core.ShapedArray:
    """The abstract array of `shape` (ints) and `dtype`."""
    return jax.core.ShapedArray(tuple(int(s) for s in shape), dtype)


def layout(data: Any, indices: Any, shape: Sequence[int]) -> shapes.Layout:
    """The layout of the BCOO array of `shape` stored in these buffers (arrays or avals)."""
    return shapes.layout(shape, data.shape, indices.shape)


def zero_tangent(x: Any) -> ad.Zero:
    """The symbolic zero tangent of `x`."""
    return ad.Zero(aval(np.shape(x), x.dtype).to_tangent_aval())


def instantiate(ct: Any, like: Any) -> jax.Array:
    """A cotangent as an array: zeros of `like`'s shape and dtype for a symbolic zero."""
    return jnp.zeros(like.shape, like.dtype) if type(ct) is ad.Zero else ct


def primal_aval(x: Any) -> Any:
    """The aval of a transpose rule's undefined primal, or the primal itself."""
    return x.aval if ad.is_undefined_primal(x) else x


def sum_to_shape(x: jax.Array, shape: Sequence[int]) -> jax.Array:
    """Sum `x` over the dims that `shape` (same rank, or trailing dims) has as 1 or lacks."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    x = x.sum(tuple(range(lead))) if lead else x
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
    return x.sum(axes, keepdims=True) if axes else x


def to_front(x: Any, bdim: int | None) -> jax.Array:
    """The mapped axis of a buffer as a new leading batch dim (size 1 when the buffer is not mapped)."""
    return jnp.expand_dims(x, 0) if bdim is None else jnp.moveaxis(x, bdim, 0)


def from_front(outs: Any, size: int, multiple: bool) -> tuple[Any, Any]:
    """Results with a leading batch dim: mapped along 0, or (size 1) the same for every example."""
    def split(x):
        return (x, 0) if x.shape[0] == size else (x[0], None)

    if not multiple:
        return split(outs)
    pairs = [split(x) for x in outs]
    return [x for x, _ in pairs], [d for _, d in pairs]


def mapped_size(args: Sequence[Any], dims: Sequence[int | None]) -> int:
    """The size of the mapped axis of a batching rule's arguments."""
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def same_dtypes(avals: Sequence[Any], params: dict[str, Any], record: Record) -> list[Any]:
    """The default dtype rule: data of the data and dense operands' (promoted) dtype, indices of the
    indices operands' (or of the `index_dtype` parameter, for an op without indices operands)."""
    roles = record.signature.roles(len(avals))
    dtypes = [jnp.result_type(*(a.dtype for a, r in zip(avals, roles) if r in (DATA, DENSE)))]
    if record.signature.results == 2:
        index = [a.dtype for a, r in zip(avals, roles) if r == INDICES]
        dtypes.append(index[0] if index else params["index_dtype"])
    return dtypes


def abstract_eval(record: Record, dtypes: DtypeRule | None = None) -> Callable[..., Any]:
    """The result avals of `record`'s op: shapes from its shape rule (the one lower-bcoo checks
    against) on the config its signature builds, dtypes from `dtypes` (default `same_dtypes`)."""
    def rule(*operands: Any, **params: Any) -> Any:
        roles = record.signature.roles(len(operands))
        index_dtypes = set()
        for x, role in zip(operands, roles):
            if role in (INDICES, STARTS):
                if not jnp.issubdtype(x.dtype, jnp.integer):
                    raise TypeError(f"bcoo {record.name}: {role} must be integers, got {x.dtype}")
                if role == INDICES:
                    index_dtypes.add(np.dtype(x.dtype))
        if len(index_dtypes) > 1:
            raise TypeError(f"bcoo {record.name}: indices of one dtype, got {sorted(map(str, index_dtypes))}")
        in_shapes = [x.shape for x in operands]
        out = record.result_shapes(record.config(params, in_shapes), in_shapes)
        types = dtypes(operands, params) if dtypes else same_dtypes(operands, params, record)
        avals = [aval(s, d) for s, d in zip(out, types)]
        return avals if record.signature.results > 1 else avals[0]

    return rule


def define(record: Record, abstract: Callable[..., Any] | None = None, *,
           prepare_batch: BatchPrep | None = None) -> jex_core.Primitive:
    """The primitive `bcoo_<name>` of `record`: abstract evaluation `abstract` (default
    `abstract_eval(record)`), a lowering to its annotation, and (when the record has batching
    parameters) a batching rule; `prepare_batch` adjusts the operands once their mapped axes lead."""
    def lowering(ctx, *operands, **params):
        config = record.config(params, [a.shape for a in ctx.avals_in])
        return emit_annotation(record.target, operands, result_types(ctx), config)

    prim = annotation_primitive(f"bcoo_{record.name}", abstract or abstract_eval(record), lowering,
                                multiple_results=record.signature.results > 1)
    if record.batched is not None:
        batching.primitive_batchers[prim] = _batch_rule(prim, record, prepare_batch)
    return prim


def _batch_rule(prim: jex_core.Primitive, record: Record, prepare: BatchPrep | None) -> Callable:
    """vmap of an op: the mapped axis of every operand becomes a leading batch dim."""
    def rule(args, dims, **params):
        size = mapped_size(args, dims)
        batched = [to_front(a, d) for a, d in zip(args, dims)]
        if prepare is not None:
            batched = prepare(batched, params, size)
        if "shape" in params:
            params = {**params, "shape": (size, *params["shape"])}
        outs = prim.bind(*batched, **record.batched(params, size))
        return from_front(outs, size, prim.multiple_results)

    return rule


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
        data_dot = (terms[0] if len(terms) == 1 else terms[0] + terms[1]) if terms else zero_tangent(data)
        return out, ([data_dot, zero_tangent(out[1])] if prim.multiple_results else data_dot)
    return jvp


def _data_linear_jvp(prim: jex_core.Primitive) -> Callable:
    def jvp(primals, tangents, **params):
        data, *rest = primals
        out_data, out_indices = prim.bind(data, *rest, **params)
        g = tangents[0]
        data_dot = zero_tangent(out_data) if type(g) is ad.Zero else prim.bind(g, *rest, **params)[0]
        return (out_data, out_indices), (data_dot, zero_tangent(out_indices))

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


def data_linear(record: Record, transpose: Callable | None = None) -> jex_core.Primitive:
    """The primitive of an op linear in data whose output indices depend on the indices only.

    `transpose(ct, data_aval, indices, *rest, **params)` is the data cotangent (`rest`: the
    op's other operands, not differentiable); None means the op only selects data elements.
    """
    abstract = abstract_eval(record)
    prim = define(record, abstract)
    ad.primitive_jvps[prim] = _data_linear_jvp(prim)
    transpose = transpose or _selection_transpose(prim)

    def rule(cts, data, *rest, **params):
        if any(map(ad.is_undefined_primal, rest)):
            raise ValueError("Cannot transpose with respect to sparse indices")
        out = abstract(data.aval, *rest, **params)[0]
        ct = instantiate(cts[0], out)
        return [transpose(ct, data.aval, *rest, **params), *(None for _ in rest)]

    ad.primitive_transposes[prim] = rule
    return prim


def is_traced(*xs: Any) -> bool:
    """Whether any of `xs` is a tracer (its value unknown while tracing)."""
    return any(isinstance(x, jax.core.Tracer) for x in xs)
