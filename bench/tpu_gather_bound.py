"""What a sparse product can reach on an accelerator: the pieces it is made of, timed alone.

A product of a sparse matrix (`--per-row` random columns a row, float32) with a vector or a
dense matrix of 64 or 256 columns reads the dense operand's rows at random and adds products
into the output's rows. This script times, under `jax.jit` on the default device:

  copy            a plain copy of 256 MiB (read + write): the memory bandwidth programs reach
  gather x        x[idx] of a vector, one random element an entry; and read as [n/8, 8] windows,
                  each entry gathering its window and keeping its lane (tpu-sparse-products' SpMV)
  gather B        B[idx] of an [n, C] matrix, one random row an entry
  scatter-add     segment sums of one value (or one row) an entry into the output's rows, rows
                  unsorted and sorted (`indices_are_sorted`), and with 9 of 10 updates out of range
                  (dropped): whether a scatter's cost follows the updates it keeps or all it is given
  sort            the entries' (row, column, value) sorted by row
  ELL             the product of a matrix held as a dense table of `--per-row` columns a row:
                  gather, multiply, a sum over the table's rows; no scatter
  jax             jax.experimental.sparse's BCOO product

and gives each piece's bytes moved (what it reads and writes, once) a second, beside the
copy's. No product can go faster than the gather of its dense operand alone.

Usage: python bench/tpu_gather_bound.py [--rows 10000 100000 1000000] [--per-row 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as js

from record import progress, write_record


def median_s(fn: Callable, args: tuple, budget: float = 0.3, most: int = 20) -> float:
    """Median seconds of `fn(*args)` (compiled and run once first), over at least 3 calls and up to `most`
    or `budget` seconds."""
    jax.block_until_ready(fn(*args))
    times: list[float] = []
    while len(times) < 3 or (len(times) < most and sum(times) < budget):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pieces(rows: int, per_row: int, columns: int) -> list[tuple[str, Callable, tuple, int]]:
    """(name, function, arguments, bytes moved) of each piece at this size; C = `columns` (1: a vector)."""
    rng = np.random.default_rng(0)
    nse = rows * per_row
    r = np.sort(rng.integers(0, rows, nse)).astype(np.int32)
    c = rng.integers(0, rows, nse).astype(np.int32)
    perm = rng.permutation(nse)
    data = jnp.asarray(rng.standard_normal(nse, dtype=np.float32))
    rows_sorted, rows_unsorted, cols = jnp.asarray(r), jnp.asarray(r[perm]), jnp.asarray(c)
    shape = () if columns == 1 else (columns,)
    dense = jnp.asarray(rng.standard_normal((rows, *shape), dtype=np.float32))
    width = 4 * columns
    ell = jnp.asarray(c.reshape(rows, per_row))
    ell_data = data.reshape(rows, per_row)
    mat = js.BCOO((data, jnp.stack([rows_unsorted, cols], 1)), shape=(rows, rows))
    mat_sorted = js.BCOO((data, jnp.stack([rows_sorted, cols], 1)), shape=(rows, rows), indices_sorted=True)

    def gather(x, i):
        return x[i]

    def segsum(v, i, sorted_):
        return jax.ops.segment_sum(v, i, num_segments=rows, indices_are_sorted=sorted_)

    def windowed(x, i):
        w = jnp.pad(x, (0, -x.shape[0] % 8)).reshape(-1, 8)[i // 8]
        return jnp.sum(jnp.where(jnp.arange(8)[None] == (i % 8)[:, None], w, 0), axis=1)

    def mostly_dropped(v, i):
        kept = jnp.where(jnp.arange(nse) % 10 == 0, i, rows)
        return jnp.zeros((rows, *shape), v.dtype).at[kept].add(v, mode="drop")

    def ell_product(d, i, x):
        g = x[i]  # [rows, per_row, *shape]
        return jnp.sum(g * d.reshape(*d.shape, *([1] * len(shape))), axis=1)

    updates = jnp.asarray(rng.standard_normal((nse, *shape), dtype=np.float32))
    product_bytes = 12 * nse + 2 * rows * width
    windowed_pieces = [("gather (1 col, 8-lane windows)", jax.jit(windowed), (dense, cols), nse * (4 + 2 * width))]
    return [
        (f"gather ({columns} col)", jax.jit(gather), (dense, cols), nse * (4 + 2 * width)),
        *(windowed_pieces if columns == 1 else []),
        (f"scatter-add, 9 in 10 dropped ({columns} col)", jax.jit(mostly_dropped), (updates, rows_sorted),
         nse * (4 + width) // 10 + rows * width),
        (f"scatter-add unsorted ({columns} col)", jax.jit(lambda v, i: segsum(v, i, False)), (updates, rows_unsorted),
         nse * (4 + width) + rows * width),
        (f"scatter-add sorted ({columns} col)", jax.jit(lambda v, i: segsum(v, i, True)), (updates, rows_sorted),
         nse * (4 + width) + rows * width),
        (f"ELL product ({columns} col)", jax.jit(ell_product), (ell_data, ell, dense), product_bytes),
        (f"jax BCOO product ({columns} col)", jax.jit(lambda m, x: m @ x), (mat, dense), product_bytes),
        (f"jax BCOO product, sorted ({columns} col)", jax.jit(lambda m, x: m @ x), (mat_sorted, dense), product_bytes),
    ]


def sort_piece(rows: int, per_row: int) -> tuple[str, Callable, tuple, int]:
    rng = np.random.default_rng(1)
    nse = rows * per_row
    keys = jnp.asarray(rng.integers(0, rows, nse).astype(np.int32))
    cols = jnp.asarray(rng.integers(0, rows, nse).astype(np.int32))
    data = jnp.asarray(rng.standard_normal(nse, dtype=np.float32))
    fn = jax.jit(lambda k, c, d: jax.lax.sort((k, c, d), num_keys=1))
    return "sort (row, col, value) by row", fn, (keys, cols, data), 24 * nse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--per-row", type=int, default=10)
    parser.add_argument("--columns", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--note", default="", help="recorded with the figures")
    args = parser.parse_args()
    load_before = os.getloadavg()
    device = jax.devices()[0]
    src = jnp.ones((64 << 20,), jnp.float32)
    copy_s = median_s(jax.jit(lambda a: a + 1), (src,))
    copy_bw = 2 * (256 << 20) / copy_s
    print(f"{device.device_kind}: copy {copy_bw / 1e9:.1f} GB/s\n")
    print("| piece | rows | ms | GB/s | share of copy |\n| --- | ---: | ---: | ---: | ---: |")
    figures = []
    for rows in args.rows:
        todo = [sort_piece(rows, args.per_row)]
        for columns in args.columns:
            if rows * columns <= 64 << 20:
                todo += pieces(rows, args.per_row, columns)
        for name, fn, fargs, moved in todo:
            progress(f"{name}, {rows} rows")
            seconds = median_s(fn, fargs)
            rate = moved / seconds
            print(f"| {name} | {rows} | {1e3 * seconds:.3f} | {rate / 1e9:.1f} | {rate / copy_bw:.3f} |", flush=True)
            figures.append({"workload": name, "rows": rows, "per_row": args.per_row, "time_s": seconds,
                            "bytes": moved, "share_of_copy": rate / copy_bw,
                            "share_is": "bytes moved / time / copy bandwidth"})
    write_record("tpu_gather_bound", figures, load_before=load_before,
                 options={**vars(args), "copy_bytes_per_s": copy_bw})


if __name__ == "__main__":
    main()
