"""`hlopt demo`: an end-to-end tour on built-in examples.

Each section lowers a small function, prints its IR before and after the
pipeline, compiles and runs it, and checks the result against JAX. A feature
adds its section to `SECTIONS` as `name -> "module:function"`; the function
takes `out` (a text stream) and raises if its check fails.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import TextIO

import numpy as np

from hlopt.passes.ir.locations import did_you_mean

SECTIONS: dict[str, str] = {
    "driver": "hlopt.demos:driver_section",
    "sparse": "hlopt.demos.sparse:sparse_section",
    "jet": "hlopt.demos.jet:section",
    "pinn": "hlopt.demos.pinn:section",
    "vmc": "hlopt.demos.vmc:section",
    "partitioning": "hlopt.demos.partitioning:section",
    "aot": "hlopt.demos.aot:section",
    "key-reuse": "hlopt.demos.key_reuse:section",
}


def banner(out: TextIO, title: str) -> None:
    out.write(f"\n=== {title} ===\n")


def check_close(out: TextIO, name: str, got, want, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Print and assert that `got` equals the JAX reference `want`."""
    import jax

    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)
    out.write(f"{name}: matches jax.jit\n")


def driver_section(out: TextIO) -> None:
    import jax
    import jax.numpy as jnp

    import hlopt

    banner(out, "driver: lower, apply a pipeline, compile, run")

    def f(x, y):
        a = jnp.sin(x) * y
        b = jnp.sin(x) * y  # the same expression twice: cse folds it
        return {"sum": (a + b).sum(axis=0), "scaled": a * 2}

    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    y = np.float32(3)
    lowered = hlopt.lower(f, x, y)
    out.write("--- StableHLO from jax ---\n" + lowered.as_text())
    after = lowered.apply("hlopt-default")
    out.write("--- after hlopt-default ---\n" + after.as_text())
    compiled = after.compile(pipeline="")
    check_close(out, "driver", compiled(x, y), jax.jit(f)(x, y))


def run(out: TextIO = sys.stdout, only: list[str] | None = None) -> int:
    """Run every section (or those named in `only`); return how many ran."""
    names = only or list(SECTIONS)
    for name in names:
        if name not in SECTIONS:
            raise ValueError(f"no demo section '{name}'{did_you_mean(name, SECTIONS)} (sections: {', '.join(SECTIONS)})")
    for i, name in enumerate(names, 1):  # each step announced and timed, flushed as it happens
        out.write(f"\n[{i}/{len(names)}] {name}...\n")
        out.flush()
        start = time.perf_counter()
        module_name, func_name = SECTIONS[name].split(":")
        getattr(importlib.import_module(module_name), func_name)(out)
        out.write(f"[{i}/{len(names)}] {name}: done in {time.perf_counter() - start:.1f} s\n")
        out.flush()
    out.write(f"\nhlopt demo: {len(names)} section(s) ran, every result matches JAX\n")
    return len(names)
