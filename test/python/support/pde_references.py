"""References and helpers of the float64 PDE and jet-gradient tests (test_pde.py, test_pde_custom_jvp.py,
test_jet_grad.py; test_wavefunction_laplacian.py's bi-Laplacian): a module-scoped float64 fixture, a closeness
check relative to the reference's scale, the Laplacian, bi-Laplacian and weighted Laplacian by nested
jax.hessian, and a small tanh MLP."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

RTOL = 1e-10


@pytest.fixture(autouse=True, scope="module")
def float64():
    """float64 for the importing module's tests only: a global switch at import would change every later file."""
    with jax.enable_x64(True):
        yield


def close(got, want, rtol=RTOL):
    """`got` equals `want` (arrays or pytrees of them, of one structure) within `rtol` times the
    larger of 1 and the largest magnitude of each reference leaf."""
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        np.testing.assert_allclose(g, w, rtol=0, atol=rtol * scale)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)


def _laplacian_of(f):
    """Laplacian of every output element, traced (not jitted): trace of the Hessian over x's flattened axes."""
    def lap(x, *rest):
        h = jax.hessian(f)(x, *rest)
        out_shape = jnp.shape(f(x, *rest))
        h = h.reshape(out_shape + (x.size, x.size))
        return jnp.trace(h, axis1=-2, axis2=-1)
    return lap


@functools.cache
def nested_laplacian(f):
    """Laplacian of every output element: trace of the Hessian over x's flattened axes, as one jitted
    function per `f` (the tests that compare against the same function's reference share its compile)."""
    return jax.jit(_laplacian_of(f))


def nested_weighted(f, S):
    """tr(S S^T H) of every output element, H the Hessian over x's flattened axes."""
    def op(x):
        h = jax.hessian(f)(x)
        out_shape = jnp.shape(f(x))
        h = h.reshape(out_shape + (x.size, x.size))
        M = S.reshape(x.size, -1)
        return jnp.einsum("...ij,ir,jr->...", h, M, M)
    return jax.jit(op)


@functools.cache
def nested_bilaplacian(f):
    """The Laplacian of the Laplacian, one jitted function per `f` (the inner Laplacian traced into the
    outer one's Hessian, not a jitted function the Hessian's transformations would trace again)."""
    return jax.jit(_laplacian_of(_laplacian_of(f)))


def mlp_params(key, sizes):
    """Weights scaled by 1/sqrt(fan-in) and biases spread over [-0.5, 0.5], per layer of `sizes`."""
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.linspace(-0.5, 0.5, b)) for k, a, b in
            zip(keys, sizes[:-1], sizes[1:])]


def mlp(params, x):
    """A tanh MLP with one output, squeezed."""
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return (x @ W + b).squeeze(-1)
