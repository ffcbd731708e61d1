"""The `key-reuse` section of `hlopt demo`: PRNG key reuse found in the IR, as JAX finds it."""

from __future__ import annotations

from typing import TextIO

import jax
import jax.numpy as jnp

import hlopt
from hlopt.demos import banner, check_close


# The user's program the section checks. It is compiled from this text under its own file name:
# hlopt's reports name the user's source lines and skip hlopt's own files, so a function defined in
# this module would be reported at the first frame outside hlopt (the `hlopt` console script).
EXAMPLE_FILE = "noisy_step.py"
EXAMPLE = """\
import jax
import jax.numpy as jnp


def noisy_step(key, x):
    noise = jax.random.normal(key, x.shape)
    dropout = jax.random.bernoulli(key, 0.5, x.shape)  # the bug: the same key again
    return jnp.where(dropout, x + noise, 0.0)
"""
_example: dict = {}
exec(compile(EXAMPLE, EXAMPLE_FILE, "exec"), _example)
noisy_step = _example["noisy_step"]


def sampler(key, x):
    def step(i, carry):
        x, key = carry
        key, noise_key = jax.random.split(key)
        return 0.9 * x + jax.random.normal(noise_key, x.shape), key
    return jax.lax.fori_loop(0, 10, step, (x, key))


def jax_finds_reuse(fun, *args) -> bool:
    with jax.debug_key_reuse(True):
        try:
            jax.make_jaxpr(fun)(*args)
        except jax.errors.KeyReuseError:
            return True
    return False


def section(out: TextIO) -> None:
    banner(out, "key-reuse: check-key-reuse on the lowered StableHLO")
    x = jnp.arange(4.0)
    out.write("".join(f"{EXAMPLE_FILE}:{n}: {line}" for n, line in enumerate(EXAMPLE.splitlines(True), 1)))
    try:
        hlopt.lower(noisy_step, jax.random.key(0), x, check_key_reuse=True)
    except hlopt.KeyReuseError as e:
        out.write(f"{e}\n")
        found = True
    else:
        found = False
    if not found or not jax_finds_reuse(noisy_step, jax.random.key(0), x):
        raise AssertionError("hlopt and jax.debug_key_reuse disagree on noisy_step")
    out.write("key-reuse: noisy_step is reported, as by jax.debug_key_reuse\n")

    key = jax.random.PRNGKey(0)  # a raw key: JAX's checker cannot see these, hlopt's can
    checked = hlopt.jit(sampler, check_key_reuse=True)
    if jax_finds_reuse(sampler, jax.random.key(0), x):
        raise AssertionError("jax.debug_key_reuse reports the correct sampler")
    check_close(out, "key-reuse: the sampler (split each iteration), checked by hlopt.jit", checked(key, x),
                jax.jit(sampler)(key, x))
