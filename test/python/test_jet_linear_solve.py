"""The structural Taylor rule of `custom_linear_solve` and the loop-free custom_jvp rule
in batched and collapsed jets (passes/autodiff/jet_expand.py: `expand_linear_solve`,
`_custom_jvp_directions`), through what JAX builds on them (`solve`, `inv`, `det`,
`slogdet`, a hand-written `custom_linear_solve`, `cg`), against nested jax.jvp to
order 4 (float64 to 1e-9 relative, float32 at its own tolerance), batched matrices
and single ones; the directions-batched jet against standard jets per direction; the
collapsed second coefficient against the sum of standard ones and the Hessian trace;
nested jets; and the compiled program: one LU and a fixed number of triangular
solves, no loop over the directions.
float64 is enabled only inside `jax.enable_x64(True)` blocks.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsp_linalg
import numpy as np
import pytest
from jax import lax

import hlopt

from support.references import taylor_by_nested_jvp

ORDER = 4
N = 4


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _matrix(x, n: int = N):
    """An n x n matrix (batched over the leading axes of x) of the n + 2 entries per row of x."""
    a = x[..., :n * n].reshape(*x.shape[:-1], n, n)
    return jnp.sin(a) + 0.3 * a @ a + 3.0 * jnp.eye(n, dtype=x.dtype)


def _hand_solve(x):
    """A custom_linear_solve of a matrix of x, its solve by LU (jnp.linalg.solve), the
    matvec linear in its vector."""
    a = _matrix(x)
    b = jnp.cos(x[..., :N])
    return lax.custom_linear_solve(lambda v: jnp.einsum("...ij,...j->...i", a, v), b,
                                   solve=lambda _, r: jnp.linalg.solve(a, r[..., None])[..., 0],
                                   transpose_solve=lambda _, r: jnp.linalg.solve(jnp.swapaxes(a, -1, -2),
                                                                                 r[..., None])[..., 0])


FUNCTIONS: dict[str, Callable] = {
    "solve": lambda x: jnp.linalg.solve(_matrix(x), jnp.sin(x[..., :N, None]) * x[..., N:2 * N, None]),
    "inv": lambda x: jnp.linalg.inv(_matrix(x)),
    "det": lambda x: jnp.linalg.det(_matrix(x)),
    "slogdet": lambda x: jnp.linalg.slogdet(_matrix(x))[1],
    "slogdet_of_product": lambda x: jnp.linalg.slogdet(_matrix(x) @ _matrix(jnp.cos(x)))[1] * jnp.sum(x),
    "custom_linear_solve": _hand_solve,
}
SIZE = N * N


def _x(name: str, batch: tuple[int, ...], dtype=np.float64) -> np.ndarray:
    return (0.5 * _rng(name + str(batch)).normal(size=(*batch, SIZE))).astype(dtype)


def _series(name: str, x: np.ndarray, order: int = ORDER) -> list[np.ndarray]:
    rng = _rng(name + "series")
    return [(0.5 * rng.normal(size=x.shape)).astype(x.dtype) for _ in range(order)]


def _assert_close(got, want, tol, what):
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        err = np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30)
        assert err <= tol, f"{what}: order {k} relative error {err:.2e} > {tol}"


@pytest.mark.float64
@pytest.mark.parametrize("batch", [(), (2,)], ids=["single", "batched"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_standard_jet_matches_nested_jvp(name, batch):
    with jax.enable_x64(True):
        x = _x(name, batch)
        series = _series(name, x)
        p, s = hlopt.jet(FUNCTIONS[name], (x,), (series,), factorial_scaled=False)
        want = taylor_by_nested_jvp(FUNCTIONS[name], [x], [series], ORDER)
    _assert_close([p, *s], want, 1e-9, name)


@pytest.mark.parametrize("name", ["solve", "slogdet", "det", "custom_linear_solve"])
def test_float32_matches_nested_jvp(name):
    x = _x(name, (2,), np.float32)
    series = _series(name, x)
    p, s = hlopt.jet(FUNCTIONS[name], (x,), (series,), factorial_scaled=False)
    want = taylor_by_nested_jvp(FUNCTIONS[name], [x], [series], ORDER)
    _assert_close([p, *s], want, 2e-3, name)


@pytest.mark.float64
@pytest.mark.parametrize("batch", [(), (2,)], ids=["single", "batched"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_directions_batched_jet_matches_standard_jets(name, batch):
    """vmap over the series: one jet along 3 directions at once, each direction's
    coefficients (order 4) those of its own standard jet."""
    with jax.enable_x64(True):
        x = _x(name, batch)
        rng = _rng(name + "directions")
        dirs = [np.stack([0.5 * rng.normal(size=x.shape) for _ in range(3)]) for _ in range(ORDER)]
        batched = hlopt.jit(jax.vmap(lambda *s: hlopt.jet(FUNCTIONS[name], (x,), (list(s),))[1]))(*dirs)
        for r in range(3):
            one = hlopt.jet(FUNCTIONS[name], (x,), ([c[r] for c in dirs],))[1]
            _assert_close([c[r] for c in batched], one, 1e-10, f"{name} direction {r}")


def _scalar(name: str) -> Callable:
    return lambda x: jnp.sum(FUNCTIONS[name](x) ** 2)


@pytest.mark.float64
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_collapsed_laplacian_matches_hessian_trace(name):
    with jax.enable_x64(True):
        x = _x(name + "laplacian", ())
        got = hlopt.laplacian(_scalar(name))(x)
        want = jnp.trace(jax.jit(jax.hessian(_scalar(name)))(x))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9)


@pytest.mark.float64
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_collapsed_weighted_matches_standard_jets(name):
    """Weighted directions (not unit vectors): the collapsed second coefficient is the
    sum over the directions of the standard second coefficients."""
    with jax.enable_x64(True):
        x = _x(name + "collapsed", ())
        dirs = _rng(name + "weights").normal(size=(3, x.size))
        f = _scalar(name)  # one function: its standard jet compiles once for the three directions
        got = hlopt.laplacian(f, weights=dirs.T)(x)
        want = sum(hlopt.jet(f, (x,), ((d, np.zeros_like(d)),))[1][1] for d in dirs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10)


def test_cg_in_a_batched_jet_matches_standard_jets():
    """cg: a custom_linear_solve whose solve is a while loop (its jet is the loop's)."""
    def fun(x):
        a = _matrix(x)
        return jsp_linalg.cg(a @ a.T, jnp.cos(x[:N]), tol=1e-14, maxiter=40)[0]
    with jax.enable_x64(True):
        x = _x("cg", ())
        dirs = [np.stack([0.5 * _rng(f"cg{r}{k}").normal(size=x.shape) for r in range(2)]) for k in range(2)]
        batched = hlopt.jit(jax.vmap(lambda *s: hlopt.jet(fun, (x,), (list(s),), factorial_scaled=False)[1]))(*dirs)
        for r in range(2):
            want = taylor_by_nested_jvp(fun, [x], [[c[r] for c in dirs]], 2)[1:]
            _assert_close([c[r] for c in batched], want, 1e-7, f"cg direction {r}")


@pytest.mark.float64
def test_jet_of_a_jet_through_slogdet_matches_nested_jvp():
    """An inner jet inside an outer one: the markers of the inner body are differentiated by both."""
    def inner(x):
        return hlopt.jet(FUNCTIONS["slogdet"], (x,), ((jnp.cos(x), jnp.zeros_like(x)),))[1][1]
    with jax.enable_x64(True):
        x = _x("nested", ())
        series = _series("nested", x, 2)
        p, s = hlopt.jet(inner, (x,), (series,), factorial_scaled=False)

        def reference(y):  # the second derivative of slogdet along cos(y), at y
            first = lambda z: jax.jvp(FUNCTIONS["slogdet"], (z,), (jnp.cos(y),))[1]  # noqa: E731
            return jax.jvp(first, (y,), (jnp.cos(y),))[1]
        want = taylor_by_nested_jvp(reference, [x], [series], 2)
    _assert_close([p, *s], want, 1e-9, "jet of a jet")


def test_laplacian_of_slogdet_is_loop_free():
    """The compiled Laplacian of a determinant: one LU, and no loop over the D directions
    (the solves of each order take the directions stacked as one right-hand side)."""
    def f(x):
        return jnp.linalg.slogdet(_matrix(x, 6))[1]
    x = np.asarray(_x("loop", ()).tolist() + [0.1] * 20, np.float32)
    text = hlopt.jit(jax.vmap(hlopt.laplacian(f))).lower(np.stack([x, x])).compile().as_text()
    assert re.findall(r'custom_call_target="(lapack_[a-z]+)_ffi"', text).count("lapack_sgetrf") == 1
    trips = [int(t) for t in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text)]
    assert x.size not in trips, trips


def test_laplacian_of_slogdet_solves_no_zero_right_hand_side():
    """slogdet's JVP rule is trace(solve(a, da)); in the collapsed 2-jet along t x'(t) the
    primal of da is zero, so the solve's primal is zero without a solve: two triangular
    solves (L, then U) per order (the stacked directions' first coefficients, the collapsed
    second), where solving for the zero primal took two more. (The values: the tests above
    against nested jax.jvp and the Hessian trace.)"""
    def f(x):
        return jnp.linalg.slogdet(_matrix(x, 6))[1]
    x = np.asarray(_x("zero", ()).tolist() + [0.1] * 20, np.float32)
    text = hlopt.lower(jax.vmap(hlopt.laplacian(f)), np.stack([x, x])).apply(
        "jet-collapse,jet-expand,inline,symbol-dce,canonicalize,cse").as_text()
    solves = re.findall(r"lapack_strsm_ffi|stablehlo.triangular_solve", text)
    assert len(solves) == 4, solves


@pytest.mark.float64
@pytest.mark.parametrize("name", ["slogdet", "inv", "custom_linear_solve"])
def test_jet_of_a_laplacian_matches_nested_jvp_of_the_hessian_trace(name):
    """A collapsed jet inside a standard one: the solves of the inner jet's directions are
    linear_solve markers again (of the map applied to each row), which the outer jet
    differentiates by the same rule."""
    with jax.enable_x64(True):
        x = _x(name + "outer", ())
        series = _series(name + "outer", x, 2)
        p, s = hlopt.jet(hlopt.laplacian(_scalar(name)), (x,), (series,), factorial_scaled=False)
        want = taylor_by_nested_jvp(lambda y: jnp.trace(jax.hessian(_scalar(name))(y)), [x], [series], 2)
    _assert_close([p, *s], want, 1e-9, name)


def _affine_cg(x):
    """cg from a non-zero guess, one iteration, of a zero right-hand side: S(0) != 0."""
    a = jnp.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]], x.dtype) + jnp.diag(jnp.sin(x) ** 2)
    return jsp_linalg.cg(lambda v: a @ v, jnp.zeros(3, x.dtype), x0=jnp.ones(3, x.dtype), maxiter=1)[0] + x


def _signed_zero_solve(x):
    """A solve of -0: -0 exactly, which atan2(., -1) reads as -pi."""
    return jnp.arctan2(jnp.linalg.solve(jnp.diag(2.0 + x ** 2), jnp.full(x.shape, -0.0, x.dtype)), -1.0) + x


def _zero_times_infinite(x):
    """0 sqrt(x) at x = 0: the first coefficient is 0 * inf, NaN as jax.jvp gives it."""
    return jnp.zeros(3, x.dtype) * jnp.sqrt(x) + x


@pytest.mark.parametrize("fun,x", [(_affine_cg, [0.3, -0.2, 0.5]), pytest.param(
                                       _signed_zero_solve, [0.3, -0.2, 0.5], marks=pytest.mark.float64),
                                   (_zero_times_infinite, [0.0, 0.0, 0.0])])
def test_zero_right_hand_sides_outside_a_jvp_rule_keep_their_values(fun, x):
    """Only inside a custom_jvp rule's tangents (linear in them, by JAX's contract) is a solve of
    zero taken as zero and a product with a zero constant dropped; elsewhere the primal and
    the coefficients are jax.jvp's, an affine solve's S(0), a -0 and a NaN included."""
    with jax.enable_x64(True):
        x, v = jnp.asarray(x), jnp.array([1.0, 2.0, 3.0])
        got, (first,) = hlopt.jet(fun, (x,), ((v,),))
        want, want_first = jax.jit(lambda x, v: jax.jvp(fun, (x,), (v,)))(x, v)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(first), np.asarray(want_first), rtol=1e-12)
