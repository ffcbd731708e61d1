"""A Pallas TPU kernel for the sparse matrix x vector product `y = A @ x`, with no gather and no scatter.

A TPU runs XLA's gathers and scatters one index at a time; this kernel does both halves of the
product on the matrix unit instead. The entries (row, column, value) go through it in chunks of
`CHUNK` entries:

- x is held in VMEM as `[K/128, 128]` rows; an entry's column `c` picks row `c // 128` by a one-hot
  product on the MXU (x split into three bfloat16 parts, so the 0/1 product reads x exactly) and lane
  `c % 128` by a select and a sum;
- the products `value * x[c]` are added into the output's windows of 128 rows by a second one-hot
  product, one per window the chunk's rows touch (the chunk's smallest to largest row).

The result does not depend on the order of the entries, but the work does: entries sorted by row
touch one or two windows a chunk, unsorted ones every window. Entries with a row or column out of
range add nothing; duplicates add up. The work grows with K (each entry reads all of x through the
MXU), so callers take the kernel only up to `MAX_COLUMNS` columns (`takes`).

`spmv` is the kernel, `spmv_reference` the same product in numpy, and `lowered_text` the kernel as
the StableHLO function `tpu-sparse-products` calls on a TPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Entries a grid step handles.
CHUNK = 512
# Lanes of a TPU vector register: x's rows and the output's windows are this long.
LANES = 128
# Most columns the kernel takes: each entry costs 3 * K multiply-adds on the MXU.
MAX_COLUMNS = 1 << 17
# Most rows: the output stays in VMEM (twice, double-buffered) for the whole product.
MAX_ROWS = 1 << 22
# The float types the kernel takes (it accumulates in float32).
DTYPES = ("float32", "bfloat16")


def takes(rows: int, columns: int, dtype: str) -> bool:
    """Whether `spmv` computes an `[rows, columns]` matrix's product with a vector of `dtype`."""
    return 0 < rows <= MAX_ROWS and 0 < columns <= MAX_COLUMNS and dtype in DTYPES


def _split3(v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """float32 `v` as three bfloat16 parts whose sum is `v` (to float32's rounding)."""
    hi = v.astype(jnp.bfloat16)
    rest = v - hi.astype(jnp.float32)
    mid = rest.astype(jnp.bfloat16)
    return hi, mid, (rest - mid.astype(jnp.float32)).astype(jnp.bfloat16)


def _kernel(first_ref, last_ref, hi_ref, lo_ref, row_ref, val_ref, x3_ref, out_ref):
    """One chunk: gather its x values, multiply, add into every output window from `first` to `last`."""
    i = pl.program_id(0)

    @pl.when(i == 0)
    def _():
        out_ref[...] = jnp.zeros_like(out_ref)

    kh = x3_ref.shape[1]
    onehot = (lax.broadcasted_iota(jnp.int32, (kh, CHUNK), 0) == hi_ref[...]).astype(jnp.bfloat16)
    g = jnp.dot(x3_ref[...], onehot, preferred_element_type=jnp.float32)  # [3 * 128, CHUNK]: x's rows
    g = g[:LANES] + g[LANES:2 * LANES] + g[2 * LANES:]
    lane = lax.broadcasted_iota(jnp.int32, (LANES, CHUNK), 0)
    xs = jnp.sum(jnp.where(lane == lo_ref[...], g, 0.0), axis=0, keepdims=True)
    hi, mid, lo = _split3(val_ref[...] * xs)
    part = lax.broadcasted_iota(jnp.int32, (8, CHUNK), 0)
    zero = jnp.zeros_like(hi)
    products = jnp.where(part == 0, hi, jnp.where(part == 1, mid, jnp.where(part == 2, lo, zero)))  # [8, CHUNK]
    rows = row_ref[...]

    def window(w, carry):
        hit = (lane == rows - w * LANES).astype(jnp.bfloat16)  # [128, CHUNK]
        sums = lax.dot_general(products, hit, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        out_ref[pl.ds(w, 1), :] += jnp.sum(sums, axis=0, keepdims=True)
        return carry

    lax.fori_loop(first_ref[i], last_ref[i] + 1, window, 0)


@functools.partial(jax.jit, static_argnames=("m", "interpret"))
def spmv(rows: jax.Array, cols: jax.Array, data: jax.Array, x: jax.Array, *, m: int,
         interpret: bool = False) -> jax.Array:
    """`y[m]` with `y[rows[e]] += data[e] * x[cols[e]]` over the entries (`interpret`: Pallas's interpreter,
    for a machine without a TPU)."""
    k = x.shape[0]
    if not takes(m, k, jnp.dtype(x.dtype).name):
        raise ValueError(f"the TPU SpMV kernel takes 1..{MAX_ROWS} rows, 1..{MAX_COLUMNS} columns and "
                         f"{' or '.join(DTYPES)} vectors, not a [{m}, {k}] matrix with a {x.dtype} vector: "
                         "check hlopt.sparse.tpu_spmv.takes first")
    nse = rows.shape[0]
    rows, cols = rows.astype(jnp.int32), cols.astype(jnp.int32)
    valid = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    data = jnp.where(valid, data.astype(jnp.float32), 0.0)
    rows, cols = jnp.clip(rows, 0, m), jnp.where(valid, cols, 0)  # clip keeps the rows' order
    chunks = max(-(-nse // CHUNK), 1)
    fill = chunks * CHUNK - nse
    rows, cols, data = (jnp.pad(v, (0, fill), constant_values=pad).reshape(chunks, 1, CHUNK)
                        for v, pad in ((rows, m), (cols, 0), (data, 0)))
    kh = -(-k // (LANES * LANES)) * LANES  # x's rows, a multiple of 128 (the product's contracted size)
    x2 = jnp.pad(x.astype(jnp.float32), (0, kh * LANES - k)).reshape(kh, LANES).T
    x3 = jnp.concatenate(_split3(x2), axis=0)  # [3 * 128, kh]
    windows = -(-(m + 1) // (8 * LANES)) * 8  # row m holds the dropped entries
    first, last = (jnp.min(rows, axis=(1, 2)) // LANES, jnp.max(rows, axis=(1, 2)) // LANES)
    entry = pl.BlockSpec((None, 1, CHUNK), lambda i, *_: (i, 0, 0))
    vmem = 2 * (x3.size * 2 + windows * LANES * 4) + 12 * kh * CHUNK + (16 << 20)
    out = pl.pallas_call(
        _kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(chunks,),
            in_specs=[entry, entry, entry, entry, pl.BlockSpec(x3.shape, lambda i, *_: (0, 0))],
            out_specs=pl.BlockSpec((windows, LANES), lambda i, *_: (0, 0))),
        out_shape=jax.ShapeDtypeStruct((windows, LANES), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",), vmem_limit_bytes=min(vmem, 100 << 20)),
        interpret=interpret,
    )(first, last, cols // LANES, cols % LANES, rows, data, x3)
    return out.reshape(-1)[:m].astype(x.dtype)


def spmv_reference(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, x: np.ndarray, m: int) -> np.ndarray:
    """`spmv` in float64 numpy: out-of-range entries dropped, duplicates added."""
    k = x.shape[0]
    ok = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    y = np.zeros(m)
    np.add.at(y, rows[ok], data[ok].astype(np.float64) * x[cols[ok]].astype(np.float64))
    return y


@functools.cache
def lowered_text(m: int, k: int, nse: int, dtype: str, index_dtype: str = "int32", *, interpret: bool = False) -> str:
    """StableHLO text of a module whose public `@main(rows[nse], cols[nse], data[nse], x[k]) -> y[m]` is `spmv`
    (compiled for a TPU; `interpret`: portable, through Pallas's interpreter)."""
    index = jax.ShapeDtypeStruct((nse,), index_dtype)
    args = (index, index, jax.ShapeDtypeStruct((nse,), dtype), jax.ShapeDtypeStruct((k,), dtype))
    lowered = jax.jit(functools.partial(spmv, m=m, interpret=interpret)).trace(*args).lower(
        lowering_platforms=("cpu",) if interpret else ("tpu",))
    return lowered.as_text()
