"""Inputs, cases and checks the linear-algebra rule tests share (test_linalg_rules.py, test_linalg_table.py,
test_rule_coverage.py): seeded random matrices, a relative check of Taylor coefficients, jet-expand run on a
module's text, the factorizations and triangular solves each rule is checked on (OPS) with their inputs, the
`float64` mark of their double-precision cases, and the StableHLO spellings JAX emits for them on
other platforms."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered
from hlopt.runtime.compile import compile_lowered

from support.vjp_harness import _as_entry, _signature

ORDER = 4  # the Taylor order of the cases of OPS
N = 4  # their matrices are NxN (and Nx2)


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


def _spd(a):
    """A Hermitian positive definite matrix of `a` (batched)."""
    return a @ jnp.conj(jnp.swapaxes(a, -1, -2)) + 2.0 * jnp.eye(a.shape[-1], dtype=a.dtype)


def _dominant(a):
    return a + 3.0 * jnp.eye(a.shape[-1], dtype=a.dtype)


def _cholesky(a, b):
    return lax.linalg.cholesky(_spd(a), symmetrize_input=False) * jnp.sum(b)


def _lu(a, b):
    return jsl.lu_factor(_dominant(a) + b[..., :1] * 0.1)[0]


def _trsm(left: bool, lower: bool, how: str, unit: bool) -> Callable:
    def f(a, b):
        rhs = jnp.sin(b) if left else jnp.swapaxes(jnp.sin(b), -1, -2)
        return lax.linalg.triangular_solve(_dominant(a), rhs, left_side=left, lower=lower,
                                           transpose_a=how != "N", conjugate_a=how == "C", unit_diagonal=unit)
    return f


TRSM = {f"trsm_{'left' if left else 'right'}_{'lower' if lower else 'upper'}_{how}{'_unit' if unit else ''}":
        _trsm(left, lower, how, unit)
        for left, lower, how in itertools.product((True, False), (True, False), "NTC")
        for unit in [(left + lower + "NTC".index(how)) % 2 == 1]}
def _eigh(a, b):
    """Eigenvectors and eigenvalues in one array (the last row: the eigenvalues)."""
    v, w = lax.linalg.eigh(a + jnp.conj(jnp.swapaxes(a, -1, -2)) + jnp.real(jnp.sum(b)), symmetrize_input=False)
    return jnp.concatenate([v, w[..., None, :].astype(v.dtype)], axis=-2)


def _qr(a, b):
    """Q and R of a tall matrix (geqrf, then orgqr) in one array."""
    q, r = jnp.linalg.qr(jnp.concatenate([a, jnp.swapaxes(b, -1, -2)], axis=-2))
    return jnp.concatenate([q, r], axis=-2)


def _qr_square(a, b):
    """Square: the last reflector of a real matrix is the identity (tau = 0)."""
    q, r = jnp.linalg.qr(a + jnp.sum(b))
    return jnp.concatenate([q, r], axis=-2)


OPS: dict[str, Callable] = {"cholesky": _cholesky, "lu": _lu, "eigh": _eigh, "qr": _qr, "qr_square": _qr_square,
                            **TRSM}


DOUBLE = (np.dtype(np.float64), np.dtype(np.complex128))


def float64_marked(cases: list[tuple]) -> list:
    """`cases` (name, dtype, ...) as parameters, those in float64 or complex128 marked `float64`: they
    factor or solve in double precision on the device, which a TPU cannot."""
    return [pytest.param(*case, marks=pytest.mark.float64) if np.dtype(case[1]) in DOUBLE else case for case in cases]


def case_inputs(name: str, dtype, batch: tuple[int, ...]):
    """Primals (an NxN matrix, an Nx2 one, with `batch` dimensions) and Taylor series of case `name` of OPS."""
    rng = seeded_rng(f"{name}{np.dtype(dtype).name}{batch}")
    primals = [random_array(rng, (*batch, N, N), dtype), random_array(rng, (*batch, N, 2), dtype)]
    series = [[random_array(rng, p.shape, dtype) for _ in range(ORDER)] for p in primals]
    return primals, series


# JAX's TPU lowering of cholesky is `stablehlo.cholesky` and its CUDA lowering of
# triangular_solve is `stablehlo.triangular_solve`: the same rules, compiled on CPU.
SPELLINGS = [("cholesky", "tpu"), ("trsm_left_lower_N", "cuda"), ("trsm_left_upper_N_unit", "cuda")]
VJP_SPELLINGS = [("cholesky", "tpu"), ("trsm_left_upper_T", "cuda")]


def spelling_text(name: str, platform: str, primals) -> str:
    """The StableHLO JAX emits for case `name` on `platform` (float64 inside `jax.enable_x64`)."""
    return jax.jit(OPS[name]).trace(*primals).lower(lowering_platforms=(platform,)).as_text()
