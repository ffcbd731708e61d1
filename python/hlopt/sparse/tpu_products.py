"""Pallas TPU kernels for sparse x dense products `y = A @ x`, with no scatter (and, for a vector, no gather).

A TPU runs XLA's gathers and scatters one index at a time; these kernels do the products' sums on
the matrix unit instead. The entries (row, column, value) go through them in chunks of `CHUNK`
entries, and each chunk's products are added into the output's windows of 128 rows by a one-hot
product on the MXU, one per window its rows touch (the chunk's smallest to largest row). Every
one-hot product reads its float32 operand as three bfloat16 parts, so the 0/1 product is exact.

- SpMV, `x[K]`: x is held in VMEM as `[K/128, 128]` rows; an entry's column `c` picks row `c // 128`
  by another one-hot product and lane `c % 128` by a select and a sum. The work grows with K (each
  entry reads all of x through the MXU): up to `MAX_COLUMNS` columns.
- SpMM, `x[K, N]`: the entries' rows of x come from XLA's gather (a row costs it what one value
  does); the output, `[M, N]`, stays in VMEM: up to `MAX_OUTPUT` elements.

The result does not depend on the order of the entries, but the work does: entries sorted by row
touch one or two windows a chunk, unsorted ones every window. Entries with a row or column out of
range add nothing; duplicates add up.

`product` is the kernels' entry point (`takes` says which products it takes), `reference` the same
product in numpy, and `lowered_text` a product as the StableHLO function `tpu-sparse-products`
calls on a TPU.
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
# Most columns of an SpMV: each entry costs 3 * K multiply-adds on the MXU.
MAX_COLUMNS = 1 << 17
# Most rows of an SpMV and elements of an SpMM's output: the output stays in VMEM (twice, double-buffered).
MAX_ROWS = 1 << 22
MAX_OUTPUT = 1 << 23
# Most columns of an SpMM's x (a chunk's rows of x stay in VMEM).
MAX_WIDTH = 1024
# The float types the kernels take (they accumulate in float32).
DTYPES = ("float32", "bfloat16")


def takes(rows: int, x_shape: tuple[int, ...], dtype: str) -> bool:
    """Whether `product` computes an `[rows, x_shape[0]]` matrix's product with an `x` of that shape and dtype."""
    if dtype not in DTYPES or not 0 < rows <= MAX_ROWS or not 0 < x_shape[0] or len(x_shape) not in (1, 2):
        return False
    if len(x_shape) == 1:
        return x_shape[0] <= MAX_COLUMNS
    return 0 < x_shape[1] <= MAX_WIDTH and (rows + 1) * x_shape[1] <= MAX_OUTPUT


def _leading_bits(v: jax.Array) -> jax.Array:
    """float32 `v` with all but the 8 leading bits of its significand cleared (a bfloat16 value), by its bits:
    XLA drops a float32 -> bfloat16 -> float32 round trip as excess precision."""
    bits = lax.bitcast_convert_type(v, jnp.int32) & jnp.int32(-(1 << 16))
    return lax.bitcast_convert_type(bits, jnp.float32)


def _split3(v: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """float32 `v` as three bfloat16 parts whose sum is exactly `v` (8 bits of its significand each)."""
    hi = _leading_bits(v)
    rest = v - hi
    mid = _leading_bits(rest)
    return hi.astype(jnp.bfloat16), mid.astype(jnp.bfloat16), (rest - mid).astype(jnp.bfloat16)


def _each_window(first_ref, last_ref, rows: jax.Array, add) -> None:
    """`add(w, hit)` for each output window `w` from this chunk's first to its last: `hit[r, e]` = 1 where
    entry e is in the window's row r, else 0 (bfloat16 `[128, CHUNK]`)."""
    i = pl.program_id(0)
    lane = lax.broadcasted_iota(jnp.int32, (LANES, CHUNK), 0)

    def window(w, carry):
        add(w, (lane == rows - w * LANES).astype(jnp.bfloat16))
        return carry

    lax.fori_loop(first_ref[i], last_ref[i] + 1, window, 0)


def _spmv_kernel(first_ref, last_ref, row_ref, val_ref, hi_ref, lo_ref, x3_ref, out_ref):
    """One chunk of an SpMV: read its x values, multiply, add into its windows (`out` rows of 128)."""
    @pl.when(pl.program_id(0) == 0)
    def _():
        out_ref[...] = jnp.zeros_like(out_ref)

    kh = x3_ref.shape[1]
    onehot = (lax.broadcasted_iota(jnp.int32, (kh, CHUNK), 0) == hi_ref[...]).astype(jnp.bfloat16)
    g = jnp.dot(x3_ref[...], onehot, preferred_element_type=jnp.float32)  # [3 * 128, CHUNK]: x's rows
    g = g[:LANES] + g[LANES:2 * LANES] + g[2 * LANES:]
    lane = lax.broadcasted_iota(jnp.int32, (LANES, CHUNK), 0)
    xs = jnp.sum(jnp.where(lane == lo_ref[...], g, 0.0), axis=0, keepdims=True)
    hi, mid, lo = (v.astype(jnp.float32) for v in _split3(val_ref[...] * xs))
    part = lax.broadcasted_iota(jnp.int32, (16, CHUNK), 0)  # a bfloat16 tile's rows: the three parts, then zeros
    products = jnp.where(part == 0, hi, jnp.where(part == 1, mid, jnp.where(part == 2, lo, 0.0))).astype(jnp.bfloat16)

    def add(w, hit):
        sums = lax.dot_general(products, hit, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        out_ref[pl.ds(w, 1), :] += jnp.sum(sums, axis=0, keepdims=True)

    _each_window(first_ref, last_ref, row_ref[...], add)


def _spmm_kernel(first_ref, last_ref, row_ref, p_ref, out_ref):
    """One chunk of an SpMM: add its products `p[CHUNK, N]` into its windows (`out` rows 128w to 128w + 127)."""
    @pl.when(pl.program_id(0) == 0)
    def _():
        out_ref[...] = jnp.zeros_like(out_ref)

    parts = _split3(p_ref[...])

    def add(w, hit):
        start = pl.multiple_of(w * LANES, LANES)
        sums = sum(jnp.dot(hit, part, preferred_element_type=jnp.float32) for part in parts)
        out_ref[pl.ds(start, LANES), :] += sums

    _each_window(first_ref, last_ref, row_ref[...], add)


@functools.partial(jax.jit, static_argnames=("m", "interpret"))
def product(rows: jax.Array, cols: jax.Array, data: jax.Array, x: jax.Array, *, m: int,
            interpret: bool = False) -> jax.Array:
    """`y[m, *x.shape[1:]]` with `y[rows[e]] += data[e] * x[cols[e]]` over the entries (`interpret`: Pallas's
    interpreter, for a machine without a TPU)."""
    k = x.shape[0]
    if not takes(m, x.shape, jnp.dtype(x.dtype).name):
        raise ValueError(f"the TPU sparse product kernels take 1..{MAX_ROWS} rows, x[K] with K <= {MAX_COLUMNS} or "
                         f"x[K, N] with N <= {MAX_WIDTH} and (rows + 1) * N <= {MAX_OUTPUT}, of "
                         f"{' or '.join(DTYPES)}, not a [{m}, {k}] matrix with a {x.dtype} x{list(x.shape)}: "
                         "check hlopt.sparse.tpu_products.takes first")
    nse = rows.shape[0]
    rows, cols = rows.astype(jnp.int32), cols.astype(jnp.int32)
    valid = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    data = jnp.where(valid, data.astype(jnp.float32), 0.0)
    rows, cols = jnp.clip(rows, 0, m), jnp.where(valid, cols, 0)  # clip keeps the rows' order
    chunks = max(-(-nse // CHUNK), 1)
    fill = chunks * CHUNK - nse
    rows, cols, data = (jnp.pad(v, (0, fill), constant_values=pad).reshape(chunks, 1, CHUNK)
                        for v, pad in ((rows, m), (cols, 0), (data, 0)))
    windows = -(-(m + 1) // (8 * LANES)) * 8  # row m holds the dropped entries
    first, last = (jnp.min(rows, axis=(1, 2)) // LANES, jnp.max(rows, axis=(1, 2)) // LANES)
    entry = pl.BlockSpec((None, 1, CHUNK), lambda i, *_: (i, 0, 0))
    whole = lambda shape: pl.BlockSpec(shape, lambda i, *_: (0,) * len(shape))  # noqa: E731
    if x.ndim == 1:
        kh = -(-k // (LANES * LANES)) * LANES  # x's rows, a multiple of 128 (the product's contracted size)
        x2 = jnp.pad(x.astype(jnp.float32), (0, kh * LANES - k)).reshape(kh, LANES).T
        x3 = jnp.concatenate(_split3(x2), axis=0)  # [3 * 128, kh]
        kernel, out_shape, operands = _spmv_kernel, (windows, LANES), (data, cols // LANES, cols % LANES, x3)
        specs = [entry, entry, entry, whole(x3.shape)]
        vmem = 2 * x3.size * 2 + 12 * kh * CHUNK
    else:
        n = x.shape[1]
        p = data.reshape(-1, 1) * x.astype(jnp.float32)[cols.reshape(-1)]  # [chunks * CHUNK, N]
        kernel, out_shape, operands = _spmm_kernel, (windows * LANES, n), (p,)
        specs = [pl.BlockSpec((CHUNK, n), lambda i, *_: (i, 0))]
        vmem = 8 * CHUNK * n * 4
    vmem += 2 * 4 * out_shape[0] * max(out_shape[1], LANES) + (16 << 20)
    out = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(chunks,), in_specs=[entry, *specs], out_specs=whole(out_shape)),
        out_shape=jax.ShapeDtypeStruct(out_shape, jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",), vmem_limit_bytes=min(vmem, 100 << 20)),
        interpret=interpret,
    )(first, last, rows, *operands)
    return out.reshape(-1, *x.shape[1:])[:m].astype(x.dtype)


def reference(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, x: np.ndarray, m: int) -> np.ndarray:
    """`product` in float64 numpy: out-of-range entries dropped, duplicates added."""
    k = x.shape[0]
    ok = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    y = np.zeros((m, *x.shape[1:]))
    products = data[ok].astype(np.float64).reshape(-1, *[1] * (x.ndim - 1)) * x[cols[ok]].astype(np.float64)
    np.add.at(y, rows[ok], products)
    return y


@functools.cache
def lowered_text(m: int, x_shape: tuple[int, ...], nse: int, dtype: str, index_dtype: str = "int32", *,
                 interpret: bool = False) -> str:
    """StableHLO text of a module whose public `@main(rows[nse], cols[nse], data[nse], x) -> y[m, *x_shape[1:]]` is
    `product` (compiled for a TPU; `interpret`: portable, through Pallas's interpreter)."""
    index = jax.ShapeDtypeStruct((nse,), index_dtype)
    args = (index, index, jax.ShapeDtypeStruct((nse,), dtype), jax.ShapeDtypeStruct(x_shape, dtype))
    lowered = jax.jit(functools.partial(product, m=m, interpret=interpret)).trace(*args).lower(
        lowering_platforms=("cpu",) if interpret else ("tpu",))
    return lowered.as_text()
