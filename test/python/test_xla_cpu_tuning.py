"""hlopt-default without its XLA:CPU tuning passes (`DEFAULT_TUNING`) computes the same values.

On jet, Laplacian (of an MLP, of a log-determinant and of electrons' squared norms), bi-Laplacian, reverse-mode
(gradients through them, a loop that reads rows by a traced index), BCOO (one with enough entries to be computed in
blocks) and batched-product workloads in float64, the program compiled
with every pass and the one compiled with the tuning passes left out agree to
1e-12, and each agrees with a JAX reference; each tuning pass changes the program of
at least one workload, so the comparison covers every pass. On a float32 bi-Laplacian
the tuning passes leave XLA's temporaries no larger than without them.
"""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jax.experimental import sparse as jsparse

import hlopt
import hlopt.sparse as hs
from hlopt.pde import laplacian_and_gradient
from hlopt.passes.registry import CPU_TUNING, DEFAULT_TUNING, PIPELINES, WITH_OPT_IN_TUNING

DEFAULT = PIPELINES["hlopt-default"]
UNTUNED = ",".join(p for p in DEFAULT.split(",") if p not in DEFAULT_TUNING)
STACKED = WITH_OPT_IN_TUNING  # hlopt-default with the opt-in xla-cpu-stack-dots
# hlopt-default with xla-cpu-sum-as-dot's opt-in keep options (which record YNNPACK's reduce fusion off)
KEEP = DEFAULT.replace("xla-cpu-sum-as-dot", "xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true "
                                             "reduce-max-square-terms=24}")


@pytest.fixture(autouse=True, scope="module")
def float64():
    """float64 for this module's tests only."""
    with jax.enable_x64(True):
        yield


def without(name: str) -> str:
    return ",".join(p for p in DEFAULT.split(",") if p != name)


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[..., 0]


def params_of(sizes, seed=0):
    keys = jax.random.split(jax.random.key(seed), len(sizes) - 1)
    return [(jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.linspace(-0.3, 0.4, b))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def nested_laplacian(f):
    return lambda x: jnp.trace(jax.hessian(f)(x))


def looped(a, x):
    """A loop reading x's entries by the loop index (dynamic slices), scaled by a."""
    def body(i, acc):
        return acc + jnp.tanh(a[i] * x[i] + acc * 0.3) * x[(i + 1) % x.size]
    return jax.lax.fori_loop(0, x.size, body, 0.0)


def _jet(f, order):
    def run(params, x, v):
        series = ((v,) + tuple(jnp.zeros_like(v) for _ in range(order - 1)),)
        return hlopt.jet(lambda y: f(params, y), (x,), series)[1][-1]
    return run


def _nested_directional(f, order):
    def run(params, x, v):
        g = lambda y: f(params, y)  # noqa: E731
        for _ in range(order):
            g = (lambda inner: lambda y: jax.jvp(inner, (y,), (v,))[1])(g)
        return g(x)
    return run


@functools.cache
def workloads():
    """name -> (function, arguments, JAX reference function), built once per module."""
    p = params_of([4, 12, 10, 1])
    xs = jax.random.normal(jax.random.key(1), (5, 4))
    s = jax.random.normal(jax.random.key(2), (4, 3))
    v = jax.random.normal(jax.random.key(3), (4,))
    a = jnp.linspace(0.5, 1.5, 4)
    lap = lambda q, x: hlopt.laplacian(lambda y: mlp(q, y))(x)  # noqa: E731
    ref_lap = lambda q, x: nested_laplacian(lambda y: mlp(q, y))(x)  # noqa: E731

    def weighted_ref(q, x):
        return jnp.einsum("ij,ir,jr->", jax.hessian(lambda y: mlp(q, y))(x), s, s)

    def pinn(laplacian):
        return jax.grad(lambda q: jnp.mean((jax.vmap(lambda x: laplacian(q, x))(xs) + 1.0) ** 2))

    def loop_grad(laplacian):
        return jax.grad(lambda c: jnp.sum(jax.vmap(lambda x: laplacian(lambda y: looped(c, y))(x))(xs) ** 2))

    dense = jnp.where(jax.random.uniform(jax.random.key(4), (6, 5)) < 0.4,
                      jax.random.normal(jax.random.key(5), (6, 5)), 0.0)
    m = jax.random.normal(jax.random.key(6), (5, 3))

    def sparse_ops(lib):
        def run(d, w):
            sp = lib.BCOO.fromdense(d, nse=14)
            product = lib.bcoo_dot_general(sp, w, dimension_numbers=(([1], [0]), ([], [])))
            return product, lib.bcoo_reduce_sum(sp, axes=(0,)).todense(), (sp.T @ product)
        return run

    # enough entries for xla-cpu-gather-blocks to split the product into blocks of gathered rows
    rows = jax.random.randint(jax.random.key(12), (12000, 2), 0, 3000)
    entries = jax.random.normal(jax.random.key(13), (12000,))
    columns = jax.random.normal(jax.random.key(14), (3000, 64))

    def gathered(lib):
        return lambda d, i, x: lib.BCOO((d, i), shape=(3000, 3000)) @ x

    w = jax.random.normal(jax.random.key(7), (8, 4)) / 2

    def log_det(c, x):  # a determinant wavefunction's log|det| (slogdet: LU and its triangular solves)
        z = c @ x
        return jnp.linalg.slogdet(2 * jnp.eye(z.size) + 0.2 * jnp.tanh(z[:, None] * z[None, :] + z[None, :]))[1]

    def determinant(laplacian):
        return jax.grad(lambda c: jnp.mean(jax.vmap(lambda x: laplacian(lambda y: log_det(c, y))(x))(xs) ** 2))

    def electrons(y):  # 5 electrons' positions through their squared norms (sums over x, y, z), and 14 more coordinates
        r = y[:15].reshape(5, 3)
        return jnp.sum(jnp.tanh(jnp.sum(r * r, -1) + r[:, 0])) + jnp.sin(y[15] * y[16]) + jnp.sum(jnp.cos(y[17:]))

    # enough for XLA:CPU's YNNPACK reduce fusion; 29 directions, whose sums xla-cpu-sum-as-dot makes
    # products with ones (more terms than a sum kept whole, squares included, and a prime number: no
    # runs to sum first)
    points = jax.random.normal(jax.random.key(8), (512, 29))
    products = jax.random.normal(jax.random.key(11), (2, 6, 16, 9, 9))
    xs4 = jax.random.normal(jax.random.key(15), (6, 16))

    def small_products(y):
        m = y.reshape(4, 4)
        return jnp.sum(jnp.tanh(m @ jnp.tanh(m)))

    return {
        "electron_laplacian": (jax.vmap(hlopt.laplacian(electrons)), (points,), jax.vmap(nested_laplacian(electrons))),
        "determinant_laplacian": (jax.vmap(lambda x: hlopt.laplacian(lambda y: log_det(w, y))(x)), (xs,),
                                  jax.vmap(lambda x: nested_laplacian(lambda y: log_det(w, y))(x))),
        "determinant_gradient": (determinant(hlopt.laplacian), (w,), determinant(nested_laplacian)),
        "small_determinant_laplacian": (jax.vmap(lambda x: hlopt.laplacian(lambda y: log_det(w[:4], y))(x)), (xs,),
                                        jax.vmap(lambda x: nested_laplacian(lambda y: log_det(w[:4], y))(x))),
        # products of 4x4 matrices: batched in the jet, below XLA:CPU's matmul bound (xla-cpu-small-dots)
        "small_products_laplacian": (jax.vmap(hlopt.laplacian(small_products)), (xs4,),
                                     jax.vmap(nested_laplacian(small_products))),
        "jet": (_jet(mlp, 4), (p, xs[0], v), _nested_directional(mlp, 4)),
        "laplacian": (jax.vmap(lap, in_axes=(None, 0)), (p, xs), jax.vmap(ref_lap, in_axes=(None, 0))),
        "weighted_laplacian": (jax.vmap(lambda q, x: hlopt.laplacian(lambda y: mlp(q, y), weights=s)(x),
                                        in_axes=(None, 0)), (p, xs), jax.vmap(weighted_ref, in_axes=(None, 0))),
        "bilaplacian": (jax.vmap(lambda q, x: hlopt.bilaplacian(lambda y: mlp(q, y))(x), in_axes=(None, 0)),
                        (p, xs[:2]), jax.vmap(lambda q, x: nested_laplacian(lambda y: ref_lap(q, y))(x),
                                              in_axes=(None, 0))),
        "laplacian_gradient": (pinn(lap), (p,), pinn(ref_lap)),
        "loop_gradient": (loop_grad(hlopt.laplacian), (a,), loop_grad(nested_laplacian)),
        "bcoo": (sparse_ops(hs), (dense, m), sparse_ops(jsparse)),
        "bcoo_gathered_rows": (gathered(hs), (entries, rows, columns), gathered(jsparse)),
        # A^T B per direction and point, neither operand a broadcast (the LU rules' kind of product)
        "batched_products": (lambda a: jax.lax.dot_general(a[0], a[1], (([2], [2]), ([0, 1], [0, 1]))), (products,),
                             lambda a: jnp.einsum("dpki,dpkj->dpij", a[0], a[1])),
    }


WORKLOADS = [
    "electron_laplacian", "determinant_laplacian", "determinant_gradient", "small_determinant_laplacian",
    "small_products_laplacian", "jet", "laplacian",
    "weighted_laplacian", "bilaplacian", "laplacian_gradient", "loop_gradient", "bcoo", "bcoo_gathered_rows",
    "batched_products"]


def _close(got, want, atol):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        np.testing.assert_allclose(g, w, rtol=0, atol=atol * scale)


@functools.cache
def _jitted(fun, pipeline: str):
    """hlopt.jit(fun, pipeline=pipeline), one per workload and pipeline (the hard inputs' float64
    program is the untuned one compared above)."""
    return hlopt.jit(fun, pipeline=pipeline)


@pytest.mark.parametrize("name", WORKLOADS)
def test_untuned_pipeline_gives_the_same_values(name):
    fun, args, reference = workloads()[name]
    tuned = _jitted(fun, "hlopt-default")(*args)
    untuned = _jitted(fun, UNTUNED)(*args)
    _close(tuned, untuned, 1e-12)
    _close(tuned, jax.jit(reference)(*args), 1e-9)


def test_every_tuning_pass_changes_some_workload():
    """Each XLA:CPU pass of DEFAULT_TUNING rewrites the program of at least one workload above compiled for
    CPU, and every tuning pass runs in hlopt-default after the lowerings."""
    order = DEFAULT.split(",")
    assert all(order.index(p) > order.index(lowering) for p in DEFAULT_TUNING
               for lowering in ("jet-expand", "lower-bcoo", "vjp-expand"))
    @functools.cache
    def lowered(name):  # each workload lowered and run through hlopt-default once, when a pass first needs it
        fun, args, _ = workloads()[name]
        program = hlopt.lower(fun, *args)
        return program, program.apply(DEFAULT, platform="cpu").as_text()

    def changes(p, name):
        program, full = lowered(name)
        return program.apply(without(p), platform="cpu").as_text() != full

    # a pass's search stops at the first workload it changes
    unchanged = [p for p in CPU_TUNING if not any(changes(p, name) for name in WORKLOADS)]
    assert not unchanged, f"tuning passes that change none of the workloads: {unchanged}"


def test_stack_dots_joins_rows_of_mixed_shapes():
    """The bi-Laplacian's products with its hidden 12x10 weights have rows of four shapes
    (the primal's, the directions', two kinds of collapsed coefficients'): xla-cpu-stack-dots
    makes them one dot_general, where without it there are several (the values are compared
    by test_untuned_pipeline_gives_the_same_values)."""
    fun, args, _ = workloads()["bilaplacian"]
    lowered = hlopt.lower(fun, *args)

    def weight_products(pipeline):
        return [line for line in lowered.apply(pipeline, platform="cpu").as_text().splitlines()
                if "stablehlo.dot_general" in line and ", tensor<12x10xf64>) ->" in line]

    assert len(weight_products(STACKED)) == 1
    assert len(weight_products(DEFAULT)) >= 4
    _close(hlopt.jit(fun, pipeline=STACKED)(*args), hlopt.jit(fun, pipeline=UNTUNED)(*args), 1e-12)


def _log_psi(p: dict, x: jax.Array) -> jax.Array:
    """A determinant wavefunction as bench/wavefunction.py writes it: per electron a tanh MLP whose
    second layer mixes in the mean over electrons, orbitals times an exponential envelope, slogdet."""
    r = x.reshape(-1, 3)
    norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1e-2)
    h = jnp.tanh(jnp.concatenate([r, norm, r - jnp.mean(r, 0)], -1) @ p["w1"])
    h = jnp.tanh(h @ p["w2"] + jnp.mean(h, 0) @ p["m1"]) + h
    return jnp.linalg.slogdet((h @ p["out"]) * jnp.exp(-norm * p["sigma"]))[1]


def _kinetic_energy_gradient(p: dict, xs: jax.Array) -> dict:
    """The weight gradient of the mean local kinetic energy -1/2 (Laplacian + |gradient|^2) of log psi."""
    def energy(p, x):
        laplacian, gradient = laplacian_and_gradient(lambda y: _log_psi(p, y))(x)
        return -0.5 * (laplacian + jnp.sum(gradient ** 2))
    return jax.grad(lambda p, xs: jnp.mean(jax.vmap(energy, in_axes=(None, 0))(p, xs)))(p, xs)


@pytest.mark.parametrize("pipeline", ["hlopt-default", DEFAULT], ids=["per-operation", "whole-module"])
def test_tuning_keeps_the_float32_wavefunction_gradient_as_accurate_as_untuned(pipeline):
    """The float32 weight gradient of a determinant wavefunction's kinetic energy (which cancels the
    Laplacian against the squared gradient) errs, against the same program in float64, by no more than
    twice what the untuned program's does. With xla-cpu-stack-dots (stacking the mean over electrons'
    products with the mixing weights), XLA:CPU's program erred 5.4e-3 where the untuned one erred 4.6e-5."""
    with jax.enable_x64(False):
        k = jax.random.split(jax.random.key(4), 5)
        p = {name: jax.random.normal(key, shape) / np.sqrt(shape[0]) for name, key, shape in
             zip(("w1", "m1", "w2", "out"), k, ((7, 32), (32, 32), (32, 32), (32, 4)))}
        p["sigma"] = 1.0 + 0.1 * jax.random.normal(k[4], (4,))
        xs = jax.random.normal(jax.random.key(1002), (16, 12))
        tuned = hlopt.jit(_kinetic_energy_gradient, pipeline=pipeline)(p, xs)
        untuned = hlopt.jit(_kinetic_energy_gradient, pipeline=UNTUNED)(p, xs)
    want = jax.jit(_kinetic_energy_gradient)(*jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), (p, xs)))
    flat = lambda tree: np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in jax.tree_util.tree_leaves(tree)])  # noqa: E731
    scale = np.max(np.abs(flat(want)))
    error, untuned_error = (np.max(np.abs(flat(got) - flat(want))) / scale for got in (tuned, untuned))
    assert error <= 2 * untuned_error, (error, untuned_error)


def test_tuning_keeps_the_bilaplacian_temporaries_small():
    """XLA:CPU fuses no producer into a dot_general: xla-cpu-sum-as-dot's products with ones over
    the bi-Laplacian's 5x5 nested directions held each elementwise product whole in memory (and a
    transposed copy over the inner axis), where the reduce computed it on the fly: XLA's
    temporaries of a float32 tanh MLP 5 -> 128 -> 128 -> 128 -> 1 at 8 points were 1.23x those of
    the program without the tuning passes. Those few-term sums add slices now (0.87x with the opt-in
    xla-cpu-stack-dots; without it, hlopt-default's are 1.08x: xla-cpu-sum-as-dot's remaining products)."""
    with jax.enable_x64(False):
        p = params_of([5, 128, 128, 128, 1])
        xs = jax.random.normal(jax.random.key(1), (8, 5))
        lowered = hlopt.lower(jax.vmap(lambda q, x: hlopt.bilaplacian(lambda y: mlp(q, y))(x), in_axes=(None, 0)),
                              p, xs)
        temp = {name: lowered.compile(pipeline).executable.get_compiled_memory_stats().temp_size_in_bytes
                for name, pipeline in (("tuned", STACKED), ("untuned", UNTUNED))}
        text = lowered.apply(DEFAULT, platform="cpu").as_text()
    # no product with ones over a directions axis of the 5x5x8x128 nested directions (a product with the
    # 128x128 weights keeps that shape)
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line and "tensor<5x5x8x128xf32>" in line
            and not line.endswith("-> tensor<5x5x8x128xf32>")]
    assert not dots, dots
    assert temp["tuned"] <= temp["untuned"], temp


def _normals(seed: int, shapes, dtype) -> list[np.ndarray]:
    """Standard normal numpy arrays of `shapes` in `dtype` (numpy's, so that no example compiles a
    program of its own to draw them)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@st.composite
def transposed_dots(draw):
    """A dot_general, batched or not, with its operands' dimensions in random orders (the lhs's in
    the order (batch, free, contracting) a third of the time), or a weight gradient's kind (a wide
    lhs in the order (batch, contracting, free), a narrow rhs, a long sum) a third of the time:
    (lhs shape, rhs shape, dimension numbers, m, n, k, batch sizes)."""
    nb, nlf, nrf, nc = (draw(st.integers(lo, hi)) for lo, hi in ((0, 2), (0, 2), (0, 2), (1, 2)))
    size = st.sampled_from([1, 2, 3, 4, 6, 8, 9, 12])
    batch = [draw(st.sampled_from([2, 3, 4, 6, 7])) for _ in range(nb)]
    lfree, rfree, contract = ([draw(size) for _ in range(c)] for c in (nlf, nrf, nc))
    kind = draw(st.sampled_from(["random", "in order", "gradient"]))
    if kind == "gradient":
        lfree = [draw(st.sampled_from([8, 12, 16])) for _ in range(max(nlf, 1))]
        rfree = [draw(st.sampled_from([2, 3])) for _ in range(max(nrf, 1))]
        contract = [draw(st.sampled_from([8, 12, 16])) for _ in range(nc)]
        nlf, nrf = len(lfree), len(rfree)

    def placed(kinds: list[tuple[str, int]], in_order: bool = False):
        order = range(len(kinds)) if in_order else draw(st.permutations(range(len(kinds))))
        return [kinds[i] for i in order]

    batched, free, contracting = [("b", i) for i in range(nb)], [("f", i) for i in range(nlf)], \
        [("c", i) for i in range(nc)]
    lhs = batched + contracting + free if kind == "gradient" else \
        placed(batched + free + contracting, kind == "in order")
    rhs = placed(batched + [("f", i) for i in range(nrf)] + contracting)
    sizes = {"b": batch, "c": contract}

    def shape(dims, free):
        return [free[i] if kind == "f" else sizes[kind][i] for kind, i in dims]

    def positions(dims, kind, count):
        return [dims.index((kind, i)) for i in range(count)]

    numbers = ((positions(lhs, "c", nc), positions(rhs, "c", nc)), (positions(lhs, "b", nb), positions(rhs, "b", nb)))
    return (shape(lhs, lfree), shape(rhs, rfree), numbers, math.prod(lfree), math.prod(rfree), math.prod(contract),
            batch)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=transposed_dots(), wide=st.booleans())
def test_transposed_dots_keep_the_product(case, wide):
    """xla-cpu-transposed-dots on products of random dimension orders: the values equal numpy's
    einsum of the same product (float64 and float32). With m, n > 1 and a size of 8 or more, the operands are
    swapped (the result transposed back) where the copies YNNPACK's order needs of the swapped
    operands, with that transpose, are at most half those of the operands as they are (and a
    single prime batch does not leave the swapped operands out of that order); else a
    batched product whose operands are not in that order, with a batch that is not one prime
    dimension, is rewritten (operands arranged, batch joined or split), and any other is kept."""
    lhs_shape, rhs_shape, numbers, m, n, k, batch = case
    a, b = _normals(len(lhs_shape) * 7 + m + n + k, (lhs_shape, rhs_shape), np.float64 if wide else np.float32)
    with jax.enable_x64(wide):
        fun = lambda x, y: jax.lax.dot_general(x, y, numbers)  # noqa: E731
        lowered = hlopt.lower(fun, a, b)
        text = lowered.apply("xla-cpu-transposed-dots", platform="cpu").as_text()
        got = lowered.compile("xla-cpu-transposed-dots")(a, b)
    want = _einsum_dot(a, b, numbers)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12 if wide else 2e-5,
                               atol=(1e-12 if wide else 2e-5) * max(1.0, k))
    (lc, rc), (lb, rb) = numbers
    nb = len(lb)

    def orders(shape, b, c):
        """Whether an operand is in the order of YNNPACK's lhs, and of its rhs."""
        f = [d for d in range(len(shape)) if d not in b and d not in c]
        rest = list(range(nb, len(shape)))
        return b == list(range(nb)) and rest == f + c, b == list(range(nb)) and rest in (c + f, f + c)

    (lhs_lhs, lhs_rhs), (rhs_lhs, rhs_rhs) = orders(lhs_shape, lb, lc), orders(rhs_shape, rb, rc)
    sizes = math.prod(lhs_shape), math.prod(rhs_shape)
    copies = sizes[0] * (not lhs_lhs) + sizes[1] * (not rhs_rhs)
    swapped_copies = sizes[1] * (not rhs_lhs) + sizes[0] * (not lhs_rhs) + math.prod(batch) * m * n
    sized = m > 1 and n > 1 and max(m, n, k) >= 8
    single_prime = len(batch) == 1 and all(batch[0] % p for p in range(2, batch[0]))
    # swapped where that halves the copies, unless a single prime batch leaves the swapped operands out of order
    swapped = sized and 2 * swapped_copies <= copies and not (single_prime and not (rhs_lhs and lhs_rhs))
    rewritten = nb and not (lhs_lhs and rhs_rhs) and sized and not single_prime
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 1, dots
    element = 'f64' if wide else 'f32'
    original = f"tensor<{'x'.join(map(str, lhs_shape))}x{element}>, tensor<{'x'.join(map(str, rhs_shape))}x{element}>)"
    returned = re.search(r"return (%\S+) ", text).group(1)
    last = next(line for line in text.splitlines() if line.strip().startswith(f"{returned} ="))
    event("swapped" if swapped else "rewritten" if rewritten else "kept")
    if swapped:  # the product of the swapped operands, transposed back (free dimensions joined)
        assert original not in dots[0] and "stablehlo.reshape" in last and "dims = [0, 2, 1, 3]" in text, text
    elif rewritten:  # the product reads the arranged operands (batch joined or split), and is reshaped back
        assert original not in dots[0] and "stablehlo.reshape" in last, text
    else:
        assert original in dots[0] and "stablehlo.transpose" not in text and "stablehlo.reshape" not in text, text


def test_transposed_dot_runs_as_ynnpack_matmul():
    """The product A^T B of [24, 128, 8, 8] matrices (the LU rules' kind) leaves XLA's own dot
    emitter for YNNPACK's matmul (a YNNPACK fusion in the compiled program) after the pass, and not without it."""
    with jax.enable_x64(False):
        a = jax.random.normal(jax.random.key(0), (24, 128, 8, 8))
        fun = lambda x, y: jax.lax.dot_general(x, y, (([2], [2]), ([0, 1], [0, 1])))  # noqa: E731
        lowered = hlopt.lower(fun, a, a)
        assert "__ynn_fusion" not in lowered.compile("canonicalize").as_text()
        compiled = lowered.compile("xla-cpu-transposed-dots")
        assert "__ynn_fusion" in compiled.as_text()
        np.testing.assert_allclose(np.asarray(compiled(a, a)), np.asarray(jax.jit(fun)(a, a)), rtol=1e-5, atol=1e-5)


def test_swapped_weight_gradient_copies_the_narrow_operand():
    """The weight gradient x^T g of a wide x (18x768x32) and a narrow g (18x768x6), both contracting
    their leading dimensions: XLA copies x transposed (a 32x13824 copy) where the pass keeps
    the order (swap=never); with the operands swapped it copies g (6x13824) and runs
    the 6x32 product as a YNNPACK matmul (XLA would fold a plain transpose of the result back
    into its own dot), with the values of XLA's product."""
    with jax.enable_x64(False):
        x = jax.random.normal(jax.random.key(0), (18, 768, 32))
        g = jax.random.normal(jax.random.key(1), (18, 768, 6))
        fun = lambda x, g: jax.lax.dot_general(x * x, g + 1, (([0, 1], [0, 1]), ([], [])))  # noqa: E731
        lowered = hlopt.lower(fun, x, g)
        kept = lowered.compile("xla-cpu-transposed-dots{swap=never}").as_text()
        compiled = lowered.compile("xla-cpu-transposed-dots")
        swapped = compiled.as_text()
        assert "f32[32,13824]" in kept and "f32[6,13824]" not in kept
        assert "f32[6,13824]" in swapped and "f32[32,13824]" not in swapped
        assert re.search(r"= f32\[6,32\]\{1,0\} fusion\(.*__ynn_fusion", swapped), swapped
        np.testing.assert_allclose(np.asarray(compiled(x, g)), np.asarray(jax.jit(fun)(x, g)), rtol=2e-5, atol=2e-3)


def test_small_leading_sums_stay_reduces():
    """The collapsed Laplacian of an MLP in 12 dimensions at 64 points: its sums over the 12
    directions ([12, 64, 32] operands, 192 KiB in float64) stay reduces with xla-cpu-sum-as-dot's
    opt-in keep options, which record that the module is compiled without YNNPACK's reduce fusion,
    where under hlopt-default they are products with ones and nothing is recorded; the values
    agree to 1e-12 (float64), and the gradient through them too."""
    p = params_of([12, 32, 32, 1])
    xs = jax.random.normal(jax.random.key(3), (64, 12))
    lap = jax.vmap(hlopt.laplacian(lambda y: mlp(p, y)))
    grad = jax.grad(lambda q: jnp.mean(jax.vmap(hlopt.laplacian(lambda y: mlp(q, y)))(xs) ** 2))
    for fun, args in ((lap, (xs,)), (grad, (p,))):
        lowered = hlopt.lower(fun, *args)
        kept, products = lowered.apply(KEEP, platform="cpu").as_text(), lowered.apply(DEFAULT, platform="cpu").as_text()
        leading = [line for line in kept.splitlines()
                   if "stablehlo.reduce" in line and "dimensions = [0]" in line and "tensor<12x64x32xf64>" in line]
        assert leading and "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT" in kept, kept
        assert not [line for line in products.splitlines()
                    if "stablehlo.reduce" in line and "dimensions = [0]" in line and "tensor<12x64x32xf64>" in line]
        assert "hlopt.compiler_options" not in products
        _close(lowered.compile(KEEP)(*args), lowered.compile(DEFAULT)(*args), 1e-12)


def _mlp_laplacian(dim, points, width, wide, grad):
    """(the lowered program, its reference, its arguments): the collapsed Laplacian of an MLP
    (dim -> width -> width -> 1) at `points` points, or with `grad` the gradient with respect to
    the weights of the mean squared Laplacian; the reference by nested Hessians."""
    dtype = np.float64 if wide else np.float32
    sizes = [dim, width, width, 1]
    *weights, xs = _normals(dim, [*zip(sizes[:-1], sizes[1:]), (points, dim)], dtype)
    p = [(w / np.sqrt(w.shape[0], dtype=dtype), np.linspace(-0.3, 0.4, w.shape[1], dtype=dtype)) for w in weights]
    if grad:
        fun = jax.grad(lambda q: jnp.mean(jax.vmap(hlopt.laplacian(lambda y: mlp(q, y)))(xs) ** 2))
        ref = jax.grad(lambda q: jnp.mean(jax.vmap(nested_laplacian(lambda y: mlp(q, y)))(xs) ** 2))
        args = (p,)
    else:
        fun, ref, args = (jax.vmap(hlopt.laplacian(lambda y: mlp(p, y))),
                          jax.vmap(nested_laplacian(lambda y: mlp(p, y))), (xs,))
    return hlopt.lower(fun, *args), ref, args


def _agrees(lowered, other, ref, args, wide):
    """`lowered` compiled with `KEEP` agrees with it compiled with pipeline `other` and with `ref`
    under jax.jit."""
    got = lowered.compile(KEEP)(*args)
    _close(got, lowered.compile(other)(*args), 1e-12 if wide else 2e-5)
    _close(got, jax.jit(ref)(*args), 1e-9 if wide else 2e-3)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dim=st.sampled_from([26, 28, 30, 32, 50]), points=st.sampled_from([16, 48]),
       width=st.sampled_from([16, 24]), wide=st.booleans(), grad=st.booleans())
def test_large_leading_sums_are_summed_within_runs(dim, points, width, wide, grad):
    """The collapsed Laplacian of an MLP in more than 24 dimensions (or its gradient), with
    xla-cpu-sum-as-dot's opt-in keep options: its sums over the directions (of squares, more terms than reduce-max-square-terms) are a reduce within runs of
    consecutive directions (the fewest runs of at most 16), then a product of the run sums with
    ones, where with split-large-sums=false they are products with ones of the whole summand; the values
    agree with that program and with the Hessian trace, in float64 and float32."""
    lowered, ref, args = _mlp_laplacian(dim, points, width, wide, grad)
    runs = min(m for m in range(2, dim) if dim % m == 0 and dim // m <= 16)
    elem = "f64" if wide else "f32"
    no_runs = KEEP.replace("split-large-sums=true", "split-large-sums=false")
    in_runs, products = lowered.apply(KEEP, platform="cpu").as_text(), lowered.apply(no_runs, platform="cpu").as_text()
    summand = f"(tensor<{dim}x{elem}>, tensor<{dim}x{points}x{width}x{elem}>)"  # a product with ones of it
    partial = re.compile(rf"stablehlo\.reduce\(.*dimensions = \[1\] : \(tensor<{runs}x{dim // runs}x{points}x{width}x{elem}>")
    assert partial.search(in_runs), in_runs
    assert not [line for line in in_runs.splitlines() if "stablehlo.dot_general" in line and summand in line]
    assert [line for line in products.splitlines() if "stablehlo.dot_general" in line and summand in line]
    assert not partial.search(products)
    assert "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT" in in_runs
    _agrees(lowered, no_runs, ref, args, wide)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dim=st.sampled_from([17, 18, 20, 23, 24]), points=st.sampled_from([16, 48]),
       width=st.sampled_from([16, 24]), wide=st.booleans(), grad=st.booleans())
def test_sums_of_squares_of_few_terms_stay_reduces(dim, points, width, wide, grad):
    """The collapsed Laplacian of an MLP in 17-24 dimensions (or its gradient), with
    xla-cpu-sum-as-dot's opt-in keep options: its sums over the directions of the hidden layers' squared first coefficients stay reduces of the whole
    summand (reduce-max-square-terms), where with reduce-max-square-terms=0 they are summed within
    runs or as products with ones; the values agree with that program and with the Hessian trace."""
    lowered, ref, args = _mlp_laplacian(dim, points, width, wide, grad)
    elem = "f64" if wide else "f32"
    unkept = KEEP.replace("reduce-max-square-terms=24", "reduce-max-square-terms=0")
    kept, other = lowered.apply(KEEP, platform="cpu").as_text(), lowered.apply(unkept, platform="cpu").as_text()
    square = re.compile(rf"(%\S+) = stablehlo\.multiply (%\S+), \2 : tensor<{dim}x{points}x{width}x{elem}>")
    squares = square.findall(kept)
    assert squares, kept
    for name, _ in squares:
        whole = f"stablehlo.reduce({name} init:"
        assert any(whole in line and "dimensions = [0]" in line for line in kept.splitlines()), (name, kept)
    assert square.findall(other)
    assert not any(f"stablehlo.reduce({name} init:" in other for name, _ in square.findall(other)), other
    _agrees(lowered, unkept, ref, args, wide)


def _einsum_dot(lhs, rhs, numbers, summed=None):
    """numpy's einsum of dot_general(lhs, rhs, numbers) in float64, its batch dimension `summed` summed."""
    (lc, rc), (lb, rb) = numbers
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    subs = [[None] * np.ndim(lhs), [None] * np.ndim(rhs)]
    for i, j in [*zip(lb, rb), *zip(lc, rc)]:
        subs[0][i] = subs[1][j] = next(letters)
    subs = [[s or next(letters) for s in sub] for sub in subs]
    out = [subs[0][i] for k, i in enumerate(lb) if k != summed] + \
        [s for i, s in enumerate(subs[0]) if i not in lb and i not in lc] + \
        [s for i, s in enumerate(subs[1]) if i not in rb and i not in rc]
    return np.einsum(f"{''.join(subs[0])},{''.join(subs[1])}->{''.join(out)}", np.asarray(lhs, np.float64),
                     np.asarray(rhs, np.float64))


@st.composite
def summed_batch_dots(draw):
    """A batched dot_general with its operands' dimensions in random orders and a sum over one
    of its batch dimensions: (lhs shape, rhs shape, dimension numbers, summed result dimension)."""
    nb, nlf, nrf, nc = draw(st.integers(1, 3)), draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.integers(0, 2))
    size = st.sampled_from([1, 2, 3, 5, 8])
    sizes = {"b": [draw(size) for _ in range(nb)], "c": [draw(size) for _ in range(nc)],
             "l": [draw(size) for _ in range(nlf)], "r": [draw(size) for _ in range(nrf)]}
    lhs = draw(st.permutations([("b", i) for i in range(nb)] + [("c", i) for i in range(nc)]
                               + [("l", i) for i in range(nlf)]))
    rhs = draw(st.permutations([("b", i) for i in range(nb)] + [("c", i) for i in range(nc)]
                               + [("r", i) for i in range(nrf)]))

    def positions(dims, kind, count):
        return [dims.index((kind, i)) for i in range(count)]

    numbers = ((positions(lhs, "c", nc), positions(rhs, "c", nc)), (positions(lhs, "b", nb), positions(rhs, "b", nb)))
    return ([sizes[k][i] for k, i in lhs], [sizes[k][i] for k, i in rhs], numbers, draw(st.integers(0, nb - 1)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=summed_batch_dots(), wide=st.booleans())
def test_summed_batch_dots_keep_the_sum(case, wide):
    """xla-cpu-summed-batch-dots on a sum over a random batch dimension of a dot_general of random
    dimension orders: one dot_general and no reduce remain, and the values equal numpy's einsum
    of the same product and sum (float64 and float32)."""
    lhs_shape, rhs_shape, numbers, summed = case
    a, b = _normals(len(lhs_shape) * 11 + len(rhs_shape) + summed, (lhs_shape, rhs_shape),
                    np.float64 if wide else np.float32)
    with jax.enable_x64(wide):
        fun = lambda x, y: jnp.sum(jax.lax.dot_general(x, y, numbers), axis=summed)  # noqa: E731
        lowered = hlopt.lower(fun, a, b)
        text = lowered.apply("xla-cpu-summed-batch-dots", platform="cpu").as_text()
        got = np.asarray(lowered.compile("xla-cpu-summed-batch-dots")(a, b))
    want = _einsum_dot(a, b, numbers, summed)
    tol = 1e-12 if wide else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(want), initial=0))))
    assert text.count("stablehlo.dot_general") == 1 and "stablehlo.reduce" not in text, text


def test_summed_batch_dots_contract_the_determinant_directions():
    """The float32 Laplacian of a determinant wavefunction's log|det| at 8x8 matrices (64 walkers,
    24 directions): its sum over the directions of the 24x64 products of 8x8 matrices is one
    product per walker under hlopt-default (no [24, 64, 8, 8] product remains), and XLA's
    compiled program holds no [24, 64, 8, 8] result of a matmul; the kinetic energies equal those of
    the program without the pass to float32 rounding."""
    with jax.enable_x64(False):
        w8 = jax.random.normal(jax.random.key(9), (24, 24)) / 4
        xs = jax.random.normal(jax.random.key(10), (64, 24))

        def log_det(y):
            z = w8 @ y
            m = z.reshape(8, 3)
            return jnp.linalg.slogdet(jnp.eye(8) + jnp.tanh(m @ m.T + m[:, :1]))[1]

        lowered = hlopt.lower(jax.vmap(hlopt.laplacian(log_det)), xs)
        text = lowered.apply(DEFAULT, platform="cpu").as_text()
        assert not [line for line in text.splitlines()
                    if "stablehlo.dot_general" in line and "-> tensor<24x64x8x8xf32>" in line], text
        compiled = lowered.compile(DEFAULT)
        products = [line for line in compiled.as_text().splitlines() if re.search(r"= f32\[24,64,8,8\]\S* (dot|fusion)\(", line)
                    and ("dot(" in line or "__ynn_fusion" in line)]
        assert not products, products
        np.testing.assert_allclose(np.asarray(compiled(xs)),
                                   np.asarray(lowered.compile(without("xla-cpu-summed-batch-dots"))(xs)),
                                   rtol=2e-4, atol=2e-4)
        with jax.enable_x64(True):
            want = jax.jit(jax.vmap(nested_laplacian(log_det)))(np.asarray(xs, np.float64))
        np.testing.assert_allclose(np.asarray(compiled(xs)), np.asarray(want), rtol=1e-3, atol=1e-3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=summed_batch_dots(), side=st.integers(0, 1), transposed=st.booleans(), wide=st.booleans())
def test_broadcast_batch_dots_keep_the_product(case, side, transposed, wide):
    """xla-cpu-summed-batch-dots on a dot_general of random dimension orders one of whose operands
    is a broadcast along a random batch dimension (then transposed, or not): the product has one
    batch dimension fewer, and the values equal numpy's einsum of the operands before the broadcast
    (float64 and float32)."""
    lhs_shape, rhs_shape, numbers, broadcast = case
    (lc, rc), (lb, rb) = numbers
    shapes, batch = [lhs_shape, rhs_shape], [lb, rb]
    at = batch[side][broadcast]
    small = shapes[side][:at] + shapes[side][at + 1:]
    perm = list(range(len(shapes[side])))[::-1] if transposed else list(range(len(shapes[side])))
    p, q = _normals(len(lhs_shape) * 13 + len(rhs_shape) + broadcast + side, (small, shapes[1 - side]),
                    np.float64 if wide else np.float32)
    with jax.enable_x64(wide):
        # the broadcast operand is built transposed by `perm` (its dimension numbers follow)
        inverse = list(np.argsort(perm))
        moved = [inverse[d] for d in (lc, rc)[side]], [inverse[d] for d in batch[side]]
        if side == 0:
            dims = ((moved[0], rc), (moved[1], rb))
        else:
            dims = ((lc, moved[0]), (lb, moved[1]))

        def fun(x, y):
            full = jnp.transpose(jnp.broadcast_to(jnp.expand_dims(x, at), shapes[side]), perm)
            return jax.lax.dot_general(full, y, dims) if side == 0 else jax.lax.dot_general(y, full, dims)

        lowered = hlopt.lower(fun, p, q)
        text = lowered.apply("xla-cpu-summed-batch-dots", platform="cpu").as_text()
        got = np.asarray(lowered.compile("xla-cpu-summed-batch-dots")(p, q))
    full = np.transpose(np.broadcast_to(np.expand_dims(np.asarray(p), at), shapes[side]), perm)
    want = _einsum_dot(full, q, dims) if side == 0 else _einsum_dot(q, full, dims)
    tol = 1e-12 if wide else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(want), initial=0))))
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 1, text
    kept = re.search(r"batching_dims = \[([\d, ]*)\]", dots[0])
    assert (len(kept.group(1).split(",")) if kept else 0) == len(lb) - 1, dots


def _hard_workloads():
    """name -> (function, float64 arguments): the workloads above on inputs that are hard for
    float32 (name -> why): determinants of near-singular matrices (condition numbers near 1e4),
    whose LU solves amplify rounding, and sums whose terms cancel (points far from the origin,
    where the Laplacian is a small difference of large terms)."""
    easy = workloads()
    w = jax.random.normal(jax.random.key(7), (8, 4)) / 2
    xs = jax.random.normal(jax.random.key(1), (5, 4))

    def near_singular(c, x):  # a rank-one matrix plus 1e-3 I and a small antisymmetric part
        z = jnp.tanh(c @ x)
        return jnp.linalg.slogdet(1e-3 * jnp.eye(z.size) + z[:, None] * z[None, :]
                                  + 1e-2 * (z[:, None] - z[None, :]))[1]

    def gradient(c):
        return jnp.mean(jax.vmap(lambda x: hlopt.laplacian(lambda y: near_singular(c, y))(x))(xs) ** 2)

    hard = {
        "near_singular_laplacian": (jax.vmap(lambda x: hlopt.laplacian(lambda y: near_singular(w, y))(x)), (xs,)),
        "near_singular_gradient": (jax.grad(gradient), (w,)),
    }
    for name in ("electron_laplacian", "small_determinant_laplacian", "batched_products"):
        fun, args, _ = easy[name]
        hard[name] = (fun, args)
    far = easy["laplacian"]
    hard["cancelling_laplacian"] = (far[0], (far[1][0], far[1][1] + 40.0))  # tanh's terms cancel far out
    return hard


@pytest.mark.parametrize("name", ["near_singular_laplacian", "near_singular_gradient", "electron_laplacian",
                                  "small_determinant_laplacian", "batched_products", "cancelling_laplacian"])
def test_tuning_costs_no_accuracy_on_hard_inputs(name):
    """In float32, on ill-conditioned and cancelling inputs, the tuned program's error (against the
    untuned program in float64) is within the untuned float32 program's own rounding error (twice
    it, or a few float32 ulps of the result's scale where that error is near zero)."""
    fun, args = _hard_workloads()[name]
    as32 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating)
                                  else a, args)
    exact = jax.tree_util.tree_leaves(_jitted(fun, UNTUNED)(*args))
    tuned = jax.tree_util.tree_leaves(_jitted(fun, "hlopt-default")(*as32))
    untuned = jax.tree_util.tree_leaves(_jitted(fun, UNTUNED)(*as32))
    for t, u, e in zip(tuned, untuned, exact, strict=True):
        e = np.asarray(e, np.float64)
        scale = float(np.max(np.abs(e))) if e.size else 1.0
        own = float(np.max(np.abs(np.asarray(u, np.float64) - e))) if e.size else 0.0
        err = float(np.max(np.abs(np.asarray(t, np.float64) - e))) if e.size else 0.0
        assert err <= 2 * own + 8 * np.finfo(np.float32).eps * scale, (name, err, own, scale)
