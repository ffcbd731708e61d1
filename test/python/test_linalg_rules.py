"""The linear-algebra rules (passes/autodiff/linalg_rules.py) against JAX: Taylor coefficients
against nested jax.jvp to order 4 (float64 to 1e-9 relative, float32 at its own
tolerance, complex where JAX supports it), batched and unbatched; the directions-
batched and collapsed jets against standard ones and the Hessian trace; reverse mode
against jax.vjp; the StableHLO spellings (`stablehlo.cholesky`, `triangular_solve`,
what JAX emits for TPU and GPU) against the LAPACK ones; and the refusals.
float64 is enabled only inside `jax.enable_x64(True)` blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

import hlopt
from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered

from support.references import taylor_by_nested_jvp
from support import linalg_cases
from support.linalg_cases import (N, ORDER, SPELLINGS, TRSM, VJP_SPELLINGS, assert_series, case_inputs, jet_of_module,
                                  random_array, seeded_rng, spelling_text)
from support.vjp_harness import _signature, hlopt_vjp, jax_vjp

TOL = {np.float64: 1e-9, np.complex128: 1e-9, np.float32: 2e-3}


def _householder(a, tau):
    """Q = H_1 ... H_n, first n columns, written out (JAX has no derivative for orgqr)."""
    m, n = a.shape[-2:]
    v = jnp.tril(a, -1) + jnp.eye(m, n, dtype=a.dtype)
    q = jnp.broadcast_to(jnp.eye(m, dtype=a.dtype), (*a.shape[:-2], m, m))
    for i in range(n):
        vi = v[..., :, i]
        q = q - (q @ vi[..., :, None]) * (tau[..., i, None, None] * jnp.conj(vi)[..., None, :])
    return q[..., :, :n]


OPS: dict[str, Callable] = dict(linalg_cases.OPS)  # this file's copy: the SVD ops join it below


# Every op unbatched and batched in float64; the twelve triangular solves (side, triangle, op,
# unit diagonal) each once, every other one batched (left and right, lower and upper, N, T and
# C among them): their batch dimensions take the same path whatever the flags.
CASES = [(name, np.float64, batch) for name in OPS if name not in TRSM for batch in ((), (2,))] + \
    [(name, np.float64, ((), (2,))[i % 2]) for i, name in enumerate(TRSM)] + \
    [(name, np.float32, ()) for name in ("cholesky", "lu", "eigh", "qr", "trsm_left_lower_N",
                                         "trsm_right_upper_T_unit")] + \
    [(name, np.complex128, batch) for name in ("cholesky", "lu", "eigh", "qr", "qr_square", "trsm_left_upper_C_unit",
                                               "trsm_right_lower_T")
     for batch in ((), (2,))]


@functools.cache
def _nested_jvp(name: str, dtype: type, batch: tuple[int, ...]) -> list[np.ndarray]:
    """The coefficients by nested jax.jvp of case `name` of OPS, computed once per module (the
    Taylor rule and the StableHLO spelling tests compare with the same ones)."""
    with jax.enable_x64(dtype != np.float32):
        primals, series = case_inputs(name, dtype, batch)
        return [np.asarray(c) for c in taylor_by_nested_jvp(OPS[name], primals, series, ORDER)]


@pytest.mark.parametrize("name,dtype,batch", linalg_cases.float64_marked(CASES),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_taylor_rule_matches_nested_jvp(name, dtype, batch):
    with jax.enable_x64(dtype != np.float32):
        primals, series = case_inputs(name, dtype, batch)
        p, s = hlopt.jet(OPS[name], primals, series, factorial_scaled=False)
    assert_series([p, *s], _nested_jvp(name, dtype, batch), TOL[dtype], name)


@pytest.mark.float64
@pytest.mark.parametrize("name", ["cholesky", "lu", "eigh", "qr", "trsm_left_lower_N", "trsm_right_upper_C"])
def test_directions_batched_jet_matches_standard_jets(name):
    """vmap over the series: one jet batched over 3 directions (the primal once)."""
    with jax.enable_x64(True):
        primals, _ = case_inputs(name, np.float64, (2,))
        rng = seeded_rng(name + "directions")
        series = [[np.stack([random_array(rng, p.shape, np.float64) for _ in range(3)]) for _ in range(3)]
                  for p in primals]
        batched = hlopt.jit(jax.vmap(lambda *s: hlopt.jet(OPS[name], primals, [list(s[:3]), list(s[3:])])[1]))(
            *series[0], *series[1])
        for r in range(3):
            one = hlopt.jet(OPS[name], primals, [[c[r] for c in series[0]], [c[r] for c in series[1]]])[1]
            assert_series([b[r] for b in batched], one, 1e-12, f"{name} direction {r}")


def _scalar(name: str) -> Callable:
    def f(x):
        a = x[: N * N].reshape(N, N)
        b = jnp.tile(x[N * N:].reshape(N, 1), (1, 2))
        out = OPS[name](jnp.sin(a) * 0.5 + 0.1 * a @ a, b)
        return jnp.sum(jnp.cos(out)) + jnp.sum(out * out)
    return f


@pytest.mark.float64
@pytest.mark.parametrize("name", ["cholesky", "lu", "eigh", "qr", "qr_square", "trsm_left_upper_T",
                                  "trsm_right_lower_C_unit"])
def test_collapsed_laplacian_matches_hessian_trace(name):
    with jax.enable_x64(True):
        x = seeded_rng(name + "laplacian").normal(size=N * N + N)
        got = hlopt.laplacian(_scalar(name))(x)
        want = jnp.trace(jax.jit(jax.hessian(_scalar(name)))(x))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9)


@pytest.mark.float64
@pytest.mark.parametrize("name", ["cholesky", "lu", "eigh", "qr", "qr_square", "trsm_left_upper_T",
                                  "trsm_right_lower_C_unit"])
def test_collapsed_matches_standard_jets(name):
    """The collapsed second coefficient (weights: the sum over directions) equals the sum of
    standard second coefficients along each direction."""
    with jax.enable_x64(True):
        x = seeded_rng(name + "collapsed").normal(size=N * N + N)
        dirs = seeded_rng(name + "dirs").normal(size=(3, x.size))
        f = _scalar(name)  # one function: its standard jet compiles once for the three directions
        got = hlopt.laplacian(f, weights=dirs.T)(x)
        want = sum(hlopt.jet(f, (x,), ((d, np.zeros_like(d)),))[1][1] for d in dirs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10)


VJP_CASES = [(name, np.float64, batch) for name in OPS for batch in ((), (2,))][::2] + \
    [("cholesky", np.float64, (2,)), ("lu", np.float64, (2,)), ("eigh", np.float64, (2,)), ("qr", np.float64, (2,)),
     ("qr_square", np.float64, ()), ("trsm_left_lower_N", np.float64, (2,))] + \
    [(name, np.complex128, ()) for name in ("cholesky", "lu", "eigh", "qr", "qr_square", "trsm_left_upper_C_unit",
                                            "trsm_right_lower_T")] + \
    [("cholesky", np.float32, ()), ("lu", np.float32, ()), ("eigh", np.float32, ()), ("qr", np.float32, ())]


@pytest.mark.parametrize("name,dtype,batch", linalg_cases.float64_marked(VJP_CASES),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_vjp_rule_matches_jax_vjp(name, dtype, batch):
    with jax.enable_x64(dtype != np.float32):
        primals, _ = case_inputs(name, dtype, batch)
        ct = random_array(seeded_rng(name + "ct"), jax.eval_shape(OPS[name], *primals).shape, dtype)
        got = hlopt_vjp(OPS[name], primals, [ct])
        want = jax_vjp(OPS[name], primals, [ct])
    for g, w in zip(got, want):
        assert_series([g], [w], TOL[dtype] if dtype != np.float32 else 1e-4, name)


@pytest.mark.parametrize("dtype,batch", [pytest.param(np.float64, (), marks=pytest.mark.float64),
                                         pytest.param(np.float64, (2,), marks=pytest.mark.float64),
                                         pytest.param(np.complex128, (), marks=pytest.mark.float64),
                                         (np.float32, ())], ids=str)
def test_householder_product_of_any_reflectors(dtype, batch):
    """orgqr on reflectors and factors that come from no QR (tau = 0 included), against the
    product written out: its Taylor coefficients and its vjp."""
    with jax.enable_x64(dtype != np.float32):
        rng = seeded_rng(f"householder{np.dtype(dtype).name}{batch}")
        a = random_array(rng, (*batch, 5, 3), dtype)
        tau = random_array(rng, (*batch, 3), dtype)
        tau = np.where(np.arange(3) == 1, 0, tau).astype(dtype)  # H_2 = I
        series = [[random_array(rng, x.shape, dtype) for _ in range(ORDER)] for x in (a, tau)]
        p, s = hlopt.jet(lax.linalg.householder_product, (a, tau), series, factorial_scaled=False)
        want = taylor_by_nested_jvp(_householder, [a, tau], series, ORDER)
        assert_series([p, *s], want, TOL[dtype], "orgqr")
        ct = random_array(rng, (*batch, 5, 3), dtype)
        got = hlopt_vjp(lax.linalg.householder_product, [a, tau], [ct])
        want = jax_vjp(_householder, [a, tau], [ct])
    for g, w in zip(got, want):
        assert_series([g], [w], TOL[dtype] if dtype != np.float32 else 1e-4, "orgqr vjp")


# --- the StableHLO spellings ------------------------------------------------------------


@pytest.mark.float64
@pytest.mark.parametrize("name,platform", SPELLINGS)
def test_stablehlo_spelling_matches_nested_jvp(name, platform):
    with jax.enable_x64(True):
        primals, series = case_inputs(name, np.float64, (2,))
        text = spelling_text(name, platform, primals)
        op = "stablehlo.cholesky" if name == "cholesky" else "stablehlo.triangular_solve"
        assert op in text and "lapack" not in text
        got = jet_of_module(text, primals, series, ORDER)
    assert_series(got, _nested_jvp(name, np.float64, (2,)), 1e-9, name)


@pytest.mark.float64
@pytest.mark.parametrize("name,platform", VJP_SPELLINGS)
def test_stablehlo_spelling_vjp_matches_jax_vjp(name, platform):
    with jax.enable_x64(True):
        primals, _ = case_inputs(name, np.float64, ())
        f = OPS[name]
        text = spelling_text(name, platform, primals)
        assert ("stablehlo.cholesky" if name == "cholesky" else "stablehlo.triangular_solve") in text
        ct = random_array(seeded_rng("ct"), jax.eval_shape(f, *primals).shape, np.float64)
        got = hlopt_vjp(text, primals, [ct])
        want = jax_vjp(f, primals, [ct])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


# --- refusals ---------------------------------------------------------------------------


def _lowered_text(f, *args) -> str:
    return jax.jit(f).lower(*args).as_text()


def test_rectangular_lu_is_refused():
    a = np.ones((4, 3), np.float32)
    with pytest.raises(Exception, match="LU rules take square matrices.*4x3"):
        hlopt.jet(lambda x: jsl.lu_factor(x)[0], (a,), ((a,),))


def test_unknown_layout_is_refused():
    text = _lowered_text(lambda a: lax.linalg.cholesky(a, symmetrize_input=False), np.eye(3, dtype=np.float32))
    text = text.replace("operand_layouts = [dense<[0, 1]>", "operand_layouts = [dense<[1, 0]>")
    module = parse_module(text)
    x = np.eye(3, dtype=np.float32)
    with pytest.raises(Exception, match=r"operand_layouts\[0\] is \[1, 0\].*column-major layout \[0, 1\]"):
        Lowered(module, _signature([x], [x])).apply("jet-expand{func=main order=2}")


def test_integer_results_have_no_series():
    """LU's pivots come out of the jet as the primal's, with zero coefficients."""
    a = random_array(seeded_rng("pivots"), (N, N), np.float32)
    p, s = hlopt.jet(lambda x: jsl.lu_factor(x)[1], (a,), ((a, a),))
    np.testing.assert_array_equal(p, jsl.lu_factor(a)[1])
    assert all(not np.any(np.asarray(t, float)) for t in s)


# --- the singular value decomposition (and lstsq, pinv, cho_solve built on the rules) ---


def _svd_packed(a, algorithm=None):
    """U, s and V of the thin SVD of `a` in one array (V = Vh^H, so all have p columns)."""
    u, s, vh = lax.linalg.svd(a, full_matrices=False, algorithm=algorithm)
    return jnp.concatenate([u, s[..., None, :].astype(u.dtype), jnp.conj(jnp.swapaxes(vh, -1, -2))], axis=-2)


def _svd_tall(a, b):
    return _svd_packed(jnp.concatenate([a, jnp.swapaxes(b, -1, -2)], axis=-2))


def _svd_wide(a, b):
    return _svd_packed(jnp.concatenate([a, b], axis=-1))


def _svd_square(a, b):
    return _svd_packed(a + jnp.sum(b))


def _svd_qr_algorithm(a, b):
    """lax.linalg.svd with the QR algorithm: LAPACK gesvd, the same record as gesdd."""
    return _svd_packed(jnp.concatenate([a, jnp.swapaxes(b, -1, -2)], axis=-2), lax.linalg.SvdAlgorithm.QR)


SVD_OPS = {"svd_tall": _svd_tall, "svd_wide": _svd_wide, "svd_square": _svd_square,
           "svd_qr_algorithm": _svd_qr_algorithm}
OPS.update(SVD_OPS)  # after the parameter lists above: the shared helpers (_scalar) read OPS
SVD_CASES = [(name, np.float64, batch) for name in SVD_OPS for batch in ((), (2,))] + \
    [("svd_tall", np.complex128, (2,)), ("svd_wide", np.complex128, ()), ("svd_square", np.complex128, ())] + \
    [("svd_tall", np.float32, ()), ("svd_wide", np.float32, ())]


@pytest.mark.parametrize("name,dtype,batch", linalg_cases.float64_marked(SVD_CASES),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_svd_taylor_rule_matches_nested_jvp(name, dtype, batch):
    test_taylor_rule_matches_nested_jvp(name, dtype, batch)


def test_svd_spellings_are_gesdd_and_gesvd():
    primals, _ = case_inputs("svd_tall", np.float32, ())
    assert "@lapack_sgesdd_ffi" in _lowered_text(OPS["svd_tall"], *primals)
    assert "@lapack_sgesvd_ffi" in _lowered_text(OPS["svd_qr_algorithm"], *primals)


@pytest.mark.float64
@pytest.mark.parametrize("name", ["svd_tall", "svd_wide"])
def test_svd_directions_batched_jet_matches_standard_jets(name):
    test_directions_batched_jet_matches_standard_jets(name)


@pytest.mark.float64
@pytest.mark.parametrize("name", list(SVD_OPS))
def test_svd_collapsed_laplacian_matches_hessian_trace(name):
    test_collapsed_laplacian_matches_hessian_trace(name)


@pytest.mark.float64
@pytest.mark.parametrize("name", ["svd_tall", "svd_wide", "svd_square"])
def test_svd_collapsed_matches_standard_jets(name):
    test_collapsed_matches_standard_jets(name)


@pytest.mark.parametrize("name,dtype,batch", linalg_cases.float64_marked(
                         [(name, np.float64, ()) for name in SVD_OPS] +
                         [("svd_wide", np.float64, (2,)), ("svd_tall", np.complex128, ()),
                          ("svd_wide", np.complex128, ()), ("svd_tall", np.float32, ())]),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_svd_vjp_rule_matches_jax_vjp(name, dtype, batch):
    test_vjp_rule_matches_jax_vjp(name, dtype, batch)


@pytest.mark.float64
def test_svd_vjp_of_singular_values_alone():
    """Only s reaches the output (U, V unused): the cotangent of s alone."""
    with jax.enable_x64(True):
        a = random_array(seeded_rng("svals"), (2, 5, 3), np.float64)
        f = lambda x: jnp.linalg.svd(x, full_matrices=False)[1] ** 2  # noqa: E731
        ct = random_array(seeded_rng("svals ct"), (2, 3), np.float64)
        got, want = hlopt_vjp(f, [a], [ct]), jax_vjp(f, [a], [ct])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)


def _tall_system(rng: np.random.Generator, dtype):
    return random_array(rng, (6, 4), dtype), random_array(rng, (6, 2), dtype)


LSTSQ = {"lstsq": lambda a, b: jnp.linalg.lstsq(a, b)[0], "pinv": lambda a, b: jnp.linalg.pinv(a) @ b,
         "cho_solve": lambda a, b: jsl.cho_solve(jsl.cho_factor(a.T @ a + jnp.eye(a.shape[1], dtype=a.dtype)),
                                                  a.T @ b)}


@pytest.mark.parametrize("name", list(LSTSQ))
@pytest.mark.parametrize("dtype", [pytest.param(np.float64, marks=pytest.mark.float64), np.float32])
def test_lstsq_pinv_cho_solve_in_jet_match_nested_jvp(name, dtype):
    with jax.enable_x64(dtype != np.float32):
        rng = seeded_rng(name + "jet" + np.dtype(dtype).name)
        primals = _tall_system(rng, dtype)
        series = [[random_array(rng, p.shape, dtype) for _ in range(ORDER)] for p in primals]
        p, s = hlopt.jet(LSTSQ[name], primals, series, factorial_scaled=False)
        want = taylor_by_nested_jvp(LSTSQ[name], primals, series, ORDER)
    assert_series([p, *s], want, TOL[dtype], name)


@pytest.mark.float64
@pytest.mark.parametrize("name", list(LSTSQ))
def test_lstsq_pinv_cho_solve_in_laplacian_match_hessian_trace(name):
    def f(x):
        a = x[:24].reshape(6, 4) + jnp.eye(6, 4)
        b = jnp.sin(x[24:]).reshape(6, 2)
        return jnp.sum(jnp.tanh(LSTSQ[name](a, b)))

    with jax.enable_x64(True):
        x = seeded_rng(name + "laplacian").normal(size=36) * 0.5
        got = hlopt.laplacian(f)(x)
        want = jnp.trace(jax.jit(jax.hessian(f))(x))
        grad = jax.jit(jax.grad(hlopt.laplacian(f)))(x)
        want_grad = jax.jit(jax.grad(lambda y: jnp.trace(jax.hessian(f)(y))))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("how,match", [
    (lambda x: jnp.linalg.svd(x, full_matrices=True)[0], r"@lapack_dgesdd_ffi with full matrices \(full_matrices=True\)"),
    (lambda x: jnp.linalg.svd(x, compute_uv=False), r"@lapack_dgesdd_ffi without singular vectors \(compute_uv=False\)"),
])
def test_svd_modes_without_a_rule_are_refused(how, match):
    with jax.enable_x64(True):
        a = random_array(seeded_rng("modes"), (5, 3), np.float64)
        with pytest.raises(Exception, match=match + ".*jnp.linalg.svd\\(a, full_matrices=False\\)"):
            hlopt.jet(how, (a,), ((a,),))
        with pytest.raises(Exception, match=match):
            hlopt_vjp(lambda x: jnp.sum(how(x)), [a], [np.float64(1)])
