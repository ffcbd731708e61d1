"""The `hlopt_vjp` primitive: a vector-Jacobian product that the compiler builds.

`vjp_p.bind(*args, *cotangents, jaxpr=J, wrt=(i, ...))` is the cotangent of
inputs `wrt` of the closed jaxpr `J` (no constants) at `args`, given one
cotangent per result of `J`. It lowers to the `hlopt.vjp` annotation
(`called_computations = [@J]`) whose unused results are the inputs not in
`wrt`, so that `vjp-expand` differentiates with respect to `wrt` alone. JAX
never sees inside: `J` may hold annotations (an `hlopt.jet`) that JAX cannot
differentiate; `jet-expand` lowers them before `vjp-expand` runs.

`hlopt.jet` transposes through it (see `hlopt.jet`'s docstring). Under
`jax.vmap` it becomes the vjp of the vmapped `J`. It has no JVP rule: reverse
mode over it (grad of grad, `jax.hessian`) is refused with an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching

from hlopt.compiler.jax_compat import ClosedJaxpr, convert_constvars_jaxpr, jaxpr_as_fun, lower_called_computation
from hlopt.passes.autodiff.vjp_expand import ANNOTATION
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

__all__ = ["vjp_at", "vjp_of_linear", "vjp_p"]


def _abstract_eval(*avals, jaxpr: ClosedJaxpr, wrt: tuple[int, ...]):
    return [jax.core.ShapedArray(jaxpr.in_avals[i].shape, jaxpr.in_avals[i].dtype) for i in wrt]


def _lowering(ctx, *operands, jaxpr: ClosedJaxpr, wrt: tuple[int, ...]):
    func_op = lower_called_computation(name="hlopt_vjp_fun", jaxpr=jaxpr, module_context=ctx.module_context,
                                       in_avals=jaxpr.in_avals, out_avals=jaxpr.out_avals)
    n = len(jaxpr.in_avals)
    types = [func_op.type.inputs[i] for i in range(n)]
    outs = emit_annotation(ANNOTATION, operands, types, {}, called_computations=[func_op.name.value])
    return [outs[i] for i in wrt]


vjp_p = annotation_primitive("hlopt_vjp", _abstract_eval, _lowering)


def _batch(args, dims, *, jaxpr: ClosedJaxpr, wrt: tuple[int, ...]):
    """vmap of a vjp is the vjp of the vmapped function. An input whose cotangent is
    wanted is batched (broadcast if it is not), so its cotangent is per example
    rather than summed over the batch; so is every cotangent, as every result of
    the vmapped function is."""
    n = len(jaxpr.in_avals)
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    batched = [d is not None or i in wrt or i >= n for i, d in enumerate(dims)]
    moved = [jnp.moveaxis(a, d, 0) if d is not None
             else jnp.broadcast_to(a, (size, *jnp.shape(a))) if b else a
             for a, d, b in zip(args, dims, batched)]
    fun = jax.vmap(jaxpr_as_fun(jaxpr), in_axes=[0 if b else None for b in batched[:n]], axis_size=size)
    closed = jax.make_jaxpr(fun)(*[jax.ShapeDtypeStruct(jnp.shape(a), a.dtype) for a in moved[:n]])
    consts = list(closed.consts)
    new = ClosedJaxpr(convert_constvars_jaxpr(closed.jaxpr), ())
    outs = vjp_p.bind(*consts, *moved, jaxpr=new, wrt=tuple(len(consts) + i for i in wrt))
    return outs, [0] * len(outs)


batching.primitive_batchers[vjp_p] = _batch


def _no_jvp(primals, tangents, **params):
    raise NotImplementedError(
        "hlopt: differentiating the reverse-mode derivative of an hlopt annotation (hlopt.jet, hlopt.laplacian, "
        "hlopt.bilaplacian) is not supported: grad of grad, jax.hessian and forward over reverse are refused. "
        "Use forward mode for the outer derivative of a jet (jax.jvp/jax.jacfwd), or a higher-order jet")


ad.primitive_jvps[vjp_p] = _no_jvp


def vjp_at(fun_jaxpr: ClosedJaxpr, values: Sequence[Any], cotangents: Sequence[Any],
           wrt: Sequence[int]) -> list[Any]:
    """The cotangents of inputs `wrt` of `fun_jaxpr` at `values`, given the cotangents of
    its results (symbolic zeros instantiated), by the `hlopt_vjp` primitive; None for
    every other input and for inputs of an integer type."""
    wrt = tuple(i for i in wrt if jnp.issubdtype(fun_jaxpr.in_avals[i].dtype, jnp.inexact))
    cts = [ad.instantiate_zeros(ct) if type(ct) is ad.Zero else ct for ct in cotangents]
    got = iter(vjp_p.bind(*values, *cts, jaxpr=fun_jaxpr, wrt=wrt)) if wrt else iter(())
    return [next(got) if i in wrt else None for i in range(len(values))]


def vjp_of_linear(fun_jaxpr: ClosedJaxpr, args: Sequence[Any], cotangents: Sequence[Any]) -> list[Any]:
    """The transpose of a function linear in its undefined inputs (`ad.UndefinedPrimal`),
    given the cotangents of its results: the cotangents of those inputs (None for the
    defined ones and for inputs of an integer type)."""
    values = [ad.zeros_like_aval(a.aval) if ad.is_undefined_primal(a) else a for a in args]
    return vjp_at(fun_jaxpr, values, cotangents, [i for i, a in enumerate(args) if ad.is_undefined_primal(a)])
