"""The platforms the module a pipeline rewrites will be compiled for, and which passes run for them.

Every pass declares the platforms it is for (`Pass.platforms`): `PORTABLE` for a
semantic pass, which runs whatever the target, or JAX's names of the platforms
whose compiler it tunes for (`("cpu",)` for `passes/xla_cpu/`). The pipeline
driver runs a platform pass only when every platform of the target is one of
its own, so a module compiled for no platform in particular (`hlopt-opt` without
`--platform`, `Lowered.apply` without `platform=`) or for several at once stays
portable. The runtime names the target while it applies the pipeline of a
program it is about to compile, and so does the rule that lowers an hlopt
operation inside plain `jax.jit` or `jax.export` (the platforms JAX lowers for).
A pass that calls hlopt's own CPU kernels (`calls_runtime`) runs only where they
can be called: the program runs in this process and the kernels are built (they
are optional).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence

# The platforms hlopt compiles for, by JAX's names (`jax.Device.platform`).
PLATFORMS = ("cpu", "tpu", "cuda", "rocm")
# What a semantic pass declares: it runs for every target, none included.
PORTABLE = ("portable",)
# What `hlopt-opt --platform` and `Lowered.apply(platform=)` take for a portable module.
NONE = "none"


# The precisions a program may give its products (StableHLO's names).
PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


@dataclasses.dataclass(frozen=True)
class Target:
    """What a module is compiled for: `platforms` (empty: none, the module stays portable);
    whether it runs in this process (`local`), where hlopt's runtime registers its own kernels
    (a `jax.export` artifact does not, so no pass may call them there), and whether they are
    built (`kernels`: they are optional); and `precision`, one of
    `PRECISIONS`, that of the products the program leaves unset (`jax.default_matmul_precision`
    where JAX lowered it; None: the compiler's default), which a product a pass builds without an
    op to take it from carries."""

    platforms: tuple[str, ...] = ()
    local: bool = True
    kernels: bool = False
    precision: str | None = None

    def runs(self, platforms: Sequence[str], calls_runtime: bool = False) -> bool:
        """Whether a pass declaring `platforms` (and, with `calls_runtime`, emitting calls of hlopt's
        runtime kernels) rewrites a module compiled for this target."""
        if tuple(platforms) == PORTABLE:
            return True
        return bool(self.platforms) and set(self.platforms) <= set(platforms) and (self.local and self.kernels or not calls_runtime)

    def describe(self) -> str:
        return ",".join(self.platforms) or NONE


_TARGET: contextvars.ContextVar[Target] = contextvars.ContextVar("hlopt_target", default=Target())


def current_target() -> Target:
    """The target of the module being rewritten (no platform unless `compiling_for` names one)."""
    return _TARGET.get()


def target_of(platform: str, precision: str | None = None) -> Target:
    """The target `hlopt-opt --platform` / `Lowered.apply(platform=)` name: one of `PLATFORMS`, or
    `none`, with the program's `precision`, for IR work: hlopt's CPU kernels count as built, so the
    IR is what a compile in a process that has them makes (the runtime says for its own compiles).
    Raises ValueError, listing the names, for another."""
    if platform != NONE and platform not in PLATFORMS:
        raise ValueError(f"unknown platform '{platform}': use one of {', '.join((*PLATFORMS, NONE))}")
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision '{precision}': use one of {', '.join(PRECISIONS)}")
    return Target(() if platform == NONE else (platform,), kernels=True, precision=precision)


@contextlib.contextmanager
def compiling_for(target: Target) -> Iterator[None]:
    """Within the block, the pipeline driver runs the passes for `target`."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)
