"""Pallas TPU kernels for sparse x dense products `y = A @ x`, with no XLA gather or scatter where x fits in VMEM.

A TPU runs XLA's gathers and scatters one index at a time. Two kernels do without them:

- Resident (SpMV, and SpMM of 64 columns or a multiple of 128): x and the output stay in VMEM (a
  block of x's columns at a time, read once), the entries pass through SMEM in chunks of
  `RESIDENT_CHUNK`, sorted by row. Each entry loads its row of x by its column index, scales it and
  adds it into a running sum of its output row, stored after every entry: the last store of a row
  holds its whole sum, in the entries' order, in float32. Narrow rows are packed into the 128 lanes
  of a vector register (two rows of 64 columns; 128 elements of a vector) and picked by lane.
- One-hot (other SpMMs, and those whose x and output do not fit in VMEM): the entries' rows of x
  come from XLA's gather, in chunks of `CHUNK` entries, each chunk's products added into the
  output's windows of 128 rows by a one-hot product on the MXU, one per window its rows touch;
  the float32 operand is read as three bfloat16 parts, so the 0/1 product is exact. The output,
  `[M, N]`, stays in VMEM: up to `MAX_OUTPUT` elements.

The result does not depend on the order of the entries: the resident kernel sorts unsorted
entries by row first (`rows_sorted` skips that), the one-hot kernel's work grows with the windows
a chunk touches. Entries with a row or column out of range add nothing; duplicates add up.

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

# Entries a grid step of the one-hot kernel handles.
CHUNK = 512
# Entries a grid step of the resident kernel handles (three SMEM blocks of them, double-buffered).
RESIDENT_CHUNK = 2048
# Entries the resident kernel loads x's rows for before it stores their sums.
GROUP = 8
# Lanes of a TPU vector register: x's rows and the output's windows are this long.
LANES = 128
# Most rows of a product.
MAX_ROWS = 1 << 22
# Most elements of the one-hot kernel's output: it stays in VMEM (twice, double-buffered).
MAX_OUTPUT = 1 << 23
# Most columns of an SpMM's x (a chunk's rows of x stay in VMEM).
MAX_WIDTH = 1024
# Most bytes of VMEM the resident kernel's block of x and of the output take together.
RESIDENT_BYTES = 100 << 20
# The float types the kernels take (they accumulate in float32).
DTYPES = ("float32", "bfloat16")


def _packed(columns: int) -> int:
    """Rows of x (of `columns` elements, 0: a vector) the resident kernel packs into one 128-lane row."""
    return LANES if columns == 0 else max(LANES // columns, 1)


def resident_width(rows: int, x_shape: tuple[int, ...]) -> int | None:
    """Columns of x a pass of the resident kernel holds in VMEM (0: x is a vector), None where it does not take the
    product: the widest block (64 columns, or a multiple of 128 dividing x's) whose x and output fit `RESIDENT_BYTES`."""
    n = x_shape[1] if len(x_shape) == 2 else 0
    widths = [0] if n == 0 else [w for w in range(n - n % LANES, 0, -LANES) if n % w == 0] + [64] * (n % 64 == 0)
    for w in widths:
        p = _packed(w)
        lanes = max(w, LANES)
        if 4 * lanes * (_padded_rows(x_shape[0], p) + _padded_rows(rows + 1, p)) <= RESIDENT_BYTES:
            return w
    return None


def _padded_rows(rows: int, packed: int) -> int:
    """Rows of a resident block holding `rows` rows packed `packed` to a row, a multiple of 8 (a register's sublanes)."""
    return -(-rows // (8 * packed)) * 8


def takes(rows: int, x_shape: tuple[int, ...], dtype: str) -> bool:
    """Whether `product` computes an `[rows, x_shape[0]]` matrix's product with an `x` of that shape and dtype."""
    if dtype not in DTYPES or not 0 < rows <= MAX_ROWS or not 0 < x_shape[0] or len(x_shape) not in (1, 2):
        return False
    if resident_width(rows, x_shape) is not None:
        return True
    return len(x_shape) == 2 and 0 < x_shape[1] <= MAX_WIDTH and (rows + 1) * x_shape[1] <= MAX_OUTPUT


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


def _place(g: jax.Array, row: jax.Array, col: jax.Array, value: jax.Array, packed: int) -> jax.Array:
    """`value * x[col]` in output row `row`'s lanes, from `g`, x's packed row holding `x[col]` (`[1, lanes]`)."""
    if packed == 1:
        return value * g
    lane = lax.broadcasted_iota(jnp.int32, g.shape, 1)
    width = LANES // packed
    if packed == LANES:  # a vector: x[col] is one lane of g
        picked = jnp.sum(jnp.where(lane == lax.rem(col, LANES), g, 0.0), axis=1, keepdims=True)
        return jnp.where(lane == lax.rem(row, LANES), value * picked, 0.0)
    # two rows a register row: x[col] is a half, moved to row's half (rolled by 64 lanes when they differ)
    half = lax.div(lane, width)
    aligned = jnp.where(half == lax.rem(col, packed), g, pltpu.roll(g, width, 1))
    return jnp.where(half == lax.rem(row, packed), value * aligned, 0.0)


def _resident_kernel(rows_ref, cols_ref, data_ref, x_hbm, out_hbm, x_ref, out_ref, sem, *, packed: int):
    """One chunk of entries, sorted by row, against one block of x's columns: `x_ref` and `out_ref` hold the
    block of x and of the output in VMEM, `packed` rows to a row."""
    block, chunk = pl.program_id(0), pl.program_id(1)

    @pl.when(chunk == 0)
    def _():
        copy = pltpu.make_async_copy(x_hbm.at[block], x_ref, sem)
        copy.start()
        out_ref[...] = jnp.zeros_like(out_ref)
        copy.wait()

    def load(q):
        """Group q's entries (row, column, value) and rows of x."""
        es = [q * GROUP + i for i in range(GROUP)]
        cols = [cols_ref[0, e] for e in es]
        return ([rows_ref[0, e] for e in es], cols, [data_ref[0, e] for e in es],
                [x_ref[pl.ds(lax.div(c, packed), 1), :] for c in cols])

    groups = RESIDENT_CHUNK // GROUP

    def group(q, carry):
        total, target, now = carry
        ahead = load(jnp.minimum(q + 1, groups - 1))  # the next group's loads go before this group's stores
        for row, col, value, g in zip(*now, strict=True):
            at = lax.div(row, packed)  # rows and columns are >= 0: no floor needed
            total = jnp.where(at == target, total, 0.0) + _place(g, row, col, value, packed)
            out_ref[pl.ds(at, 1), :] = total
            target = at
        return total, target, ahead

    first = lax.div(rows_ref[0, 0], packed)  # its sum so far: a row can span chunks
    lax.fori_loop(0, groups, group, (out_ref[pl.ds(first, 1), :], first, load(0)))

    @pl.when(chunk == pl.num_programs(1) - 1)
    def _():
        copy = pltpu.make_async_copy(out_ref, out_hbm.at[block], sem)
        copy.start()
        copy.wait()


def _resident_product(rows: jax.Array, cols: jax.Array, data: jax.Array, x: jax.Array, m: int, width: int,
                      interpret: bool) -> jax.Array:
    """`_resident_kernel` over x's blocks of `width` columns (0: x is a vector): `[m, N]` float32, entries sorted by row."""
    k, n = x.shape[0], (x.shape[1] if x.ndim == 2 else 1)
    packed, w = _packed(width), max(width, 1)
    blocks, lanes = n // w, packed * w
    kr, mr = _padded_rows(k, packed), _padded_rows(m + 1, packed)
    chunks = max(-(-rows.shape[0] // RESIDENT_CHUNK), 1)
    fill = chunks * RESIDENT_CHUNK - rows.shape[0]
    rows, cols, data = (jnp.pad(v, (0, fill), constant_values=pad).reshape(chunks, 1, RESIDENT_CHUNK)
                        for v, pad in ((rows, m), (cols, 0), (data, 0)))
    # x's column blocks, each [kr, lanes]: rows packed `packed` to a row
    xb = jnp.pad(x.astype(jnp.float32).reshape(k, n), ((0, kr * packed - k), (0, 0)))
    xb = xb.reshape(kr * packed, blocks, w).transpose(1, 0, 2).reshape(blocks, kr, lanes)
    smem = pl.BlockSpec((None, 1, RESIDENT_CHUNK), lambda j, i: (i, 0, 0), memory_space=pltpu.SMEM)
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    out = pl.pallas_call(
        functools.partial(_resident_kernel, packed=packed),
        grid=(blocks, chunks),
        in_specs=[smem, smem, smem, hbm],
        out_specs=hbm,
        out_shape=jax.ShapeDtypeStruct((blocks, mr, lanes), jnp.float32),
        scratch_shapes=[pltpu.VMEM((kr, lanes), jnp.float32), pltpu.VMEM((mr, lanes), jnp.float32),
                        pltpu.SemaphoreType.DMA(())],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary"),
                                             vmem_limit_bytes=4 * lanes * (kr + mr) + (12 << 20)),
        interpret=interpret,
    )(rows, cols, data, xb)
    return out.reshape(blocks, mr * packed, w).transpose(1, 0, 2).reshape(mr * packed, n)[:m]


def _one_hot_product(rows: jax.Array, cols: jax.Array, data: jax.Array, x: jax.Array, m: int,
                     interpret: bool) -> jax.Array:
    """`_spmm_kernel` over chunks of entries (in any order): `[m, N]` float32."""
    nse, n = rows.shape[0], x.shape[1]
    chunks = max(-(-nse // CHUNK), 1)
    fill = chunks * CHUNK - nse
    rows, cols, data = (jnp.pad(v, (0, fill), constant_values=pad) for v, pad in ((rows, m), (cols, 0), (data, 0)))
    windows = -(-(m + 1) // (8 * LANES)) * 8  # row m holds the dropped entries
    blocked = rows.reshape(chunks, 1, CHUNK)
    first, last = (jnp.min(blocked, axis=(1, 2)) // LANES, jnp.max(blocked, axis=(1, 2)) // LANES)
    p = data.reshape(-1, 1) * x.astype(jnp.float32)[cols]  # [chunks * CHUNK, N]
    out = pl.pallas_call(
        _spmm_kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(chunks,),
            in_specs=[pl.BlockSpec((None, 1, CHUNK), lambda i, *_: (i, 0, 0)),
                      pl.BlockSpec((CHUNK, n), lambda i, *_: (i, 0))],
            out_specs=pl.BlockSpec((windows * LANES, n), lambda i, *_: (0, 0))),
        out_shape=jax.ShapeDtypeStruct((windows * LANES, n), jnp.float32),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("arbitrary",),
            vmem_limit_bytes=min(8 * CHUNK * n * 4 + 2 * 4 * windows * LANES * max(n, LANES) + (16 << 20), 100 << 20)),
        interpret=interpret,
    )(first, last, blocked, p)
    return out[:m]


@functools.partial(jax.jit, static_argnames=("m", "rows_sorted", "interpret"))
def product(rows: jax.Array, cols: jax.Array, data: jax.Array, x: jax.Array, *, m: int, rows_sorted: bool = False,
            interpret: bool = False) -> jax.Array:
    """`y[m, *x.shape[1:]]` with `y[rows[e]] += data[e] * x[cols[e]]` over the entries (`rows_sorted`: the rows are
    in non-decreasing order; `interpret`: Pallas's interpreter, for a machine without a TPU)."""
    k = x.shape[0]
    if not takes(m, x.shape, jnp.dtype(x.dtype).name):
        raise ValueError(f"the TPU sparse product kernels take 1..{MAX_ROWS} rows, x[K] or x[K, N] of "
                         f"{' or '.join(DTYPES)} where x and the output fit {RESIDENT_BYTES >> 20} MiB of VMEM (N = 64 "
                         f"or a multiple of 128) or N <= {MAX_WIDTH} and (rows + 1) * N <= {MAX_OUTPUT}, not a "
                         f"[{m}, {k}] matrix with a {x.dtype} x{list(x.shape)}: check hlopt.sparse.tpu_products.takes first")
    rows, cols = rows.astype(jnp.int32), cols.astype(jnp.int32)
    valid = (rows >= 0) & (rows < m) & (cols >= 0) & (cols < k)
    data = jnp.where(valid, data.astype(jnp.float32), 0.0)
    rows, cols = jnp.clip(rows, 0, m), jnp.where(valid, cols, 0)  # clip keeps the rows' order
    width = resident_width(m, x.shape)
    if width is None:
        out = _one_hot_product(rows, cols, data, x, m, interpret)
    else:
        if not rows_sorted:
            rows, cols, data = lax.sort((rows, cols, data), num_keys=1)
        out = _resident_product(rows, cols, data, x, m, width, interpret)
    return out.reshape(m, *x.shape[1:]).astype(x.dtype)


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
    `product` of entries sorted by row, as `tpu-sparse-products` passes them (compiled for a TPU; `interpret`:
    portable, through Pallas's interpreter)."""
    index = jax.ShapeDtypeStruct((nse,), index_dtype)
    args = (index, index, jax.ShapeDtypeStruct((nse,), dtype), jax.ShapeDtypeStruct(x_shape, dtype))
    lowered = jax.jit(functools.partial(product, m=m, rows_sorted=True, interpret=interpret)).trace(*args).lower(
        lowering_platforms=("cpu",) if interpret else ("tpu",))
    return lowered.as_text()
