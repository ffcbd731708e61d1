"""The stage objects: `Lowered` (StableHLO, before and after passes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlopt.compiler.lowering import Signature, module_to_bytecode, parse_module
from hlopt.compiler.pipeline import PipelineError, run_pipeline
from hlopt.passes.base import format_location
from hlopt.passes.mlir import ir
from hlopt.passes.registry import lowering_pass_for

if TYPE_CHECKING:
    from hlopt.runtime.executable import Compiled


class AnnotationError(PipelineError):
    """The module still holds an `hlopt.*` annotation when it reaches PJRT."""


def find_annotations(module: ir.Module | ir.Operation) -> list[tuple[str, str, str]]:
    """`(target, pass name, location)` of every hlopt annotation left in `module`."""
    found: list[tuple[str, str, str]] = []
    op = module.operation if hasattr(module, "operation") else module

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "stablehlo.custom_call":
            target = ir.StringAttr(o.attributes["call_target_name"]).value
            pass_name = lowering_pass_for(target)
            if pass_name is not None:
                found.append((target, pass_name, format_location(o.location)))
        return ir.WalkResult.ADVANCE

    op.walk(visit)
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
    """A function lowered to StableHLO in hlopt's context.

    `apply` returns a new `Lowered`; the IR after each pass of the last
    `apply(..., print_ir_after_all=True)` is in `ir_after_passes`.
    """

    def __init__(self, module: ir.Module, signature: Signature, pipeline: str = ""):
        self.module = module
        self.signature = signature
        self.pipeline = pipeline
        self.ir_after_passes: list[tuple[str, str]] = []

    def as_text(self, *, debug_info: bool = False) -> str:
        return self.module.operation.get_asm(enable_debug_info=debug_info)

    def __str__(self) -> str:
        return self.as_text()

    def clone(self) -> "Lowered":
        return Lowered(parse_module(module_to_bytecode(self.module)), self.signature, self.pipeline)

    def apply(self, pipeline: str, *, print_ir_after_all: bool = False, timing: bool = False) -> "Lowered":
        """Run `pipeline` on a copy of the module; print the IR after each pass if asked."""
        new = self.clone()
        result = run_pipeline(new.module, pipeline, print_ir_after_all=print_ir_after_all, timing=timing)
        new.pipeline = ",".join(p for p in (self.pipeline, pipeline) if p)
        new.ir_after_passes = result.ir_after
        if print_ir_after_all:
            print(result.dumps(), end="")
        return new

    def compile(self, pipeline: str = "hlopt-default") -> "Compiled":
        """Apply `pipeline`, then compile the result through PJRT (a persistent-cache hit skips both)."""
        from hlopt.runtime.compile import compile_lowered

        return compile_lowered(self, pipeline)
