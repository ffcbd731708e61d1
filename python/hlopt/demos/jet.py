"""`hlopt demo jet`: the sin(x^3) example of JAX's jet documentation, end to end."""

from __future__ import annotations

from typing import TextIO

import numpy as np


def section(out: TextIO) -> None:
    import jax
    import jax.numpy as jnp

    import hlopt
    from hlopt.demos import banner, check_close

    banner(out, "jet: Taylor-mode differentiation as a StableHLO pass (jet-expand)")
    # h(z) = z^3 at z = 0.5 and its first derivatives; f = sin; jet gives the
    # derivatives of f(h(z)) by Faa di Bruno's formula.
    h0, h1, h2 = np.float32(0.5**3), np.float32(3 * 0.5**2), np.float32(6 * 0.5)

    def taylor(h0, h1, h2):
        return hlopt.jet(jnp.sin, (h0,), ((h1, h2),))

    lowered = hlopt.lower(taylor, h0, h1, h2)
    out.write("--- StableHLO from jax: the hlopt.jet annotation ---\n" + lowered.as_text())
    out.write("--- after jet-expand ---\n" + lowered.apply("jet-expand").as_text())
    f0, (f1, f2) = lowered.compile()(h0, h1, h2)
    out.write(f"f0 = {f0}, f1 = {f1}, f2 = {f2}\n")
    formula = (np.sin(h0), np.cos(h0) * h1, -np.sin(h0) * h1**2 + np.cos(h0) * h2)
    check_close(out, "jet of sin(x^3) vs Faa di Bruno", (f0, f1, f2), formula)

    def z_cubed_then_sin(z):
        return jnp.sin(z**3)

    d1 = lambda z: jax.jvp(z_cubed_then_sin, (z,), (1.0,))[1]  # noqa: E731
    d2 = jax.jvp(d1, (np.float32(0.5),), (np.float32(1.0),))[1]
    check_close(out, "second derivative vs nested jax.jvp", f2, d2, rtol=1e-5)
