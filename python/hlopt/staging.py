"""`hlopt.lower` and `hlopt.jit`: the user-facing entry points of the driver."""

from __future__ import annotations

import dataclasses

import functools
import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import Mesh

from hlopt.compiler.jax_compat import api_boundary
from hlopt.compiler.lowering import (JitOptions, argnums_and_argnames, jax_jitted, lower_function,
                                     program_precision, resolve_static_argnums)
from hlopt.compiler.pipeline import parse_pipeline
from hlopt.compiler.stages import CompilerOptions, Lowered, check_compiler_options
from hlopt.passes.ir.locations import shorten
from hlopt.runtime.compile import compile_traced
from hlopt.runtime.dispatch import cpp_function
from hlopt.runtime.executable import Compiled
from hlopt.runtime.host import HostCompiled


def _lower(fun: Callable, args: tuple[Any, ...], kwargs: dict[str, Any], options: JitOptions,
           check_key_reuse: bool, compiler_options: CompilerOptions = ()) -> Lowered:
    try:
        module, signature, host_compile, user_located = lower_function(fun, args, kwargs, options)
    except TypeError:
        static = resolve_static_argnums(options.static_argnums, len(args))
        problem = _not_an_array(fun, args, static)
        if problem is None:
            raise
        raise problem from None
    lowered = Lowered(module, signature, backend=compile_traced, host_compile=host_compile,
                      user_located=user_located, compiler_options=compiler_options, precision=program_precision())
    if check_key_reuse:
        from hlopt.passes.analyses.check_key_reuse import KeyReuseError, find_key_reuse  # imported for checked programs only

        # checked on the whole traced program, as jax's checker reads the jaxpr: jax's dead-code
        # elimination (keep_unused=False) would drop a key consumed by a draw no one reads
        whole = lowered if options.keep_unused else Lowered(
            lower_function(fun, args, kwargs, dataclasses.replace(options, keep_unused=True))[0], signature)
        reports = find_key_reuse(whole.module.operation)
        if reports:
            raise KeyReuseError(reports)
    return lowered


def _check_function(fun: Any, api: str) -> None:
    """Raise TypeError, saying what was given, unless `fun` can be called."""
    if not callable(fun):
        raise TypeError(f"{api} takes the function to compile first (a callable), got {type(fun).__name__} "
                        f"{shorten(repr(fun), 80)}")


@api_boundary
def lower(
    fun: Callable,
    *args: Any,
    mesh: Mesh | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] = (),
    check_key_reuse: bool = False,
) -> Lowered:
    """Lower `fun` at `args` to StableHLO, as `jax.jit(fun).lower(*args)` does.

    The module is the whole traced program: every argument and every op, read or not
    (`hlopt.jit`'s default `keep_unused=False` drops what is unread, as `jax.jit` does).

    Args:
      fun: the function to lower; it takes and returns pytrees of arrays.
      *args: its arguments: arrays, `jax.ShapeDtypeStruct`s or pytrees of them.
      mesh: the `jax.sharding.Mesh` the program runs on (needed for shardings).
      in_shardings: a `PartitionSpec` (or pytree of them) per argument, on `mesh`.
      out_shardings: the same for the outputs.
      static_argnums: positions of arguments that are Python values baked into the program.
      check_key_reuse: run the `check-key-reuse` pass first.

    Returns:
      A `Lowered`: print it, run passes on it with `apply`, or `compile` it.

    Raises:
      KeyReuseError: with `check_key_reuse=True`, the program consumes a PRNG key twice.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> lowered = hlopt.lower(lambda x: jnp.sin(x) * 2, jnp.ones(3))
      >>> "stablehlo.sine" in lowered.as_text()
      True
      >>> lowered.compile()(jnp.zeros(3)).tolist()
      [0.0, 0.0, 0.0]
    """
    _check_function(fun, "hlopt.lower")
    static_argnums, static_argnames = argnums_and_argnames(fun, static_argnums, (), "static")
    options = JitOptions(mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                         static_argnums=static_argnums, static_argnames=static_argnames, keep_unused=True)
    return _lower(fun, args, {}, options, check_key_reuse)


def _arg_key(x: Any) -> Any:
    """What a program depends on in an argument: shape, dtype, weak type, and the placement of a committed array."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return (x.shape, x.dtype, x.weak_type, x.sharding)
    if isinstance(x, jax.Array):  # typed PRNG key arrays have no weak_type
        return (x.shape, x.dtype, getattr(x, "weak_type", False), x.sharding if x.committed else None)
    aval = jax.typeof(x)  # host values: jax's canonical dtype; TypeError for what is not an array
    return (aval.shape, aval.dtype, aval.weak_type, None)


def _not_an_array(fun: Callable, args: tuple[Any, ...], static: Sequence[int]) -> TypeError | None:
    """The error for the first dynamic argument leaf that is no array (a string, a function, a
    class), naming its path and how to pass arrays only; None when every leaf is an array."""
    name = getattr(fun, "__name__", "the function")
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    for i, arg in enumerate(args):
        for path, leaf in [] if i in static else jax.tree_util.tree_flatten_with_path(arg)[0]:
            try:
                jax.typeof(leaf)
            except TypeError:
                what = f"argument {i}" + (f" ({params[i]})" if i < len(params) else "") + jax.tree_util.keystr(path)
                static_hint = f"mark it static: hlopt.jit({name}, static_argnums={i})"
                if path:  # a model or other pytree holding functions or classes beside its arrays
                    hint = ("; pass arrays only: split them from the rest and close over the rest, e.g. "
                            "`params, static = equinox.partition(model, equinox.is_array)` and call "
                            "`equinox.combine(params, static)` inside (flax: `graphdef, state = nnx.split(model)`), "
                            f"or, for an argument that holds no arrays, {static_hint}")
                else:
                    hint = f"; if it is a setting rather than data, {static_hint}"
                return TypeError(shorten(f"{name}: {what} is {type(leaf).__name__} {leaf!r}, not an array") + hint)
    return None


def _static_key(name: int | str, value: Any) -> tuple[int | str, type, Any]:
    """A static argument as jax.jit keys it: its type and value (1, 1.0 and True are three programs)."""
    try:
        hash(value)
    except TypeError as e:
        raise ValueError(f"static argument {name} of type {type(value)} is not hashable ({e}); "
                         "static arguments must be hashable, as for jax.jit") from None
    return (name, type(value), value)


class JitFunction:
    """A function compiled by hlopt on first call for each input signature (what `hlopt.jit` returns).

    Call it as the function; `lower` and `trace` give the stages of one signature, as
    `jax.jit`'s function has them.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> double = hlopt.jit(lambda x: 2 * x)
      >>> double(jnp.arange(3.0)).tolist()
      [0.0, 2.0, 4.0]
      >>> double.lower(jnp.arange(3.0)).compile()(jnp.ones(3)).tolist()
      [2.0, 2.0, 2.0]
    """

    def __init__(self, fun: Callable, *, pipeline: str, options: JitOptions, check_key_reuse: bool = False,
                 compiler_options: CompilerOptions = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        parse_pipeline(pipeline)  # a malformed pipeline is refused here, not at the first call
        self.pipeline = pipeline
        self.compiler_options = compiler_options
        self.options = options
        self.check_key_reuse = check_key_reuse
        self._cache: dict[Any, Compiled] = {}
        # Calls with a known signature run from C++; negative static_argnums need the call's arity.
        self._call = self._python_call
        if all(i >= 0 for i in options.static_argnums):
            self._call = cpp_function(fun, self._cache_miss, options.static_argnums, options.static_argnames)

    @api_boundary
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """The function lowered at these arguments, as `jax.jit(...).lower`."""
        return _lower(self.fun, args, kwargs, self.options, self.check_key_reuse, self.compiler_options)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """JAX's `Traced` stage of the function at these arguments (its jaxpr, `.lower()` of plain jax)."""
        return jax.jit(self.fun, static_argnums=self.options.static_argnums,
                       static_argnames=self.options.static_argnames).trace(*args, **kwargs)

    # Calling the instance calls `_call` (jaxlib's C++ dispatch) with no Python frame in between, as
    # calling a jax.jit function does; errors are filtered below, where the Python cache miss starts.
    __call__ = property(operator.attrgetter("_call"))

    @api_boundary
    def _python_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._cache_miss(*args, **kwargs)[0]

    def _cache_miss(self, *args: Any, **kwargs: Any) -> tuple[Any, Compiled | None]:
        """The outputs, and the program that computed them (None when traced: inlined)."""
        static = resolve_static_argnums(self.options.static_argnums, len(args))
        named = self.options.static_argnames
        dynamic = ([a for i, a in enumerate(args) if i not in static], {k: v for k, v in kwargs.items() if k not in named})
        leaves, tree = jax.tree_util.tree_flatten(dynamic)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self.fun(*args, **kwargs), None  # called while tracing: inline into the outer program
        statics = tuple(_static_key(i, args[i]) for i in static) + tuple(
            _static_key(k, kwargs[k]) for k in sorted(kwargs) if k in named)
        try:
            arg_keys = tuple(_arg_key(x) for x in leaves)
        except TypeError:
            unnamed = TypeError(f"{getattr(self.fun, '__name__', 'the function')}: an argument is not an array")
            raise _not_an_array(self.fun, args, static) or unnamed from None
        key = (tree, arg_keys, statics, jax.sharding.get_mesh(), jax.config.jax_default_device)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self.lower(*args, **kwargs).compile(self.pipeline)
            self._cache[key] = compiled
        outputs = compiled.call_flat(leaves)
        if isinstance(compiled, HostCompiled):
            self._dispatch_through_jax()
        return outputs, (compiled if compiled.executable is not None else None)

    def _dispatch_through_jax(self) -> None:
        """Make later calls go straight to one `jax.jit` of the function, once a program of it calls back
        into Python: such a program compiles as under `jax.jit` (`hlopt.runtime.host`) and cannot be
        replayed by hlopt's dispatch, so jax's own dispatch (C++ where jax has a fast path) is then the
        only layer a call crosses. Kept on hlopt's dispatch: functions checked for key reuse, which
        jax.jit would not check, and those given `mesh=`."""
        if self.check_key_reuse:
            return
        jitted = jax_jitted(self.fun, self.options, dict(self.compiler_options) or None)
        if jitted is not None:
            self._call = jitted


@api_boundary
def jit(
    fun: Callable | None = None,
    *,
    pipeline: str = "hlopt-default",
    mesh: Mesh | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
    donate_argnames: str | Sequence[str] = (),
    keep_unused: bool = False,
    compiler_options: dict[str, Any] | None = None,
    check_key_reuse: bool = False,
) -> Any:
    """Compile `fun` with hlopt's pipeline on first call, once per input signature, with `jax.jit`'s
    call contract (positional and keyword arguments, static and donated ones by position or name).

    Without `fun`, a decorator with these options (`@hlopt.jit(static_argnums=1)`). As for
    `jax.jit`, the compiled program drops the arguments the function does not use unless
    `keep_unused=True` (a call still takes them; a donated unused argument is then not consumed).

    Args:
      fun: the function to compile; it takes and returns pytrees of arrays.
      pipeline: the passes run before XLA compiles (`hlopt-opt --list-passes` lists them).
      mesh: the `jax.sharding.Mesh` the program runs on (needed for shardings).
      in_shardings: a `PartitionSpec` (or pytree of them) per argument, on `mesh`.
      out_shardings: the same for the outputs.
      static_argnums: positions of arguments that are Python values baked into the program.
      static_argnames: the same by name.
      donate_argnums: positions of arguments whose buffers the program may reuse.
      donate_argnames: the same by name.
      keep_unused: keep arguments the function does not read in the compiled program.
      compiler_options: XLA's options (`{"xla_cpu_enable_fast_math": True}`), as `jax.jit`
        takes them: names to str, bool, int or float values, checked by XLA when it compiles,
        and part of the persistent cache's key.
      check_key_reuse: check each new signature for PRNG key reuse before compiling.

    Returns:
      A `JitFunction` (or, without `fun`, a decorator that makes one).

    Raises:
      KeyReuseError: with `check_key_reuse=True`, the program consumes a PRNG key twice.
      PipelineError: `pipeline` does not parse, or a pass fails (raised at the first call).

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> @hlopt.jit
      ... def f(x, y):
      ...     return {"s": jnp.sin(x) * y}
      >>> f(jnp.zeros(2), 3.0)["s"].tolist()
      [0.0, 0.0]
    """
    options = dict(pipeline=pipeline, mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings,
                   static_argnums=static_argnums, static_argnames=static_argnames, donate_argnums=donate_argnums,
                   donate_argnames=donate_argnames, keep_unused=keep_unused, compiler_options=compiler_options,
                   check_key_reuse=check_key_reuse)
    xla_options = check_compiler_options(compiler_options)
    if fun is None:
        return functools.partial(jit, **options)
    _check_function(fun, "hlopt.jit")
    static = argnums_and_argnames(fun, static_argnums, static_argnames, "static")
    donate = argnums_and_argnames(fun, donate_argnums, donate_argnames, "donate")
    jit_options = JitOptions(
        mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings, static_argnums=static[0],
        static_argnames=static[1], donate_argnums=donate[0], donate_argnames=donate[1], keep_unused=keep_unused)
    return JitFunction(fun, pipeline=pipeline, check_key_reuse=check_key_reuse, compiler_options=xla_options,
                       options=jit_options)
