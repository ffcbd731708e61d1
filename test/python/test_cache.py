"""The persistent compilation cache: keys, hits, damaged entries, eviction, concurrent processes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.compiler import stages
from hlopt.compiler.program import parse_module
from hlopt.passes.mlir import get_context
from hlopt.runtime import cache as cache_mod
from hlopt.runtime.pjrt import BuildFlags, get_client

from support import script
from support.sandbox import run_forked

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
    devices = jax.devices()

    def key(fun, x=X, pipeline="hlopt-default", on=devices[:1], shardy=True):
        return cache_mod.cache_key(cache_mod.stripped_bytecode(hlopt.lower(fun, x).module), pipeline, on, shardy, client)

    assert "loc(" in hlopt.lower(f, X).as_text(debug_info=True)
    assert key(g) == key(make())
    assert key(f) == key(f)
    assert key(f) != key(f, X[:2])
    assert key(f) != key(f, pipeline="hlopt-default,cse")
    assert key(f) != key(f, on=devices[1:2])
    assert key(f) != key(f, shardy=False)


def test_stripped_bytecode_is_the_module_without_locations():
    lowered = hlopt.lower(f, X)
    stripped = parse_module(cache_mod.stripped_bytecode(lowered.source_module))
    assert str(stripped) == str(lowered)  # the same ops, attributes and types
    assert "test_cache.py" in lowered.as_text(debug_info=True)
    assert "test_cache.py" not in stripped.operation.get_asm(enable_debug_info=True)
    assert "loc(unknown)" in stripped.operation.get_asm(enable_debug_info=True)


def test_hit_skips_the_passes(cache_dir, monkeypatch):
    first = hlopt.lower(f, X).compile()
    monkeypatch.setattr(stages, "run_pipeline", lambda *a, **k: pytest.fail("the passes ran on a cache hit"))
    again = hlopt.lower(f, X).compile()
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 1)
    np.testing.assert_array_equal(again(X), first(X))
    assert again.pipeline == "hlopt-default"
    assert str(again.module) == str(first.module)  # the post-pass module, from the entry


def test_hit_never_parses_the_module(cache_dir, monkeypatch):
    first = hlopt.lower(f, X).compile()
    monkeypatch.setattr(stages, "parse_module", lambda *a, **k: pytest.fail("a cache hit parsed the module"))
    lowered = hlopt.lower(f, X)
    again = lowered.compile()
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 1)
    np.testing.assert_array_equal(again(X), first(X))
    assert lowered.source_module.context != get_context()  # still JAX's module, never moved


@pytest.mark.parametrize("moved_first", [True, False])
def test_moved_and_unmoved_modules_share_entries(cache_dir, moved_first):
    """The key is the same whether the module is still JAX's or already in hlopt's context."""
    def compile_(moved):
        lowered = hlopt.lower(f, X)
        if moved:
            str(lowered)  # printing moves it into hlopt's context
        return lowered.compile()

    first = compile_(moved_first)
    second = compile_(not moved_first)
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses, len(entries(cache_dir))) == (1, 1, 1)
    np.testing.assert_array_equal(second(X), first(X))


def test_damaged_entry_is_a_miss_that_runs_the_passes(cache_dir, monkeypatch):
    hlopt.lower(f, X).compile()
    (entry,) = entries(cache_dir)
    data = bytearray(entry.read_bytes())
    data[-100] ^= 1  # in the last section (the module)
    entry.write_bytes(bytes(data))
    ran = []
    real = stages.run_pipeline
    monkeypatch.setattr(stages, "run_pipeline", lambda *a, **k: ran.append(1) or real(*a, **k))
    np.testing.assert_allclose(hlopt.lower(f, X).compile()(X), jax.jit(f)(X), rtol=1e-6)
    assert ran and (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 2)


def test_key_covers_the_passes_code(cache_dir, monkeypatch):
    hlopt.lower(f, X).compile()
    monkeypatch.setattr(cache_mod, "passes_digest", lambda: "another version of the passes")
    hlopt.lower(f, X).compile()
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 2)


def test_key_covers_the_registered_kernels_source_for_sparse_modules_only(tmp_path):
    """A kernel the passes copy into programs (hlopt.sparse's Pallas products) is part of a sparse module's
    key: a kernel of another package gives another key, the same kernel file beside another version of a
    file of its package another again, and a copy of the package elsewhere the same key (its contents are
    hashed, not where it lies). A module without sparse ops keys the same whichever kernel is registered
    (a fresh process that never imported hlopt.sparse finds its entries)."""
    import importlib.util

    from hlopt.passes.tpu import sparse_products

    def package(folder: str, lanes: int):
        """The kernel of a scratch package `folder`, beside a helper file holding `lanes`."""
        (tmp_path / folder).mkdir()
        source = tmp_path / folder / "scratch_kernel.py"
        source.write_text("def kernel(*args):\n    return None\n")
        (tmp_path / folder / "scratch_kernel_helpers.py").write_text(f"LANES = {lanes}\n")
        spec = importlib.util.spec_from_file_location(f"scratch_kernel_{folder}", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.kernel

    kernels = [None, package("a", 128), package("b", 256), package("copy_of_a", 128)]
    sparse, dense = b"... @hlopt.bcoo.dot_general ...", b"... stablehlo.dot_general ..."
    kept = sparse_products.register_product_kernel(None)
    try:
        keys = []
        for kernel in kernels:
            sparse_products.register_product_kernel(kernel)
            keys.append((cache_mod.kernels_digest(sparse), cache_mod.kernels_digest(dense)))
    finally:
        sparse_products.register_product_kernel(kept)
    none, a, b, copy_of_a = (k[0] for k in keys)
    assert len({none, a, b}) == 3 and copy_of_a == a
    assert {k[1] for k in keys} == {""}


SCALE = {"k": 2.0}


def test_partitioner_code_is_not_trusted_to_the_key(cache_dir):
    """The passes call the partitioner's Python: such a module is keyed after the passes, never before."""
    from jax.sharding import NamedSharding, PartitionSpec as Spec

    @hlopt.custom_partitioning
    def scaled(x):
        return x * 2.0

    def partition(mesh, arg_shapes, result_shape):
        s, k = NamedSharding(mesh, Spec("x")), SCALE["k"]
        return mesh, lambda x: x * k, s, (s,)

    scaled.def_partition(partition=partition, sharding_rule="i -> i",
                         infer_sharding_from_operands=lambda mesh, shapes, result: NamedSharding(mesh, Spec("x")))
    mesh = jax.make_mesh((8,), ("x",))
    x = np.arange(16, dtype=np.float32)
    compile_ = lambda: hlopt.lower(scaled, x, mesh=mesh, in_shardings=(Spec("x"),)).compile()  # noqa: E731
    np.testing.assert_array_equal(compile_()(x), x * 2)
    np.testing.assert_array_equal(compile_()(x), x * 2)
    assert hlopt.cache_info().hits == 1  # the same partitioner: a hit, after the passes
    SCALE["k"] = 3.0
    try:
        np.testing.assert_array_equal(compile_()(x), x * 3)  # what the partitioner says now
    finally:
        SCALE["k"] = 2.0


def test_damaged_entry_is_a_miss_and_is_replaced(cache_dir):
    want = hlopt.lower(f, X).compile()(X)
    (entry,) = entries(cache_dir)
    good = entry.read_bytes()
    for damage in (good[: len(good) // 2], good[:-1] + bytes([good[-1] ^ 1]), b"", b"garbage" * 10):
        entry.write_bytes(damage)
        got = hlopt.lower(f, X).compile()(X)
        np.testing.assert_array_equal(got, want)
        assert cache_mod.active_cache().get(entry.stem, 1) is not None  # replaced by a valid entry
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
    assert c.get(a.stem, 1) is None
    assert c.get(b.stem, 1) is not None
    assert hlopt.cache_info().misses == before


FLAGS = BuildFlags(True, (True,))


ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.hlx")  # an entry's file: its key, a SHA-256 in hex, and .hlx


def name(letter: str) -> str:
    """A key as cache_key makes them (a SHA-256 in hex), named by a letter."""
    return hashlib.sha256(letter.encode()).hexdigest()


def put(c, letter, size):
    c.put(name(letter), bytes(size), b"", FLAGS)


def stored(folder: Path) -> list[str]:
    """The letters of the entries in `folder`."""
    letters = {name(c): c for c in "abcdefghijk"}
    return sorted(letters[p.stem] for p in folder.glob("*.hlx") if p.stem in letters)


def test_lru_eviction_keeps_recent_entries(tmp_path):
    c = cache_mod.CompilationCache(tmp_path, max_bytes=3 * 1500)
    for i, key in enumerate("abc"):
        put(c, key, 1000)
        os.utime(c.path(name(key)), (time.time() - 100 + i, time.time() - 100 + i))
    assert c.get(name("a"), 1) is not None  # a becomes the most recently used
    put(c, "d", 1000)
    assert stored(tmp_path) == ["a", "c", "d"]
    assert c.info().size_bytes <= 3 * 1500
    put(c, "e", 5000)  # larger than the limit: it stays, everything older goes
    assert stored(tmp_path) == ["e"]


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
    put(c, "k", 4)
    assert not stale.exists() and fresh.exists()
    assert c.info().entries == 1


def test_cache_off_and_bad_limit(tmp_path):
    with cache_mod.using_cache_dir(None):
        hlopt.lower(f, X).compile()
        assert hlopt.cache_info() == hlopt.CacheInfo(None, 0, 0, 0, 0, 0)
        with pytest.raises(ValueError, match="size limit must be positive"):
            hlopt.set_cache_dir(tmp_path, max_bytes=0)


def in_fresh_process(code: str, **env: str) -> str:
    """The stdout of `code` run in a fresh process (one that never imported hlopt, forked by
    sandbox.run_forked) whose environment names no cache but what `env` sets; a failure in it fails the test."""
    proc = run_forked(["-c", code], env={cache_mod.ENV_DIR: None, cache_mod.ENV_MAX_BYTES: None, **env}, timeout=120)
    assert proc.returncode == 0, proc.describe()
    return proc.stdout


def test_environment_variable_names_the_cache(tmp_path):
    shown = in_fresh_process("import hlopt; info = hlopt.cache_info(); print(info.directory, info.max_bytes)",
                             **{cache_mod.ENV_DIR: str(tmp_path / "env-cache"), cache_mod.ENV_MAX_BYTES: "12345"})
    assert shown.split() == [str(tmp_path / "env-cache"), "12345"]
    (tmp_path / "a-file").write_text("")
    shown = in_fresh_process(
        "import warnings, hlopt.runtime.cache as c\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    print(c.active_cache())\n"
        "print(*[f'{w.category.__name__}: {w.message}' for w in caught], sep='\\n')\n",
        **{cache_mod.ENV_DIR: str(tmp_path / "a-file" / "cache")})
    assert re.fullmatch(r"None\nUserWarning: hlopt: compiling without the compilation cache: .*a-file/cache: "
                        r"Not a directory\n", shown), shown


def test_folder_is_created_private(tmp_path):
    hlopt.set_cache_dir(tmp_path / "new" / "cache")
    try:
        assert stat.S_IMODE((tmp_path / "new" / "cache").stat().st_mode) == 0o700
    finally:
        hlopt.set_cache_dir(None)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_folder_others_can_write_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with cache_mod.using_cache_dir(None):
        with pytest.warns(UserWarning, match=f"compiling without the compilation cache: .*writable by others "
                                             f"\\(mode {mode:04o}\\); run `chmod 700"):
            hlopt.set_cache_dir(folder)
        compiled = hlopt.lower(f, X).compile()
        assert hlopt.cache_info().directory is None
    np.testing.assert_allclose(compiled(X), jax.jit(f)(X), rtol=1e-6)
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_folder_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with cache_mod.using_cache_dir(None):
        with pytest.warns(UserWarning, match="belongs to user id 65534, not to you"):
            hlopt.set_cache_dir(folder)
        assert hlopt.cache_info().directory is None


@pytest.mark.parametrize("text,expected", [
    ("12345", 12345), ("1e9", 10**9), ("2.5e9", 25 * 10**8), (" 4096 ", 4096),
    ("lots", None), ("-5", None), ("0", None), ("nan", None), ("inf", None), ("1.5", None), ("1e400", None),
])
def test_max_bytes_from_the_environment(tmp_path, monkeypatch, text, expected):
    monkeypatch.setenv(cache_mod.ENV_MAX_BYTES, text)
    with cache_mod.using_cache_dir(None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hlopt.set_cache_dir(tmp_path / "c")
            info = hlopt.cache_info()
    assert info.max_bytes == (expected or cache_mod.DEFAULT_MAX_BYTES)
    messages = [str(w.message) for w in caught]
    assert messages == ([] if expected else [
        f"hlopt: HLOPT_CACHE_MAX_BYTES={text.strip()!r} is not a positive number of bytes; "
        f"using the default, {cache_mod.DEFAULT_MAX_BYTES}"])


def test_bad_max_bytes_without_a_cache_changes_nothing():
    shown = in_fresh_process(
        "import json, warnings, numpy as np, jax.numpy as jnp, hlopt\n"
        "warnings.simplefilter('error')\n"
        f"x = np.array({X.tolist()}, np.float32)\n"
        "print(json.dumps(np.asarray(hlopt.lower(lambda x: jnp.tanh(x) @ x.T + 1, x).compile()(x)).tolist()))\n",
        **{cache_mod.ENV_MAX_BYTES: "1e9x"})
    np.testing.assert_allclose(np.array(json.loads(shown), np.float32), jax.jit(f)(X), rtol=1e-6)


def test_entry_under_another_key_is_a_miss(cache_dir, monkeypatch):
    hlopt.lower(f, X).compile()
    monkeypatch.setenv("HLOPT_KEY", "another user's key, not this one's")
    np.testing.assert_allclose(hlopt.lower(f, X).compile()(X), jax.jit(f)(X), rtol=1e-6)
    hlopt.lower(f, X).compile()
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 2)  # rewritten under the new key


def test_insecure_key_file_turns_the_cache_off(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = tmp_path / "config" / "hlopt" / "key"
    key.parent.mkdir(parents=True)
    key.write_text("k" * 64)
    key.chmod(0o644)
    with pytest.warns(UserWarning, match="compiling without the compilation cache: the key file .* is accessible "
                                         "by others \\(mode 0644\\)"):
        compiled = hlopt.lower(f, X).compile()
    np.testing.assert_allclose(compiled(X), jax.jit(f)(X), rtol=1e-6)
    assert entries(cache_dir) == []


@pytest.mark.parametrize("problem", ["folder at the key path", "key folder others can write", "non-UTF-8 HLOPT_KEY"])
def test_an_unusable_key_turns_the_cache_off_with_a_warning(cache_dir, tmp_path, monkeypatch, problem):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = tmp_path / "config" / "hlopt" / "key"
    key.parent.mkdir(parents=True, mode=0o700)
    match = {"folder at the key path": "the key file .* is not a regular file",
             "key folder others can write": "the key folder .* is writable by others",
             "non-UTF-8 HLOPT_KEY": "HLOPT_KEY is not UTF-8 text"}[problem]
    if problem == "folder at the key path":
        key.mkdir()
    elif problem == "key folder others can write":
        key.parent.chmod(0o777)
    else:
        monkeypatch.setenv("HLOPT_KEY", os.fsdecode(b"\xff" + b"0123456789abcdef" * 3))
    with pytest.warns(UserWarning, match=f"compiling without the compilation cache: {match}"):
        compiled = hlopt.lower(f, X).compile()
    np.testing.assert_allclose(compiled(X), jax.jit(f)(X), rtol=1e-6)
    assert entries(cache_dir) == []


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
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}

    def run(*argv, **extra):
        proc = subprocess.run([*script("cache_cp_worker"), *argv], env=dict(env, **extra), capture_output=True,
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


# --- the cache removes only what it wrote, and never through a link ------------------------------

EVICTING = ("import sys, numpy as np, jax.numpy as jnp, hlopt\n"
            "for n in range(3):\n"
            "    hlopt.lower(lambda x: jnp.sin(x) * n, np.ones(4, np.float32)).compile()\n"
            "print(hlopt.cache_info().misses)\n")


def compile_evicting(cache: Path) -> int:
    """Three compiles through `cache` with a 1-byte limit (each evicts all but its own entry), in a capped
    process; the cache misses it counted (0 if it refused the cache)."""
    from support.sandbox import assert_survived, run_capped

    outcome = run_capped(["-c", EVICTING], env={cache_mod.ENV_DIR: str(cache), cache_mod.ENV_MAX_BYTES: "1"})
    assert_survived(outcome)
    return int(outcome.stdout.split()[-1])


def test_eviction_removes_only_entries_the_cache_wrote(tmp_path):
    cache, models = tmp_path / "cache", tmp_path / "models"
    cache.mkdir(mode=0o700)
    models.mkdir()
    hlopt.lower(f, X).compile().save(cache / "model.hlx")  # the user's own executable file
    (cache / "notes.txt").write_text("mine")
    (models / "weights.hlx").write_text("the target of a link")
    (cache / f"{name('z')}.hlx").symlink_to(models / "weights.hlx")  # named as an entry, but a link
    (cache / f"{name('y')}.hlx").mkdir()  # named as an entry, but a folder
    genuine = cache / f"{name('x')}.hlx"  # the control: an entry the cache wrote, old, so evicted first
    cache_mod.CompilationCache(cache).put(name("x"), bytes(100), b"", FLAGS)
    os.utime(genuine, (time.time() - 1000, time.time() - 1000))
    assert compile_evicting(cache) == 3
    assert not genuine.exists(), "eviction did not run: the test proves nothing"
    assert hlopt.load(cache / "model.hlx")(X) is not None and (cache / "notes.txt").read_text() == "mine"
    assert (cache / f"{name('z')}.hlx").is_symlink() and (models / "weights.hlx").read_text() == "the target of a link"
    assert (cache / f"{name('y')}.hlx").is_dir()
    assert len([p for p in cache.glob("*.hlx") if ENTRY_NAME.fullmatch(p.name) and p.is_file()
                and not p.is_symlink()]) == 1  # the last compile's own entry


def test_a_cache_folder_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    models = tmp_path / "models"
    models.mkdir(mode=0o700)
    hlopt.lower(f, X).compile().save(models / f"{name('m')}.hlx")  # even files named as entries
    (models / "other.hlx").write_bytes(b"model")
    before = sorted((p.name, p.read_bytes()) for p in models.iterdir())
    link = tmp_path / "cache"
    link.symlink_to(models)
    with cache_mod.using_cache_dir(None), pytest.warns(UserWarning, match="is a symbolic link .*never follows one"):
        hlopt.set_cache_dir(link)
    assert compile_evicting(link) == 0  # a fresh process told to use it through HLOPT_CACHE_DIR: no cache
    assert sorted((p.name, p.read_bytes()) for p in models.iterdir()) == before


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_folder_above_the_cache_that_others_can_write_is_refused(tmp_path, mode):
    parent = tmp_path / "shared"
    (parent / "mine").mkdir(parents=True, mode=0o700)
    parent.chmod(mode)
    with cache_mod.using_cache_dir(None), pytest.warns(
            UserWarning, match=f"{parent}, above the cache folder .* is writable by others \\(mode {mode:04o}\\)"):
        hlopt.set_cache_dir(parent / "mine")
    assert hlopt.cache_info().directory is None


def test_a_cache_below_a_sticky_root_folder_is_accepted(tmp_path):
    root_tmp = Path("/tmp")
    st = root_tmp.stat()
    assert st.st_uid == 0 and st.st_mode & stat.S_ISVTX and st.st_mode & 0o002, "needs the usual /tmp"
    folder = Path(tempfile.mkdtemp(dir=root_tmp))
    try:
        assert cache_mod.CompilationCache(folder).directory == folder
    finally:
        folder.rmdir()


def test_hits_and_misses_are_jax_monitoring_events(cache_dir):
    """A listener of jax.monitoring sees hlopt's cache as it sees jax's, under hlopt's own event names."""
    events = []
    listener = lambda name, **kwargs: events.append(name)  # noqa: E731
    jax.monitoring.register_event_listener(listener)
    try:
        hlopt.jit(f)(X)
        hlopt.jit(f)(X)
        hlopt.jit(lambda x: f(x) * 2)(X)
    finally:
        jax.monitoring.unregister_event_listener(listener)
    ours = [e for e in events if e.startswith("/hlopt/")]
    assert ours == [cache_mod.MISS_EVENT, cache_mod.HIT_EVENT, cache_mod.MISS_EVENT]
    assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 2)
    assert "/jax/compilation_cache/cache_hits" not in events  # jax's cache was not asked
