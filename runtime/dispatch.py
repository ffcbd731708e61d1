"""Calling compiled programs through jaxlib's C++ dispatch, the fast path of `jax.jit`.

A call whose argument signature (pytree, shapes, dtypes, weak types,
shardings, static arguments) was seen before runs the PJRT executable from
C++, without Python; any other call goes to a Python `cache_miss` that
returns the outputs and, when the call can be replayed from C++, the
`Compiled` program that produced them. This module holds the private jax
paths that dispatch needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
from jax._src import tree_util
from jax._src.interpreters import pxla
from jaxlib import _jax

if TYPE_CHECKING:
    from hlopt.runtime.executable import Compiled

# Signatures remembered per function, as jax.jit's C++ cache does per function.
_CAPACITY = 256
_NO_OPTIONS = pxla.JitGlobalCppCacheKeys()

CacheMiss = Callable[..., "tuple[Any, Compiled | None]"]


def cpp_function(fun: Callable, cache_miss: CacheMiss, static_argnums: Sequence[int] = ()) -> Callable:
    """A C++ callable that runs `cache_miss(*args)` on new signatures and replays known ones.

    `cache_miss` returns `(outputs, compiled)`; `compiled` is None when the
    call cannot be replayed (traced arguments, typed PRNG keys). `fun` only
    names the callable and owns its signature cache.
    """

    def miss(*args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        outputs, compiled = cache_miss(*args, **kwargs)
        return outputs, (_fastpath(compiled, outputs) if compiled is not None else None), False

    return _jax.pjit(
        getattr(fun, "__name__", "hlopt_function"), fun, miss, list(static_argnums), [], _NO_OPTIONS,
        tree_util.dispatch_registry, pxla.cc_shard_arg, _jax.PjitFunctionCache(capacity=_CAPACITY),
    )


def _fastpath(compiled: Compiled, outputs: Any) -> pxla.MeshExecutableFastpathData | None:
    """What the C++ dispatch needs to run `compiled` again, or None if it cannot."""
    if compiled.uses_keys:
        return None  # typed keys cross the program boundary as their words: Python does that
    out_flat, out_tree = tree_util.dispatch_registry.flatten(outputs, None)
    if len(out_flat) != len(compiled.out_shardings) or not all(
        isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) for x in out_flat
    ):
        return None
    n_in = len(compiled.in_shardings)
    return pxla.MeshExecutableFastpathData(
        compiled.executable, out_tree, compiled.in_shardings, compiled.out_shardings,
        [x.aval for x in out_flat], [x.committed for x in out_flat], [True] * n_in, [None] * n_in, [],
    )
