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
from hlopt.compiler.stages import Stage


class HostCallbackError(ValueError):
    """A program that calls back into this Python process was asked to leave it (saved, serialized, cached)."""


class HostCompiled(Stage):
    """A compiled program with host callbacks or side effects; it runs in this process only.

    Called like `Compiled`; `as_text()` is XLA's optimized HLO. `executable`
    is None: the C++ dispatch of `hlopt.jit` does not replay it (jax's own
    compiled object has its fast path).
    """

    executable = None

    def __init__(self, compiled: Any, signature: Signature, pipeline: str):
        self._compiled = compiled
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

    def as_text(self) -> str:
        """XLA's optimized HLO of the program."""
        return self._compiled.as_text()

    def call_flat(self, leaves: Sequence[Any]) -> Any:
        """Run on the leaves of the dynamic arguments and keyword arguments."""
        args, kwargs = jax.tree_util.tree_unflatten(self.signature.in_tree, list(leaves))
        return self._compiled(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        static = dict(self.signature.static_args)
        return self._compiled(*(a for i, a in enumerate(args) if i not in static), **kwargs)
