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
    """Random values of `dtype`, converted in numpy and put on the device (jnp.asarray of a numpy array
    compiles a program per shape and dtype)."""
    if dtype == "int32":
        values = rng.randint(-4, 5, size=shape)
    elif dtype == "complex64":
        values = rng.randn(*shape) + 1j * rng.randn(*shape)
    else:
        values = rng.randn(*shape)
    return jax.device_put(np.asarray(values).astype(jnp.dtype(dtype)))


def dense(data, indices, shape: tuple[int, ...]) -> np.ndarray:
    """The dense array of BCOO buffers in numpy, the reference: duplicates summed, entries with an
    out-of-range index (padding) dropped, batch dims of size 1 broadcast."""
    data, indices = np.asarray(data), np.asarray(indices).astype(np.int64)
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    batch, sparse = tuple(shape[:n_batch]), np.array(shape[n_batch:n_batch + n_sparse])
    nse = indices.shape[-2]
    entries = int(np.prod(batch)) * nse
    data = np.broadcast_to(data, (*batch, *data.shape[n_batch:])).reshape(entries, *data.shape[n_batch + 1:])
    cols = np.broadcast_to(indices, (*batch, nse, n_sparse)).reshape(entries, n_sparse)
    rows = np.indices((*batch, nse)).reshape(n_batch + 1, -1)[:n_batch]
    keep = np.all((cols >= 0) & (cols < sparse), axis=1)
    dims = (*batch, *sparse)
    strides = np.cumprod((1, *dims[::-1]))[:-1][::-1].astype(np.int64)
    position = (np.concatenate([rows, cols.T], 0)[:, keep] * strides[:, None]).sum(0)
    out = np.zeros((int(np.prod(dims)), *shape[len(dims):]), data.dtype)
    np.add.at(out, position, data[keep])
    return out.reshape(shape)


def dense_of(m) -> np.ndarray:
    """`dense` of a BCOO's buffers (hlopt's or JAX's)."""
    return dense(m.data, m.indices, m.shape)


def fromdense_nse(x: np.ndarray, n_batch: int = 0, n_dense: int = 0) -> int:
    """The nse BCOO.fromdense picks by default (the most nonzeros of a batch), for calls under jit."""
    x = np.asarray(x)
    blocks = x.reshape(int(np.prod(x.shape[:n_batch])), *x.shape[n_batch:])
    nonzero = np.any(blocks != 0, axis=tuple(range(blocks.ndim - n_dense, blocks.ndim)))
    return int(nonzero.reshape(len(blocks), -1).sum(1).max(initial=0))


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
