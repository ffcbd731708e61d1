"""hlopt.sparse against jax.experimental.sparse: every BCOO op, side by side, in one process.

For each op, hlopt's compiled executable (lower-bcoo) and `jax.jit` of the
jax.experimental.sparse op run on the same buffers; the table gives the median
wall time of each, their ratio (JAX / hlopt: above 1 means hlopt is faster)
the same ratio for the bare PJRT executables called alike (without the Python
dispatch of either API, which dominates ops under 0.2 ms) and, for
multiply_sparse and sum_duplicates, the compiled programs' peak memory
(temporaries + outputs). Run: `python bench/sparse.py [--quick] [--only OP] [--inputs N] [--sync-dispatch]`.
Every row goes into a record under `bench/results/sparse/` (bench/record.py), times in seconds.

Successive calls cycle through 3 random input sets of the same shapes (the
same sequence for both sides): called on one input over and over, the CPU's
branch predictor learns that input's data-dependent branches, which no user
calling on fresh data gets (JAX's slice: 0.04 ms on one input, 0.12 ms on three).

PJRT's CPU client runs a program of under 1000 flops on the calling thread and
hands any other to a worker thread; on a loaded machine that hand-off alone
costs tens of microseconds. `--sync-dispatch` runs every program of both sides
on the calling thread (`jax_cpu_enable_async_dispatch=False`).

JAX's sparse x sparse product is run only where its compiled peak memory is under
`--jax-limit-mb` (4096 by default, which leaves out nse 10,000: 4.6 GB and about a minute a
call); a side whose one call takes over a second is called `--reps` times.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from record import median_seconds, write_record


def random_bcoo(rng: np.random.RandomState, shape: tuple[int, ...], nse: int, n_batch: int = 0):
    """Unsorted random indices (with the duplicates chance gives) and float32 data."""
    batch, sparse = shape[:n_batch], shape[n_batch:]
    indices = np.stack([rng.randint(0, s, size=(*batch, nse)) for s in sparse], -1).astype(np.int32)
    data = rng.randn(*batch, nse).astype(np.float32)
    return jnp.asarray(data), jnp.asarray(indices)


def median_times(fns: tuple[Callable, Callable], arg_sets: list[tuple], reps: int,
                 budget: float = 1.0) -> tuple[float, float]:
    """Median wall time of each function: rounds of up to 10 calls each (one once a side has spent
    `budget` s), the order flipped every round (whoever runs second finds the thread pool awake),
    until both have `reps` calls and `budget` s. A side whose warm-up call alone takes `budget` s
    (JAX's sparse x sparse product, a minute a call at nse 1e4) stops at `reps` calls.
    Successive calls of each side cycle through `arg_sets`, the same sequence for both."""
    warm = []
    for fn in fns:
        start = time.perf_counter()
        jax.block_until_ready(fn(*arg_sets[0]))
        warm.append(time.perf_counter() - start)
    times: tuple[list[float], list[float]] = ([], [])

    def done(i: int) -> bool:
        return len(times[i]) >= reps and (sum(times[i]) >= budget or warm[i] >= budget)

    rounds = 0
    while not (done(0) and done(1)):
        for i in ((0, 1) if rounds % 2 == 0 else (1, 0)):
            if done(i) and warm[i] >= budget:
                continue
            for _ in range(10):
                args = arg_sets[len(times[i]) % len(arg_sets)]
                start = time.perf_counter()
                jax.block_until_ready(fns[i](*args))
                times[i].append(time.perf_counter() - start)
                if sum(times[i]) >= budget:
                    break
        rounds += 1
    return statistics.median(times[0]), statistics.median(times[1])


def peak_bytes(stats: Any) -> int:
    return stats.temp_size_in_bytes + stats.output_size_in_bytes


def raw_call(executable: Any) -> Callable:
    """Run a loaded PJRT executable on device arrays, skipping each API's Python dispatch."""

    def call(*arrays):
        return executable.execute_sharded(list(arrays)).disassemble_into_single_device_arrays()

    return call


def compare(name: str, ours: Callable, ref: Callable, arg_sets: list[tuple], reps: int,
            memory: bool = False) -> dict:
    ours_jit = hlopt.jit(ours)
    ref_jit = jax.jit(ref, keep_unused=True)
    t_ours, t_ref = median_times((ours_jit, ref_jit), arg_sets, reps)
    ours_exe = ours_jit.lower(*arg_sets[0]).compile().executable
    ref_compiled = ref_jit.lower(*arg_sets[0]).compile()
    ref_exe = ref_compiled._executable.xla_executable  # the PJRT executable behind jax.jit
    x_ours, x_ref = median_times((raw_call(ours_exe), raw_call(ref_exe)), arg_sets, reps)
    row = {"op": name, "hlopt_ms": t_ours * 1e3, "jax_ms": t_ref * 1e3, "speedup": t_ref / t_ours,
           "exe_speedup": x_ref / x_ours}
    if memory:
        row["hlopt_mb"] = peak_bytes(ours_exe.get_compiled_memory_stats()) / 2**20
        row["jax_mb"] = peak_bytes(ref_compiled.memory_analysis()) / 2**20
    print(format_row(row), flush=True)
    return row


def format_row(row: dict) -> str:
    mem = f"{row['hlopt_mb']:.1f} MB vs {row['jax_mb']:.1f} MB" if "hlopt_mb" in row else ""
    exe = "" if math.isnan(row["exe_speedup"]) else f"{row['exe_speedup']:.2f}x"
    return (f"| {row['op']} | {row['hlopt_ms']:.2f} | {row['jax_ms']:.2f} | {row['speedup']:.2f}x "
            f"| {exe} | {mem} |")


def both(shape, sorted_=False):
    """Functions building an hlopt and a JAX BCOO of `shape` from (data, indices)."""
    return (lambda d, i: hs.BCOO((d, i), shape=shape, indices_sorted=sorted_),
            lambda d, i: js.BCOO((d, i), shape=shape, indices_sorted=sorted_))


def unbatched_cases(n: int, nse: int, nse_mul: int, nse_dup: int, rng: np.random.RandomState) -> list:
    shape = (n, n)
    d, i = random_bcoo(rng, shape, nse)
    H, J = both(shape)
    dense = js.BCOO((d, i), shape=shape).todense()
    v = jnp.asarray(rng.randn(n, n).astype(np.float32))
    ld, li = random_bcoo(rng, shape, nse_mul)
    rd, ri = random_bcoo(rng, shape, nse_mul)
    dd, di = random_bcoo(rng, (n // 8, n // 8), nse_dup)  # dense enough for many duplicates
    Hd, Jd = both((n // 8, n // 8))
    sq_shape = (n, 1, n)
    sq_i = jnp.concatenate([i[:, :1], jnp.zeros_like(i[:, :1]), i[:, 1:]], 1)
    Hs, Js = both(sq_shape)
    half, quarter = n // 2, n // 4
    return [
        ("todense", lambda d, i: H(d, i).todense(), lambda d, i: J(d, i).todense(), (d, i)),
        ("fromdense", lambda x: _bufs(hs.BCOO.fromdense(x, nse=nse)),
         lambda x: js.BCOO.fromdense(x, nse=nse)._bufs, (dense,)),
        ("multiply_dense", lambda d, i, v: hs.bcoo_multiply_dense(H(d, i), v),
         lambda d, i, v: js.bcoo_multiply_dense(J(d, i), v), (d, i, v)),
        (f"multiply_sparse (nse {nse_mul})",
         lambda a, b, c, e: _bufs(hs.bcoo_multiply_sparse(H(a, b), H(c, e))),
         lambda a, b, c, e: js.bcoo_multiply_sparse(J(a, b), J(c, e))._bufs, (ld, li, rd, ri), True),
        ("reduce_sum (axis 1)", lambda d, i: _bufs(hs.bcoo_reduce_sum(H(d, i), axes=(1,))),
         lambda d, i: js.bcoo_reduce_sum(J(d, i), axes=(1,))._bufs, (d, i)),
        ("reshape", lambda d, i: _bufs(hs.bcoo_reshape(H(d, i), new_sizes=(half, 2 * n))),
         lambda d, i: js.bcoo_reshape(J(d, i), new_sizes=(half, 2 * n))._bufs, (d, i)),
        ("slice", lambda d, i: _bufs(hs.bcoo_slice(H(d, i), start_indices=(quarter, quarter), limit_indices=(3 * quarter, n))),
         lambda d, i: js.bcoo_slice(J(d, i), start_indices=(quarter, quarter), limit_indices=(3 * quarter, n))._bufs, (d, i)),
        ("sort_indices", lambda d, i: _bufs(hs.bcoo_sort_indices(H(d, i))),
         lambda d, i: js.bcoo_sort_indices(J(d, i))._bufs, (d, i)),
        ("squeeze", lambda d, i: _bufs(hs.bcoo_squeeze(Hs(d, i), dimensions=(1,))),
         lambda d, i: js.bcoo_squeeze(Js(d, i), dimensions=(1,))._bufs, (d, sq_i)),
        (f"sum_duplicates (nse {nse_dup})", lambda d, i: _bufs(hs.bcoo_sum_duplicates(Hd(d, i), nse=nse_dup)),
         lambda d, i: js.bcoo_sum_duplicates(Jd(d, i), nse=nse_dup)._bufs, (dd, di), True),
        ("transpose", lambda d, i: _bufs(H(d, i).T), lambda d, i: J(d, i).T._bufs, (d, i)),
    ]


def batched_cases(batch: int, n: int, nse: int, rng: np.random.RandomState) -> list:
    shape = (batch, n, n)
    d, i = random_bcoo(rng, shape, nse, n_batch=1)
    H, J = both(shape)
    dense = js.BCOO((d, i), shape=shape).todense()
    v = jnp.asarray(rng.randn(*shape).astype(np.float32))
    ld, li = random_bcoo(rng, shape, nse // 4, n_batch=1)
    rd, ri = random_bcoo(rng, shape, nse // 4, n_batch=1)
    return [
        ("todense", lambda d, i: H(d, i).todense(), lambda d, i: J(d, i).todense(), (d, i)),
        ("fromdense", lambda x: _bufs(hs.BCOO.fromdense(x, nse=nse, n_batch=1)),
         lambda x: js.BCOO.fromdense(x, nse=nse, n_batch=1)._bufs, (dense,)),
        ("multiply_dense", lambda d, i, v: hs.bcoo_multiply_dense(H(d, i), v),
         lambda d, i, v: js.bcoo_multiply_dense(J(d, i), v), (d, i, v)),
        (f"multiply_sparse (nse {nse // 4})",
         lambda a, b, c, e: _bufs(hs.bcoo_multiply_sparse(H(a, b), H(c, e))),
         lambda a, b, c, e: js.bcoo_multiply_sparse(J(a, b), J(c, e))._bufs, (ld, li, rd, ri), True),
        ("update_layout (n_batch 1 -> 0)", lambda d, i: _bufs(hs.bcoo_update_layout(H(d, i), n_batch=0)),
         lambda d, i: js.bcoo_update_layout(J(d, i), n_batch=0)._bufs, (d, i)),
        ("reduce_sum (axis 2)", lambda d, i: _bufs(hs.bcoo_reduce_sum(H(d, i), axes=(2,))),
         lambda d, i: js.bcoo_reduce_sum(J(d, i), axes=(2,))._bufs, (d, i)),
        ("sort_indices", lambda d, i: _bufs(hs.bcoo_sort_indices(H(d, i))),
         lambda d, i: js.bcoo_sort_indices(J(d, i))._bufs, (d, i)),
        (f"sum_duplicates (nse {nse})", lambda d, i: _bufs(hs.bcoo_sum_duplicates(H(d, i), nse=nse)),
         lambda d, i: js.bcoo_sum_duplicates(J(d, i), nse=nse)._bufs, (d, i), True),
        ("transpose", lambda d, i: _bufs(hs.bcoo_transpose(H(d, i), permutation=(0, 2, 1))),
         lambda d, i: js.bcoo_transpose(J(d, i), permutation=(0, 2, 1))._bufs, (d, i)),
    ]


def product_cases(n: int, nse: int, k: int, batch: int, bn: int, bnse: int, rng: np.random.RandomState) -> list:
    """SpMV, SpMM (unsorted and sorted indices), batched SpMM, SDDMM; JAX's products under jax.jit."""
    shape = (n, n)
    d, i = random_bcoo(rng, shape, nse)
    order = np.lexsort(np.asarray(i).T[::-1])
    sd, si = d[order], i[order]
    H, J = both(shape)
    Hs, Js = both(shape, sorted_=True)
    v = jnp.asarray(rng.randn(n).astype(np.float32))
    x = jnp.asarray(rng.randn(n, k).astype(np.float32))
    a = jnp.asarray(rng.randn(n, k).astype(np.float32))
    b = jnp.asarray(rng.randn(k, n).astype(np.float32))
    bshape = (batch, bn, bn)
    bd, bi = random_bcoo(rng, bshape, bnse, n_batch=1)
    Hb, Jb = both(bshape)
    bx = jnp.asarray(rng.randn(batch, bn, k).astype(np.float32))
    mm = (((1,), (0,)), ((), ()))
    return [
        ("SpMV", lambda d, i, v: H(d, i) @ v, lambda d, i, v: J(d, i) @ v, (d, i, v)),
        ("SpMV (sorted)", lambda d, i, v: Hs(d, i) @ v, lambda d, i, v: Js(d, i) @ v, (sd, si, v)),
        (f"SpMM (x {k})", lambda d, i, x: H(d, i) @ x, lambda d, i, x: J(d, i) @ x, (d, i, x)),
        (f"SpMM (x {k}, sorted)", lambda d, i, x: Hs(d, i) @ x, lambda d, i, x: Js(d, i) @ x, (sd, si, x)),
        (f"batched SpMM ({batch}x{bn}x{bn}, n_batch 1, nse {bnse}, x {k})", lambda d, i, x: Hb(d, i) @ x,
         lambda d, i, x: Jb(d, i) @ x, (bd, bi, bx)),
        (f"SDDMM ({n}x{k} . {k}x{n})", lambda a, b, i: hs.bcoo_dot_general_sampled(a, b, i, dimension_numbers=mm),
         lambda a, b, i: js.bcoo_dot_general_sampled(a, b, i, dimension_numbers=mm), (a, b, i)),
    ]


def spspmm(n: int, nse: int, reps: int, jax_limit_mb: float) -> dict:
    """Sparse x sparse matmul of two random (n, n) arrays with `nse` entries each: hlopt with the exact
    output nse (counted on the host), JAX with its bound (run only when its peak fits `jax_limit_mb`)."""
    rng = np.random.RandomState(0)
    ld, li = random_bcoo(rng, (n, n), nse)
    rd, ri = random_bcoo(rng, (n, n), nse)
    l_rows, l_cols = np.asarray(li).T
    r_rows, r_cols = np.asarray(ri).T
    by_row = {}
    for r, c in zip(r_rows, r_cols):
        by_row.setdefault(r, []).append(c)
    out = {(a, c) for a, b in zip(l_rows, l_cols) for c in by_row.get(b, ())}
    out_nse = max(len(out), 1)
    H, J = both((n, n))
    mm = (((1,), (0,)), ((), ()))
    ours = hlopt.jit(lambda a, b, c, e: _bufs(hs.bcoo_spdot_general(H(a, b), H(c, e), dimension_numbers=mm, nse=out_nse)))
    ref = jax.jit(lambda a, b, c, e: js.bcoo_dot_general(J(a, b), J(c, e), dimension_numbers=mm)._bufs)
    args = (ld, li, rd, ri)
    ours_mb = peak_bytes(ours.lower(*args).compile().executable.get_compiled_memory_stats()) / 2**20
    try:
        ref_mb = peak_bytes(ref.lower(*args).compile().memory_analysis()) / 2**20
    except (OverflowError, MemoryError) as e:  # JAX's nse bound overflows int32 at nse 1e5
        ours_mb = peak_bytes(ours.lower(*args).compile().executable.get_compiled_memory_stats()) / 2**20
        print(f"| sparse x sparse ({n}x{n}, nse {nse} each, {out_nse} outputs) | "
              f"{_time(ours, args, reps) * 1e3:.2f} | fails ({type(e).__name__}) | | | {ours_mb:.1f} MB |", flush=True)
        return {"op": f"sparse x sparse ({n}x{n}, nse {nse} each)", "out_nse": out_nse, "hlopt_mb": ours_mb,
                "jax": f"fails ({type(e).__name__})"}
    name = f"sparse x sparse ({n}x{n}, nse {nse} each, {out_nse} outputs)"
    jax.block_until_ready(ours(*args))  # compiled outside the timing
    if ref_mb > jax_limit_mb:
        t_ours = _time(ours, args, reps)
        print(f"| {name} | {t_ours * 1e3:.2f} | not run (peak {ref_mb:.0f} MB) | | | {ours_mb:.1f} MB vs {ref_mb:.1f} MB |",
              flush=True)
        return {"op": name, "hlopt_ms": t_ours * 1e3, "hlopt_mb": ours_mb, "jax_mb": ref_mb, "jax": "not run"}
    t_ours, t_ref = median_times((ours, ref), [args], reps)
    row = {"op": name, "hlopt_ms": t_ours * 1e3, "jax_ms": t_ref * 1e3, "speedup": t_ref / t_ours,
           "exe_speedup": float("nan"), "hlopt_mb": ours_mb, "jax_mb": ref_mb}
    print(format_row(row), flush=True)
    return row


def figure(row: dict, table: str) -> dict:
    """A printed row as a record's figure: times in seconds, the ratios named."""
    out = {"table": table}
    for key, value in row.items():
        if key.endswith("_ms"):
            out[key[:-3] + "_s"] = value / 1e3
        elif not (isinstance(value, float) and math.isnan(value)):
            out[key] = value
    if "speedup" in out:
        out["speedup_is"] = "jax / hlopt"
    return out


def _time(fn: Callable, args: tuple, reps: int) -> float:
    """Median time of `fn(*args)` after one warm-up call."""
    jax.block_until_ready(fn(*args))
    return median_seconds(fn, args, reps)


def _bufs(m: hs.BCOO) -> tuple[jax.Array, jax.Array]:
    return m.data, m.indices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default="", help="run only the ops whose name contains this")
    parser.add_argument("--sync-dispatch", action="store_true",
                        help="run every program on the calling thread, for both sides (PJRT otherwise hands "
                             "programs of 1000 flops or more to a worker thread)")
    parser.add_argument("--inputs", type=int, default=3,
                        help="random input sets of the same shapes that successive calls cycle through "
                             "(with 1, the CPU's branch predictor can learn one input's data-dependent branches)")
    parser.add_argument("--jax-limit-mb", type=float, default=4096,
                        help="run JAX's sparse x sparse product only when its compiled peak memory is below this")
    args = parser.parse_args()
    load_before = os.getloadavg()
    jax.config.update("jax_cpu_enable_async_dispatch", not args.sync_dispatch)
    if args.quick:
        n, nse, nse_mul, nse_dup, batch, bn, bnse = 256, 2000, 500, 5000, 4, 64, 500
    else:
        n, nse, nse_mul, nse_dup, batch, bn, bnse = 4096, 40_000, 10_000, 100_000, 16, 1024, 4000
    if args.quick:
        pn, pnse, pk, pb, pbn, pbnse, sp_n, sp_nse = 512, 5000, 16, 4, 128, 1000, 512, (500, 2000)
    else:
        pn, pnse, pk, pb, pbn, pbnse, sp_n, sp_nse = 10_000, 100_000, 64, 8, 2048, 12_500, 10_000, (3000, 10_000, 100_000)
    unbatched, batched, products = [], [], []
    for seed in range(args.inputs):
        rng = np.random.RandomState(seed)
        unbatched.append(unbatched_cases(n, nse, nse_mul, nse_dup, rng))
        batched.append(batched_cases(batch, bn, bnse, rng))
        products.append(product_cases(pn, pnse, pk, pb, pbn, pbnse, rng))
    header = ("| op | hlopt ms | jax ms | jax / hlopt | same, executables only | peak memory hlopt vs jax |\n"
              "| --- | ---: | ---: | ---: | ---: | --- |")
    tables = [(f"unbatched: shape ({n}, {n}), nse {nse}", unbatched),
              (f"batched: shape ({batch}, {bn}, {bn}), n_batch 1, nse {bnse} per batch", batched),
              (f"products: shape ({pn}, {pn}), nse {pnse}", products)]
    figures = []
    for title, sets in tables:
        print(f"\n{title}, {args.inputs} input sets\n{header}")
        for cases in zip(*sets):  # one op, each input set
            name, ours, ref, _, *memory = cases[0]
            if args.only in name:
                row = compare(name, ours, ref, [case[3] for case in cases], args.reps, bool(memory))
                figures.append(figure(row, title.split(":")[0]))
    if args.only in "sparse x sparse":
        print(f"\nsparse x sparse matmul, 1 input set\n{header}")
        for count in sp_nse:
            figures.append(figure(spspmm(sp_n, count, args.reps, args.jax_limit_mb), "sparse x sparse"))
    write_record("sparse", figures, load_before=load_before, options=vars(args))


if __name__ == "__main__":
    main()
