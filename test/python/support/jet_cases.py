"""The cases the jet rule tests share (test_jet_rules.py, test_derivatives.py, test_rule_coverage.py):
every jet-expand rule's case with the domains of its inputs, and the derivative table's own cases."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from support.references import while_data_dependent

ORDER = 6
N = 5
rng = np.random.default_rng(0)  # the constants closed over by some cases

DOMAINS: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
    "real": lambda r: r.normal(size=N),
    "pos": lambda r: r.uniform(0.5, 2.0, size=N),
    "unit": lambda r: r.uniform(-0.8, 0.8, size=N),
    "pos2": lambda r: r.uniform(1.5, 3.0, size=N),
    "nonzero": lambda r: np.array([-1.5, -0.7, 0.6, 1.1, 2.0]),
    "edge": lambda r: np.array([-1.5, -0.5, 0.0, 0.5, 1.5]),  # x = 0 and x < 0
    "ties": lambda r: np.array([0.3, -1.0, 0.3, 2.0, 0.3]),
    "ties2": lambda r: np.array([0.3, 1.0, -0.4, 2.0, 0.1]),  # equal to "ties" at 0 and 4
}


def _conv(x, w):
    return lax.conv_general_dilated(x.reshape(1, 1, N), w[:3].reshape(1, 1, 3), (1,), "SAME").reshape(N)


def _switch(x):
    return lax.switch(jnp.int32(jnp.sum(x) > 0), [jnp.sin, lambda v: jnp.exp(v) * v], x)


def _cond_closure(x, y):
    return lax.cond(x[0] > 0, lambda: jnp.cos(x) * y, lambda: y / (1 + x * x))


_W1, _W2 = rng.normal(size=(N, 7)) / 2, rng.normal(size=(7, N)) / 2
_C, _W3 = rng.normal(size=(N, 4, 2)), rng.normal(size=(N, 2, 3))


def _mlp(x):
    return jnp.tanh(jnp.tanh(x @ _W1 + 0.1) @ _W2) @ _W2.T


@jax.jit
def _inner_jit(x):
    return jnp.tanh(x) * x


# name -> (function, domains of its arguments, JAX's jet has the rule)
# (REFERENCES overrides the function the references differentiate)
CASES: dict[str, tuple[Callable, tuple[str, ...], bool]] = {
    # zero family
    "sign": (jnp.sign, ("nonzero",), True),
    "floor": (jnp.floor, ("real",), True),
    "ceil": (jnp.ceil, ("real",), True),
    "round": (jnp.round, ("real",), True),
    "round_away_from_zero": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO) * x, ("real",), False),
    # linear family
    "neg": (jnp.negative, ("real",), True),
    "add": (jnp.add, ("real", "real"), True),
    "sub": (jnp.subtract, ("real", "real"), True),
    "reshape_transpose": (lambda x: jnp.outer(x, x[:3]).T.reshape(-1)[::2], ("real",), True),
    "slice_reverse": (lambda x: jnp.flip(x[1:4]), ("real",), True),
    "concatenate": (lambda x, y: jnp.concatenate([x, 2 * y, x[:2]]), ("real", "real"), True),
    "pad": (lambda x, y: lax.pad(x, y[0], [(1, 2, 1)]), ("real", "real"), True),
    "broadcast": (lambda x: jnp.broadcast_to(x[:, None], (N, 3)) * x[:3], ("real",), True),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (jnp.int32(x[0] > 0) + 1,), (3,)), ("real",), True),
    "argmax_index": (lambda x: lax.dynamic_slice(x, (jnp.argmax(x) // 2,), (3,)), ("real",), False),
    "dynamic_update_slice": (lambda x, y: lax.dynamic_update_slice(x, y[:2] * y[:2], (2,)), ("real", "real"), True),
    "gather": (lambda x: x[jnp.array([3, 0, 0, 4])], ("real",), True),
    "scatter_add": (lambda x, y: x.at[jnp.array([1, 1, 3])].add(y[:3]), ("real", "real"), True),
    "scatter_set": (lambda x, y: x.at[jnp.array([0, 2])].set(y[:2] * x[:2]), ("real", "real"), False),
    "scatter_max": (lambda x, y: x.at[jnp.array([1, 3, 1, 0, 1])].max(y), ("real", "real"), False),
    "scatter_min_ties": (lambda x, y: x.at[jnp.array([0, 2, 2])].min(y[:3]), ("ties", "ties2"), False),
    "scatter_multiply": (lambda x, y: x.at[jnp.array([1, 3, 0])].multiply(y[:3], unique_indices=True),
                         ("real", "real"), False),
    "select": (lambda x, y: jnp.where(x > 0, x * y, jnp.sin(y)), ("real", "real"), True),
    "reduce_sum": (lambda x: jnp.sum(jnp.outer(x, x), axis=0), ("real",), True),
    "cumsum": (jnp.cumsum, ("real",), True),
    "fft_real_imag": (lambda x: jnp.real(jnp.fft.fft(x)) + jnp.imag(jnp.fft.fft(x * x)), ("real",), True),
    "convert": (lambda x: jnp.real(x.astype(jnp.complex128) * x), ("real",), True),
    "complex_mul": (lambda x, y: jnp.real(lax.complex(x, y) * lax.complex(y, x * x)), ("real", "real"), True),
    # bilinear family
    "mul": (jnp.multiply, ("real", "real"), True),
    "square": (lambda x: x * x, ("real",), True),
    "integer_pow3": (lambda x: x**3, ("edge",), True),
    "integer_pow_neg2": (lambda x: x**-2, ("nonzero",), True),
    "matmul": (lambda x, y: jnp.outer(x, y) @ y, ("real", "real"), True),
    "conv": (_conv, ("real", "real"), True),
    "mlp": (_mlp, ("real",), True),
    "matmul_constant_lhs": (lambda x: _W2 @ jnp.tanh(x), ("real",), True),
    "batched_dot_general": (lambda x: jnp.einsum("bki,bij->bkj", x[:, None, None] * _C, _W3), ("real",), True),
    "div": (jnp.divide, ("real", "pos"), True),
    # ODE recurrences
    "exp": (jnp.exp, ("real",), True),
    "expm1": (jnp.expm1, ("real",), True),
    "log": (jnp.log, ("pos",), True),
    "log1p": (jnp.log1p, ("pos",), True),
    "sin": (jnp.sin, ("real",), True),
    "cos": (jnp.cos, ("real",), True),
    "sinh": (jnp.sinh, ("real",), True),
    "cosh": (jnp.cosh, ("real",), True),
    "tanh": (jnp.tanh, ("real",), True),
    "logistic": (lax.logistic, ("real",), True),
    "sigmoid": (jax.nn.sigmoid, ("real",), True),
    "sqrt": (jnp.sqrt, ("pos",), True),
    "rsqrt": (lax.rsqrt, ("pos",), True),
    "erf": (lax.erf, ("real",), True),
    "erf_inv": (lax.erf_inv, ("unit",), True),
    "atan2": (jnp.arctan2, ("real", "pos"), True),
    "tan": (jnp.tan, ("unit",), False),
    "atan": (jnp.arctan, ("real",), False),
    "asin": (jnp.arcsin, ("unit",), False),
    "acos": (jnp.arccos, ("unit",), False),
    "cbrt": (jnp.cbrt, ("pos",), False),
    "asinh": (jnp.arcsinh, ("real",), True),
    "acosh": (jnp.arccosh, ("pos2",), True),
    "atanh": (jnp.arctanh, ("unit",), True),
    "erfc": (lax.erfc, ("real",), True),
    "square_op": (jnp.square, ("real",), True),
    # composition
    "pow_const": (lambda x: jnp.power(x, 2.5), ("pos",), True),
    "pow_series": (jnp.power, ("pos", "real"), True),
    "pow_constant_base": (lambda x: jnp.power(2.5, x), ("real",), True),
    # stablehlo.power at x <= 0 with integer-valued exponents: the nested-jvp reference of
    # pow is NaN at x = 0, so the reference is the same polynomial by multiplication
    "pow_integer_exponent": (lambda x: jnp.power(x, 3.0) + jnp.power(x, 2.0), ("edge",), False),
    "pow_negative_integer": (lambda x: jnp.power(x, -3.0), ("nonzero",), False),
    "lgamma": (lax.lgamma, ("pos",), False),
    "digamma": (lax.digamma, ("pos",), False),
    # piecewise
    "abs": (jnp.abs, ("nonzero",), True),
    "remainder": (lax.rem, ("pos", "pos"), True),
    "remainder_negative": (lax.rem, ("real", "pos"), False),
    "remainder_constant_divisor": (lambda x: lax.rem(x, 0.7), ("pos",), True),
    "maximum_ties": (jnp.maximum, ("ties", "ties2"), True),
    "minimum_ties": (jnp.minimum, ("ties", "ties2"), True),
    # JAX's jet fails on relu (custom_jvp) and on scalar clamp/clip bounds
    "relu": (jax.nn.relu, ("nonzero",), False),
    "clamp_scalar_bounds": (lambda x: lax.clamp(-0.5, x, 0.8), ("real",), False),
    "clamp": (lambda x, y: lax.clamp(x - 0.5, y, x + 0.5), ("real", "real"), True),
    "clip": (lambda x: jnp.clip(x, -0.5, 0.8), ("real",), False),
    "reduce_max_ties": (jnp.max, ("ties",), True),
    "reduce_min": (lambda x: jnp.min(x * x), ("real",), True),
    # beyond JAX's jet
    "reduce_prod_with_zero": (lambda x: jnp.prod(x), ("edge",), False),
    "reduce_prod": (lambda x: jnp.prod(jnp.outer(x, x[:2]), axis=0), ("real",), False),
    "cumprod": (jnp.cumprod, ("edge",), False),
    # reduce_window max/min without ties: there JAX's jvp picks one element (max pooling)
    # or averages pairwise along its scan tree (cummax); hlopt averages all tied terms
    "cummax_cummin": (lambda x: lax.cummax(x) + lax.cummin(jnp.sin(x)), ("real",), True),
    "max_pool": (lambda x: lax.reduce_window(x * x, -jnp.inf, lax.max, (2,), (1,), "VALID") * x[:4],
                 ("real",), False),
    "sort": (lambda x: jnp.sort(x * x - x), ("real",), False),
    "argsort_gather": (lambda x: x[jnp.argsort(x)] * jnp.sort(x), ("real",), False),
    "while_data_dependent": (while_data_dependent, ("pos",), False),
    "fori_loop": (lambda x: lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * x, x), ("real",), False),
    "nested_loops": (lambda x: lax.fori_loop(0, 2, lambda i, v: lax.fori_loop(0, 2, lambda j, w: jnp.sin(w) * x, v) + v, x),
                     ("real",), False),
    "switch": (_switch, ("real",), False),
    "cond_closure": (_cond_closure, ("real", "real"), False),
    "call": (lambda x: _inner_jit(x) + _inner_jit(2 * x), ("real",), True),
}


REFERENCES: dict[str, Callable] = {
    "pow_integer_exponent": lambda x: x * x * x + x * x,
}


def case_inputs(name: str) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Primals and Taylor series of case `name`, drawn from a generator seeded by the name."""
    r = np.random.default_rng(zlib.crc32(name.encode()))
    domains = CASES[name][1]
    primals = [DOMAINS[d](r) for d in domains]
    series = [[0.5 * r.normal(size=N) for _ in range(ORDER)] for _ in domains]
    return primals, series


# ops the table gives jet-expand beyond its hand-written rules before (polygamma), and
# compositions of table entries: name -> (function, low and high end of its inputs)
TABLE_CASES = {
    "polygamma": (lambda x: lax.polygamma(2.0 * jnp.ones_like(x), x), 0.8, 2.0),
    "digamma_of_sin": (lambda x: lax.digamma(2.0 + jnp.sin(x)), -1.0, 1.0),
    "erf_inv_of_tanh": (lambda x: lax.erf_inv(0.8 * jnp.tanh(x)), -1.0, 1.0),
    "cbrt_rsqrt": (lambda x: jnp.cbrt(x) * lax.rsqrt(x), 0.5, 2.0),
}
