"""A physics-informed training step under plain `jax.jit` with `hlopt.laplacian` in the loss.

A hand-written MLP u(x) is fitted to Poisson's equation -Δu = f on random
collocation points with a hand-written Adam step; five steps with
`hlopt.laplacian` equal (float64, 1e-10) five steps with the Laplacian as
`jnp.trace(jax.hessian(u))`, under `jax.jit` and under `hlopt.jit`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt



@pytest.fixture(autouse=True, scope="module")
def float64():
    """float64 for this module's tests only: a global switch at import would change every later file."""
    with jax.enable_x64(True):
        yield

DIM, WIDTH, POINTS = 3, 16, 12


def init(key):
    sizes = [DIM, WIDTH, WIDTH, 1]
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (m, n), jnp.float64) / np.sqrt(m), jnp.zeros(n, jnp.float64))
            for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[0]


def source(x):
    return jnp.sum(jnp.sin(np.pi * x))


def hessian_laplacian(fun):
    return lambda x: jnp.trace(jax.hessian(fun)(x))


def loss(params, points, laplacian):
    residual = jax.vmap(lambda x: -laplacian(lambda y: mlp(params, y))(x) - source(x))(points)
    boundary = jax.vmap(lambda x: mlp(params, x))(jnp.clip(points * 2, -1, 1))
    return jnp.mean(residual**2) + jnp.mean(boundary**2)


def adam_step(params, state, points, laplacian, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    value, grads = jax.value_and_grad(loss)(params, points, laplacian)
    m, v, t = state
    t = t + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps), params, m, v)
    return params, (m, v, t), value


def sgd_step(params, state, points, laplacian, lr=1e-2):
    value, grads = jax.value_and_grad(loss)(params, points, laplacian)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), state, value


def train(step, jit, laplacian, steps=5):
    params = init(jax.random.key(0))
    state = (jax.tree_util.tree_map(jnp.zeros_like, params), jax.tree_util.tree_map(jnp.zeros_like, params),
             jnp.zeros((), jnp.int32))
    points = jax.random.uniform(jax.random.key(1), (POINTS, DIM), jnp.float64, -1, 1)
    compiled = jit(lambda p, s, x: step(p, s, x, laplacian))
    losses = []
    for _ in range(steps):
        params, state, value = compiled(params, state, points)
        losses.append(value)
    return params, np.asarray(losses)


@functools.cache
def hessian_trace_training(step):
    """`train(step, jax.jit, hessian_laplacian)`, once per step rule (both jits' cases compare with it)."""
    return train(step, jax.jit, hessian_laplacian)


@pytest.mark.parametrize("step", [adam_step, sgd_step], ids=["adam", "sgd"])
@pytest.mark.parametrize("jit", [jax.jit, hlopt.jit], ids=["jax.jit", "hlopt.jit"])
def test_five_training_steps_equal_the_hessian_trace_loss(step, jit):
    ours, our_losses = train(step, jit, hlopt.laplacian)
    want, want_losses = hessian_trace_training(step)
    np.testing.assert_allclose(our_losses, want_losses, rtol=1e-10, atol=1e-10)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10), ours, want)
    assert our_losses[-1] < our_losses[0]  # it trains
