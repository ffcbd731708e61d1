"""Calls replayed by jaxlib's C++ dispatch give what the Python path and jax.jit give."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import hlopt
from hlopt.runtime.executable import Compiled

RNG = np.random.default_rng(7)


@pytest.fixture
def python_calls(monkeypatch):
    """Counts the calls that went through Python (`Compiled.call_flat`), not C++."""
    count = [0]
    call_flat = Compiled.call_flat

    def counting(self, leaves):
        count[0] += 1
        return call_flat(self, leaves)

    monkeypatch.setattr(Compiled, "call_flat", counting)
    return count


def assert_same(got, want):
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, jax.Array) and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def tree_fn(tree, scale):
    a, (b, c) = tree["a"], tree["bc"]
    return {"sum": (a * scale).sum() + b.sum(), "pair": [a - c, (b, None)]}


def test_replayed_calls_match_jax_and_skip_python(python_calls):
    f, ref = hlopt.jit(tree_fn), jax.jit(tree_fn)
    for step in range(4):  # new values each time: outputs are computed, never cached
        tree = {"a": RNG.standard_normal((5,)).astype(np.float32),
                "bc": (jnp.arange(3 * step, 3 * step + 3, dtype=jnp.int32), np.float32(step))}
        assert_same(f(tree, 2.5), ref(tree, 2.5))
    assert python_calls[0] == 1  # numpy, jax and scalar leaves alike: one miss, three replays


def test_each_new_signature_goes_through_python_once(python_calls):
    f = hlopt.jit(lambda x, n: jnp.tile(x, n), static_argnums=1)
    x32, x64 = np.ones((2,), np.float32), np.ones((3,), np.float32)
    for _ in range(2):
        assert_same(f(x32, 2), jnp.tile(x32, 2))
        assert_same(f(x32, 3), jnp.tile(x32, 3))  # another static value
        assert_same(f(x64, 2), jnp.tile(x64, 2))  # another shape
    assert python_calls[0] == 3


def test_weak_typed_scalars_are_their_own_signature(python_calls):
    f = hlopt.jit(lambda x, s: x * s)
    x = np.arange(4, dtype=np.float32)
    for s in (2.0, 3.0, np.float32(4.0), np.float32(5.0)):
        assert_same(f(x, s), jax.jit(lambda x, s: x * s)(x, s))
    assert python_calls[0] == 2  # Python float (weak) and numpy float32


def test_compiled_replays_and_still_rejects_wrong_arguments(python_calls):
    compiled = hlopt.lower(tree_fn, {"a": np.ones(5, np.float32), "bc": (np.ones(3, np.int32), np.float32(0))},
                           2.0).compile()
    tree = {"a": RNG.standard_normal((5,)).astype(np.float32), "bc": (np.arange(3, dtype=np.int32), np.float32(1))}
    for _ in range(3):
        assert_same(compiled(tree, 2.0), jax.jit(tree_fn)(tree, 2.0))
    assert python_calls[0] == 1
    with pytest.raises(TypeError, match=r"argument 0 is float32\[6\] but the program was compiled for float32\[5\]"):
        compiled({"a": np.ones(6, np.float32), "bc": tree["bc"]}, 2.0)


def test_sharded_replay_keeps_shardings_and_reshards_inputs(python_calls):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)  # a @ b leaves its sharding to XLA
    spec = (P("x", "y"), P("y", None))
    g = lambda a, b: {"act": jnp.tanh(a @ b), "rowsum": a.sum(axis=1)}
    f = hlopt.jit(g, mesh=mesh, in_shardings=spec, out_shardings={"act": P("x"), "rowsum": P("x")})
    ref = jax.jit(g, in_shardings=tuple(NamedSharding(mesh, s) for s in spec),
                  out_shardings={"act": NamedSharding(mesh, P("x")), "rowsum": NamedSharding(mesh, P("x"))})
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 4)).astype(np.float32)
    placed = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip((a, b), spec)]
    want = ref(a, b)
    for args in ((a, b), placed, placed, (a, b)):
        got = f(*args)
        np.testing.assert_allclose(np.asarray(got["act"]), np.asarray(want["act"]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(got["rowsum"]), np.asarray(want["rowsum"]), rtol=1e-6)
        assert got["act"].sharding.is_equivalent_to(want["act"].sharding, 2)
    assert python_calls[0] == 2  # host arrays and placed arrays are two signatures


def test_typed_keys_are_replayed_from_cpp(python_calls):
    # The C++ dispatch flattens a typed key to its uint32 words (jax's dispatch registry), which is
    # what the program takes; the key it returns is rebuilt the same way.
    body = lambda k, x: (jax.random.split(k)[0], x + jax.random.normal(k, x.shape))  # noqa: E731
    f, ref = hlopt.jit(body), jax.jit(body)
    key, want_key, x = jax.random.key(0), jax.random.key(0), np.zeros((3,), np.float32)
    for _ in range(3):
        (key, y), (want_key, want_y) = f(key, x), ref(want_key, x)
        assert key.dtype == want_key.dtype and isinstance(key, type(want_key))
        assert jnp.array_equal(jax.random.key_data(key), jax.random.key_data(want_key))
        np.testing.assert_allclose(np.asarray(y), np.asarray(want_y), rtol=1e-6)
    assert python_calls[0] == 1
    rbg = jax.random.key(1, impl="rbg")  # another implementation: another key shape, another signature
    assert jnp.array_equal(jax.random.key_data(f(rbg, x)[0]), jax.random.key_data(ref(rbg, x)[0]))
    assert python_calls[0] == 2


def test_sharded_typed_keys_are_replayed_from_cpp(python_calls):
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    keys = jax.device_put(jax.random.split(jax.random.key(3), 8), NamedSharding(mesh, P("x")))
    body = lambda k, x: (jax.vmap(lambda k: jax.random.split(k)[0])(k), x * 2)  # noqa: E731
    f, ref = hlopt.jit(body), jax.jit(body)
    x = jnp.ones(3)
    for step in range(4):
        (keys, _), (want, _) = f(keys, x), ref(keys, x)
        assert keys.aval == want.aval and keys.sharding.is_equivalent_to(want.sharding, keys.ndim)
        assert jnp.array_equal(jax.random.key_data(keys), jax.random.key_data(want))
        if step == 1:  # device_put's keys, then hlopt's own (their words' spec unpadded): two signatures
            assert python_calls[0] == 2
    assert python_calls[0] == 2


def test_traced_calls_stay_in_python():
    double = hlopt.jit(lambda x: x * 2)
    assert_same(jax.vmap(double)(jnp.ones((2, 3))), jnp.full((2, 3), 2.0))
    assert_same(jax.jit(double)(jnp.ones(3)), jnp.full(3, 2.0))


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_outputs_carry_the_types_jax_gives_them(axis_type):
    # Under explicit axes the sharding is part of an array's type (float32[8@x,2]).
    mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
    a = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, P("x")))
    f, ref = hlopt.jit(lambda a: (a * 2, a.sum(0))), jax.jit(lambda a: (a * 2, a.sum(0)))
    for _ in range(2):  # the Python path, then the C++ one
        got, want = f(a), ref(a)
        for g, w in zip(got, want):
            assert g.aval == w.aval and str(g.aval) == str(w.aval)
            assert g.sharding.is_equivalent_to(w.sharding, g.ndim)
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
