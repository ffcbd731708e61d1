"""hlopt.laplacian / hlopt.bilaplacian (collapsed Taylor mode) against nested jax.hessian in float64.

The references are JAX's own nested reverse/forward derivatives: jnp.trace of
jax.hessian for the Laplacian, tr(S S^T H) for the weighted one, and the trace of
the Hessian of the traced Laplacian for the bi-Laplacian. Relative error < 1e-10.
Each reference runs under jax.jit: one XLA program, not an op-by-op dispatch of every
primitive of a nested derivative.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hlopt
from hlopt import jet
from hlopt.passes.registry import WITH_OPT_IN_TUNING

from support.pde_references import (  # noqa: F401 - float64: the module-scoped x64 fixture
    close, float64, mlp, mlp_params, nested_bilaplacian, nested_laplacian, nested_weighted)
from support.references import assert_unbiased

with jax.enable_x64(True):  # module constants in float64, like the tests that use them
    PARAMS = mlp_params(jax.random.key(0), [4, 16, 16, 1])


def tanh_mlp(x):
    return mlp(PARAMS, x)


def with_while(x):
    return jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * 0.9 + 0.1 * x, x).sum() * jnp.cos(x[0])


def with_cond(x):
    return jax.lax.cond(x.sum() > 0, lambda v: jnp.exp(v).sum() * v[0], lambda v: jnp.sin(v).sum() ** 2, x)


def with_case(x):
    return jax.lax.switch(1, [jnp.sin, lambda v: jnp.tanh(v) ** 3, jnp.cos], x).sum()


def with_sort(x):
    return (jnp.sort(jnp.sin(x) * x) * jnp.arange(1.0, x.size + 1)).sum()


def with_max(x):
    return (jnp.maximum(jnp.sin(x), jnp.cos(x)) ** 2).sum() + jnp.max(x * x)


def vector_out(x):
    return jnp.stack([jnp.sin(x).sum(), (x ** 3).sum() * x[1], jnp.tanh(x @ jnp.ones((x.size, 2))).sum()])


def matrix_in(x):
    return jnp.tanh(x @ x.T).sum() + jnp.exp(x).mean()


FUNCTIONS = {f.__name__: f for f in (tanh_mlp, with_while, with_cond, with_case, with_sort, with_max, vector_out)}
X = np.array([0.3, -0.7, 0.45, 1.1])  # float64


@pytest.mark.parametrize("name", FUNCTIONS)
def test_laplacian_exact(name):
    f = FUNCTIONS[name]
    close(hlopt.laplacian(f)(X), nested_laplacian(f)(X))


@pytest.mark.parametrize("name", ["tanh_mlp", "with_while", "with_case", "with_sort", "with_max"])
def test_bilaplacian_exact(name):
    f = FUNCTIONS[name]
    close(hlopt.bilaplacian(f)(X), nested_bilaplacian(f)(X))


@pytest.mark.parametrize("d", [1, 2, 4, 6])
def test_bilaplacian_dimensions(d):
    """The nested collapsed 2-jets for D = 1 (one direction) to D = 6."""
    f = lambda x: jnp.tanh(x @ jnp.linspace(0.2, 1.0, d)) * jnp.exp(x).sum()  # noqa: E731
    x = jnp.linspace(-0.4, 0.5, d)
    close(hlopt.bilaplacian(f)(x), nested_bilaplacian(f)(x))


def test_laplacian_matrix_argument_and_pytree_args():
    x = jnp.arange(6.0).reshape(3, 2) / 7

    def f(scale, x, extra):
        return matrix_in(x) * scale + extra["b"] @ x[:, 0]

    args = (1.5, x, {"b": jnp.array([0.1, 0.2, 0.3])})
    want = nested_laplacian(lambda x: f(args[0], x, args[2]))(x)
    close(hlopt.laplacian(f, argnums=1)(*args), want)
    close(hlopt.laplacian(f, argnums=-2)(*args), want)


@pytest.mark.parametrize("r", [1, 2, 5])
def test_laplacian_weighted(r):
    S = jax.random.normal(jax.random.key(r), X.shape + (r,))
    close(hlopt.laplacian(tanh_mlp, weights=S)(X), nested_weighted(tanh_mlp, S)(X))
    close(hlopt.laplacian(vector_out, weights=S)(X), nested_weighted(vector_out, S)(X))


def test_laplacian_jit_and_vmap_over_points():
    xs = jax.random.normal(jax.random.key(3), (5, 4))
    want = jax.vmap(nested_laplacian(tanh_mlp))(xs)
    lap = hlopt.laplacian(tanh_mlp)
    close(jax.vmap(lap)(xs), want)
    close(hlopt.jit(jax.vmap(lap))(xs), want)
    close(hlopt.jit(lap)(xs[0]), want[0])
    bil = hlopt.bilaplacian(tanh_mlp)
    close(hlopt.jit(jax.vmap(bil))(xs[:2]), jax.vmap(nested_bilaplacian(tanh_mlp))(xs[:2]))


def test_laplacian_vmap_over_other_args():
    """Parameters batched (an ensemble), the point shared."""
    params = [mlp_params(jax.random.key(i), [4, 8, 1]) for i in range(3)]
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *params)
    got = jax.vmap(hlopt.laplacian(mlp, argnums=1), in_axes=(0, None))(stacked, X)
    want = jnp.stack([nested_laplacian(functools.partial(mlp, p))(X) for p in params])
    close(got, want)


def test_float32():
    x32 = X.astype(jnp.float32)
    got = hlopt.laplacian(lambda x: jnp.sin(x).sum() * jnp.tanh(x[0]))(x32)
    assert got.dtype == jnp.float32
    want = nested_laplacian(lambda x: jnp.sin(x).sum() * jnp.tanh(x[0]))(X)
    np.testing.assert_allclose(got, want, rtol=1e-5)


# --- randomized estimators --------------------------------------------------------


@pytest.mark.parametrize("distribution", ["normal", "rademacher"])
def test_randomized_laplacian_is_unbiased(distribution):
    """Mean over 400 keys of an R = 4 estimate: within 5 standard errors of the exact value
    (the standard error measured from the same samples)."""
    lap = hlopt.laplacian(tanh_mlp, num_samples=4, distribution=distribution)
    keys = jax.random.split(jax.random.key(7), 400)
    samples = np.asarray(hlopt.jit(jax.vmap(lambda k: lap(X, key=k)))(keys))
    exact = float(nested_laplacian(tanh_mlp)(X))
    assert_unbiased(samples, exact)
    assert samples.std() > 0  # really random


@pytest.mark.parametrize("distribution", ["normal", "rademacher"])
def test_randomized_bilaplacian_is_unbiased(distribution):
    f = FUNCTIONS["with_case"]
    bil = hlopt.bilaplacian(f, num_samples=3, distribution=distribution)
    keys = jax.random.split(jax.random.key(11), 400)
    samples = np.asarray(hlopt.jit(jax.vmap(lambda k: bil(X, key=k)))(keys))
    exact = float(nested_bilaplacian(f)(X))
    assert_unbiased(samples, exact)


def test_rademacher_laplacian_of_a_quadratic_is_exact():
    """For a quadratic form v^T A v with v in {-1, 1}^D, the estimate is exact only if
    A is diagonal: the off-diagonal terms average out, the diagonal ones never vary."""
    A = jnp.diag(jnp.array([1.0, 2.0, 3.0, 4.0]))
    f = lambda x: x @ A @ x  # noqa: E731
    got = hlopt.laplacian(f, num_samples=3, distribution="rademacher")(X, key=jax.random.key(0))
    close(got, 2 * jnp.trace(A))


# --- standard vs collapsed vs nested, through the user's own vmap of hlopt.jet -------


def stde_laplacian(f, x, V):
    return jax.vmap(lambda v: jet(f, (x,), ((v, jnp.zeros_like(v)),))[1][1])(V).sum(0)


@pytest.mark.parametrize("name", ["tanh_mlp", "with_while", "with_sort", "with_max"])
def test_user_vmap_of_jet_collapsed_and_standard(name):
    f = FUNCTIONS[name]
    V = jnp.eye(4)
    want = nested_laplacian(f)(X)
    collapsed = hlopt.jit(stde_laplacian, static_argnums=0)
    standard = hlopt.jit(stde_laplacian, static_argnums=0, pipeline="jet-expand,inline,canonicalize,cse,symbol-dce")
    close(collapsed(f, X, V), want)
    close(standard(f, X, V), want)
    assert "collapsed = true" in hlopt.lower(stde_laplacian, f, X, V, static_argnums=0).apply("jet-collapse").as_text()


def test_user_vmap_of_jet_keeps_the_primal_unbatched():
    text = hlopt.lower(lambda x, V: stde_laplacian(tanh_mlp, x, V), X, jnp.eye(4)).as_text()
    assert "directions = 4" in text


ELEMENTWISE = [jnp.sin, jnp.cos, jnp.tanh, jnp.exp, lambda v: v * v, lambda v: 1 / (1.5 + v * v),
               jnp.arctan, lambda v: jnp.log1p(v * v), jax.nn.sigmoid, lambda v: jnp.sqrt(2.0 + v)]


@settings(derandomize=True, max_examples=15, deadline=None)
@given(st.lists(st.integers(0, len(ELEMENTWISE) - 1), min_size=1, max_size=4),
       st.integers(1, 3), st.booleans())
def test_random_elementwise_chains(chain, width, fourth):
    """collapsed (hlopt.laplacian / bilaplacian), standard (the user's vmap of hlopt.jet
    without jet-collapse) and nested reverse mode agree on random chains."""
    W = jnp.linspace(-0.8, 0.9, 4 * width).reshape(4, width)

    def f(x):
        v = x @ W
        for i in chain:
            v = ELEMENTWISE[i](v)
        return v.sum()

    want = nested_laplacian(f)(X)
    close(hlopt.laplacian(f)(X), want, rtol=1e-9)
    standard = hlopt.jit(lambda x, V: stde_laplacian(f, x, V), pipeline="jet-expand,inline,canonicalize,cse")
    close(standard(X, jnp.eye(4)), want, rtol=1e-9)
    if fourth:
        close(hlopt.bilaplacian(f)(X), nested_bilaplacian(f)(X), rtol=1e-8)


# multiply and max/min window reductions and convolutions in collapsed jets (the primal
# broadcast along the directions; a kernel with a series, one convolution per direction)
REDUCTIONS = {
    "prod": lambda x: jnp.prod(jnp.sin(x) + 1.5) + jnp.prod(x * x),
    "cumprod": lambda x: jnp.sum(jnp.cumprod(jnp.tanh(x) + 1.2) ** 2),
    "cummax": lambda x: jnp.sum(jnp.sin(jax.lax.cummax(jnp.sin(3 * x))) * x),
    "max_pool": lambda x: jnp.sum(jax.lax.reduce_window(jnp.sin(x) * x, -jnp.inf, jax.lax.max, (2,), (1,),
                                                        "VALID") ** 2),
    "conv": lambda x: jnp.sum(jnp.tanh(jax.lax.conv_general_dilated(
        x.reshape(1, 1, 4), jnp.linspace(-1, 1, 6).reshape(2, 1, 3), (1,), "SAME")) ** 2),
    "conv_kernel_too": lambda x: jnp.sum(jnp.tanh(jax.lax.conv_general_dilated(
        x.reshape(2, 1, 2), jnp.stack([x[:3], x[1:]]).reshape(2, 1, 3), (1,), [(1, 1)]))),
}


V4 = np.array([[1.0, 0.5, -0.3, 0.2], [0.0, 1.0, 0.4, -0.6], [0.7, -0.2, 0.0, 1.0]])
W4 = (0.0, -2.0, 0.5)  # a zero first weight and one other than 1 (JetBuilder.spread)


def weighted_fourth(f):
    """sum_r w_r D^4 f[v_r^4] / 24 at X (V4, W4) by nested jax.jvp: a weighted collapsed 4-jet's reference."""
    def fourth(x, v):
        d = f
        for _ in range(4):
            d = functools.partial(lambda g, y: jax.jvp(g, (y,), (v,))[1], d)
        return d(x)
    return jax.jit(lambda x: sum(wr * fourth(x, v) for wr, v in zip(W4, V4)) / 24)(X)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_and_convolution_collapsed(name):
    """The Laplacian, and a weighted collapsed 4-jet against nested jax.jvp:
    sum_r w_r D^4 f[v_r^4] / 24 (the K-th coefficient collapsed through the op; a zero
    first weight and a weight other than 1, which the collapsed input's row is divided by)."""
    from hlopt.pde import collapsed_jet

    f = REDUCTIONS[name]
    close(hlopt.laplacian(f)(X), nested_laplacian(f)(X))
    close(hlopt.jit(lambda x: collapsed_jet(f, x, V4, 4, W4))(X), weighted_fourth(f))


# two layers around each nonlinearity, so that its input has a collapsed K-th coefficient
# from the first layer's terms (the collapsed sum takes the invariant factors out of it:
# jet_directions.lead_sum), and a dot of that coefficient on its own (no stacked rows)
A = np.linspace(-0.9, 0.8, 12).reshape(4, 3)
B = np.linspace(0.7, -0.6, 6).reshape(3, 2)
LAYERED = {
    "sin": jnp.sin,
    "exp": lambda v: jnp.exp(0.5 * v),
    "log": lambda v: jnp.log(2.0 + jnp.tanh(v)),
    "pow": lambda v: (1.5 + jnp.tanh(v)) ** 2.5,
    "div": lambda v: v / (2.0 + jnp.sin(v)),
    "tanh_in_while": lambda v: jax.lax.fori_loop(0, 2, lambda i, u: jnp.tanh(u) * 1.1 + 0.1 * v, v),
    "tanh_in_case": lambda v: jax.lax.switch(1, [jnp.sin, lambda u: jnp.tanh(u) ** 2, jnp.cos], v),
}


def layered(name):
    act = LAYERED[name]
    return lambda x: act(act(x @ A) @ B)


@pytest.mark.parametrize("name", LAYERED)
def test_factored_collapsed_sums(name):
    """Exact and weighted Laplacians, and a weighted collapsed 4-jet against nested jax.jvp,
    where every nonlinearity's collapsed term has factors that do not vary along the directions."""
    from hlopt.pde import collapsed_jet

    f = layered(name)
    close(hlopt.laplacian(f)(X), nested_laplacian(f)(X))
    S = jax.random.normal(jax.random.key(5), X.shape + (3,))
    close(hlopt.laplacian(f, weights=S)(X), nested_weighted(f, S)(X))
    close(hlopt.jit(lambda x: collapsed_jet(f, x, V4, 4, W4))(X), weighted_fourth(f))


def test_factored_collapsed_sums_under_vmap_and_grad():
    """The same through jax.vmap over points and jax.grad with respect to the weights."""
    xs = jax.random.normal(jax.random.key(4), (3, 4))

    def loss(a, lap):
        g = lambda x: jnp.sum(jnp.sin(jnp.tanh(x @ a) @ B))  # noqa: E731
        return jnp.sum(jax.vmap(lap(g))(xs) ** 2)

    close(hlopt.jit(jax.grad(lambda a: loss(a, hlopt.laplacian)))(A),
          jax.jit(jax.grad(lambda a: loss(a, nested_laplacian)))(A))


# The unit directions are not batched under jax.vmap over points: hlopt.jet's batching rule
# broadcasts them inside the jet, where a dot multiplies them before the broadcast.
M = np.linspace(-0.8, 0.9, 20).reshape(5, 4)
BROADCAST_DOTS = {
    "x_on_the_left": lambda x: jnp.sum(jnp.tanh(x @ M.T) ** 2),
    "x_on_the_right": lambda x: jnp.sum(jnp.sin(M @ x)),
    "matrix_point_free_axis": lambda x: jnp.sum(jnp.tanh(x.reshape(2, 2) @ M[:2, :3]) ** 3),
    "matrix_point_batch_axis": lambda x: jnp.sum(jnp.cos(jnp.einsum("ij,ij->i", x.reshape(2, 2), M[:2, :2]))),
    "two_dots_of_x": lambda x: jnp.tanh(x @ M[0]) * jnp.sin(M[1] @ x),
}


@pytest.mark.parametrize("name", BROADCAST_DOTS)
def test_directions_broadcast_over_vmapped_points(name):
    f = BROADCAST_DOTS[name]
    xs = jax.random.normal(jax.random.key(6), (3, 4))
    want = jax.vmap(nested_laplacian(f))(xs)
    close(hlopt.jit(jax.vmap(hlopt.laplacian(f)))(xs), want)
    close(hlopt.jit(jax.vmap(hlopt.bilaplacian(f)))(xs[:2]), jax.vmap(nested_bilaplacian(f))(xs[:2]))
    V = jnp.eye(4)
    user = jax.vmap(lambda x: stde_laplacian(f, x, V))
    close(hlopt.jit(user)(xs), want)
    close(hlopt.jit(user, pipeline="jet-expand,inline,canonicalize,cse,symbol-dce")(xs), want)

    def loss(a, lap):
        return jnp.sum(jax.vmap(lap(lambda x: f(a * x)))(xs) ** 2)

    a = jnp.linspace(0.5, 1.2, 4)
    close(hlopt.jit(jax.grad(lambda a: loss(a, hlopt.laplacian)))(a),
          jax.jit(jax.grad(lambda a: loss(a, nested_laplacian)))(a))


def test_directions_multiplied_before_the_batch_broadcast():
    """The first layer's dot takes the 4 unit directions (4 rows, or 4 + 7 with the points
    when xla-cpu-stack-dots stacks them), not 4 x 7 broadcast rows, in the forward
    Laplacian and in its gradient."""
    xs = jax.random.normal(jax.random.key(7), (7, 4))
    f = BROADCAST_DOTS["x_on_the_left"]
    texts = [hlopt.lower(jax.vmap(hlopt.laplacian(f)), xs).apply("hlopt-default", platform="cpu").as_text(),
             hlopt.lower(jax.grad(lambda x: jnp.sum(jax.vmap(hlopt.laplacian(f))(x))), xs).apply("hlopt-default", platform="cpu")
             .as_text()]
    for text in texts:
        dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
        assert any(f"(tensor<{rows}x4xf64>, tensor<4x5xf64>)" in line or f"(tensor<5x4xf64>, tensor<4x{rows}xf64>)"
                   in line for line in dots for rows in (4, 11)), dots
        assert not any("tensor<4x7x4xf64>" in line for line in dots), dots


# A dot_general whose operand with the directions axis is not a broadcast (it follows a
# nonlinearity) takes the primal's row, the directions and the collapsed coefficient as one
# stacked matmul; its result's rows are sliced apart, the primal's reshaped.
N = np.linspace(-0.6, 0.7, 30).reshape(5, 6)
T3 = np.linspace(-0.5, 0.5, 2 * 3 * 4).reshape(2, 3, 4)
STACKED_DOTS = {
    "weights_on_the_right": lambda x: jnp.sum(jnp.tanh(jnp.sin(x) @ M.T) ** 2) + jnp.tanh(x @ M.T)[2],
    "weights_on_the_left": lambda x: jnp.sum(jnp.sin(N.T @ jnp.tanh(M @ x)) ** 3),
    "two_layers_primal_used": lambda x: jnp.prod(jnp.cos(jnp.tanh(jnp.tanh(M @ x) @ N) @ N.T)),
    "matrix_point_batch_dim": lambda x: jnp.sum(jnp.tanh(jnp.einsum("bi,bij->bj", jnp.sin(x.reshape(2, 2)),
                                                                    T3[:, :2, :])) ** 2),
    "contract_first_dim": lambda x: jnp.sum(jnp.exp(jnp.einsum("ij,ik->jk", jnp.tanh(x.reshape(2, 2)),
                                                               N[:2, :3]) * 0.5)),
    "dot_in_a_loop": lambda x: jnp.sum(jax.lax.fori_loop(0, 2, lambda i, h: jnp.tanh(h @ M[:4, :4] * 0.8),
                                                         jnp.sin(x)) ** 2),
}


@pytest.mark.parametrize("name", STACKED_DOTS)
def test_stacked_primal_dot(name):
    """Collapsed, standard (no jet-collapse) and nested (bi-Laplacian) jets and the gradient
    of a loss through them, at a point and vmapped over points."""
    f = STACKED_DOTS[name]
    xs = jax.random.normal(jax.random.key(8), (3, 4))
    want = jax.vmap(nested_laplacian(f))(xs)
    close(hlopt.laplacian(f)(xs[0]), want[0])
    close(hlopt.jit(jax.vmap(hlopt.laplacian(f)))(xs), want)
    close(hlopt.jit(jax.vmap(hlopt.bilaplacian(f)))(xs[:2]), jax.vmap(nested_bilaplacian(f))(xs[:2]))
    user = jax.vmap(lambda x: stde_laplacian(f, x, jnp.eye(4)))
    close(hlopt.jit(user, pipeline="jet-expand,inline,canonicalize,cse,symbol-dce")(xs), want)
    primal_and_first = jax.vmap(lambda x: jax.vmap(lambda v: jet(f, (x,), ((v, jnp.zeros_like(v)),)))(jnp.eye(4)))
    (y, (y1, y2)) = hlopt.jit(primal_and_first)(xs)

    def nested(x, v):
        first = lambda x: jax.jvp(f, (x,), (v,))  # noqa: E731
        (y, y1), (_, y2) = jax.jvp(first, (x,), (v,))
        return y, (y1, y2)

    y_ref, (y1_ref, y2_ref) = jax.jit(jax.vmap(lambda x: jax.vmap(lambda v: nested(x, v))(jnp.eye(4))))(xs)
    for got, want in ((y, y_ref), (y1, y1_ref), (y2, y2_ref)):
        close(got, want)

    def loss(a, lap):
        return jnp.sum(jax.vmap(lap(lambda x: f(a * x)))(xs) ** 2) + jnp.sum(jax.vmap(lambda x: f(a * x))(xs))

    a = jnp.linspace(0.5, 1.2, 4)
    close(hlopt.jit(jax.grad(lambda a: loss(a, hlopt.laplacian)))(a),
          jax.jit(jax.grad(lambda a: loss(a, nested_laplacian)))(a))


def test_stacked_primal_dot_is_one_matmul_per_layer():
    """With the opt-in xla-cpu-stack-dots, the hidden layer's dot of the MLP Laplacian is one
    [1 + 4 + 1, 7, 16] x [16, 16] matmul
    (primal, 4 directions, collapsed coefficient; 7 points), with no separate primal dot, in the
    forward program and in its gradient with respect to the weights, whose weight gradient is one
    dot over the same stacked rows."""
    xs = jax.random.normal(jax.random.key(9), (7, 4))
    forward = hlopt.lower(lambda p, x: jax.vmap(hlopt.laplacian(lambda y: mlp(p, y)))(x), PARAMS, xs)
    gradient = hlopt.lower(jax.grad(lambda p, x: jnp.sum(jax.vmap(hlopt.laplacian(lambda y: mlp(p, y)))(x) ** 2)),
                           PARAMS, xs)
    for lowered in (forward, gradient):
        dots = [line for line in lowered.apply(WITH_OPT_IN_TUNING, platform="cpu").as_text().splitlines()
                if "stablehlo.dot_general" in line]
        assert sum("contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x7x16xf64>, "
                   "tensor<16x16xf64>) -> tensor<6x7x16xf64>" in line for line in dots) == 1, dots
        assert not any("(tensor<7x16xf64>, tensor<16x16xf64>)" in line for line in dots), dots
    assert any("(tensor<6x7x16xf64>, tensor<6x7x16xf64>) -> tensor<16x16xf64>" in line for line in dots), dots


# --- errors -----------------------------------------------------------------------


def test_errors():
    f = lambda x, y: (x * y).sum()  # noqa: E731
    x = jnp.ones(3)
    with pytest.raises(ValueError, match="argnums=2 is out of range for 2"):
        hlopt.laplacian(f, argnums=2)(x, x)
    with pytest.raises(TypeError, match="argument 0 must be a real floating-point array, got int32"):
        hlopt.laplacian(f)(jnp.ones(3, jnp.int32), x)
    with pytest.raises(ValueError, match=r"weights must have shape x.shape \+ \(R,\) = \(3,\) \+ \(R,\), got \(4, 2\)"):
        hlopt.laplacian(f, weights=jnp.ones((4, 2)))(x, x)
    with pytest.raises(TypeError, match="needs key="):
        hlopt.laplacian(f, num_samples=3)(x, x)
    with pytest.raises(TypeError, match="key= is only for the randomized"):
        hlopt.laplacian(f)(x, x, key=jax.random.key(0))
    with pytest.raises(ValueError, match="unknown distribution 'uniform'"):
        hlopt.laplacian(f, num_samples=2, distribution="uniform")
    with pytest.raises(ValueError, match="unknown distribution"):
        hlopt.bilaplacian(f, distribution="cauchy")
    with pytest.raises(ValueError, match="num_samples must be a positive integer"):
        hlopt.laplacian(f, num_samples=0)
    with pytest.raises(ValueError, match="weights or num_samples, not both"):
        hlopt.laplacian(f, weights=jnp.ones((3, 2)), num_samples=2)
    with pytest.raises(TypeError, match="argument 0 must be a real floating-point array, got int32"):
        hlopt.bilaplacian(f)(jnp.ones(3, jnp.int32), x)


@pytest.mark.parametrize("name", ["prod", "cummax", "max_pool"])
def test_bilaplacian_through_multiply_and_max_window_reductions(name):
    """The exact bi-Laplacian nests jets: the outer jet meets the variadic reduction the
    inner jet made of the reduction, and folds its body's jet."""
    f = REDUCTIONS[name]
    close(hlopt.bilaplacian(f)(X), jax.jit(nested_bilaplacian(f))(X), rtol=1e-9)


def variadic_product_and_max(x, init=1.0):
    """A reduction with a general body over two results (no rule of its own kind)."""
    y, z = jax.lax.reduce((jnp.sin(x) + 1.5, x * x), (jnp.asarray(init, x.dtype), -jnp.inf),
                          lambda a, b: (a[0] * b[0], jnp.maximum(a[1], b[1])), (0,))
    return y * z


def test_general_reduction_bodies():
    """A user's variadic reduction: the jet of the fold is the fold of its body's jet, in a
    standard jet, in collapsed ones, and nested; an init value with a series is refused."""
    f = variadic_product_and_max
    close(hlopt.laplacian(f)(X), jax.jit(nested_laplacian(f))(X))
    close(hlopt.bilaplacian(f)(X), jax.jit(nested_bilaplacian(f))(X), rtol=1e-9)
    v = jnp.array([0.3, -0.2, 0.5, 0.1])
    d2 = jax.jit(lambda x: jax.jvp(lambda y: jax.jvp(f, (y,), (v,))[1], (x,), (v,))[1])(X)
    close(jet(f, (X,), ((v, jnp.zeros(4)),))[1][1], d2)
    with pytest.raises(Exception, match="general body and an init value with a series"):
        jet(lambda x: variadic_product_and_max(x, init=x[0]), (X,), ((v,),))
