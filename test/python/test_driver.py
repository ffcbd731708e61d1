"""hlopt.lower / Lowered / Compiled / hlopt.jit against jax.jit."""

from __future__ import annotations

import concurrent.futures
import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import hlopt
from hlopt.compiler.program import module_to_bytecode, parse_module
from hlopt.compiler.stages import Lowered
from hlopt.passes.mlir import get_context
from hlopt.runtime.cache import stripped_bytecode, using_cache_dir

RNG = np.random.default_rng(0)


def assert_same(got, want):
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, jax.Array)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def _pytree_fn(tree):
    a, (b, c) = tree["a"], tree["bc"]
    return {"sum": a.sum() + b.astype(a.dtype).sum(), "pair": [a * 2, (c, None)], "neg": -b}


@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.int8, np.uint32, np.complex64, np.bool_],
)
def test_dtypes_round_trip(dtype):
    x = (RNG.standard_normal((3, 5)) * 4).astype(dtype)

    def f(x):
        y = x if dtype == np.bool_ else x + x
        return y, jnp.reshape(x, (5, 3)).T

    assert_same(hlopt.lower(f, x).compile()(x), jax.jit(f)(x))


def test_pytrees_in_and_out():
    tree = {
        "a": RNG.standard_normal((4,)).astype(np.float32),
        "bc": (np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2,), np.float32)),
    }
    compiled = hlopt.lower(_pytree_fn, tree).compile()
    assert_same(compiled(tree), jax.jit(_pytree_fn)(tree))


def test_scalars_python_and_numpy():
    def f(x, s, t):
        return x * s + t, s

    x = np.arange(4, dtype=np.float32)
    compiled = hlopt.lower(f, x, np.float32(2.5), 3.0).compile()
    assert_same(compiled(x, np.float32(2.5), 3.0), jax.jit(f)(x, np.float32(2.5), 3.0))
    assert_same(compiled(x, np.float32(-1), 0.5), jax.jit(f)(x, np.float32(-1), 0.5))


def test_static_arguments():
    def f(x, n, mode):
        y = x ** n
        return y.sum() if mode == "sum" else y.max()

    x = RNG.standard_normal((6,)).astype(np.float32)
    lowered = hlopt.lower(f, x, 3, "sum", static_argnums=(1, 2))
    compiled = lowered.compile()
    want = jax.jit(f, static_argnums=(1, 2))(x, 3, "sum")
    assert_same(compiled(x, 3, "sum"), want)
    assert_same(compiled(x), want)  # static arguments may be left out, as in jax's AOT API
    with pytest.raises(ValueError, match="static argument 1 is 4"):
        compiled(x, 4, "sum")


def test_calls_other_jitted_functions():
    @jax.jit
    def inner(x):
        return jnp.tanh(x) * 2

    @functools.partial(jax.jit, static_argnums=1)
    def middle(x, k):
        return inner(x) + k

    def f(x):
        return middle(inner(x), 1) + middle(x, 2)

    x = RNG.standard_normal((3, 3)).astype(np.float32)
    lowered = hlopt.lower(f, x)
    assert "call @" in lowered.as_text()
    np.testing.assert_allclose(lowered.compile()(x), jax.jit(f)(x), rtol=1e-6)
    inlined = lowered.apply("inline,symbol-dce")
    assert "call @" not in inlined.as_text()
    np.testing.assert_allclose(inlined.compile(pipeline="")(x), jax.jit(f)(x), rtol=1e-6)


def test_lower_from_shape_dtype_structs():
    def f(x, y):
        return x @ y

    spec = (jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((3, 4), jnp.float32))
    compiled = hlopt.lower(f, *spec).compile()
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    y = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(compiled(x, y), x @ y, rtol=1e-5)


def test_unused_arguments_are_kept():
    def f(x, unused):
        return x + 1

    x = np.ones(3, np.float32)
    assert_same(hlopt.lower(f, x, x).compile()(x, x), jax.jit(f)(x, x))


def test_wrong_arguments_are_refused():
    compiled = hlopt.lower(lambda x, y: x + y, np.ones(3, np.float32), np.ones(3, np.float32)).compile()
    with pytest.raises(TypeError, match=r"argument 1 is float32\[4\] but .* float32\[3\]"):
        compiled(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"argument 0 is int32\[3\]"):
        compiled(np.ones(3, np.int32), np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"^<lambda>: argument x is one array, but x\[0\] was given"):
        compiled((np.ones(3, np.float32),), np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"^<lambda>: argument y is one array, but no array was given"):
        compiled(np.ones(3, np.float32), None)


def test_apply_returns_new_object_and_keeps_original():
    def f(x):
        return jnp.sin(x) * 1.0 + jnp.sin(x) * 1.0

    lowered = hlopt.lower(f, np.ones(4, np.float32))
    before = lowered.as_text()
    after = lowered.apply("canonicalize,cse", print_ir_after_all=True)
    assert after is not lowered and lowered.as_text() == before
    assert before.count("stablehlo.sine") == 2 and after.as_text().count("stablehlo.sine") == 1
    assert [name for name, _ in after.ir_after_passes] == ["canonicalize", "cse"]
    assert after.ir_after_passes[-1][1].strip() == after.as_text().strip()
    assert after.pipeline == "canonicalize,cse"


def test_collect_ir_keeps_the_ir_after_each_pass_without_printing(capfd):
    lowered = hlopt.lower(lambda x: jnp.sin(x) * 1.0 + jnp.sin(x) * 1.0, np.ones(4, np.float32))
    collected = lowered.apply("canonicalize,cse", collect_ir=True)
    assert capfd.readouterr().err == ""
    assert [name for name, _ in collected.ir_after_passes] == ["canonicalize", "cse"]
    assert collected.ir_after_passes[0][1].count("stablehlo.sine") == 2  # cse has not run yet
    assert collected.ir_after_passes[1][1].strip() == collected.as_text().strip()
    assert lowered.apply("canonicalize,cse").ir_after_passes == []


def _lazy_and_moved(f, *args, **options):
    """`hlopt.lower(f, *args)` (JAX's module, not yet moved) and a twin built from the module in hlopt's context."""
    lazy = hlopt.lower(f, *args, **options)
    moved = Lowered(parse_module(module_to_bytecode(lazy.source_module)), lazy.signature, backend=lazy.backend)
    return lazy, moved


@pytest.mark.parametrize("case", ["pytree", "keys", "static"])
def test_lazily_moved_module_prints_applies_and_compiles_the_same(case):
    """hlopt.lower keeps JAX's module until something needs it in hlopt's context; nothing can tell."""
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    options = {}
    if case == "pytree":
        f, args = _pytree_fn, ({"a": x, "bc": (np.arange(4, dtype=np.int32), x[0])},)
    elif case == "keys":
        f, args = (lambda k, y: jax.random.normal(k, y.shape) + y), (jax.random.key(3), x)
    else:
        f, args, options = (lambda y, n: jnp.tanh(y) ** n), (x, 3), {"static_argnums": 1}
    lazy, moved = _lazy_and_moved(f, *args, **options)
    assert lazy.source_module.context != get_context()  # not moved yet: JAX's context
    assert stripped_bytecode(lazy.source_module) == stripped_bytecode(moved.module)  # the cache key's bytes
    assert lazy.as_text(debug_info=True) == moved.as_text(debug_info=True) and str(lazy) == str(moved)
    assert lazy.source_module.context == get_context() and lazy.module is lazy.module  # moved once, then kept
    lazy2, moved2 = _lazy_and_moved(f, *args, **options)
    assert lazy2.apply("hlopt-default,cse").as_text() == moved2.apply("hlopt-default,cse").as_text()
    lazy3, _ = _lazy_and_moved(f, *args, **options)
    assert_same(lazy3.compile()(*args), moved.compile()(*args))
    assert_same(lazy3.compile()(*args), jax.jit(f, **options)(*args))


def test_module_moves_once_under_threads():
    lowered = hlopt.lower(lambda x: jnp.sin(x) @ x.T, np.ones((4, 4), np.float32))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        modules = list(pool.map(lambda _: lowered.module, range(8)))
    assert all(m is modules[0] for m in modules) and modules[0].context == get_context()


def test_debug_locations_name_user_source():
    lowered = hlopt.lower(lambda x: jnp.exp(x), np.ones(2, np.float32))
    assert "test_driver.py" in lowered.as_text(debug_info=True)


@pytest.mark.parametrize("static_argnums", [1, -1], ids=["C++ dispatch", "python path"])
def test_jit_caches_per_signature(static_argnums, tmp_path):
    calls = []

    def f(x, n):
        calls.append(1)  # counts traces
        return x * n

    g = hlopt.jit(f, static_argnums=static_argnums)
    x3, x4 = np.ones(3, np.float32), np.ones(4, np.float32)
    with using_cache_dir(tmp_path):
        assert_same(g(x3, 2), jax.jit(f, static_argnums=1)(x3, 2))
        traces = len(calls)
        g(x3 + 1, 2)
        info = hlopt.cache_info()  # each program compiled is a hit or a miss of the compilation cache
        assert len(calls) == traces and info.hits + info.misses == 1
        g(x4, 2)
        g(x3, 5)
        g(x3.astype(np.int32), 2)
        info = hlopt.cache_info()
        assert info.hits + info.misses == 4
    assert isinstance(g.lower(x3, 2), Lowered)


def test_jit_inlines_when_traced():
    g = hlopt.jit(lambda x: x * 3)
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(lambda x: g(x) + 1)(x), x * 3 + 1)
    np.testing.assert_array_equal(jax.grad(lambda x: g(x).sum())(x), np.full(3, 3, np.float32))


ANNOTATED = """
func.func @main(%d: tensor<4xf32>, %i: tensor<4x1xi32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%d, %i) {api_version = 4 : i32,
      backend_config = {shape = array<i64: 8>, n_batch = 0 : i64, n_dense = 0 : i64}}
      : (tensor<4xf32>, tensor<4x1xi32>) -> tensor<8xf32> loc("model.py":12:3)
  return %0 : tensor<8xf32>
}
"""


def test_annotation_refused_before_pjrt_naming_the_pass():
    sig = hlopt.lower(lambda d, i: d, np.ones(4, np.float32), np.ones((4, 1), np.int32)).signature
    lowered = Lowered(parse_module(ANNOTATED), sig)
    with pytest.raises(hlopt.AnnotationError, match=r"model.py:12:3: error: custom_call @hlopt.bcoo.todense .*'lower-bcoo'"):
        lowered.compile(pipeline="canonicalize")


def test_annotation_primitive_outside_hlopt():
    from hlopt.primitives import annotation_primitive, emit_annotation, result_types

    prim = annotation_primitive(
        "hlopt_test_double",
        lambda x: [x],
        lambda ctx, x: emit_annotation("hlopt.test.double", [x], result_types(ctx), {"k": 2}),
    )
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="custom_call @hlopt.test.double is an hlopt annotation that no pass"):
        jax.jit(lambda x: prim.bind(x)[0])(x)
    text = hlopt.lower(lambda x: prim.bind(x)[0], x).as_text()
    assert "stablehlo.custom_call @hlopt.test.double" in text
    assert "api_version = 4" in text and "backend_config = {k = 2 : i64}" in text


def test_typed_prng_keys_in_and_out():
    def f(key, x):
        k1, k2 = jax.random.split(key)
        return jax.random.normal(k1, x.shape) + x, k2

    key = jax.random.key(7)
    x = np.zeros(3, np.float32)
    g = hlopt.jit(f)
    got, want = g(key, x), jax.jit(f)(key, x)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].dtype == want[1].dtype
    np.testing.assert_array_equal(jax.random.key_data(got[1]), jax.random.key_data(want[1]))


def test_typed_prng_keys_sharded():
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((8,), ("x",))
    keys = jax.random.split(jax.random.key(3), 8)
    g = hlopt.jit(lambda ks: jax.vmap(jax.random.split)(ks), mesh=mesh, in_shardings=(P("x"),))
    got = g(keys)
    assert got.shape == (8, 2) and len(got.sharding.device_set) == 8
    np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(jax.vmap(jax.random.split)(keys)))
