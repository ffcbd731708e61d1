"""Per-call time of a trivial program: hlopt.jit next to jax.jit, interleaved in one process.

Workloads: `x + 1` on a float32[8] (C++ dispatch on both sides), and the same
with a typed PRNG key passed through (both sides replay it from C++,
which flattens the key to its uint32 words); `x + 1` through a `pure_callback` and
through an ordered `io_callback` (host callbacks: each side dispatches as jax.jit
does, from C++ for the first and through jax's Python path for the effect of the
second), timed over a fiftieth of the calls. Each round times `--calls` calls of each side,
the order alternating; the table gives the median per-call time over
`--rounds` rounds and the per-round ratio (hlopt / JAX: below 1 means hlopt is
faster).

Usage: python bench/dispatch.py [--rounds 15] [--calls 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

import hlopt
from record import write_record


HOST_CALLS = 50  # a host callback's program takes this many times fewer calls a round


def workloads() -> dict:
    """name -> (function, arguments, the divisor of `--calls` for it)."""
    x = jnp.arange(8, dtype=jnp.float32)
    key = jax.random.key(0)
    add = lambda x: x + 1  # noqa: E731
    with_key = lambda key, x: (key, x + 1)  # noqa: E731
    like = jax.ShapeDtypeStruct(x.shape, x.dtype)
    pure = lambda x: jax.pure_callback(np.asarray, like, x) + 1  # noqa: E731
    ordered = lambda x: io_callback(np.asarray, like, x, ordered=True) + 1  # noqa: E731
    return {"x + 1 (C++ dispatch)": (add, (x,), 1),
            "x + 1 with a typed key through": (with_key, (key, x), 1),
            "x + 1 through a pure_callback": (pure, (x,), HOST_CALLS),
            "x + 1 through an ordered io_callback": (ordered, (x,), HOST_CALLS)}


def per_call(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    a = parser.parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {', '.join(f'{v:.1f}' for v in load_before)}")
    print("| workload | hlopt µs/call | jax.jit µs/call | per-round hlopt / JAX: median (min-max) |")
    print("| --- | ---: | ---: | --- |")
    figures = []
    for name, (fun, args, divisor) in workloads().items():
        calls = max(1, a.calls // divisor)
        ours, ref = hlopt.jit(fun), jax.jit(fun)
        for fn in (ours, ref):
            per_call(fn, args, 100)  # compile and warm up
        times: tuple[list[float], list[float]] = ([], [])
        for r in range(a.rounds):
            print(f"  {name}: round {r + 1}/{a.rounds}", end="\r", file=sys.stderr, flush=True)
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[i].append(per_call((ours, ref)[i], args, calls))
        ratios = [o / j for o, j in zip(*times)]
        print(f"| {name} | {statistics.median(times[0]) * 1e6:.2f} | {statistics.median(times[1]) * 1e6:.2f} "
              f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |", flush=True)
        figures.append({"workload": name, "hlopt_s": statistics.median(times[0]),
                        "jax_s": statistics.median(times[1]), "ratio": statistics.median(ratios),
                        "ratio_min": min(ratios), "ratio_max": max(ratios), "ratio_is": "hlopt / jax.jit",
                        "ratios": ratios, "calls": calls})
    print(f"load average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    write_record("dispatch", figures, load_before=load_before, options={"rounds": a.rounds, "calls": a.calls})


if __name__ == "__main__":
    main()
