"""Laplacian and bi-Laplacian of a tanh MLP: hlopt's collapsed Taylor mode next to the anchors.

Network: tanh MLP D -> 768 -> 768 -> 512 -> 512 -> 1 in float32 (Dangel et al.,
"Collapsing Taylor Mode Automatic Differentiation", 2025), a batch of --batch points
under jax.vmap. Methods, each under its jit (hlopt.jit for hlopt):

  exact Laplacian, D = --dim (50):
    collapsed   hlopt.laplacian (the collapsed jet)
    collapsed-jax  the same under plain jax.jit (hlopt's operation lowered by its plain-JAX rule)
    stde        the user's jax.vmap over directions of hlopt.jet, summed (jet-collapse rewrites it)
    standard    the same program compiled without jet-collapse (standard Taylor mode, primal once)
    nested      jnp.trace(jax.hessian(f))
    folx        folx.forward_laplacian (bench extra)
    jax-jet     jax.experimental.jet vmapped over the directions and summed
  weighted Laplacian (R = D/2) and randomized Laplacian (R = 8): collapsed vs nested/standard
  exact bi-Laplacian, D = --bi-dim (5):
    collapsed    hlopt.bilaplacian: Delta(Delta f) by nested collapsed 2-jets along e_1..e_D
    standard     the same formula in standard Taylor mode: the user's jax.vmap over e_i of
                 hlopt.jet 2-jets, summed, of the same code for Delta f, compiled without
                 jet-collapse (every coefficient carried once per direction, primal once)
    collapsed-4  one collapsed 4-jet along the D^2 directions e_i, e_i +- e_j with signed
                 weights (D^4 f[(e_i+e_j)^4] + D^4 f[(e_i-e_j)^4] = 2 T_iiii + 2 T_jjjj + 12 T_iijj,
                 so Delta^2 f = 4 sum_{i<j,+-} c_4 + 8 (4 - D) sum_i c_4(e_i))
    standard-4   those D^2 4-jets in standard Taylor mode (the vmap of hlopt.jet, weighted sum,
                 without jet-collapse): the paper's standard Taylor mode for the bi-Laplacian
    nested       jnp.trace(jax.hessian) of the nested Laplacian

The jax.jit programs compile with the XLA options hlopt's tuning records for the reference
method's program (`record.same_options`), so both sides get the same options. Per method: the median over --repeat interleaved rounds of the time per batch, each
round's ratio to the collapsed method (median of ratios), the time to first result
(trace + passes + compile + first call), and the peak memory: XLA's compiled-memory
statistics (arguments + outputs + temporaries) of each jitted program, taken in a fresh
subprocess with XLA:CPU's YNNPACK fusions off (XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=):
inside a YNNPACK fusion the intermediates are scratch that the statistics do not count,
which made, e.g., folx's Laplacian look 7 MiB smaller than it is. Timing runs with the
default flags.

Usage: python bench/pde_operators.py [--batch 16] [--dim 50] [--bi-dim 5] [--repeat 7]
       [--workloads exact weighted randomized bilaplacian]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
MEMORY = "--memory" in sys.argv
if MEMORY:  # see the docstring: every intermediate in XLA's buffer assignment
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type="

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import jet as jax_jet  # noqa: E402

import hlopt  # noqa: E402
from record import progress, same_options, write_record  # noqa: E402

STANDARD = "jet-expand,inline,canonicalize,cse,symbol-dce"
WORKLOADS = ("exact", "weighted", "randomized", "bilaplacian")


def init(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a), jnp.zeros(b, jnp.float32))
            for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[0]


def stde(params, x, V, order=2):
    """The user's code: the K-th coefficient along each direction of hlopt.jet, summed."""
    series = (V,) + tuple(jnp.zeros_like(V) for _ in range(order - 1))
    one = lambda *s: hlopt.jet(lambda y: mlp(params, y), (x,), (s,))[1][-1]  # noqa: E731
    return jax.vmap(one)(*series).sum(0)


def methods_laplacian(dim):
    from folx import forward_laplacian

    eye = jnp.eye(dim, dtype=jnp.float32)
    lap = hlopt.laplacian(mlp, argnums=1)
    nested = lambda p, x: jnp.trace(jax.hessian(mlp, argnums=1)(p, x))  # noqa: E731
    folx_lap = lambda p, x: forward_laplacian(lambda y: mlp(p, y))(x).laplacian  # noqa: E731

    def jax_jet_lap(p, x):
        one = lambda v: jax_jet.jet(lambda y: mlp(p, y), (x,), ((v, jnp.zeros_like(v)),))[1][1]  # noqa: E731
        return jax.vmap(one)(eye).sum(0)

    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    return {
        "collapsed": hlopt.jit(batched(lap)),
        "collapsed-jax": jax.jit(batched(lap)),
        "stde": hlopt.jit(batched(lambda p, x: stde(p, x, eye))),
        "standard": hlopt.jit(batched(lambda p, x: stde(p, x, eye)), pipeline=STANDARD),
        "nested": jax.jit(batched(nested)),
        "folx": jax.jit(batched(folx_lap)),
        "jax-jet": jax.jit(batched(jax_jet_lap)),
    }


def methods_weighted(dim):
    S = jax.random.normal(jax.random.key(5), (dim, dim // 2), jnp.float32)
    lap = hlopt.laplacian(mlp, argnums=1, weights=S)
    nested = lambda p, x: jnp.einsum("ij,ir,jr->", jax.hessian(mlp, argnums=1)(p, x), S, S)  # noqa: E731
    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    return {
        "collapsed": hlopt.jit(batched(lap)),
        "standard": hlopt.jit(batched(lambda p, x: stde(p, x, S.T)), pipeline=STANDARD),
        "nested": jax.jit(batched(nested)),
    }


def methods_randomized(dim, r=8):
    key = jax.random.key(9)
    lap = hlopt.laplacian(mlp, argnums=1, num_samples=r)
    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    V = jax.random.normal(key, (r, dim), jnp.float32)
    return {
        "collapsed": hlopt.jit(batched(lambda p, x: lap(p, x, key=key))),
        "standard": hlopt.jit(batched(lambda p, x: stde(p, x, V) / r), pipeline=STANDARD),
    }


def bilaplacian_directions(dim):
    """The D^2 directions e_i, e_i +- e_j and the weights of the 4-jet formula (docstring)."""
    eye = np.eye(dim)
    pairs = [eye[i] + s * eye[j] for i in range(dim) for j in range(i + 1, dim) for s in (1.0, -1.0)]
    directions = np.stack(pairs + list(eye)) if pairs else eye
    weights = [4.0] * len(pairs) + [8.0 * (4 - dim)] * dim
    return jnp.asarray(directions, jnp.float32), weights


def methods_bilaplacian(dim):
    from hlopt.pde import collapsed_jet

    eye = jnp.eye(dim, dtype=jnp.float32)
    lap = lambda p, x: jnp.trace(jax.hessian(mlp, argnums=1)(p, x))  # noqa: E731
    nested = lambda p, x: jnp.trace(jax.hessian(lap, argnums=1)(p, x))  # noqa: E731
    V, w = bilaplacian_directions(dim)
    weights = jnp.asarray(w, jnp.float32)

    def user_laplacian(g, x):
        one = lambda v: hlopt.jet(g, (x,), ((v, 0 * v),))[1][-1]  # noqa: E731
        return jax.vmap(one)(eye).sum(0)

    def standard4(p, x):
        one = lambda v: hlopt.jet(lambda y: mlp(p, y), (x,), ((v, 0 * v, 0 * v, 0 * v),),  # noqa: E731
                                  factorial_scaled=False)[1][-1]
        return (jax.vmap(one)(V) * weights).sum()

    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    return {
        "collapsed": hlopt.jit(batched(hlopt.bilaplacian(mlp, argnums=1))),
        "standard": hlopt.jit(batched(lambda p, x: user_laplacian(lambda y: user_laplacian(
            lambda z: mlp(p, z), y), x)), pipeline=STANDARD),
        "collapsed-4": hlopt.jit(batched(lambda p, x: collapsed_jet(lambda y: mlp(p, y), x, V, 4, tuple(w)))),
        "standard-4": hlopt.jit(batched(standard4), pipeline=STANDARD),
        "nested": jax.jit(batched(nested)),
    }


def peak_mib(fn, args) -> float:
    """Arguments + outputs + temporaries of the compiled program (XLA's memory statistics), MiB;
    an `hlopt.jit` function's program compiled with its own pipeline, as its calls run it."""
    lowered = fn.lower(*args)
    compiled = lowered.compile(fn.pipeline) if isinstance(fn, hlopt.JitFunction) else lowered.compile()
    stats = (compiled.executable.get_compiled_memory_stats() if isinstance(fn, hlopt.JitFunction)
             else compiled.memory_analysis())
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes) / 2 ** 20


def peak_memory_in_subprocess() -> dict:
    """What the running script prints last as JSON when run again with `--memory`, in a fresh
    process (where the flag turns YNNPACK fusions off before jax is imported)."""
    script = os.path.abspath(sys.argv[0])
    return json.loads(subprocess.run([sys.executable, script, "--memory", *sys.argv[1:]], check=True,
                                     capture_output=True, text=True).stdout.splitlines()[-1])


def run(title, methods, args, repeat, memory, ref="collapsed") -> list[dict]:
    """Time `methods` interleaved, the order rotated from round to round, each timed call right
    after an untimed call of the same program (a call that follows another program's long run
    is slower, whichever it is); print each one's median, ratio to `ref`, time to first
    result, peak memory (`memory[name]`), and largest difference from `ref`'s output, and
    return those as one figure per method."""
    progress(f"{title}: compiling {len(methods)} methods, then {repeat} interleaved rounds")
    methods, options = same_options(methods, args, ref)
    first, out = {}, {}
    for name, fn in methods.items():
        t0 = time.perf_counter()
        result = jax.block_until_ready(fn(*args))
        first[name] = time.perf_counter() - t0
        out[name] = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(result)])
    times = {name: [] for name in methods}
    names = list(methods)
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            jax.block_until_ready(methods[name](*args))  # untimed: the timed call follows its own program
            t0 = time.perf_counter()
            jax.block_until_ready(methods[name](*args))
            times[name].append(time.perf_counter() - t0)
    figures = []
    print(f"\n== {title}")
    print(f"{'method':<12} {'median ms':>10} {f'ratio/{ref} (med)':>22} {'first s':>8} {'peak MiB':>9} "
          f"{'max |diff|/|ref|':>17}")
    for name in methods:
        ratio = np.median([t / c for t, c in zip(times[name], times[ref])])
        diff = np.max(np.abs(out[name] - out[ref])) / max(np.max(np.abs(out[ref])), 1e-30)
        print(f"{name:<12} {1e3 * np.median(times[name]):>10.2f} {ratio:>22.2f} {first[name]:>8.2f} "
              f"{memory[name]:>9.1f} {diff:>17.1e}")
        figures.append({"workload": title, "method": name, "median_s": float(np.median(times[name])),
                        "ratio": float(ratio), "ratio_is": f"method / {ref}, median of per-round ratios",
                        "first_s": first[name], "peak_mib": memory[name], "max_rel_diff": float(diff),
                        "xla_options": ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"})
    return figures


def workloads(a):
    """(title, methods, args) of each workload."""
    params = init(jax.random.key(0), [a.dim, 768, 768, 512, 512, 1])
    xs = jax.random.normal(jax.random.key(1), (a.batch, a.dim), jnp.float32)
    params_bi = init(jax.random.key(2), [a.bi_dim, 768, 768, 512, 512, 1])
    xs_bi = jax.random.normal(jax.random.key(3), (a.batch, a.bi_dim), jnp.float32)
    chosen = {
        "exact": lambda: (f"exact Laplacian, D={a.dim}", methods_laplacian(a.dim), (params, xs)),
        "weighted": lambda: (f"weighted Laplacian, D={a.dim}, R={a.dim // 2}", methods_weighted(a.dim), (params, xs)),
        "randomized": lambda: (f"randomized Laplacian, D={a.dim}, R=8", methods_randomized(a.dim), (params, xs)),
        "bilaplacian": lambda: (f"exact bi-Laplacian, D={a.bi_dim}", methods_bilaplacian(a.bi_dim),
                                (params_bi, xs_bi)),
    }
    return [chosen[name]() for name in a.workloads]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--bi-dim", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    parser.add_argument("--memory", action="store_true", help="only print the peak memory of each method as JSON")
    a = parser.parse_args()
    load_before = os.getloadavg()
    if a.memory:
        print(json.dumps({title: {name: peak_mib(fn, args) for name, fn in methods.items()}
                          for title, methods, args in workloads(a)}))
        return
    memory = peak_memory_in_subprocess()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs, batch {a.batch}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    figures = []
    for title, methods, args in workloads(a):
        figures += run(title, methods, args, a.repeat, memory[title])
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_record("pde_operators", figures, load_before=load_before, options=vars(a), packages=("folx",))


if __name__ == "__main__":
    main()
