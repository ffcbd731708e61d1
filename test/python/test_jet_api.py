"""hlopt.jet: the contract of jax.experimental.jet.jet, composition with hlopt.jit and
jax.vmap, order-10 compositions, and errors. float64 only inside jax.enable_x64 blocks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import jet as jax_jet

import hlopt


def _close(got, want, rtol=1e-5, atol=1e-6):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def test_docs_example_sin_of_cube():
    h0, h1, h2 = 0.5**3.0, 3.0 * 0.5**2.0, 6.0 * 0.5
    f0, (f1, f2) = hlopt.jet(jnp.sin, (h0,), ((h1, h2),))
    np.testing.assert_allclose(f0, np.sin(h0), rtol=1e-6)
    np.testing.assert_allclose(f1, np.cos(h0) * h1, rtol=1e-6)
    np.testing.assert_allclose(f2, -np.sin(h0) * h1**2 + np.cos(h0) * h2, rtol=1e-6)


def _pytree_fun(p, x):
    h = jnp.tanh(x @ p["w"] + p["b"])
    return {"out": jnp.sum(h * h), "h": h}


def _pytree_inputs(order):
    rng = np.random.default_rng(1)
    p = {"w": rng.normal(size=(3, 4)).astype(np.float32), "b": rng.normal(size=4).astype(np.float32)}
    x = rng.normal(size=(2, 3)).astype(np.float32)
    ps = [jax.tree_util.tree_map(lambda a: rng.normal(size=a.shape).astype(np.float32), p) for _ in range(order)]
    xs = [rng.normal(size=x.shape).astype(np.float32) for _ in range(order)]
    return (p, x), (ps, xs)


@pytest.mark.parametrize("factorial_scaled", [True, False])
def test_pytree_primals_match_jax_jet(factorial_scaled):
    (p, x), (ps, xs) = _pytree_inputs(3)
    got = hlopt.jet(_pytree_fun, (p, x), (ps, xs), factorial_scaled=factorial_scaled)
    # JAX's jet takes array arguments only: flatten the dict by hand
    leaves, tree = jax.tree_util.tree_flatten(p)
    flat_series = [[jax.tree_util.tree_leaves(t)[i] for t in ps] for i in range(len(leaves))]
    want = jax.jit(lambda primals, series: jax_jet.jet(
        lambda *a: _pytree_fun(jax.tree_util.tree_unflatten(tree, a[:-1]), a[-1]),
        primals, series, factorial_scaled=factorial_scaled))((*leaves, x), (*flat_series, xs))
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    _close(got, want, rtol=2e-4, atol=2e-4)


def test_factorial_scaling_converts_conventions():
    x, v = np.float32(0.3), np.float32(1.0)
    _, derivs = hlopt.jet(jnp.exp, (x,), ((v, 0 * v, 0 * v),))
    _, coeffs = hlopt.jet(jnp.exp, (x,), ((v, 0 * v, 0 * v),), factorial_scaled=False)
    _close(derivs, [np.exp(x)] * 3)  # d^k/dt^k exp(x + t) = exp(x)
    _close(coeffs, [np.exp(x) / math.factorial(k) for k in (1, 2, 3)])


def test_inside_hlopt_jit_composes_and_skips_zero_terms():
    w = np.random.default_rng(2).normal(size=(4, 4)).astype(np.float32)

    def f(w, x, v):
        # w is closed over as a traced value: it enters the annotation with zero series
        _, (d1, d2, d3) = hlopt.jet(lambda y: jnp.sin(y @ w), (x,), ((v, jnp.zeros_like(v), jnp.zeros_like(v)),))
        return d3.sum() + x.sum()

    def ref(w, x, v):
        _, (d1, d2, d3) = jax_jet.jet(lambda y: jnp.sin(y @ w), (x,), ((v, jnp.zeros_like(v), jnp.zeros_like(v)),))
        return d3.sum() + x.sum()

    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    v = np.ones((2, 4), np.float32)
    _close(hlopt.jit(f)(w, x, v), jax.jit(ref)(w, x, v), rtol=1e-4)
    text = hlopt.lower(f, w, x, v).apply("jet-expand").as_text()
    jet_fn = text[text.index("func.func private @hlopt_jet_fun_jet3"):]
    # w's series and x's coefficients 2 and 3 are zero constants (scaled by 1/k!): the jet
    # has two dot_generals, of the primal and of x's first coefficient, and nothing to stack
    assert jet_fn.count("stablehlo.dot_general") == 2, jet_fn
    assert "stablehlo.dot_general %arg1, %arg0" in jet_fn and "stablehlo.dot_general %arg5, %arg0" in jet_fn, jet_fn
    assert "stablehlo.concatenate" not in jet_fn, jet_fn


def test_plain_jax_jit_gives_hlopt_jits_numbers():
    f = lambda x: hlopt.jet(jnp.sin, (x,), ((x,),))[1][0]  # noqa: E731
    x = np.float32(0.7)
    assert jax.jit(f)(x) == hlopt.jit(f)(x) == np.float32(np.cos(x) * x)


def _directional(f, x, v, order):
    return hlopt.jet(f, (x,), ((v,) + (jnp.zeros_like(v),) * (order - 1),))[1][-1]


def _directional_ref(f, x, v, order):
    return jax_jet.jet(f, (x,), ((v,) + (jnp.zeros_like(v),) * (order - 1),))[1][-1]


def _stochastic_f(x):
    return jnp.sum(jnp.tanh(x) ** 2 * jnp.cos(x))


def test_vmap_over_directions_eager_and_in_hlopt_jit():
    rng = np.random.default_rng(3)
    x = rng.normal(size=5).astype(np.float32)
    vs = rng.normal(size=(7, 5)).astype(np.float32)
    want = jax.jit(jax.vmap(lambda v: _directional_ref(_stochastic_f, x, v, 3)))(vs)
    _close(jax.vmap(lambda v: _directional(_stochastic_f, x, v, 3))(vs), want, rtol=1e-4, atol=1e-5)
    estimator = hlopt.jit(lambda x, vs: jax.vmap(lambda v: _directional(_stochastic_f, x, v, 3))(vs).mean())
    _close(estimator(x, vs), want.mean(), rtol=1e-4, atol=1e-5)


def test_vmap_over_primals_and_series_with_axes():
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(5, 3)).astype(np.float32)
    vs = rng.normal(size=(3, 5)).astype(np.float32)
    got = jax.vmap(lambda x, v: _directional(jnp.sin, x, v, 2), in_axes=(1, 0))(xs, vs)
    want = jax.jit(jax.vmap(lambda x, v: _directional_ref(jnp.sin, x, v, 2), in_axes=(1, 0)))(xs, vs)
    _close(got, want, rtol=1e-5)


def test_vmap_over_primals_with_unbatched_series_keeps_signed_zeros():
    """Series shared by every point ride on a zero added to the primal inside the jet: it
    must leave -0.0 as it is (1/x at -0.0 is -inf), eagerly and under hlopt.jit."""
    xs = jnp.array([[-0.0, 1.0, 2.0], [0.5, -0.0, 0.0]], jnp.float32)
    v = jnp.linspace(0.5, 1.5, 3, dtype=jnp.float32)
    f = lambda x: 1.0 / x  # noqa: E731
    want = jax.jit(jax.vmap(lambda x: jax_jet.jet(f, (x,), ((v,),))))(xs)
    for run in (lambda g: g, hlopt.jit):
        got = run(jax.vmap(lambda x: hlopt.jet(f, (x,), ((v,),))))(xs)
        for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-6)  # inf signs must agree


def _mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _while_body(s):
    return s[0] + 1, s[1] * 1.2 + 0.05 * jnp.exp(-s[1])


def _while(x):
    steps, y = lax.while_loop(lambda s: s[1].sum() < 30.0, _while_body, (0, x))
    return y * steps


def test_compositions_to_order_10():
    """The MLP and a while loop with a data-dependent trip count, to order 10, against
    JAX's jet (of the loop unrolled to its trip count; JAX's jet has no while rule).
    Nested jvp checks the same loop to order 6 in test_jet_rules."""
    order = 10
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        sizes = [3, 8, 8, 2]
        params = [(jnp.asarray(rng.normal(size=(m, n)) / np.sqrt(m)), jnp.asarray(rng.normal(size=n)))
                  for m, n in zip(sizes, sizes[1:])]
        x = jnp.asarray(rng.normal(size=3))
        x_pos = jnp.asarray(rng.uniform(0.5, 2.0, size=3))
        series = [jnp.asarray(0.5 * rng.normal(size=3)) for _ in range(order)]
        steps = int(lax.while_loop(lambda s: s[1].sum() < 30.0, _while_body, (0, x_pos))[0])
        assert steps > 3

        def unrolled(y):
            for i in range(steps):
                _, y = _while_body((i, y))
            return y * steps

        (p_mlp, p_loop), (s_mlp, s_loop) = hlopt.jet(
            lambda a, b: (_mlp(params, a), _while(b)), (x, x_pos), (series, series), factorial_scaled=False)
        # the MLP's reference is cheaper jitted, the unrolled loop's eager (XLA takes 7x longer on it)
        r_mlp = jax.jit(lambda x, series: jax_jet.jet(lambda a: _mlp(params, a), (x,), (series,),
                                                      factorial_scaled=False))(x, series)
        r_loop = jax_jet.jet(unrolled, (x_pos,), (series,), factorial_scaled=False)
        for got, want in (((p_mlp, s_mlp), r_mlp), ((p_loop, s_loop), r_loop)):
            assert len(got[1]) == order
            for k, (g, w) in enumerate(zip([got[0], *got[1]], [want[0], *want[1]])):
                assert g.dtype == np.float64
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-9, err_msg=f"order {k}")


def test_unused_results_are_not_computed():
    """Only the top coefficient of a two-layer tanh MLP is used: it matches nested jvp in
    float64, and the jet computes neither the other coefficients of the last dot_general
    (one dot of the four is left) nor the primal output."""
    order = 4
    rng = np.random.default_rng(6)
    with jax.enable_x64(True):
        sizes = [3, 8, 2]
        params = [(jnp.asarray(rng.normal(size=(m, n)) / np.sqrt(m)), jnp.asarray(rng.normal(size=n)))
                  for m, n in zip(sizes, sizes[1:])]
        x, v = jnp.asarray(rng.normal(size=(5, 3))), jnp.asarray(rng.normal(size=(5, 3)))

        def top(x, v):
            return _directional(lambda y: _mlp(params, y), x, v, order)

        nested = lambda y: _mlp(params, y)  # noqa: E731
        for _ in range(order):
            nested = (lambda inner: lambda y: jax.jvp(inner, (y,), (v,))[1])(nested)
        got = hlopt.jit(top)(x, v)
        assert got.dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(nested)(x)), rtol=1e-9, atol=1e-9)
        text = hlopt.lower(top, x, v).apply("jet-expand").as_text()
    jet_fn = text[text.index("func.func private @hlopt_jet_fun_jet4"):]
    # x @ w1 and v @ w1, then h4 @ w2: no stack left, and no primal h0 @ w2
    assert jet_fn.count("stablehlo.dot_general") == 3, jet_fn
    assert "stablehlo.concatenate" not in jet_fn, jet_fn


@pytest.mark.parametrize("f", [jnp.tanh, jnp.tan, jax.nn.sigmoid], ids=["tanh", "tan", "logistic"])
def test_first_nonlinearity_of_a_directional_derivative(f):
    """tanh, tan and logistic of u0 + u1 t (series (v, 0, ..., 0)) take the closed form
    u1^k P_k(y0); against nested jvp in float64 to order 8, including y0 = 0."""
    order = 8
    with jax.enable_x64(True):
        x = jnp.asarray([-1.2, -0.4, 0.0, 0.3, 0.9])
        v = jnp.asarray([0.7, -1.1, 1.3, 0.5, -0.2])
        nested = f
        for _ in range(order):
            nested = (lambda inner: lambda y: jax.jvp(inner, (y,), (v,))[1])(nested)
        got = hlopt.jit(lambda x, v: _directional(f, x, v, order))(x, v)
        assert got.dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(nested)(x)), rtol=1e-9, atol=1e-9)


def test_inconsistent_orders_and_shapes_are_refused():
    with pytest.raises(ValueError, match="inconsistent lengths"):
        hlopt.jet(jnp.add, (1.0, 2.0), ((1.0, 0.0), (1.0,)))
    with pytest.raises(ValueError, match="shape"):
        hlopt.jet(jnp.sin, (np.ones(3, np.float32),), ((np.ones(2, np.float32),),))
    with pytest.raises(ValueError, match="structure"):
        hlopt.jet(lambda p: p["a"], ({"a": 1.0},), ((1.0,),))


def test_op_without_rule_names_op_and_location():
    def f(x):
        return lax.reduce_precision(jnp.sin(x), exponent_bits=5, mantissa_bits=10)

    with pytest.raises(hlopt.PipelineError, match=r"test_jet_api.py:\d+.*no Taylor rule for 'stablehlo.reduce_precision'"):
        hlopt.jet(f, (np.float32(1),), ((np.float32(1),),))


def test_integer_arguments_and_results():
    """Integer inputs take coefficients of their own type (ignored); integer outputs get zeros.
    (JAX's jet refuses this function: its multiply rule mixes float32 and int32 terms.)"""
    x, n = np.float32(0.4), np.int32(3)
    (y, m), ((y1, y2), (m1, m2)) = hlopt.jet(lambda x, n: (jnp.sin(x) * n, n * 2), (x, n),
                                             ((np.float32(1), np.float32(0.5)), (np.int32(7), np.int32(7))))
    assert m == 6 and m1.dtype == np.int32 and m1 == 0 and m2 == 0
    np.testing.assert_allclose([y, y1, y2], [3 * np.sin(x), 3 * np.cos(x), 3 * (-np.sin(x) + 0.5 * np.cos(x))],
                               rtol=1e-5)


def test_sharded_program_with_a_sharding_constraint_inside_the_jet():
    """Sharding constraints are linear: each coefficient is constrained like its primal."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))

    def g(y):
        return jnp.sin(lax.with_sharding_constraint(y * 2, NamedSharding(mesh, P("x"))))

    def f(x, v):
        return hlopt.jet(g, (x,), ((v, v),))[1][1]

    x, v = np.linspace(0, 1, 16, dtype=np.float32), np.ones(16, np.float32)
    text = hlopt.lower(f, x, v, mesh=mesh).apply("jet-expand").as_text()
    jet_fn = text[text.index("@hlopt_jet_fun_jet2("):]
    assert jet_fn.count("sdy.sharding_constraint") >= 3, jet_fn  # the primal and both coefficients
    out = hlopt.jit(f, mesh=mesh, in_shardings=(P("x"), P("x")))(x, v)
    assert out.sharding.spec == P("x")
    _close(out, jax_jet.jet(lambda y: jnp.sin(y * 2), (x,), ((v, v),))[1][1])


def test_forward_mode_through_a_jet():
    """jax.jvp / jacfwd of a function that calls hlopt.jet, eager and inside hlopt.jit."""

    def second(jet_fn, x, s):
        return jet_fn(lambda y: jnp.sin(y) * jnp.exp(-y), (x,), ((s, 0.5 * s),))[1][1]

    x, s = np.linspace(0.1, 0.9, 3, dtype=np.float32), np.full(3, 1.3, np.float32)
    tangents = (np.ones(3, np.float32), np.full(3, 0.2, np.float32))
    want = jax.jit(lambda x, s: jax.jvp(lambda a, b: second(jax_jet.jet, a, b), (x, s), tangents))(x, s)
    _close(jax.jvp(lambda a, b: second(hlopt.jet, a, b), (x, s), tangents), want, rtol=1e-5)
    _close(hlopt.jit(lambda a, b: jax.jvp(lambda a, b: second(hlopt.jet, a, b), (a, b), tangents))(x, s), want,
           rtol=1e-5)
    _close(jax.jacfwd(lambda a: second(hlopt.jet, a, s))(x), jax.jit(jax.jacfwd(lambda a: second(jax_jet.jet, a, s)))(x),
           rtol=1e-5)
