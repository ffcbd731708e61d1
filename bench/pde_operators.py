"""Laplacian and bi-Laplacian of a tanh MLP: hlopt's collapsed Taylor mode next to the anchors.

Network: tanh MLP D -> 768 -> 768 -> 512 -> 512 -> 1 in float32 (Dangel et al.,
"Collapsing Taylor Mode Automatic Differentiation", 2025), a batch of --batch points
under jax.vmap. Methods, each under its jit (hlopt.jit for hlopt):

  exact Laplacian, D = --dim (50):
    collapsed   hlopt.laplacian (the collapsed jet)
    stde        the user's jax.vmap over directions of hlopt.jet, summed (jet-collapse rewrites it)
    standard    the same program compiled without jet-collapse (standard Taylor mode, primal once)
    nested      jnp.trace(jax.hessian(f))
    folx        folx.forward_laplacian (bench extra)
    jax-jet     jax.experimental.jet vmapped over the directions and summed
  weighted Laplacian (R = D/2) and randomized Laplacian (R = 8): collapsed vs nested/standard
  exact bi-Laplacian, D = --bi-dim (5): collapsed, standard (vmap of a 4-jet), nested hessian of the Laplacian

Per method: the median over --repeat interleaved rounds of the time per batch, each
round's ratio to the collapsed method (median of ratios), the time to first result
(trace + passes + compile + first call), and the peak memory of the compiled program
(XLA's memory analysis: arguments + outputs + temporaries).

Usage: python bench/pde_operators.py [--batch 16] [--dim 50] [--bi-dim 5] [--repeat 7]
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

STANDARD = "jet-expand,inline,canonicalize,cse,symbol-dce"


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


def methods_bilaplacian(dim):
    bil = hlopt.bilaplacian(mlp, argnums=1)
    lap = lambda p, x: jnp.trace(jax.hessian(mlp, argnums=1)(p, x))  # noqa: E731
    nested = lambda p, x: jnp.trace(jax.hessian(lap, argnums=1)(p, x))  # noqa: E731
    from hlopt.pde import _bilaplacian_exact

    V, w = _bilaplacian_exact(jnp.zeros(dim, jnp.float32))
    weights = jnp.asarray(w, jnp.float32)

    def standard(p, x):
        one = lambda v: hlopt.jet(lambda y: mlp(p, y), (x,), ((v, 0 * v, 0 * v, 0 * v),),  # noqa: E731
                                  factorial_scaled=False)[1][-1]
        return (jax.vmap(one)(V) * weights).sum()

    batched = lambda f: jax.vmap(f, in_axes=(None, 0))  # noqa: E731
    return {
        "collapsed": hlopt.jit(batched(bil)),
        "standard": hlopt.jit(batched(standard), pipeline=STANDARD),
        "nested": jax.jit(batched(nested)),
    }


def peak_mib(fn, args) -> float | None:
    """Arguments + outputs + temporaries of the compiled program (XLA's memory statistics), MiB."""
    try:
        compiled = fn.lower(*args).compile()
        stats = (compiled.executable.get_compiled_memory_stats() if isinstance(fn, hlopt.JitFunction)
                 else compiled.memory_analysis())
        return (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes) / 2 ** 20
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        return None


def run(title, methods, args, repeat, ref="collapsed"):
    """Time `methods` interleaved; print each one's median, ratio to `ref`, time to first
    result, peak memory, and largest difference from `ref`'s output (any pytree)."""
    first, out = {}, {}
    for name, fn in methods.items():
        t0 = time.perf_counter()
        result = jax.block_until_ready(fn(*args))
        first[name] = time.perf_counter() - t0
        out[name] = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(result)])
    times = {name: [] for name in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - t0)
    print(f"\n== {title}")
    print(f"{'method':<10} {'median ms':>10} {f'ratio/{ref} (med)':>22} {'first s':>8} {'peak MiB':>9} "
          f"{'max |diff|/|ref|':>17}")
    for name, fn in methods.items():
        ratio = np.median([t / c for t, c in zip(times[name], times[ref])])
        diff = np.max(np.abs(out[name] - out[ref])) / max(np.max(np.abs(out[ref])), 1e-30)
        mib = peak_mib(fn, args)
        print(f"{name:<10} {1e3 * np.median(times[name]):>10.2f} {ratio:>22.2f} {first[name]:>8.2f} "
              f"{'-' if mib is None else f'{mib:.1f}':>9} {diff:>17.1e}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dim", type=int, default=50)
    parser.add_argument("--bi-dim", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    a = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs, batch {a.batch}")
    params = init(jax.random.key(0), [a.dim, 768, 768, 512, 512, 1])
    xs = jax.random.normal(jax.random.key(1), (a.batch, a.dim), jnp.float32)
    lap = methods_laplacian(a.dim)
    run(f"exact Laplacian, D={a.dim}", lap, (params, xs), a.repeat)
    run(f"weighted Laplacian, D={a.dim}, R={a.dim // 2}", methods_weighted(a.dim), (params, xs), a.repeat)
    run(f"randomized Laplacian, D={a.dim}, R=8", methods_randomized(a.dim), (params, xs), a.repeat)
    params_bi = init(jax.random.key(2), [a.bi_dim, 768, 768, 512, 512, 1])
    xs_bi = jax.random.normal(jax.random.key(3), (a.batch, a.bi_dim), jnp.float32)
    run(f"exact bi-Laplacian, D={a.bi_dim}", methods_bilaplacian(a.bi_dim), (params_bi, xs_bi), a.repeat)


if __name__ == "__main__":
    main()
