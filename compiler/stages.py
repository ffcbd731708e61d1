"""The stage objects: `Lowered` (StableHLO, before and after passes), and what `Compiled` shares with it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental.layout import Format, Layout

from hlopt.compiler.jax_compat import api_boundary, hlo_cost_analysis, hlo_text, xla_computation
from hlopt.compiler.pipeline import PipelineError, check_calls, parse_pipeline, run_pipeline
from hlopt.compiler.program import Signature, module_to_bytecode, parse_module
from hlopt.passes.ir.locations import format_location
from hlopt.passes.mlir import get_context, ir
from hlopt.passes.base import lowering_pass_for
from hlopt.passes.target import Target, compiling_for, target_of
from hlopt.passes.ir.walk import call_target, walk_ops

# A compile's XLA options, as `jax.jit(compiler_options=...)` takes them: (name, value) pairs, sorted by name.
CompilerOptions = tuple[tuple[str, Any], ...]


def check_compiler_options(compiler_options: Any) -> CompilerOptions:
    """`compiler_options` (None or a mapping of XLA option names to str, bool, int or float values, as
    `jax.jit` takes them) as sorted pairs; TypeError for another type. XLA checks the names and the
    values when it compiles, as under `jax.jit` (`No such compile option: 'name'`)."""
    if compiler_options is None:
        return ()
    if not isinstance(compiler_options, Mapping):
        raise TypeError(f"compiler_options must be a dict of XLA option names to values, as for jax.jit, "
                        f"not {type(compiler_options).__name__}")
    for name, value in compiler_options.items():
        if not isinstance(name, str):
            raise TypeError(f"compiler_options: an option name must be a str, not {type(name).__name__} {name!r}")
        if not isinstance(value, (str, bool, int, float, np.integer, np.floating, np.bool_)):
            raise TypeError(f"compiler_options: {name} must be a str, bool, int or float, "
                            f"not {type(value).__name__} {value!r}")
    return tuple(sorted((name, value.item() if isinstance(value, np.generic) else value)
                        for name, value in compiler_options.items()))


# What `Lowered.compile` hands a `Lowered`, the pipeline to run on it and the XLA options
# (`CompilerOptions`) to compile with; it returns the compiled program, applying the pipeline
# and `check_no_annotations` itself (so that a persistent-cache hit can skip the passes). The
# layer that creates `Lowered`s supplies it (the runtime's `compile_lowered`), so the compiler
# never imports the runtime.
Backend = Callable[["Lowered", str, CompilerOptions], Any]

# How a program with host callbacks compiles (`Lowered.host_compile`): as `jax.jit` compiles it, with
# these XLA options; jax's compiled program and the module (in jax's context) it compiled.
HostCompile = Callable[[dict[str, Any] | None], tuple[Any, ir.Module]]

# The pipeline that turns the annotation form of one hlopt operation into plain StableHLO
# when jax itself lowers the operation (hlopt.jit runs the same one, which makes each operation of
# the program plain in a module of its own: `hlopt.compiler.operations`).
PLAIN_PIPELINE = "hlopt-default"


class MovingModule:
    """A module that may be in another MLIR context (JAX's) and moves into hlopt's when first read there."""

    def __init__(self, module: ir.Module):
        self._module = module
        self._moved = threading.Lock()  # held while the module moves into hlopt's context

    def get(self) -> ir.Module:
        """The module in hlopt's context (moved there on first use)."""
        with self._moved:
            if self._module.context != get_context():
                self._module = parse_module(module_to_bytecode(self._module))
            return self._module

    @property
    def source(self) -> ir.Module:
        """The module in whichever context it is in now: to read, never to change."""
        return self._module


class Stage:
    """What `jax.stages.Lowered` and `jax.stages.Compiled` tell about a program's arguments and results,
    read from its `signature`: `args_info`, `in_tree`, `in_avals`, `donate_argnums`, `out_tree`."""

    signature: Signature

    @property
    def args_info(self) -> Any:
        """The pytree of `(args, kwargs)` of `jax.stages.ArgInfo` (aval, donated), static arguments left out."""
        donated = set(self.signature.donated)
        return jax.tree_util.tree_unflatten(self.signature.in_tree, [
            jax.stages.ArgInfo(aval, i in donated) for i, aval in enumerate(self.signature.in_avals)])

    @property
    def in_tree(self) -> Any:
        """The treedef of `(dynamic positional arguments, keyword arguments)`."""
        return self.signature.in_tree

    @property
    def in_avals(self) -> Any:
        """The pytree of the arguments' abstract values."""
        return jax.tree_util.tree_unflatten(self.signature.in_tree, list(self.signature.in_avals))

    @property
    def donate_argnums(self) -> tuple[int, ...]:
        """The flat positions of the donated argument leaves."""
        return self.signature.donated

    @property
    def out_tree(self) -> Any:
        """The treedef of the function's output."""
        return self.signature.out_tree

    def _out_info(self, shardings: list[Any]) -> Any:
        return jax.tree_util.tree_unflatten(self.signature.out_tree, [
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(self.signature.out_avals, shardings)])


class CompiledStage(Stage):
    """`jax.stages.Compiled`'s attributes of a compiled program: its `executable` (PJRT's), the flat
    `in_shardings` (one per input leaf) and `out_shardings` of it."""

    executable: Any
    in_shardings: list[Any]
    out_shardings: list[Any]

    @property
    def input_shardings(self) -> Any:
        """The pytree of `(args, kwargs)` of the arguments' shardings; None for an argument the program
        does not take (`keep_unused=False`), as jax gives."""
        kept = set(self.signature.kept_inputs)
        return jax.tree_util.tree_unflatten(self.signature.in_tree, [
            s if i in kept else None for i, s in enumerate(self.in_shardings)])

    @property
    def output_shardings(self) -> Any:
        """The pytree of the outputs' shardings."""
        return jax.tree_util.tree_unflatten(self.signature.out_tree, list(self.out_shardings))

    @property
    def input_formats(self) -> Any:
        """The pytree of `(args, kwargs)` of the arguments' `Format`s (layout and sharding); `Format()` for an
        argument the program does not take, as jax gives."""
        layouts = iter(self.executable.get_parameter_layouts())
        kept = set(self.signature.kept_inputs)
        return jax.tree_util.tree_unflatten(self.signature.in_tree, [
            Format(Layout.from_pjrt_layout(next(layouts)), s) if i in kept else Format()
            for i, s in enumerate(self.in_shardings)])

    @property
    def output_formats(self) -> Any:
        """The pytree of the outputs' `Format`s (layout and sharding)."""
        return jax.tree_util.tree_unflatten(self.signature.out_tree, self._output_formats())

    def _output_formats(self) -> list[Format]:
        return [Format(Layout.from_pjrt_layout(layout), s)
                for layout, s in zip(self.executable.get_output_layouts(), self.out_shardings)]

    @property
    def out_info(self) -> Any:
        """The pytree of `jax.ShapeDtypeStruct`s of the outputs, with their formats (layout and sharding)."""
        return self._out_info(self._output_formats())

    def cost_analysis(self) -> Any:
        """XLA's cost estimates of the optimized program (flops, bytes accessed...), as `jax.stages.Compiled`."""
        return self.executable.cost_analysis()

    def memory_analysis(self) -> Any:
        """XLA's memory estimates of the program (argument, output, temporary sizes...), as `jax.stages.Compiled`."""
        return self.executable.get_compiled_memory_stats()

    def runtime_executable(self) -> Any:
        """The PJRT loaded executable, as `jax.stages.Compiled.runtime_executable`."""
        return self.executable


class AnnotationError(PipelineError):
    """The module still holds an `hlopt.*` annotation when it reaches PJRT: run the pass the message names.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> from hlopt import sparse
      >>> lowered = hlopt.lower(lambda a: a.todense(), sparse.BCOO.fromdense(jnp.eye(2)))
      >>> try:
      ...     lowered.compile(pipeline="canonicalize")
      ... except hlopt.AnnotationError as e:
      ...     print("lower-bcoo" in str(e))
      True
    """

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


class Lowered(Stage):
    """A function lowered to StableHLO (what `hlopt.lower` and `JitFunction.lower` return).

    `as_text` prints the module; `apply` runs passes on a copy and returns a new `Lowered`,
    whose `ir_after_passes` holds the IR after each pass when asked (`collect_ir=True`);
    `compile` runs a pipeline (`hlopt-default` by default) and compiles with PJRT. It has
    `jax.stages.Lowered`'s methods (`compiler_ir`, `cost_analysis`, `out_info`).

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> lowered = hlopt.lower(lambda x: x + 1, jnp.ones(2))
      >>> lowered
      <hlopt.Lowered <lambda>(float32[2]) -> (float32[2]) on 1 device(s)>
      >>> lowered.compile()(jnp.ones(2)).tolist()
      [2.0, 2.0]
    """

    def __init__(self, module: ir.Module, signature: Signature, pipeline: str = "",
                 backend: Backend | None = None, host_compile: HostCompile | None = None,
                 user_located: Callable[[], ir.Module] | None = None, compiler_options: CompilerOptions = (),
                 precision: str | None = None):
        """The module may come in another context (JAX's, from `hlopt.lower`): it is moved into hlopt's
        context when something first needs it there (`module`, printing, `apply`, a compile that runs
        the passes), so that a persistent-cache hit, keyed on `source_module`, never parses it.
        `compile` hands itself and a pipeline to `backend` (see `Backend`).

        `host_compile(compiler_options)`, for a program with host callbacks or side effects, compiles
        it the way `jax.jit` does (returning jax's compiled program and the module it compiled) (they
        call back into this process; see `hlopt.runtime.host`); it is None for every other program.
        `user_located`, if given, lowers the function again with source locations that leave out
        hlopt's frames, as jax's leave out its own: what `as_text(debug_info=True)` prints before any
        pass (the module's own locations keep them, so that an error in a pass can show the whole call
        chain). `compiler_options` are the XLA options of the `hlopt.jit` that lowered it, which
        `compile`'s own update (as `jax.jit(compiler_options=...)`'s are for its `Lowered`). `precision`
        is that of the products the program leaves unset (`jax.default_matmul_precision` when it was
        lowered, `hlopt.passes.target.Target.precision`), which the products the passes build carry.
        """
        self._module = MovingModule(module)
        self.precision = precision
        self.compiler_options = compiler_options
        self.host_compile = host_compile
        self.user_located = user_located
        self.signature = signature
        self.pipeline = pipeline
        self.backend = backend
        self.ir_after_passes: list[tuple[str, str]] = []

    @property
    def module(self) -> ir.Module:
        """The module in hlopt's context (moved there on first use)."""
        return self._module.get()

    @property
    def source_module(self) -> ir.Module:
        """The module in whichever context it is in now (JAX's until `module` is read): to read, never to change."""
        return self._module.source

    def as_text(self, dialect: str | None = None, *, debug_info: bool = False) -> str:
        """The module as StableHLO text (`dialect="stablehlo"`, the default) or as XLA's HLO text
        (`"hlo"`), with source locations if `debug_info`, as `jax.stages.Lowered.as_text`."""
        if dialect not in (None, "stablehlo", "hlo"):
            raise ValueError(f"unknown dialect: {dialect!r}; Lowered.as_text takes 'stablehlo' or 'hlo'")
        if dialect == "hlo":
            # XLA's HLO text with the metadata jax.jit's has: the user's frames, not hlopt's
            relocated = debug_info and self.user_located is not None and not self.pipeline
            module = self.user_located() if relocated else self.source_module
            return hlo_text(module_to_bytecode(module), debug_info=debug_info)
        return self.module.operation.get_asm(enable_debug_info=debug_info)

    def compiler_ir(self, dialect: str | None = None) -> Any:
        """The module (`dialect="stablehlo"`, the default, in hlopt's MLIR context) or its `XlaComputation`
        (`"hlo"`), as `jax.stages.Lowered.compiler_ir`."""
        if dialect in (None, "stablehlo"):
            return self.module
        if dialect == "hlo":
            return xla_computation(module_to_bytecode(self.source_module))
        raise ValueError(f"unknown dialect: {dialect!r}; Lowered.compiler_ir takes 'stablehlo' or 'hlo'")

    def cost_analysis(self) -> dict[str, float]:
        """XLA's cost estimates of the module before any optimization (flops, bytes accessed...), as
        `jax.stages.Lowered.cost_analysis`; `Compiled.cost_analysis` has them after XLA's."""
        return hlo_cost_analysis(module_to_bytecode(self.source_module))

    @property
    def out_info(self) -> Any:
        """The pytree of `jax.ShapeDtypeStruct`s of the outputs (their shardings are known once compiled)."""
        return self._out_info([None] * len(self.signature.out_avals))

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        pipeline = f", after '{self.pipeline}'" if self.pipeline else ""
        return f"<hlopt.Lowered {self.signature.describe()}{pipeline}>"

    def clone(self) -> "Lowered":
        return Lowered(parse_module(module_to_bytecode(self.source_module)), self.signature, self.pipeline,
                       self.backend, self.host_compile, self.user_located, self.compiler_options, self.precision)

    @api_boundary
    def apply(self, pipeline: str, *, platform: str | Target = "none", collect_ir: bool = False,
              print_ir_after_all: bool = False, timing: bool = False,
              progress: Callable[[str, float], None] | None = None, import_partitioners: bool = False) -> "Lowered":
        """Run `pipeline` on a copy of the module and return the copy as a new `Lowered`.

        Args:
          pipeline: comma-separated passes and named pipelines, as `hlopt-opt -p` takes them
            (`"lower-bcoo,canonicalize"`, `"hlopt-default"`).
          platform: what the module will be compiled for (`cpu`, `tpu`, `cuda`, `rocm`; `none`: no
            platform, the module stays portable): the passes for another platform leave it as it is.
            The runtime passes a `hlopt.passes.target.Target` (which also says whether hlopt's CPU
            kernels may be called).
          collect_ir: keep the IR after each pass in the result's `ir_after_passes`, a list of
            `(pass, text)` pairs, without printing it.
          print_ir_after_all: keep it and also print it to stderr as each pass ends.
          timing: print MLIR's time report of the passes to stderr.
          progress: called as `progress(pass, seconds)` as each pass finishes.
          import_partitioners: let `lower-custom-partitioning` import the `module:qualname` of a
            key no partitioner of this process is registered under (running that module's code);
            by default it refuses such a key.

        Returns:
          A new `Lowered`; this one is unchanged.

        Raises:
          PipelineError: the pipeline does not parse, or a pass failed.

        Example:
          >>> import jax.numpy as jnp
          >>> import hlopt
          >>> lowered = hlopt.lower(lambda x: jnp.sin(x) + 0.0, jnp.ones(3))
          >>> after = lowered.apply("canonicalize,cse", collect_ir=True)
          >>> [name for name, text in after.ir_after_passes]
          ['canonicalize', 'cse']
        """
        from hlopt.passes.partitioning.lower_custom_partitioning import partitioner_imports  # a pass: loaded when used

        target = platform if isinstance(platform, Target) else target_of(platform, self.precision)
        new = self.clone()
        with partitioner_imports(import_partitioners), compiling_for(target):
            result = run_pipeline(new.module, pipeline, collect_ir=collect_ir, print_ir_after_all=print_ir_after_all,
                                  timing=timing, progress=progress)
        new.pipeline = ",".join(p for p in (self.pipeline, pipeline) if p)
        new.ir_after_passes = result.ir_after
        return new

    @api_boundary
    def compile(self, pipeline: str = "hlopt-default", *, compiler_options: Mapping[str, Any] | None = None,
                import_partitioners: bool = False) -> Any:
        """Apply `pipeline`, then compile the result with PJRT (and the persistent cache, for
        `hlopt.lower`'s: a cache hit skips the passes too).

        Args:
          pipeline: the passes to run first (`hlopt-default` makes any annotated module compilable).
          compiler_options: XLA's options, as `jax.stages.Lowered.compile` takes them
            (`{"xla_cpu_enable_fast_math": True}`; XLA refuses an unknown name when it compiles).
          import_partitioners: as for `apply`.

        Returns:
          The `Compiled` program.

        Raises:
          PipelineError: `pipeline` does not parse (checked first), or a pass failed.
          AnnotationError: an `hlopt.*` annotation is left that `pipeline` does not lower.

        Example:
          >>> import jax.numpy as jnp
          >>> import hlopt
          >>> compiled = hlopt.lower(lambda x: jnp.cos(x), jnp.zeros(2)).compile()
          >>> compiled(jnp.zeros(2)).tolist()
          [1.0, 1.0]
        """
        from hlopt.passes.partitioning.lower_custom_partitioning import partitioner_imports

        if isinstance(pipeline, Mapping):
            raise TypeError("Lowered.compile takes the pipeline first: pass XLA's options by keyword, "
                            "compile(compiler_options={...})")
        given = dict(check_compiler_options(compiler_options))
        options = tuple(sorted({**dict(self.compiler_options), **given}.items()))  # compile's win, as in jax
        parse_pipeline(pipeline)
        if self.host_compile is not None and pipeline != PLAIN_PIPELINE:
            raise ValueError(
                f"{self.signature.name}: a program with host callbacks or side effects compiles as under jax.jit, "
                f"each hlopt operation with '{PLAIN_PIPELINE}'; the pipeline '{pipeline}' cannot be applied to it")
        if not pipeline:  # run_pipeline checks the calls before any pass
            check_calls(self.module)
        with partitioner_imports(import_partitioners):
            if self.backend is None:
                check_no_annotations((self.apply(pipeline) if pipeline else self).module)
                raise ValueError(f"{self!r} has no compile backend: make it with hlopt.lower, "
                                 "or pass backend= (e.g. hlopt.runtime.compile.compile_lowered)")
            return self.backend(self, pipeline, options)
