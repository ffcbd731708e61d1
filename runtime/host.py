"""Programs that call back into the Python process that compiled them.

A program with host callbacks or side effects (`jax.debug.print`,
`jax.debug.callback`, `pure_callback`, `io_callback`, equinox's `error_if`)
holds references to Python functions of this process and, for ordered effects,
threads runtime tokens between calls. hlopt compiles it the way `jax.jit`
does, with each hlopt operation made plain StableHLO by `hlopt-default` (see
"hlopt inside plain JAX"), so callbacks run, and ordered effects are ordered,
exactly as under `jax.jit`. Such a program cannot leave the process: `save`,
`serialize` and the persistent cache refuse it, as `jax.export` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from hlopt.compiler.program import Signature
from hlopt.compiler.stages import MovingModule, Stage
from hlopt.passes.mlir import ir



def _forwarded(name: str, doc: str) -> property:
    """A property reading `name` of the compiled jax program."""
    return property(lambda self: getattr(self._compiled, name), doc=doc)


def _forwarded_call(name: str, doc: str) -> Any:
    """A method calling `name` of the compiled jax program."""
    def method(self) -> Any:
        return getattr(self._compiled, name)()

    method.__name__, method.__doc__ = name, doc
    return method


class HostCallbackError(ValueError):
    """A program that calls back into this Python process was asked to leave it (saved, serialized, cached).

    It still runs in this process.

    Example:
      >>> import jax, jax.numpy as jnp, hlopt
      >>> def noisy(x):
      ...     jax.debug.print("x = {}", x)
      ...     return x + 1
      >>> compiled = hlopt.jit(noisy).lower(jnp.ones(2)).compile()
      >>> try:
      ...     compiled.serialize()
      ... except hlopt.HostCallbackError:
      ...     print("refused")
      refused
    """

    __module__ = "hlopt"  # raised and printed as users import it


class HostCompiled(Stage):
    """A compiled program with host callbacks or side effects; it runs in this process only.

    Called like `Compiled`, and with `jax.stages.Compiled`'s attributes, which
    are those of the program `jax.jit` compiled (`as_text()`, XLA's optimized
    HLO; `cost_analysis()`, `memory_analysis()`, `runtime_executable()`,
    `input_shardings`, `output_shardings`, `input_formats`, `output_formats`,
    `out_info`); `module` is the StableHLO it was compiled from, each hlopt
    operation made plain. `executable` is None: the C++ dispatch of
    `hlopt.jit` does not replay it; `hlopt.jit` sends the later calls of its
    function to one `jax.jit` of it instead, whose dispatch is jax's own.
    """

    executable = None

    def __init__(self, compiled: Any, module: Any, signature: Signature, pipeline: str):
        self._compiled = compiled
        self._module = MovingModule(module)
        self.signature = signature
        self.pipeline = pipeline

    def __repr__(self) -> str:
        return f"<hlopt.Compiled {self.signature.describe()}, with host callbacks>"

    def _refuse(self, what: str) -> HostCallbackError:
        return HostCallbackError(
            f"{self.signature.name}: cannot {what} a program with host callbacks or side effects "
            "(jax.debug.print, jax.debug.callback, pure_callback, io_callback, equinox error_if): they call "
            "back into this Python process. Remove them (or set EQX_ON_ERROR=nan for equinox) to save it")

    def serialize(self) -> bytes:
        raise self._refuse("serialize")

    def save(self, path: Any) -> None:
        raise self._refuse("save")

    @property
    def module(self) -> ir.Module:
        """The StableHLO module (in hlopt's MLIR context) that jax compiled, each hlopt operation made plain."""
        return self._module.get()

    # As jax.stages.Compiled's: what jax's compiled program answers.
    as_text = _forwarded_call("as_text", "XLA's optimized HLO of the program.")
    cost_analysis = _forwarded_call(
        "cost_analysis", "XLA's cost estimates of the optimized program (flops, bytes accessed...).")
    memory_analysis = _forwarded_call(
        "memory_analysis", "XLA's memory estimates of the program (argument, output, temporary sizes...).")
    runtime_executable = _forwarded_call("runtime_executable", "The PJRT loaded executable.")
    input_shardings = _forwarded("input_shardings", "The pytree of `(args, kwargs)` of the arguments' shardings.")
    output_shardings = _forwarded("output_shardings", "The pytree of the outputs' shardings.")
    input_formats = _forwarded(
        "input_formats", "The pytree of `(args, kwargs)` of the arguments' `Format`s (layout and sharding).")
    output_formats = _forwarded("output_formats", "The pytree of the outputs' `Format`s (layout and sharding).")
    out_info = _forwarded("out_info", "The pytree of `jax.ShapeDtypeStruct`s of the outputs, with their formats.")

    def call_flat(self, leaves: Sequence[Any]) -> Any:
        """Run on the leaves of the dynamic arguments and keyword arguments."""
        args, kwargs = jax.tree_util.tree_unflatten(self.signature.in_tree, list(leaves))
        return self._compiled(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        static = dict(self.signature.static_args)
        return self._compiled(*(a for i, a in enumerate(args) if i not in static), **kwargs)
