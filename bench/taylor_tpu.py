"""hlopt's Taylor mode against folx and JAX on the device JAX computes on (a TPU), in one process.

The programs of bench/wavefunction.py, bench/pinn_grad.py and bench/pde_operators.py, each
built by those scripts' functions, at the sizes of a TPU:

  kinetic     the wavefunction's local kinetic energy, --electrons, --walkers walkers
  gradient    its gradient in the network's parameters
  pinn        the PINN loss's gradient in the weights (tanh MLP 50-768-768-512-512-1), --pinn-batch points
  laplacian   the exact Laplacian of that network, --laplacian-batch points

Methods: hlopt (hlopt.jit), folx (folx.forward_laplacian under jax.jit) and jax (the nested
Hessian's trace under jax.jit), chosen by --methods; with --without PASS, also hlopt compiled
with `hlopt-default` less that pass (method `hlopt-without-PASS`), to measure what a tuning
pass does. Every jax.jit program compiles with the XLA options hlopt's
tuning records for its program (`record.same_options`). Each of --rounds rounds times each
method once after an untimed call of the same program, the order rotated from round to
round; per method the median time, the median of the per-round ratios folx / method and
jax / method where those run (above 1: faster than that reference), and the largest
difference from the first method's result relative to its largest entry. With --dump DIR, each workload's hlopt program after
`hlopt-default` for the platform, and XLA's optimized HLO of hlopt's and folx's programs, go
into DIR for reading.

Usage: python bench/taylor_tpu.py [--electrons 8 16 32] [--walkers 1024] [--pinn-batch 512]
       [--laplacian-batch 2048] [--rounds 9] [--workloads kinetic gradient pinn laplacian]
       [--methods hlopt folx jax] [--without PASS ...] [--dump DIR]
Every row goes into a record under `bench/results/taylor_tpu/` with the device's kind.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "")  # the scripts below pin the CPU unless this is set: any device

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pde_operators  # noqa: E402
import pinn_grad  # noqa: E402
import wavefunction  # noqa: E402
from record import progress, same_options, write_record  # noqa: E402

import hlopt  # noqa: E402
from hlopt.passes.registry import PIPELINES  # noqa: E402

METHODS = ("hlopt", "folx", "jax")
WORKLOADS = ("kinetic", "gradient", "pinn", "laplacian")


def wavefunction_programs(workload: str, n: int, walkers: int) -> tuple[dict[str, Callable], tuple]:
    names = {"hlopt": "hlopt", "folx": "folx", "jax": "hessian"}
    return ({m: wavefunction.programs(name)[workload] for m, name in names.items()},
            wavefunction.inputs(n, walkers, jnp.float32))


def pinn_programs(batch: int) -> tuple[dict[str, Callable], tuple]:
    found = pinn_grad.methods()
    a = argparse.Namespace(batch=batch, dims=[50])
    (_, args), = pinn_grad.problems(a)
    return {"hlopt": found["hlopt"], "folx": found["folx"], "jax": found["nested"]}, args


def laplacian_programs(batch: int, dim: int = 50) -> tuple[dict[str, Callable], tuple]:
    found = pde_operators.methods_laplacian(dim)
    params = pde_operators.init(jax.random.key(0), [dim, 768, 768, 512, 512, 1])
    xs = jax.random.normal(jax.random.key(1), (batch, dim), jnp.float32)
    return {"hlopt": found["collapsed"], "folx": found["folx"], "jax": found["nested"]}, (params, xs)


def cases(a: argparse.Namespace) -> Iterator[tuple[str, dict, dict[str, Callable], tuple]]:
    """(title, parameters, programs by method, arguments) of each chosen workload and size."""
    for workload in ("kinetic", "gradient"):
        if workload in a.workloads:
            for n in a.electrons:
                yield (f"{workload}, {n} electrons", {"workload": workload, "electrons": n, "walkers": a.walkers},
                       *wavefunction_programs(workload, n, a.walkers))
    if "pinn" in a.workloads:
        yield f"pinn, {a.pinn_batch} points", {"workload": "pinn", "points": a.pinn_batch}, *pinn_programs(a.pinn_batch)
    if "laplacian" in a.workloads:
        yield (f"laplacian, {a.laplacian_batch} points", {"workload": "laplacian", "points": a.laplacian_batch},
               *laplacian_programs(a.laplacian_batch))


def flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in jax.tree_util.tree_leaves(tree)])


def dump(folder: Path, stem: str, fns: dict[str, Callable], args: tuple) -> None:
    """hlopt's program after `hlopt-default` for the platform, and XLA's optimized HLO of hlopt and folx."""
    platform = jax.devices()[0].platform
    lowered = fns["hlopt"].lower(*args)
    (folder / f"{stem}.hlopt.mlir").write_text(lowered.apply("hlopt-default", platform=platform).as_text())
    (folder / f"{stem}.hlopt.hlo").write_text(lowered.compile().as_text())
    if "folx" in fns:
        (folder / f"{stem}.folx.hlo").write_text(fns["folx"].lower(*args).compile().as_text())


def without(fn: Callable, name: str) -> Callable:
    """The hlopt.jit function `fn` compiled with `hlopt-default` less the pass `name`."""
    passes = PIPELINES["hlopt-default"].split(",")
    if name not in passes:
        raise SystemExit(f"--without {name}: no such pass in hlopt-default ({', '.join(passes)})")
    return hlopt.jit(fn.fun, pipeline=",".join(p for p in passes if p != name))


def compare(title: str, fns: dict[str, Callable], args: tuple, rounds: int) -> list[dict]:
    """Time `fns` interleaved; print and return one row per method."""
    fns, options = same_options(fns, args, "hlopt")
    methods = list(fns)
    outs = {}
    for m, fn in fns.items():
        t0 = time.perf_counter()
        outs[m] = flat(jax.block_until_ready(fn(*args)))
        progress(f"{title}: {m} compiled and ran in {time.perf_counter() - t0:.1f} s")
    times = {m: [] for m in methods}
    for r in range(rounds):
        for m in methods[r % len(methods):] + methods[:r % len(methods)]:
            jax.block_until_ready(fns[m](*args))  # untimed: the timed call follows its own program
            t0 = time.perf_counter()
            jax.block_until_ready(fns[m](*args))
            times[m].append(time.perf_counter() - t0)
    first = methods[0]
    scale = max(float(np.max(np.abs(outs[first]))), 1e-30)
    refs = [ref for ref in ("folx", "jax") if ref in fns]
    rows = []
    print(f"\n== {title}\n{'method':<32} {'median ms':>10}" + "".join(f" {ref + '/method':>12}" for ref in refs)
          + f" {'max |diff|/|' + first + '|':>20}")
    for m in methods:
        row = {"method": m, "median_s": statistics.median(times[m]),
               **{f"{ref}_ratio": statistics.median(f / t for f, t in zip(times[ref], times[m])) for ref in refs},
               "ratio_is": "reference / method, median of per-round ratios",
               f"max_rel_diff_vs_{first}": float(np.max(np.abs(outs[m] - outs[first]))) / scale,
               "xla_options": ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"}
        print(f"{m:<32} {1e3 * row['median_s']:>10.3f}" + "".join(f" {row[f'{ref}_ratio']:>12.2f}" for ref in refs)
              + f" {row[f'max_rel_diff_vs_{first}']:>20.1e}")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--electrons", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--walkers", type=int, default=1024)
    parser.add_argument("--pinn-batch", type=int, default=512)
    parser.add_argument("--laplacian-batch", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--without", nargs="+", default=[], metavar="PASS",
                        help="also time hlopt compiled without each of these passes of hlopt-default")
    parser.add_argument("--dump", type=Path, help="write each workload's programs (hlopt's passes' output, XLA's HLO) here")
    parser.add_argument("--note", default="", help="recorded with the figures: what the run measures, ...")
    a = parser.parse_args()
    load_before = os.getloadavg()
    device = jax.devices()[0]
    print(f"jax {jax.__version__}, {device.platform} {device.device_kind}, hlopt {hlopt.__version__}")
    figures = []
    for title, params, found, args in cases(a):
        fns = {m: found[m] for m in ("hlopt", *a.methods)}
        fns.update({f"hlopt-without-{name}": without(found["hlopt"], name) for name in a.without})
        if a.dump:
            a.dump.mkdir(parents=True, exist_ok=True)
            dump(a.dump, title.replace(", ", "_").replace(" ", "-"), fns, args)
        figures += [{**params, **row} for row in compare(title, fns, args, a.rounds)]
    write_record("taylor_tpu", figures, load_before=load_before, options={k: str(v) for k, v in vars(a).items()},
                 packages=("folx",))


if __name__ == "__main__":
    main()
