"""Every jet-expand rule against nested jax.jvp (float64, order 6) and jax.experimental.jet.

Each case is compiled on its own when a test first needs it (hlopt, nested jvp
and JAX's jet, each jitted) and cached, so `-k name` builds only that case.
Inputs come from a generator seeded by the case's name. float64 is enabled only
inside `jax.enable_x64(True)` blocks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet as jax_jet

import hlopt

from support.jet_cases import CASES, N, ORDER, REFERENCES, case_inputs
from support.references import taylor_by_nested_jvp


@functools.cache
def _results(name: str) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray] | None]:
    """(hlopt, nested jvp, JAX's jet or None) coefficients 0..ORDER of one case."""
    fun, _, in_jax_jet = CASES[name]
    with jax.enable_x64(True):
        primals, series = case_inputs(name)
        p, s = hlopt.jet(fun, primals, series, factorial_scaled=False)
        ours = [np.asarray(p)] + [np.asarray(t) for t in s]
        ref = [np.asarray(t) for t in taylor_by_nested_jvp(REFERENCES.get(name, fun), primals, series, ORDER)]
        theirs = None
        if in_jax_jet:
            q, r = jax.jit(lambda a, b: jax_jet.jet(fun, a, b, factorial_scaled=False))(primals, series)
            theirs = [np.asarray(q)] + [np.asarray(t) for t in r]
    return ours, ref, theirs


def _assert_series_close(got, want, what):
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float64, f"{what}: order {k} has dtype {g.dtype}"
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-9 * scale, err_msg=f"{what}, order {k}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.float64) if "fft" in n else n for n in CASES])
def test_rule_matches_nested_jvp(name):
    ours, ref, _ = _results(name)
    assert np.all(np.isfinite(ref[-1])), "the reference itself is not finite: bad test domain"
    _assert_series_close(ours, ref, f"{name} vs nested jax.jvp")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.float64) if "fft" in n else n
                                  for n in CASES if CASES[n][2]])
def test_rule_matches_jax_jet(name):
    ours, _, theirs = _results(name)
    _assert_series_close(ours, theirs, f"{name} vs jax.experimental.jet")


def _onehot_product(x, y, idx):
    """x.at[idx].multiply(y) without a scatter: x times the product of the updates of each element."""
    return x * jnp.prod(jnp.where(idx[:, None] == jnp.arange(x.shape[0])[None, :], y[:, None], 1.0), axis=0)


def test_scatter_multiply_with_repeated_indices():
    """JAX's jvp of a scatter multiply refuses repeated indices; the reference multiplies without one."""
    idx = jnp.array([1, 3, 1, 0, 1])
    r = np.random.default_rng(3)
    primals = [r.normal(size=N), r.normal(size=N)]
    series = [[0.5 * r.normal(size=N) for _ in range(ORDER)] for _ in primals]
    with jax.enable_x64(True):
        p, s = hlopt.jet(lambda x, y: x.at[idx].multiply(y), primals, series, factorial_scaled=False)
        ref = taylor_by_nested_jvp(lambda x, y: _onehot_product(x, y, idx), primals, series, ORDER)
    _assert_series_close([np.asarray(p)] + [np.asarray(t) for t in s], ref, "scatter multiply, repeated indices")


def test_scatter_of_a_general_body_is_refused_by_name():
    with pytest.raises(hlopt.PipelineError, match="only for one operand combined by add, replace, multiply"):
        hlopt.jet(lambda x, y: x.at[jnp.array([0, 2])].apply(jnp.sin) * y, (np.ones(N), np.ones(N)),
                  ([np.ones(N)], [np.ones(N)]))
