"""Inputs and checks the linear-algebra rule tests share (test_linalg_rules.py, test_linalg_table.py):
seeded random matrices, a relative check of Taylor coefficients, and jet-expand run on a module's text."""

from __future__ import annotations

import zlib

import jax
import numpy as np

from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered
from hlopt.runtime.compile import compile_lowered

from support.vjp_harness import _as_entry, _signature


def seeded_rng(name: str) -> np.random.Generator:
    """A generator seeded by `name`: each case draws the same numbers in every run."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Normal entries (complex ones for a complex `dtype`) scaled by 1/sqrt of the last dimension."""
    x = rng.normal(size=shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.normal(size=shape)
    return (x / np.sqrt(shape[-1])).astype(dtype)


def assert_series(got, want, tol, what):
    """Each coefficient of `got` within `tol` of `want`'s, relative to the largest magnitude of `want`'s."""
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        scale = max(np.max(np.abs(w)), 1e-30)
        err = np.max(np.abs(g - w)) / scale
        assert err <= tol, f"{what}: order {k} relative error {err:.2e} > {tol}"


def jet_of_module(text: str, primals, series, order: int):
    """The plain Taylor coefficients of `@main` of `text` by `jet-expand{func=main order=K}`."""
    module = parse_module(text)
    coeffs = [c for s in series for c in s]
    after = Lowered(module, _signature(primals, primals)).apply(f"jet-expand{{func=main order={order}}}")
    _as_entry(after.module, f"main_jet{order}")
    n_out = len(jax.tree_util.tree_leaves(primals[:1]))
    outs = [np.zeros_like(primals[0])] * (n_out * (order + 1))
    compiled = Lowered(after.module, _signature([*primals, *coeffs], outs), backend=compile_lowered).compile()
    return [np.asarray(v) for v in compiled(*primals, *coeffs)]
