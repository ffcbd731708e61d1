"""The one seam to jax's and jaxlib's private APIs.

Every use of `jax._src.*`, `jaxlib._jax`, `pxla` and of private attributes of
jax objects in hlopt goes through a function or name here, called with
keywords where the API allows. `test/python/test_jax_compat.py` checks each
signature and attribute relied on, so a jax upgrade that moves one fails in
that test, naming it. (`hlopt.passes.mlir` is the matching seam for jaxlib's
MLIR bindings.) jax and jaxlib are pinned to one version (pyproject.toml).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import jax
from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src.export import _export
from jax._src import sharding_impls as _sharding_impls
from jax._src import source_info_util as _source_info_util
from jax._src import traceback_util as _traceback_util
from jax._src import tree_util as _tree_util
from jax._src import xla_bridge as _xla_bridge
# jax.extend.core's names, from where jax.extend.core takes them: importing any `jax.extend` module
# runs the package's __init__, which imports Pallas (a start-up cost of a process's first hlopt.jit).
from jax._src.core import ClosedJaxpr, Jaxpr, Primitive, Var, concrete_or_error, jaxpr_as_fun
from jax._src.custom_derivatives import custom_jvp_call_p
from jax._src.custom_partitioning_sharding_rule import (
    SdyShardingRule,
    sdy_sharding_rule_to_mlir as _sdy_sharding_rule_to_mlir,
    str_to_sdy_sharding_rule as _str_to_sdy_sharding_rule,
)
from jax._src.interpreters import mlir as _mlir
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import hlo as _hlo
from jax._src.lax import linalg as _linalg
from jax._src.lax.control_flow.solves import linear_solve_p
from jaxlib import _jax
from jaxlib import xla_client  # noqa: F401  (compile options, device lists: runtime/pjrt.py)

from hlopt.passes.ir.locations import hlopt_dirs

__all__ = [
    "ClosedJaxpr",
    "Jaxpr",
    "LoweringTarget",
    "Placement",
    "Primitive",
    "SPMDAxisContext",
    "SdyShardingRule",
    "ShardingContext",
    "Var",
    "api_boundary",
    "arg_avals",
    "build_module",
    "closed_over_refs",
    "compile_args",
    "concrete_or_error",
    "convert_constvars_jaxpr",
    "cpp_pjit",
    "custom_jvp_call_p",
    "donated_inputs",
    "export_node_deserializer",
    "export_node_serializer",
    "extend_axis_env_nd",
    "fastpath_data",
    "hlo_cost_analysis",
    "hlo_text",
    "flatten_for_dispatch",
    "hide_frames_of",
    "initialize_lapack",
    "get_backend",
    "is_committed",
    "jaxpr_as_fun",
    "kept_inputs",
    "key_shape",
    "layout_rank",
    "linear_solve_p",
    "lower_called_computation",
    "lower_per_platform",
    "lowering_target",
    "merge_module",
    "lower_jaxpr_to_fun",
    "locations_without",
    "lowering_placement",
    "output_aval",
    "partition_spec",
    "prng_impl",
    "pytree_node_builder",
    "require_devices_during_lowering",
    "result_handler",
    "sdy_sharding_rule_to_mlir",
    "str_to_sdy_sharding_rule",
    "under_transformation",
    "weak_out_avals",
    "xla_computation",
]

# --- traceback filtering (jax_traceback_filtering) -----------------------------

C = TypeVar("C", bound=Callable)


def hide_frames_of(path: str) -> None:
    """Drop frames of files under `path` from tracebacks that cross an `api_boundary`, as jax drops its own."""
    _traceback_util.register_exclusion(path=path)


_exclusions_lock = threading.Lock()


@contextlib.contextmanager
def locations_without(paths: Sequence[str]) -> Iterator[None]:
    """While active, the source locations (call stacks) of what jax lowers leave out the frames of files
    under `paths`, as they leave out jax's own."""
    with _exclusions_lock:
        added = [p for p in paths if p not in _source_info_util._exclude_paths]
        for path in added:
            _source_info_util.register_exclusion(path=path)
    try:
        yield
    finally:
        with _exclusions_lock:
            for path in added:
                _source_info_util._exclude_paths.remove(path)
            _source_info_util._exclude_path_regex.cache_clear()
            _source_info_util.is_user_filename.cache_clear()


def api_boundary(fun: C) -> C:
    """`fun`, wrapped so that an exception raised below it loses the frames `hide_frames_of` names."""
    return _traceback_util.api_boundary(fun)


# --- pytree node registries (jax.tree_util's and jax.export's) -----------------


def export_node_serializer(nodetype: type) -> tuple[str, Callable[[Any], bytes]] | None:
    """`(serialized_name, serialize_auxdata)` of a class registered with
    `jax.export.register_pytree_node_serialization`; None when it is not."""
    return _export.serialization_registry.get(nodetype)


def export_node_deserializer(serialized_name: str) -> tuple[type, Callable[[bytes], Any], Callable[..., Any]] | None:
    """`(nodetype, deserialize_auxdata, from_children)` registered with jax.export under `serialized_name`."""
    return _export.deserialization_registry.get(serialized_name)


def pytree_node_builder(nodetype: type) -> Callable[[Any, Iterable[Any]], Any] | None:
    """The function that builds a `nodetype` node from its aux data and children, as
    `jax.tree_util` registered it; None when `nodetype` is not a registered node class."""
    entry = _tree_util._registry.get(nodetype)
    return None if entry is None else entry.from_iter


# --- stage objects of jax.jit(...).lower ---------------------------------------


def compile_args(lowered: Any) -> dict[str, Any]:
    """The compile arguments of a `jax.stages.Lowered` (`ordered_effects`, `host_callbacks`, ...)."""
    return lowered._lowering.compile_args


def donated_inputs(lowered: Any) -> tuple[int, ...]:
    """The positions among a `jax.stages.Lowered`'s flat arguments of the donated ones."""
    return tuple(i for i, info in enumerate(jax.tree_util.tree_leaves(lowered.args_info)) if info.donated)


def arg_avals(lowered: Any) -> tuple[Any, ...]:
    """The abstract values of a `jax.stages.Lowered`'s flat arguments (typed PRNG key dtypes kept)."""
    return tuple(info._aval for info in jax.tree_util.tree_leaves(lowered.args_info))


def kept_inputs(lowered: Any) -> tuple[int, ...]:
    """The positions among a `jax.stages.Lowered`'s flat arguments of those its module takes (all of them
    with `keep_unused=True`; without, jax drops the unused ones), sorted."""
    n_const = len(lowered._lowering.const_args)
    return tuple(i - n_const for i in sorted(compile_args(lowered)["kept_var_idx"]) if i >= n_const)


def closed_over_refs(lowered: Any) -> int:
    """How many mutable arrays (`jax.new_ref`) a `jax.stages.Lowered` program closes over (jax passes them
    as hidden arguments and writes them back after the call)."""
    mut = compile_args(lowered).get("mut")
    return 0 if mut is None else len(mut.in_mut)


def weak_out_avals(lowered: Any) -> tuple[Any, ...]:
    """The abstract values of a `jax.stages.Lowered`'s flat outputs with their weak types (`out_info` drops them)."""
    return tuple(compile_args(lowered)["global_out_avals"])


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where `jax.jit` placed a lowered program.

    `devices` is its device assignment (None when jax left it open),
    `committed` whether an argument or a sharding fixed it (jax.jit's outputs
    are then committed), `in_shardings`/`out_shardings` the shardings
    jax resolved for its flat inputs and outputs (unspecified ones are not
    `jax.sharding.Sharding`s), and `intermediate_shardings` those of the body's
    sharding constraints and shard_maps.
    """

    devices: tuple[Any, ...] | None
    committed: bool
    in_shardings: tuple[Any, ...]
    out_shardings: tuple[Any, ...]
    intermediate_shardings: tuple[Any, ...] = ()


def lowering_placement(lowered: Any) -> Placement:
    """The placement jax chose for a `jax.stages.Lowered` (its lowering's device list and compile arguments)."""
    device_list = lowered._lowering._device_list
    args = compile_args(lowered)
    return Placement(
        devices=None if device_list is None else tuple(device_list),
        committed=bool(args.get("committed", False)),
        in_shardings=tuple(args.get("in_shardings", ())),
        out_shardings=tuple(args.get("out_shardings", ())),
        intermediate_shardings=tuple(args.get("intermediate_shardings", ())),
    )


# --- jaxprs and their lowering ----------------------------------------------------


def under_transformation() -> bool:
    """Whether a jax transformation (jit, grad, vmap, ...) is tracing the caller, even
    when the caller's own arguments are concrete (a function closing over tracers)."""
    return not _core.trace_state_clean()


def convert_constvars_jaxpr(jaxpr: Any) -> Any:
    """`jaxpr` with its constants turned into leading arguments."""
    return _pe.convert_constvars_jaxpr(jaxpr)


def lower_called_computation(*, name: str, jaxpr: Any, module_context: Any, in_avals: Sequence[Any],
                             out_avals: Sequence[Any]) -> Any:
    """Lower a closed jaxpr without constants to a private `func.func`; returns the FuncOp."""
    func_op, _, _ = _mlir.lower_called_computation(
        fn_name=name, call_jaxpr=jaxpr, ctx=module_context, num_const_args=0, in_avals=in_avals,
        out_avals=out_avals, tokens_in=_mlir.TokenSet())
    return func_op


def lower_jaxpr_to_fun(*, module_context: Any, name: str, jaxpr: Any, in_avals: Sequence[Any]) -> Any:
    """Lower a closed jaxpr without constants or effects to a `func.func` named from `name`."""
    return _mlir.lower_jaxpr_to_fun(module_context, name, jaxpr, effects=[], num_const_args=0, in_avals=in_avals)


# jax makes a new MLIR context for each module it lowers (every dialect loaded again, often more work than
# lowering a small module). `build_module(context=...)` lowers into a given one instead: jax's ModuleContext takes its
# context from `make_ir_context`, which is replaced here by one that returns this thread's override, if any.
_context_override = threading.local()
_jax_make_ir_context = _mlir.make_ir_context


def _make_ir_context() -> Any:
    context = getattr(_context_override, "context", None)
    return _jax_make_ir_context() if context is None else context


_mlir.make_ir_context = _make_ir_context


def build_module(jaxpr: Any, *, name: str, platform: str, axis_context: Any, context: Any = None) -> Any:
    """A module whose public `@main` computes the closed jaxpr `jaxpr`, in `context` (an MLIR context with
    jax's dialects loaded; a new one if None)."""
    previous = getattr(_context_override, "context", None)
    _context_override.context = context
    try:
        return _mlir.build_mlir_module_helper(jaxpr, name=name, platforms=[platform], backend=None,
                                              axis_context=axis_context)
    finally:
        _context_override.context = previous


@dataclasses.dataclass(frozen=True)
class LoweringTarget:
    """What a lowering rule's module is being lowered for: its MLIR context, platforms and axis context, and
    whether it is lowered for `jax.export` (to run elsewhere) rather than for jax to compile in this process."""

    context: Any
    platforms: tuple[str, ...]
    axis_context: Any
    for_export: bool = False


def lowering_target(ctx: Any) -> LoweringTarget:
    """The target of the module a `jax.interpreters.mlir` lowering rule context `ctx` lowers into; its
    platforms are those the rule lowers for (one branch's, inside a per-platform lowering)."""
    module_context = ctx.module_context
    return LoweringTarget(context=module_context.context, platforms=tuple(_mlir._platforms_for_eqn(ctx)),
                          axis_context=module_context.axis_context,
                          for_export=bool(module_context.lowering_parameters.for_export))


def merge_module(ctx: Any, *, name: str, module: Any) -> str:
    """Move every function of `module` (in `ctx`'s MLIR context, with a public `@main`) into the module
    `ctx` lowers into, renamed apart and private, as jax merges a called `jax.export` artifact;
    the new name of `@main`. `module` is consumed."""
    module_context = ctx.module_context
    return _mlir.merge_mlir_modules(dst_module=module_context.module, sym_name=name, src_module=module,
                                    dst_symtab=module_context.symbol_table)


def lower_per_platform(ctx: Any, *, description: str, platform_rules: dict[str, Callable[..., Any]],
                       default_rule: Callable[..., Any], operands: Sequence[Any]) -> Sequence[Any]:
    """Lower with `platform_rules[p]` (`rule(ctx, *operands)`) for each platform `p` the module of the
    lowering rule context `ctx` is lowered for, and `default_rule` for the others: one rule's values
    where only one applies, else a `stablehlo.case` on the platform the program runs on. The rules
    have no side effects; `description` names the operation in jax's errors."""
    ctx = ctx.replace(avals_out=list(ctx.avals_out))  # jax's multi-platform branch adds a list to them
    return _mlir.lower_per_platform(ctx, description, platform_rules, default_rule, frozenset(), *operands)


def require_devices_during_lowering(primitive: Any) -> None:
    """Make jax lower programs holding `primitive` with their devices known (as its custom_partitioning needs)."""
    _dispatch.prim_requires_devices_during_lowering.add(primitive)


def register_dce_rule(primitive: Any, rule: Callable[[list[bool], Any], tuple[list[bool], Any]]) -> None:
    """Make jax's dead-code elimination of jaxprs (run by `jax.jit` before lowering) call
    `rule(used_outputs, eqn) -> (used_inputs, new_eqn or None)` for `primitive`'s equations."""
    _pe.dce_rules[primitive] = rule


SPMDAxisContext = _sharding_impls.SPMDAxisContext  # lowering context of a mesh (with manual axes)
ShardingContext = _sharding_impls.ShardingContext  # lowering context of N devices without a mesh


def extend_axis_env_nd(sizes: Iterable[tuple[Any, int]]) -> Any:
    """A context in which the named axes `sizes` are bound, as inside `shard_map`."""
    return _core.extend_axis_env_nd(sizes)


def xla_computation(bytecode: bytes) -> Any:
    """XLA's `XlaComputation` of a StableHLO module (MLIR bytecode), as `jax.stages.Lowered.compiler_ir("hlo")`."""
    return _jax.mlir.mlir_module_to_xla_computation(bytecode, use_tuple_args=False)


def hlo_text(bytecode: bytes, *, debug_info: bool) -> str:
    """XLA's HLO text of a StableHLO module (MLIR bytecode), as `jax.stages.Lowered.as_text("hlo")` prints it."""
    options = _hlo.HloPrintOptions.short_parsable()
    options.print_metadata = debug_info
    return xla_computation(bytecode).as_hlo_module().to_string(options)


def hlo_cost_analysis(bytecode: bytes) -> dict[str, float]:
    """XLA's cost estimates of a StableHLO module (MLIR bytecode) before optimization, as
    `jax.stages.Lowered.cost_analysis` gives them (flops, bytes accessed, ...)."""
    return _jax.hlo_module_cost_analysis(_xla_bridge.get_backend(), xla_computation(bytecode).as_hlo_module())


# --- sharding rules and shardings ---------------------------------------------------


def str_to_sdy_sharding_rule(rule: str, **kwargs: Any) -> SdyShardingRule:
    """An einsum-like sharding rule (`"...i -> ...i"`) as an `SdyShardingRule`."""
    return _str_to_sdy_sharding_rule(rule, **kwargs)


def sdy_sharding_rule_to_mlir(rule: SdyShardingRule, operand_types: Sequence[Any],
                              result_types: Sequence[Any]) -> Any:
    """The `#sdy.op_sharding_rule` attribute of `rule` for these operand and result types."""
    return _sdy_sharding_rule_to_mlir(rule, list(operand_types), list(result_types))


def partition_spec(op_sharding: Any, mesh: Any) -> Any:
    """The PartitionSpec of an `xc.OpSharding` on `mesh`.

    Remembered per serialized sharding and mesh: every `Compiled` (each load of
    a file) asks for the specs of its parameters and outputs, and jax's parse
    costs as much as the rest of building one.
    """
    return _partition_spec(op_sharding.SerializeToString(), mesh)


@functools.lru_cache(maxsize=1024)
def _partition_spec(serialized: bytes, mesh: Any) -> Any:
    op_sharding = xla_client.OpSharding()
    op_sharding.ParseFromString(serialized)
    return _sharding_impls.parse_flatten_op_sharding(op_sharding, mesh)[0]


def output_aval(aval: Any, sharding: Any) -> Any:
    """`aval` with the mesh's explicit axes of `sharding` in its type, as jax.jit's outputs have
    (`float32[8@x,2]`)."""
    return _core.update_aval_with_sharding(aval, sharding)


# --- typed PRNG keys ---------------------------------------------------------------


def prng_impl(dtype: Any) -> Any:
    """The PRNG implementation of a typed key dtype (`key<fry>` -> threefry2x32)."""
    return dtype._impl


def key_shape(dtype: Any) -> tuple[int, ...]:
    """The shape of one key's data for a typed key dtype (`(2,)` for threefry)."""
    return tuple(dtype._impl.key_shape)


# --- jaxlib's C++ dispatch (the fast path of jax.jit) ---------------------------------


def cpp_pjit(*, name: str, fun: Callable, cache_miss: Callable, static_argnums: Sequence[int],
             static_argnames: Sequence[str] = (), capacity: int) -> Callable:
    """A C++ callable that calls `cache_miss` on new signatures and replays known ones.

    `cache_miss(*args)` returns `(outputs, fastpath_data or None, False)`.
    """
    return _jax.pjit(
        function_name=name, fun=fun, cache_miss=cache_miss, static_argnums=list(static_argnums),
        static_argnames=list(static_argnames), global_cache_key=_pxla.JitGlobalCppCacheKeys(),
        pytree_registry=_tree_util.dispatch_registry, shard_arg_fallback=_pxla.cc_shard_arg,
        cache=_jax.PjitFunctionCache(capacity=capacity))


def flatten_for_dispatch(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and treedef of `tree` under the registry the C++ dispatch flattens with."""
    return _tree_util.dispatch_registry.flatten(tree, None)


def result_handler(aval: Any, sharding: Any, *, committed: bool) -> Callable[[Sequence[Any]], Any]:
    """jax.jit's output handler for `aval`: a program's per-device buffers of it -> one `jax.Array`."""
    return _pxla.global_aval_to_result_handler(aval=aval, out_sharding=sharding, committed=committed)


def is_committed(array: Any) -> bool:
    """Whether a `jax.Array` is committed to its devices."""
    return array._committed


def fastpath_data(*, executable: Any, out_tree: Any, in_shardings: Sequence[Any], out_shardings: Sequence[Any],
                  out_avals: Sequence[Any], out_committed: Sequence[bool], kept: Sequence[bool]) -> Any:
    """What `cpp_pjit` needs to run `executable` again from C++ (default layouts).

    `kept[i]` says whether input leaf i is a parameter of `executable`;
    `in_shardings` are the parameters' shardings.
    """
    return _pxla.MeshExecutableFastpathData(
        xla_executable=executable, out_pytree_def=out_tree, in_shardings=in_shardings,
        out_shardings=out_shardings, out_avals=out_avals, out_committed=out_committed,
        kept_var_bitvec=list(kept), in_device_local_layouts=[None] * len(in_shardings), const_args=[])


# --- loaded executables ------------------------------------------------------------


def layout_rank(layout: Any) -> int:
    """The rank of an array a PJRT executable's parameter or output `layout` describes."""
    return len(layout._xla_layout().minor_to_major())


# hlopt's own frames leave tracebacks where jax's do (`jax_traceback_filtering`).
for _path in hlopt_dirs():
    hide_frames_of(_path)


def initialize_lapack() -> None:
    """Make jaxlib's LAPACK FFI kernels callable (what `jax.export` does before a deserialized CPU program runs).

    jax registers the `lapack_*_ffi` targets on import but binds them to
    LAPACK only when it first lowers a linear-algebra op; an executable
    loaded from a file or cache calls them without that, and without this
    it dies with SIGSEGV. Idempotent and cheap.
    """
    _linalg.initialize_lapack()


def get_backend(platform: str | None = None) -> Any:
    """The PJRT client jax uses for `platform` (its default if None); `jax.extend.backend.get_backend`
    without importing `jax.extend` (which imports Pallas)."""
    return _xla_bridge.get_backend(platform)
