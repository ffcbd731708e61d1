"""The platform the module a pipeline rewrites will be compiled for, when the compiler knows it.

Passes that emit a platform's own custom calls (`passes/xla_cpu/`) rewrite only
for that platform. The runtime names it while it applies the pipeline of a
program it is about to compile (`compiling_for`), and so does the rule that
lowers an hlopt operation inside plain `jax.jit`, with the platform jax compiles
for; everywhere else (`hlopt-opt`, `Lowered.apply`, hlopt operations lowered
for `jax.export`) it is None: the module must stay portable. The runtime also
says whether hlopt's CPU kernels are built (`native_kernels`): they are optional,
and a pass calls them only when they are.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("hlopt_target_platform", default=None)
_KERNELS: contextvars.ContextVar[bool] = contextvars.ContextVar("hlopt_native_kernels", default=False)


def target_platform() -> str | None:
    """The platform (`cpu`, `cuda`...) the module being rewritten is compiled for; None if unknown."""
    return _PLATFORM.get()


def native_kernels() -> bool:
    """Whether the module being rewritten may call hlopt's CPU kernels: the runtime compiling it has them."""
    return _KERNELS.get()


@contextlib.contextmanager
def compiling_for(platform: str, *, native_kernels: bool = False) -> Iterator[None]:
    """Within the block, passes rewrite for `platform` (jax's platform name of the compile's devices),
    calling hlopt's CPU kernels only with `native_kernels` (`hlopt.runtime.kernels.available()`)."""
    tokens = _PLATFORM.set(platform), _KERNELS.set(native_kernels)
    try:
        yield
    finally:
        _PLATFORM.reset(tokens[0])
        _KERNELS.reset(tokens[1])
