"""Every private jax/jaxlib API hlopt relies on, checked where `compiler/jax_compat.py` wraps it.

A jax upgrade that renames a parameter, moves a function or drops an
attribute fails here, in the test named after it.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from hlopt.compiler import jax_compat

# the private modules jax_compat wraps, as it imported them
mlir, pxla, pjit = jax_compat._mlir, jax_compat._pxla, jax_compat._jax.pjit


def parameters(fn) -> set[str]:
    """Parameter names of a Python callable, or of a nanobind function from its signature text."""
    nb = getattr(fn, "__nb_signature__", None)
    if nb is not None:
        text = nb[0][0]
        return {p.split(":")[0].strip().lstrip("*") for p in text[text.index("(") + 1 : text.rindex(")")].split(",")}
    return set(inspect.signature(fn).parameters)


# (wrapped callable, the keywords jax_compat passes it)
KEYWORDS = {
    "lower_called_computation": (mlir.lower_called_computation,
                                 {"fn_name", "call_jaxpr", "ctx", "num_const_args", "in_avals", "out_avals",
                                  "tokens_in"}),
    "lower_jaxpr_to_fun": (mlir.lower_jaxpr_to_fun, {"effects", "num_const_args", "in_avals"}),
    "register_lowering": (mlir.register_lowering, {"cacheable"}),
    "lower_per_platform": (mlir.lower_per_platform, {"ctx", "description", "platform_rules", "default_rule", "effects"}),
    "_platforms_for_eqn": (mlir._platforms_for_eqn, {"ctx"}),
    "merge_mlir_modules": (mlir.merge_mlir_modules, {"dst_module", "sym_name", "src_module", "dst_symtab"}),
    "build_mlir_module_helper": (mlir.build_mlir_module_helper,
                                 {"name", "platforms", "backend", "axis_context"}),
    "str_to_sdy_sharding_rule": (jax_compat._str_to_sdy_sharding_rule,
                                 {"rule", "reduction_factors", "need_replication_factors", "permutation_factors"}),
    "sdy_sharding_rule_to_mlir": (jax_compat._sdy_sharding_rule_to_mlir, {"rule", "operand_types", "result_types"}),
    "parse_flatten_op_sharding": (jax_compat._sharding_impls.parse_flatten_op_sharding, {"hlo_sharding", "mesh"}),
    "global_aval_to_result_handler": (pxla.global_aval_to_result_handler, {"aval", "out_sharding", "committed"}),
    "JitGlobalCppCacheKeys": (pxla.JitGlobalCppCacheKeys, set()),
    "MeshExecutableFastpathData": (pxla.MeshExecutableFastpathData,
                                   {"xla_executable", "out_pytree_def", "in_shardings", "out_shardings", "out_avals",
                                    "out_committed", "kept_var_bitvec", "in_device_local_layouts", "const_args"}),
    "pjit": (pjit, {"function_name", "fun", "cache_miss", "static_argnums", "static_argnames",
                         "global_cache_key", "pytree_registry", "shard_arg_fallback", "cache"}),
}


def test_traceback_filtering_hides_hlopts_frames():
    assert {"path"} <= parameters(jax_compat._traceback_util.register_exclusion)
    from hlopt.passes.ir.locations import hlopt_dirs

    assert set(hlopt_dirs()) <= set(jax_compat._traceback_util._exclude_paths)
    info = jax_compat._source_info_util
    assert {"path"} <= parameters(info.register_exclusion)
    inside = os.path.join(hlopt_dirs()[0], "x.py")
    assert info.is_user_filename(inside)  # hlopt's frames are in the locations, for the call chain of errors
    with jax_compat.locations_without(hlopt_dirs()):
        assert not info.is_user_filename(inside)
    assert info.is_user_filename(inside) and isinstance(info._exclude_paths, list)

    def inner():
        raise ValueError("below the boundary")

    wrapped = jax_compat.api_boundary(lambda: inner())
    with pytest.raises(ValueError) as info:
        wrapped()
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert "inner" in frames  # a file of the user's (this test) keeps its frames


@pytest.mark.parametrize("name", list(KEYWORDS))
def test_signature(name):
    fn, keywords = KEYWORDS[name]
    missing = keywords - parameters(fn)
    assert not missing, f"{name} no longer takes {sorted(missing)}: update compiler/jax_compat.py"


def test_lowering_rule_context_has_what_lowering_target_and_merge_module_read():
    from jax.extend.core import Primitive
    from jax.interpreters import mlir as public_mlir

    seen = {}
    prim = Primitive("hlopt_test_compat_probe")
    prim.def_abstract_eval(lambda x: x)

    def rule(ctx, x):
        seen.setdefault("targets", []).append(jax_compat.lowering_target(ctx))
        module_context = ctx.module_context
        seen["module"] = isinstance(module_context.module, jax_compat._mlir.ir.Module)
        seen["symtab"] = isinstance(module_context.symbol_table, jax_compat._mlir.ir.SymbolTable)
        return [x]

    public_mlir.register_lowering(prim, rule)
    jax.jit(prim.bind).lower(np.ones(3, np.float32))
    jax.export.export(jax.jit(prim.bind))(np.ones(3, np.float32))
    target, exported = seen["targets"]
    assert target.platforms == ("cpu",) and isinstance(target.context, jax_compat._mlir.ir.Context)
    assert isinstance(target.axis_context, (jax_compat.ShardingContext, jax_compat.SPMDAxisContext))
    assert seen["module"] and seen["symtab"]
    assert not target.for_export and exported.for_export and exported.platforms == ("cpu",)


def test_primitives_requiring_devices_during_lowering_is_a_set():
    assert isinstance(jax_compat._dispatch.prim_requires_devices_during_lowering, set)


def test_dce_rules_are_called_with_the_used_outputs():
    from jax.extend.core import Primitive

    prim = Primitive("hlopt_test_compat_dce")
    prim.multiple_results = True
    prim.def_abstract_eval(lambda x: [x, x])
    seen = []

    def rule(used, eqn):
        seen.append(list(used))
        return [True], eqn

    jax_compat.register_dce_rule(prim, rule)
    jaxpr = jax.make_jaxpr(lambda x: prim.bind(x)[1])(np.ones(3, np.float32))
    jax_compat._pe.dce_jaxpr(jaxpr.jaxpr, [True])
    assert seen == [[False, True]] and isinstance(jax_compat._pe.dce_rules, dict)


def test_get_backend_is_jax_extends():
    from jax.extend import backend

    assert {"platform"} <= parameters(jax_compat._xla_bridge.get_backend)
    assert jax_compat.get_backend() is backend.get_backend() and jax_compat.get_backend("cpu").platform == "cpu"


def test_initialize_lapack_takes_nothing():
    assert not parameters(jax_compat._linalg.initialize_lapack)
    jax_compat.initialize_lapack()
    jax_compat.initialize_lapack()  # idempotent


def test_sharding_contexts_have_the_fields_hlopt_reads():
    assert {"mesh", "manual_axes"} <= {f.name for f in dataclasses.fields(jax_compat.SPMDAxisContext)}
    assert {"num_devices", "abstract_mesh"} <= {f.name for f in dataclasses.fields(jax_compat.ShardingContext)}


def test_stage_attributes():
    def f(key, x):
        return jax.random.normal(key, x.shape) + x

    lowered = jax.jit(f).lower(jax.random.key(0), np.ones(3, np.float32))
    args = jax_compat.compile_args(lowered)
    assert isinstance(args, dict) and "ordered_effects" in args and "host_callbacks" in args
    key, x = jax_compat.arg_avals(lowered)
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
    assert x == jax.core.ShapedArray((3,), np.float32)


def test_kept_inputs_follow_keep_unused():
    def f(a, b, c):
        return a + c

    args = (np.ones(3, np.float32),) * 3
    assert jax_compat.kept_inputs(jax.jit(f).lower(*args)) == (0, 2)
    assert jax_compat.kept_inputs(jax.jit(f, keep_unused=True).lower(*args)) == (0, 1, 2)
    lowering = jax.jit(f).lower(*args)._lowering
    assert isinstance(lowering.const_args, list) and isinstance(jax_compat.compile_args(jax.jit(f).lower(*args))["kept_var_idx"], (set, frozenset))


def test_convert_constvars_jaxpr():
    c = np.arange(3.0, dtype=np.float32)
    closed = jax.make_jaxpr(lambda x: x * c)(np.ones(3, np.float32))
    assert len(closed.jaxpr.constvars) == 1
    converted = jax_compat.convert_constvars_jaxpr(closed.jaxpr)
    assert not converted.constvars and len(converted.invars) == 2


def test_under_transformation():
    assert not inspect.signature(jax_compat._core.trace_state_clean).parameters
    assert not jax_compat.under_transformation()
    seen = []
    jax.grad(lambda x: seen.append(jax_compat.under_transformation()) or x)(1.0)
    jax.vmap(lambda x: seen.append(jax_compat.under_transformation()) or x)(jnp.ones(2))
    assert seen == [True, True]


def test_extend_axis_env_nd():
    with jax_compat.extend_axis_env_nd([("i", 4)]):
        assert jax.lax.psum(1, "i") == 4  # the size of a bound axis


def test_sharding_rule_round_trip():
    rule = jax_compat.str_to_sdy_sharding_rule("i j -> j i")
    assert isinstance(rule, jax_compat.SdyShardingRule)
    from hlopt.passes.mlir import get_context, ir

    with get_context(), ir.Location.unknown():
        t = ir.RankedTensorType.get([2, 4], ir.F32Type.get())
        u = ir.RankedTensorType.get([4, 2], ir.F32Type.get())
        attr = jax_compat.sdy_sharding_rule_to_mlir(rule, [t], [u])
    assert "op_sharding_rule" in str(attr)


def test_partition_spec_of_an_executable_sharding():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    compiled = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x"))).lower(np.ones(4)).compile()
    (op_sharding,) = compiled.runtime_executable().get_parameter_shardings()
    assert jax_compat.partition_spec(op_sharding, mesh) == P("x")
    # remembered per sharding and mesh: the same sharding on another mesh, and another sharding, are parsed anew
    assert jax_compat.partition_spec(op_sharding, Mesh(np.array(jax.devices()[:2]), ("y",))) == P("y")
    (replicated,) = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P())).lower(
        np.ones(4)).compile().runtime_executable().get_parameter_shardings()
    assert jax_compat.partition_spec(replicated, mesh) == P()
    assert jax_compat.partition_spec(op_sharding, mesh) == P("x")


def test_prng_key_dtype():
    key = jax.random.key(0, impl="rbg")
    data = jax.random.wrap_key_data(jax.random.key_data(key), impl=jax_compat.prng_impl(key.dtype))
    assert data.dtype == key.dtype
    assert jax_compat.key_shape(key.dtype) == jax.random.key_data(key).shape == (4,)


def test_cpp_dispatch_replays_a_known_signature():
    executable = jax.jit(lambda x: x + 1).lower(np.ones(3, np.float32)).compile()
    misses = []

    def fun(x):
        return x + 1

    def cache_miss(x):
        misses.append(x)
        out = executable(x)
        leaves, tree = jax_compat.flatten_for_dispatch(out)
        assert jax_compat.is_committed(leaves[0]) in (True, False)
        data = jax_compat.fastpath_data(
            executable=executable.runtime_executable(), out_tree=tree, in_shardings=executable.input_shardings[0],
            out_shardings=[executable.output_shardings], out_avals=[leaves[0].aval],
            out_committed=[jax_compat.is_committed(leaves[0])], kept=[True])
        return out, data, False

    call = jax_compat.cpp_pjit(name="f", fun=fun, cache_miss=cache_miss, static_argnums=(), capacity=4)
    x = jnp.ones(3, np.float32)
    np.testing.assert_array_equal(call(x), 2 * np.ones(3))
    np.testing.assert_array_equal(call(x + 1), 3 * np.ones(3))
    assert len(misses) == 1  # the second call ran from C++


def test_layout_rank_of_executable_parameters_and_outputs():
    executable = jax.jit(lambda x, s: (x.sum(0), s)).lower(np.ones((2, 3, 4), np.float32), 1.0).compile()
    runtime = executable.runtime_executable()
    assert [jax_compat.layout_rank(x) for x in runtime.get_parameter_layouts()] == [3, 0]
    assert [jax_compat.layout_rank(x) for x in runtime.get_output_layouts()] == [2, 0]


def test_lowering_placement_and_weak_out_avals():
    x = jax.device_put(np.ones(3, np.float32), jax.devices()[-1])
    lowered = jax.jit(lambda x: (x + 1, 2.0)).lower(x)
    placement = jax_compat.lowering_placement(lowered)
    assert placement.devices == (jax.devices()[-1],) and placement.committed
    assert len(placement.in_shardings) == 1 and len(placement.out_shardings) == 2
    _, weak = jax_compat.weak_out_avals(lowered)
    assert weak.weak_type and weak.shape == ()
    assert not jax_compat.lowering_placement(jax.jit(lambda x: x).lower(np.ones(3))).committed


def test_result_handler_builds_an_array():
    device = jax.devices()[0]
    aval = jax.core.ShapedArray((3,), np.float32)
    handler = jax_compat.result_handler(aval=aval, sharding=jax.sharding.SingleDeviceSharding(device), committed=True)
    out = handler([jax.device_put(np.arange(3, dtype=np.float32), device)])
    assert isinstance(out, jax.Array) and out.committed
    np.testing.assert_array_equal(out, np.arange(3))


def test_pytree_node_registries():
    """jax.export's serialization registries and jax.tree_util's node builders, as encoding.py reads them."""
    import collections

    name, serialize = jax_compat.export_node_serializer(collections.OrderedDict)
    assert name == "collections.OrderedDict" and isinstance(serialize(("a",)), bytes)
    nodetype, deserialize, build = jax_compat.export_node_deserializer(name)
    assert nodetype is collections.OrderedDict
    assert build(deserialize(serialize(("a", "b"))), [1, 2]) == collections.OrderedDict(a=1, b=2)
    assert jax_compat.export_node_serializer(int) is None and jax_compat.export_node_deserializer("no.such") is None
    assert jax_compat.pytree_node_builder(collections.OrderedDict)(("k",), [3]) == collections.OrderedDict(k=3)
    assert jax_compat.pytree_node_builder(int) is None
