"""The persistent compilation cache: keys, hits, damaged entries, eviction, concurrent processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.compiler.program import module_to_bytecode
from hlopt.runtime import cache as cache_mod
from hlopt.runtime.pjrt import compile_options, get_client

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def f(x):
    return jnp.tanh(x) @ x.T + 1


@pytest.fixture
def cache_dir(tmp_path):
    with cache_mod.using_cache_dir(tmp_path / "cache"):
        yield tmp_path / "cache"


def entries(directory) -> list:
    return sorted(p for p in directory.iterdir() if p.suffix == ".hlx")


def test_second_compile_is_a_hit(cache_dir):
    first = hlopt.lower(f, X).compile()
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 1)
    second = hlopt.lower(f, X).compile()
    info = hlopt.cache_info()
    assert (info.hits, info.misses, info.entries) == (1, 1, 1)
    assert info.directory == str(cache_dir) and info.size_bytes == entries(cache_dir)[0].stat().st_size
    np.testing.assert_array_equal(second(X), first(X))
    np.testing.assert_allclose(second(X), jax.jit(f)(X), rtol=1e-6)


def test_hlopt_jit_uses_the_cache(cache_dir):
    hlopt.jit(f)(X)
    np.testing.assert_allclose(hlopt.jit(f)(X), jax.jit(f)(X), rtol=1e-6)
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 1)


def test_unwritable_cache_warns_and_still_compiles(cache_dir, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", full_disk)
    with pytest.warns(UserWarning, match="cannot write to the compilation cache .*No space left"):
        compiled = hlopt.lower(f, X).compile()
    np.testing.assert_allclose(compiled(X), jax.jit(f)(X), rtol=1e-6)
    assert entries(cache_dir) == []


def test_key_ignores_locations_but_not_the_program():
    make = lambda: (lambda x: jnp.tanh(x) @ x.T + 1)  # noqa: E731 - same program, another source line
    g = make()
    client = get_client()
    options = compile_options(1, [0], True)

    def key(fun, x=X, opts=options):
        lowered = hlopt.lower(fun, x).apply("hlopt-default")
        return cache_mod.cache_key(module_to_bytecode(lowered.module), opts, client)

    assert "loc(" in hlopt.lower(f, X).as_text(debug_info=True)
    assert key(g) == key(make())
    assert key(f) == key(f)
    assert key(f) != key(f, X[:2])
    assert key(f) != key(f, opts=compile_options(1, [1], True))
    assert key(f) != key(f, opts=compile_options(1, [0], False))


def test_damaged_entry_is_a_miss_and_is_replaced(cache_dir):
    want = hlopt.lower(f, X).compile()(X)
    (entry,) = entries(cache_dir)
    good = entry.read_bytes()
    for damage in (good[: len(good) // 2], good[:-1] + bytes([good[-1] ^ 1]), b"", b"garbage" * 10):
        entry.write_bytes(damage)
        got = hlopt.lower(f, X).compile()(X)
        np.testing.assert_array_equal(got, want)
        assert cache_mod.active_cache().get(entry.stem) is not None  # replaced by a valid entry
    info = hlopt.cache_info()
    assert (info.hits, info.misses, info.entries) == (0, 5, 1)
    hlopt.lower(f, X).compile()
    assert hlopt.cache_info().hits == 1


def test_entry_under_the_wrong_name_is_a_miss(cache_dir):
    hlopt.lower(f, X).compile()
    hlopt.lower(lambda x: x * 3, X).compile()
    a, b = entries(cache_dir)
    a.write_bytes(b.read_bytes())  # b's executable under a's key
    before = hlopt.cache_info().misses
    c = cache_mod.active_cache()
    assert c.get(a.stem) is None
    assert c.get(b.stem) is not None
    assert hlopt.cache_info().misses == before


def test_lru_eviction_keeps_recent_entries(tmp_path):
    c = cache_mod.CompilationCache(tmp_path, max_bytes=3 * 1400)
    for i, key in enumerate("abc"):
        c.put(key, bytes(1000))
        os.utime(c.path(key), (time.time() - 100 + i, time.time() - 100 + i))
    assert c.get("a") is not None  # a becomes the most recently used
    c.put("d", bytes(1000))
    assert sorted(p.stem for p in tmp_path.glob("*.hlx")) == ["a", "c", "d"]
    assert c.info().size_bytes <= 3 * 1400
    c.put("e", bytes(5000))  # larger than the limit: it stays, everything older goes
    assert [p.stem for p in tmp_path.glob("*.hlx")] == ["e"]


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_mod.CompilationCache("~/hlopt-cache").directory == tmp_path / "hlopt-cache"
    assert (tmp_path / "hlopt-cache").is_dir()


def test_stale_temporary_files_are_removed(tmp_path):
    c = cache_mod.CompilationCache(tmp_path)
    stale, fresh = tmp_path / ".tmp-old.hlx", tmp_path / ".tmp-new.hlx"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    c.put("k", b"data")
    assert not stale.exists() and fresh.exists()
    assert c.info().entries == 1


def test_cache_off_and_bad_limit(tmp_path):
    with cache_mod.using_cache_dir(None):
        hlopt.lower(f, X).compile()
        assert hlopt.cache_info() == hlopt.CacheInfo(None, 0, 0, 0, 0, 0)
        with pytest.raises(ValueError, match="size limit must be positive"):
            hlopt.set_cache_dir(tmp_path, max_bytes=0)


def test_environment_variable_names_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache_mod.ENV_DIR, str(tmp_path / "env-cache"))
    monkeypatch.setenv(cache_mod.ENV_MAX_BYTES, "12345")
    with cache_mod.using_cache_dir(None):
        cache_mod._state["configured"] = False  # as in a process that never called set_cache_dir
        info = hlopt.cache_info()
    assert info.directory == str(tmp_path / "env-cache") and info.max_bytes == 12345
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(cache_mod.ENV_DIR, str(tmp_path / "a-file" / "cache"))
    with cache_mod.using_cache_dir(None):
        cache_mod._state["configured"] = False
        with pytest.warns(UserWarning, match="HLOPT_CACHE_DIR/HLOPT_CACHE_MAX_BYTES unusable"):
            assert cache_mod.active_cache() is None


WORKER = r"""
import json, sys, time
import jax.numpy as jnp, numpy as np, hlopt
while time.time() < float(sys.argv[1]):
    time.sleep(0.01)
def f(x):
    y = x
    for i in range(40):
        y = jnp.sin(y) * (i + 1) + jnp.cos(y @ y.T @ y) / 100
    return y
out = hlopt.lower(f, np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)).compile()(
    np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4))
info = hlopt.cache_info()
print(json.dumps({"out": np.asarray(out).tolist(), "hits": info.hits, "misses": info.misses}))
"""


def run_workers(n, cache_dir, start_in=4.0):
    env = dict(os.environ, HLOPT_CACHE_DIR=str(cache_dir), JAX_PLATFORMS="cpu")
    start = str(time.time() + start_in)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, start], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_concurrent_processes_share_one_entry(tmp_path):
    cache_dir = tmp_path / "shared"
    results = run_workers(4, cache_dir)
    assert all(r["hits"] + r["misses"] == 1 for r in results)
    assert all(r["out"] == results[0]["out"] for r in results)
    assert len(entries(cache_dir)) == 1
    assert [p.name for p in cache_dir.iterdir()] == [entries(cache_dir)[0].name]  # no temporary files left
    (entry,) = entries(cache_dir)
    entry.write_bytes(entry.read_bytes()[:100])  # corrupt: the next process recompiles and replaces it
    (again,) = run_workers(1, cache_dir, start_in=0)
    assert (again["hits"], again["misses"]) == (0, 1)
    assert again["out"] == results[0]["out"]
    assert entry.stat().st_size > 100
    (last,) = run_workers(1, cache_dir, start_in=0)
    assert (last["hits"], last["misses"]) == (1, 0)


def test_custom_partitioning_hits_across_processes_where_jax_misses(tmp_path):
    """JAX's key holds the partitioner's address; hlopt's annotation names it by a stable key."""
    worker = str(Path(__file__).parent / "cache_cp_worker.py")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}

    def run(*argv, **extra):
        proc = subprocess.run([sys.executable, worker, *argv], env=dict(env, **extra), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    ours = [run(HLOPT_CACHE_DIR=str(tmp_path / "hlopt")) for _ in range(2)]
    assert [(r["hits"], r["misses"]) for r in ours] == [(0, 1), (1, 0)]
    assert len(entries(tmp_path / "hlopt")) == 1
    theirs = [run("jax", str(tmp_path / "jax")) for _ in range(2)]
    assert len(list((tmp_path / "jax").iterdir())) == 2  # a second entry: JAX's cache missed
    want = np.sin(np.arange(8, dtype=np.float32)) * 2
    for r in ours + theirs:
        np.testing.assert_allclose(r["out"], want, rtol=1e-6)
