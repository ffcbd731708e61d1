"""`hlopt.custom_partitioning`: JAX's custom_partitioning, resolved ahead of time.

The decorated function lowers to `custom_call @hlopt.custom_partitioning`
whose `called_computations` is the function's body and whose `backend_config`
holds a stable key (`module:qualname`), the static arguments and pytree
structures (as Python literals), and the mesh; the sharding rule is the op's
`sdy.sharding_rule`. The `lower-custom-partitioning` pass calls back into the
object registered under the key (`partition_ir`) with plain data, and this
module turns that into JAX's callback contract: a `Mesh`, `ShapeDtypeStruct`s
carrying `NamedSharding`s, and `lower_fn` lowered at per-device shapes.

Under plain `jax.jit` (jax lowers the program, not hlopt) the function is
JAX's `custom_partitioning` with the same callbacks: XLA calls them while it
partitions, in the process that compiles, with the shardings it propagated.
Called outside any jit, the function evaluates its body, as JAX's does.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning as jax_custom_partitioning
from jax.interpreters import mlir
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from hlopt.compiler.jax_compat import (
    ShardingContext,
    SdyShardingRule,
    SPMDAxisContext,
    build_module,
    extend_axis_env_nd,
    jaxpr_as_fun,
    lower_jaxpr_to_fun,
    require_devices_during_lowering,
    sdy_sharding_rule_to_mlir,
    str_to_sdy_sharding_rule,
)
from hlopt.compiler.lowering import resolve_static_argnums
from hlopt.compiler.program import same_value
from hlopt.passes.partitioning.lower_custom_partitioning import (
    PartitionPlan,
    PartitionRequest,
    TensorSpec,
    register_partitioner,
    registered_partitioner,
)
from hlopt.passes.partitioning.sharding_codec import DimShardings, MeshSpec, local_shape
from hlopt.passes.ir.annotation_names import CUSTOM_PARTITIONING
from hlopt.passes.mlir import ir
from hlopt.primitives import annotation_primitive, emit_annotation, result_types

__all__ = ["custom_partitioning"]


class _Literals:
    """Values put into the IR as Python literals. A value whose repr is not a
    literal of itself is named `<type #n>` instead (n counts this object's
    encodings, so it is the same in every run of the same program) and is
    recovered from this process's table."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def encode(self, text: str, value: Any, convert: Callable[[Any], Any] = lambda v: v) -> str:
        if not _round_trips(text, value, convert):
            text = next((t for t, v in self._values.items() if same_value(v, value)),
                        f"<{type(value).__name__} #{len(self._values)}>")
        self._values[text] = value
        return text

    def decode(self, text: str, convert: Callable[[Any], Any] = lambda v: v) -> Any:
        if text in self._values:
            return self._values[text]
        try:
            return convert(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            raise ValueError(f"'{text}' is not a Python literal and was not encoded in this process") from None


def _round_trips(text: str, value: Any, convert: Callable[[Any], Any]) -> bool:
    try:
        return same_value(convert(ast.literal_eval(text)), value)
    except (ValueError, SyntaxError, TypeError):
        return False


def _skeleton(tree: Any) -> str:
    return repr(jax.tree_util.tree_unflatten(tree, [0] * tree.num_leaves))


def _key(fun: Callable, partitioner: Any) -> str:
    """`module:qualname`, with `#n` when another live object already holds it."""
    base = f"{getattr(fun, '__module__', None) or '__main__'}:{getattr(fun, '__qualname__', repr(fun))}"
    key, n = base, 1
    while registered_partitioner(key) not in (None, partitioner):
        n += 1
        key = f"{base}#{n}"
    return key


def _spec_dims(sharding: Any, rank: int, what: str) -> DimShardings:
    if not isinstance(sharding, NamedSharding):
        raise TypeError(f"{what} must be a NamedSharding, got {type(sharding).__name__} {sharding!r}")
    dims = []
    for entry in tuple(sharding.spec) + (None,) * (rank - len(sharding.spec)):
        if entry is None:
            dims.append(())
        elif isinstance(entry, str):
            dims.append((entry,))
        elif isinstance(entry, tuple) and all(isinstance(a, str) for a in entry):
            dims.append(entry)
        else:
            raise TypeError(f"{what}: partition spec entry {entry!r} is not supported ahead of time")
    if len(dims) != rank:
        raise ValueError(f"{what}: {sharding.spec} has more entries than the rank {rank}")
    return tuple(dims)


def _flat_dims(tree: Any, shardings: Any, specs: Sequence[TensorSpec], what: str) -> tuple[DimShardings, ...]:
    try:
        flat = tree.flatten_up_to(shardings)
    except (ValueError, TypeError):
        raise ValueError(f"partition returned {what} shardings {shardings!r} that do not match the "
                         f"{what} structure {tree}") from None
    return tuple(_spec_dims(s, len(t.shape), f"{what} sharding {i} from partition")
                 for i, (s, t) in enumerate(zip(flat, specs)))


def _spec(dims: DimShardings) -> PartitionSpec:
    return PartitionSpec(*(None if not d else d[0] if len(d) == 1 else d for d in dims))


def _mesh_from_spec(spec: MeshSpec) -> Mesh:
    devices = jax.devices()
    if spec.size > len(devices):
        raise ValueError(f"mesh {spec.attribute_text()} needs {spec.size} devices, this process has {len(devices)}")
    chosen = np.array([devices[i] for i in spec.ids], dtype=object)
    return Mesh(chosen.reshape([size for _, size in spec.axes]), tuple(name for name, _ in spec.axes))


def _mesh_to_spec(mesh: Mesh) -> MeshSpec:
    if not isinstance(mesh, Mesh):
        raise TypeError(f"partition must return a jax.sharding.Mesh, got {type(mesh).__name__}")
    position = {d.id: i for i, d in enumerate(jax.devices())}
    ids = tuple(position[d.id] for d in mesh.devices.flat)
    return MeshSpec(tuple(mesh.shape.items()), () if ids == tuple(range(len(ids))) else ids)


class custom_partitioning:
    """Decorator with the contract of `jax.experimental.custom_partitioning`.

    `fun` runs unpartitioned on one device; on a mesh, the `partition` given to
    `def_partition` is called by the `lower-custom-partitioning` pass before XLA sees the
    program, so the compiled program holds no Python callback and can be saved.

    Args:
      fun: the function to partition.
      static_argnums: positions of arguments that are Python values.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> from jax.sharding import PartitionSpec as P
      >>> @hlopt.custom_partitioning
      ... def double(x):
      ...     return 2 * x
      >>> def partition(mesh, arg_shapes, result_shape):   # each device doubles its own part
      ...     sharding = arg_shapes[0].sharding
      ...     return mesh, lambda x: 2 * x, sharding, (sharding,)
      >>> _ = double.def_partition(partition, sharding_rule="i -> i")
      >>> mesh = jax.make_mesh((1,), ("x",))
      >>> lowered = hlopt.lower(double, jnp.ones(2), mesh=mesh, in_shardings=(P("x"),), out_shardings=P("x"))
      >>> lowered.compile()(jnp.ones(2)).tolist()
      [2.0, 2.0]
    """

    def __init__(self, fun: Callable, static_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = tuple(static_argnums)
        self.partition: Callable | None = None
        self.infer_sharding_from_operands: Callable | None = None
        self.propagate_user_sharding: Callable | None = None
        self.sharding_rule: SdyShardingRule | Callable | None = None
        self.decode_shardings = True
        self._literals = _Literals()
        self.key = _key(fun, self)
        register_partitioner(self.key, self)

    def def_partition(
        self,
        partition: Callable,
        infer_sharding_from_operands: Callable | None = None,
        propagate_user_sharding: Callable | None = None,
        decode_shardings: bool = True,
        sharding_rule: str | SdyShardingRule | Callable | None = None,
        *,
        reduction_factors: tuple[str, ...] = (),
        need_replication_factors: tuple[str, ...] = (),
        permutation_factors: tuple[str, ...] = (),
        **factor_sizes: int,
    ) -> Callable:
        """Set the partitioning callbacks and the sharding rule, as JAX's `def_partition` does.

        Under `hlopt.jit` the callbacks always receive `NamedSharding`s on the
        program's mesh (hlopt requires a mesh); `decode_shardings` applies under
        plain `jax.jit`, where JAX's own custom_partitioning calls them.
        """
        self.decode_shardings = decode_shardings
        self.partition = partition
        self.infer_sharding_from_operands = infer_sharding_from_operands
        self.propagate_user_sharding = propagate_user_sharding
        if isinstance(sharding_rule, str):
            sharding_rule = str_to_sdy_sharding_rule(
                sharding_rule, reduction_factors=reduction_factors,
                need_replication_factors=need_replication_factors,
                permutation_factors=permutation_factors, **factor_sizes)
        elif reduction_factors or need_replication_factors or permutation_factors or factor_sizes:
            raise ValueError("reduction_factors, need_replication_factors, permutation_factors and factor "
                             "sizes only go with a string sharding_rule")
        self.sharding_rule = sharding_rule
        return partition

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.partition is None:
            raise ValueError(f"{self.key}: call def_partition before calling the function")
        bound = inspect.signature(self.fun).bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.kwargs:
            raise TypeError(f"{self.key}: keyword-only arguments cannot be resolved to positions")
        args = tuple(bound.args)
        static = set(resolve_static_argnums(self.static_argnums, len(args)))
        static_args = tuple(args[i] for i in sorted(static))
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(static_args)):
            raise TypeError(f"{self.key}: a static argument is a traced value")
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        leaves, in_tree = jax.tree_util.tree_flatten(dynamic)
        out_trees = []

        def flat_fun(*flat):
            merged = iter(jax.tree_util.tree_unflatten(in_tree, flat))
            statics = iter(static_args)
            full = [next(statics) if i in static else next(merged) for i in range(len(args))]
            out_leaves, out_tree = jax.tree_util.tree_flatten(self.fun(*full))
            out_trees.append(out_tree)
            return out_leaves

        avals = [jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x)) for x in leaves]
        call = jax.make_jaxpr(flat_fun)(*avals)
        out_tree = out_trees[0]
        out = _custom_partitioning_p.bind(
            *leaves,
            call=call,
            partitioner=self,
            static_args=self._literals.encode(repr(static_args), static_args),
            in_tree=self._literals.encode(_skeleton(in_tree), in_tree, jax.tree_util.tree_structure),
            out_tree=self._literals.encode(_skeleton(out_tree), out_tree, jax.tree_util.tree_structure),
        )
        return jax.tree_util.tree_unflatten(out_tree, out)

    def as_jax(self) -> jax_custom_partitioning:
        """JAX's `custom_partitioning` of the same function with the same callbacks."""
        jax_fun = jax_custom_partitioning(self.fun, static_argnums=self.static_argnums)
        jax_fun.def_partition(self.partition, infer_sharding_from_operands=self.infer_sharding_from_operands,
                              propagate_user_sharding=self.propagate_user_sharding,
                              decode_shardings=self.decode_shardings, sharding_rule=self.sharding_rule)
        return jax_fun

    def _tree(self, text: str) -> Any:
        return self._literals.decode(text, jax.tree_util.tree_structure)

    def partition_ir(self, request: PartitionRequest) -> PartitionPlan:
        """Run the user's callbacks on plain data from the pass; return the per-device body."""
        static_args = self._literals.decode(request.static_args)
        in_tree, out_tree = self._tree(request.in_tree), self._tree(request.out_tree)
        mesh = _mesh_from_spec(request.mesh)

        def shaped(spec: TensorSpec, dims: DimShardings) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct(spec.shape, np.dtype(spec.dtype), sharding=NamedSharding(mesh, _spec(dims)))

        arg_shapes = in_tree.unflatten([shaped(s, s.sharding or ((),) * len(s.shape)) for s in request.operands])
        result_dims = self._result_dims(static_args, mesh, arg_shapes, out_tree, request)
        result_shape = out_tree.unflatten([shaped(s, d) for s, d in zip(request.results, result_dims)])
        new_mesh, lower_fn, result_shardings, arg_shardings = self.partition(
            *static_args, mesh, arg_shapes, result_shape)
        new_spec = _mesh_to_spec(new_mesh)
        operand_dims = _flat_dims(in_tree, arg_shardings, request.operands, "argument")
        result_out = _flat_dims(out_tree, result_shardings, request.results, "result")
        return PartitionPlan(
            mesh=new_spec,
            body=_lower_per_device(lower_fn, new_mesh, new_spec, in_tree, out_tree, request.operands, operand_dims),
            operand_shardings=operand_dims,
            result_shardings=result_out,
        )

    def _result_dims(self, static_args, mesh, arg_shapes, out_tree, request) -> list[DimShardings]:
        """The result shardings to show `partition`: propagated, else from the callbacks, else replicated."""
        results = request.results
        if all(s.sharding is not None for s in results) and (
                self.sharding_rule is not None or self.infer_sharding_from_operands is None):
            if self.sharding_rule is None and self.propagate_user_sharding is not None:
                users = out_tree.unflatten([
                    jax.ShapeDtypeStruct(s.shape, np.dtype(s.dtype), sharding=NamedSharding(mesh, _spec(s.sharding)))
                    for s in results])
                chosen = self.propagate_user_sharding(*static_args, mesh, users)
                return [_spec_dims(c, len(s.shape), "propagate_user_sharding result")
                        for c, s in zip(out_tree.flatten_up_to(chosen), results)]
            return [s.sharding for s in results]
        if self.infer_sharding_from_operands is not None:
            shapes = out_tree.unflatten([jax.ShapeDtypeStruct(s.shape, np.dtype(s.dtype)) for s in results])
            chosen = self.infer_sharding_from_operands(*static_args, mesh, arg_shapes, shapes)
            return [_spec_dims(c, len(s.shape), "infer_sharding_from_operands result")
                    for c, s in zip(out_tree.flatten_up_to(chosen), results)]
        return [s.sharding or ((),) * len(s.shape) for s in results]


def _lower_per_device(lower_fn: Callable, mesh: Mesh, spec: MeshSpec, in_tree: Any, out_tree: Any,
                      operands: Sequence[TensorSpec], dims: Sequence[DimShardings]) -> str:
    """`lower_fn` traced at per-device shapes with every mesh axis manual, as module text."""
    sizes = dict(mesh.shape)
    local = []
    for i, (operand, d) in enumerate(zip(operands, dims)):
        shape = local_shape(operand.shape, d, spec)
        if shape is None:
            raise ValueError(f"operand {i} {operand.dtype}{list(operand.shape)} is not divisible by its sharding "
                             f"{list(d)} on mesh {spec.attribute_text()}")
        local.append(jax.ShapeDtypeStruct(shape, np.dtype(operand.dtype)))
    closed, shapes = jax.make_jaxpr(lower_fn, axis_env=list(sizes.items()), return_shape=True)(
        *in_tree.unflatten(local))
    got = jax.tree_util.tree_structure(shapes)
    if got != out_tree:
        raise ValueError(f"lower_fn returned the structure {got} but the function returns {out_tree}")
    axis_context = SPMDAxisContext(mesh, frozenset(mesh.axis_names))
    with extend_axis_env_nd(sizes.items()):
        module = build_module(closed, name="partitioned", platform=mesh.devices.flat[0].platform,
                              axis_context=axis_context)
    return module.operation.get_asm(enable_debug_info=True)


def _abstract_eval(*avals, call, **params):
    return call.out_avals


def _program_mesh(ctx) -> MeshSpec | None:
    """The mesh the program is lowered for, or None on one device."""
    axis_context = ctx.module_context.axis_context
    if isinstance(axis_context, SPMDAxisContext):
        if set(axis_context.manual_axes) == set(axis_context.mesh.axis_names):
            return None
        mesh = axis_context.mesh
        return MeshSpec(tuple(mesh.shape.items()))
    if isinstance(axis_context, ShardingContext) and axis_context.num_devices > 1:
        am = axis_context.abstract_mesh
        if am is None or am.empty:
            am = jax.sharding.get_abstract_mesh()
        if am.empty or am.size != axis_context.num_devices:
            raise ValueError("hlopt.custom_partitioning on several devices needs a mesh: pass mesh= to "
                             "hlopt.jit / hlopt.lower (or use jax.set_mesh)")
        return MeshSpec(tuple(zip(am.axis_names, am.axis_sizes)))
    return None


def _lowering(ctx, *operands, call, partitioner, static_args, in_tree, out_tree):
    body = lower_jaxpr_to_fun(module_context=ctx.module_context, name=f"{partitioner.__name__}_body", jaxpr=call,
                              in_avals=call.in_avals)
    config: dict[str, Any] = {"key": partitioner.key, "static_args": static_args,
                              "in_tree": in_tree, "out_tree": out_tree}
    mesh = _program_mesh(ctx)
    if mesh is not None:
        config["mesh"] = ir.Attribute.parse(mesh.attribute_text())
    types = result_types(ctx)
    results = emit_annotation(CUSTOM_PARTITIONING, operands, types, config,
                              [ir.StringAttr(body.attributes["sym_name"]).value])
    rule = partitioner.sharding_rule
    if rule is not None and mesh is not None:
        operand_types = [v.type for v in operands]
        if callable(rule) and not isinstance(rule, SdyShardingRule):
            rule = rule(*partitioner._literals.decode(static_args), _mesh_from_spec(mesh), operand_types, types)
            rule, extra = rule if isinstance(rule, (tuple, list)) and len(rule) == 2 else (rule, {})
            if isinstance(rule, str):
                rule = str_to_sdy_sharding_rule(rule, **extra)
            elif not isinstance(rule, SdyShardingRule):
                raise ValueError(f"{partitioner.key}: the sharding_rule callable must return an "
                                 "SdyShardingRule or an einsum-like string")
        results[0].owner.attributes["sdy.sharding_rule"] = sdy_sharding_rule_to_mlir(rule, operand_types, types)
    return results


def _plain_lowering(ctx, *operands, call, partitioner, static_args, in_tree, out_tree):
    """Under jax's own lowering: JAX's custom_partitioning of the same function and callbacks."""
    statics = partitioner._literals.decode(static_args)
    in_tree, out_tree = partitioner._tree(in_tree), partitioner._tree(out_tree)
    num_args = len(statics) + len(in_tree.children())  # in_tree is the tuple of dynamic arguments
    static = resolve_static_argnums(partitioner.static_argnums, num_args)
    jax_fun = partitioner.as_jax()

    def flat(*leaves):
        dynamic, given = iter(in_tree.unflatten(leaves)), iter(statics)
        args = [next(given) if i in static else next(dynamic) for i in range(num_args)]
        return out_tree.flatten_up_to(jax_fun(*args))

    return mlir.lower_fun(flat, multiple_results=True)(ctx, *operands)


def _evaluate_body(*args, call, **params):
    """Called outside any jit, a custom-partitioned function evaluates its body, as JAX's does."""
    return jaxpr_as_fun(call)(*args)


_custom_partitioning_p = annotation_primitive("hlopt_custom_partitioning", _abstract_eval, _lowering,
                                              plain_lowering=_plain_lowering)
_custom_partitioning_p.def_impl(_evaluate_body)
require_devices_during_lowering(_custom_partitioning_p)  # JAX's partitioner callback needs the mesh's devices
