"""One SPMD program over an 8-device mesh, with Shardy and with GSPMD."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import hlopt
from hlopt.runtime.cache import using_cache_dir

RNG = np.random.default_rng(1)


def f(a, b):
    return {"act": jnp.tanh(a @ b), "rowsum": (a * 2).sum(axis=1)}


def test_eight_devices_are_present():
    assert len(jax.devices()) == 8


@pytest.mark.parametrize("mesh_shape,in_specs,out_specs", [
    ((4, 2), (P("x", "y"), P("y", None)), {"act": P("x"), "rowsum": P("x")}),
    ((8,), (P("x"), P()), {"act": P("x"), "rowsum": P()}),
    ((2, 4), (P(None, "y"), P("y", "x")), None),
])
def test_sharded_matches_jax_jit(partitioner, mesh_shape, in_specs, out_specs):
    axes = ("x", "y")[: len(mesh_shape)]
    # Auto axes: XLA chooses what in_shardings leave open, as for jax.jit on host arrays
    # (Explicit axes type the arguments: test_jit_contract.py)
    mesh = jax.make_mesh(mesh_shape, axes, axis_types=(AxisType.Auto,) * len(axes))
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 8)).astype(np.float32)
    lowered = hlopt.lower(f, a, b, mesh=mesh, in_shardings=in_specs, out_shardings=out_specs)
    assert ("sdy.mesh" in lowered.as_text()) == partitioner
    assert ("mhlo.sharding" in lowered.as_text()) == (not partitioner)
    compiled = lowered.compile()
    got = compiled(a, b)

    named = lambda tree: jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), tree,
                                                is_leaf=lambda s: isinstance(s, P))
    kwargs = {"in_shardings": named(in_specs)}
    if out_specs is not None:
        kwargs["out_shardings"] = named(out_specs)
    want = jax.jit(f, **kwargs)(a, b)
    for key in ("act", "rowsum"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)
        assert got[key].sharding.is_equivalent_to(want[key].sharding, got[key].ndim)
        assert len(got[key].sharding.device_set) == 8

    hlo = compiled.as_text()
    # the partitioned program works on per-device shapes
    per_device_a = [16 // (mesh_shape[axes.index(s)] if s else 1) if i == 0 else
                    8 // (mesh_shape[axes.index(s)] if s else 1)
                    for i, s in enumerate(tuple(in_specs[0]) + (None,) * (2 - len(in_specs[0])))]
    assert f"f32[{per_device_a[0]},{per_device_a[1]}]" in hlo


def test_host_inputs_are_placed_and_committed_ones_must_match(partitioner):
    mesh = jax.make_mesh((8,), ("x",))
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 8)).astype(np.float32)
    compiled = hlopt.lower(f, a, b, mesh=mesh, in_shardings=(P("x"), P())).compile()
    np.testing.assert_allclose(compiled(a, b)["act"], np.tanh(a @ b), rtol=1e-5, atol=1e-5)
    # a committed array placed otherwise is refused, as by jax.jit's compiled object
    a_dev = jax.device_put(a, NamedSharding(mesh, P(None, "x")))
    with pytest.raises(ValueError, match=r"argument 0 is committed to devices \[0, .*7\] as P\(None, 'x'\) but the "
                                         r"program runs on devices \[0, .*7\] as P\('x',?\)"):
        compiled(a_dev, b)
    ref = jax.jit(f, in_shardings=(NamedSharding(mesh, P("x")), NamedSharding(mesh, P()))).lower(a, b).compile()
    with pytest.raises(ValueError, match="compiled for input shardings that disagree"):
        ref(a_dev, b)


def test_collectives_appear_in_partitioned_hlo():
    mesh = jax.make_mesh((8,), ("x",))
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    compiled = hlopt.lower(lambda a: a.sum(), a, mesh=mesh, in_shardings=(P("x"),)).compile()
    assert "all-reduce" in compiled.as_text()
    np.testing.assert_allclose(compiled(a), a.sum(), rtol=1e-5)


def test_jit_with_mesh_caches_and_shards(tmp_path):
    mesh = jax.make_mesh((8,), ("x",))
    g = hlopt.jit(f, mesh=mesh, in_shardings=(P("x"), P()), out_shardings={"act": P("x"), "rowsum": P("x")})
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 8)).astype(np.float32)
    with using_cache_dir(tmp_path):
        for _ in range(2):
            got = g(a, b)
        info = hlopt.cache_info()
    assert info.hits + info.misses == 1  # one program compiled (a hit or a miss of the compilation cache)
    assert got["act"].sharding.spec == P("x") and got["rowsum"].sharding.spec == P("x")
    np.testing.assert_allclose(got["act"], np.tanh(a @ b), rtol=1e-5, atol=1e-5)
