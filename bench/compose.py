"""The same functions through plain `jax.jit` (hlopt operations inside) and through `hlopt.jit`.

Under `jax.jit` each hlopt operation is lowered alone, made plain StableHLO by
`hlopt-default` and merged into jax's module; under `hlopt.jit` the whole
program is lowered in annotation form and `hlopt-default` runs once on it.

Workloads:

  laplacian   vmap(hlopt.laplacian(mlp)) on --batch points of dimension --dim (tanh MLP, width --width)
  pinn_grad   grad of a Poisson residual loss with hlopt.laplacian in it (the same MLP and points)
  jet         hlopt.jet of exp(sin(cos(x)) * cos(x)), order 4, on --n elements
  spmv        row-sorted BCOO (density 1%, --rows x --rows) times a dense vector (hlopt's CPU kernel on both
              paths), then hlopt.laplacian of a sum of sines

Figures per workload:

  run      per round, the fastest of --calls calls of each side (sides alternate within the round);
           ratio = jax.jit path / hlopt.jit path; median and min-max over --rounds rounds
  compile  trace + lower + passes + XLA compile of a fresh function, sides alternating, --compiles
           times; ratio = jax.jit path / hlopt.jit path (median, min-max). The memo of passes run
           per operation is cleared before each jax.jit compile, so it is a first compile; the
           garbage collector runs before each compile, so neither side pays for the other's garbage.

Usage: python bench/compose.py [--rounds 7] [--calls 20] [--compiles 5] [--batch 128] [--dim 8] [--width 64]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import hlopt  # noqa: E402
from hlopt import sparse as hs  # noqa: E402
from hlopt.compiler import lowering  # noqa: E402

from record import progress, write_record  # noqa: E402


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[0]


def make_params(dim, width, key=0):
    sizes = [dim, width, width, 1]
    keys = jax.random.split(jax.random.key(key), len(sizes) - 1)
    return [(jax.random.normal(k, (m, n)) / np.sqrt(m), jnp.zeros(n)) for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def workloads(args):
    params = make_params(args.dim, args.width)
    points = jax.random.uniform(jax.random.key(1), (args.batch, args.dim), minval=-1, maxval=1)

    def laplacian(params, points):
        return jax.vmap(hlopt.laplacian(lambda x: mlp(params, x)))(points)

    def pinn_grad(params, points):
        def loss(params):
            residual = laplacian(params, points) + jnp.sum(jnp.sin(points), axis=1)
            return jnp.mean(residual**2)
        return jax.grad(loss)(params)

    def jet(x):
        f = lambda y: jnp.exp(jnp.sin(jnp.cos(y)) * jnp.cos(y))  # noqa: E731
        return hlopt.jet(f, (x,), ((jnp.ones_like(x),) + (jnp.zeros_like(x),) * 3,))[1][-1]

    rng = np.random.default_rng(0)
    dense = rng.standard_normal((args.rows, args.rows)) * (rng.random((args.rows, args.rows)) < 0.01)
    matrix = hs.BCOO.fromdense(dense.astype(np.float32))

    def spmv(data, indices, v):
        y = hs.BCOO((data, indices), shape=dense.shape, indices_sorted=True) @ v
        return hlopt.laplacian(lambda z: jnp.sum(jnp.sin(z)))(y)

    x = jnp.linspace(0.0, 1.0, args.n)
    return {
        "laplacian": (laplacian, (params, points)),
        "pinn_grad": (pinn_grad, (params, points)),
        "jet": (jet, (x,)),
        "spmv": (spmv, (matrix.data, matrix.indices, jnp.ones(args.rows, jnp.float32))),
    }


def block(out):
    jax.tree_util.tree_map(lambda a: a.block_until_ready(), out)
    return out


def fresh(fun):
    return lambda *a: fun(*a)  # a new function object: no jax or hlopt cache knows it


def compile_time(side, fun, args):
    gc.collect()
    start = time.perf_counter()
    if side == "jax":
        lowering.clear_plain_memo()
        jax.jit(fresh(fun)).lower(*args).compile()
    else:
        hlopt.jit(fresh(fun)).lower(*args).compile()
    return time.perf_counter() - start


def run_times(jitted, args, calls):
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        block(jitted(*args))
        best = min(best, time.perf_counter() - start)
    return best


def summary(ratios):
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--compiles", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    load_before = os.getloadavg()
    figures = []
    print(f"load {load_before[0]:.2f}; ratios are jax.jit path / hlopt.jit path (median, min-max)")
    for name, (fun, fargs) in workloads(args).items():
        progress(f"{name}: compiling both paths, then {args.rounds} rounds of calls and {args.compiles} of compiles")
        sides = {"jax": jax.jit(fun), "hlopt": hlopt.jit(fun)}
        ours, theirs = block(sides["hlopt"](*fargs)), block(sides["jax"](*fargs))
        diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                   for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)))
        run_ratios, compile_ratios, times = [], [], {"jax": [], "hlopt": []}
        for r in range(args.rounds):
            order = ("jax", "hlopt") if r % 2 == 0 else ("hlopt", "jax")
            t = {side: run_times(sides[side], fargs, args.calls) for side in order}
            run_ratios.append(t["jax"] / t["hlopt"])
            for side in t:
                times[side].append(t[side])
        compiles = {"jax": [], "hlopt": []}
        for r in range(args.compiles):
            order = ("jax", "hlopt") if r % 2 == 0 else ("hlopt", "jax")
            t = {side: compile_time(side, fun, fargs) for side in order}
            compile_ratios.append(t["jax"] / t["hlopt"])
            for side in t:
                compiles[side].append(t[side])
        run, comp = summary(run_ratios), summary(compile_ratios)
        print(f"{name:10s} run {run['median']:.3f} ({run['min']:.3f}-{run['max']:.3f})  "
              f"[jax.jit {min(times['jax']) * 1e3:.3f} ms, hlopt.jit {min(times['hlopt']) * 1e3:.3f} ms]  "
              f"compile {comp['median']:.3f} ({comp['min']:.3f}-{comp['max']:.3f})  "
              f"[jax.jit {statistics.median(compiles['jax']):.2f} s, hlopt.jit {statistics.median(compiles['hlopt']):.2f} s]"
              f"  max |difference| {diff:.2e}")
        figures.append({"workload": name, "jax_jit_run_s": min(times["jax"]), "hlopt_jit_run_s": min(times["hlopt"]),
                        "run_ratio_median": run["median"], "run_ratio_min": run["min"],
                        "run_ratio_max": run["max"], "run_ratios": run_ratios,
                        "jax_jit_compile_s": statistics.median(compiles["jax"]),
                        "hlopt_jit_compile_s": statistics.median(compiles["hlopt"]),
                        "compile_ratio_median": comp["median"], "compile_ratio_min": comp["min"],
                        "compile_ratio_max": comp["max"], "compile_ratios": compile_ratios,
                        "max_abs_difference": diff, "ratio_is": "jax.jit path / hlopt.jit path"})
    write_record("compose", figures, load_before=load_before, options=vars(args))


if __name__ == "__main__":
    main()
