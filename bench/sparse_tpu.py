"""hlopt's sparse products against jax.experimental.sparse on the device JAX computes on (a TPU).

For SpMV and SpMM (64 and 256 columns) of a random matrix (`--per-row` random entries a row,
float32; BCOO with entries sorted by row and not, and BCSR), hlopt.jit of `A @ x` (on a TPU,
`tpu-sparse-products`) and jax.jit of JAX's BCOO product run on the same buffers in one
process: `--rounds` rounds, each timing both sides (the order flipped every round), the ratio
JAX / hlopt per round and its median. Where hlopt takes its Pallas kernels, a third side times
hlopt's gather and scatter-add formulation of the same product (the kernel unregistered), its
ratio to the kernel recorded as `fallback_over_kernel`. Each product's bytes (12 an entry, x and the output once)
a second are given as a share of a plain copy's bandwidth, and its time as a share of the gather limit: XLA's
gather of the entries' rows of x alone (`x[cols]`, timed in the same rounds; bench/tpu_gather_bound.py
measures the pieces), `share_of_gather` = gather time / hlopt's time (above 1: faster than XLA can gather x).

Usage: python bench/sparse_tpu.py [--rows 1000 10000 100000 1000000] [--columns 0 64 256] [--rounds 9]
[--layouts BCOO "BCOO sorted" BCSR] (`--columns 0`: SpMV). Every row goes into a record under `bench/results/sparse_tpu/` with the device's
kind, written again after each row, so a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import os
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from hlopt.passes.tpu import sparse_products
from hlopt.sparse import tpu_products
from record import median_seconds, progress, write_record


def matrix(rng: np.random.Generator, rows: int, per_row: int, sort: bool) -> tuple[jax.Array, jax.Array]:
    nse = rows * per_row
    idx = np.stack([rng.integers(0, rows, nse), rng.integers(0, rows, nse)], 1).astype(np.int32)
    if sort:
        idx = idx[np.lexsort(idx.T[::-1])]
    return jnp.asarray(rng.standard_normal(nse, dtype=np.float32)), jnp.asarray(idx)


LAYOUTS = ("BCOO", "BCOO sorted", "BCSR")


def programs(shape: tuple[int, int], layout: str) -> tuple[object, object]:
    """hlopt.jit's and jax.jit's `A @ x` of the layout's buffers."""
    if layout == "BCSR":
        return (hlopt.jit(lambda d, i, p, v: hs.BCSR((d, i, p), shape=shape) @ v),
                jax.jit(lambda d, i, p, v: js.BCSR((d, i, p), shape=shape) @ v))
    sort = layout != "BCOO"
    return (hlopt.jit(lambda d, i, v: hs.BCOO((d, i), shape=shape, indices_sorted=sort) @ v),
            jax.jit(lambda d, i, v: js.BCOO((d, i), shape=shape, indices_sorted=sort) @ v))


def compare(rows: int, per_row: int, columns: int | None, layout: str, rounds: int, calls: int) -> dict:
    rng = np.random.default_rng(rows)
    data, idx = matrix(rng, rows, per_row, layout != "BCOO")
    x = jnp.asarray(rng.standard_normal((rows,) if columns is None else (rows, columns), dtype=np.float32))
    shape = (rows, rows)
    if layout == "BCSR":
        m = js.BCSR.from_bcoo(js.BCOO((data, idx), shape=shape, indices_sorted=True))
        args = (m.data, m.indices, m.indptr, x)
    else:
        args = (data, idx, x)
    ours, ref = programs(shape, layout)
    sides = {"hlopt": (ours, args), "jax": (ref, args)}
    if tpu_products.takes(rows, x.shape, "float32"):
        kernel = sparse_products.register_product_kernel(None)
        sides["fallback"] = (programs(shape, layout)[0], args)
        sides["fallback"][0](*args)  # compiled now, without the kernel
        sparse_products.register_product_kernel(kernel)
    want = np.asarray(ref(*args))
    for f, f_args in sides.values():
        np.testing.assert_allclose(np.asarray(f(*f_args)), want, rtol=1e-3, atol=1e-3)
    sides["gather"] = (jax.jit(lambda v, c: v[c]), (x, idx[:, 1]))
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            times[name].append(median_seconds(*sides[name], calls))
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))  # noqa: E731
    width = 1 if columns is None else columns
    moved = 12 * rows * per_row + 2 * 4 * rows * width
    hlopt_s = statistics.median(times["hlopt"])
    figure = {"workload": "SpMV" if columns is None else f"SpMM x {columns}", "layout": layout, "rows": rows,
              "per_row": per_row, "hlopt_s": hlopt_s, "jax_s": statistics.median(times["jax"]),
              "ratio": ratio("jax", "hlopt"), "ratio_is": "median over rounds of jax / hlopt",
              "hlopt_bytes_per_s": moved / hlopt_s, "gather_s": statistics.median(times["gather"]),
              "share_of_gather": ratio("gather", "hlopt")}
    if "fallback" in times:
        figure |= {"kernel": True, "fallback_s": statistics.median(times["fallback"]),
                   "fallback_over_kernel": ratio("fallback", "hlopt")}
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--columns", type=int, nargs="+", default=[0, 64, 256], help="x's columns; 0: a vector (SpMV)")
    parser.add_argument("--per-row", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=5, help="calls timed a side a round")
    parser.add_argument("--copy-bytes-per-s", type=float, default=None,
                        help="a copy's bandwidth (bench/tpu_gather_bound.py's record); measured here if not given")
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    copy_bw = args.copy_bytes_per_s
    if copy_bw is None:
        src = jnp.ones((64 << 20,), jnp.float32)
        copy_bw = 2 * (256 << 20) / median_seconds(jax.jit(lambda a: a + 1), (src,), 10)
    print(f"{jax.devices()[0].device_kind}: copy {copy_bw / 1e9:.1f} GB/s\n")
    print("| product | layout | rows | hlopt ms | jax ms | jax / hlopt | GB/s | share of copy | share of gather |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    figures, path = [], None
    for rows in args.rows:
        for columns in [c or None for c in args.columns]:
            for layout in args.layouts:
                progress(f"{rows} rows, {columns} columns, {layout}")
                f = compare(rows, args.per_row, columns, layout, args.rounds, args.calls)
                f["share_of_copy"] = f["hlopt_bytes_per_s"] / copy_bw
                figures.append(f)
                print(f"| {f['workload']} | {layout} | {rows} | {1e3 * f['hlopt_s']:.3f} | {1e3 * f['jax_s']:.3f} "
                      f"| {f['ratio']:.2f} | {f['hlopt_bytes_per_s'] / 1e9:.1f} | {f['share_of_copy']:.3f} "
                      f"| {f['share_of_gather']:.2f} |", flush=True)
                path = write_record("sparse_tpu", figures, load_before=load_before,
                                    options={**vars(args), "copy_bytes_per_s": copy_bw}, path=path)


if __name__ == "__main__":
    main()
