"""hlopt.sparse against scipy.sparse's CSR on the CPU: SpMV, SpMM, SDDMM and SpGEMM, side by side.

Both sides run in one process on the same float32 matrices, random with about `--per-row`
entries a row (and a power-law graph's adjacency for SpGEMM), hlopt's indices sorted by row as
`csr.tocoo()` gives them (`indices_sorted=True, unique_indices=True`). Calls are interleaved,
one of each side per round, the order flipped every round; the table gives each side's median
time, the ratio scipy / hlopt per round (median, min-max: above 1 means hlopt is faster), the
bytes the product must stream at the least (CSR buffers, dense operands read once, the output
written once) and the bandwidth that gives each side, next to a plain copy's (numpy, 2 x bytes
copied per second) measured in the same run, and the peak memory each side allocates for the
product (scipy: tracemalloc, which sees numpy's allocations; hlopt: the compiled program's
temporaries and outputs). hlopt's compile time (first call of `hlopt.jit`) is printed too.
The copy is measured once before and once after the products: on a loaded machine it varies
as much as the products do, so a percentage of it above 100 says the copy ran at a worse moment.

- SpMV `A @ v`, SpMM `A @ X` (X with 16, 64, 256 columns), each with A as a row-sorted BCOO and
  as a `hlopt.sparse.BCSR` (rows marked "(BCSR)", the same CSR buffers scipy reads; a case whose dense operands exceed
  `--max-dense-mb` is left out and printed as such), SDDMM: `(P @ Q)` read at A's entries
  (`bcoo_dot_general_sampled`; scipy has no SDDMM: its side is numpy on the CSR arrays, in
  chunks, as a scipy user writes it).
- SpGEMM `A @ A`: scipy's CSR product against hlopt two ways: `A @ A` called eagerly (the
  native count kernel sizes the output exactly, then the fill kernel computes it; see
  hlopt.sparse.spgemm) and, under `hlopt.jit`, `bcoo_spdot_general(A, A, nse=exact)` with traced
  indices (both kernels in the program; up to `--traced-spgemm-max-rows`). The power-law graph
  runs up to `--power-law-max-rows`, SpGEMM up to `--spgemm-max-rows`. Beside them the same
  products of `hlopt.sparse.BCSR` matrices (`bcsr_spdot_general`: CSR in, CSR out, 8 bytes an
  entry as scipy's), eagerly and under jit with nse given. The eager rows' peak
  memory is, for both sides, what the resident set grows by over one call in a fresh process
  (after a warm-up call), which sees the kernels' scratch; the jit rows' hlopt peak is XLA's
  buffers only.

`--breakdown` times, beside scipy's SpMV, the pieces any plain-StableHLO SpMV is built of, each
compiled by XLA:CPU alone (`jax.jit` on the same buffers): the gather and multiply summed to a
scalar (no output written), the same with the products written out, and the sorted scatter-add
that sums them into rows; it shows where hlopt's time goes.

scipy.sparse's CSR kernels (`_sparsetools`) are plain C++ that link no BLAS (`ldd` of the
module shows only libstdc++, libm, libc), so OPENBLAS_CORETYPE, when the machine sets it, does
not change them; its value is printed and recorded.

Run: `python bench/sparse_scipy.py [--quick] [--only NAME] [--rows 10000,100000]`.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

import hlopt
from hlopt import sparse as hs
from hlopt.passes.sparse import shapes as bcoo_shapes
from hlopt.sparse.bcsr import BCSR
from hlopt.sparse.bcsr_spgemm import bcsr_spdot_general

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import write_record  # noqa: E402

F32 = 4
I32 = 4
MM = (((1,), (0,)), ((), ()))


def random_csr(rng: np.random.Generator, n: int, per_row: int) -> sp.csr_matrix:
    """n x n, about `per_row` entries a row at uniform random columns (duplicates summed)."""
    rows = np.repeat(np.arange(n, dtype=np.int32), per_row)
    cols = rng.integers(0, n, size=n * per_row, dtype=np.int32)
    data = rng.standard_normal(n * per_row, dtype=np.float32)
    m = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    m.sum_duplicates()
    return m


def power_law_csr(rng: np.random.Generator, n: int, per_row: int, exponent: float = 0.6) -> sp.csr_matrix:
    """A symmetric Chung-Lu graph on n nodes: both endpoints of each of `n * per_row / 2` edges drawn
    with weight (node + 1) ** -exponent, so degrees follow a power law."""
    w = (np.arange(1, n + 1, dtype=np.float64)) ** -exponent
    p = w / w.sum()
    m_edges = n * per_row // 2
    a, b = rng.choice(n, m_edges, p=p).astype(np.int32), rng.choice(n, m_edges, p=p).astype(np.int32)
    data = rng.standard_normal(2 * m_edges, dtype=np.float32)
    m = sp.csr_matrix((data, (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(n, n))
    m.sum_duplicates()
    return m


def to_bcoo_buffers(m: sp.csr_matrix) -> tuple[jax.Array, jax.Array]:
    coo = m.tocoo()
    return jnp.asarray(coo.data), jnp.asarray(np.stack([coo.row, coo.col], 1).astype(np.int32))


def bcoo(shape: tuple[int, int]) -> Callable[[Any, Any], hs.BCOO]:
    return lambda d, i: hs.BCOO((d, i), shape=shape, indices_sorted=True, unique_indices=True)


def csr_bytes(m: sp.csr_matrix) -> int:
    return m.nnz * (F32 + I32) + (m.shape[0] + 1) * I32


def copy_bandwidth(mb: int = 256, reps: int = 7) -> float:
    """Bytes per second of `np.copyto` of an `mb` MiB float32 array (read + write counted)."""
    src = np.ones(mb * 2**20 // F32, np.float32)
    dst = np.empty_like(src)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return 2 * src.nbytes / statistics.median(times)


def scipy_peak(fn: Callable[[], Any]) -> int:
    """Bytes scipy allocates for one call (tracemalloc's peak over the call, its result kept)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return peak


def hlopt_peak(fn: Any, args: tuple) -> int:
    """Temporaries + outputs of hlopt's compiled program for `args`."""
    stats = fn.lower(*args).compile().executable.get_compiled_memory_stats()
    return stats.temp_size_in_bytes + stats.output_size_in_bytes


def interleaved(ref: Callable[[], Any], ours: Callable[[], Any], budget: float, min_rounds: int = 5,
                max_rounds: int = 200) -> tuple[list[float], list[float]]:
    """Per round one call of each (order flipped every round) until both spent `budget` s."""
    t_ref, t_ours = [], []
    r = 0
    while r < min_rounds or (r < max_rounds and min(sum(t_ref), sum(t_ours)) < budget):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            start = time.perf_counter()
            if side == 0:
                ref()
                t_ref.append(time.perf_counter() - start)
            else:
                jax.block_until_ready(ours())
                t_ours.append(time.perf_counter() - start)
        r += 1
    return t_ref, t_ours


def measure(name: str, rows: int, nnz: int, bytes_: int, copy_bw: float, ref: Callable[[], Any],
            ours: Callable[[], Any], ours_jit: Any | None, ours_args: tuple, budget: float, compile_s: float,
            ours_peak: int | None = None) -> dict:
    t_ref, t_ours = interleaved(ref, ours, budget)
    ratios = [a / b for a, b in zip(t_ref, t_ours)]
    s_ref, s_ours = statistics.median(t_ref), statistics.median(t_ours)
    peak_ours = ours_peak if ours_peak is not None else hlopt_peak(ours_jit, ours_args)
    row = {"workload": name, "rows": rows, "nnz": nnz, "scipy_s": s_ref, "hlopt_s": s_ours,
           "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "ratio_is": "scipy / hlopt", "rounds": len(ratios), "bytes": bytes_,
           "scipy_bw_of_copy": bytes_ / s_ref / copy_bw, "hlopt_bw_of_copy": bytes_ / s_ours / copy_bw,
           "scipy_peak_bytes": scipy_peak(ref), "hlopt_peak_bytes": peak_ours, "hlopt_compile_s": compile_s}
    print(format_row(row), flush=True)
    return row


HEADER = ("| product | rows | nnz | scipy ms | hlopt ms | scipy / hlopt (min-max) | MB streamed "
          "| scipy, hlopt bandwidth (% of copy) | peak MB scipy, hlopt | compile s |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def format_row(r: dict) -> str:
    return (f"| {r['workload']} | {r['rows']:.0e} | {r['nnz']:.2e} | {r['scipy_s'] * 1e3:.3f} | "
            f"{r['hlopt_s'] * 1e3:.3f} | {r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
            f"{r['bytes'] / 1e6:.1f} | {100 * r['scipy_bw_of_copy']:.0f}%, {100 * r['hlopt_bw_of_copy']:.0f}% | "
            f"{r['scipy_peak_bytes'] / 2**20:.1f}, {r['hlopt_peak_bytes'] / 2**20:.1f} | {r['hlopt_compile_s']:.2f} |")


def compiled(fn: Callable, args: tuple) -> tuple[Any, float]:
    """`hlopt.jit(fn)` and the seconds its first call (lowering, passes, XLA compile) took."""
    jitted = hlopt.jit(fn)
    start = time.perf_counter()
    jax.block_until_ready(jitted(*args))
    return jitted, time.perf_counter() - start


def dense_products(m: sp.csr_matrix, rng: np.random.Generator, widths: list[int], max_dense_mb: float,
                   copy_bw: float, budget: float, only: str) -> list[dict]:
    n, nnz = m.shape[0], m.nnz
    d, i = to_bcoo_buffers(m)
    A = bcoo(m.shape)
    base = csr_bytes(m)
    csr = hs.BCSR.from_scipy_sparse(m)  # the same matrix as CSR: 8 B an entry where BCOO streams 12
    figures = []
    if only in "SpMV":
        v_np = rng.standard_normal(n, dtype=np.float32)
        v = jnp.asarray(v_np)
        f, c = compiled(lambda d, i, v: A(d, i) @ v, (d, i, v))
        figures.append(measure("SpMV", n, nnz, base + 2 * n * F32, copy_bw, lambda: m @ v_np,
                               lambda: f(d, i, v), f, (d, i, v), budget, c))
        f, c = compiled(lambda a, v: a @ v, (csr, v))
        figures.append(measure("SpMV (BCSR)", n, nnz, base + 2 * n * F32, copy_bw, lambda: m @ v_np,
                               lambda: f(csr, v), f, (csr, v), budget, c))
    for k in widths:
        if only not in f"SpMM x {k}":
            continue
        if 2 * n * k * F32 / 2**20 > max_dense_mb:
            print(f"| SpMM x {k} | {n:.0e} | left out: dense operands over {max_dense_mb:.0f} MB |", flush=True)
            continue
        x_np = rng.standard_normal((n, k), dtype=np.float32)
        x = jnp.asarray(x_np)
        f, c = compiled(lambda d, i, x: A(d, i) @ x, (d, i, x))
        figures.append(measure(f"SpMM x {k}", n, nnz, base + 2 * n * k * F32, copy_bw, lambda: m @ x_np,
                               lambda: f(d, i, x), f, (d, i, x), budget, c))
        f, c = compiled(lambda a, x: a @ x, (csr, x))
        figures.append(measure(f"SpMM x {k} (BCSR)", n, nnz, base + 2 * n * k * F32, copy_bw, lambda: m @ x_np,
                               lambda: f(csr, x), f, (csr, x), budget, c))
    if only in "SDDMM x 16":
        k = 16
        p_np = rng.standard_normal((n, k), dtype=np.float32)
        q_np = rng.standard_normal((k, n), dtype=np.float32)
        qt = np.ascontiguousarray(q_np.T)
        coo = m.tocoo()
        r_np, c_np = coo.row, coo.col
        p, q = jnp.asarray(p_np), jnp.asarray(q_np)
        mm = (((1,), (0,)), ((), ()))

        def ref() -> np.ndarray:
            out = np.empty(nnz, np.float32)
            step = 1 << 18
            for s in range(0, nnz, step):
                out[s:s + step] = np.einsum("ij,ij->i", p_np[r_np[s:s + step]], qt[c_np[s:s + step]])
            return out

        f, c = compiled(lambda p, q, i: hs.bcoo_dot_general_sampled(p, q, i, dimension_numbers=mm), (p, q, i))
        figures.append(measure(f"SDDMM x {k}", n, nnz, nnz * (F32 + 2 * I32) + 2 * n * k * F32, copy_bw, ref,
                               lambda: f(p, q, i), f, (p, q, i), budget, c))
    return figures


def breakdown(m: sp.csr_matrix, rng: np.random.Generator, copy_bw: float, budget: float) -> list[dict]:
    """scipy's SpMV against the pieces of an XLA:CPU one, each compiled alone."""
    n, nnz = m.shape[0], m.nnz
    coo = m.tocoo()
    d, r, c = jnp.asarray(coo.data), jnp.asarray(coo.row), jnp.asarray(coo.col)
    v_np = rng.standard_normal(n, dtype=np.float32)
    v = jnp.asarray(v_np)
    pieces = {
        "gather x[col] * data, summed": (lambda d, c, v: jnp.sum(d * v[c]), (d, c, v), nnz * (F32 + I32) + n * F32),
        "gather x[col] * data, written": (lambda d, c, v: d * v[c], (d, c, v), nnz * (2 * F32 + I32) + n * F32),
        "sorted scatter-add into rows": (
            lambda d, r, c, v: jnp.zeros(n, jnp.float32).at[r].add(d * v[c], indices_are_sorted=True),
            (d, r, c, v), csr_bytes(m) + 2 * n * F32),
    }
    figures = []
    for name, (fn, args, bytes_) in pieces.items():
        jitted = jax.jit(fn)
        start = time.perf_counter()
        jax.block_until_ready(jitted(*args))
        comp = time.perf_counter() - start
        peak = jitted.lower(*args).compile().memory_analysis()
        figures.append(measure(f"SpMV piece: {name}", n, nnz, bytes_, copy_bw, lambda: m @ v_np,
                               lambda: jitted(*args), None, (), budget, comp,
                               ours_peak=peak.temp_size_in_bytes + peak.output_size_in_bytes))
    return figures


def spgemm(name: str, m: sp.csr_matrix, copy_bw: float, budget: float, traced: bool) -> list[dict]:
    """`A @ A` eagerly (exact structure on the host, then values) and, if `traced`, under jit with nse given."""
    n = m.shape[0]
    d, i = to_bcoo_buffers(m)
    shape = m.shape
    out = m @ m
    exact = out.nnz
    bytes_ = 2 * csr_bytes(m) + csr_bytes(out)
    A = hs.BCOO((d, i), shape=shape, indices_sorted=True, unique_indices=True)
    mm = MM
    figures = []
    start = time.perf_counter()
    jax.block_until_ready((A @ A).data)
    first = time.perf_counter() - start
    eager_peak = _eager_peak(A)
    row = measure(f"SpGEMM {name}, eager A @ A", n, m.nnz, bytes_, copy_bw, lambda: m @ m,
                  lambda: (A @ A).data, None, (), budget, first, ours_peak=eager_peak)
    row["scipy_peak_bytes"] = _rss_growth_in_subprocess("scipy", A)  # the same measure as hlopt's
    row["peak_is"] = "resident-set growth over one call, fresh process, after a warm-up call"
    print(f"|   (peak as resident-set growth over one call: scipy {row['scipy_peak_bytes'] / 2**20:.1f} MB, "
          f"hlopt {eager_peak / 2**20:.1f} MB) |", flush=True)
    figures.append(row)
    C = BCSR.from_scipy_sparse(m)
    jax.block_until_ready(bcsr_spdot_general(C, C).data)
    csr_peak = _rss_growth_in_subprocess("hlopt-bcsr", A)
    row = measure(f"SpGEMM {name}, eager BCSR @ BCSR", n, m.nnz, bytes_, copy_bw, lambda: m @ m,
                  lambda: bcsr_spdot_general(C, C).data, None, (), budget, first, ours_peak=csr_peak)
    row["scipy_peak_bytes"] = figures[-1]["scipy_peak_bytes"]
    row["peak_is"] = figures[-1]["peak_is"]
    print(f"|   (peak as resident-set growth over one call: scipy {row['scipy_peak_bytes'] / 2**20:.1f} MB, "
          f"hlopt BCSR {csr_peak / 2**20:.1f} MB) |", flush=True)
    figures.append(row)
    if not traced:
        return figures
    fc, cc = compiled(lambda d, i, p: _csr_bufs(bcsr_spdot_general(BCSR((d, i, p), shape=shape),
                                                                   BCSR((d, i, p), shape=shape), nse=exact)),
                      (C.data, C.indices, C.indptr))
    figures.append(measure(f"SpGEMM {name}, jit BCSR, nse given", n, m.nnz, bytes_, copy_bw, lambda: m @ m,
                           lambda: fc(C.data, C.indices, C.indptr), fc, (C.data, C.indices, C.indptr), budget, cc))
    B = bcoo(shape)
    f, c = compiled(lambda d, i: _bufs(hs.bcoo_spdot_general(B(d, i), B(d, i), dimension_numbers=mm, nse=exact)),
                    (d, i))
    figures.append(measure(f"SpGEMM {name}, jit, nse given", n, m.nnz, bytes_, copy_bw, lambda: m @ m,
                           lambda: f(d, i), f, (d, i), budget, c))
    return figures


def _eager_peak(A: hs.BCOO) -> int:
    """Eager `A @ A`'s peak: what the process's resident memory grows by over one call (the
    kernels' scratch and XLA's buffers alike), in a fresh process (`spgemm_rss_growth`)."""
    return _rss_growth_in_subprocess("hlopt", A)


def _rss_growth_in_subprocess(side: str, A: hs.BCOO) -> int:
    """`spgemm_rss_growth` of `side` on A's buffers, run by this script in a fresh process."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "a.npz")
        np.savez(path, data=np.asarray(A.data), indices=np.asarray(A.indices), shape=np.asarray(A.shape))
        out = subprocess.run([sys.executable, __file__, "--rss-growth", side, path], check=True,
                             capture_output=True, text=True).stdout
    return int(out.split()[-1])


def spgemm_rss_growth(side: str, path: str) -> int:
    """Bytes this process's peak resident set grows by over one `A @ A` after a warm-up call
    (compiles and allocator pools excluded): VmHWM reset through /proc/self/clear_refs. The
    warm-up's result is freed and glibc's free heap handed back to the system (`malloc_trim`)
    first: pages kept from it would hold part of the measured call's allocations unseen (scipy's
    growth read below the bytes its own result takes without it)."""
    with np.load(path) as f:
        data, indices, shape = f["data"], f["indices"], tuple(int(s) for s in f["shape"])
    if side == "scipy":
        m = sp.csr_matrix((data, (indices[:, 0], indices[:, 1])), shape=shape)
        product = lambda: m @ m  # noqa: E731
    elif side == "hlopt-bcsr":
        C = BCSR.from_scipy_sparse(sp.csr_matrix((data, (indices[:, 0], indices[:, 1])), shape=shape))
        product = lambda: jax.block_until_ready(bcsr_spdot_general(C, C).data)  # noqa: E731
    else:
        A = hs.BCOO((jnp.asarray(data), jnp.asarray(indices)), shape=shape, indices_sorted=True, unique_indices=True)
        product = lambda: jax.block_until_ready((A @ A).data)  # noqa: E731
    out = product()
    del out
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    out = product()
    return (_status_kib("VmHWM") - before) * 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _layout(A: hs.BCOO) -> Any:
    return bcoo_shapes.layout(A.shape, A.data.shape, A.indices.shape)


def _bufs(m: hs.BCOO) -> tuple[jax.Array, jax.Array]:
    return m.data, m.indices


def _csr_bufs(m: BCSR) -> tuple[jax.Array, jax.Array, jax.Array]:
    return m.data, m.indices, m.indptr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="rows 1e4 and 1e5 only, shorter timing")
    parser.add_argument("--rows", default="", help="comma-separated row counts (default 1e4,1e5,1e6)")
    parser.add_argument("--per-row", type=int, default=10, help="entries a row of the SpMV/SpMM/SDDMM matrices")
    parser.add_argument("--spgemm-per-row", type=int, default=5, help="entries a row of the SpGEMM operands")
    parser.add_argument("--spgemm-max-rows", type=int, default=100_000,
                        help="largest SpGEMM operand (rows); larger sizes run the other products only")
    parser.add_argument("--traced-spgemm-max-rows", type=int, default=100_000,
                        help="largest SpGEMM run under jit with traced indices")
    parser.add_argument("--power-law-max-rows", type=int, default=100_000, help="largest power-law SpGEMM")
    parser.add_argument("--rss-growth", nargs=2, metavar=("SIDE", "NPZ"),
                        help="internal: print spgemm_rss_growth(SIDE, NPZ) (the SpGEMM peak, in a fresh process)")
    parser.add_argument("--max-dense-mb", type=float, default=600,
                        help="leave out SpMM whose dense operands exceed this")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of calls per side per product, at least")
    parser.add_argument("--breakdown", action="store_true", help="also time the pieces of an XLA:CPU SpMV")
    parser.add_argument("--no-spgemm", action="store_true", help="leave out SpGEMM (SpMV, SpMM and SDDMM only)")
    parser.add_argument("--only", default="",
                        help="run only products whose name contains this (SpMV, SpMM, SpMM x 64, SDDMM, SpGEMM)")
    args = parser.parse_args()
    if args.rss_growth:
        print(spgemm_rss_growth(*args.rss_growth))
        return
    load_before = os.getloadavg()
    sizes = [int(float(s)) for s in args.rows.split(",")] if args.rows else (
        [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    budget = 0.2 if args.quick else args.budget
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    print(f"load average {load_before[0]:.2f}; OPENBLAS_CORETYPE={coretype!r} "
          "(scipy.sparse's CSR kernels link no BLAS)")
    copy_bw = copy_bandwidth()
    print(f"copy bandwidth (np.copyto of 256 MiB, read + write): {copy_bw / 1e9:.2f} GB/s\n")
    print(HEADER)
    figures: list[dict] = []
    rng = np.random.default_rng(0)
    for n in sizes:
        figures += dense_products(random_csr(rng, n, args.per_row), rng, [16, 64, 256], args.max_dense_mb,
                                      copy_bw, budget, args.only)
        if args.breakdown:
            figures += breakdown(random_csr(rng, n, args.per_row), rng, copy_bw, budget)
        if args.only in "SpGEMM" and n <= args.spgemm_max_rows and not args.no_spgemm:
            traced = n <= args.traced_spgemm_max_rows
            figures += spgemm("random", random_csr(rng, n, args.spgemm_per_row), copy_bw, budget, traced)
            if n <= args.power_law_max_rows:
                figures += spgemm("power-law", power_law_csr(rng, n, args.spgemm_per_row), copy_bw, budget, traced)
    copy_after = copy_bandwidth()
    print(f"\ncopy bandwidth after: {copy_after / 1e9:.2f} GB/s; load average {os.getloadavg()[0]:.2f}")
    write_record("sparse_scipy", figures, load_before=load_before, packages=("scipy",),
                 options={**vars(args), "copy_bytes_per_s": copy_bw, "copy_bytes_per_s_after": copy_after,
                          "OPENBLAS_CORETYPE": coretype})


if __name__ == "__main__":
    main()
