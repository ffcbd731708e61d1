"""Random chains of ops through vjp-expand against `jax.vjp`, in float64 (hypothesis, seeded)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from support.vjp_harness import assert_cotangents_close, hlopt_vjp, jax_vjp, random_cotangents

SHAPE = (4, 4)
_PERM = np.array([2, 0, 3, 1, 1])
_ROWS = np.array([3, 0, 3])

# Ops on (4, 4) float64 arrays, smooth on the values a chain can reach.
UNARY: dict[str, Callable] = {
    "sin": jnp.sin,
    "tanh": jnp.tanh,
    "exp_tanh": lambda x: jnp.exp(jnp.tanh(x)),
    "log1p_square": lambda x: jnp.log1p(x * x),
    "sqrt": lambda x: jnp.sqrt(1.0 + x * x),
    "sigmoid": jax.nn.sigmoid,
    "atan": jnp.arctan,
    "square": jnp.square,
    "abs": jnp.abs,
    "transpose": lambda x: x.T,
    "flip": lambda x: jnp.flip(x, 1),
    "roll": lambda x: jnp.roll(x, 1, axis=0),
    "cumsum": lambda x: jnp.cumsum(x, axis=0),
    "cumprod": lambda x: jnp.cumprod(jnp.tanh(x), axis=1),
    "sort": lambda x: jnp.sort(x, axis=1),
    "center": lambda x: x - x.mean(axis=0, keepdims=True),
    "softmax": lambda x: jax.nn.softmax(x, axis=1),
    "max_broadcast": lambda x: x * jnp.max(x, axis=1, keepdims=True),
    "gather_rows": lambda x: jnp.concatenate([x[_PERM][:3], x[:1]]),
    "pad_slice": lambda x: lax.pad(x, 0.5, [(1, 0, 1), (0, 2, 0)])[::2, 1:5],
    "fori": lambda x: lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) + x, x),
    "cond": lambda x: lax.cond(x[0, 0] > 0, jnp.cos, lambda v: v * v, x),
    "reshape": lambda x: x.reshape(2, 8).T.reshape(4, 4),
    "prod_rows": lambda x: x * jnp.prod(jnp.tanh(x), axis=0),
    "max_pool": lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 1), "SAME"),
}

BINARY: dict[str, Callable] = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": lambda a, b: a / (1.0 + b * b),
    "matmul": lambda a, b: a @ b / 4.0,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "where": lambda a, b: jnp.where(a > b, a * b, jnp.sin(b)),
    "atan2": lambda a, b: jnp.arctan2(a, 1.0 + b * b),
    "scatter_add": lambda a, b: a.at[_ROWS].add(b[:3]),
    "scan": lambda a, b: lax.scan(lambda c, r: (c * jnp.cos(r) + r, c), a[0], b)[1] + a,
    "einsum": lambda a, b: jnp.einsum("ij,kj->ik", a, jnp.tanh(b)),
}

step = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY)), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY)), st.integers(0, 99), st.integers(0, 99)),
)


def _program(n_inputs: int, steps: list[tuple[str, str, int, int]]) -> Callable:
    """A function of `n_inputs` arrays: each step applies an op to values picked from the
    pool of inputs and earlier results; it returns the last two values."""
    def f(*xs):
        pool = list(xs)
        for kind, name, i, j in steps:
            a, b = pool[i % len(pool)], pool[j % len(pool)]
            pool.append(UNARY[name](a) if kind == "unary" else BINARY[name](a, b))
        return pool[-1], pool[-2]

    return f


@settings(derandomize=True, max_examples=30, deadline=None)
@given(n_inputs=st.integers(1, 3), steps=st.lists(step, min_size=1, max_size=6), seed=st.integers(0, 2**16))
def test_random_chain_matches_jax_vjp(n_inputs, steps, seed):
    rng = np.random.default_rng(seed)
    f = _program(n_inputs, steps)
    with jax.enable_x64(True):
        primals = [rng.normal(size=SHAPE) for _ in range(n_inputs)]
        cts = random_cotangents(f, primals, rng)
        want = jax_vjp(f, primals, cts)
        got = hlopt_vjp(f, primals, cts)
    assert_cotangents_close(got, want, primals, 1e-10, f"chain {steps}")
