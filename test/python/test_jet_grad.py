"""Reverse mode through hlopt.jet, hlopt.laplacian and hlopt.bilaplacian, in float64.

References: jax.grad of the same loss built on nested jax.jvp along the curve
x + sum_k t^k/k! s_k (or on JAX's experimental jet where it has the rules), and
jax.grad of the nested jnp.trace(jax.hessian) PDE losses. Relative error < 1e-10.
Loops with a data-dependent trip count, which jax.grad refuses, are checked
against jax.jacfwd of the reference. The references run under jax.jit (one XLA program each).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet as jax_jet

import hlopt
from hlopt.passes.registry import WITH_OPT_IN_TUNING

from support.pde_references import (  # noqa: F401 - float64: the module-scoped x64 fixture
    close, float64, mlp, mlp_params, nested_laplacian)


def nested_jet(fun, primals, series):
    """jet's contract (derivative convention) by nested jax.jvp along the Taylor curve."""
    order = len(series[0])

    def h(t):
        return fun(*[x + sum(t ** (k + 1) / math.factorial(k + 1) * s[k] for k in range(order))
                     for x, s in zip(primals, series)])

    zero = jnp.zeros((), jnp.result_type(*primals))
    terms, fn = [], h
    for _ in range(order):
        fn = (lambda g: lambda t: jax.jvp(g, (t,), (jnp.ones_like(t),))[1])(fn)
        terms.append(fn(zero))
    return h(zero), terms


# --- functions -------------------------------------------------------------------------


def elementwise(x):
    return jnp.sin(x) * jnp.exp(0.3 * x) + jnp.tanh(x) ** 2


def two_args(x, y):
    return jnp.log1p(x * x) * jnp.cos(y) + (x @ y) * x


def with_fori(x):
    return jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) * x + 0.1 * i, x)


def with_cond(x):
    return jax.lax.cond(x.sum() > 0, lambda v: jnp.exp(v) * v[0], lambda v: jnp.sin(v) ** 2, x)


def with_switch(x):
    return jax.lax.switch(1, [jnp.sin, lambda v: jnp.tanh(v) ** 3, jnp.cos], x)


def with_while(x):
    """A while loop whose trip count depends on the data (jax.grad refuses it)."""
    def body(c):
        v, n = c
        return jnp.sin(v) * 0.9 + 0.3 * x, n + 1.0
    return jax.lax.while_loop(lambda c: c[1] < 4.0 + 0.0 * c[0][0], body, (x, 0.0))[0]


def with_stop_gradient(x):
    return jnp.sin(x) * jax.lax.stop_gradient(jnp.exp(x)) + x ** 3


def with_custom_jvp(x):
    return jax.nn.softplus(x) * jnp.sinc(x) + jax.nn.sigmoid(3 * x)


FUNCTIONS = {f.__name__: f for f in (elementwise, with_fori, with_cond, with_switch, with_stop_gradient,
                                     with_custom_jvp)}
X = np.array([0.3, -0.7, 0.45, 1.1])  # float64
S = [np.array([0.7, -0.2, 0.1, 0.5]), np.array([0.2, 0.4, -0.3, 0.1]), np.array([-0.5, 0.1, 0.2, 0.3])]


def series_loss(jet_fn, fun, order):
    """A scalar loss reading the primal output and every output term of a jet."""
    def loss(x, *series):
        y, terms = jet_fn(fun, (x,), (list(series[:order]),))
        return jnp.sum(jnp.sin(y)) + sum(jnp.sum(t * (k + 1.5)) + 0.1 * jnp.sum(t ** 2) for k, t in enumerate(terms))
    return loss


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_grad_of_jet_wrt_primal_and_every_coefficient(name, order):
    f = FUNCTIONS[name]
    argnums = tuple(range(order + 1))
    want = jax.jit(jax.grad(series_loss(nested_jet, f, order), argnums))(X, *S[:order])
    got = jax.grad(series_loss(hlopt.jet, f, order), argnums)(X, *S[:order])
    close(got, want)


def test_custom_jvp_rules_hold_at_their_special_points():
    """relu and sinc at 0, where differentiating their primal code differs from their rules."""
    f = lambda x: jax.nn.relu(x) * jnp.sin(x + 1.0) + jnp.sinc(x) * x  # noqa: E731
    x0 = jnp.array([0.0, 0.5, -0.3])
    s = [jnp.array([1.0, 0.3, -0.2]), jnp.array([0.4, -1.0, 0.7])]
    want = jax.jit(jax.grad(series_loss(nested_jet, f, 2), (0, 1, 2)))(x0, *s)
    close(hlopt.jit(jax.grad(series_loss(hlopt.jet, f, 2), (0, 1, 2)))(x0, *s), want)


def test_grad_matches_jax_jet():
    want = jax.jit(jax.grad(series_loss(jax_jet.jet, elementwise, 3), (0, 1, 2, 3)))(X, *S)
    close(hlopt.jit(jax.grad(series_loss(hlopt.jet, elementwise, 3), (0, 1, 2, 3)))(X, *S), want)


def test_data_dependent_while_against_forward_mode():
    loss = series_loss(nested_jet, with_while, 2)
    want = jax.jit(jax.jacfwd(loss, (0, 1, 2)))(X, *S[:2])
    close(hlopt.jit(jax.grad(series_loss(hlopt.jet, with_while, 2), (0, 1, 2)))(X, *S[:2]), want)


def test_two_arguments_factorial_scaling_and_pytrees():
    y0 = jnp.array([0.2, 0.9, -0.4, 0.6])

    def loss(jet_fn, fs):
        def run(x, y, sx, sy):
            if fs:
                out, terms = jet_fn(two_args, (x, y), ((sx, sx * sy), (sy, sx)))
            else:
                out, terms = jet_fn(two_args, (x, y), ((sx, sx * sy), (sy, sx)), factorial_scaled=False)
            return jnp.sum(out ** 2) + jnp.sum(terms[0] * x) + jnp.sum(jnp.cos(terms[1]))
        return run

    for fs in (True, False):
        ref = (lambda f, p, s: nested_jet(f, p, [[c * math.factorial(k + 1) for k, c in enumerate(t)] for t in s])) \
            if not fs else nested_jet

        def ref_jet(f, p, s, factorial_scaled=True, _ref=ref, _fs=fs):
            out, terms = _ref(f, p, s)
            return out, terms if _fs else [t / math.factorial(k + 1) for k, t in enumerate(terms)]

        want = jax.jit(jax.grad(loss(ref_jet, fs), (0, 1, 2, 3)))(X, y0, S[0], S[1])
        got = jax.grad(loss(hlopt.jet, fs), (0, 1, 2, 3))(X, y0, S[0], S[1])
        close(got, want)


def test_closed_over_arrays_passed_as_arguments():
    def loss(jet_fn):
        def run(w, b, x):
            out, (t1, t2) = jet_fn(lambda v: jnp.tanh(v @ w + b), (x,), ((S[0], S[1]),))
            return jnp.sum(t2 ** 2) + jnp.sum(t1 * out)
        return run

    w = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    b = jnp.array([0.1, -0.2, 0.3])
    want = jax.jit(jax.grad(loss(nested_jet), (0, 1, 2)))(w, b, X)
    close(jax.grad(loss(hlopt.jet), (0, 1, 2))(w, b, X), want)
    close(jax.grad(loss(hlopt.jet))(w, b, X), want[0])  # primals and series concrete, only the closure traced
    close(hlopt.jit(jax.grad(loss(hlopt.jet), (0, 1, 2)))(w, b, X), want)


def test_vjp_value_and_grad_jacrev():
    def outputs(jet_fn):
        def run(x, s):
            out, terms = jet_fn(with_fori, (x,), ((s, s * s, x),))
            return out, terms[2]
        return run

    ct = (jnp.array([1.0, -2.0, 0.5, 0.3]), jnp.array([0.2, 0.1, -0.7, 1.0]))
    want_out, want_ct = jax.jit(lambda x, s: (lambda out, pull: (out, pull(ct)))(*jax.vjp(outputs(nested_jet), x, s)))(
        X, S[0])
    got_out, got_vjp = jax.vjp(outputs(hlopt.jet), X, S[0])
    close(got_out, want_out)
    close(got_vjp(ct), want_ct)
    close(hlopt.jit(jax.jacrev(outputs(hlopt.jet), (0, 1)))(X, S[0]),
          jax.jit(jax.jacrev(outputs(nested_jet), (0, 1)))(X, S[0]))
    loss = series_loss(hlopt.jet, with_cond, 2)
    got = hlopt.jit(jax.value_and_grad(loss, (0, 1, 2)))(X, *S[:2])
    close(got, jax.jit(jax.value_and_grad(series_loss(nested_jet, with_cond, 2), (0, 1, 2)))(X, *S[:2]))


def test_vmap_of_grad_and_grad_of_vmap():
    xs = jnp.stack([X, X + 0.1, -X])

    def outputs(jet_fn):
        loss = series_loss(jet_fn, with_fori, 2)
        return [jax.vmap(jax.grad(loss, (0, 1)), (0, None, None))(xs, *S[:2]),
                jax.vmap(jax.grad(loss, (0, 1, 2)), (None, 0, 0))(X, xs, xs[::-1]),
                jax.grad(lambda v: jnp.sum(jax.vmap(loss, (0, None, 0))(v, S[0], v ** 2)))(xs)]

    close(outputs(hlopt.jet), jax.jit(outputs, static_argnums=0)(nested_jet))
    loss = series_loss(hlopt.jet, with_switch, 2)
    close(hlopt.jit(jax.vmap(jax.grad(loss, (0, 1)), (0, None, None)))(xs, *S[:2]),
          jax.jit(jax.vmap(jax.grad(series_loss(nested_jet, with_switch, 2), (0, 1)), (0, None, None)))(xs, *S[:2]))


def test_forward_over_forward_and_reverse_over_forward_still_work():
    loss = series_loss(hlopt.jet, elementwise, 2)
    want = jax.jit(jax.hessian(series_loss(nested_jet, elementwise, 2)))(X, *S[:2])
    close(hlopt.jit(jax.jacfwd(jax.jacfwd(loss)))(X, *S[:2]), want)
    close(hlopt.jit(jax.jacrev(jax.jacfwd(loss)))(X, *S[:2]), want)


def test_second_order_reverse_is_refused():
    loss = series_loss(hlopt.jet, elementwise, 2)
    with pytest.raises(NotImplementedError, match="grad of grad, jax.hessian and forward over reverse are refused"):
        hlopt.jit(jax.grad(lambda x: jnp.sum(jax.grad(loss)(x, *S[:2]))))(X)
    with pytest.raises(NotImplementedError, match="grad of grad"):
        jax.hessian(loss)(X, *S[:2])


def test_known_zero_operands_are_constants_of_the_differentiated_function():
    """The zero series of a closed-over array are built inside @hlopt_vjp_fun, so
    jet-expand skips their terms; reverse mode differentiates the jet itself at its
    operands (no tangent operand): only w, x and x's two coefficients remain arguments."""
    def loss(w):
        return jnp.sum(hlopt.jet(lambda v: jnp.sin(w * v), (X,), ((S[0], S[1]),))[1][1])

    text = hlopt.lower(jax.grad(loss), jnp.array(0.7)).as_text()
    (signature,) = [line for line in text.splitlines() if "func.func private @hlopt_vjp_fun(" in line]
    assert signature.split("->")[0].count("%arg") == 4, signature
    close(jax.grad(loss)(jnp.array(0.7)), jax.jit(jax.grad(lambda w: jnp.sum(
        nested_jet(lambda v: jnp.sin(w * v), (X,), ((S[0], S[1]),))[1][1])))(jnp.array(0.7)))


def test_reverse_mode_differentiates_the_jet_and_follows_custom_rules():
    """Reverse mode differentiates the jet of a plain body itself (@hlopt_vjp_fun takes no
    tangent operand) and transposes the tangent jet where the body has a derivative rule
    of its own: relu's custom_jvp at its kink (w = 0), where the reverse mode of max(x, 0)
    would split the cotangent at the tie, gives JAX's derivative."""
    def loss(body):
        def fn(w):
            out = hlopt.jet(lambda v: body(w * v), (X,), ((S[0], S[1]),))
            return jnp.sum(out[0] + out[1][0] + out[1][1])
        return fn

    def nested(body):
        def fn(w):
            out = nested_jet(lambda v: body(w * v), (X,), ((S[0], S[1]),))
            return jnp.sum(out[0] + out[1][0] + out[1][1])
        return fn

    for body, w in ((jnp.tanh, 0.7), (jax.nn.relu, 0.0), (jax.nn.relu, 0.7)):
        close(hlopt.jit(jax.grad(loss(body)))(jnp.array(w)), jax.jit(jax.grad(nested(body)))(jnp.array(w)))
    text = hlopt.lower(jax.grad(loss(jnp.tanh)), jnp.array(0.7)).as_text()
    (signature,) = [line for line in text.splitlines() if "func.func private @hlopt_vjp_fun(" in line]
    assert signature.split("->")[0].count("%arg") == 4, signature  # w, x and x's coefficients


def test_float32_wide_network():
    """float32 at width 256, where differentiating the zero series as arguments used
    to meet an XLA CPU miscompile (garbage gradients)."""
    params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), mlp_params(jax.random.key(6), [5, 256, 1]))
    points = jax.random.uniform(jax.random.key(7), (4, 5), jnp.float32)

    def loss(laplacian):
        return lambda p: jnp.sum(jax.vmap(laplacian(lambda x: mlp(p, x)))(points))

    got = hlopt.jit(jax.grad(loss(hlopt.laplacian)))(params)
    close(got, jax.jit(jax.grad(loss(nested_laplacian)))(params), rtol=1e-5)


def test_the_backward_is_an_hlopt_vjp_annotation():
    text = hlopt.lower(jax.grad(series_loss(hlopt.jet, elementwise, 2)), X, *S[:2]).as_text()
    assert "@hlopt.vjp" in text and "@hlopt.jet" in text
    compiled = hlopt.lower(jax.grad(series_loss(hlopt.jet, elementwise, 2)), X, *S[:2]).compile()
    close(compiled(X, *S[:2]), jax.jit(jax.grad(series_loss(nested_jet, elementwise, 2)))(X, *S[:2]))


# --- PDE operators -------------------------------------------------------------------


def pinn_loss(laplacian, points, boundary):
    """Poisson residual -lap u = 1 at the points, u = 0 at the boundary points."""
    def loss(params):
        u = lambda x: mlp(params, x)  # noqa: E731
        lap = jax.vmap(laplacian(u))(points)
        return jnp.mean((lap + 1.0) ** 2) + jnp.mean(jax.vmap(u)(boundary) ** 2)
    return loss


with jax.enable_x64(True):  # module constants in float64, like the tests that use them
    POINTS = jax.random.uniform(jax.random.key(1), (6, 3))
    BOUNDARY = jnp.concatenate([jnp.eye(3), jnp.zeros((1, 3))])


@pytest.mark.parametrize("sizes", [[3, 8, 8, 1], [3, 16, 1]])
def test_pinn_loss_gradient_wrt_mlp_weights(sizes):
    params = mlp_params(jax.random.key(0), sizes)
    want = jax.jit(jax.value_and_grad(pinn_loss(nested_laplacian, POINTS, BOUNDARY)))(params)
    close(hlopt.jit(jax.value_and_grad(pinn_loss(hlopt.laplacian, POINTS, BOUNDARY)))(params), want)
    close(jax.grad(pinn_loss(hlopt.laplacian, POINTS, BOUNDARY))(params), want[1])


def test_pinn_gradient_reads_the_stacked_cotangents_unpadded():
    """hlopt-default with its opt-in xla-cpu-stack-dots stacks each layer's coefficients into one
    dot_general and slices its result apart (after vjp-expand): the gradient pads no cotangent
    back into a stack (no pad of zeros, no work on them)."""
    params = mlp_params(jax.random.key(0), [3, 8, 8, 1])
    lowered = hlopt.lower(jax.grad(pinn_loss(hlopt.laplacian, POINTS, BOUNDARY)), params)
    text = lowered.apply(WITH_OPT_IN_TUNING, platform="cpu").as_text()
    assert text.count("stablehlo.dot_general") > 8 and "stablehlo.pad" not in text


def test_laplacian_gradient_wrt_the_point_and_weighted():
    params = mlp_params(jax.random.key(2), [3, 8, 1])
    u = lambda x: mlp(params, x)  # noqa: E731
    close(jax.grad(hlopt.laplacian(u))(POINTS[0]), jax.jit(jax.grad(nested_laplacian(u)))(POINTS[0]))
    w = jnp.array([[1.0, 0.5, 0.0], [0.5, 2.0, 0.1], [0.0, 0.1, 1.5]])

    def weighted(p, lap):
        return jnp.sum(jax.vmap(lap(lambda x: mlp(p, x)))(POINTS) ** 2)

    want = jax.jit(lambda p: jax.grad(weighted)(p, lambda f: lambda x: jnp.einsum("ij,ir,jr->", jax.hessian(f)(x), w, w)))(
        params)
    close(jax.grad(weighted)(params, lambda f: hlopt.laplacian(f, weights=w)), want)


def test_bilaplacian_gradient_wrt_weights():
    params = mlp_params(jax.random.key(3), [2, 6, 1])

    def loss(bilap):
        return lambda p: jnp.sum(jax.vmap(bilap(lambda x: mlp(p, x)))(POINTS[:3, :2]) ** 2)

    want = jax.jit(jax.grad(loss(lambda f: nested_laplacian(nested_laplacian(f)))))(params)
    close(hlopt.jit(jax.grad(loss(hlopt.bilaplacian)))(params), want)


def test_randomized_laplacian_gradient_matches_its_own_estimator():
    params = mlp_params(jax.random.key(4), [3, 8, 1])
    key = jax.random.key(5)
    V = jax.random.normal(key, (16, 3))

    def estimator(p):
        h = jax.hessian(lambda x: mlp(p, x))(POINTS[0])
        return jnp.einsum("ij,ri,rj->", h, V, V) / 16

    got = jax.grad(lambda p: hlopt.laplacian(lambda x: mlp(p, x), num_samples=16)(POINTS[0], key=key))(params)
    value = hlopt.laplacian(lambda x: mlp(params, x), num_samples=16)(POINTS[0], key=key)
    close(value, jax.jit(estimator)(params))
    close(got, jax.jit(jax.grad(estimator))(params))
