"""The cases the vjp rule tests share (test_vjp_rules.py, test_rule_coverage.py): elementwise cases
run at several shapes, fixed-shape structural ones, the functions jax.vjp differentiates where it
cannot differentiate a case, and how a group of cases becomes one function."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from support.references import while_data_dependent


def _domain(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Inputs of one argument: a domain name, and `:AxB` for a fixed shape."""
    name, _, fixed = name.partition(":")
    if fixed:
        shape = tuple(int(s) for s in fixed.split("x"))
    n = math.prod(shape)
    values = {
        "real": lambda: rng.normal(size=n),
        "pos": lambda: rng.uniform(0.5, 2.0, size=n),
        "unit": lambda: rng.uniform(-0.8, 0.8, size=n),
        "pos2": lambda: rng.uniform(1.5, 3.0, size=n),
        "nonzero": lambda: rng.choice([-1.5, -0.7, 0.6, 1.1, 2.0], size=n),
        "edge": lambda: np.resize([-1.5, 0.0, 0.5, -0.5, 1.5, 0.0], n),  # zeros and x < 0
        "ties": lambda: np.resize([0.3, -1.0, 0.3, 2.0, 0.3, 2.0], n),
        "ties2": lambda: np.resize([0.3, 1.0, -0.4, 2.0, 0.1, 1.0], n),  # equal to "ties" at 0, 3
        "int": lambda: rng.integers(-3, 4, size=n),
        "count": lambda: rng.integers(2, 5, size=n),
    }[name]()
    return values.reshape(shape)


# Elementwise cases run at several shapes: name -> (function, domains of its arguments).
ELEMENTWISE: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "add": (jnp.add, ("real", "real")),
    "sub": (jnp.subtract, ("real", "real")),
    "mul": (jnp.multiply, ("real", "real")),
    "mul_same_operand": (lambda x: x * x, ("real",)),
    "div": (jnp.divide, ("real", "pos")),
    "neg": (jnp.negative, ("real",)),
    "exp": (jnp.exp, ("real",)),
    "expm1": (jnp.expm1, ("real",)),
    "log": (jnp.log, ("pos",)),
    "log1p": (jnp.log1p, ("pos",)),
    "sqrt": (jnp.sqrt, ("pos",)),
    "rsqrt": (lax.rsqrt, ("pos",)),
    "cbrt": (jnp.cbrt, ("pos",)),
    "pow": (jnp.power, ("pos", "real")),
    "pow_constant_exponent": (lambda x: jnp.power(x, 2.5), ("pos",)),
    "pow_constant_base": (lambda x: jnp.power(2.5, x), ("real",)),
    "pow_zero_exponent": (lambda x, y: jnp.power(x, y * 0.0), ("pos", "real")),
    "integer_pow": (lambda x: x**3 + x**-2, ("nonzero",)),
    "sin": (jnp.sin, ("real",)),
    "cos": (jnp.cos, ("real",)),
    "tan": (jnp.tan, ("unit",)),
    "tanh": (jnp.tanh, ("real",)),
    "sigmoid": (jax.nn.sigmoid, ("real",)),
    "sinh": (jnp.sinh, ("real",)),
    "cosh": (jnp.cosh, ("real",)),
    "asin": (jnp.arcsin, ("unit",)),
    "acos": (jnp.arccos, ("unit",)),
    "atan": (jnp.arctan, ("real",)),
    "asinh": (jnp.arcsinh, ("real",)),
    "acosh": (jnp.arccosh, ("pos2",)),
    "atanh": (jnp.arctanh, ("unit",)),
    "erf": (lax.erf, ("real",)),
    "erfc": (lax.erfc, ("real",)),
    "erf_inv": (lax.erf_inv, ("unit",)),
    "lgamma": (lax.lgamma, ("pos",)),
    "digamma": (lax.digamma, ("pos",)),
    "polygamma": (lambda x: lax.polygamma(jnp.full_like(x, 2.0), x), ("pos",)),
    "square": (jnp.square, ("real",)),
    "atan2": (jnp.arctan2, ("real", "pos")),
    "remainder": (lax.rem, ("real", "pos")),
    "abs": (jnp.abs, ("edge",)),
    "zero_family": (lambda x: jnp.sign(x) * x + jnp.floor(x) + jnp.ceil(x) + jnp.round(x)
                    + lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO) * x, ("nonzero",)),
    "maximum_ties": (jnp.maximum, ("ties", "ties2")),
    "minimum_ties": (jnp.minimum, ("ties", "ties2")),
    "clamp_constant_bounds": (lambda x: lax.clamp(-0.5, x, 0.8), ("real",)),
    "clamp_arrays": (lambda lo, x: lax.clamp(lo - 0.5, x, lo + 0.5), ("real", "real")),
    "clamp_ties": (lambda lo, x: lax.clamp(lo, x, lo + 1.0), ("ties", "ties2")),
    "select": (lambda x, y: jnp.where(x > 0, x * y, jnp.sin(y)), ("real", "real")),
    "compare": (lambda x, y: (x > y) * x + (x <= y) * y * y, ("real", "real")),
    "convert_narrow": (lambda x: (x.astype(jnp.float16) * 3).astype(x.dtype) * x, ("real",)),
    "convert_complex": (lambda x: jnp.real(x.astype(jnp.complex64 if x.dtype == jnp.float32 else jnp.complex128)
                                           * x), ("real",)),
    "complex_real_imag": (lambda x, y: jnp.real(lax.complex(x, y) * lax.complex(y, x * x))
                          + jnp.imag(lax.complex(x, y) ** 2), ("real", "real")),
    "complex_abs": (lambda x, y: jnp.abs(lax.complex(x, y)), ("edge", "ties")),
    "conj": (lambda x, y: jnp.imag(jnp.conj(lax.complex(x, y)) * lax.complex(y, x)), ("real", "real")),
    "complex_exp": (lambda x, y: jnp.exp(lax.complex(x, y)), ("real", "real")),
    "relu": (jax.nn.relu, ("nonzero",)),
}

ELEMENTWISE_SHAPES = [(5,), (2, 3), ()]

_W1 = np.random.default_rng(1).normal(size=(5, 7)) / 2


@jax.jit
def _inner_jit(x):
    return jnp.tanh(x) * x


@jax.jit
def _inner_loop(x, w):  # a callee with a loop inside: it gets a vjp function of its own
    return lax.fori_loop(0, 2, lambda i, v: jnp.sin(v * w), x)


def _scanned_layers(x, ws, bs):
    """An MLP whose layers are one scan over stacked weights."""
    return lax.scan(lambda h, wb: (jnp.tanh(h @ wb[0] + wb[1]), None), x, (ws, bs))[0]


def _mlp(x, w1, b1, w2):
    return jnp.tanh(jnp.tanh(x @ w1 + b1) @ w2)



def _unrolled_while(x: np.ndarray) -> Callable:
    """`while_data_dependent` unrolled at the trip count it takes from `x`, for jax.vjp
    (which refuses the while loop)."""
    n, probe = 0, np.asarray(x)
    while probe.sum() < 20.0:
        probe, n = probe * 1.3 + 0.1 * np.sin(probe), n + 1

    def f(x):
        for _ in range(n):
            x = x * 1.3 + 0.1 * jnp.sin(x)
        return x

    return f


def _scan(x, y):
    def step(c, a):
        c2 = c * a[0] + jnp.sin(a[1])
        return c2, c2 * a[1]
    return lax.scan(step, x[0], (x, y))


def _fori_dynamic(x, n):
    return lax.fori_loop(0, n[0], lambda i, v: jnp.sin(v) * x + i, x)


def _unrolled_fori(x: np.ndarray, n: np.ndarray) -> Callable:
    """`_fori_dynamic` unrolled at its (concrete) trip count."""
    def f(x, _):
        v = x
        for i in range(int(n[0])):
            v = jnp.sin(v) * x + i
        return v

    return f


# Fixed-shape cases: name -> (function, domains ("name:AxB" for a shape, default (5,))).
STRUCTURAL: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "broadcast": (lambda x: jnp.broadcast_to(x[:, None], (5, 3)) * x[:3], ("real",)),
    "broadcast_size_one": (lambda m: lax.broadcast_in_dim(m, (4, 3, 2), (1, 2)) * 2.0, ("real:3x1",)),
    "broadcast_permuted": (lambda m: lax.broadcast_in_dim(m, (3, 2, 5), (2, 0)), ("real:5x3",)),
    "reshape_transpose": (lambda x: jnp.outer(x, x[:3]).T.reshape(-1)[::2], ("real",)),
    "transpose_3d": (lambda a: jnp.transpose(a, (2, 0, 1)) * a.sum(), ("real:2x3x4",)),
    "slice_strided": (lambda a: a[1:, ::2] * 2.0, ("real:4x5",)),
    "reverse": (lambda a: jnp.flip(a, (0, 1)) * a, ("real:4x5",)),
    "pad_interior": (lambda x, y: lax.pad(x, y[0], [(1, 2, 1)]), ("real", "real")),
    "pad_negative": (lambda a, y: lax.pad(a, y[0], [(-1, 2, 2), (1, -2, 0)]), ("real:4x5", "real")),
    "concatenate": (lambda x, y: jnp.concatenate([x, 2 * y, x[:2]]), ("real", "real")),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (jnp.int32(x[0] > 0) + 1,), (3,)), ("real",)),
    "dynamic_slice_clamped": (lambda a, i: lax.dynamic_slice(a, (i[0] + 7, i[1] - 9), (2, 3)), ("real:4x5", "int:2")),
    "dynamic_update_slice": (lambda x, y: lax.dynamic_update_slice(x, y[:2] * y[:2], (2,)), ("real", "real")),
    "dynamic_update_slice_clamped": (lambda a, b, i: lax.dynamic_update_slice(a, b * b, (i[0] + 9, i[1])),
                                     ("real:4x5", "real:2x3", "int:2")),
    "gather": (lambda x: x[jnp.array([3, 0, 0, 4])], ("real",)),
    "gather_rows": (lambda a: a[jnp.array([[0, 3], [3, 1]])] * 2.0, ("real:4x5",)),
    "gather_clip": (lambda x: jnp.take(x, jnp.array([7, -9, 2]), mode="clip"), ("real",)),
    "gather_fill": (lambda x: x.at[jnp.array([7, 1, -1])].get(mode="fill", fill_value=0.0), ("real",)),
    "gather_batched": (lambda a: jax.vmap(lambda r, i: r[i])(a, jnp.array([4, 0, 2, 2])), ("real:4x5",)),
    "gather_columns": (lambda a: a[:, jnp.array([4, 0, 0])] * 2.0, ("real:4x5",)),
    "take_along_axis": (lambda a: jnp.take_along_axis(a, jnp.array([[0], [4], [2], [2]]), axis=1), ("real:4x5",)),
    "scatter_add": (lambda x, y: x.at[jnp.array([1, 1, 3])].add(y[:3]), ("real", "real")),
    "scatter_add_out_of_bounds": (lambda x, y: x.at[jnp.array([1, 9, -7])].add(y[:3] * y[:3]), ("real", "real")),
    "scatter_add_rows": (lambda a, b: a.at[jnp.array([2, 0, 2])].add(b), ("real:4x5", "real:3x5")),
    "scatter_add_batched": (lambda a, b: jax.vmap(lambda r, u: r.at[jnp.array([1, 1])].add(u))(a, b),
                            ("real:4x5", "real:4x2")),
    "scatter_set": (lambda x, y: x.at[jnp.array([0, 2, 2])].set(y[:3] * x[:3]), ("real", "real")),
    "scatter_set_out_of_bounds": (lambda x, y: x.at[jnp.array([4, 8])].set(y[:2]), ("real", "real")),
    "scatter_max": (lambda x, y: x.at[jnp.array([1, 3, 1, 0, 1])].max(y), ("real", "real")),
    "scatter_min_out_of_bounds": (lambda x, y: x.at[jnp.array([2, 9, 2])].min(y[:3] * y[:3]), ("real", "real")),
    "scatter_multiply": (lambda x, y: x.at[jnp.array([1, 3, 0])].multiply(y[:3], unique_indices=True),
                         ("real", "real")),
    "scatter_max_ties": (lambda x, y: x.at[jnp.array([0, 2, 0])].max(y[:3]), ("ties", "ties2")),
    "scatter_multiply_operand": (lambda x, y: (x * y).at[jnp.array([1, 1, 0])].multiply(jnp.array([2.0, -1.5, 0.5])),
                                 ("real", "real")),
    "iota_constant": (lambda x: x * jnp.arange(5.0, dtype=x.dtype) + 2.0, ("real",)),
    "sort": (lambda x: jnp.sort(x * x - x), ("real",)),
    "sort_2d_axis0": (lambda a: jnp.sort(a, axis=0) * a, ("real:4x5",)),
    "sort_key_value": (lambda k, v: lax.sort((k, v * k), num_keys=1), ("real", "real")),
    "argsort_gather": (lambda x: x[jnp.argsort(x)] * jnp.sort(x), ("real",)),
    "sort_by_integer_keys": (lambda k, x: lax.sort((k, x * x), num_keys=1)[1], ("int", "real")),
    "sort_two_keys": (lambda a, b: lax.sort((jnp.round(a), b, a * b), num_keys=2), ("real", "real")),
    "top_k": (lambda a: lax.top_k(a * a, 2)[0], ("real:3x5",)),
    "matmul": (lambda x, y: jnp.outer(x, y) @ y, ("real", "real")),
    "complex_matmul": (lambda a, b: jnp.abs(lax.complex(a, b) @ lax.complex(b, a).T) ** 2, ("real:3x4", "real:3x4")),
    "dot_batched": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), ("real:2x3x4", "real:2x4x5")),
    "dot_two_contracting": (lambda a, b: jnp.einsum("ijk,jkl->il", a, b), ("real:2x3x4", "real:3x4x5")),
    "dot_contract_first": (lambda a, b: jnp.einsum("ji,jk->ik", a, b), ("real:4x5", "real:4x3")),
    "dot_batch_in_middle": (lambda a, b: jnp.einsum("ibj,jbk->bki", a, b), ("real:3x2x4", "real:4x2x5")),
    "dot_general_permuted_contract": (lambda a, b: lax.dot_general(a, b, (((1, 2), (2, 0)), ((), ()))),
                                      ("real:2x3x4", "real:4x5x3")),
    "dot_general_permuted_batch": (lambda a, b: lax.dot_general(a, b, (((2,), (0,)), ((1, 0), (2, 1)))),
                                   ("real:2x3x4", "real:4x2x3")),
    "dot_preferred_element_type": (lambda a, b: lax.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                                                        preferred_element_type=a.dtype), ("real:3x4", "real:4x2")),
    "mlp": (_mlp, ("real:3x5", "real:5x7", "real:7", "real:7x2")),
    "mlp_constant_weights": (lambda x: jnp.tanh(x @ _W1.astype(x.dtype)), ("real:3x5",)),
    "reduce_sum": (lambda a: jnp.sum(a * a, axis=0), ("real:4x5",)),
    "reduce_all": (lambda a: jnp.sum(jnp.sin(a)), ("real:4x5",)),
    "reduce_max_ties": (lambda a: jnp.max(a, axis=1), ("ties:3x6",)),
    "reduce_min": (lambda a: jnp.min(a * a, axis=(0, 2)), ("real:2x3x4",)),
    "reduce_prod": (lambda a: jnp.prod(a, axis=1), ("real:3x4",)),
    "reduce_prod_zeros": (lambda a: jnp.prod(a, axis=1), ("edge:4x3",)),
    "reduce_prod_all": (lambda a: jnp.prod(a), ("pos:2x3",)),
    "reduce_add_init": (lambda x, y: lax.reduce(x * x, y[0], lax.add, (0,)), ("real", "real")),
    "reduce_max_init": (lambda x, y: lax.reduce(x, y[0] * 2, lax.max, (0,)), ("real", "real")),
    "reduce_prod_init": (lambda x, y: lax.reduce(x, y[0], lax.mul, (0,)), ("edge", "real")),
    "cumsum": (jnp.cumsum, ("real",)),
    "cumsum_reverse": (lambda a: lax.cumsum(a, axis=1, reverse=True), ("real:3x4",)),
    "avg_pool": (lambda a: lax.reduce_window(a, 0.0, lax.add, (2, 2), (2, 1), "SAME"), ("real:4x5",)),
    "window_dilation": (lambda x: lax.reduce_window(x, 0.0, lax.add, (2,), (1,), "VALID", window_dilation=(2,)),
                        ("real",)),
    "base_dilation": (lambda x: lax.reduce_window(x, 0.0, lax.add, (2,), (1,), [(0, 0)], base_dilation=(2,)),
                      ("real",)),
    "max_pool": (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID"), ("real:4x5",)),
    "max_pool_strided_padded": (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 3), (2, 2), "SAME"),
                                ("real:4x5",)),
    "min_pool": (lambda a: lax.reduce_window(a, jnp.inf, lax.min, (3,), (1,), "VALID"), ("real",)),
    "cummax": (lax.cummax, ("real",)),
    "cumprod": (jnp.cumprod, ("real",)),
    "cumprod_zeros": (lambda a: jnp.cumprod(a, axis=1), ("edge:2x6",)),
    "fori_loop": (lambda x: lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * x, x), ("real",)),
    "loop_state_from_constant": (lambda x: lax.fori_loop(0, 3, lambda i, v: v * x + jnp.cos(v), jnp.zeros_like(x)),
                                 ("real",)),
    "fori_loop_zero_trips": (lambda x: lax.fori_loop(0, 0, lambda i, v: jnp.sin(v) * x, x) * x, ("real",)),
    "fori_dynamic_bound": (_fori_dynamic, ("real", "count:1")),
    "scan": (_scan, ("real", "real")),
    "scan_reverse": (lambda x: lax.scan(lambda c, a: (c * jnp.cos(a), c), 1.0 + x[0], x, reverse=True), ("real",)),
    "nested_loops": (lambda x: lax.fori_loop(
        0, 2, lambda i, v: lax.fori_loop(0, 3, lambda j, w: jnp.sin(w) * x, v) + v, x), ("real",)),
    "while_data_dependent": (while_data_dependent, ("pos",)),
    "switch": (lambda x, y: lax.switch(jnp.int32(jnp.sum(x) > 0), [lambda: jnp.sin(x) * y, lambda: jnp.exp(y)]),
               ("real", "real")),
    "cond": (lambda x, y: lax.cond(x[0] > 0, lambda: jnp.cos(x) * y, lambda: y / (1 + x * x)), ("real", "real")),
    "cond_in_loop": (lambda x: lax.fori_loop(0, 3, lambda i, v: lax.cond(i % 2 == 0, jnp.sin, lambda w: w * x, v), x),
                     ("real",)),
    "loop_in_cond": (lambda x: lax.cond(x[0] > -5, lambda v: lax.fori_loop(0, 2, lambda i, w: jnp.tanh(w) * v, v),
                                        jnp.cos, x), ("real",)),
    "call": (lambda x: _inner_jit(x) + _inner_jit(2 * x), ("real",)),
    "scanned_layers": (_scanned_layers, ("real:2x4", "real:3x4x4", "real:3x4")),
    "loop_calling_loop": (lambda x, w: lax.fori_loop(0, 3, lambda i, v: _inner_loop(v, w) + v, x), ("real", "real")),
    "call_in_loop": (lambda x: lax.fori_loop(0, 2, lambda i, v: _inner_jit(v) * x, x), ("real",)),
    "optimization_barrier": (lambda x, y: lax.optimization_barrier((x * y, y))[0] * y, ("real", "real")),
    "checkpoint": (jax.checkpoint(lambda x: jnp.sin(jnp.sin(x)) * x), ("real",)),
    "integer_input": (lambda x, n: x * n.astype(x.dtype) + n.sum(), ("real", "int")),
    "convert_through_int": (lambda x: x.astype(jnp.int32).astype(x.dtype) * x + x, ("real",)),
    "empty_elementwise": (lambda x: jnp.sin(x) * x, ("real:0",)),
    "empty_reductions": (lambda a: (jnp.sum(a, axis=0), jnp.prod(a, axis=0), jnp.cumsum(a, axis=0)), ("real:0x3",)),
    "reduce_precision": (lambda x: lax.reduce_precision(x * x, 5, 10), ("real",)),
    "several_outputs": (lambda x, y: (jnp.sin(x), x * y, jnp.sum(y)), ("real", "real")),
    "unused_input": (lambda x, y: jnp.sin(x), ("real", "real")),
    "output_is_input": (lambda x, y: (x, y * x), ("real", "real")),
}

# Where jax.vjp cannot differentiate the function, the same computation for it, built
# from the case's inputs.
REFERENCES: dict[str, Callable[..., Callable]] = {
    "broadcast_permuted": lambda m: lambda m: jnp.broadcast_to(m.T[:, None, :], (3, 2, 5)),
    "while_data_dependent": _unrolled_while,
    "fori_dynamic_bound": _unrolled_fori,
    "reduce_add_init": lambda x, y: lambda x, y: y[0] + jnp.sum(x * x),
    "reduce_max_init": lambda x, y: lambda x, y: jnp.maximum(y[0] * 2, jnp.max(x)),
    "reduce_prod_init": lambda x, y: lambda x, y: y[0] * jnp.prod(x),
}

# group name -> (its cases, the shape of their arguments; a fixed-shape case's domains give its own)
GROUPS = {**{f"elementwise{s}": (ELEMENTWISE, s) for s in ELEMENTWISE_SHAPES}, "structural": (STRUCTURAL, (5,))}


def case_inputs(cases, name: str, shape, dtype: str) -> list[np.ndarray]:
    """The arguments of case `name` of `cases` at `shape` and `dtype`, drawn from a generator seeded by all three."""
    rng = np.random.default_rng(zlib.crc32(f"{name}{shape}{dtype}".encode()))
    args = []
    for d in cases[name][1]:
        v = _domain(d, shape, rng)
        args.append(v.astype(np.int32) if d.startswith(("int", "count")) else v.astype(dtype))
    return args


def batched(funs: list[Callable], arity: list[int]) -> Callable:
    """One function of the arguments of all `funs` in a row (`arity[i]` of them for `funs[i]`), returning
    their outputs as a tuple."""
    def f(*args):
        outs, pos = [], 0
        for fun, a in zip(funs, arity):
            outs.append(fun(*args[pos: pos + a]))
            pos += a
        return tuple(outs)

    return f
