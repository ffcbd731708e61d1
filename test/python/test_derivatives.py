"""The one derivative table (passes/optable/derivatives.py): an entry gives jet-expand's standard
and collapsed rules and vjp-expand's rule, checked against JAX.

The scratch-registry test removes `chlo.asinh` from every table, shows that jet and vjp
then fail on it, and adds it back as ONE entry of a scratch table, written differently
from the shipped one (asinh' = 1 / cosh(asinh x)), from which both rule tables are filled.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import jet as jax_jet

import hlopt
from hlopt.passes.optable import derivatives
from hlopt.passes.autodiff import table
from hlopt.passes.optable.derivatives import X, Y, op, polynomial

from support import op_tables
from support.jet_cases import TABLE_CASES
from support.references import taylor_by_nested_jvp
from support.vjp_harness import hlopt_vjp, jax_vjp

ORDER = 5
_W = np.random.default_rng(7).normal(size=(7, 3)) / 2


def _asinh_of_layer(x):
    return jnp.arcsinh(jnp.tanh(x) @ _W)


def _install(monkeypatch, formulas: derivatives.Table) -> None:
    """Make jet-expand and vjp-expand read the op table built from the derivative table `formulas`."""
    op_tables.install(monkeypatch, table.build(table.ENTRIES, formulas))


def _jets(x, series):
    with jax.enable_x64(True):
        p, s = hlopt.jet(jnp.arcsinh, (x,), (series,), factorial_scaled=False)
        ours = [np.asarray(p)] + [np.asarray(t) for t in s]
        ref = taylor_by_nested_jvp(jnp.arcsinh, [x], [series], ORDER)
        q, r = jax.jit(lambda a, b: jax_jet.jet(jnp.arcsinh, (a,), (b,), factorial_scaled=False))(x, series)
        theirs = [np.asarray(q)] + [np.asarray(t) for t in r]
    return ours, [np.asarray(t) for t in ref], theirs


def _laplacians(x):
    with jax.enable_x64(True):
        ours = np.asarray(hlopt.laplacian(_asinh_of_layer)(x))
        want = jax.jit(lambda a: jnp.trace(jax.hessian(_asinh_of_layer)(a), axis1=1, axis2=2))(x)
        return ours, np.asarray(want)


def test_one_scratch_entry_gives_standard_collapsed_and_reverse_rules(monkeypatch):
    rng = np.random.default_rng(11)
    x = rng.normal(size=9)
    series = [0.5 * rng.normal(size=9) for _ in range(ORDER)]
    point = rng.normal(size=7)
    ct = rng.normal(size=9)
    scratch = {name: d for name, d in derivatives.DERIVATIVES.items() if name != "chlo.asinh"}

    _install(monkeypatch, scratch)
    with pytest.raises(hlopt.PipelineError, match="no Taylor rule for 'chlo.asinh'"):
        _jets(x, series)
    with pytest.raises(hlopt.PipelineError, match="no reverse-mode rule for 'chlo.asinh'"):
        with jax.enable_x64(True):
            hlopt_vjp(jnp.arcsinh, [x], [ct])

    derivatives.def_quotient("chlo.asinh", lambda x, y: op("chlo.cosh", y), table=scratch)
    _install(monkeypatch, scratch)

    ours, ref, theirs = _jets(x, series)
    for k in range(ORDER + 1):
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-9, atol=1e-10, err_msg=f"standard jet, order {k}")
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-9, atol=1e-10, err_msg=f"vs jax jet, order {k}")
    got, want = _laplacians(point)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg="collapsed jet (laplacian)")
    with jax.enable_x64(True):
        np.testing.assert_allclose(hlopt_vjp(jnp.arcsinh, [x], [ct])[0], jax_vjp(jnp.arcsinh, [x], [ct])[0],
                                   rtol=1e-12, err_msg="vjp")


@pytest.mark.parametrize("name", list(TABLE_CASES))
def test_table_rules_match_nested_jvp(name):
    fun, lo, hi = TABLE_CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.uniform(lo, hi, size=6)
    series = [0.3 * rng.normal(size=6) for _ in range(ORDER)]
    with jax.enable_x64(True):
        p, s = hlopt.jet(fun, (x,), (series,), factorial_scaled=False)
        ref = taylor_by_nested_jvp(fun, [x], [series], ORDER)
    for k, (g, w) in enumerate(zip([p, *s], ref)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-9, err_msg=f"{name}, order {k}")


def test_polygamma_order_has_no_derivative():
    with jax.enable_x64(True):
        with pytest.raises(hlopt.PipelineError, match="no Taylor rule for 'chlo.polygamma' with a series in operand 0"):
            hlopt.jet(lambda n, x: lax.polygamma(n, x), (np.ones(3), np.ones(3) + 1), ([np.ones(3)], [np.ones(3)]))
        with pytest.raises(hlopt.PipelineError, match="chlo.polygamma is not differentiable in operand 0"):
            hlopt_vjp(lambda n, x: lax.polygamma(n, x), [np.ones(3), np.ones(3) + 1], [np.ones(3)])


def test_formulas_fold_and_know_polynomials():
    assert polynomial((1 + Y) * (1 - Y)) == [1.0, 0.0, -1.0]
    assert polynomial(Y * (1 - Y)) == [0.0, 1.0, -1.0]
    assert polynomial(2 * Y / 4) == [0.0, 0.5]
    assert polynomial(Y * Y * Y - 3) == [-3.0, 0.0, 0.0, 1.0]
    assert polynomial(X) is None
    assert polynomial(op("stablehlo.sine", Y)) is None
    assert polynomial(1 / Y) is None
    e = -(2 * -(Y))
    assert (e.kind, e.value, e.args[0] is Y) == ("scale", 2, True)
    c = (1 / 3) / Y
    assert c.kind == "div" and math.isclose(c.args[0].value, 1 / 3)


def test_every_entry_has_both_rules():
    for name in derivatives.DERIVATIVES:
        entry = table.TABLE[name]
        assert entry.family == "derivative" and entry.jet is not None and entry.vjp is not None, name
