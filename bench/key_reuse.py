"""Time of check-key-reuse on large modules, next to JAX's key-reuse checker.

Workload: a sampler unrolled for `--steps` steps (split the key, draw normal
noise, fold in the step, draw again), lowered by hlopt. Both checkers see the
same program: hlopt analyses the StableHLO module (as lowered, and with every
call inlined, which multiplies the op count), JAX analyses the jaxpr
(`check_key_reuse_jaxpr`, cache cleared before each run). Median of
`--repeat` runs; the ratio is hlopt / JAX.

Usage: python bench/key_reuse.py [--steps 300] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
from jax.experimental.key_reuse import _core as jax_key_reuse

import hlopt
from hlopt.passes.analyses.check_key_reuse import find_key_reuse
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import walk_ops
from record import write_record


def sampler(steps: int):
    def f(key, x):
        for i in range(steps):
            key, sub = jax.random.split(key)
            x = 0.9 * x + jax.random.normal(sub, x.shape)
            x = x + jax.random.uniform(jax.random.fold_in(key, i), x.shape)
        return x, key
    return f


def count_ops(module: ir.Module) -> int:
    return len(walk_ops(module.operation))


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    args = parser.parse_args()
    load_before = os.getloadavg()

    f = sampler(args.steps)
    key, x = jax.random.key(0), jnp.zeros(4)
    lowered = hlopt.lower(f, key, x)
    inlined = lowered.apply("inline{default-pipeline=},symbol-dce")
    jaxpr = jax.make_jaxpr(f)(key, x).jaxpr

    def jax_check():
        jax_key_reuse.jaxpr_type_signature.cache_clear()
        jax_key_reuse.check_key_reuse_jaxpr(jaxpr)

    t_jax = median_seconds(jax_check, args.repeat)
    print(f"sampler, {args.steps} steps; JAX check_key_reuse_jaxpr on {len(jaxpr.eqns)} eqns: {t_jax * 1e3:.1f} ms")
    print(f"{'module':<10} {'ops':>8} {'hlopt ms':>10} {'JAX ms':>8} {'hlopt/JAX':>10}")
    figures = []
    for name, module in (("lowered", lowered.module), ("inlined", inlined.module)):
        assert find_key_reuse(module.operation) == []
        t = median_seconds(lambda m=module: find_key_reuse(m.operation), args.repeat)
        print(f"{name:<10} {count_ops(module):>8} {t * 1e3:>10.1f} {t_jax * 1e3:>8.1f} {t / t_jax:>10.2f}")
        figures.append({"workload": f"sampler, {name}", "ops": count_ops(module), "jaxpr_eqns": len(jaxpr.eqns),
                        "hlopt_s": t, "jax_s": t_jax, "ratio": t / t_jax, "ratio_is": "hlopt / JAX"})
    write_record("key_reuse", figures, load_before=load_before, options=vars(args))


if __name__ == "__main__":
    main()
