"""The stage objects: `Lowered` (StableHLO, before and after passes)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hlopt.compiler.jax_compat import api_boundary
from hlopt.compiler.pipeline import PipelineError, parse_pipeline, run_pipeline
from hlopt.compiler.program import Signature, module_to_bytecode, parse_module
from hlopt.passes.locations import format_location
from hlopt.passes.mlir import get_context, ir
from hlopt.passes.registry import lowering_pass_for
from hlopt.passes.walk import call_target, walk_ops

# What `Lowered.compile` hands a `Lowered` and the pipeline to run on it; it returns the
# compiled program, applying the pipeline and `check_no_annotations` itself (so that a
# persistent-cache hit can skip the passes). The layer that creates `Lowered`s supplies it
# (the runtime's `compile_lowered`), so the compiler never imports the runtime.
Backend = Callable[["Lowered", str], Any]

# The pipeline that turns the annotation form of one hlopt operation into plain StableHLO
# when jax itself lowers the operation (hlopt.jit runs the same one on the whole program).
PLAIN_PIPELINE = "hlopt-default"


class AnnotationError(PipelineError):
    """The module still holds an `hlopt.*` annotation when it reaches PJRT."""

    __module__ = "hlopt"  # raised and printed as users import it


def find_annotations(module: ir.Module | ir.Operation) -> list[tuple[str, str, str]]:
    """`(target, pass name, location)` of every hlopt annotation left in `module`."""
    op = module.operation if hasattr(module, "operation") else module
    found = []
    for o in walk_ops(op, "stablehlo.custom_call"):
        target = call_target(o)
        pass_name = lowering_pass_for(target)
        if pass_name is not None:
            found.append((target, pass_name, format_location(o.location)))
    return found


def check_no_annotations(module: ir.Module) -> None:
    """Refuse a module that still holds an annotation, naming the pass that lowers it."""
    found = find_annotations(module)
    if found:
        target, pass_name, loc = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise AnnotationError(
            f"{loc}: error: custom_call @{target}{more} cannot be compiled by XLA; "
            f"run the '{pass_name}' pass first (it is part of 'hlopt-default')"
        )


class Lowered:
    """A function lowered to StableHLO.

    The module may come in another context (JAX's, from `hlopt.lower`): it is
    moved into hlopt's context when something first needs it there (`module`,
    printing, `apply`, a compile that runs the passes), so that a persistent-cache
    hit, keyed on `source_module`, never parses it. `apply` returns a new
    `Lowered`; the IR after each pass of the last
    `apply(..., print_ir_after_all=True)` is in `ir_after_passes`. `compile`
    hands itself and a pipeline to `backend` (see `Backend`).

    `host_compile`, for a program with host callbacks or side effects, compiles
    it the way `jax.jit` does (they call back into this process; see
    `hlopt.runtime.host`); it is None for every other program.
    """

    def __init__(self, module: ir.Module, signature: Signature, pipeline: str = "",
                 backend: Backend | None = None, host_compile: Callable[[], Any] | None = None):
        self._module = module
        self.host_compile = host_compile
        self._moved = threading.Lock()  # held while the module moves into hlopt's context
        self.signature = signature
        self.pipeline = pipeline
        self.backend = backend
        self.ir_after_passes: list[tuple[str, str]] = []

    @property
    def module(self) -> ir.Module:
        """The module in hlopt's context (moved there on first use)."""
        with self._moved:
            if self._module.context != get_context():
                self._module = parse_module(module_to_bytecode(self._module))
            return self._module

    @property
    def source_module(self) -> ir.Module:
        """The module in whichever context it is in now (JAX's until `module` is read): to read, never to change."""
        return self._module

    def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
        """The module as StableHLO text (`dialect="stablehlo"`, the default) or as XLA's HLO text
        (`"hlo"`), with source locations if `debug_info`, as `jax.stages.Lowered.as_text`."""
        if dialect in (None, "stablehlo"):
            return self.module.operation.get_asm(enable_debug_info=debug_info)
        if dialect == "hlo":
            from hlopt.compiler.jax_compat import hlo_text  # jax, only when asked for: hlopt-opt never is

            return hlo_text(module_to_bytecode(self.source_module), debug_info=debug_info)
        raise ValueError(f"unknown dialect: {dialect!r}; Lowered.as_text takes 'stablehlo' or 'hlo'")

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        pipeline = f", after '{self.pipeline}'" if self.pipeline else ""
        return f"<hlopt.Lowered {self.signature.describe()}{pipeline}>"

    def clone(self) -> "Lowered":
        return Lowered(parse_module(module_to_bytecode(self.source_module)), self.signature, self.pipeline,
                       self.backend, self.host_compile)

    @api_boundary
    def apply(self, pipeline: str, *, print_ir_after_all: bool = False, timing: bool = False,
              progress: Callable[[str, float], None] | None = None, import_partitioners: bool = False) -> "Lowered":
        """Run `pipeline` on a copy of the module; print the IR after each pass to stderr if asked.

        `progress(pass, seconds)` is called as each pass finishes. `import_partitioners=True` lets
        `lower-custom-partitioning` import the `module:qualname` of a key no partitioner of this
        process is registered under (running that module's code); by default it refuses such a key.
        """
        from hlopt.passes.lower_custom_partitioning import partitioner_imports  # a pass: loaded when used

        new = self.clone()
        with partitioner_imports(import_partitioners):
            result = run_pipeline(new.module, pipeline, print_ir_after_all=print_ir_after_all, timing=timing,
                                  progress=progress)
        new.pipeline = ",".join(p for p in (self.pipeline, pipeline) if p)
        new.ir_after_passes = result.ir_after
        return new

    @api_boundary
    def compile(self, pipeline: str = "hlopt-default", *, import_partitioners: bool = False) -> Any:
        """Apply `pipeline`, then compile the result with the backend (PJRT and its persistent cache, for
        `hlopt.lower`'s: a cache hit skips the passes too). A malformed `pipeline` is refused first;
        `import_partitioners` as for `apply`."""
        from hlopt.passes.lower_custom_partitioning import partitioner_imports

        parse_pipeline(pipeline)
        if self.host_compile is not None and pipeline != PLAIN_PIPELINE:
            raise ValueError(
                f"{self.signature.name}: a program with host callbacks or side effects compiles as under jax.jit, "
                f"each hlopt operation with '{PLAIN_PIPELINE}'; the pipeline '{pipeline}' cannot be applied to it")
        with partitioner_imports(import_partitioners):
            if self.backend is None:
                check_no_annotations((self.apply(pipeline) if pipeline else self).module)
                raise ValueError(f"{self!r} has no compile backend: make it with hlopt.lower, "
                                 "or pass backend= (e.g. hlopt.runtime.compile.compile_lowered)")
            return self.backend(self, pipeline)
