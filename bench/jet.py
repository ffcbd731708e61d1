"""hlopt.jet next to jax.experimental.jet and nested jax.jvp, in one process.

Workloads (the K-th directional derivative, input series (v, 0, ..., 0)):

  chain  exp(sin(cos(x)) * cos(x)) on a vector of --n elements (default 10^6)
  mlp    tanh MLP D=50 -> 768 -> 768 -> 512 -> 512 -> 1 on a batch of --batch (default 256),
         the setup of Dangel et al., "Collapsing Taylor mode automatic differentiation" (2025)

For each order K = 1..--max-order, all three under their jit (hlopt.jit for hlopt):

  run    fastest of --repeat calls (calls alternate between the methods so that machine noise
         hits all three; the minimum is the least noisy estimate on a shared machine), and the
         ratios hlopt/jet and hlopt/jvp of those minima (< 1 means hlopt is faster); "med": the
         median over the rounds of each round's ratio, which load on the machine shifts the least
  first  time to first result: trace + lower + passes + compile + first call, on a fresh function

Nested jvp grows as 2^K; --max-jvp-order caps it (default 8) and '-' marks what was skipped.

Usage: python bench/jet.py [--workload chain|mlp|both] [--max-order 8] [--repeat 5] [--n 1000000] [--batch 256]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import jet as jax_jet  # noqa: E402

import hlopt  # noqa: E402
from record import write_record  # noqa: E402


def chain(x):
    c = jnp.cos(x)
    return jnp.exp(jnp.sin(c) * c)


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _series(v, order):
    return ((v,) + tuple(jnp.zeros_like(v) for _ in range(order - 1)),)


def make_methods(f, order):
    """The K-th directional derivative of f(theta, x) along v in x, three ways."""

    def with_hlopt(theta, x, v):
        return hlopt.jet(lambda y: f(theta, y), (x,), _series(v, order))[1][-1]

    def with_jax_jet(theta, x, v):
        return jax_jet.jet(lambda y: f(theta, y), (x,), _series(v, order))[1][-1]

    def with_nested_jvp(theta, x, v):
        g = lambda y: f(theta, y)  # noqa: E731
        for _ in range(order):
            g = (lambda inner: lambda y: jax.jvp(inner, (y,), (v,))[1])(g)
        return g(x)

    return {"hlopt": lambda: hlopt.jit(with_hlopt), "jet": lambda: jax.jit(with_jax_jet),
            "jvp": lambda: jax.jit(with_nested_jvp)}


def first_result(make, args) -> tuple[float, object]:
    start = time.perf_counter()
    fn = make()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, fn


def run_times(fns: dict, args, repeat: int) -> dict[str, np.ndarray]:
    """Per method, the time of each of `repeat` rounds; each round calls every method once,
    in alternating order."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeat):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            start = time.perf_counter()
            jax.block_until_ready(fns[name](*args))
            times[name].append(time.perf_counter() - start)
    return {name: np.array(t) for name, t in times.items()}


def bench(name, f, args, max_order, max_jvp_order, repeat) -> list[dict]:
    """Print the table of one workload and return its rows as figures."""
    figures = []
    print(f"\n## {name}\n")
    print("| K | hlopt run (ms) | jet run (ms) | jvp run (ms) | hlopt/jet | hlopt/jvp | hlopt/jet med | hlopt/jvp med "
          "| hlopt first (s) | jet first (s) | jvp first (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for order in range(1, max_order + 1):
        makers = make_methods(f, order)
        if order > max_jvp_order:
            del makers["jvp"]
        first, fns, values = {}, {}, {}
        for m, make in makers.items():
            first[m], fns[m] = first_result(make, args)
            values[m] = np.asarray(fns[m](*args))
        scale = float(np.max(np.abs(values["jet"]))) or 1.0
        for m, v in values.items():  # all three compute the same derivative
            np.testing.assert_allclose(v, values["jet"], rtol=2e-2, atol=2e-3 * scale, err_msg=f"{name} K={order} {m}")
        rounds = run_times(fns, args, repeat)
        run = {m: t.min() for m, t in rounds.items()}
        ms = {m: f"{1e3 * run[m]:.2f}" if m in run else "-" for m in ("hlopt", "jet", "jvp")}
        fs = {m: f"{first[m]:.2f}" if m in first else "-" for m in ("hlopt", "jet", "jvp")}
        vs_jvp = f"{run['hlopt'] / run['jvp']:.2f}" if "jvp" in run else "-"
        med_jet = f"{np.median(rounds['hlopt'] / rounds['jet']):.2f}"
        med_jvp = f"{np.median(rounds['hlopt'] / rounds['jvp']):.2f}" if "jvp" in run else "-"
        print(f"| {order} | {ms['hlopt']} | {ms['jet']} | {ms['jvp']} | {run['hlopt'] / run['jet']:.2f} | {vs_jvp} "
              f"| {med_jet} | {med_jvp} | {fs['hlopt']} | {fs['jet']} | {fs['jvp']} |", flush=True)
        figure = {"workload": name, "order": order, "ratio_is": "hlopt / reference (< 1: hlopt faster)"}
        for m in ("hlopt", "jet", "jvp"):
            if m in run:
                figure[f"{m}_run_s"], figure[f"{m}_first_s"] = float(run[m]), first[m]
        figure["ratio_vs_jet"] = float(run["hlopt"] / run["jet"])
        figure["median_round_ratio_vs_jet"] = float(np.median(rounds["hlopt"] / rounds["jet"]))
        if "jvp" in run:
            figure["ratio_vs_jvp"] = float(run["hlopt"] / run["jvp"])
            figure["median_round_ratio_vs_jvp"] = float(np.median(rounds["hlopt"] / rounds["jvp"]))
        figures.append(figure)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("chain", "mlp", "both"), default="both")
    parser.add_argument("--max-order", type=int, default=8)
    parser.add_argument("--max-jvp-order", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    args = parser.parse_args()
    load_before = os.getloadavg()
    figures = []
    hlopt.set_cache_dir(None)
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} CPUs")
    if args.workload in ("chain", "both"):
        x, v = jax.device_put((rng.normal(size=args.n).astype(np.float32),
                               rng.normal(size=args.n).astype(np.float32)))
        figures += bench(f"chain of sin/cos/exp, n = {args.n}", lambda theta, y: chain(y), ((), x, v),
                         args.max_order, args.max_jvp_order, args.repeat)
    if args.workload in ("mlp", "both"):
        sizes = [50, 768, 768, 512, 512, 1]
        params = [((rng.normal(size=(m, n)) / np.sqrt(m)).astype(np.float32), rng.normal(size=n).astype(np.float32))
                  for m, n in zip(sizes, sizes[1:])]
        params, x, v = jax.device_put((params, rng.normal(size=(args.batch, 50)).astype(np.float32),
                                       rng.normal(size=(args.batch, 50)).astype(np.float32)))
        figures += bench(f"tanh MLP 50-768-768-512-512-1, batch {args.batch}", mlp, (params, x, v),
                         args.max_order, args.max_jvp_order, args.repeat)
    write_record("jet", figures, load_before=load_before, options=vars(args))


if __name__ == "__main__":
    main()
