"""Random programs through hlopt.jet at random orders, against nested jax.jvp in
float64 (and JAX's jet where it has every op), with hypothesis.

A program is a chain of steps over a pool of (2, 3) arrays: elementwise
functions (custom_jvp ones and stop_gradient among them), binary ops, linear
and structural ops that come back to (2, 3) (transpose, reverse, slices and
concatenation, pad, cumsum, sums broadcast back, dot with a constant or with
another value), and reductions. Domains are kept safe by construction (log of
1 + x^2, ...), so every reference value is finite. Seeded (derandomize) with a
bounded example count, so CI stays short.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax
from jax.experimental import jet as jax_jet

import hlopt

from support.references import taylor_by_nested_jvp

SHAPE = (2, 3)
_W = np.random.default_rng(7).normal(size=(3, 3)) / 2

# name -> (function of one (2, 3) array, JAX's jet has the rule)
UNARY: dict[str, tuple[Callable, bool]] = {
    "sin": (jnp.sin, True),
    "cos": (jnp.cos, True),
    "tanh": (jnp.tanh, True),
    "exp_tanh": (lambda x: jnp.exp(jnp.tanh(x)), True),
    "logistic": (lax.logistic, True),
    "log_1px2": (lambda x: jnp.log(1 + x * x), True),
    "log1p_x2": (lambda x: jnp.log1p(x * x), True),
    "sqrt_1px2": (lambda x: jnp.sqrt(1 + x * x), True),
    "rsqrt_1px2": (lambda x: lax.rsqrt(1 + x * x), True),
    "reciprocal": (lambda x: 1 / (1 + x * x), True),
    "atan": (jnp.arctan, False),
    "asinh": (jnp.arcsinh, True),
    "erf": (lax.erf, True),
    "expm1_tanh": (lambda x: jnp.expm1(jnp.tanh(x)), True),
    "sinh_tanh": (lambda x: jnp.sinh(jnp.tanh(x)), True),
    "cube": (lambda x: x**3, True),
    "pow_2_5": (lambda x: (1 + x * x) ** 2.5, True),
    "square": (jnp.square, True),
    "neg": (jnp.negative, True),
    "scale": (lambda x: 0.7 * x + 0.1, True),
    "softplus": (jax.nn.softplus, False),  # custom_jvp: JAX's jet refuses it
    "sinc": (jnp.sinc, False),  # custom_jvp whose rule is a custom_jvp
    "stop_gradient": (lambda x: lax.stop_gradient(x) * x, True),
    "stop_gradient_add": (lambda x: jnp.sin(x) + lax.stop_gradient(jnp.cos(x)), True),
    # linear and structural, back to (2, 3)
    "transpose": (lambda x: x.T.reshape(SHAPE), True),
    "reverse": (lambda x: x[::-1, ::-1], True),
    "cumsum": (lambda x: jnp.cumsum(x, axis=1), True),
    "sum_broadcast": (lambda x: jnp.broadcast_to(x.sum(axis=0, keepdims=True), SHAPE), True),
    "mean_rows": (lambda x: x - x.mean(axis=1, keepdims=True), True),
    "pad_slice": (lambda x: jnp.pad(x, ((1, 0), (0, 1)))[:2, 1:], True),
    "dot_constant": (lambda x: x @ _W, True),
    "max_broadcast": (lambda x: jnp.broadcast_to(x.max(axis=1, keepdims=True), SHAPE) + x, True),
    "prod_broadcast": (lambda x: jnp.broadcast_to(jnp.prod(x, axis=0, keepdims=True), SHAPE), False),
    "sort": (lambda x: jnp.sort(x, axis=1), False),
}

BINARY: dict[str, tuple[Callable, bool]] = {
    "add": (jnp.add, True),
    "sub": (jnp.subtract, True),
    "mul": (jnp.multiply, True),
    "div": (lambda x, y: x / (1 + y * y), True),
    "maximum": (jnp.maximum, True),
    "atan2": (jnp.arctan2, True),
    "pow": (lambda x, y: (1 + x * x) ** jnp.tanh(y), True),
    "where": (lambda x, y: jnp.where(x > y, x * y, jnp.sin(y)), True),
    "concatenate": (lambda x, y: jnp.concatenate([x[:, :1], y[:, 1:]], axis=1), True),
    "matmul": (lambda x, y: (x @ y.T) @ x / 3, True),
}

Step = tuple[str, tuple[int, ...]]


@st.composite
def programs(draw) -> tuple[int, list[Step], int, bool]:
    """(number of inputs, steps, order, factorial_scaled); step i reads earlier values."""
    n_inputs = draw(st.integers(1, 2))
    steps: list[Step] = []
    for i in range(draw(st.integers(1, 6))):
        pool = n_inputs + i
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(sorted(UNARY))), (draw(st.integers(0, pool - 1)),)))
        else:
            steps.append((draw(st.sampled_from(sorted(BINARY))),
                          (draw(st.integers(0, pool - 1)), draw(st.integers(0, pool - 1)))))
    return n_inputs, steps, draw(st.integers(1, 4)), draw(st.booleans())


def _function(steps: list[Step]) -> Callable:
    def f(*inputs):
        pool = list(inputs)
        for name, args in steps:
            fun = UNARY[name][0] if name in UNARY else BINARY[name][0]
            pool.append(fun(*(pool[a] for a in args)))
        return pool[-1] + 0.5 * pool[-2] if len(pool) > 1 else pool[-1]

    return f


def _in_jax_jet(steps: list[Step]) -> bool:
    return all((UNARY.get(name) or BINARY[name])[1] for name, _ in steps)


@settings(derandomize=True, max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_match_nested_jvp_and_jax_jet(program, seed):
    n_inputs, steps, order, factorial_scaled = program
    rng = np.random.default_rng(seed)
    f = _function(steps)
    with jax.enable_x64(True):
        primals = [rng.uniform(-1.5, 1.5, size=SHAPE) for _ in range(n_inputs)]
        series = [[0.5 * rng.normal(size=SHAPE) for _ in range(order)] for _ in range(n_inputs)]
        p, s = hlopt.jet(f, primals, series, factorial_scaled=factorial_scaled)
        ours = [np.asarray(p)] + [np.asarray(t) for t in s]
        # with factorial_scaled, terms are derivatives: coefficient k times k!, in and out
        fact = [math.factorial(k) if factorial_scaled else 1 for k in range(order + 1)]
        plain = [[c / fact[k] for k, c in enumerate(cs, 1)] for cs in series]
        ref = [np.asarray(t) * fact[k] for k, t in enumerate(taylor_by_nested_jvp(f, primals, plain, order))]
        theirs = None
        if _in_jax_jet(steps):
            q, r = jax.jit(lambda a, b: jax_jet.jet(f, a, b, factorial_scaled=factorial_scaled))(primals, series)
            theirs = [np.asarray(q)] + [np.asarray(t) for t in r]
    assert all(np.all(np.isfinite(r)) for r in ref), f"bad test domain: {steps}"
    for k, (g, w) in enumerate(zip(ours, ref)):
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-9 * scale, err_msg=f"{steps}, order {k} vs nested jvp")
        if theirs is not None:
            np.testing.assert_allclose(g, theirs[k], rtol=1e-8, atol=1e-9 * scale,
                                       err_msg=f"{steps}, order {k} vs jax.experimental.jet")
