"""`hlopt.lower` and `hlopt.jit`: the user-facing entry points of the driver."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Mesh

from hlopt.compiler.lowering import check_static_argnums, lower_function, resolve_static_argnums
from hlopt.compiler.stages import Lowered
from hlopt.passes.check_key_reuse import KeyReuseError, find_key_reuse
from hlopt.runtime.compile import compile_lowered
from hlopt.runtime.dispatch import cpp_function
from hlopt.runtime.executable import Compiled


def lower(
    fun: Callable,
    *args: Any,
    mesh: Mesh | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] = (),
    check_key_reuse: bool = False,
) -> Lowered:
    """Lower `fun` at `args` (arrays or `jax.ShapeDtypeStruct`s) to StableHLO.

    With `check_key_reuse=True`, raise `KeyReuseError` if the program consumes a
    PRNG key twice (the `check-key-reuse` pass).
    """
    module, signature = lower_function(
        fun,
        *args,
        mesh=mesh,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
    )
    lowered = Lowered(module, signature, backend=compile_lowered)
    if check_key_reuse:
        reports = find_key_reuse(lowered.module.operation)
        if reports:
            raise KeyReuseError(reports)
    return lowered


def _arg_key(x: Any) -> Any:
    """What a program depends on in an argument: shape, dtype, weak type, and the placement of a committed array."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return (x.shape, x.dtype, x.weak_type, x.sharding)
    if isinstance(x, jax.Array):  # typed PRNG key arrays have no weak_type
        return (x.shape, x.dtype, getattr(x, "weak_type", False), x.sharding if x.committed else None)
    aval = jax.typeof(x)  # host values: jax's canonical dtype; TypeError for what is not an array
    return (aval.shape, aval.dtype, aval.weak_type, None)


def _static_key(i: int, value: Any) -> tuple[int, type, Any]:
    """A static argument as jax.jit keys it: its type and value (1, 1.0 and True are three programs)."""
    try:
        hash(value)
    except TypeError as e:
        raise ValueError(f"static argument {i} of type {type(value)} is not hashable ({e}); "
                         "static arguments must be hashable, as for jax.jit") from None
    return (i, type(value), value)


class JitFunction:
    """A function compiled by hlopt on first call for each input signature."""

    def __init__(self, fun: Callable, *, pipeline: str, mesh: Mesh | None, in_shardings: Any,
                 out_shardings: Any, static_argnums: Any, check_key_reuse: bool = False):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.pipeline = pipeline
        static_argnums = check_static_argnums(fun, static_argnums)
        self.options = dict(mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                            static_argnums=static_argnums, check_key_reuse=check_key_reuse)
        self._cache: dict[Any, Compiled] = {}
        # Calls with a known signature run from C++; negative static_argnums need the call's arity.
        self._call = self._python_call
        if all(i >= 0 for i in static_argnums):
            self._call = cpp_function(fun, self._cache_miss, static_argnums)

    def lower(self, *args: Any) -> Lowered:
        return lower(self.fun, *args, **self.options)

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)

    def _python_call(self, *args: Any) -> Any:
        return self._cache_miss(*args)[0]

    def _cache_miss(self, *args: Any) -> tuple[Any, Compiled | None]:
        """The outputs, and the program that computed them (None when traced: inlined)."""
        static = resolve_static_argnums(self.options["static_argnums"], len(args))
        leaves, tree = jax.tree_util.tree_flatten([a for i, a in enumerate(args) if i not in static])
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self.fun(*args), None  # called while tracing: inline into the outer program
        statics = tuple(_static_key(i, args[i]) for i in static)
        key = (tree, tuple(_arg_key(x) for x in leaves), statics, jax.sharding.get_mesh(),
               jax.config.jax_default_device)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self.lower(*args).compile(self.pipeline)
            self._cache[key] = compiled
        return compiled.call_flat(leaves), compiled


def jit(
    fun: Callable,
    *,
    pipeline: str = "hlopt-default",
    mesh: Mesh | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] = (),
    check_key_reuse: bool = False,
) -> JitFunction:
    """Compile `fun` with hlopt's pipeline on first call, once per input signature.

    With `check_key_reuse=True`, each new signature is checked for PRNG key
    reuse before compiling, raising `KeyReuseError`.
    """
    return JitFunction(fun, pipeline=pipeline, mesh=mesh, in_shardings=in_shardings,
                       out_shardings=out_shardings, static_argnums=static_argnums,
                       check_key_reuse=check_key_reuse)
