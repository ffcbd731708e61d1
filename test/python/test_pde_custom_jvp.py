"""custom_jvp functions inside directions-batched and collapsed jets, in float64.

jet-expand honours a custom_jvp function's own rule in every jet: in a batched or
collapsed one, by the standard jet along each direction in a loop, the collapsed K-th
coefficient's term in the inputs' K-th by one call of the rule. The references are
JAX's nested derivatives, which honour the rules too (jnp.trace(jax.hessian), nested
jax.jvp, jax.grad of them). relu, softplus and softmax are custom_jvp functions in
jax.nn; logaddexp at a tie is where differentiating the primal instead would be wrong.
"""

import re

import jax
import jax.numpy as jnp
import pytest

import hlopt
from hlopt import jet

from support.pde_references import (  # noqa: F401 - float64: the module-scoped x64 fixture
    close, float64, nested_bilaplacian, nested_laplacian, nested_weighted)

with jax.enable_x64(True):  # module constants in float64, like the tests that use them
    X = jnp.array([0.31, -0.72, 0.55, 1.1])
    W1 = jnp.linspace(-0.9, 0.8, 12).reshape(4, 3)


@jax.custom_jvp
def scaled_cube(x, w):
    """Not elementwise (every output depends on every input) and two differentiable inputs."""
    return x * jnp.sum(x ** 2) * w


scaled_cube.defjvp(lambda p, t: (scaled_cube(*p), (t[0] * jnp.sum(p[0] ** 2) + 2 * p[0] * jnp.sum(p[0] * t[0])) * p[1]
                                 + p[0] * jnp.sum(p[0] ** 2) * t[1]))


FUNCTIONS = {
    "softplus_mlp": lambda x: jnp.sum(jax.nn.softplus(jnp.tanh(x @ W1) * 2.0 - 0.3) ** 2),
    "relu_cubed": lambda x: jnp.sum(jax.nn.relu(x @ W1 + 0.05) ** 3),
    "softmax": lambda x: jnp.sum(jax.nn.softmax(x * x) * jnp.sin(x)),
    "logaddexp_tie": lambda x: jnp.sum(jnp.logaddexp(jnp.sin(x), jnp.sin(x)) * x),
    "not_elementwise": lambda x: jnp.sum(scaled_cube(jnp.tanh(x), jnp.sum(x) * 0.5) * jnp.cos(x)),
}


def stde(f, x, V, order=2):
    """The user's standard-mode code: a jet per direction, its top coefficient summed."""
    series = (V,) + tuple(jnp.zeros_like(V) for _ in range(order - 1))
    return jax.vmap(lambda *s: jet(f, (x,), (s,))[1][order - 1])(*series).sum(0)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_exact_and_weighted_laplacian(name):
    f = FUNCTIONS[name]
    close(hlopt.laplacian(f)(X), jax.jit(nested_laplacian(f))(X))
    S = jnp.linspace(-1.0, 1.2, 8).reshape(4, 2)
    close(hlopt.laplacian(f, weights=S)(X), jax.jit(nested_weighted(f, S))(X))


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_standard_and_collapsed_directions(name):
    """The batched jet (a pipeline without jet-collapse) and the collapsed one, order 2 and 3."""
    f = FUNCTIONS[name]
    V = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4) + jnp.eye(3, 4)
    d1 = lambda y, v: jax.jvp(f, (y,), (v,))[1]  # noqa: E731 - directional derivatives, nested
    d2 = lambda y, v: jax.jvp(lambda z: d1(z, v), (y,), (v,))[1]  # noqa: E731
    d3 = lambda y, v: jax.jvp(lambda z: d2(z, v), (y,), (v,))[1]  # noqa: E731
    want2, want3 = jax.jit(lambda x, V: (jax.vmap(d2, (None, 0))(x, V).sum(0), jax.vmap(d3, (None, 0))(x, V).sum(0)))(X, V)
    batched = hlopt.jit(lambda x, V: stde(f, x, V), pipeline="jet-expand,inline,canonicalize,cse")
    close(batched(X, V), want2)
    assert "collapsed = true" in hlopt.lower(lambda x, V: stde(f, x, V, 3), X, V).apply("jet-collapse").as_text()
    close(hlopt.jit(lambda x, V: stde(f, x, V, 3))(X, V), want3)


@pytest.mark.parametrize("name", ["softplus_mlp", "not_elementwise"])
def test_bilaplacian(name):
    f = FUNCTIONS[name]
    close(hlopt.bilaplacian(f)(X), jax.jit(nested_bilaplacian(f))(X), rtol=1e-9)


def test_vmap_over_points_and_grad():
    """Under jax.vmap over the points, and jax.grad through the collapsed jet (vjp-expand)."""
    f = FUNCTIONS["softplus_mlp"]
    points = jnp.stack([X, X * 0.5 - 0.2, -X])
    close(jax.vmap(hlopt.laplacian(f))(points), jax.jit(jax.vmap(nested_laplacian(f)))(points))

    def loss(w, lap):
        return jnp.sum(jax.vmap(lap(lambda x: jnp.sum(jax.nn.softplus(x @ w) ** 2)))(points) ** 2)

    close(jax.grad(loss)(W1, hlopt.laplacian), jax.jit(jax.grad(loss), static_argnums=1)(W1, nested_laplacian))


def test_ir_calls_one_jet_of_the_rule_for_all_directions():
    """The rule runs in one collapsed jet of it along all the directions (x, t x'): no
    loop over the directions, no row slicing."""
    text = hlopt.lower(hlopt.laplacian(FUNCTIONS["relu_cubed"]), X).apply("jet-expand").as_text()
    assert "stablehlo.while" not in text
    assert "stablehlo.dynamic_slice" not in text and "stablehlo.dynamic_update_slice" not in text
    assert len(re.findall(r"call @\S*_jet2\(", text)) >= 1


@pytest.mark.parametrize("name", ["softplus_mlp", "not_elementwise"])
def test_weighted_collapsed_fourth_order(name):
    """sum_r w_r D^4 f[v_r^4] / 24 through the rule (order-3 jets of it per direction),
    with a zero first weight and weights other than 1."""
    from hlopt.pde import collapsed_jet

    f = FUNCTIONS[name]
    V = jnp.array([[1.0, 0.5, -0.3, 0.2], [0.0, 1.0, 0.4, -0.6], [0.7, -0.2, 0.0, 1.0]])
    w = (0.0, -2.0, 0.5)

    def fourth(x, v):
        d = f
        for _ in range(4):
            d = (lambda g: lambda y: jax.jvp(g, (y,), (v,))[1])(d)
        return d(x)

    want = jax.jit(lambda x: sum(wr * fourth(x, v) for wr, v in zip(w, V)) / 24)(X)
    close(hlopt.jit(lambda x: collapsed_jet(f, x, V, 4, w))(X), want)
