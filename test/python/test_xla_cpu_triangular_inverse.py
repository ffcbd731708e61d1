"""xla-cpu-triangular-inverse changes how triangular solves run on XLA:CPU, not what they compute:
hlopt-default with and without it gives the solutions scipy gives (within the rounding the
explicit inverse changes), for solves from the left and the right, lower and upper triangles,
plain, transposed and adjoint, unit and non-unit diagonals, batched and not, in float32,
float64 and complex64, in JAX's LAPACK spelling and in the StableHLO one the jet rules emit;
small factors stay solves under `min-rows`; and a determinant wavefunction's Laplacian and
weight gradient (bench/wavefunction.py's workload at 4 electrons, slogdet's LU solves) agree
with and without it and with the Hessian trace."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax import lax

import hlopt
from hlopt.passes.registry import PIPELINES

WITH = PIPELINES["hlopt-default"]
WITHOUT = WITH.replace("xla-cpu-triangular-inverse,", "")
ROWS8 = WITH.replace("xla-cpu-triangular-inverse", "xla-cpu-triangular-inverse{min-rows=8}")
HOW = {"N": 0, "T": 1, "C": 2}  # scipy's `trans`
TOL = {np.float32: 2e-5, np.float64: 1e-12, np.complex64: 2e-5, np.complex128: 1e-12}
N, COLUMNS = 8, 5  # two solves of 5 columns each with an 8x8 factor: 10 > 8, rewritten


def test_the_pass_is_in_hlopt_default():
    assert "xla-cpu-triangular-inverse" in WITH and WITHOUT != WITH and "min-rows=8" in ROWS8


def test_min_rows():
    """A 4x4 factor's solves (3 + 3 columns) are rewritten by default and stay with min-rows=8."""
    rng = np.random.default_rng(4)
    a = _factor(rng, (), np.float32)[:4, :4]
    b, c = _rhs(rng, (4, 3), np.float32), _rhs(rng, (4, 3), np.float32)
    lowered = hlopt.lower(_solves(True, True, "N", True), a, b, c)
    assert lowered.apply(ROWS8).as_text() == lowered.apply(WITHOUT).as_text()
    small = lowered.apply(WITH).as_text()
    assert "trsm" not in small and "stablehlo.dot_general" in small
    refs = [_reference(a, r, True, True, "N", True) for r in (b, c)]
    for got, want in zip(hlopt.jit(_solves(True, True, "N", True), pipeline=WITH)(a, b, c), refs, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-5 * max(1.0, np.max(np.abs(want))))


def _factor(rng, batch, dtype):
    """A well-conditioned random matrix (both triangles): a dominant diagonal, small entries elsewhere."""
    shape = (*batch, N, N)
    a = rng.normal(size=shape) / N
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.normal(size=shape) / N
    return (a + 2 * np.eye(N)).astype(dtype)


def _rhs(rng, shape, dtype):
    b = rng.normal(size=shape)
    if np.issubdtype(dtype, np.complexfloating):
        b = b + 1j * rng.normal(size=shape)
    return b.astype(dtype)


def _reference(a, b, left, lower, how, unit):
    """scipy's solution in double precision, one matrix of the batch at a time."""
    a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
    out = np.empty_like(b)
    for i in np.ndindex(a.shape[:-2]):
        if left:
            out[i] = scipy.linalg.solve_triangular(a[i], b[i], trans=HOW[how], lower=lower, unit_diagonal=unit)
        else:  # X op(A) = B is op(A)^T X^T = B^T; op(A)^T of the adjoint is conj(A)
            t = {"N": (a[i], 1), "T": (a[i], 0), "C": (np.conj(a[i]), 0)}[how]
            out[i] = scipy.linalg.solve_triangular(t[0], b[i].T, trans=t[1], lower=lower, unit_diagonal=unit).T
    return out


def _solves(left, lower, how, unit):
    """Two solves with one factor (JAX spells each as a LAPACK trsm call on CPU)."""
    def solve(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=how != "N",
                                           conjugate_a=how == "C", unit_diagonal=unit)
    return lambda a, b, c: (solve(a, b), solve(a, c))


def _x64(dtype):
    """float64 where the case needs it (jax's default is float32)."""
    return jax.enable_x64(np.dtype(dtype).itemsize == 16 or dtype == np.float64)


def _check(fun, args, references, dtype):
    with _x64(dtype):
        _check_here(fun, args, references, dtype)


def _check_here(fun, args, references, dtype):
    lowered = hlopt.lower(fun, *args)
    tuned, untuned = lowered.apply(WITH).as_text(), lowered.apply(WITHOUT).as_text()
    assert "trsm" not in tuned and "triangular_solve" in tuned and "stablehlo.dot_general" in tuned
    assert "trsm" in untuned or "triangular_solve" in untuned
    with_pass = hlopt.jit(fun, pipeline=WITH)(*args)
    without_pass = hlopt.jit(fun, pipeline=WITHOUT)(*args)
    tol = TOL[dtype]
    for got, plain, want in zip(with_pass, without_pass, references, strict=True):
        assert got.dtype == dtype and got.shape == want.shape
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=tol * scale)
        np.testing.assert_allclose(np.asarray(got), np.asarray(plain), rtol=0, atol=tol * scale)


# every side, triangle and op; the diagonal kind, batching and element type vary across them
LAYOUTS = [(left, lower, how, unit, batch, dtype) for i, (left, lower, how) in
           enumerate(itertools.product((True, False), (True, False), "NTC"))
           for unit, batch, dtype in [((i % 2 == 0), [(), (3,), (2, 2)][i % 3],
                                       [np.float32, np.float64, np.complex64][(i // 2) % 3])]]


@pytest.mark.parametrize("left,lower,how,unit,batch,dtype", LAYOUTS)
def test_lapack_solves_with_and_without_the_pass(left, lower, how, unit, batch, dtype):
    rng = np.random.default_rng(len(batch) + 10 * HOW[how])
    a = _factor(rng, batch, dtype)
    shape = (*batch, N, COLUMNS) if left else (*batch, COLUMNS, N)
    b, c = _rhs(rng, shape, dtype), _rhs(rng, shape, dtype)
    refs = [_reference(a, r, left, lower, how, unit) for r in (b, c)]
    _check(_solves(left, lower, how, unit), (a, b, c), refs, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("unit", [True, False])
def test_every_element_type(dtype, unit):
    with _x64(dtype):
        rng = np.random.default_rng(3)
        a = _factor(rng, (2,), dtype)
        b, c = _rhs(rng, (2, N, COLUMNS), dtype), _rhs(rng, (2, N, COLUMNS), dtype)
        refs = [_reference(a, r, True, False, "T", unit) for r in (b, c)]
        _check(_solves(True, False, "T", unit), (a, b, c), refs, dtype)


def test_narrow_solves_stay():
    """Two solves of 4 columns each with an 8x8 factor: no more right-hand sides than rows."""
    rng = np.random.default_rng(5)
    a = _factor(rng, (), np.float32)
    b, c = _rhs(rng, (N, 4), np.float32), _rhs(rng, (N, 4), np.float32)
    tuned = hlopt.lower(_solves(True, True, "N", False), a, b, c).apply(WITH).as_text()
    assert tuned.count("lapack_strsm_ffi(") == 2 and "stablehlo.dot_general" not in tuned


@pytest.mark.parametrize("how", "NTC")
def test_stablehlo_solves_of_a_jet(how):
    """The Taylor coefficients of X = op(A)^-1 B(t) are `stablehlo.triangular_solve`s with the
    primal factor beside the primal's LAPACK call: one group of both spellings."""
    rng = np.random.default_rng(7)
    a = _factor(rng, (), np.complex64)
    b0, b1, b2 = (_rhs(rng, (N, 3), np.complex64) for _ in range(3))

    def fun(a, b0, b1, b2):
        def f(b):
            return lax.linalg.triangular_solve(a, b, left_side=True, lower=True, transpose_a=how != "N",
                                               conjugate_a=how == "C")
        x, (x1, x2) = hlopt.jet(f, (b0,), ((b1, b2),))
        return x, x1, x2

    text = hlopt.lower(fun, a, b0, b1, b2).apply(WITHOUT).as_text()
    assert "lapack_ctrsm_ffi" in text and "stablehlo.triangular_solve" in text
    # X is linear in B: in jet's derivative convention each coefficient is the solve of B's
    refs = [_reference(a, r, True, True, how, False) for r in (b0, b1, b2)]
    _check(fun, (a, b0, b1, b2), refs, np.complex64)


# --- the wavefunction of bench/wavefunction.py, small ---------------------------------------

ELECTRONS, HIDDEN, WALKERS = 4, 8, 6


def _params(dtype):
    k = jax.random.split(jax.random.key(0), 3)
    return {"w1": (jax.random.normal(k[0], (4, HIDDEN)) / 2).astype(dtype),
            "out": (jax.random.normal(k[1], (HIDDEN, ELECTRONS)) / np.sqrt(HIDDEN)).astype(dtype),
            "sigma": (1.0 + 0.1 * jax.random.normal(k[2], (ELECTRONS,))).astype(dtype)}


def _log_psi(p, x):
    r = x.reshape(-1, 3)
    norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1e-2)
    h = jnp.tanh(jnp.concatenate([r, norm], -1) @ p["w1"])
    return jnp.linalg.slogdet((h @ p["out"]) * jnp.exp(-norm * p["sigma"]))[1]


def _energies(laplacian):
    def one(p, x):
        return -0.5 * (laplacian(p, x) + jnp.sum(jax.grad(_log_psi, 1)(p, x) ** 2))
    return jax.vmap(one, in_axes=(None, 0))


def _hlopt_laplacian(p, x):
    return hlopt.laplacian(lambda y: _log_psi(p, y))(x)


def _hessian_trace(p, x):
    return jnp.trace(jax.hessian(lambda y: _log_psi(p, y))(x))


@pytest.mark.parametrize("workload", ["kinetic", "gradient"])
def test_wavefunction_with_and_without_the_pass(workload):
    def program(laplacian):
        energies = _energies(laplacian)
        if workload == "kinetic":
            return energies
        return jax.grad(lambda p, xs: jnp.mean(energies(p, xs)))

    fun = program(_hlopt_laplacian)
    args = (_params(jnp.float32), jax.random.normal(jax.random.key(1), (WALKERS, 3 * ELECTRONS), jnp.float32))
    lowered = hlopt.lower(fun, *args)
    tuned, untuned = lowered.apply(WITH).as_text(), lowered.apply(WITHOUT).as_text()
    solves = lambda text: text.count("trsm_ffi(") + text.count("stablehlo.triangular_solve")  # noqa: E731
    assert solves(tuned) < solves(untuned), "the pass rewrote none of the determinant's solves"
    got = jax.tree_util.tree_leaves(hlopt.jit(fun, pipeline=WITH)(*args))
    plain = jax.tree_util.tree_leaves(hlopt.jit(fun, pipeline=WITHOUT)(*args))
    with jax.enable_x64(True):
        wide = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), args)
        want = jax.tree_util.tree_leaves(jax.jit(program(_hessian_trace))(*wide))
    for g, q, w in zip(got, plain, want, strict=True):
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(np.asarray(g), np.asarray(q), rtol=0, atol=1e-4 * scale)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-3 * scale)
