"""hlopt.custom_partitioning against jax.jit of JAX's own custom_partitioning, on 8 CPU devices."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import custom_partitioning as jax_cp
from jax.numpy.fft import fft
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import hlopt
from hlopt.compiler.program import parse_module
from hlopt.compiler.stages import Lowered

RNG = np.random.default_rng(0)
COLLECTIVES = re.compile(r"\b(all-gather|dynamic-slice)\b")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def mesh1():
    return Mesh(np.array(jax.devices()[:8]), ("x",))


@pytest.fixture(scope="module")
def mesh2():
    return Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))


def both(fun, partition, static_argnums=(), **kwargs):
    """The same op through hlopt.custom_partitioning and JAX's custom_partitioning."""
    ours = hlopt.custom_partitioning(fun, static_argnums=static_argnums)
    ours.def_partition(partition, **kwargs)
    theirs = jax_cp.custom_partitioning(fun, static_argnums=static_argnums)
    theirs.def_partition(partition, **kwargs)
    return ours, theirs


def named(mesh, *spec):
    return NamedSharding(mesh, P(*spec))


# --- the example of JAX's documentation -------------------------------------------------------


def supported_sharding(sharding, shape):
    rank = len(shape.shape)
    max_shared_dims = min(len(sharding.spec), rank - 1)
    names = tuple(sharding.spec[:max_shared_dims]) + tuple(None for _ in range(rank - max_shared_dims))
    return NamedSharding(sharding.mesh, P(*names))


def fft_partition(mesh, arg_shapes, result_shape):
    arg_shardings = jax.tree.map(lambda x: x.sharding, arg_shapes)
    return mesh, fft, supported_sharding(arg_shardings[0], arg_shapes[0]), (
        supported_sharding(arg_shardings[0], arg_shapes[0]),)


def fft_infer(mesh, arg_shapes, result_shape):
    return supported_sharding(arg_shapes[0].sharding, arg_shapes[0])


@hlopt.custom_partitioning
def my_fft(x):
    return fft(x)


my_fft.def_partition(infer_sharding_from_operands=fft_infer, partition=fft_partition, sharding_rule="...i -> ...i")


def _complex(shape):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)


@pytest.fixture(scope="module")
def fft_lowered(mesh1):
    x = _complex((8 * 64, 64))
    return x, hlopt.lower(my_fft, x, mesh=mesh1, in_shardings=(P("x"),), out_shardings=P("x"))


@pytest.mark.parametrize("target", ["shardy", "gspmd"])
def test_my_fft_2d_has_no_gather(fft_lowered, mesh1, target):
    x, lowered = fft_lowered
    compiled = lowered.compile(f"lower-custom-partitioning{{target={target}}},hlopt-default")
    assert COLLECTIVES.search(compiled.as_text()) is None
    plain = jax.jit(fft, in_shardings=named(mesh1, "x"), out_shardings=named(mesh1, "x"))
    assert COLLECTIVES.search(plain.lower(x).compile().as_text()) is not None
    got = compiled(x)
    assert got.sharding.spec == P("x")
    np.testing.assert_allclose(np.asarray(got), np.asarray(plain(x)), rtol=1e-4, atol=1e-3)


def test_my_fft_1d_gathers_like_jax(mesh1):
    x = _complex((8 * 256,))
    compiled = hlopt.jit(my_fft, mesh=mesh1, in_shardings=(P("x"),), out_shardings=P("x")).lower(x).compile()
    assert COLLECTIVES.search(compiled.as_text()) is not None
    plain = jax.jit(fft, in_shardings=named(mesh1, "x"), out_shardings=named(mesh1, "x"))
    assert COLLECTIVES.search(plain.lower(x).compile().as_text()) is not None
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(plain(x)), rtol=1e-4, atol=1e-3)


def test_pass_output_is_manual_computation(fft_lowered):
    _, lowered = fft_lowered
    text = lowered.apply("lower-custom-partitioning").as_text()
    assert "hlopt.custom_partitioning" not in text and "@my_fft_body(" not in text
    assert 'sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>]' in text
    assert "tensor<64x64xcomplex<f32>>" in text
    gspmd = lowered.apply("lower-custom-partitioning{target=gspmd}").as_text()
    assert "sdy." not in gspmd
    assert gspmd.count("@SPMDFullToShardShape") == 1 and gspmd.count("@SPMDShardToFullShape") == 1
    assert 'mhlo.sharding = "{devices=[8,1]<=[8]}"' in gspmd


# --- a matmul with a reduction factor and a batched op on a 2-axis mesh ------------------------


def _entry(spec, i):
    return spec[i] if len(spec) > i else None


def mm_partition(mesh, arg_shapes, result_shape):
    a, b = arg_shapes
    i_ax, k_ax = _entry(a.sharding.spec, 0), _entry(a.sharding.spec, 1)
    j_ax = _entry(b.sharding.spec, 1)

    def lower_fn(a, b):
        c = a @ b
        return jax.lax.psum(c, k_ax) if k_ax is not None else c

    return mesh, lower_fn, named(mesh, i_ax, j_ax), (named(mesh, i_ax, k_ax), named(mesh, k_ax, j_ax))


def _matmul(a, b):
    return a @ b


mm, jax_mm = both(_matmul, mm_partition, sharding_rule="i k, k j -> i j", reduction_factors=("k",))


def batch_partition(mesh, arg_shapes, result_shape):
    spec = arg_shapes[0].sharding.spec
    keep = named(mesh, _entry(spec, 0), _entry(spec, 1), None)
    return mesh, lambda x: jax.nn.softmax(x, axis=-1), keep, (keep,)


def _softmax(x):
    return jax.nn.softmax(x, axis=-1)


batched_softmax, jax_batched_softmax = both(
    _softmax, batch_partition, sharding_rule="b n d -> b n d", need_replication_factors=("d",))


def _reference(fun, mesh, in_specs, out_spec, *args):
    jitted = jax.jit(fun, in_shardings=tuple(named(mesh, *s) for s in in_specs), out_shardings=named(mesh, *out_spec))
    with jax.set_mesh(mesh):
        return jitted(*args)


@pytest.mark.parametrize("a_spec,b_spec", [(("x", "y"), ()), (("x",), ("y",)), ((None, ("x", "y")), ())])
def test_matmul_with_reduction_factor_matches_jax(mesh2, a_spec, b_spec):
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)
    ours = hlopt.jit(mm, mesh=mesh2, in_shardings=(P(*a_spec), P(*b_spec)))
    want = _reference(jax_mm, mesh2, [a_spec, b_spec], (), a, b)
    np.testing.assert_allclose(np.asarray(ours(a, b)), np.asarray(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(want), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [("x", "y", None), ("y", "x", None), (None, None, "y")])
def test_batched_op_on_two_axes_matches_jax(mesh2, spec):
    x = RNG.standard_normal((4, 8, 16)).astype(np.float32)
    ours = hlopt.jit(batched_softmax, mesh=mesh2, in_shardings=(P(*spec),), out_shardings=P(*spec))
    got = ours(x)
    assert got.sharding.is_equivalent_to(named(mesh2, *spec), x.ndim)
    want = _reference(jax_batched_softmax, mesh2, [spec], spec, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_reshard_inserted_when_partition_asks_for_other_sharding(mesh2):
    x = RNG.standard_normal((4, 8, 16)).astype(np.float32)
    lowered = hlopt.lower(batched_softmax, x, mesh=mesh2, in_shardings=(P(None, None, "y"),))
    text = lowered.apply("lower-custom-partitioning").as_text()
    assert 'sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{}, {}, {}]>]' in text
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)), np.asarray(_softmax(x)), rtol=1e-5, atol=1e-6)


def test_both_targets_compile_to_equal_results(mesh2):
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)
    lowered = hlopt.lower(mm, a, b, mesh=mesh2, in_shardings=(P("x", "y"), P()))
    shardy = lowered.compile("lower-custom-partitioning{target=shardy},hlopt-default")(a, b)
    gspmd = lowered.compile("lower-custom-partitioning{target=gspmd},hlopt-default")(a, b)
    np.testing.assert_array_equal(np.asarray(shardy), np.asarray(gspmd))
    np.testing.assert_allclose(np.asarray(shardy), a @ b, rtol=1e-5, atol=1e-5)


# --- pytrees, static arguments, several operands and results ------------------------------------


def _pair(scale, tree):
    x, y = tree["x"], tree["y"]
    return {"sum": x * scale + y, "diff": (x - y,)}


def pair_partition(scale, mesh, arg_shapes, result_shape):
    first = arg_shapes[0]["x"].sharding
    return (mesh, functools.partial(_pair, scale), jax.tree.map(lambda _: first, result_shape),
            jax.tree.map(lambda _: first, arg_shapes))


pair, jax_pair = both(_pair, pair_partition, static_argnums=(0,), sharding_rule="i j, i j -> i j, i j")


@pytest.mark.parametrize("scale", [2.0, -1.5])
def test_pytrees_and_static_arguments(mesh2, scale):
    tree = {"x": RNG.standard_normal((8, 4)).astype(np.float32), "y": RNG.standard_normal((8, 4)).astype(np.float32)}
    ours = hlopt.jit(lambda t: pair(scale, t), mesh=mesh2, in_shardings=({"x": P("x", "y"), "y": P("x")},))
    lowered = ours.lower(tree)
    assert f'static_args = "({scale!r},)"' in lowered.as_text()
    got = ours(tree)
    with jax.set_mesh(mesh2):
        want = jax.jit(lambda t: jax_pair(scale, t),
                       in_shardings=({"x": named(mesh2, "x", "y"), "y": named(mesh2, "x")},))(tree)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def _rows_partition(mesh, arg_shapes, result_shape):
    rows = named(mesh, _entry(arg_shapes[0].sharding.spec, 0))
    return mesh, _fft, rows, (rows,)


def _fft(x):
    return fft(x)


@pytest.mark.parametrize("rule", [
    jax_cp.SdyShardingRule(operand_mappings=((jax_cp.BATCHING, "i"),), result_mappings=((jax_cp.BATCHING, "i"),)),
    lambda mesh, operand_types, result_types: "b i -> b i",
    lambda mesh, operand_types, result_types: ("b i -> b i", {"need_replication_factors": ("i",)}),
], ids=["SdyShardingRule", "callable", "callable-with-factors"])
def test_sharding_rule_forms(mesh1, rule):
    ours, theirs = both(_fft, _rows_partition, sharding_rule=rule)
    x = _complex((16, 8))
    lowered = hlopt.lower(ours, x, mesh=mesh1, in_shardings=(P("x"),))
    assert "sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=16, j=8}" in lowered.as_text()
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)),
                               np.asarray(_reference(theirs, mesh1, [("x",)], ("x",), x)), rtol=1e-5, atol=1e-5)


def test_result_sharding_from_callbacks_without_a_rule(mesh1):
    seen = []

    def partition(mesh, arg_shapes, result_shape):
        seen.append(result_shape.sharding.spec)
        return fft_partition(mesh, arg_shapes, result_shape)

    def from_user(mesh, user_shape):
        seen.append(("user", user_shape.sharding.spec))
        return named(mesh, "x", None)

    inferred = hlopt.custom_partitioning(_fft)
    inferred.def_partition(partition, infer_sharding_from_operands=fft_infer)
    from_users = hlopt.custom_partitioning(_fft)
    from_users.def_partition(partition, propagate_user_sharding=from_user)
    x = _complex((16, 8))
    for op, out in ((inferred, None), (from_users, P(None, "x"))):
        compiled = hlopt.jit(op, mesh=mesh1, in_shardings=(P("x"),), out_shardings=out).lower(x).compile()
        np.testing.assert_allclose(np.asarray(compiled(x)), np.fft.fft(x), rtol=1e-4, atol=1e-4)
    assert seen == [P("x", None), ("user", P(None, "x")), P("x", None)]


W = np.arange(16, dtype=np.float32).reshape(16, 1) * np.ones((1, 4), np.float32)


def _project(x, scale=2.0):
    return (x @ W) * scale  # W is a constant captured by the body


def project_partition(mesh, arg_shapes, result_shape):
    rows = named(mesh, "x")
    return mesh, _project, rows, (rows, named(mesh))


project = hlopt.custom_partitioning(_project)  # JAX's own asserts on captured constants
project.def_partition(project_partition, sharding_rule="i k, -> i j")


def test_keyword_arguments_defaults_and_captured_constants(mesh1):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    for kwargs in ({}, {"scale": 3.0}):
        got = hlopt.jit(lambda x: project(x, **kwargs), mesh=mesh1, in_shardings=(P("x"),))(x)
        want = (x.astype(np.float64) @ W) * kwargs.get("scale", 2.0)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)


def _apply(fn, x):
    return fn(x)


def apply_partition(fn, mesh, arg_shapes, result_shape):
    rows = named(mesh, _entry(arg_shapes[0].sharding.spec, 0))
    return mesh, fn, rows, (rows,)


apply_static, jax_apply_static = both(_apply, apply_partition, static_argnums=(0,), sharding_rule="i j -> i j")


def test_static_argument_that_is_not_a_literal(mesh1):
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    lowered = hlopt.lower(lambda x: apply_static(jnp.tanh, x), x, mesh=mesh1, in_shardings=(P("x"),))
    assert re.search(r'static_args = "<tuple #\d+>"', lowered.as_text()) and "0x" not in lowered.as_text()
    want = _reference(lambda x: jax_apply_static(jnp.tanh, x), mesh1, [("x",)], (), x)
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)), np.asarray(want), rtol=1e-6)


def test_one_device_and_eager_run_the_function(mesh1):
    x = _complex((16, 8))
    np.testing.assert_allclose(np.asarray(my_fft(x)), np.fft.fft(x), rtol=1e-4, atol=1e-4)
    lowered = hlopt.lower(my_fft, x)
    text = lowered.apply("lower-custom-partitioning").as_text()
    assert "call @my_fft_body(%arg0)" in text and "hlopt.custom_partitioning" not in text
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)), np.fft.fft(x), rtol=1e-4, atol=1e-4)


def test_inside_shard_map_the_body_runs_per_device(mesh1):
    x = _complex((64, 8))
    f = jax.shard_map(my_fft, mesh=mesh1, in_specs=P("x"), out_specs=P("x"))
    lowered = hlopt.lower(f, x, mesh=mesh1, in_shardings=(P("x"),))
    assert "func.call @my_fft_body(%arg1) : (tensor<8x8xcomplex<f32>>)" in lowered.apply(
        "lower-custom-partitioning").as_text()
    np.testing.assert_allclose(np.asarray(lowered.compile()(x)), np.fft.fft(x), rtol=1e-4, atol=1e-4)


def _other_mesh_partition(mesh, arg_shapes, result_shape):
    other = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("a", "b"))
    tiles = named(other, "a", "b")
    return other, lambda x: x * 2, tiles, (tiles,)


other_mesh_op = hlopt.custom_partitioning(lambda x: x * 2)
other_mesh_op.def_partition(_other_mesh_partition, sharding_rule="i j -> i j")


@pytest.mark.parametrize("target", ["shardy", "gspmd"])
def test_partition_may_return_another_mesh_over_the_same_devices(mesh1, target):
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    lowered = hlopt.lower(other_mesh_op, x, mesh=mesh1, in_shardings=(P("x"),), out_shardings=P("x"))
    after = lowered.apply(f"lower-custom-partitioning{{target={target}}}")
    assert ("sdy.mesh @mesh_1 = <[\"a\"=2, \"b\"=4]>" in after.as_text()) == (target == "shardy")
    assert "tensor<4x2xf32>" in after.as_text()
    np.testing.assert_array_equal(np.asarray(after.compile(pipeline="hlopt-default")(x)), x * 2)


def test_several_annotations_in_nested_functions(mesh2):
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)

    @jax.jit
    def inner(a, b):
        return mm(a, b)

    def f(a, b):
        return inner(a, b) + mm(a * 2, b)

    got = hlopt.jit(f, mesh=mesh2, in_shardings=(P("x", "y"), P()))(a, b)
    np.testing.assert_allclose(np.asarray(got), 3 * (a @ b), rtol=1e-5, atol=1e-5)


# --- errors -----------------------------------------------------------------------------------


def _bad(kind):
    def partition(mesh, arg_shapes, result_shape):
        if kind == "raises":
            raise RuntimeError("no plan for this layout")
        if kind == "wrong-shape":
            return mesh, lambda x: x[:1], named(mesh, "x"), (named(mesh, "x"),)
        if kind == "indivisible":
            return mesh, lambda x: x, named(mesh, None, "x"), (named(mesh, None, "x"),)
        return mesh, lambda x: x, named(mesh, "x"), (named(mesh, "x"), named(mesh, "x"))

    op = hlopt.custom_partitioning(lambda x: x * 2)
    op.def_partition(partition, sharding_rule="i j -> i j")
    return op


@pytest.mark.parametrize("kind,message", [
    ("raises", r"partitioner raised RuntimeError: no plan for this layout"),
    ("wrong-shape", r"lower_fn takes \(float32\[2, 6\]\) and returns \(float32\[1, 6\]\) but the shardings "
                    r"from partition need \(float32\[2, 6\]\) -> \(float32\[2, 6\]\)"),
    ("indivisible", r"operand 0 float32\[16, 6\] is not divisible by its sharding"),
    ("count", r"partition returned argument shardings .* that do not match the argument structure"),
])
def test_partitioner_errors_name_function_and_shapes(mesh1, kind, message):
    x = np.ones((16, 6), np.float32)
    lowered = hlopt.lower(_bad(kind), x, mesh=mesh1, in_shardings=(P("x"),))
    with pytest.raises(hlopt.PipelineError, match=message) as info:
        lowered.apply("lower-custom-partitioning")
    assert "test_custom_partitioning:_bad.<locals>.<lambda>" in str(info.value)
    assert 'float32[16, 6] sharded [{"x"}, {}]' in str(info.value)


def test_unresolvable_key_is_a_clear_error():
    text = textwrap.dedent("""
        module {
          func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
            %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32,
              backend_config = {key = "no_such_module_xyz:op", static_args = "()", in_tree = "(0,)",
                                out_tree = "0", mesh = #sdy.mesh<["x"=8]>},
              called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
            return %0 : tensor<8xf32>
          }
          func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
            return %arg0 : tensor<8xf32>
          }
        }""")
    lowered = Lowered(parse_module(text), hlopt.lower(lambda x: x, np.ones(8, np.float32)).signature)
    with pytest.raises(hlopt.PipelineError, match="cannot resolve custom partitioner.*no_such_module_xyz"):
        lowered.apply("lower-custom-partitioning")


def test_plain_jax_jit_runs_and_missing_partition_is_refused(mesh1):
    x = _complex((4, 4))
    np.testing.assert_allclose(jax.jit(my_fft)(x), fft(x), rtol=1e-5, atol=1e-5)
    undefined = hlopt.custom_partitioning(lambda x: x)
    with pytest.raises(ValueError, match="call def_partition"):
        undefined(np.ones(3))


# --- no Python object in the output: portable artifacts and fresh processes --------------------

_TEXT_SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import numpy as np, jax
from jax.sharding import Mesh, PartitionSpec as P
import hlopt, test_custom_partitioning as t
mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
a = np.zeros((8, 16), np.float32); b = np.zeros((16, 4), np.float32)
lowered = hlopt.lower(lambda a, b: (t.mm(a, b), t.my_fft(a.astype(np.complex64))), a, b,
                      mesh=mesh, in_shardings=(P("x", "y"), P()))
print(lowered.apply("lower-custom-partitioning").as_text())
print(lowered.apply("lower-custom-partitioning{{target=gspmd}}").as_text())
"""

_WITHOUT_PARTITIONER = """
import sys
import numpy as np, jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import hlopt
from hlopt.compiler.program import module_to_bytecode
from hlopt.passes.mlir import deserialize_portable_artifact
from hlopt.runtime.pjrt import compile_module
vhlo, hlx, args, artifact_out, file_out = sys.argv[1:]
args = np.load(args)
# the post-pass module, as a portable artifact compiled here
module = deserialize_portable_artifact(open(vhlo, "rb").read())
mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
executable = compile_module(module_to_bytecode(module), list(mesh.devices.flat), use_shardy=True)
a = jax.device_put(args["a"], NamedSharding(mesh, P("x", "y")))
b = jax.device_put(args["b"], NamedSharding(mesh, P()))
out = executable.execute_sharded([a, b]).disassemble_into_single_device_arrays()[0]
result = jax.make_array_from_single_device_arrays((8, 4), NamedSharding(mesh, P("x")), out)
np.save(artifact_out, np.asarray(result))
# the executable file
np.save(file_out, np.asarray(hlopt.load(hlx)(args["a"], args["b"])))
assert not any("test_custom_partitioning" in m for m in sys.modules), "partitioner module was imported"
"""


def _python(script: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_post_pass_text_identical_across_processes(capsys):
    exec(_TEXT_SCRIPT.format(here=HERE), {})  # this process (with every earlier test's state), then a fresh one
    first = capsys.readouterr().out
    second = _python(_TEXT_SCRIPT.format(here=HERE))
    assert "sdy.manual_computation" in first and "@SPMDFullToShardShape" in first
    assert "hlopt.custom_partitioning" not in first and "0x" not in first
    assert first == second


_CACHE_SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import numpy as np, jax
from jax.sharding import Mesh, PartitionSpec as P
import hlopt, test_custom_partitioning as t
from hlopt.runtime.cache import using_cache_dir
with using_cache_dir(sys.argv[1]):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
    a = np.ones((8, 16), np.float32); b = np.ones((16, 4), np.float32)
    out = hlopt.jit(t.mm, mesh=mesh, in_shardings=(P("x", "y"), P()))(a, b)
    assert float(np.asarray(out).sum()) == 8 * 4 * 16
    info = hlopt.cache_info()
print(info.hits, info.misses)
"""


def test_persistent_cache_hits_in_a_new_process(tmp_path, capsys, monkeypatch):
    script = _CACHE_SCRIPT.format(here=HERE)
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path)])
    exec(script, {})  # a miss in this process, then a hit in a fresh one
    assert capsys.readouterr().out.split() == ["0", "1"]
    assert _python(script, str(tmp_path)).split() == ["1", "0"]


def test_artifact_and_file_run_in_a_process_without_the_partitioner(mesh2, tmp_path):
    from hlopt.passes.mlir import serialize_portable_artifact

    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)
    lowered = hlopt.lower(mm, a, b, mesh=mesh2, in_shardings=(P("x", "y"), P()), out_shardings=P("x"))
    after = lowered.apply("hlopt-default")
    (tmp_path / "m.vhlo").write_bytes(serialize_portable_artifact(after.module))
    compiled = hlopt.jit(mm, mesh=mesh2, in_shardings=(P("x", "y"), P())).lower(a, b).compile()
    compiled.save(tmp_path / "mm.hlopt")
    np.savez(tmp_path / "args.npz", a=a, b=b)
    _python(_WITHOUT_PARTITIONER, *(str(tmp_path / n) for n in ("m.vhlo", "mm.hlopt", "args.npz", "a.npy", "f.npy")))
    here = after.compile(pipeline="")(a, b)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.asarray(here))
    np.testing.assert_allclose(np.asarray(here), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.load(tmp_path / "f.npy"), np.asarray(compiled(a, b)))


# --- GSPMD: sharding strings and modules lowered with jax_use_shardy_partitioner off ------------


def mm_infer(mesh, arg_shapes, result_shape):
    a, b = arg_shapes
    return named(mesh, _entry(a.sharding.spec, 0), _entry(b.sharding.spec, 1))


gspmd_mm, jax_gspmd_mm = both(_matmul, mm_partition, infer_sharding_from_operands=mm_infer,
                              sharding_rule="i k, k j -> i j", reduction_factors=("k",))


def test_module_lowered_for_gspmd(mesh2):
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((16, 4)).astype(np.float32)
    in_specs = [("x", "y"), (("y", "x"),)]
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        lowered = hlopt.lower(gspmd_mm, a, b, mesh=mesh2, in_shardings=tuple(P(*s) for s in in_specs))
        want = _reference(jax_gspmd_mm, mesh2, in_specs, (), a, b)
    finally:
        jax.config.update("jax_use_shardy_partitioner", True)
    assert "sdy.mesh @" not in lowered.as_text() and "mhlo.sharding" in lowered.as_text()
    with pytest.raises(hlopt.PipelineError, match=r"GSPMD shardings .* use lower-custom-partitioning\{target=gspmd\}"):
        lowered.apply("lower-custom-partitioning")
    after = lowered.apply("lower-custom-partitioning{target=gspmd}")
    # a's (x, y) tiling is read back from its mhlo.sharding, so partition keeps it and sums over y.
    assert after.as_text().count('mhlo.sharding = "{devices=[2,4]<=[8]}"') == 2
    got = after.compile()(a, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
