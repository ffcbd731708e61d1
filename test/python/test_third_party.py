"""hlopt inside the libraries JAX users write their programs with: flax, optax, equinox, diffrax.

- a flax.linen network trained by an optax optimizer on a physics-informed loss under plain
  `jax.jit`, with `hlopt.laplacian` in the loss: five steps equal (float64, 1e-10) the same
  steps with the Laplacian as `jnp.trace(jax.hessian(u))`;
- `equinox.filter_jit` of an equinox module's Laplacian;
- a diffrax solve with its default error checks (equinox's `error_if`, a host callback) and
  `equinox.error_if` itself under `hlopt.jit`, against `jax.jit`: the same values, and the
  same error when the check fails.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hlopt


@pytest.fixture(autouse=True, scope="module")
def float64():
    """float64 for this module's tests only: a global switch at import would change every later file."""
    with jax.enable_x64(True):
        yield


DIM, POINTS = 3, 10


class MLP(nn.Module):
    width: int = 16

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(self.width, param_dtype=jnp.float64)(x))
        x = jnp.tanh(nn.Dense(self.width, param_dtype=jnp.float64)(x))
        return nn.Dense(1, param_dtype=jnp.float64)(x)[0]


def source(x):
    return jnp.sin(x[0]) * jnp.cos(x[1]) + x[2] ** 2


def hessian_trace(u):
    return lambda x: jnp.trace(jax.hessian(u)(x))


@pytest.mark.parametrize("optimizer", [optax.adam(1e-2), optax.sgd(1e-2, momentum=0.9)], ids=["adam", "sgd"])
def test_flax_optax_training_step_under_jax_jit(optimizer):
    model = MLP()
    points = jax.random.normal(jax.random.key(1), (POINTS, DIM), jnp.float64)
    params0 = model.init(jax.random.key(0), points[0])

    def make_step(laplacian):
        def loss(params):
            u = lambda x: model.apply(params, x)  # noqa: E731
            residual = jax.vmap(laplacian(u))(points) + jax.vmap(source)(points)
            return jnp.mean(residual ** 2)

        @jax.jit
        def step(params, state):
            value, grads = jax.value_and_grad(loss)(params)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        return step

    ours, ref = make_step(hlopt.laplacian), make_step(hessian_trace)
    p_ours, s_ours = params0, optimizer.init(params0)
    p_ref, s_ref = params0, optimizer.init(params0)
    losses = []
    for _ in range(5):
        p_ours, s_ours, l_ours = ours(p_ours, s_ours)
        p_ref, s_ref, l_ref = ref(p_ref, s_ref)
        np.testing.assert_allclose(l_ours, l_ref, rtol=1e-10)
        for a, b in zip(jax.tree_util.tree_leaves(p_ours), jax.tree_util.tree_leaves(p_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        losses.append(float(l_ours))
    assert losses[-1] < losses[0]  # the step trains


class EqxMLP(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(DIM, 8, key=k1, dtype=jnp.float64), eqx.nn.Linear(8, "scalar", key=k2,
                                                                                      dtype=jnp.float64)]

    def __call__(self, x):
        return self.layers[1](jnp.tanh(self.layers[0](x)))


def test_equinox_filter_jit_laplacian_and_its_gradient():
    model = EqxMLP(jax.random.key(2))
    points = jax.random.normal(jax.random.key(3), (4, DIM), jnp.float64)

    @eqx.filter_jit
    def energy(model, laplacian):
        return jnp.sum(jax.vmap(laplacian(model))(points))

    np.testing.assert_allclose(energy(model, hlopt.laplacian), energy(model, hessian_trace), rtol=1e-10)
    g_ours = eqx.filter_grad(lambda m: energy(m, hlopt.laplacian))(model)
    g_ref = eqx.filter_grad(lambda m: energy(m, hessian_trace))(model)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _solve(y0, t1):
    term = diffrax.ODETerm(lambda t, y, args: -y + jnp.sin(t))
    solution = diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=t1, dt0=0.05, y0=y0,
                                   stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10))
    return solution.ys[-1]


def test_a_default_diffrax_solve_under_hlopt_jit():
    y0 = jnp.array([1.0, -0.5, 2.0])
    got = hlopt.jit(_solve)(y0, 2.0)
    want = jax.jit(_solve)(y0, 2.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    exact = y0 * np.exp(-2.0) + (np.sin(2.0) - np.cos(2.0) + np.exp(-2.0)) / 2  # y' = -y + sin t
    np.testing.assert_allclose(got, exact, rtol=1e-6)


def _checked_sqrt(x):
    x = eqx.error_if(x, x < 0, "negative input")
    return jnp.sqrt(x)


def test_equinox_error_if_under_hlopt_jit_as_under_jax_jit():
    """The check passes through the values it accepts and fails a call it refuses, on the first
    call and on a call of a compiled signature (jax.jit raises JaxRuntimeError on its first call
    and ValueError from its C++ fast path: the exception types are not compared)."""
    x, bad = jnp.array([1.0, 4.0]), jnp.array([1.0, -4.0])
    for jit in (jax.jit, hlopt.jit):
        checked = jit(_checked_sqrt)
        np.testing.assert_allclose(checked(x), jnp.sqrt(x))
        for _ in range(2):
            with pytest.raises((RuntimeError, ValueError), match="negative input"):
                jax.block_until_ready(checked(bad))
        np.testing.assert_allclose(checked(x), jnp.sqrt(x))  # still usable after a failed call


def test_a_diffrax_solve_that_fails_its_check_raises_under_hlopt_jit():
    def solve_few_steps(y0):
        term = diffrax.ODETerm(lambda t, y, args: y ** 2)  # blows up at t = 1
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=2.0, dt0=0.1, y0=y0, max_steps=8).ys[-1]

    for jit in (jax.jit, hlopt.jit):
        with pytest.raises((RuntimeError, ValueError), match="max_steps"):
            jax.block_until_ready(jit(solve_few_steps)(1.0))
