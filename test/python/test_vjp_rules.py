"""Every vjp-expand rule against `jax.vjp` of the same function, in float64 and float32.

Cases of one group are batched into one function (one hlopt compile, one jax
compile); every case is still compared, and can fail, on its own. A case whose
batch fails to build runs alone, so the error names it. float64 is enabled only
inside `jax.enable_x64(True)` blocks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt

from support.vjp_cases import GROUPS, REFERENCES, batched, case_inputs
from support.vjp_harness import assert_cotangents_close, hlopt_vjp, jax_vjp, random_cotangents

RTOL = {"float64": 1e-10, "float32": 2e-5}


def _dtype_scope(dtype: str):
    return jax.enable_x64(dtype == "float64")


def _run(cases, names: list[str], shape, dtype: str, rng: np.random.Generator):
    """(ours, reference, inputs) per case name, for one batch of cases."""
    inputs = {n: case_inputs(cases, n, shape, dtype) for n in names}
    flat = [x for n in names for x in inputs[n]]
    arity = [len(inputs[n]) for n in names]
    f = batched([cases[n][0] for n in names], arity)
    ref = batched([REFERENCES[n](*inputs[n]) if n in REFERENCES else cases[n][0] for n in names], arity)
    cts = random_cotangents(f, flat, rng)
    got, want = hlopt_vjp(f, flat, cts), jax_vjp(ref, flat, cts)
    out, pos = {}, 0
    for n in names:
        k = len(inputs[n])
        out[n] = (got[pos: pos + k], want[pos: pos + k], inputs[n])
        pos += k
    return out


@functools.cache
def _results(group: str, dtype: str):
    cases, shape = GROUPS[group]
    with _dtype_scope(dtype):
        try:
            return _run(cases, list(cases), shape, dtype, np.random.default_rng(0))
        except Exception:  # noqa: BLE001 - every case then runs alone and reports its own error
            return None


def _case_result(group: str, dtype: str, name: str):
    batch = _results(group, dtype)
    if batch is not None:
        return batch[name]
    cases, shape = GROUPS[group]
    with _dtype_scope(dtype):
        return _run(cases, [name], shape, dtype, np.random.default_rng(0))[name]


PARAMS = [pytest.param(group, name, id=f"{group}-{name}") for group, (cases, _) in GROUPS.items() for name in cases]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("group,name", PARAMS)
def test_rule_matches_jax_vjp(group, name, dtype):
    got, want, inputs = _case_result(group, dtype, name)
    for w in want:
        assert w.dtype == jax.dtypes.float0 or np.all(np.isfinite(w)), "the reference is not finite: bad test domain"
    assert_cotangents_close(got, want, inputs, RTOL[dtype], f"{name} ({dtype}, {group})")


def test_batches_build():
    """The batched functions build and run as a whole (no case fell back to running alone)."""
    for group in GROUPS:
        for dtype in ("float64", "float32"):
            assert _results(group, dtype) is not None, f"{group} {dtype}: the batch failed; see the failing case"


def test_scatter_multiply_updates_need_unique_indices():
    """As in JAX: the updates' cotangent of a product with repeated indices is refused, by name."""
    with pytest.raises(hlopt.PipelineError, match="scatter multiply needs unique indices"):
        with jax.enable_x64(True):
            hlopt_vjp(lambda x, y: x.at[jnp.array([1, 1, 0])].multiply(y[:3]), [np.ones(5), np.ones(5)], [np.ones(5)])
