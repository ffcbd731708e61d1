"""hlopt.jet where information, precision or the IR's reach used to run out:
stop_gradient and custom_jvp rules in the body, overflow and underflow at large
|x|, tiny x and 0, complex numbers, order 0 and the order bound.

Each case is checked against nested jax.jvp (the reference JAX's own jet tests use)
and, where JAX's jet handles it, against jax.experimental.jet. float64 is enabled
only inside `jax.enable_x64(True)` blocks.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import jet as jax_jet

import hlopt
from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered
from hlopt.runtime.compile import compile_lowered

from support.references import taylor_by_nested_jvp, vjp_of_a_jet
from support.vjp_harness import _signature, jax_vjp


def _coefficients(fun: Callable, primals, series) -> list:
    """hlopt's plain Taylor coefficients 0..K of `fun` (one output)."""
    p, s = hlopt.jet(fun, primals, series, factorial_scaled=False)
    return [np.asarray(p)] + [np.asarray(t) for t in s]


def _assert_close(got, want, rtol, atol, what=""):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol, err_msg=f"{what} order {k}")


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _jax_jet(fun: Callable, primals, series):
    """JAX's jet of `fun`, in one jitted program."""
    return jax.jit(lambda p, s: jax_jet.jet(fun, p, s))(primals, series)


# --- stop_gradient ------------------------------------------------------------------


def test_stop_gradient_is_a_zero_series():
    """The issue's case: x * stop_gradient(x) at 2 along (1, 0) is [4; 2, 0] (it was [4; 2, 2])."""
    f = lambda x: x * lax.stop_gradient(x)  # noqa: E731
    got = hlopt.jet(f, (2.0,), ((1.0, 0.0),))
    want = _jax_jet(f, (2.0,), ((1.0, 0.0),))
    _assert_close([got[0], *got[1]], [want[0], *want[1]], rtol=0, atol=0)
    np.testing.assert_array_equal(np.asarray(got[1]), [2.0, 0.0])


def test_a_result_independent_of_the_input_series_has_zero_coefficients():
    """Its coefficients are zeros, not its primal, as in JAX's jet (a symbolic zero series made
    concrete), whether the result is read alone or beside one that has a series."""
    f = lambda x: (jnp.sin(x), jnp.full((3,), 3.0) + 0 * lax.stop_gradient(x), jnp.cos(lax.stop_gradient(x)))  # noqa: E731
    x, series = jnp.linspace(0.1, 0.7, 3), ((jnp.ones(3), jnp.zeros(3), jnp.ones(3)),)
    got, want = hlopt.jet(f, (x,), series), _jax_jet(f, (x,), series)
    for i in range(3):
        _assert_close([got[0][i], *got[1][i]], [want[0][i], *want[1][i]], rtol=1e-6, atol=1e-6)
    for i in (1, 2):
        np.testing.assert_array_equal(np.asarray(got[1][i]), np.zeros((3, 3)))
        alone = jax.jit(lambda x, i=i: hlopt.jet(f, (x,), series)[1][i])(x)  # the other results unread
        np.testing.assert_array_equal(np.asarray(alone), np.zeros((3, 3)))


def _loop_sg(x):
    return lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * lax.stop_gradient(v) + x, x)


def _cond_sg(x):
    return lax.cond(x.sum() > 0, lambda v: v * lax.stop_gradient(jnp.exp(v)), lambda v: lax.stop_gradient(v) ** 2, x)


@jax.jit
def _inner_sg(x):
    return jnp.tanh(x) * lax.stop_gradient(jnp.cos(x))


def _nested_jet_sg(x, jet=hlopt.jet):
    # a jet inside the jet body: stop_gradient stops both
    return jet(lambda y: y * lax.stop_gradient(jnp.sin(y)), (x,), ((jnp.ones_like(x), jnp.zeros_like(x)),))[1][1]


STOP_GRADIENT_CASES: dict[str, Callable] = {
    "alone": lax.stop_gradient,  # upstream's test_stopgrad
    "product": lambda x: x * lax.stop_gradient(x),
    "inside_jit": lambda x: _inner_sg(x) + _inner_sg(2 * x),
    "fori_loop": _loop_sg,
    "cond": _cond_sg,
    "vmap_inside": lambda x: jax.vmap(lambda r: r * lax.stop_gradient(r.sum()))(jnp.outer(x, x)).sum(1),
    "logsumexp": lambda x: jax.nn.logsumexp(jnp.outer(x, x), axis=1),
    "softmax": lambda x: jax.nn.softmax(x * 3),
    "nested_jet": _nested_jet_sg,
}


# nested jvp cannot trace an hlopt.jet: its reference differentiates JAX's jet instead
STOP_GRADIENT_REFERENCES = {"nested_jet": lambda x: _nested_jet_sg(x, jax_jet.jet)}


@pytest.mark.parametrize("name", list(STOP_GRADIENT_CASES))
def test_stop_gradient_matches_nested_jvp(name):
    fun, order = STOP_GRADIENT_CASES[name], 4
    r = _rng(name)
    with jax.enable_x64(True):
        x = r.uniform(-1.5, 1.5, size=5)
        series = [0.5 * r.normal(size=5) for _ in range(order)]
        want = taylor_by_nested_jvp(STOP_GRADIENT_REFERENCES.get(name, fun), [x], [series], order)
        _assert_close(_coefficients(fun, (x,), (series,)), want, rtol=1e-9, atol=1e-10, what=name)


def test_stop_gradient_under_jvp_and_vmap_of_a_jet():
    """Forward mode through hlopt.jet and vmap over it keep the zero series."""
    f = lambda x: jnp.sin(x) * lax.stop_gradient(jnp.exp(x))  # noqa: E731

    def second(jet_fn, x):
        return jet_fn(f, (x,), ((jnp.ones_like(x), jnp.zeros_like(x)),))[1][1]

    x = np.linspace(-1, 1, 4, dtype=np.float32)
    t = np.full(4, 0.3, np.float32)
    nested = jax.jit(lambda x, t: jax.jvp(lambda y: jax.jvp(lambda z: jax.jvp(f, (z,), (jnp.ones_like(z),))[1], (y,),
                                                            (jnp.ones_like(y),))[1], (x,), (t,)))(x, t)
    _assert_close(jax.jvp(lambda y: second(hlopt.jet, y), (x,), (t,)), nested, rtol=1e-5, atol=1e-6)
    xs = np.stack([x, 2 * x])
    want = jax.jit(jax.vmap(lambda y: second(jax_jet.jet, y)))(xs)
    np.testing.assert_allclose(jax.vmap(lambda y: second(hlopt.jet, y))(xs), want, rtol=1e-5, atol=1e-6)


def test_stop_gradient_leaves_nothing_to_run():
    """No marker reaches XLA, and stop_gradient outside a jet lowers as JAX lowers it."""
    f = lambda x: x * lax.stop_gradient(jnp.sin(x))  # noqa: E731
    x = np.ones(3, np.float32)
    lowered = hlopt.lower(lambda x: hlopt.jet(f, (x,), ((x, x),)), x)
    assert "hlopt.jet.stop_gradient" in lowered.as_text()
    assert "stop_gradient" not in lowered.apply("jet-expand").as_text()
    assert "custom-call" not in lowered.compile().as_text()
    plain = hlopt.lower(f, x).as_text()
    assert "custom_call" not in plain and plain.count("stablehlo.multiply") == 1


VJP_OF_A_JET = vjp_of_a_jet("""
  %0 = stablehlo.tanh %x : tensor<4xf32>
  %1 = stablehlo.exponential %x : tensor<4xf32>
  %2 = stablehlo.custom_call @hlopt.jet.stop_gradient(%1) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  %3 = stablehlo.multiply %0, %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
""")


def test_vjp_of_a_jet_does_not_differentiate_through_stop_gradient():
    """hlopt-default runs jet-expand before vjp-expand: the marker must reach vjp-expand
    as a zero derivative (jet-expand removed it first, and the backward went through it)."""
    f = lambda x: jnp.tanh(x) * lax.stop_gradient(jnp.exp(x))  # noqa: E731

    def second(x, v):  # the second Taylor coefficient of t -> f(x + t v)
        return jax.jvp(lambda y: jax.jvp(f, (y,), (v,))[1], (x,), (v,))[1] / 2

    x, v, ct = (np.linspace(-1, 1, 4).astype(np.float32) * a + b for a, b in ((1, 0), (0.5, 0.2), (1, 0.5)))
    lowered = Lowered(parse_module(VJP_OF_A_JET), _signature([x, v, ct], [x, v]), backend=compile_lowered)
    assert "stop_gradient" not in lowered.apply("hlopt-default").as_text()
    got = lowered.compile()(x, v, ct)
    for g, w in zip(got, jax_vjp(second, [x, v], [ct])):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-5, atol=1e-6)


def test_a_complex_zero_constant_cotangent_is_never_read():
    """The bindings raise on complex dense attributes: vjp-expand, given a complex zero
    cotangent constant, failed with a TypeError; it is a cotangent like any other."""
    text = """
func.func @main(%x: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  %ct = stablehlo.constant dense<(0.0,0.0)> : tensor<3xcomplex<f32>>
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<3xcomplex<f32>>, tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
  return %g : tensor<3xcomplex<f32>>
}
func.func private @f(%x: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  %0 = stablehlo.multiply %x, %x : tensor<3xcomplex<f32>>
  return %0 : tensor<3xcomplex<f32>>
}"""
    x = np.array([1 + 2j, -0.5j, 3], np.complex64)
    got = Lowered(parse_module(text), _signature([x], [x]), backend=compile_lowered).compile()(x)[0]
    np.testing.assert_array_equal(np.asarray(got), np.zeros(3, np.complex64))


# --- custom_jvp rules ---------------------------------------------------------------


@jax.custom_jvp
def _twice_rule(x):
    return x


_twice_rule.defjvp(lambda p, t: (_twice_rule(p[0]), 2.0 * t[0]))  # the rule, not the primal, is the derivative


@jax.custom_jvp
def _cube_with_int(x, n):
    return x**3 * n


_cube_with_int.defjvp(lambda p, t: (_cube_with_int(*p), 3 * p[0] ** 2 * p[1] * t[0]))


def _clip_nondiff(x):
    return jnp.clip(x, -0.5, 0.5) + jax.nn.relu(x)


CUSTOM_JVP_CASES: dict[str, tuple[Callable, np.ndarray]] = {
    # kinks the primal implementation has and the rule has not
    "softplus_at_0": (jax.nn.softplus, np.array([0.0, -1.0, 2.0])),
    "logaddexp_tie": (lambda x: jnp.logaddexp(x, x * x), np.array([0.0, 1.0, 0.5])),
    "log_sigmoid": (jax.nn.log_sigmoid, np.array([0.0, -3.0, 3.0])),
    # sinc's rule calls another custom_jvp function recursively
    "sinc_at_0": (jnp.sinc, np.array([0.0, 0.25, -1.3])),
    "relu_at_0": (jax.nn.relu, np.array([0.0, -1.0, 1.0])),
    "silu_gelu": (lambda x: jax.nn.silu(x) + jax.nn.gelu(x), np.array([0.0, -1.0, 1.5])),
    "clip": (_clip_nondiff, np.array([0.0, -1.0, 0.2])),
    "user_rule": (_twice_rule, np.array([0.5, -1.0, 2.0])),
    "user_rule_composed": (lambda x: jnp.sin(_twice_rule(x * x)), np.array([0.5, -1.0, 2.0])),
    "integer_operand": (lambda x: _cube_with_int(x, 3), np.array([0.5, -1.0, 2.0])),
}


@pytest.mark.parametrize("name", list(CUSTOM_JVP_CASES))
def test_custom_jvp_rule_matches_nested_jvp(name):
    fun, x = CUSTOM_JVP_CASES[name]
    order, r = 4, _rng(name)
    with jax.enable_x64(True):
        series = [r.normal(size=x.shape) for _ in range(order)]
        _assert_close(_coefficients(fun, (x,), (series,)), taylor_by_nested_jvp(fun, [x], [series], order),
                      rtol=1e-9, atol=1e-10, what=name)


def test_custom_jvp_at_order_1_and_through_a_nested_jet():
    with jax.enable_x64(True):
        x, v = np.array([0.0, 0.7]), np.array([1.0, -0.5])
        _assert_close(_coefficients(jnp.sinc, (x,), ((v,),)), taylor_by_nested_jvp(jnp.sinc, [x], [[v]], 1),
                      rtol=1e-12, atol=1e-12)

        def inner(y):  # the second derivative of softplus along 1, by an inner hlopt.jet
            return hlopt.jet(jax.nn.softplus, (y,), ((jnp.ones_like(y), jnp.zeros_like(y)),))[1][1]

        def inner_ref(y):
            ones = jnp.ones_like(y)
            return jax.jvp(lambda z: jax.jvp(jax.nn.softplus, (z,), (ones,))[1], (y,), (ones,))[1]

        series = [v, 0.5 * v, -v]
        _assert_close(_coefficients(inner, (x,), (series,)), taylor_by_nested_jvp(inner_ref, [x], [series], 3),
                      rtol=1e-9, atol=1e-10)


# --- overflow and underflow ---------------------------------------------------------

BIG = [-1e30, -800.0, -100.0, -95.0, -20.0, -1e-30, 0.0, 1e-30, 20.0, 95.0, 100.0, 800.0, 1e30]
POSITIVE = [1e-30, 1e-10, 1e-3, 1.0, 1e3, 1e10, 1e30]
UNIT = [-0.9999999, -0.5, -1e-30, 0.0, 1e-30, 0.5, 0.9999999]

# name -> (function, points): every point where nested jvp is finite must agree
EXTREMES: dict[str, tuple[Callable, list[float]]] = {
    "exp": (jnp.exp, BIG),
    "exp2": (jnp.exp2, BIG),
    "expm1": (jnp.expm1, BIG),
    "log": (jnp.log, POSITIVE),
    "log1p": (jnp.log1p, [-0.9999999, 0.0] + POSITIVE),
    "logistic": (lax.logistic, BIG + [-500.0, 500.0]),
    "tanh": (jnp.tanh, BIG),
    "tan": (jnp.tan, [-1.5707, -1e-30, 0.0, 1.5707, 1e10]),
    "erf": (lax.erf, BIG),
    "erfc": (lax.erfc, BIG),
    "erf_inv": (lax.erf_inv, UNIT),
    "sqrt": (jnp.sqrt, POSITIVE),
    "rsqrt": (lax.rsqrt, POSITIVE),
    "cbrt": (jnp.cbrt, BIG),
    "atan": (jnp.arctan, BIG),
    "atanh": (jnp.arctanh, UNIT),
    "asinh": (jnp.arcsinh, BIG),
    "acosh": (jnp.arccosh, [1.0000001, 2.0, 1e10, 1e30]),
    "asin": (jnp.arcsin, UNIT),
    "acos": (jnp.arccos, UNIT),
    "sin": (jnp.sin, BIG),
    "sinh": (jnp.sinh, BIG),
    "cosh": (jnp.cosh, BIG),
    "pow_const": (lambda x: x**2.5, POSITIVE + [0.0]),
    "pow_neg_const": (lambda x: x**-1.5, POSITIVE),
    "pow_int": (lambda x: x**3.0, BIG),
    "pow_base": (lambda x: jnp.power(2.0, x), BIG),
    "pow_self": (lambda x: jnp.power(x, x), POSITIVE + [0.0]),
    "reciprocal": (lambda x: 1.0 / x, BIG + POSITIVE),
    "atan2_num": (lambda x: jnp.arctan2(x, 1.0), BIG),
    "atan2_den": (lambda x: jnp.arctan2(1.0, x), BIG),
    "lgamma": (lax.lgamma, POSITIVE + [-2.5, -0.5]),
    "digamma": (lax.digamma, [1e-10, 1e-3, 1.0, 1e3, 1e10]),
    "softplus": (jax.nn.softplus, BIG),
    "logsumexp": (lambda x: jax.nn.logsumexp(jnp.stack([x, 2 * x]), axis=0), BIG),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(EXTREMES))
def test_extremes_match_nested_jvp(name, dtype):
    """Large |x|, tiny x and 0, in float32 and float64: where nested jvp is finite,
    hlopt agrees (logistic at -95 in float32 was NaN; atan2 with a zero denominator,
    and pow with a series in the exponent at tiny or huge values, were NaN or wrong)."""
    fun, points = EXTREMES[name]
    order = 4
    with jax.enable_x64(dtype == np.float64):
        x = np.array(points, dtype)
        series = [np.full(x.shape, c, dtype) for c in (1.0, 0.5, -0.25, 0.125, 0.3)[:order]]
        got = np.stack(_coefficients(fun, (x,), (series,)))
        want = np.stack([np.asarray(t) for t in taylor_by_nested_jvp(fun, [x], [series], order)])
    tol = 1e-3 if dtype == np.float32 else 1e-9
    finite = np.isfinite(want)
    scale = np.max(np.abs(np.where(finite, want, 0)), axis=0, keepdims=True)
    close = np.isclose(got, want, rtol=tol, atol=tol * scale + 1e-30)
    bad = np.argwhere(finite & ~close)
    assert not len(bad), "\n".join(f"x = {x[j]}, order {k}: hlopt {got[k, j]}, nested jvp {want[k, j]}" for k, j in bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exponent_series_at_tiny_huge_and_zero_bases(dtype):
    """x^w with series in both: x^w0 * exp((w - w0) log x) keeps tiny bases and huge
    exponents finite where exp(w log x) (JAX's jet) gives NaN or loses every digit."""
    values = [-1e30, -100.0, -1.0, 0.0, 1e-30, 1e-10, 1.0, 100.0, 1e30]
    bases, exponents = np.meshgrid(np.abs(values), values)
    order = 4
    with jax.enable_x64(dtype == np.float64):
        x, w = bases.ravel().astype(dtype), exponents.ravel().astype(dtype)
        sx = [np.full(x.shape, c, dtype) for c in (1.0, 0.5, -0.25, 0.125)]
        sw = [np.full(x.shape, c, dtype) for c in (-0.7, 0.2, 0.4, -0.1)]
        got = np.stack(_coefficients(jnp.power, (x, w), (sx, sw)))
        want = np.stack([np.asarray(t) for t in taylor_by_nested_jvp(jnp.power, [x, w], [sx, sw], order)])
    tol = 1e-3 if dtype == np.float32 else 1e-8
    finite = np.isfinite(want)
    scale = np.max(np.abs(np.where(finite, want, 0)), axis=0, keepdims=True)
    bad = np.argwhere(finite & ~np.isclose(got, want, rtol=tol, atol=tol * scale + 1e-30))
    assert not len(bad), [(x[j], w[j], k, got[k, j], want[k, j]) for k, j in bad[:5]]


def test_logistic_keeps_the_primal_bitwise():
    """Inside a jet, logistic is one stablehlo.logistic: its primal is JAX's, bit for bit."""
    x = np.linspace(-120, 120, 2001, dtype=np.float32)
    primal, _ = hlopt.jet(lax.logistic, (x,), ((np.ones_like(x),),))
    np.testing.assert_array_equal(np.asarray(primal), np.asarray(jax.jit(lax.logistic)(x)))


def test_upstream_logistic_range_order_5():
    """JAX's test_logistic: (2, 3) points uniform in [-100, 100], order 5, float32, 1e-3."""
    r = _rng("logistic")
    x = (r.uniform(size=(2, 3)) * 200 - 100).astype(np.float32)
    x[0, 0] = -95.0
    series = [r.normal(size=(2, 3)).astype(np.float32) for _ in range(5)]
    got = hlopt.jet(lax.logistic, (x,), (series,))
    want = _jax_jet(lax.logistic, (x,), (series,))
    _assert_close([got[0], *got[1]], [want[0], *want[1]], rtol=1e-3, atol=1e-3)
    ref = taylor_by_nested_jvp(lax.logistic, [x], [[s / math.factorial(k + 1) for k, s in enumerate(series)]], 5)
    _assert_close(_coefficients(lax.logistic, (x,), ([s / math.factorial(k + 1) for k, s in enumerate(series)],)),
                  ref, rtol=1e-3, atol=1e-3)


# --- complex numbers ----------------------------------------------------------------

COMPLEX_UNARY: dict[str, Callable] = {
    # JAX's jet has these for complex inputs (upstream: real, imag, conj at order 3)
    "real": lax.real, "imag": lax.imag, "conj": lax.conj, "neg": jnp.negative, "exp": jnp.exp, "log": jnp.log,
    "sin": jnp.sin, "cos": jnp.cos, "tanh": jnp.tanh, "sinh": jnp.sinh, "cosh": jnp.cosh, "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt, "expm1": jnp.expm1, "log1p": jnp.log1p, "square": jnp.square, "reciprocal": lambda z: 1 / z,
    "pow_const": lambda z: z**2.5, "pow_int": lambda z: z**3, "logistic": lax.logistic, "asinh": jnp.arcsinh,
    "atanh": jnp.arctanh, "acosh": jnp.arccosh, "sum": lambda z: jnp.sum(z * z), "cumsum": jnp.cumsum,
    "cumprod": jnp.cumprod, "dot": lambda z: z @ z.T, "fft": jnp.fft.fft, "ifft": jnp.fft.ifft, "angle": jnp.angle,
    "where": lambda z: jnp.where(z.real > 0.5, z, 2 * z), "scaled_by_constant": lambda z: z * (1.5 - 2j),
    # beyond JAX's jet
    "tan": jnp.tan, "atan": jnp.arctan, "asin": jnp.arcsin, "acos": jnp.arccos, "abs": jnp.abs,
    "abs_squared": lambda z: jnp.abs(z) ** 2, "prod": jnp.prod, "exp2": jnp.exp2,
}
COMPLEX_BINARY: dict[str, Callable] = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "pow": jnp.power,
    "complex": lambda a, b: lax.complex(a.real, b.imag),
}


def _complex_inputs(name: str, dtype, n: int, order: int):
    r = _rng(name)
    primals = [(r.uniform(0.3, 1.2, (2, 3)) + 1j * r.uniform(-0.8, 0.8, (2, 3))).astype(dtype) for _ in range(n)]
    series = [[(r.normal(size=(2, 3)) + 1j * r.normal(size=(2, 3))).astype(dtype) for _ in range(order)]
              for _ in range(n)]
    return primals, series


@pytest.mark.parametrize("name,dtype", [  # a complex128 FFT: float64 on the device
    pytest.param(name, dtype, marks=pytest.mark.float64) if "fft" in name and dtype == np.complex128 else (name, dtype)
    for name in [*COMPLEX_UNARY, *COMPLEX_BINARY] for dtype in (np.complex64, np.complex128)])
def test_complex_matches_nested_jvp(name, dtype):
    """Complex inputs at order 3 (real/imag/conj used to crash reading a complex constant)."""
    fun = COMPLEX_UNARY.get(name) or COMPLEX_BINARY[name]
    order = 3
    tol = 1e-4 if dtype == np.complex64 else 1e-10
    with jax.enable_x64(dtype == np.complex128):
        primals, series = _complex_inputs(name, dtype, 1 if name in COMPLEX_UNARY else 2, order)
        want = taylor_by_nested_jvp(fun, primals, series, order)
        scale = max(1.0, max(float(np.max(np.abs(np.asarray(w)))) for w in want))
        _assert_close(_coefficients(fun, primals, series), want, rtol=tol, atol=tol * scale, what=name)


def test_complex_zero_series_and_closed_over_complex_constants():
    """A complex zero series and complex constants in the body (read as 'not known zero')."""
    c = np.array([1 + 2j, -0.5j, 3.0], np.complex64)
    z = np.array([0.5 + 0.5j, 1.0, -1j], np.complex64)
    f = lambda z: jnp.real(jnp.exp(z * c) * jnp.conj(c))  # noqa: E731
    zero = np.zeros_like(z)
    got = hlopt.jet(f, (z,), ((z, zero, zero),))
    want = _jax_jet(f, (z,), ((z, zero, zero),))
    _assert_close([got[0], *got[1]], [want[0], *want[1]], rtol=1e-4, atol=1e-4)


# --- order 0 and the order bound ----------------------------------------------------


def test_order_0_returns_the_primal_and_empty_series_like_jax():
    f = lambda x, y: (jnp.sin(x) * y, {"a": x + y})  # noqa: E731
    x, y = np.float32(0.3), np.arange(3, dtype=np.float32)
    got, want = hlopt.jet(f, (x, y), ((), ())), jax_jet.jet(f, (x, y), ([], []))
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    _assert_close(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), rtol=1e-6, atol=0)
    assert got[1] == ([], {"a": []})
    inside = hlopt.jit(lambda x: hlopt.jet(jnp.exp, (x,), ([],))[0])(x)
    np.testing.assert_allclose(inside, np.exp(x), rtol=1e-6)


def test_order_above_the_bound_is_refused_and_the_bound_is_reachable():
    x = np.float32(0.5)
    with pytest.raises(ValueError, match="order is 65; hlopt builds jets of order at most 64"):
        hlopt.jet(jnp.sin, (x,), ((x,) * 65,))
    # plain coefficients: in float32, k! overflows past k = 34 (in JAX's jet too)
    series = [np.float32(k) for k in range(1, 65)]
    _, out = hlopt.jet(lambda y: 3 * y + jnp.sin(x), (x,), (series,), factorial_scaled=False)
    np.testing.assert_array_equal(np.asarray(out), 3 * np.asarray(series))


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_a_constant_zero_primal_keeps_its_sign(zero):
    """A primal that is a constant zero is specialized into the jet function only as +0: at
    -0, atan2(x, -1) is -pi, and the first coefficient of atan2(x, -1) (1 + x) reads it
    (jax.jvp's values; a path x0 + t v from t = 0 would start at +0)."""
    def g(x):
        return jnp.arctan2(x, -1.0) * (1 + x) + jnp.sin(jnp.zeros_like(x) * x)

    v = np.array([1.0, 2.0, 3.0], np.float32)
    got, (first,) = hlopt.jit(lambda a: hlopt.jet(g, (jnp.full(3, zero, jnp.float32),), ((a,),)))(v)
    want, want_first = jax.jit(lambda v: jax.jvp(g, (jnp.full(3, zero, jnp.float32),), (v,)))(v)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(first), np.asarray(want_first), rtol=1e-6)
