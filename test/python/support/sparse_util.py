"""Shared inputs for the sparse tests: BCOO buffers with padding and duplicates, in every layout."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

from hlopt import sparse as hs

# (n_batch, n_dense) over a rank-4 shape: every layout JAX allows with n_sparse >= 1.
LAYOUTS = [(nb, nd) for nb in range(3) for nd in range(2)]
SHAPE = (2, 3, 4, 2)
DTYPES = ["float32", "float64", "int32", "complex64", "bfloat16"]


@pytest.fixture(autouse=True)
def strict_promotion():
    """JAX's own test settings, in every module that imports this fixture: no implicit rank
    promotion and strict dtype promotion, so product code cannot rely on either."""
    with jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"):
        yield


def x64(dtype: str) -> contextlib.AbstractContextManager:
    """float64 needs x64 enabled, scoped to the test."""
    return jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()


def random_data(rng: np.random.RandomState, shape: tuple[int, ...], dtype: str) -> jax.Array:
    if dtype == "int32":
        return jnp.asarray(rng.randint(-4, 5, size=shape), jnp.int32)
    if dtype == "complex64":
        return jnp.asarray(rng.randn(*shape) + 1j * rng.randn(*shape), jnp.complex64)
    return jnp.asarray(rng.randn(*shape), dtype)


def buffers(rng: np.random.RandomState, shape=SHAPE, n_batch=0, n_dense=0, nse=6, dtype="float32",
            padding=True, duplicates=True, indices_batch=None, data_batch=None):
    """(data, indices) with a duplicated entry, a padding entry and a half-padding entry.

    `indices_batch` / `data_batch` give batch dims of size 1 (broadcast buffers).
    """
    n_sparse = len(shape) - n_batch - n_dense
    batch, sparse, dense = shape[:n_batch], shape[n_batch : n_batch + n_sparse], shape[n_batch + n_sparse :]
    ib = tuple(indices_batch or batch)
    db = tuple(data_batch or batch)
    idx = np.stack([rng.randint(0, s, size=(*ib, nse)) for s in sparse], -1) if n_sparse else np.zeros((*ib, nse, 0))
    if duplicates and nse >= 2:
        idx[..., 1, :] = idx[..., 0, :]
    if padding and n_sparse and nse >= 3:
        idx[..., 2, :] = np.array(sparse)
    if padding and n_sparse and nse >= 4:
        idx[..., 3, 0] = sparse[0]
    return random_data(rng, (*db, nse, *dense), dtype), jnp.asarray(idx, jnp.int32)


def pair(bufs, shape, **flags) -> tuple[hs.BCOO, js.BCOO]:
    """The same buffers as an hlopt BCOO and a jax.experimental.sparse BCOO."""
    return hs.BCOO(bufs, shape=shape, **flags), js.BCOO(bufs, shape=shape, **flags)


def tolerance(dtype: str) -> dict[str, float]:
    return {
        "bfloat16": dict(rtol=2e-2, atol=2e-2),
        "float32": dict(rtol=1e-5, atol=1e-5),
        "complex64": dict(rtol=1e-5, atol=1e-5),
        "float64": dict(rtol=1e-12, atol=1e-12),
        "int32": dict(rtol=0, atol=0),
    }[dtype]


def assert_close(got, want, dtype: str = "float32") -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if dtype == "bfloat16":
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_allclose(got, want, **tolerance(dtype))
