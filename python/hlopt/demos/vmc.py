"""`hlopt demo vmc`: variational Monte Carlo of three fermions in a harmonic trap.

The wavefunction is a Slater determinant, psi(x) = det Phi(x), with orbitals
phi_j(r_i) = (c_j0 + c_j . r_i + a small MLP of r_i) exp(-alpha |r_i|^2 / 2) for three
same-spin electrons in the 3D trap H = sum_i -1/2 lap_i + 1/2 |r_i|^2 (no interaction,
units of hbar omega). Its ground state fills the 1s shell and two of the 1p ones:
E_0 = 3/2 + 5/2 + 5/2 = 6.5. Each step samples |psi|^2 by Metropolis, takes the local
energy E_L = -1/2 (lap log|psi| + |grad log|psi||^2) + V with lap log|psi| from
`hlopt.laplacian` (the Taylor rules of the LU factorization inside `slogdet`), checks
that kinetic part against `jnp.trace(jax.hessian(log|psi|))`, and moves the weights
along the usual VMC gradient 2 <(E_L - <E_L>) grad_theta log|psi|>. In float64.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

ELECTRONS = 3
HIDDEN = 8
WALKERS = 256
SWEEPS = 10  # Metropolis moves between optimisation steps
STEPS = 12
LEARNING_RATE = 0.02
EXACT = 6.5  # 3/2 + 5/2 + 5/2


def initial_weights(seed: int = 0) -> dict:
    """Orbitals 1, x, y plus a little noise and an MLP, under a too-wide envelope (alpha = 0.5)."""
    rng = np.random.default_rng(seed)
    linear = np.eye(4, ELECTRONS)[1:] + 0.1 * rng.normal(size=(3, ELECTRONS))  # c_j . r
    return {"constant": np.eye(4, ELECTRONS)[0] + 0.1 * rng.normal(size=ELECTRONS), "linear": linear,
            "w1": rng.normal(size=(3, HIDDEN)) / np.sqrt(3), "b1": 0.1 * rng.normal(size=HIDDEN),
            "w2": 0.05 * rng.normal(size=(HIDDEN, ELECTRONS)), "log_alpha": np.log(0.5)}


def log_psi(p: dict, x):
    """log|det Phi(x)| for the flattened positions `x` (3 * ELECTRONS,)."""
    import jax.numpy as jnp

    r = x.reshape(ELECTRONS, 3)
    mlp = jnp.tanh(r @ p["w1"] + p["b1"]) @ p["w2"]
    envelope = jnp.exp(-0.5 * jnp.exp(p["log_alpha"]) * jnp.sum(r * r, -1, keepdims=True))
    return jnp.linalg.slogdet((p["constant"] + r @ p["linear"] + mlp) * envelope)[1]


def local_energies(p: dict, xs, laplacian):
    """(E_L, the kinetic part) per walker, the Laplacian of log|psi| by `laplacian`."""
    import jax
    import jax.numpy as jnp

    f = lambda x: log_psi(p, x)  # noqa: E731
    grad = jax.vmap(jax.grad(f))(xs)
    kinetic = -0.5 * (jax.vmap(laplacian(f))(xs) + jnp.sum(grad * grad, -1))
    return kinetic + 0.5 * jnp.sum(xs * xs, -1), kinetic


def hessian_trace(f):
    """The reference Laplacian: the trace of jax.hessian."""
    import jax
    import jax.numpy as jnp

    return lambda x: jnp.trace(jax.hessian(f)(x))


def metropolis(p: dict, xs, key, width: float = 0.5):
    """SWEEPS Metropolis moves of every walker under |psi|^2; the walkers and the acceptance rate."""
    import jax
    import jax.numpy as jnp

    logp = jax.vmap(lambda x: 2.0 * log_psi(p, x))

    def sweep(_, state):
        xs, lp, key, accepted = state
        key, move, coin = jax.random.split(key, 3)
        proposal = xs + width * jax.random.normal(move, xs.shape, xs.dtype)
        lq = logp(proposal)
        accept = jnp.log(jax.random.uniform(coin, lp.shape, xs.dtype)) < lq - lp
        return (jnp.where(accept[:, None], proposal, xs), jnp.where(accept, lq, lp), key,
                accepted + jnp.mean(accept))

    xs, _, _, accepted = jax.lax.fori_loop(0, SWEEPS, sweep, (xs, logp(xs), key, jnp.zeros((), xs.dtype)))
    return xs, accepted / SWEEPS


def optimise(out: TextIO, steps: int = STEPS) -> tuple[list[float], list[float]]:
    """Run `steps` VMC steps, printing each; the energies and the kinetic checks' max relative differences."""
    import jax
    import jax.numpy as jnp

    import hlopt

    def by_hlopt(p, xs):
        return local_energies(p, xs, hlopt.laplacian)

    def reference_kinetic(p, xs):
        return local_energies(p, xs, hessian_trace)[1]

    def gradient(p, xs, e_local):
        """2 <(E_L - <E_L>) grad_theta log|psi|>: the energy's gradient, its variance-reduced form."""
        centred = jax.lax.stop_gradient(e_local - jnp.mean(e_local))
        return jax.grad(lambda q: 2.0 * jnp.mean(centred * jax.vmap(lambda x: log_psi(q, x))(xs)))(p)

    energies = hlopt.jit(by_hlopt)
    reference_kinetic, gradient, sample = jax.jit(reference_kinetic), jax.jit(gradient), jax.jit(metropolis)
    p = jax.tree_util.tree_map(jnp.asarray, initial_weights())
    key = jax.random.key(0)
    key, start = jax.random.split(key)
    xs = jax.random.normal(start, (WALKERS, 3 * ELECTRONS), jnp.float64)
    xs, _ = sample(p, xs, key)  # burn-in
    history, differences = [], []
    out.write(f"{'step':>4} {'energy':>10} {'+-':>6} {'kinetic (hlopt)':>16} {'kinetic (hessian)':>18} "
              f"{'max rel diff':>12} {'accept':>6}\n")
    for step in range(steps):
        key, move = jax.random.split(key)
        xs, accepted = sample(p, xs, move)
        e_local, kinetic = energies(p, xs)
        want = reference_kinetic(p, xs)
        difference = float(jnp.max(jnp.abs(kinetic - want) / jnp.maximum(jnp.abs(want), 1.0)))
        energy, error = float(jnp.mean(e_local)), float(jnp.std(e_local) / np.sqrt(WALKERS))
        history.append(energy)
        differences.append(difference)
        out.write(f"{step:>4} {energy:>10.4f} {error:>6.3f} {float(jnp.mean(kinetic)):>16.10f} "
                  f"{float(jnp.mean(want)):>18.10f} {difference:>12.1e} {float(accepted):>6.2f}\n")
        p = jax.tree_util.tree_map(lambda w, g: w - LEARNING_RATE * g, p, gradient(p, xs, e_local))
    return history, differences


def section(out: TextIO) -> None:
    import jax

    from hlopt.demos import banner

    banner(out, "vmc: variational Monte Carlo, the kinetic energy by hlopt.laplacian through slogdet")
    out.write(f"{ELECTRONS} same-spin electrons in a 3D harmonic trap, {WALKERS} walkers, float64; "
              f"the exact ground-state energy is {EXACT}\n")
    with jax.enable_x64(True):
        history, differences = optimise(out)
    worst = max(differences)
    out.write(f"every step's kinetic energy matches jnp.trace(jax.hessian): max relative difference {worst:.1e}\n")
    if not worst < 1e-9:
        raise AssertionError(f"vmc: hlopt.laplacian differs from the Hessian trace by {worst:.1e} (relative)")
    first, last = np.mean(history[:2]), np.mean(history[-2:])
    out.write(f"energy: {first:.3f} -> {last:.3f} (exact {EXACT})\n")
    if not (last < first - 0.5 and abs(last - EXACT) < abs(first - EXACT)):
        raise AssertionError(f"vmc: the energy did not fall toward {EXACT}: {history}")
    out.write("vmc: the energy falls toward the ground state\n")
