"""What hlopt compiles is as accurate as what `jax.jit` compiles, in float32 on whatever platform the
suite runs (a TPU too, `bash test/run_tpu.sh`, where an unset precision means bfloat16 passes): under
`jax.default_matmul_precision("highest")`, a triangular solve with many right-hand sides, the
Laplacian of a network and a jet of a solve are within twice jax.jit's own error of a float64 numpy
reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import hlopt

RNG = np.random.default_rng(7)
L = (np.tril(RNG.standard_normal((64, 64))) + 4 * np.eye(64)).astype(np.float32)
RHS = RNG.standard_normal((64, 256)).astype(np.float32)
W = RNG.standard_normal((16, 16)).astype(np.float32) / 4
P = RNG.standard_normal(16).astype(np.float32)


def _solve(a, b):
    return jax.scipy.linalg.solve_triangular(a, b, lower=True)


def _mlp(x):
    return jnp.sum(jnp.tanh(W @ jnp.tanh(W @ x)))


def _relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


CASES = {
    "triangular_solve": (_solve, (L, RHS),
                         scipy.linalg.solve_triangular(L.astype(np.float64), RHS.astype(np.float64), lower=True)),
    "jet_of_solve": (lambda a, b: hlopt.jet(lambda b: _solve(a, b), (b,), ((b,),))[1][0], (L, RHS),
                     scipy.linalg.solve_triangular(L.astype(np.float64), RHS.astype(np.float64), lower=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hlopt_jit_is_as_accurate_as_jax_jit(name):
    fun, args, want = CASES[name]
    with jax.default_matmul_precision("highest"):
        ours = _relative_error(hlopt.jit(fun)(*args), want)
        theirs = _relative_error(jax.jit(fun)(*args), want)
    assert ours <= 2 * theirs + 1e-7, (ours, theirs)


def test_laplacian_is_as_accurate_as_the_hessian_trace():
    with jax.default_matmul_precision("highest"):
        ours = float(hlopt.jit(hlopt.laplacian(_mlp))(P))
        theirs = float(jax.jit(lambda x: jnp.trace(jax.hessian(_mlp)(x)))(P))
    with jax.enable_x64(), jax.default_device(jax.devices("cpu")[0]):  # the float64 reference on the CPU
        want = float(jax.jit(lambda x: jnp.trace(jax.hessian(lambda y: jnp.sum(jnp.tanh(W.astype(np.float64) @ jnp.tanh(
            W.astype(np.float64) @ y))))(x)))(P.astype(np.float64)))
    assert abs(ours - want) <= 2 * abs(theirs - want) + 1e-6 * abs(want), (ours, theirs, want)
