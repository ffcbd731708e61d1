"""Shared machinery for jax primitives that lower to `hlopt.*` annotations.

An annotation primitive has an abstract evaluation rule (so shapes are known at
trace time), a lowering rule that emits `stablehlo.custom_call @hlopt.<name>`
with `api_version = 4` and a dictionary `backend_config`, and an eager
implementation that compiles the single op with `hlopt.jit`. When jax itself
lowers it (plain `jax.jit`, `jax.export`), the operation is lowered alone in
annotation form, hlopt's passes make it plain StableHLO, and that is merged
into jax's module (`hlopt.compiler.lowering.lower_as_plain_stablehlo`): for
the platform jax compiles for under `jax.jit` (hlopt's CPU kernels included,
registered with XLA before jax compiles), portable under `jax.export`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from jax.interpreters import mlir

from hlopt.compiler.jax_compat import Primitive
from hlopt.compiler.lowering import annotations_enabled, lower_as_plain_stablehlo
from hlopt.passes.mlir import ir, stablehlo


def to_attribute(value: Any) -> ir.Attribute:
    """A Python value as an MLIR attribute for a `backend_config` dictionary."""
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, (bool, np.bool_)):
        return ir.BoolAttr.get(bool(value))
    if isinstance(value, (int, np.integer)):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))
    if isinstance(value, (float, np.floating)):
        return ir.FloatAttr.get(ir.F64Type.get(), float(value))
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, Mapping):
        return ir.DictAttr.get({str(k): to_attribute(v) for k, v in value.items()})
    if isinstance(value, (tuple, list)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            return ir.DenseI64ArrayAttr.get([int(v) for v in value])
        return ir.ArrayAttr.get([to_attribute(v) for v in value])
    raise TypeError(f"cannot put {type(value).__name__} {value!r} into a backend_config")


def emit_annotation(
    target: str,
    operands: Sequence[ir.Value],
    result_types: Sequence[ir.Type],
    config: Mapping[str, Any],
    called_computations: Sequence[str] = (),
) -> list[ir.Value]:
    """Build `stablehlo.custom_call @target` at the current insertion point."""
    op = stablehlo.CustomCallOp(
        list(result_types),
        list(operands),
        target,
        backend_config=ir.DictAttr.get({k: to_attribute(v) for k, v in config.items()}),
        api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4),
        called_computations=ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(c) for c in called_computations]),
    )
    return list(op.results)


def result_types(ctx: Any) -> list[ir.Type]:
    """The IR types of a lowering rule's outputs (`ctx.avals_out`)."""
    return [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in ctx.avals_out]


def prepare_runtimes(platform: str, program: bytes) -> None:
    """Register with XLA what the custom calls of `program` (plain StableHLO bytecode that jax will
    compile for `platform` in this process) need: on CPU, hlopt's kernels (runtime/kernels.py)."""
    from hlopt.runtime.pjrt import get_client, prepare_runtimes as prepare  # the runtime, once an op lowers

    prepare(get_client(platform), program)


def kernels_available() -> bool:
    """Whether hlopt's CPU kernels are built (runtime/kernels.py), for the passes to call."""
    from hlopt.runtime.kernels import available  # the runtime, once an op lowers

    return available()


def _hashable(params: Mapping[str, Any]) -> Any:
    try:
        key = tuple(sorted(params.items()))
        hash(key)
        return key
    except TypeError:
        return None


def annotation_primitive(
    name: str,
    abstract_eval: Callable[..., Any],
    lowering: Callable[..., Sequence[ir.Value]],
    *,
    multiple_results: bool = True,
    plain_lowering: Callable[..., Sequence[ir.Value]] | None = None,
) -> Primitive:
    """A primitive whose lowering emits an hlopt annotation.

    `lowering(ctx, *operands, **params)` is called inside hlopt's lowering; under
    jax's own lowering `plain_lowering` is, if given, else the op becomes plain
    StableHLO (`lower_as_plain_stablehlo`); eager calls compile the op alone with
    `hlopt.jit` (cached per parameters).
    """
    prim = Primitive(name)
    prim.multiple_results = multiple_results
    prim.def_abstract_eval(abstract_eval)
    eager_cache: dict[Any, Callable] = {}

    def impl(*args, **params):
        from hlopt.staging import jit

        key = _hashable(params)
        fn = eager_cache.get(key) if key is not None else None
        if fn is None:
            fn = jit(lambda *a: prim.bind(*a, **params))
            if key is not None:
                eager_cache[key] = fn
        return fn(*args)

    prim.def_impl(impl)

    def rule(ctx, *operands, **params):
        if annotations_enabled():
            return lowering(ctx, *operands, **params)
        if plain_lowering is not None:
            return plain_lowering(ctx, *operands, **params)
        return lower_as_plain_stablehlo(ctx, lambda *a: prim.bind(*a, **params), operands, name=name,
                                        prepare=prepare_runtimes, native_kernels=kernels_available())

    # Lowered inline (not outlined into a function jax reuses per signature), so that under
    # jax's lowering the operands jax computes from constants are visible to the rule.
    mlir.register_lowering(prim, rule, cacheable=False)
    return prim
