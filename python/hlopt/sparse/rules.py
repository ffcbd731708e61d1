"""How a BCOO op's record (`hlopt.passes.sparse.bcoo`) becomes a jax primitive: one generic
interpreter of the record, with no rule of any op written here.

`define(record)` gives the primitive `bcoo_<name>`: its abstract evaluation is the record's
shape rule (with its dtype hook or the default dtype rule), its lowering emits
`@hlopt.bcoo.<name>` with the `backend_config` the record's signature builds and checks; vmap
makes the mapped axis a leading batch dim with the record's batching parameters (or runs its
`batch` hook); the JVP and transpose rules come from its `Derivative` (multilinear or joint
linear operands; a transpose written through other ops, or `SELECTS`). The record's hooks are
functions over `hlopt.passes.sparse.bcoo.terms.Terms`, which `TERMS` here interprets with jax.
`primitive(name)` is the primitive of the op of that name in the registry in use.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad, batching

from hlopt.compiler.jax_compat import Primitive
from hlopt.passes.sparse import bcoo
from hlopt.passes.sparse import shapes
from hlopt.passes.sparse.bcoo import Record
from hlopt.passes.sparse.bcoo.record import DATA, DENSE, INDICES, STARTS
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

# (operand avals, params) -> the dtype of each result
DtypeRule = Callable[[Sequence[Any], dict[str, Any]], list[Any]]


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


def abstract_eval(record: Record) -> Callable[..., Any]:
    """The result avals of `record`'s op: shapes from its shape rule (the one lower-bcoo checks
    against) on the config its signature builds, dtypes from its `dtypes` hook (default `same_dtypes`)."""
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
        types_ = record.dtypes(TERMS, operands, params) if record.dtypes else same_dtypes(operands, params, record)
        avals = [aval(s, d) for s, d in zip(out, types_)]
        return avals if record.signature.results > 1 else avals[0]

    return rule


# id(record) -> (record, its primitive): a record is defined once, the registry in use resolves names
_PRIMITIVES: dict[int, tuple[Record, Primitive]] = {}


def primitive(name: str) -> Primitive:
    """The primitive of the op `name` in the registry in use (`hlopt.passes.sparse.bcoo.REGISTRY`)."""
    return define(bcoo.REGISTRY[name])


def define(record: Record) -> Primitive:
    """The primitive `bcoo_<name>` of `record` (made once per record): abstract evaluation, a
    lowering to its annotation, its batching rule, and its JVP and transpose rules when the
    record declares a `Derivative`."""
    known = _PRIMITIVES.get(id(record))
    if known is not None and known[0] is record:
        return known[1]

    def lowering(ctx, *operands, **params):
        config = record.config(params, [a.shape for a in ctx.avals_in])
        return emit_annotation(record.target, operands, result_types(ctx), config)

    abstract = abstract_eval(record)
    prim = annotation_primitive(f"bcoo_{record.name}", abstract, lowering,
                                multiple_results=record.signature.results > 1)
    if record.batch is not None:
        batching.primitive_batchers[prim] = lambda args, dims, **params: record.batch(TERMS, args, dims, **params)
    elif record.batched is not None:
        batching.primitive_batchers[prim] = _batch_rule(prim, record)
    if record.derivative is not None:
        ad.primitive_jvps[prim] = _jvp_rule(prim, record)
        ad.primitive_transposes[prim] = _transpose_rule(prim, record, abstract)
    _PRIMITIVES[id(record)] = (record, prim)
    return prim


def _batch_rule(prim: Primitive, record: Record) -> Callable:
    """vmap of an op: the mapped axis of every operand becomes a leading batch dim."""
    def rule(args, dims, **params):
        size = mapped_size(args, dims)
        batched = [to_front(a, d) for a, d in zip(args, dims)]
        if record.prepare_batch is not None:
            batched = record.prepare_batch(TERMS, batched, params, size)
        if "shape" in params:
            params = {**params, "shape": (size, *params["shape"])}
        outs = prim.bind(*batched, **record.batched(params, size))
        return from_front(outs, size, prim.multiple_results)

    return rule


def _data(prim: Primitive, out: Any) -> Any:
    return out[0] if prim.multiple_results else out


def _jvp_rule(prim: Primitive, record: Record) -> Callable:
    """The JVP of the data result from the record's `Derivative`; indices get zero tangents."""
    derivative = record.derivative

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        outs = list(out) if prim.multiple_results else [out]
        linear = derivative.linear_operands(record.signature.roles(len(primals)))
        live = [k for k in linear if type(tangents[k]) is not ad.Zero]
        if derivative.jvp is not None:
            data_dot = derivative.jvp(TERMS, primals, tangents, outs, **params)
        elif not live:
            data_dot = None
        elif derivative.joint:
            args = list(primals)
            for k in linear:
                args[k] = ad.instantiate_zeros(tangents[k])
            data_dot = _data(prim, prim.bind(*args, **params))
        else:
            terms = [_data(prim, prim.bind(*primals[:k], tangents[k], *primals[k + 1 :], **params)) for k in live]
            data_dot = terms[0]
            for term in terms[1:]:
                data_dot = data_dot + term
        tangent_out = [zero_tangent(outs[0]) if data_dot is None else data_dot, *map(zero_tangent, outs[1:])]
        return out, tangent_out if prim.multiple_results else tangent_out[0]

    return jvp


def _transpose_rule(prim: Primitive, record: Record, abstract: Callable[..., Any]) -> Callable:
    """The transpose from the record's `Derivative`: its rule, or the selection transpose."""
    derivative = record.derivative

    def rule(cts, *operands, **params):
        linear = derivative.linear_operands(record.signature.roles(len(operands)))
        if any(ad.is_undefined_primal(x) for i, x in enumerate(operands) if i not in linear):
            raise ValueError("Cannot transpose with respect to sparse indices")
        avals = [primal_aval(x) for x in operands]
        ct = instantiate(cts[0] if prim.multiple_results else cts, _data(prim, abstract(*avals, **params)))
        undefined = [k for k in linear if ad.is_undefined_primal(operands[k])]
        if derivative.transpose is None:
            grads = {0: _selection_transpose(prim, ct, avals[0], operands[1:], params)}
        elif derivative.joint:
            grads = dict(zip(linear, derivative.transpose(TERMS, ct, *operands, **params)))
        else:
            grads = {undefined[0]: derivative.transpose(TERMS, ct, *operands, **params)}
        return [grads[i].astype(avals[i].dtype) if i in undefined and grads.get(i) is not None else None
                for i in range(len(operands))]

    return rule


def _selection_transpose(prim: Primitive, ct: Any, data: Any, rest: Sequence[Any], params: dict) -> Any:
    """The cotangent of the data of an op each of whose output data elements is one input data
    element or 0 (`SELECTS`).

    The op runs once more on the 1-based positions of the input data elements (0 stays 0), so
    each output element names its source; the cotangents are added into their sources (an input
    element broadcast to several outputs receives the sum of theirs).
    """
    size = math.prod(data.shape)
    if size >= np.iinfo(np.int32).max and not jax.config.read("jax_enable_x64"):
        raise NotImplementedError(f"the gradient of {prim.name} needs jax_enable_x64 for data with {size} elements")
    dtype = np.int32 if size < np.iinfo(np.int32).max else np.int64
    positions = jnp.arange(1, size + 1, dtype=dtype).reshape(data.shape)
    source = _data(prim, prim.bind(positions, *rest, **params))
    targets = jnp.where(source == 0, size, source - 1).ravel()
    summed = jnp.zeros((size,), ct.dtype).at[targets].add(ct.ravel(), mode="drop")
    return summed.reshape(data.shape)


def is_traced(*xs: Any) -> bool:
    """Whether any of `xs` is a tracer (its value unknown while tracing)."""
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _bind(name: str, *operands: Any, **params: Any) -> Any:
    return primitive(name).bind(*operands, **params)


def _dot_dtype(lhs: Any, rhs: Any, dimension_numbers: Any, preferred_element_type: Any) -> np.dtype:
    for dtype in (lhs, rhs):
        if not (jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
            raise TypeError(f"bcoo_dot_general: operands must be numbers, got {dtype}")
    (lc, rc), (lb, rb) = dimension_numbers
    n = max((*lc, *lb, -1)) + 1, max((*rc, *rb, -1)) + 1
    a, b = jax.ShapeDtypeStruct((1,) * n[0], lhs), jax.ShapeDtypeStruct((1,) * n[1], rhs)
    return jax.eval_shape(lambda x, y: lax.dot_general(x, y, dimension_numbers,
                                                       preferred_element_type=preferred_element_type), a, b).dtype


# The jax interpreter of `hlopt.passes.sparse.bcoo.terms.Terms`: what a record's rules compute with.
TERMS = types.SimpleNamespace(
    bind=_bind, is_undefined=ad.is_undefined_primal, aval=primal_aval, is_zero=lambda x: type(x) is ad.Zero,
    zeros=lambda shape, dtype: jnp.zeros(tuple(shape), dtype), ones=lambda shape, dtype: jnp.ones(tuple(shape), dtype),
    arange=lambda start, stop, dtype: jnp.arange(start, stop, dtype=dtype), asarray=jnp.asarray, where=jnp.where,
    all=lambda x, axis: jnp.all(x, axis=axis), transpose=jnp.transpose, broadcast_to=jnp.broadcast_to,
    expand_dims=jnp.expand_dims, moveaxis=jnp.moveaxis, concatenate=lambda xs, axis: jnp.concatenate(xs, axis=axis),
    einsum=jnp.einsum, sum_to_shape=sum_to_shape, set_at=lambda x, index, values: x.at[index].set(values),
    add_at=lambda x, index, values: x.at[index].add(values, mode="drop"),
    cumsum=lambda x, axis: jnp.cumsum(x, axis=axis, dtype=x.dtype),
    dot_dtype=_dot_dtype, to_front=to_front, from_front=from_front, mapped_size=mapped_size,
)
