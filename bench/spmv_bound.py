"""What a random-column SpMV can reach on this CPU: its pieces in plain C++, next to hlopt's SpMV.

bench/sparse_scipy.py gives each SpMV's bandwidth as a share of a plain copy's. This script
builds `bench/spmv_bound.cc` with the system's C++ compiler (`$CXX`, else `c++`; `-O3
-march=native`) and times, on all cores, on a matrix like sparse_scipy.py's (float32, `--per-row`
random columns a row, sorted within rows):

  stream   the matrix's two arrays read and summed (no gather, nothing written)
  gather   x[column] summed over every entry (no matrix values, nothing written), without
           software prefetch and with three prefetch schedules (into L1 64 entries ahead, into
           L2 256 ahead, both)
  spmv     y = A x in CSR, without prefetch and with hlopt's (runtime/native/csr.cc)

each as a share of a copy's bandwidth (256 MiB memcpy, read + write), counting the bytes as
sparse_scipy.py counts an SpMV's (8 bytes an entry, the row pointers, x and y once). Beside them,
hlopt's SpMV of a `hlopt.sparse.BCSR` of the same size and kind (median time of `--calls` calls,
before and after the C++ program runs) on the same scale. No SpMV can go faster than the gather
of its x alone.

Usage: python bench/spmv_bound.py [--rows 1000000] [--per-row 10] [--calls 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import hlopt  # noqa: E402
from hlopt.sparse.bcsr import BCSR  # noqa: E402
from record import write_record  # noqa: E402
from sparse_scipy import random_csr  # noqa: E402

SOURCE = Path(__file__).resolve().parent / "spmv_bound.cc"


def build(workdir: str) -> str:
    """The path of the built program."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        sys.exit("spmv_bound.py: no C++ compiler found (set CXX)")
    exe = os.path.join(workdir, "spmv_bound")
    subprocess.run([compiler, "-O3", "-march=native", "-std=c++17", "-pthread", str(SOURCE), "-o", exe], check=True)
    return exe


def hlopt_spmv(rows: int, per_row: int, calls: int) -> Callable[[], float]:
    """A timer of hlopt's BCSR SpMV on a random matrix of `rows` rows, `per_row` a row: each call
    gives the median seconds of `calls` calls (the matrix built and the SpMV compiled once)."""
    rng = np.random.default_rng(0)
    A = BCSR.from_scipy_sparse(random_csr(rng, rows, per_row))
    v = jax.device_put(rng.standard_normal(rows, dtype=np.float32))
    f = hlopt.jit(lambda m, x: m @ x)
    jax.block_until_ready(f(A, v))

    def median_s() -> float:
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            jax.block_until_ready(f(A, v))
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return median_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-row", type=int, default=10)
    parser.add_argument("--calls", type=int, default=30, help="hlopt SpMV calls timed, before and after")
    parser.add_argument("--note", default="", help="recorded with the figures")
    args = parser.parse_args()
    load_before = os.getloadavg()
    hlopt.set_cache_dir(None)
    threads = os.cpu_count() or 1
    timer = hlopt_spmv(args.rows, args.per_row, args.calls)
    before = timer()
    with tempfile.TemporaryDirectory() as workdir:
        out = subprocess.run([build(workdir), str(args.rows), str(args.per_row), str(threads)], check=True,
                             capture_output=True, text=True).stdout
    after = timer()
    times = {name: float(value) for name, value in (line.split() for line in out.splitlines())}
    copy_bw = 2 * (256 << 20) / times.pop("copy")
    nnz = args.rows * args.per_row
    spmv_bytes = 8 * nnz + 4 * (args.rows + 1) + 2 * 4 * args.rows
    times["hlopt_bcsr_spmv"] = min(before, after)
    print(f"{args.rows} rows x {args.per_row} random columns, float32, {threads} threads; "
          f"copy {copy_bw / 1e9:.1f} GB/s; an SpMV's bytes {spmv_bytes / 1e6:.1f} MB\n")
    print("| piece | ms | share of copy bandwidth |\n| --- | ---: | ---: |")
    figures = []
    for name, seconds in times.items():
        share = spmv_bytes / seconds / copy_bw
        print(f"| {name} | {1e3 * seconds:.3f} | {share:.2f} |")
        figures.append({"workload": name, "rows": args.rows, "per_row": args.per_row, "threads": threads,
                        "time_s": seconds, "share_of_copy": share, "share_is": "SpMV bytes / time / copy bandwidth"})
    print(f"\nhlopt before and after the C++ program: {1e3 * before:.3f} ms, {1e3 * after:.3f} ms")
    write_record("spmv_bound", figures, load_before=load_before,
                 options={**vars(args), "copy_bytes_per_s": copy_bw, "spmv_bytes": spmv_bytes,
                          "hlopt_before_s": before, "hlopt_after_s": after})


if __name__ == "__main__":
    main()
