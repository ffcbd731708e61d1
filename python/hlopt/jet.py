"""`hlopt.jet`: Taylor-mode differentiation with the contract of JAX's `jet.jet` (experimental).

The function is traced once into a jaxpr and bound to the `hlopt_jet`
primitive, which lowers to the `hlopt.jet` annotation (`called_computations =
[@f]`, `backend_config = {order = K}`, operands and results primal-major); the
`jet-expand` pass turns it into a call of the generated Taylor function.
Inside the IR the coefficients are plain Taylor coefficients y^(k)/k!; this
module converts from and to the derivative convention (`factorial_scaled`).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.core import ClosedJaxpr, jaxpr_as_fun
from jax.interpreters import ad, batching

from hlopt.compiler.jax_compat import convert_constvars_jaxpr, lower_called_computation
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

__all__ = ["jet"]


def _trace(fun: Callable, avals: Sequence[Any]) -> tuple[ClosedJaxpr, list[Any]]:
    """`fun` as a closed jaxpr without constants, and the constants it takes first."""
    closed = jax.make_jaxpr(fun)(*avals)
    return ClosedJaxpr(convert_constvars_jaxpr(closed.jaxpr), ()), list(closed.consts)


def _abstract_eval(*avals, jaxpr: ClosedJaxpr, order: int):
    outs = [jax.core.ShapedArray(a.shape, a.dtype) for a in jaxpr.out_avals]
    return outs + [a for a in outs for _ in range(order)]


def _lowering(ctx, *operands, jaxpr: ClosedJaxpr, order: int):
    func_op = lower_called_computation(name="hlopt_jet_fun", jaxpr=jaxpr, module_context=ctx.module_context,
                                       in_avals=jaxpr.in_avals, out_avals=jaxpr.out_avals)
    return emit_annotation("hlopt.jet", operands, result_types(ctx), {"order": order},
                           called_computations=[func_op.name.value])


jet_p = annotation_primitive("hlopt_jet", _abstract_eval, _lowering)


def _zero_series(values: Sequence[Any], order: int) -> list[Any]:
    return [jnp.zeros_like(v) for v in values for _ in range(order)]


def _batch(args, dims, *, jaxpr: ClosedJaxpr, order: int):
    """vmap of a jet is the jet of the vmapped function: a primal whose value or
    series is batched is batched (with its series) in the new function."""
    n = len(jaxpr.in_avals)
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    batched = [dims[i] is not None
               or any(dims[n + i * order + k] is not None for k in range(order))
               for i in range(n)]

    def at_zero(x, d, b):
        if not b:
            return x
        if d is None:
            return jnp.broadcast_to(x, (size, *jnp.shape(x)))
        return jnp.moveaxis(x, d, 0)

    primals = [at_zero(args[i], dims[i], batched[i]) for i in range(n)]
    coeffs = [at_zero(args[n + i * order + k], dims[n + i * order + k], batched[i])
              for i in range(n) for k in range(order)]
    fun = jax.vmap(jaxpr_as_fun(jaxpr), in_axes=[0 if b else None for b in batched], axis_size=size)
    new_jaxpr, consts = _trace(fun, [jax.ShapeDtypeStruct(jnp.shape(p), p.dtype) for p in primals])
    outs = jet_p.bind(*consts, *primals, *_zero_series(consts, order), *coeffs, jaxpr=new_jaxpr, order=order)
    return outs, [0] * len(outs)


batching.primitive_batchers[jet_p] = _batch


def _jvp(primals, tangents, *, jaxpr: ClosedJaxpr, order: int):
    """Forward mode through a jet: d/de of the series of f(x(t) + e dx(t)) is the
    series of jvp(f)(x(t), dx(t)), i.e. the jet of jvp(f) on (x, dx) and their series."""
    n = len(jaxpr.in_avals)
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    outs = jet_p.bind(*primals, jaxpr=jaxpr, order=order)

    def tangent_fun(*args):
        return jax.jvp(jaxpr_as_fun(jaxpr), args[:n], args[n:])[1]

    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in jaxpr.in_avals]
    tangent_jaxpr, consts = _trace(tangent_fun, avals + avals)
    tangent_outs = jet_p.bind(*consts, *primals[:n], *tangents[:n], *_zero_series(consts, order),
                              *primals[n:], *tangents[n:], jaxpr=tangent_jaxpr, order=order)
    return outs, tangent_outs


ad.primitive_jvps[jet_p] = _jvp


def _check_series(primals: Sequence[Any], series: Sequence[Any]) -> int:
    if not isinstance(primals, (tuple, list)) or not isinstance(series, (tuple, list)):
        raise TypeError("jet: primals and series must be tuples or lists, one entry per argument of fun")
    if len(primals) != len(series):
        raise ValueError(f"jet: {len(primals)} primals but {len(series)} series")
    try:
        (order,) = set(map(len, series))
    except ValueError:
        raise ValueError("jet terms have inconsistent lengths for different arguments") from None
    for i, (x, terms) in enumerate(zip(primals, series)):
        tree = jax.tree_util.tree_structure(x)
        for j, t in enumerate(terms):
            if jax.tree_util.tree_structure(t) != tree:
                raise ValueError(f"jet: term {j} for argument {i} has structure "
                                 f"{jax.tree_util.tree_structure(t)}, the primal has {tree}")
            for p, c in zip(jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(t)):
                if jnp.shape(p) != jnp.shape(c):
                    raise ValueError(f"jet: term {j} for argument {i} has shape {jnp.shape(c)}, "
                                     f"the primal has {jnp.shape(p)}")
    return order


def _scaled(x: Any, c: float) -> Any:
    """x * c for floating-point x; integer coefficients are ignored by the pass and kept as they are."""
    return x if c == 1 or not jnp.issubdtype(x.dtype, jnp.inexact) else x * jnp.asarray(c, x.dtype)


def _jet_traced(fun: Callable, primals: Sequence[Any], series: Sequence[Any], factorial_scaled: bool):
    order = _check_series(primals, series)
    leaves, in_tree = jax.tree_util.tree_flatten(tuple(primals))
    leaves = [jnp.asarray(x) for x in leaves]
    # coefficient k of every leaf, in the leaves' order
    by_order = [jax.tree_util.tree_leaves(tuple(s[k] for s in series)) for k in range(order)]
    scale = [1 / math.factorial(k + 1) if factorial_scaled else 1 for k in range(order)]
    coeffs = [_scaled(jnp.asarray(by_order[k][i], x.dtype), scale[k]) for i, x in enumerate(leaves) for k in range(order)]
    out_tree_box = []

    def flat_fun(*flat):
        out = fun(*jax.tree_util.tree_unflatten(in_tree, flat))
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        out_tree_box.append(out_tree)
        return out_leaves

    jaxpr, consts = _trace(flat_fun, [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves])
    outs = jet_p.bind(*consts, *leaves, *_zero_series(consts, order), *coeffs, jaxpr=jaxpr, order=order)
    n_out = len(jaxpr.out_avals)
    primals_out, terms = outs[:n_out], outs[n_out:]
    series_out = [[_scaled(terms[i * order + k], math.factorial(k + 1) if factorial_scaled else 1) for k in range(order)]
                  for i in range(n_out)]
    out_tree = out_tree_box[-1]
    return jax.tree_util.tree_unflatten(out_tree, primals_out), jax.tree_util.tree_unflatten(out_tree, series_out)


_eager: "weakref.WeakKeyDictionary[Callable, dict[bool, Callable]]" = weakref.WeakKeyDictionary()


def jet(fun: Callable, primals: Sequence[Any], series: Sequence[Sequence[Any]],
        factorial_scaled: bool = True) -> tuple[Any, Any]:
    """Taylor-mode higher-order differentiation, the contract of JAX's experimental `jet.jet`.

    `primals` holds one value (an array or a pytree of arrays) per argument of
    `fun`; `series` one sequence of K terms per argument, each shaped like its
    primal. Returns `(fun(*primals), series_out)`, `series_out` holding the K
    output terms of each output leaf. With `factorial_scaled` (the default)
    term k is the k-th derivative along the curve; otherwise the plain Taylor
    coefficient (derivative / k!).
    """
    from hlopt.jit import jit

    leaves = jax.tree_util.tree_leaves((primals, series))
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return _jet_traced(fun, primals, series, factorial_scaled)
    _check_series(primals, series)
    try:
        per_fun = _eager.setdefault(fun, {})
    except TypeError:
        per_fun = {}
    compiled = per_fun.get(factorial_scaled)
    if compiled is None:
        compiled = jit(lambda p, s: _jet_traced(fun, p, s, factorial_scaled))
        per_fun[factorial_scaled] = compiled
    return compiled(tuple(primals), tuple(tuple(s) for s in series))
