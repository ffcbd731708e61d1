"""Reference results and shared cases the tests compare hlopt against, used by the jet, PDE,
sparse and vjp tests (the vjp harness is vjp_harness.py): plain Taylor coefficients by nested
jax.jvp, a jvp-and-gradient comparison, an unbiasedness check, and programs and sparse layouts
more than one test file uses."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import hlopt

def taylor_by_nested_jvp(f: Callable, primals, series, order: int):
    """Plain Taylor coefficients (y^(k)/k!) of t -> f(x(t)), x_i(t) = x_i0 + sum_k x_ik t^k
    per argument, by `order` nested jax.jvp in one jitted function.

    t is real, of the first floating-point argument's precision; integer arguments stay
    fixed; complex arguments and pytree outputs work. Level k of the nest returns the
    derivatives 0..k.
    """
    inexact = [jnp.issubdtype(np.asarray(x).dtype, jnp.inexact) for x in primals]
    dtypes = [np.asarray(x).dtype for x, d in zip(primals, inexact) if d]
    t0 = np.zeros((), jnp.finfo(dtypes[0]).dtype if dtypes else float)

    def derivatives(t):
        return (f(*[x0 + sum(c * t**k for k, c in enumerate(cs, 1)) if d else x0
                    for x0, cs, d in zip(primals, series, inexact)]),)

    for _ in range(order):
        def derivatives(t, inner=derivatives):
            values, tangents = jax.jvp(inner, (t,), (jnp.ones_like(t),))
            return values + (tangents[-1],)

    def coefficients(t):  # the division in the same program: no op compiled on its own per coefficient
        return [jax.tree_util.tree_map(lambda v, k=k: v / math.factorial(k), d) for k, d in enumerate(derivatives(t))]

    return jax.jit(coefficients)(t0)



def assert_jvp_and_grad_match(f: Callable, ref: Callable, primals, tangents, weights, assert_close) -> None:
    """hlopt.jit of f's jvp and of the gradient of sum(f(...) * weights) in every argument
    equal jax.jit's of the reference `ref`, each compared by `assert_close(got, want)`."""
    n = len(primals)

    def jvp_and_grad(g):
        def run(*args):
            loss = lambda *a: (g(*a) * weights).sum()  # noqa: E731
            return jax.jvp(g, args[:n], args[n:]), jax.grad(loss, tuple(range(n)))(*args[:n])
        return run

    (p, t), grads = hlopt.jit(jvp_and_grad(f))(*primals, *tangents)
    (want_p, want_t), want_grads = jax.jit(jvp_and_grad(ref))(*primals, *tangents)
    for got, want in zip((p, t, *grads), (want_p, want_t, *want_grads), strict=True):
        assert_close(got, want)


def assert_unbiased(samples, exact: float) -> None:
    """The mean of `samples` within 5 standard errors (measured from the same samples) of `exact`."""
    samples = np.asarray(samples)
    stderr = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - exact) < 5 * stderr + 1e-12, (samples.mean(), exact, stderr)


def while_data_dependent(x):
    """A while loop whose number of steps depends on the primal values."""
    def cond(s):
        return s[1].sum() < 20.0

    def body(s):
        return s[0] + 1, s[1] * 1.3 + 0.1 * jnp.sin(s[1])

    return lax.while_loop(cond, body, (0, x))[1]


def vjp_of_a_jet(f_body: str) -> str:
    """A module whose @main takes the hlopt.vjp of @second(x, v), the second Taylor coefficient
    (an order-2 hlopt.jet) of @f(%x: tensor<4xf32>) -> tensor<4xf32> along v; `f_body` is @f's
    body (its ops and return), as the Python side will emit the backward of a jet."""
    return """
func.func @main(%x: tensor<4xf32>, %v: tensor<4xf32>, %ct: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %g:2 = stablehlo.custom_call @hlopt.vjp(%x, %v, %ct) {api_version = 4 : i32, called_computations = [@second], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %g#0, %g#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @second(%x: tensor<4xf32>, %v: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<4xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %r#2 : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
""" + f_body.strip("\n") + "\n}"


def hostile_csr_layout(m: int, k: int, seed: int):
    """(data, cols, indptr) of an m x k CSR matrix for the SpMV kernels' tests: 0..12 entries a
    row (empty rows too, odd and even lengths), columns at random in [0, k) with some negative,
    past k and at the int32 extremes; the last rows of 20-40 entries, their columns at both edges
    of x and just past them; and 5 entries of padding after indptr[m]."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 13, m)
    counts[rng.random(m) < 0.1] = 0
    counts[-8:] = rng.integers(20, 40, min(m, 8))
    cols = rng.integers(0, k, int(counts.sum()) + 5).astype(np.int32)
    odd = rng.random(len(cols)) < 0.01
    cols[odd] = rng.choice(np.array([-1, k, k + 7, -(2**31), 2**31 - 1]), int(odd.sum()))
    cols[-40:-5] = rng.choice(np.array([0, k - 1, k, -1]), len(cols[-40:-5]))  # the last rows' ends: both edges of x
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return rng.standard_normal(len(cols)), cols, indptr
