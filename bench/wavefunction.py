"""Kinetic energy of a FermiNet-like determinant wavefunction: hlopt next to folx and the Hessian.

Wavefunction (float32 by default, --x64 for float64): n electrons in 3D (D = 3n);
per electron the features (r_i, |r_i|, r_i - mean_j r_j) go through a tanh MLP
(-> 32 -> 32, the mean of the other streams mixed in at each layer, as FermiNet
does), n orbitals per electron times an exponential envelope exp(-sigma_j |r_i|),
and log psi = log|det Phi| by `jnp.linalg.slogdet` (LU). Walkers: --walkers (128),
under jax.vmap.

Workloads, per n in --electrons (4 6 8):
  kinetic     the local kinetic energy -1/2 (Delta log psi + |grad log psi|^2) per walker
  gradient    the gradient with respect to the weights of the mean local kinetic energy
Methods (each under its jit; hlopt.jit for hlopt; the jax.jit programs compile with the XLA options
hlopt's tuning records for its program, `record.same_options`, so both sides get the same options):
  hlopt       hlopt.pde.laplacian_and_gradient: one collapsed 2-jet along the unit vectors gives the
              Laplacian and (its first coefficients) the gradient, as folx's one pass does (slogdet
              by its own JVP rule, a custom_jvp, and the solve's, a custom_linear_solve); jax.grad
  hlopt-jax   the same function under plain jax.jit (hlopt's operations lowered by their plain-JAX rule)
  folx        folx.forward_laplacian (bench extra), its Laplacian and Jacobian
  hessian     jnp.trace(jax.hessian) + jax.grad

Each round calls the methods in turn, the order rotated from round to round, and times
each method's call right after an untimed call of the same program: a call that follows
another program's long run (the Hessian's) ran up to 1.7x slower than the same call after
itself, whichever method it was, which a fixed order charged to the method after the Hessian.
Per method: the median over --repeat interleaved rounds, the median of each round's
ratio folx / method (above 1: faster than folx) and of method / hlopt (`over_hlopt`: for
hlopt-jax, jax.jit's time over hlopt.jit's), the same ratio of the CPU time the
process spent in the call (all threads; `time.process_time`), which on a loaded shared
machine varies less than wall-clock time does (other processes' work is not counted), the largest difference from the
Hessian trace in float64 on the same inputs (relative to its largest value; the kinetic
energy cancels -Delta log psi against |grad log psi|^2, so float32 differs by more
than its epsilon where log psi is steep), and the peak memory: XLA's compiled
memory statistics (arguments + outputs + temporaries), taken in a subprocess with
XLA:CPU's YNNPACK fusions off (their scratch is not counted otherwise).

Usage: python bench/wavefunction.py [--electrons 4 6 8] [--walkers 128] [--repeat 7] [--x64]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "--memory" in sys.argv:
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type="

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from pde_operators import peak_memory_in_subprocess, peak_mib  # noqa: E402
from record import progress, same_options, write_record  # noqa: E402

import hlopt  # noqa: E402
from hlopt.pde import laplacian_and_gradient  # noqa: E402

HIDDEN = 32
METHODS = ("hlopt", "hlopt-jax", "folx", "hessian")


def init(key: jax.Array, n: int, dtype) -> dict:
    k = jax.random.split(key, 5)
    normal = lambda key, shape: (jax.random.normal(key, shape) / np.sqrt(shape[0])).astype(dtype)  # noqa: E731
    return {"w1": normal(k[0], (7, HIDDEN)), "m1": normal(k[1], (HIDDEN, HIDDEN)),
            "w2": normal(k[2], (HIDDEN, HIDDEN)), "out": normal(k[3], (HIDDEN, n)),
            "sigma": (1.0 + 0.1 * jax.random.normal(k[4], (n,))).astype(dtype)}


def log_psi(p: dict, x: jax.Array) -> jax.Array:
    r = x.reshape(-1, 3)
    norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1e-2)
    h = jnp.tanh(jnp.concatenate([r, norm, r - jnp.mean(r, 0)], -1) @ p["w1"])
    h = jnp.tanh(h @ p["w2"] + jnp.mean(h, 0) @ p["m1"]) + h
    phi = (h @ p["out"]) * jnp.exp(-norm * p["sigma"])
    return jnp.linalg.slogdet(phi)[1]


def kinetic(method: str):
    """The local kinetic energy of one walker by `method`."""
    if method == "folx":
        from folx import forward_laplacian

        def fn(p, x):
            out = forward_laplacian(lambda y: log_psi(p, y))(x)
            return -0.5 * (out.laplacian + jnp.sum(out.jacobian.dense_array ** 2))
        return fn
    if method in ("hlopt", "hlopt-jax"):
        def fn(p, x):
            laplacian, gradient = laplacian_and_gradient(lambda y: log_psi(p, y))(x)
            return -0.5 * (laplacian + jnp.sum(gradient ** 2))
        return fn
    laplacian = lambda p, x: jnp.trace(jax.hessian(lambda y: log_psi(p, y))(x))  # noqa: E731
    return lambda p, x: -0.5 * (laplacian(p, x) + jnp.sum(jax.grad(log_psi, 1)(p, x) ** 2))


def programs(method: str) -> dict:
    jit = hlopt.jit if method == "hlopt" else jax.jit
    energies = jax.vmap(kinetic(method), in_axes=(None, 0))
    return {"kinetic": jit(energies), "gradient": jit(jax.grad(lambda p, xs: jnp.mean(energies(p, xs))))}


def inputs(n: int, walkers: int, dtype) -> tuple:
    return init(jax.random.key(n), n, dtype), jax.random.normal(jax.random.key(100 + n), (walkers, 3 * n), dtype)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--electrons", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--walkers", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--x64", action="store_true")
    parser.add_argument("--memory", action="store_true", help="only print each program's peak memory as JSON")
    a = parser.parse_args()
    load_before = os.getloadavg()
    if a.x64:
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.float64 if a.x64 else jnp.float32
    if a.memory:
        print(json.dumps({f"{n} {w}": {m: peak_mib(programs(m)[w], inputs(n, a.walkers, dtype)) for m in METHODS}
                          for n in a.electrons for w in ("kinetic", "gradient")}))
        return
    memory = peak_memory_in_subprocess()
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs, {np.dtype(dtype).name}, {a.walkers} walkers, "
          f"load average {' '.join(f'{x:.1f}' for x in load_before)}")
    figures = []
    for n in a.electrons:
        args = inputs(n, a.walkers, dtype)
        for workload in ("kinetic", "gradient"):
            progress(f"n = {n}: {workload}, compiling {len(METHODS)} methods, then {a.repeat} interleaved rounds")
            fns, options = same_options({m: programs(m)[workload] for m in METHODS}, args, "hlopt")
            outs = {m: jax.block_until_ready(fn(*args)) for m, fn in fns.items()}
            times = {m: [] for m in METHODS}
            cpu = {m: [] for m in METHODS}
            for r in range(a.repeat):
                for m in METHODS[r % len(METHODS):] + METHODS[:r % len(METHODS)]:
                    jax.block_until_ready(fns[m](*args))  # untimed: the timed call follows its own program
                    t0, c0 = time.perf_counter(), time.process_time()
                    jax.block_until_ready(fns[m](*args))
                    times[m].append(time.perf_counter() - t0)
                    cpu[m].append(time.process_time() - c0)
            with jax.enable_x64(True):  # the reference: the Hessian trace in float64 on the same inputs
                wide = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), args)
                ref = np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(programs("hessian")[workload](*wide))])
            print(f"\n== {workload}, n = {n} (D = {3 * n})")
            print(f"{'method':<8} {'median ms':>10} {'folx/method':>12} {'min-max':>12} {'CPU ms':>8} {'CPU ratio':>10} "
                  f"{'min-max':>12} {'peak MiB':>9} {'max |diff|/|f64 ref|':>21}")
            for m in METHODS:
                ratios = [f / t for f, t in zip(times["folx"], times[m])]
                cpu_ratios = [f / t for f, t in zip(cpu["folx"], cpu[m])]
                got = np.concatenate([np.ravel(v) for v in jax.tree_util.tree_leaves(outs[m])])
                diff = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
                peak = memory[f"{n} {workload}"][m]
                print(f"{m:<8} {1e3 * np.median(times[m]):>10.2f} {np.median(ratios):>12.2f} "
                      f"{min(ratios):>5.2f}-{max(ratios):<6.2f} {1e3 * np.median(cpu[m]):>8.2f} "
                      f"{np.median(cpu_ratios):>10.2f} {min(cpu_ratios):>5.2f}-{max(cpu_ratios):<6.2f} "
                      f"{peak:>9.1f} {diff:>21.1e}")
                figures.append({"workload": workload, "electrons": n, "walkers": a.walkers,
                                "dtype": np.dtype(dtype).name, "method": m, "median_s": float(np.median(times[m])),
                                "ratio": float(np.median(ratios)), "ratio_min": float(min(ratios)),
                                "ratio_max": float(max(ratios)), "ratio_is": "folx / method",
                                "cpu_s": float(np.median(cpu[m])), "cpu_ratio": float(np.median(cpu_ratios)),
                                "cpu_ratio_min": float(min(cpu_ratios)), "cpu_ratio_max": float(max(cpu_ratios)),
                                "peak_mib": peak, "max_rel_diff_vs_float64_hessian": diff,
                                "over_hlopt": float(np.median([t / h for t, h in zip(times[m], times["hlopt"])])),
                                "over_hlopt_is": "method / hlopt, median of per-round ratios",
                                "xla_options": ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"})
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_record("wavefunction", figures, load_before=load_before,
                 options={"electrons": a.electrons, "walkers": a.walkers, "repeat": a.repeat, "x64": a.x64},
                 packages=("folx",))


if __name__ == "__main__":
    main()
