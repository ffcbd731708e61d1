"""Laplacians of determinant wavefunctions, as variational Monte Carlo writes them, through
the linear-algebra rules (nothing special-cased: `slogdet`, `cholesky`, `eigh` are
differentiated by their Taylor rules), against `jnp.trace(jax.hessian)` in float64, and
their weight gradients (jax.grad through hlopt.laplacian) against the gradient of the
Hessian trace; the Laplacian and gradient from one jet (`hlopt.pde.laplacian_and_gradient`)
and the weight gradient of the local kinetic energy built on them; a bi-Laplacian through
Cholesky against nested Hessians.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.pde import laplacian_and_gradient

from support.pde_references import nested_bilaplacian

ELECTRONS = 3


def _weights(seed: int, n: int = ELECTRONS, hidden: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": rng.normal(size=(3, hidden)) / np.sqrt(3), "b1": rng.normal(size=hidden) * 0.1,
            "w2": rng.normal(size=(hidden, n)) / np.sqrt(hidden), "sigma": 1.0 + 0.1 * rng.normal(size=n)}


def _orbitals(p: dict, x: jax.Array) -> jax.Array:
    """phi_j(r_i): an MLP of each electron's position times an exponential envelope."""
    r = x.reshape(-1, 3)
    h = jnp.tanh(r @ p["w1"] + p["b1"])
    envelope = jnp.exp(-jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1.0) * p["sigma"])
    return (h @ p["w2"]) * envelope + 0.05 * jnp.sum(r, -1, keepdims=True)


def _slogdet(p, x):
    return jnp.linalg.slogdet(_orbitals(p, x))[1]


def _cholesky_log_density(p, x):
    """log N(y; 0, S) with S = Phi Phi^T + I and y = sin(x): through L = chol(S)."""
    phi = _orbitals(p, x)
    s = phi @ phi.T + jnp.eye(phi.shape[0])
    y = jnp.sin(x.reshape(-1, 3)[:, 0])
    chol = jnp.linalg.cholesky(s)
    z = jax.scipy.linalg.solve_triangular(chol, y, lower=True)
    return -0.5 * jnp.sum(z * z) - jnp.sum(jnp.log(jnp.diag(chol)))


def _eigh(p, x):
    """A spectral feature: the sum of log-eigenvalues and of their cubes of Phi^T Phi + I."""
    phi = _orbitals(p, x)
    w = jnp.linalg.eigh(phi.T @ phi + jnp.eye(phi.shape[1]))[0]
    return jnp.sum(jnp.log(w)) + 0.1 * jnp.sum(w ** 3)


WAVEFUNCTIONS: dict[str, Callable] = {"slogdet": _slogdet, "cholesky": _cholesky_log_density, "eigh": _eigh}


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=3 * ELECTRONS)


def _hessian_trace(f, p, x):
    return jnp.trace(jax.hessian(lambda y: f(p, y))(x))


@pytest.mark.float64
@pytest.mark.parametrize("name", sorted(WAVEFUNCTIONS))
def test_laplacian_matches_hessian_trace(name):
    f = WAVEFUNCTIONS[name]
    with jax.enable_x64(True):
        p, x = _weights(1), _x(2)
        got = hlopt.laplacian(lambda y: f(p, y))(x)
        want = jax.jit(_hessian_trace, static_argnums=0)(f, p, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9)


@pytest.mark.float64
@pytest.mark.parametrize("name", sorted(WAVEFUNCTIONS))
def test_weight_gradient_of_the_laplacian(name):
    """d/dtheta of the mean kinetic term over a few walkers, as VMC training takes it."""
    f = WAVEFUNCTIONS[name]
    with jax.enable_x64(True):
        p = _weights(3)
        xs = np.stack([_x(s) for s in range(4)])

        def energy(p, laplacian):
            return jnp.mean(jax.vmap(lambda x: laplacian(p, x))(xs))

        got = hlopt.jit(jax.grad(lambda p: energy(p, lambda p, x: hlopt.laplacian(lambda y: f(p, y))(x))))(p)
        want = jax.jit(jax.grad(lambda p: energy(p, lambda p, x: _hessian_trace(f, p, x))))(p)
    for key in want:
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(want[key]), rtol=1e-8,
                                   atol=1e-8 * np.max(np.abs(want[key])), err_msg=key)


@pytest.mark.float64
@pytest.mark.parametrize("name", sorted(WAVEFUNCTIONS))
def test_laplacian_and_gradient_match_hessian_trace_and_grad(name):
    """One collapsed jet gives both: its first coefficients along e_i are the gradient."""
    f = WAVEFUNCTIONS[name]
    with jax.enable_x64(True):
        p, x = _weights(6), _x(7).reshape(ELECTRONS, 3)
        laplacian, gradient = laplacian_and_gradient(lambda y: f(p, y.reshape(-1)))(x)
        want = jax.jit(_hessian_trace, static_argnums=0)(f, p, x.reshape(-1))
        want_gradient = jax.jit(jax.grad(lambda y: f(p, y.reshape(-1))))(x)
    assert gradient.shape == x.shape
    np.testing.assert_allclose(np.asarray(laplacian), np.asarray(want), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(gradient), np.asarray(want_gradient), rtol=1e-9,
                               atol=1e-12 * np.max(np.abs(want_gradient)))


@pytest.mark.float64
def test_laplacian_and_gradient_of_a_vector_output():
    """The gradient of each output element: shape output.shape + x.shape, the Jacobian."""
    def f(x):
        return jnp.stack([jnp.sum(jnp.sin(x) * x[::-1]), jnp.prod(jnp.cos(x[:3])), x[0] ** 3])

    with jax.enable_x64(True):
        x = np.random.default_rng(8).normal(size=5)
        laplacian, jacobian = laplacian_and_gradient(f)(x)
        want = jax.jit(lambda x: jnp.trace(jax.hessian(f)(x), axis1=-2, axis2=-1))(x)
        want_jacobian = jax.jit(jax.jacobian(f))(x)
    np.testing.assert_allclose(np.asarray(laplacian), np.asarray(want), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(jacobian), np.asarray(want_jacobian), rtol=1e-9, atol=1e-14)


@pytest.mark.float64
def test_weight_gradient_of_the_local_kinetic_energy():
    """d/dtheta of the mean of -1/2 (Delta log psi + |grad log psi|^2), both from one jet,
    against the same through the Hessian and jax.grad."""
    with jax.enable_x64(True):
        p = _weights(9)
        xs = np.stack([_x(s) for s in range(10, 14)])

        def ours(p, x):
            laplacian, gradient = laplacian_and_gradient(lambda y: _slogdet(p, y))(x)
            return -0.5 * (laplacian + jnp.sum(gradient ** 2))

        def reference(p, x):
            return -0.5 * (_hessian_trace(_slogdet, p, x) + jnp.sum(jax.grad(_slogdet, 1)(p, x) ** 2))

        got = hlopt.jit(jax.grad(lambda p: jnp.mean(jax.vmap(lambda x: ours(p, x))(xs))))(p)
        want = jax.jit(jax.grad(lambda p: jnp.mean(jax.vmap(lambda x: reference(p, x))(xs))))(p)
    for key in want:
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(want[key]), rtol=1e-8,
                                   atol=1e-8 * np.max(np.abs(want[key])), err_msg=key)


def test_laplacian_and_gradient_refuses_an_integer_argument():
    with pytest.raises(TypeError, match="hlopt.laplacian_and_gradient: argument 0 must be a real floating-point"):
        laplacian_and_gradient(lambda y: jnp.sum(y))(np.arange(3))


@pytest.mark.float64
def test_bilaplacian_through_cholesky_matches_nested_hessians():
    def f(x):
        return _cholesky_log_density(_weights(4, n=2, hidden=4), jnp.concatenate([x, 0.3 * x[::-1]]))

    with jax.enable_x64(True):
        x = np.random.default_rng(5).normal(size=3)
        got = hlopt.bilaplacian(f)(x)
        want = nested_bilaplacian(f)(x)  # the trace of the Hessian of the Hessian's trace
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9)


def _near_nodes(p: dict, distances: tuple[float, ...], lines: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """float32 points at `distances` from nodes of det Phi (det = 0, found by bisection in float64
    along random lines) and their distance index."""
    rng = np.random.default_rng(7)
    points, which = [], []
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):  # float64 LU: on the CPU
        det = jax.jit(jax.vmap(lambda x: jnp.linalg.det(_orbitals(p, x))))
        while len(points) < lines * len(distances):
            x0 = rng.normal(size=3 * ELECTRONS)
            d = rng.normal(size=3 * ELECTRONS)
            d /= np.linalg.norm(d)
            ts = np.linspace(-3, 3, 301)
            signs = np.sign(np.asarray(det(x0 + ts[:, None] * d)))
            changes = np.flatnonzero(signs[:-1] != signs[1:])
            if not changes.size:
                continue
            lo, hi = ts[changes[0]], ts[changes[0] + 1]
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                same = np.sign(np.asarray(det(np.stack([x0 + lo * d, x0 + mid * d])))).prod() > 0
                lo, hi = (mid, hi) if same else (lo, mid)
            for i, e in enumerate(distances):
                points.append((x0 + (lo + e) * d).astype(np.float32))
                which.append(i)
    return np.stack(points), np.array(which)


def test_float32_near_nodes_is_as_accurate_as_the_hessian_trace():
    """Near a node (det Phi = 0) the float32 Laplacian of log|det| is ill-conditioned: it is about
    -1/r^2 at distance r, and float32 rounding of Phi moves the node, so its relative error grows
    like 1/r (measured: ~2e-6 at r = 1e-1, ~3e-3 at r = 1e-4), for the Hessian trace as for the
    rules, which agree with each other to ~1e-7. The Laplacian of det itself stays accurate to
    ~1e-6 of its scale at every distance (no division by the small LU pivot shows). Both against
    float64 at the same float32 inputs and weights."""
    p32 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), _weights(0))
    p64 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), p32)
    distances = (1e-1, 1e-3, 1e-5)
    x, which = _near_nodes(p64, distances)
    for name, g in (("log|det|", lambda p, y: jnp.linalg.slogdet(_orbitals(p, y))[1]),
                    ("det", lambda p, y: jnp.linalg.det(_orbitals(p, y)))):
        ours = np.asarray(jax.jit(jax.vmap(hlopt.laplacian(lambda y: g(p32, y))))(x), np.float64)
        hessian = np.asarray(jax.jit(jax.vmap(lambda y: _hessian_trace(g, p32, y)))(x), np.float64)
        with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):  # float64 LU: on the CPU
            want = np.asarray(jax.jit(jax.vmap(lambda y: _hessian_trace(g, p64, y)))(x.astype(np.float64)))
        scale = np.abs(want) if name == "log|det|" else np.median(np.abs(want))
        err_ours, err_hessian = np.abs(ours - want) / scale, np.abs(hessian - want) / scale
        for i, r in enumerate(distances):
            at = which == i
            assert np.median(err_ours[at]) <= 2 * np.median(err_hessian[at]) + 1e-5, (name, r)
            assert np.max(err_ours[at]) <= 3 * np.max(err_hessian[at]) + 1e-5, (name, r)
        if name == "det":
            assert np.max(err_ours) < 3e-5, np.max(err_ours)
