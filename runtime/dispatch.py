"""Calling compiled programs through jaxlib's C++ dispatch, the fast path of `jax.jit`.

A call whose argument signature (pytree, shapes, dtypes, weak types,
shardings, static arguments) was seen before runs the PJRT executable from
C++, without Python; any other call goes to a Python `cache_miss` that
returns the outputs and, when the call can be replayed from C++, the
`Compiled` program that produced them. The private jax paths it needs are
in `hlopt.compiler.jax_compat`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from hlopt.compiler.jax_compat import api_boundary, cpp_pjit, fastpath_data, flatten_for_dispatch, is_committed

if TYPE_CHECKING:
    from hlopt.runtime.executable import Compiled

# Signatures remembered per function, as jax.jit's C++ cache does per function.
_CAPACITY = 256

CacheMiss = Callable[..., "tuple[Any, Compiled | None]"]


def cpp_function(fun: Callable, cache_miss: CacheMiss, static_argnums: Sequence[int] = (),
                 static_argnames: Sequence[str] = ()) -> Callable:
    """A C++ callable that runs `cache_miss(*args, **kwargs)` on new signatures and replays known ones.

    `cache_miss` returns `(outputs, compiled)`; `compiled` is None when the
    call cannot be replayed (traced arguments, typed PRNG keys, host
    callbacks). `fun` only names the callable and owns its signature cache.
    """

    @api_boundary  # an error below loses hlopt's frames (the C++ dispatch above adds none)
    def miss(*args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        outputs, compiled = cache_miss(*args, **kwargs)
        return outputs, (_fastpath(compiled, outputs) if compiled is not None else None), False

    return cpp_pjit(name=getattr(fun, "__name__", "hlopt_function"), fun=fun, cache_miss=miss,
                    static_argnums=static_argnums, static_argnames=static_argnames, capacity=_CAPACITY)


def _fastpath(compiled: Compiled, outputs: Any) -> Any:
    """What the C++ dispatch needs to run `compiled` again, or None if it cannot."""
    out_flat, out_tree = flatten_for_dispatch(outputs)
    if len(out_flat) != len(compiled.out_shardings) or not all(
        isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) for x in out_flat
    ):
        return None
    return fastpath_data(
        executable=compiled.executable, out_tree=out_tree, in_shardings=compiled.param_shardings,
        out_shardings=compiled.out_shardings, out_avals=[x.aval for x in out_flat],
        out_committed=[is_committed(x) for x in out_flat],
        kept=[i in set(compiled.signature.kept_inputs) for i in range(len(compiled.in_shardings))])
