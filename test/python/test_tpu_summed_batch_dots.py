"""`tpu-summed-batch-dots`: the collapsed jet's sums over its directions, made plain for a TPU and run on CPU.

The pass emits plain StableHLO (a dot_general contracting the summed dimension), so a
program made plain for a TPU (`Lowered.apply(..., platform="tpu")`) compiles and runs here:
the Laplacian plus squared gradient of a log-determinant (whose collapsed jet sums a
product per direction in the solve's second coefficient) and its gradient in the weights
(whose reverse rule makes the broadcast form) must equal JAX's Hessian trace and gradient
in float64; the pass must have rewritten the program, and left no sum of a batched product.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.passes.registry import PIPELINES
from hlopt.pde import laplacian_and_gradient

pytestmark = pytest.mark.usefixtures("x64_module")

N = 5  # the matrix's size; the input has N entries


def log_det(w: jax.Array, x: jax.Array) -> jax.Array:
    """log|det(3 I + tanh(x_i w_ij))|: a matrix whose every entry depends on x."""
    return jnp.linalg.slogdet(3 * jnp.eye(N, dtype=x.dtype) + jnp.tanh(x[:, None] * w))[1]


def energy(w: jax.Array, x: jax.Array) -> jax.Array:
    laplacian, gradient = laplacian_and_gradient(lambda y: log_det(w, y))(x)
    return laplacian + jnp.sum(gradient ** 2)


def reference(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.trace(jax.hessian(log_det, 1)(w, x)) + jnp.sum(jax.grad(log_det, 1)(w, x) ** 2)


def summed_batch_dots(text: str) -> int:
    """The sums in `text` of a dot_general with batch dimensions (the pass's pattern)."""
    batched = set(re.findall(r"(%\S+) = stablehlo.dot_general \S+, \S+, batching_dims", text))
    return sum(x in batched for x in re.findall(r"stablehlo.reduce\((%[^ ]+) init", text))


@pytest.mark.parametrize("workload", ["energy", "gradient"])
def test_matches_hessian(workload: str) -> None:
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((N, N)), jnp.float32)
    xs = jnp.asarray(rng.standard_normal((4, N)), jnp.float32)
    batched = lambda f: lambda w, xs: jnp.sum(jax.vmap(f, in_axes=(None, 0))(w, xs))  # noqa: E731
    fn, ref = batched(energy), batched(reference)
    if workload == "gradient":
        fn, ref = jax.grad(fn), jax.grad(ref)
    lowered = hlopt.lower(fn, w, xs)
    without = ",".join(p for p in PIPELINES["hlopt-default"].split(",") if p != "tpu-summed-batch-dots")
    plain = lowered.apply("hlopt-default", platform="tpu")
    assert plain.as_text() != lowered.apply(without, platform="tpu").as_text(), "the pass rewrote nothing"
    if workload == "energy":
        assert summed_batch_dots(lowered.apply("hlopt-default", platform="none").as_text()) > 0
    assert summed_batch_dots(plain.as_text()) == 0
    got = np.asarray(plain.compile("")(w, xs), np.float64)
    with jax.default_device(jax.devices("cpu")[0]):  # the float64 reference, on the CPU also beside a TPU
        want = np.asarray(jax.jit(ref)(np.asarray(w, np.float64), np.asarray(xs, np.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
