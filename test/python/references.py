"""Reference results the tests compare hlopt against, shared by the jet, PDE and vjp tests
(the vjp ones are in vjp_harness.py): plain Taylor coefficients by nested jax.jvp."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

def taylor_by_nested_jvp(f: Callable, primals, series, order: int):
    """Plain Taylor coefficients (y^(k)/k!) of t -> f(x(t)), x_i(t) = x_i0 + sum_k x_ik t^k
    per argument, by `order` nested jax.jvp in one jitted function.

    t is real, of the first floating-point argument's precision; integer arguments stay
    fixed; complex arguments and pytree outputs work. Level k of the nest returns the
    derivatives 0..k.
    """
    inexact = [jnp.issubdtype(np.asarray(x).dtype, jnp.inexact) for x in primals]
    dtypes = [np.asarray(x).dtype for x, d in zip(primals, inexact) if d]
    t0 = jnp.zeros((), jnp.finfo(dtypes[0]).dtype if dtypes else float)

    def derivatives(t):
        return (f(*[x0 + sum(c * t**k for k, c in enumerate(cs, 1)) if d else x0
                    for x0, cs, d in zip(primals, series, inexact)]),)

    for _ in range(order):
        def derivatives(t, inner=derivatives):
            values, tangents = jax.jvp(inner, (t,), (jnp.ones_like(t),))
            return values + (tangents[-1],)

    out = jax.jit(derivatives)(t0)
    return [jax.tree_util.tree_map(lambda v, k=k: v / math.factorial(k), d) for k, d in enumerate(out)]

