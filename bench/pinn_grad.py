"""Gradient of a PINN loss with respect to the weights: hlopt next to jax.grad of folx and of the nested Hessian.

Network: the tanh MLP D -> 768 -> 768 -> 512 -> 512 -> 1 of bench/pde_operators.py,
float32. Loss: mean over --batch interior points of (Laplacian u + 1)^2 plus the
mean of u^2 over --batch boundary points. Methods, each the gradient of that
loss with respect to every weight, under its jit (hlopt.jit for hlopt):

    hlopt    jax.grad of the loss with hlopt.laplacian (jet-collapse, jet-expand, vjp-expand)
    hlopt-jax  the same under plain jax.jit (hlopt's operation lowered by its plain-JAX rule)
    folx     jax.grad of the loss with folx.forward_laplacian
    nested   jax.grad of the loss with jnp.trace(jax.hessian(u))

Per method: the median over --repeat interleaved rounds of the time per
gradient, each round's ratio to hlopt (median of ratios; > 1 means hlopt is
faster), the time to first result (trace + passes + compile + first call), the
peak memory of the compiled program (arguments + outputs + temporaries, XLA's
compiled-memory statistics taken in a subprocess with YNNPACK fusions off, as in
bench/pde_operators.py), and
the largest difference from hlopt's gradient relative to its largest entry.

Usage: python bench/pinn_grad.py [--batch 8] [--dims 50 5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "--memory" in sys.argv:  # as bench/pde_operators.py: every intermediate in XLA's buffer assignment
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type="

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from pde_operators import init, mlp, peak_memory_in_subprocess, peak_mib, run  # noqa: E402

import hlopt  # noqa: E402
from record import progress, write_record  # noqa: E402


def pinn_loss(laplacian):
    """The loss of the network `params` at (points, boundary) with `laplacian(u)` the operator."""
    def loss(params, points, boundary):
        u = lambda x: mlp(params, x)  # noqa: E731
        residual = jax.vmap(laplacian(u))(points) + 1.0
        return jnp.mean(residual ** 2) + jnp.mean(jax.vmap(u)(boundary) ** 2)
    return loss


def methods():
    from folx import forward_laplacian

    nested = lambda u: lambda x: jnp.trace(jax.hessian(u)(x))  # noqa: E731
    folx_lap = lambda u: lambda x: forward_laplacian(u)(x).laplacian  # noqa: E731
    return {
        "hlopt": hlopt.jit(jax.grad(pinn_loss(hlopt.laplacian))),
        "hlopt-jax": jax.jit(jax.grad(pinn_loss(hlopt.laplacian))),
        "folx": jax.jit(jax.grad(pinn_loss(folx_lap))),
        "nested": jax.jit(jax.grad(pinn_loss(nested))),
    }


def problems(a):
    """(dim, (params, points, boundary)) for each --dims."""
    for dim in a.dims:
        params = init(jax.random.key(0), [dim, 768, 768, 512, 512, 1])
        points = jax.random.uniform(jax.random.key(1), (a.batch, dim), jnp.float32)
        boundary = jnp.where(jax.random.bernoulli(jax.random.key(2), 0.5, (a.batch, dim)), 1.0, 0.0)
        yield dim, (params, points, boundary)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dims", type=int, nargs="+", default=[50, 5])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    parser.add_argument("--memory", action="store_true", help="only print the peak memory of each method as JSON")
    a = parser.parse_args()
    load_before = os.getloadavg()
    if a.memory:
        print(json.dumps({dim: {name: peak_mib(fn, args) for name, fn in methods().items()}
                          for dim, args in problems(a)}))
        return
    progress("peak memory of each method, in a separate process")
    memory = peak_memory_in_subprocess()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {os.cpu_count()} CPUs, batch {a.batch}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    figures = []
    for dim, args in problems(a):
        figures += run(f"PINN loss gradient w.r.t. the weights, D={dim}", methods(), args, a.repeat,
                       memory[str(dim)], ref="hlopt")
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_record("pinn_grad", figures, load_before=load_before, options=vars(a), packages=("folx",))


if __name__ == "__main__":
    main()
