"""`hlopt demo pinn`: a few training steps of a physics-informed network with hlopt.laplacian in its loss."""

from __future__ import annotations

from typing import TextIO

import numpy as np


def section(out: TextIO) -> None:
    import jax
    import jax.numpy as jnp

    import hlopt
    from hlopt.demos import banner, check_close

    banner(out, "pinn: jax.grad through hlopt.laplacian (vjp-expand of the collapsed jet)")
    # -lap u = 2 pi^2 sin(pi x) sin(pi y) on the unit square, u = 0 on its boundary
    rng = np.random.default_rng(0)
    points = rng.uniform(0.0, 1.0, (32, 2)).astype(np.float32)
    t = np.linspace(0.0, 1.0, 8, dtype=np.float32)
    zeros, ones = np.zeros_like(t), np.ones_like(t)
    boundary = np.concatenate([np.stack(p, axis=1) for p in ((t, zeros), (t, ones), (zeros, t), (ones, t))])
    source = 2 * np.pi**2 * np.sin(np.pi * points[:, 0]) * np.sin(np.pi * points[:, 1])
    sizes = [2, 16, 16, 1]
    params = [(rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a), np.zeros(b, np.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]

    def mlp(params, x):
        for W, b in params[:-1]:
            x = jnp.tanh(x @ W + b)
        W, b = params[-1]
        return (x @ W + b)[0]

    def loss(params, laplacian):
        u = lambda x: mlp(params, x)  # noqa: E731
        residual = jax.vmap(laplacian(u))(points) + source
        return jnp.mean(residual**2) + 10.0 * jnp.mean(jax.vmap(u)(boundary) ** 2)

    nested = lambda u: lambda x: jnp.trace(jax.hessian(u)(x))  # noqa: E731
    step = hlopt.jit(jax.value_and_grad(lambda p: loss(p, hlopt.laplacian)))
    text = step.lower(params).as_text()
    out.write(f"the lowered step holds {text.count('@hlopt.jet')} hlopt.jet and {text.count('@hlopt.vjp')} "
              "hlopt.vjp annotation(s); hlopt-default expands them\n")
    value, grads = step(params)
    want_value, want_grads = jax.jit(jax.value_and_grad(lambda p: loss(p, nested)))(params)
    check_close(out, "loss and gradient w.r.t. the weights vs jax.grad of the nested jnp.trace(jax.hessian) loss",
                (value, grads), (want_value, want_grads), rtol=2e-4, atol=2e-4 * float(np.abs(want_value)))
    losses = [float(value)]
    velocity = jax.tree_util.tree_map(jnp.zeros_like, params)
    for _ in range(30):  # gradient descent with momentum
        velocity = jax.tree_util.tree_map(lambda v, g: 0.9 * v - 1e-3 * g, velocity, grads)
        params = jax.tree_util.tree_map(lambda p, v: p + v, params, velocity)
        value, grads = step(params)
        losses.append(float(value))
    out.write("loss every 5 steps: " + ", ".join(f"{v:.3f}" for v in losses[::5]) + "\n")
    if not losses[-1] < 0.5 * losses[0]:
        raise AssertionError(f"pinn: the loss did not fall by half in 30 steps: {losses}")
    out.write("pinn: the loss falls\n")
