"""`tpu-folded-solves`: the Taylor rules' solves of stacked right-hand sides, made plain for a TPU and run on CPU.

The pass emits plain StableHLO (a triangular solve of the identity and a product), so a
program made plain for a TPU (`Lowered.apply(..., platform="tpu")`) compiles and runs here:
the Laplacian plus squared gradient of a log-determinant and of a Cholesky factor's sum
(whose collapsed jets solve the factors for the coefficient along every direction at once)
and its gradient in the weights must equal JAX's Hessian trace and gradient in float64,
for every kind of solve the rules fold (from the left by the LU factors, from the right
by the Cholesky factor, with the adjoint factor in the reverse rules), and the folded
solves must be gone.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.pde import laplacian_and_gradient

pytestmark = pytest.mark.usefixtures("x64_module")

N = 5  # the matrix's size; the input has N entries


def matrix(w: jax.Array, x: jax.Array) -> jax.Array:
    """3 I + tanh(x_i w_ij): a matrix whose every entry depends on x."""
    return 3 * jnp.eye(N, dtype=x.dtype) + jnp.tanh(x[:, None] * w)


FUNCTIONS = {
    "slogdet": lambda w, x: jnp.linalg.slogdet(matrix(w, x))[1],
    "cholesky": lambda w, x: jnp.sum(jnp.linalg.cholesky(matrix(w, x) @ matrix(w, x).T)),
}


def energy(f):
    """The Laplacian plus the squared gradient of `f` in x, by the collapsed jet."""
    def fn(w: jax.Array, x: jax.Array) -> jax.Array:
        laplacian, gradient = laplacian_and_gradient(lambda y: f(w, y))(x)
        return laplacian + jnp.sum(gradient ** 2)
    return fn


def reference(f):
    """The same by JAX's Hessian and gradient."""
    return lambda w, x: jnp.trace(jax.hessian(f, 1)(w, x)) + jnp.sum(jax.grad(f, 1)(w, x) ** 2)


def folded_solves(text: str) -> int:
    """The triangular solves in `text` whose right-hand side is a reshape (the rules' fold)."""
    reshaped = set(re.findall(r"(%\S+) = stablehlo.reshape", text))
    return sum(rhs in reshaped for rhs in re.findall(r'"stablehlo.triangular_solve"\(%\S+, (%[^)]+)\)', text))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("workload", ["energy", "gradient"])
def test_matches_hessian(name: str, workload: str) -> None:
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((N, N)), jnp.float32)
    xs = jnp.asarray(rng.standard_normal((4, N)), jnp.float32)
    batched = lambda f: lambda w, xs: jnp.sum(jax.vmap(f, in_axes=(None, 0))(w, xs))  # noqa: E731
    fn, ref = batched(energy(FUNCTIONS[name])), batched(reference(FUNCTIONS[name]))
    if workload == "gradient":
        fn, ref = jax.grad(fn), jax.grad(ref)
    lowered = hlopt.lower(fn, w, xs)
    untuned = lowered.apply("hlopt-default", platform="none").as_text()
    plain = lowered.apply("hlopt-default", platform="tpu")
    assert folded_solves(untuned) > 0, "the rules no longer fold the stacked solves: the test checks nothing"
    assert folded_solves(plain.as_text()) == 0
    got = np.asarray(plain.compile("")(w, xs), np.float64)
    with jax.default_device(jax.devices("cpu")[0]):  # the float64 reference, on the CPU also beside a TPU
        want = np.asarray(jax.jit(ref)(np.asarray(w, np.float64), np.asarray(xs, np.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
