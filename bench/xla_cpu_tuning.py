"""What each XLA:CPU tuning pass of hlopt-default buys, on the workloads of the other benchmarks.

For each workload (the hlopt side of bench/jet.py, pde_operators.py, pinn_grad.py,
sparse.py and wavefunction.py, a gradient through a loop that reads rows by index, and
batched products A^T B of the wavefunction's sizes alone)
and each pass of `hlopt.passes.registry.DEFAULT_TUNING` that changes its program, the program compiled
by hlopt-default and by hlopt-default without that pass run interleaved: in each
round each side's best of `--calls` calls, in alternating order; the ratio per round
is (without the pass) / (with it), printed as median (min-max) over the rounds with
the load average. A pass that leaves a workload's program unchanged is reported so.
Each option of `VARIANTS` is compared likewise: the pass with that option given in
place of the pass as hlopt-default runs it.

    python bench/xla_cpu_tuning.py [--rounds 7] [--workloads laplacian pinn_grad ...]
    python bench/xla_cpu_tuning.py --op-counts      # JSON: ops of each module after hlopt-default

`--op-counts` uses hlopt's public API alone, so an older tree runs it too
(`PYTHONPATH=<old tree>/python python bench/xla_cpu_tuning.py --op-counts`): the two
outputs compare what the tuning passes leave against what the rules emitted before.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import hlopt  # noqa: E402
import jet as jet_bench  # noqa: E402
import pde_operators  # noqa: E402
import pinn_grad  # noqa: E402
import sparse as sparse_bench  # noqa: E402
import wavefunction  # noqa: E402
from record import progress, write_record  # noqa: E402

# pass options compared with hlopt-default as a left-out pass is (the "without" side runs the pass with the option)
# (xla-cpu-sum-as-dot's keep options are opt-in: they record an XLA option that only hlopt.jit applies)
VARIANTS = {"xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true reduce-max-square-terms=24}":
            "xla-cpu-sum-as-dot",
            "xla-cpu-sum-as-dot{reduce-max-square-terms=24}": "xla-cpu-sum-as-dot",
            "xla-cpu-sum-as-dot{split-large-sums=true}": "xla-cpu-sum-as-dot",
            "xla-cpu-transposed-dots{swap=never}": "xla-cpu-transposed-dots"}

WORKLOADS = ("jet_mlp", "jet_chain", "laplacian", "stde", "weighted", "randomized", "bilaplacian", "pinn_grad",
             "loop_grad", "sparse", "wavefunction", "batched_products")


def looped(a, x):
    """A loop reading x's entries by the loop index (dynamic slices): its gradient accumulates
    row updates in the backward loop."""
    def body(i, acc):
        return acc + jnp.tanh(a[i] * x[i] + acc * 0.3) * x[(i + 1) % x.size]
    return jax.lax.fori_loop(0, x.size, body, 0.0)


def workloads(a) -> dict[str, list[tuple[str, object, tuple]]]:
    """name -> [(case, function, arguments)]: the hlopt side of each benchmark's workload."""
    rng = np.random.default_rng(0)
    sizes = [a.dim, *[a.width] * 2, *[a.width * 2 // 3] * 2, 1]
    params = pde_operators.init(jax.random.key(0), sizes)
    xs = jax.random.normal(jax.random.key(1), (a.batch, a.dim), jnp.float32)
    v = jax.random.normal(jax.random.key(2), (a.batch, a.dim), jnp.float32)
    params_bi = pde_operators.init(jax.random.key(2), [a.bi_dim, *sizes[1:]])
    xs_bi = jax.random.normal(jax.random.key(3), (a.batch, a.bi_dim), jnp.float32)
    boundary = jnp.where(jax.random.bernoulli(jax.random.key(2), 0.5, (a.batch, a.dim)), 1.0, 0.0)
    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    eye = jnp.eye(a.dim, dtype=jnp.float32)
    S = jax.random.normal(jax.random.key(5), (a.dim, a.dim // 2), jnp.float32)
    key = jax.random.key(9)
    jet_mlp = lambda p, y: jet_bench.mlp(p, y)  # noqa: E731
    chain_x = jnp.asarray(rng.normal(size=a.n).astype(np.float32))
    chain_v = jnp.asarray(rng.normal(size=a.n).astype(np.float32))

    energies = jax.vmap(wavefunction.kinetic("hlopt"), in_axes=(None, 0))
    wave_args = wavefunction.inputs(a.electrons, a.walkers, jnp.float32)

    def jet_of(f, order):
        return lambda p, x, d: hlopt.jet(lambda y: f(p, y), (x,), ((d,) + (jnp.zeros_like(d),) * (order - 1),))[1][-1]

    def sparse_cases():
        r = np.random.RandomState(0)
        n, nse = a.sparse_n, a.sparse_n * 8
        cases = (sparse_bench.unbatched_cases(n, nse, nse // 4, nse // 4, r)
                 + sparse_bench.product_cases(n, nse, 16, 4, n // 4, nse // 16, r))
        return [(c[0], c[1], c[3]) for c in cases]

    chosen = {
        "jet_mlp": lambda: [(f"order {k}", jet_of(jet_mlp, k), (params, xs, v)) for k in (2, 4)],
        "jet_chain": lambda: [(f"order {k}", jet_of(lambda p, y: jet_bench.chain(y), k), ((), chain_x, chain_v))
                              for k in (2, 4)],
        "laplacian": lambda: [("collapsed", batched(hlopt.laplacian(pde_operators.mlp, argnums=1)), (params, xs))],
        "stde": lambda: [("stde", batched(lambda p, x: pde_operators.stde(p, x, eye)), (params, xs))],
        "weighted": lambda: [("collapsed", batched(hlopt.laplacian(pde_operators.mlp, argnums=1, weights=S)),
                              (params, xs))],
        "randomized": lambda: [("collapsed", batched(lambda p, x: hlopt.laplacian(
            pde_operators.mlp, argnums=1, num_samples=8)(p, x, key=key)), (params, xs))],
        "bilaplacian": lambda: [("collapsed", batched(hlopt.bilaplacian(pde_operators.mlp, argnums=1)),
                                 (params_bi, xs_bi))],
        "pinn_grad": lambda: [("hlopt", jax.grad(pinn_grad.pinn_loss(hlopt.laplacian)), (params, xs, boundary))],
        "loop_grad": lambda: [("fori_loop", jax.grad(lambda c, x: jnp.sum(
            jax.vmap(hlopt.laplacian(lambda y: looped(c, y)))(x) ** 2)), (jnp.linspace(0.5, 1.5, a.dim), xs))],
        "sparse": sparse_cases,
        "wavefunction": lambda: [(f"kinetic, n = {a.electrons}", energies, wave_args),
                                 (f"gradient, n = {a.electrons}",
                                  jax.grad(lambda p, x: jnp.mean(energies(p, x))), wave_args)],
    }
    products = jax.random.normal(jax.random.key(10), (2, 3 * a.electrons, a.walkers, a.electrons, a.electrons))
    chosen["batched_products"] = lambda: [  # the LU rules' kind of product: A^T B per direction and walker
        (f"A^T B, {list(products.shape[1:])} float32",
         lambda m: jax.lax.dot_general(m[0], m[1], (([2], [2]), ([0, 1], [0, 1]))), (products,))]
    return {name: chosen[name]() for name in a.workloads}


OP = re.compile(r'(?:^|=)\s*"?((?:stablehlo|chlo|func|sdy)\.[a-z_]+)')


def op_counts(text: str) -> collections.Counter:
    """How many of each op a module's text holds."""
    return collections.Counter(m.group(1) for line in text.splitlines() for m in [OP.search(line)] if m)


def best_of(fn, args, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def compare(fns: dict[str, object], args: tuple, rounds: int, calls: int) -> dict[str, list[float]]:
    """Seconds of each of `fns` per round, the order alternating between rounds."""
    times = {name: [] for name in fns}
    for name, fn in fns.items():
        jax.block_until_ready(fn(*args))  # compile and warm up
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(best_of(fns[name], args, calls))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--bi-dim", type=int, default=5)
    parser.add_argument("--width", type=int, default=768, help="hidden width of the MLPs (the benchmarks': 768)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=1_000_000, help="points of bench/jet.py's chain workload")
    parser.add_argument("--sparse-n", type=int, default=1024)
    parser.add_argument("--electrons", type=int, default=4, help="electrons of bench/wavefunction.py's workload")
    parser.add_argument("--walkers", type=int, default=128, help="walkers of bench/wavefunction.py's workload")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--op-counts", action="store_true", help="only print each module's ops after hlopt-default")
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    a = parser.parse_args()
    hlopt.set_cache_dir(None)
    load_before = os.getloadavg()
    chosen = workloads(a)
    if a.op_counts:
        counts = {}
        for name, cases in chosen.items():
            for case, fn, args in cases:
                text = hlopt.lower(fn, *args).apply("hlopt-default", platform="cpu").as_text()
                c = op_counts(text)
                counts[f"{name}: {case}"] = {"total": sum(c.values()), **dict(sorted(c.items()))}
        print(json.dumps(counts, indent=1))
        return

    from hlopt.passes.registry import DEFAULT_TUNING, PIPELINES

    default = PIPELINES["hlopt-default"]
    figures = []
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, load {load_before[0]:.1f}; "
          "ratio = time without the pass / time with it, median (min-max) over rounds")
    for name, cases in chosen.items():
        for case, fn, args in cases:
            progress(f"{name}: {case}")
            lowered = hlopt.lower(fn, *args)
            full = lowered.apply(default, platform="cpu").as_text()
            tuned = hlopt.jit(fn)
            others = [(p, ",".join(s for s in default.split(",") if s != p), "without the pass / with it")
                      for p in DEFAULT_TUNING]
            others += [(variant, default.replace(base, variant), f"with {variant} / with hlopt-default")
                       for variant, base in VARIANTS.items()]
            for p, rest, ratio_is in others:
                if lowered.apply(rest, platform="cpu").as_text() == full:
                    print(f"{name:12s} {case:40s} {p:28s} unchanged")
                    continue
                times = compare({"with": tuned, "without": hlopt.jit(fn, pipeline=rest)}, args,
                                a.rounds, a.calls)
                ratios = [w / t for w, t in zip(times["without"], times["with"])]
                load = os.getloadavg()[0]
                print(f"{name:12s} {case:40s} {p:28s} with {statistics.median(times['with']) * 1e3:9.3f} ms  "
                      f"without {statistics.median(times['without']) * 1e3:9.3f} ms  ratio "
                      f"{statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})  load {load:.1f}")
                figures.append({"workload": name, "case": case, "pass": p,
                                "with_s": statistics.median(times["with"]),
                                "without_s": statistics.median(times["without"]),
                                "ratio": statistics.median(ratios), "ratio_min": min(ratios),
                                "ratio_max": max(ratios), "ratio_is": ratio_is,
                                "load": load})
    write_record("xla_cpu_tuning", figures, load_before=load_before, options=vars(a))


if __name__ == "__main__":
    main()
