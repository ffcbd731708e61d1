"""`hlopt.jet`: Taylor-mode differentiation with the contract of JAX's `jet.jet` (experimental).

The function is traced once into a jaxpr and bound to the `hlopt_jet`
primitive, which lowers to the `hlopt.jet` annotation (`called_computations =
[@f]`, `backend_config = {order = K}`, operands and results primal-major); the
`jet-expand` pass turns it into a call of the generated Taylor function.
Inside the IR the coefficients are plain Taylor coefficients y^(k)/k!; this
module converts from and to the derivative convention (`factorial_scaled`).

Before the body is lowered, what its plain lowering would lose for Taylor mode
is kept: `stop_gradient` lowers to the `hlopt.jet.stop_gradient` marker (a zero
series), a `custom_jvp` function to the `hlopt.jet.custom_jvp` marker calling its
primal function and its JVP rule (so the jet follows the rule, as nested
`jax.jvp` does, e.g. at `sinc(0)` or `softplus(0)`), a `custom_linear_solve`
(`solve`, `inv`, `cg`: its lowering calls the solve alone, on a factorization of
a stop_gradient'ed matrix) to the `hlopt.jet.linear_solve` marker calling its
matvec and its solve (jet-expand builds its series order by order from solves
with the primal's factorization), and the primitives the op table keeps whole
(`kept_from`: `logistic` to one `stablehlo.logistic` op, where JAX lowers it to
1/(1+exp(-x)), whose expansion is NaN where exp(-x) overflows). `jet-expand`
removes the markers.

Automatic differentiation. Forward mode (`_jvp`): the tangent of a jet of f is
the jet of jvp(f) on (x, dx) and their series, one more `hlopt_jet` that is
linear in dx and its series; its parameter `linear` records those operands
(and `_batch` keeps it when it moves them). Reverse mode (`_transpose`): JAX
transposes that tangent jet, in the operands it is linear in, by the
`hlopt_vjp` primitive (`hlopt.vjp`), which lowers to an `hlopt.vjp` annotation
of a function holding the tangent jet: `jet-expand` expands the jet, then
`vjp-expand` builds its reverse-mode function with respect to the transposed
operands only; where the body has no primitive with a derivative rule of its own
(custom_jvp, custom_linear_solve...) nor a variadic series (prod, cummax...), that
function is f's jet itself, differentiated at its operands (`_reverse_of_jet`).
So `jax.grad`, `jax.vjp`, `jax.jacrev`, `jax.value_and_grad`
work with respect to primals, series and closed-over arrays (the jet's
leading operands), and what JAX's jvp does to the body (custom_jvp rules,
stop_gradient) holds in reverse mode too, since the compiler transposes JAX's
own tangent computation. Residual policy: JAX saves the jet's operands
(primals, series, closed-over arrays) and nothing else; the backward function
recomputes the jet of f (inside the tangent jet) from them, and `vjp-expand`'s
own policy applies within it. Operands known to be zero (zero series of
closed-over arrays, tangents that are symbolic zeros) are recorded in the
parameter `zeros` and rebuilt as constants inside that function, so that
`jet-expand` skips their terms there as in the forward jet. Differentiating
the backward again (grad of grad, `jax.hessian`) is refused by `hlopt_vjp`;
forward over forward and reverse over forward work.
"""

from __future__ import annotations

import contextvars
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad, batching, mlir

from hlopt.compiler.jax_compat import (ClosedJaxpr, Jaxpr, Primitive, Var, api_boundary, convert_constvars_jaxpr,
                                       custom_jvp_call_p, jaxpr_as_fun, linear_solve_p, lower_called_computation,
                                       register_dce_rule, under_transformation)
from hlopt.passes.autodiff.jet_expand import MAX_ORDER
from hlopt.passes.ir.annotation_names import CUSTOM_JVP, JET, LINEAR_SOLVE, STOP_GRADIENT
from hlopt.passes.mlir import ir
from hlopt.passes.autodiff import table
from hlopt.primitives import annotation_primitive, emit_annotation, result_types
from hlopt.vjp import vjp_at, vjp_of_linear

__all__ = ["jet"]


def _trace(fun: Callable, avals: Sequence[Any]) -> tuple[ClosedJaxpr, list[Any]]:
    """`fun` as a closed jaxpr without constants, and the constants it takes first."""
    closed = jax.make_jaxpr(fun)(*avals)
    return ClosedJaxpr(convert_constvars_jaxpr(closed.jaxpr), ()), list(closed.consts)


def _struct(x: Any) -> jax.ShapeDtypeStruct:
    """`x`'s type to trace a function at: shape, dtype and, over a mesh with explicit axes, sharding."""
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=None if aval.sharding.mesh.empty else aval.sharding)


def _with_directions(aval: Any, shape: tuple[int, ...]) -> jax.core.ShapedArray:
    """`aval` of `shape` (its own, or with the leading directions axis, which is not sharded)."""
    sharding = aval.sharding
    if len(shape) > len(aval.shape):
        sharding = sharding.update(spec=sharding.spec.update(partitions=(None, *sharding.spec)))
    return jax.core.ShapedArray(shape, aval.dtype, sharding=sharding)


def coefficient_shape(shape: tuple[int, ...], k: int, order: int, directions: int, collapsed: bool) -> tuple:
    """The shape of coefficient k of a value of `shape`: with the leading directions
    axis in a batched jet and for coefficients 1..K-1 of a collapsed one."""
    if directions == 0 or (collapsed and k == order):
        return tuple(shape)
    return (directions, *shape)


def _abstract_eval(*avals, jaxpr: ClosedJaxpr, order: int, directions: int = 0, collapsed: bool = False,
                   weights: tuple[float, ...] | None = None, linear: tuple[int, ...] = (),
                   zeros: tuple[int, ...] = (), live: tuple[bool, ...] | None = None):
    return _live(_all_outputs(jaxpr, order, directions, collapsed), live)


def _all_outputs(jaxpr: ClosedJaxpr, order: int, directions: int, collapsed: bool) -> list[Any]:
    """The avals of every result of a jet: each output's primal, then each output's K coefficients."""
    outs = [jax.core.ShapedArray(a.shape, a.dtype, sharding=a.sharding) for a in jaxpr.out_avals]
    return outs + [_with_directions(a, coefficient_shape(a.shape, k, order, directions, collapsed))
                   for a in outs for k in range(1, order + 1)]


def _live(values: Sequence[Any], live: tuple[bool, ...] | None) -> list[Any]:
    """The results a jet equation keeps (`live`, set by jax's dead-code elimination), in order."""
    return list(values) if live is None else [v for v, keep in zip(values, live) if keep]


def _dce(used_outputs: list[bool], eqn: Any) -> tuple[list[bool], Any]:
    """Dead-code elimination of a jet (jax.jit runs it before lowering): the results no
    one reads are dropped from the equation, and its `live` parameter tells the lowering
    which of the jet's results to keep, so that hlopt's passes remove the work that only
    they need before jet-expand stacks the coefficients of one dot (under `hlopt.jit`
    hlopt's own dead-code elimination of the whole program sees the same)."""
    if all(used_outputs):
        return [True] * len(eqn.invars), eqn
    if not any(used_outputs) and not eqn.effects:
        return [False] * len(eqn.invars), None
    params = eqn.params
    old = params.get("live") or (True,) * len(_all_outputs(
        params["jaxpr"], params["order"], params.get("directions", 0), params.get("collapsed", False)))
    used = iter(used_outputs)
    live = tuple(keep and next(used) for keep in old)
    outvars = [v for v, keep in zip(eqn.outvars, used_outputs) if keep]
    return [True] * len(eqn.invars), eqn.replace(params={**params, "live": live}, outvars=outvars)


def _lower_called(name: str, jaxpr: ClosedJaxpr, ctx: Any) -> str:
    """Lower `jaxpr` (its constants embedded) to a private function; its symbol name."""
    func_op = lower_called_computation(name=name, jaxpr=jaxpr, module_context=ctx.module_context,
                                       in_avals=jaxpr.in_avals, out_avals=jaxpr.out_avals)
    return func_op.name.value


stop_gradient_p = annotation_primitive(
    "hlopt_jet_stop_gradient", lambda x: x,
    lambda ctx, x: emit_annotation(STOP_GRADIENT, [x], result_types(ctx), {}), multiple_results=False)



def _as_one_op(name: str) -> Primitive:
    """A primitive of one operand, elementwise, that lowers to the one op `name`."""
    primitive = Primitive(f"hlopt_jet_{name.rsplit('.', 1)[-1]}")
    primitive.def_abstract_eval(lambda x: x)
    mlir.register_lowering(primitive, lambda ctx, x: [ir.Operation.create(name, results=[x.type], operands=[x]).result])
    return primitive


def _custom_jvp_lowering(ctx, *operands, primal: ClosedJaxpr, jvp: ClosedJaxpr):
    functions = [_lower_called("hlopt_custom_jvp_primal", primal, ctx), _lower_called("hlopt_custom_jvp", jvp, ctx)]
    return emit_annotation(CUSTOM_JVP, operands, result_types(ctx), {}, called_computations=functions)


custom_jvp_p = annotation_primitive("hlopt_jet_custom_jvp", lambda *avals, primal, jvp: primal.out_avals,
                                    _custom_jvp_lowering)


def _linear_solve_lowering(ctx, *operands, matvec: ClosedJaxpr, solve: ClosedJaxpr):
    functions = [_lower_called("hlopt_linear_solve_matvec", matvec, ctx),
                 _lower_called("hlopt_linear_solve", solve, ctx)]
    return emit_annotation(LINEAR_SOLVE, operands, result_types(ctx), {}, called_computations=functions)


# operands: the matvec's constants, the solve's, the right-hand sides; results: the solutions
taylor_linear_solve_p = annotation_primitive("hlopt_jet_linear_solve", lambda *avals, matvec, solve: solve.out_avals,
                                             _linear_solve_lowering)

# primitive -> the one a jet body binds instead (its parameters dropped): the stop_gradient
# marker, and the ops the op table keeps whole (`OpEntry.kept_from`)
TAYLOR_LOWERINGS: dict[Primitive, Primitive] = {
    lax.stop_gradient_p: stop_gradient_p,
    **{getattr(lax, f"{entry.kept_from}_p"): _as_one_op(entry.name) for entry in table.ENTRIES if entry.kept_from},
}

# The order of the jets being lowered around the current one: a jet inside a jet
# body is differentiated by both, so its custom_jvp markers need both orders.
_enclosing_order: contextvars.ContextVar[int] = contextvars.ContextVar("hlopt_jet_enclosing_order", default=0)


def for_taylor(jaxpr: Any, budget: int, done: dict[tuple[int, int], tuple[Any, Any]]) -> Any:
    """`jaxpr` (open or closed) with `TAYLOR_LOWERINGS` applied and `custom_jvp`
    calls turned into markers, in sub-jaxprs too, for jets of total order `budget`;
    the same object if nothing changes. `done` memoizes by (id, budget) and keeps
    the jaxpr alive, so that its id is not reused while the memo lives."""
    key = (id(jaxpr), budget)
    if key in done:
        return done[key][1]
    if isinstance(jaxpr, ClosedJaxpr):
        inner = for_taylor(jaxpr.jaxpr, budget, done)
        new = jaxpr if inner is jaxpr.jaxpr else jaxpr.replace(jaxpr=inner)
    else:
        eqns = [_eqn_for_taylor(e, budget, done) for e in jaxpr.eqns]
        new = jaxpr if all(a is b for a, b in zip(eqns, jaxpr.eqns)) else jaxpr.replace(eqns=eqns)
    done[key] = (jaxpr, new)
    return new


def _eqn_for_taylor(eqn: Any, budget: int, done: dict[tuple[int, int], tuple[Any, Any]]) -> Any:
    swap = TAYLOR_LOWERINGS.get(eqn.primitive)
    if swap is not None:
        return eqn.replace(primitive=swap, params={})
    if eqn.primitive is custom_jvp_call_p and budget > 0:
        return eqn.replace(primitive=custom_jvp_p, params={
            "primal": for_taylor(eqn.params["call_jaxpr"], budget, done),
            "jvp": for_taylor(_custom_jvp_tangents(eqn), budget - 1, done)})
    if eqn.primitive is linear_solve_p and budget > 0:
        # the marker takes the matvec's and the solve's constants and the right-hand sides
        # (the vecmat and the transposed solve serve reverse mode, which JAX traces itself)
        lengths, jaxprs = eqn.params["const_lengths"], eqn.params["jaxprs"]
        solve_at = lengths.matvec + lengths.vecmat
        invars = (eqn.invars[:lengths.matvec] + eqn.invars[solve_at:solve_at + lengths.solve]
                  + eqn.invars[sum(lengths):])
        return eqn.replace(primitive=taylor_linear_solve_p, invars=invars, params={
            "matvec": for_taylor(jaxprs.matvec, budget, done), "solve": for_taylor(jaxprs.solve, budget, done)})
    params = {k: _param_for_taylor(v, budget, done) for k, v in eqn.params.items()}
    return eqn if all(params[k] is v for k, v in eqn.params.items()) else eqn.replace(params=params)


def _param_for_taylor(value: Any, budget: int, done: dict[tuple[int, int], tuple[Any, Any]]) -> Any:
    """An equation parameter with its jaxprs prepared for Taylor mode, of the same type:
    a tuple stays a tuple and a named tuple (custom_linear_solve's `jaxprs`, with
    `.solve`, `.matvec`...) the same named tuple; the same object if nothing changes."""
    if isinstance(value, (Jaxpr, ClosedJaxpr)):
        return for_taylor(value, budget, done)
    if isinstance(value, tuple):
        items = [_param_for_taylor(v, budget, done) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _custom_jvp_tangents(eqn: Any) -> ClosedJaxpr:
    """The JVP rule of a `custom_jvp_call` equation as a closed jaxpr: (its operands,
    the tangents of the inexact ones) -> the tangents of its inexact results."""
    invars = [Var(v.aval) for v in eqn.invars]
    call = jaxpr_as_fun(ClosedJaxpr(
        Jaxpr(constvars=[], invars=invars, outvars=eqn.outvars, eqns=[eqn.replace(invars=invars)],
              effects=eqn.effects, debug_info=eqn.params["call_jaxpr"].jaxpr.debug_info), []))
    avals = [v.aval for v in eqn.invars]
    inexact_in = [jnp.issubdtype(a.dtype, jnp.inexact) for a in avals]
    inexact_out = [jnp.issubdtype(v.aval.dtype, jnp.inexact) for v in eqn.outvars]

    def tangents(*args):
        given = iter(args[len(avals):])
        dx = [next(given) if d else np.zeros(a.shape, jax.dtypes.float0) for a, d in zip(avals, inexact_in)]
        dy = jax.jvp(call, tuple(args[:len(avals)]), tuple(dx))[1]
        return [t for t, d in zip(dy, inexact_out) if d]

    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    return jax.make_jaxpr(tangents)(*structs, *[s for s, d in zip(structs, inexact_in) if d])


def _lowering(ctx, *operands, jaxpr: ClosedJaxpr, order: int, directions: int = 0, collapsed: bool = False,
              weights: tuple[float, ...] | None = None, linear: tuple[int, ...] = (),
              zeros: tuple[int, ...] = (), live: tuple[bool, ...] | None = None):
    budget = order + _enclosing_order.get()
    token = _enclosing_order.set(budget)
    try:
        name = _lower_called("hlopt_jet_fun", for_taylor(jaxpr, budget, {}), ctx)
    finally:
        _enclosing_order.reset(token)
    config: dict[str, Any] = {"order": order}
    if collapsed:
        config["collapsed"] = True
        if weights is not None:
            config["weights"] = ir.DenseF64ArrayAttr.get(list(weights))
    elif directions:
        config["directions"] = directions
    types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in _all_outputs(jaxpr, order, directions, collapsed)]
    return _live(emit_annotation(JET, operands, types, config, called_computations=[name]), live)


jet_p = annotation_primitive("hlopt_jet", _abstract_eval, _lowering)
register_dce_rule(jet_p, _dce)


def _zero_series(values: Sequence[Any], order: int, directions: int = 0, collapsed: bool = False) -> list[Any]:
    return [jnp.zeros(coefficient_shape(jnp.shape(v), k, order, directions, collapsed), v.dtype)
            for v in values for k in range(1, order + 1)]


def series_positions(n: int, order: int, first: int, count: int) -> tuple[int, ...]:
    """The operand positions of the series of primals first..first+count-1 of a jet
    with n primals (operands primal-major: n primals, then K coefficients each)."""
    return tuple(range(n + first * order, n + (first + count) * order))


def _batch(args, dims, *, jaxpr: ClosedJaxpr, order: int, directions: int = 0, collapsed: bool = False,
           weights: tuple[float, ...] | None = None, linear: tuple[int, ...] = (),
           zeros: tuple[int, ...] = (), live: tuple[bool, ...] | None = None):
    """vmap of a jet is the jet of the vmapped function: a primal whose value or
    series is batched is batched (with its series) in the new function. A standard
    jet whose series alone are batched (vmap over directions) becomes one jet batched
    over the directions: its primal stays unbatched and is computed once. In a
    batched or collapsed jet the vmapped axis of a coefficient follows its
    directions axis. A coefficient that is not batched while its primal is (the
    directions of a Laplacian vmapped over points) rides on a new zero primal that
    the function broadcasts over the batch and adds to the primal, so that the
    broadcast is inside the jet, where jet-expand multiplies before it."""
    if live is not None:  # the whole jet, batched, then the results kept
        outs, out_dims = _batch(args, dims, jaxpr=jaxpr, order=order, directions=directions, collapsed=collapsed,
                                weights=weights, linear=linear, zeros=zeros)
        return _live(outs, live), _live(out_dims, live)
    n = len(jaxpr.in_avals)
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    mode = {"directions": directions, "collapsed": collapsed, "weights": weights}
    if directions == 0 and order > 0 and all(d is None for d in dims[:n]):
        coeffs = [jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size, *jnp.shape(a)))
                  for a, d in zip(args[n:], dims[n:])]
        outs = jet_p.bind(*args[:n], *coeffs, jaxpr=jaxpr, order=order, directions=size, linear=linear, zeros=zeros)
        n_out = len(jaxpr.out_avals)
        return outs, [None] * n_out + [0] * (len(outs) - n_out)
    batched = [dims[i] is not None
               or any(dims[n + i * order + k] is not None for k in range(order))
               for i in range(n)]

    def moved(x, d, b, at):
        if not b:
            return x
        if d is None:
            return jnp.broadcast_to(jnp.expand_dims(x, at), (*jnp.shape(x)[:at], size, *jnp.shape(x)[at:]))
        return jnp.moveaxis(x, d, at)

    def axis(k):
        return len(coefficient_shape((), k, order, directions, collapsed))

    def position(i, k):
        return n + i * order + k - 1

    # A coefficient not batched while its primal is: carried by a new primal z (-0.0,
    # not batched) that the function adds to the primal, so the broadcast along the
    # batch happens inside the jet, where jet-expand's rules see it (a dot_general then
    # multiplies the coefficient before broadcasting it).
    unbatched = {i: [k for k in range(1, order + 1)
                     if dims[position(i, k)] is None and position(i, k) not in zeros]
                 for i in range(n) if dims[i] is not None and not linear and jnp.issubdtype(args[i].dtype, jnp.inexact)}
    unbatched = {i: ks for i, ks in unbatched.items() if ks}
    split = list(unbatched)
    primals = [moved(args[i], dims[i], batched[i], 0) for i in range(n)]
    # -0.0 (both parts if complex), not 0.0: x + -0.0 is x for every x, where -0.0 + 0.0
    # would be +0.0 (1/x's sign)
    zs = [-jnp.zeros(jnp.shape(args[i])[:dims[i]] + jnp.shape(args[i])[dims[i] + 1:], args[i].dtype) for i in split]

    def zero_coefficient(x, k):
        return jnp.zeros(coefficient_shape(jnp.shape(x), k, order, directions, collapsed), x.dtype)

    coeffs = [zero_coefficient(primals[i], k) if k in unbatched.get(i, ())
              else moved(args[position(i, k)], dims[position(i, k)], batched[i], axis(k))
              for i in range(n) for k in range(1, order + 1)]
    z_coeffs = [args[position(i, k)] if k in unbatched[i] else zero_coefficient(z, k)
                for i, z in zip(split, zs) for k in range(1, order + 1)]
    vmapped = jax.vmap(jaxpr_as_fun(jaxpr), in_axes=[0 if b else None for b in batched], axis_size=size)

    def fun(*operands):
        xs = list(operands[:n])
        for i, z in zip(split, operands[n:]):
            xs[i] = xs[i] + jnp.broadcast_to(z, jnp.shape(xs[i]))
        return vmapped(*xs)

    new_jaxpr, consts = _trace(fun, [jax.ShapeDtypeStruct(jnp.shape(p), p.dtype) for p in (*primals, *zs)])
    c, m = len(consts), len(zs)

    def shifted(positions):
        return tuple(c + i if i < n else c + n + m + c * order + i - n for i in positions)

    moved_out = shifted(position(i, k) for i, ks in unbatched.items() for k in ks)
    z_zero = tuple(c + n + m + (c + n + j) * order + k - 1 for j, i in enumerate(split)
                   for k in range(1, order + 1) if k not in unbatched[i])
    outs = jet_p.bind(*consts, *primals, *zs, *_zero_series(consts, order, directions, collapsed), *coeffs, *z_coeffs,
                      jaxpr=new_jaxpr, order=order, linear=shifted(linear),
                      zeros=tuple(sorted({*series_positions(c + n + m, order, 0, c), *shifted(zeros), *moved_out,
                                          *z_zero})), **mode)
    n_out = len(new_jaxpr.out_avals)
    return outs, [0] * n_out + [axis(k) for _ in range(n_out) for k in range(1, order + 1)]


batching.primitive_batchers[jet_p] = _batch


# the jaxpr of a tangent jet `_jvp` binds -> the jaxpr of the jet it is the derivative of
_tangent_of: "weakref.WeakKeyDictionary[ClosedJaxpr, ClosedJaxpr]" = weakref.WeakKeyDictionary()


def _tangent_positions(c: int, n: int, order: int) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """Where operand j of a jet with n primals sits in the tangent jet `_jvp` binds (c
    constants; its primals consts, x, dx, then K coefficients each): as a primal, and
    as its tangent."""
    m = c + 2 * n

    def primal_at(j):
        return c + j if j < n else m + c * order + j - n

    def tangent_at(j):
        return c + n + j if j < n else m + (c + n) * order + j - n

    return primal_at, tangent_at


def _jvp(primals, tangents, *, jaxpr: ClosedJaxpr, order: int, directions: int = 0,
         collapsed: bool = False, weights: tuple[float, ...] | None = None, linear: tuple[int, ...] = (),
         zeros: tuple[int, ...] = (), live: tuple[bool, ...] | None = None):
    """Forward mode through a jet: d/de of the series of f(x(t) + e dx(t)) is the
    series of jvp(f)(x(t), dx(t)), i.e. the jet of jvp(f) on (x, dx) and their series,
    which is linear in dx and its series (marked `linear`, for `_transpose`). Operands
    known to be zero (`zeros`: zero series and zero tangents) stay marked."""
    if live is not None:  # the whole jet's forward mode, then the results kept
        outs, tangent_outs = _jvp(primals, tangents, jaxpr=jaxpr, order=order, directions=directions,
                                  collapsed=collapsed, weights=weights, linear=linear, zeros=zeros)
        return _live(outs, live), _live(tangent_outs, live)
    n = len(jaxpr.in_avals)
    mode = {"directions": directions, "collapsed": collapsed, "weights": weights}
    zero_tangents = [j for j, t in enumerate(tangents) if type(t) is ad.Zero]
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    outs = jet_p.bind(*primals, jaxpr=jaxpr, order=order, linear=linear, zeros=zeros, **mode)

    def tangent_fun(*args):
        return jax.jvp(jaxpr_as_fun(jaxpr), args[:n], args[n:])[1]

    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in jaxpr.in_avals]
    tangent_jaxpr, consts = _trace(tangent_fun, avals + avals)
    _tangent_of[tangent_jaxpr] = jaxpr
    c = len(consts)
    m = c + 2 * n
    primal_at, tangent_at = _tangent_positions(c, n, order)
    tangent_outs = jet_p.bind(*consts, *primals[:n], *tangents[:n], *_zero_series(consts, order, directions, collapsed),
                              *primals[n:], *tangents[n:], jaxpr=tangent_jaxpr, order=order,
                              linear=tuple(map(tangent_at, range(len(primals)))),
                              zeros=tuple(sorted({*series_positions(m, order, 0, c), *map(primal_at, zeros),
                                                  *map(tangent_at, zeros), *map(tangent_at, zero_tangents)})),
                              **mode)
    return outs, tangent_outs


ad.primitive_jvps[jet_p] = _jvp


def _transpose(cotangents, *args, jaxpr: ClosedJaxpr, order: int, directions: int = 0, collapsed: bool = False,
               weights: tuple[float, ...] | None = None, linear: tuple[int, ...] = (),
               zeros: tuple[int, ...] = (), live: tuple[bool, ...] | None = None):
    """Reverse mode through a jet: JAX transposes the tangent jet of `_jvp`, which is
    linear in the operands `linear`, by an `hlopt.vjp` annotation of that jet taken
    with respect to the undefined operands (see the module docstring)."""
    undefined = [i for i, a in enumerate(args) if ad.is_undefined_primal(a)]
    if not set(undefined) <= set(linear):
        raise NotImplementedError(
            "hlopt.jet: transposing a jet in operands it is not known to be linear in; reverse mode reaches a jet "
            "only through its forward-mode rule (jax.grad, jax.vjp, jax.linearize of a function calling hlopt.jet)")
    params = {"jaxpr": jaxpr, "order": order, "directions": directions, "collapsed": collapsed,
              "weights": weights, "linear": linear, "zeros": zeros, "live": live}
    primal = _tangent_of.get(jaxpr)
    if primal is not None and not _has_derivative_rule(primal.jaxpr, set()):
        got = _reverse_of_jet(primal, cotangents, args, params)
        if got is not None:
            return got
    avals = [a.aval if ad.is_undefined_primal(a) else jax.typeof(a) for a in args]
    # operands known to be zero are built inside the differentiated function, where
    # jet-expand sees them as constants (as in the forward jet) and skips their terms
    kept = [i for i, a in enumerate(args) if i not in zeros or ad.is_undefined_primal(a)]

    def fun(*operands):
        full = [jnp.zeros(a.shape, a.dtype) for a in avals]
        for i, x in zip(kept, operands):
            full[i] = x
        return jet_p.bind(*full, **params)

    closed = jax.make_jaxpr(fun)(*[jax.ShapeDtypeStruct(avals[i].shape, avals[i].dtype) for i in kept])
    got = dict(zip(kept, vjp_of_linear(closed, [args[i] for i in kept], cotangents)))
    return [got.get(i) for i in range(len(args))]


# primitives whose derivative is a rule of their own rather than that of the ops they lower to
# (a custom_linear_solve lowers its solve on a stop_gradient'ed factorization, a custom_jvp
# function's primal may differ from its rule, as relu's at 0)
RULE_DERIVED = ("custom_jvp_call", "custom_vjp_call", "custom_lin", "custom_linear_solve",
                "hlopt_jet_custom_jvp", "hlopt_jet_linear_solve")
# primitives whose series jet-expand builds with a variadic reduce or reduce_window (products,
# cumulative max / min carrying their coefficients), which vjp-expand has no rule for
VARIADIC_SERIES = ("reduce_prod", "cumprod", "cummax", "cummin", "reduce_max", "reduce_min",
                   "reduce_window", "reduce_window_max", "reduce_window_min")


def _has_derivative_rule(jaxpr: Jaxpr, seen: set[int]) -> bool:
    """Whether `jaxpr` (or a jaxpr in its equations' parameters) binds a `RULE_DERIVED` or a
    `VARIADIC_SERIES` primitive."""
    if id(jaxpr) in seen:
        return False
    seen.add(id(jaxpr))

    def inner(value: Any) -> bool:
        if isinstance(value, ClosedJaxpr):
            return _has_derivative_rule(value.jaxpr, seen)
        if isinstance(value, Jaxpr):
            return _has_derivative_rule(value, seen)
        return isinstance(value, (tuple, list)) and any(inner(v) for v in value)

    return any(eqn.primitive.name in RULE_DERIVED + VARIADIC_SERIES or any(inner(v) for v in eqn.params.values())
               for eqn in jaxpr.eqns)


def _reverse_of_jet(f: ClosedJaxpr, cotangents, args, params: dict) -> list[Any] | None:
    """The transpose of the tangent jet of f's jet (`_jvp`) as the reverse mode of f's jet
    itself at its operands: the cotangent of tangent operand `tangent_at(j)` is that of
    the jet's operand j, read at `primal_at(j)`. `vjp-expand` then differentiates the
    expanded jet of f (its coefficients' own ops, whose forward values are the
    residuals) instead of the jet of JAX's tangent formulas (tanh's (g + g y)(1 - y)
    takes two series products, each transposed term by term). None where the layout
    does not allow it (a primal operand undefined, integer results whose tangents are
    float0): `_transpose` then transposes the tangent jet, as it does for a jet whose body
    binds a primitive with a derivative rule of its own (`RULE_DERIVED`: the reverse mode
    of its expanded ops would not follow the rule) or one whose series is a variadic
    reduction (`VARIADIC_SERIES`)."""
    order, zeros = params["order"], set(params["zeros"])
    n = len(f.in_avals)
    count = n * (order + 1)  # the jet's operands: n primals and their K coefficients each
    c = len(args) // (order + 1) - 2 * n
    primal_at, tangent_at = _tangent_positions(c, n, order)
    operand_of = {tangent_at(j): j for j in range(count)}
    undefined = [i for i, a in enumerate(args) if ad.is_undefined_primal(a)]
    if any(i not in operand_of for i in undefined) or any(ad.is_undefined_primal(args[primal_at(j)])
                                                          for j in range(count)) \
            or [a.dtype for a in f.out_avals] != [a.dtype for a in params["jaxpr"].out_avals]:
        return None
    wrt = {operand_of[i] for i in undefined}
    known_zero = {j for j in range(count) if primal_at(j) in zeros} - wrt
    kept = [j for j in range(count) if j not in known_zero]
    avals = [jax.typeof(args[primal_at(j)]) for j in range(count)]

    def fun(*operands):
        full = [jnp.zeros(a.shape, a.dtype) for a in avals]
        for j, x in zip(kept, operands):
            full[j] = x
        return jet_p.bind(*full, jaxpr=f, order=order, directions=params["directions"],
                          collapsed=params["collapsed"], weights=params["weights"],
                          zeros=tuple(sorted(known_zero)), live=params["live"])

    closed = jax.make_jaxpr(fun)(*[jax.ShapeDtypeStruct(avals[j].shape, avals[j].dtype) for j in kept])
    got = vjp_at(closed, [args[primal_at(j)] for j in kept], cotangents,
                 [k for k, j in enumerate(kept) if j in wrt])
    out: list[Any] = [None] * len(args)
    for k, j in enumerate(kept):
        if j in wrt:
            out[tangent_at(j)] = got[k]
    return out


ad.primitive_transposes[jet_p] = _transpose


def _check_series(primals: Sequence[Any], series: Sequence[Any]) -> int:
    if not isinstance(primals, (tuple, list)) or not isinstance(series, (tuple, list)):
        raise TypeError("jet: primals and series must be tuples or lists, one entry per argument of fun")
    if len(primals) != len(series):
        raise ValueError(f"jet: {len(primals)} primals but {len(series)} series")
    try:
        (order,) = set(map(len, series))
    except ValueError:
        raise ValueError("jet terms have inconsistent lengths for different arguments") from None
    if order > MAX_ORDER:
        raise ValueError(f"jet: the order is {order}; hlopt builds jets of order at most {MAX_ORDER}")
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
    if order == 0:
        out = fun(*primals)
        return out, jax.tree_util.tree_map(lambda _: [], out)
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

    jaxpr, consts = _trace(flat_fun, [_struct(x) for x in leaves])
    outs = jet_p.bind(*consts, *leaves, *_zero_series(consts, order), *coeffs, jaxpr=jaxpr, order=order,
                      zeros=series_positions(len(consts) + len(leaves), order, 0, len(consts)))
    n_out = len(jaxpr.out_avals)
    primals_out, terms = outs[:n_out], outs[n_out:]
    series_out = [[_scaled(terms[i * order + k], math.factorial(k + 1) if factorial_scaled else 1) for k in range(order)]
                  for i in range(n_out)]
    out_tree = out_tree_box[-1]
    return jax.tree_util.tree_unflatten(out_tree, primals_out), jax.tree_util.tree_unflatten(out_tree, series_out)


_eager: "weakref.WeakKeyDictionary[Callable, dict[bool, Callable]]" = weakref.WeakKeyDictionary()


@api_boundary
def jet(fun: Callable, primals: Sequence[Any], series: Sequence[Sequence[Any]],
        factorial_scaled: bool = True) -> tuple[Any, Any]:
    """Taylor-mode higher-order differentiation, the contract of JAX's experimental `jet.jet`.

    Args:
      fun: the function to expand.
      primals: one value (an array or a pytree of arrays) per argument of `fun`.
      series: one sequence of K terms per argument, each shaped like its primal.
      factorial_scaled: with True (the default) term k is the k-th derivative along the
        curve, as in JAX's jet; with False, the plain Taylor coefficient (derivative / k!).

    Returns:
      `(fun(*primals), series_out)`, `series_out` holding the K output terms of each output
      leaf; with K = 0, `(fun(*primals), [])` per output leaf.

    Raises:
      ValueError: the order K is above 64, or the series do not match the primals.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> y, (dy, d2y) = hlopt.jet(jnp.exp, (0.0,), ((1.0, 0.0),))   # exp along t -> t
      >>> float(y), float(dy), float(d2y)
      (1.0, 1.0, 1.0)
    """
    from hlopt.staging import jit

    if under_transformation():  # also when only `fun` closes over a tracer
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
