"""PJRT compiles hlopt's programs without debug locations (runtime/compile.py).

The executable's HLO then carries no op metadata (jax.jit's does: the check
can fail), on every path that compiles: `Lowered.compile`, `hlopt.jit`, a
cache miss and the hit that follows, a file loaded under its key and one
recompiled with trust="portable". The StableHLO module keeps its locations,
results equal jax.jit's, and a file whose executable still carries metadata
(as files written before this change do) loads as it is.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.compiler.program import module_to_bytecode
from hlopt.runtime import cache as cache_mod
from hlopt.runtime.compile import program_devices
from hlopt.runtime.executable import Compiled
from hlopt.runtime.pjrt import BuildFlags, compile_with_options

RNG = np.random.default_rng(29)
METADATA = ("op_name=", "stack_frame_id=", "source_file=")


def matmul(x, w):
    return jnp.tanh(x @ w) * 0.5 + jnp.sin(x), (x * w).sum()


def chain(x, w):
    for i in range(6):
        x = jnp.sin(x) * (1.0 + i) + jnp.cos(x * w)
    return {"sum": x.sum(), "x": x}


def reduce_int(x, w):
    return jnp.cumsum(x.astype(jnp.int32), axis=0) % 5, jnp.argmax(w, axis=1)


FUNCTIONS = {"matmul": matmul, "chain": chain, "reduce_int": reduce_int}


def args_for(name):
    n = {"matmul": 4, "chain": 5, "reduce_int": 3}[name]
    return RNG.standard_normal((n, n)).astype(np.float32) * 3, RNG.standard_normal((n, n)).astype(np.float32)


def assert_no_metadata(compiled: hlopt.Compiled) -> None:
    text = compiled.as_text()
    assert text.startswith("HloModule")
    assert not [m for m in METADATA if m in text], text[:2000]


def assert_same(got, want):
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_executable_has_no_op_metadata_and_the_module_keeps_locations(name):
    fun, args = FUNCTIONS[name], args_for(name)
    reference = jax.jit(fun).lower(*args).compile()
    assert "op_name=" in reference.as_text()  # XLA keeps metadata when the module has locations
    compiled = hlopt.lower(fun, *args).compile()
    assert_no_metadata(compiled)
    assert __file__.split("/")[-1] in compiled.module.operation.get_asm(enable_debug_info=True)
    assert_same(compiled(*args), reference(*args))


def test_every_compiling_path_drops_the_metadata(tmp_path, monkeypatch):
    args = args_for("chain")
    want = jax.jit(chain)(*args)
    with cache_mod.using_cache_dir(tmp_path / "cache"):
        miss = hlopt.lower(chain, *args).compile()
        hit = hlopt.lower(chain, *args).compile()
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 1)
    assert_same(hlopt.jit(chain)(*args), want)
    monkeypatch.setenv("HLOPT_KEY", "key A " * 8)
    data = hlopt.lower(chain, *args).compile().serialize()
    signed = hlopt.deserialize(data)
    monkeypatch.setenv("HLOPT_KEY", "key B " * 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hlopt.RecompileWarning)
        portable = hlopt.deserialize(data, trust="portable")
    for compiled in (miss, hit, signed, portable):
        assert_no_metadata(compiled)
        assert_same(compiled(*args), want)


def with_located_executable(compiled: hlopt.Compiled) -> hlopt.Compiled:
    """`compiled` with its executable compiled from the module as it is, locations and all (as before)."""
    devices = program_devices(compiled.signature)
    flags = BuildFlags.of(compiled.module, compiled.signature.use_shardy)
    executable = compile_with_options(module_to_bytecode(compiled.module), devices, flags.options(devices))
    return Compiled(executable, compiled.signature, compiled.module, compiled.pipeline)


def test_file_whose_executable_has_metadata_loads_as_it_is(tmp_path):
    args = args_for("matmul")
    old = with_located_executable(hlopt.lower(matmul, *args).compile())
    assert "op_name=" in old.as_text()
    path = tmp_path / "old.hlx"
    old.save(path)
    for loaded in (hlopt.load(path), hlopt.deserialize(old.serialize())):
        assert "op_name=" in loaded.as_text()  # its own executable, not a recompiled one
        assert_same(loaded(*args), jax.jit(matmul)(*args))
