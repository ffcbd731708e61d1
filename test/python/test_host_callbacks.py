"""Host callbacks and side effects under `hlopt.jit`, side by side with `jax.jit`.

They run in the compiling process, in jax.jit's order; a program holding one
cannot be saved, serialized or cached.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify, io_callback

import hlopt
from hlopt.runtime import cache as cache_mod

X = np.linspace(0.5, 2.0, 4)


def cubic_laplacian(y):
    return hlopt.laplacian(lambda z: jnp.sum(z**3))(y)


def programs(log):
    """name -> a function with host callbacks (appending to `log`) and an hlopt operation."""

    def debug_callback(x):
        jax.debug.callback(lambda v: log.append(("callback", float(np.sum(v)))), x)
        return cubic_laplacian(x)

    def pure(x):
        y = jax.pure_callback(lambda v: (log.append(("pure", float(np.sum(v)))), np.asarray(v) * 2)[1],
                              jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return cubic_laplacian(y)

    def ordered_io(x):
        for k in range(3):
            io_callback(lambda v, k=k: log.append(("io", k, float(np.sum(v)))), None, x * k, ordered=True)
        return cubic_laplacian(x)

    def unordered_io(x):
        y = io_callback(lambda v: (log.append(("io", float(np.sum(v)))), np.asarray(v) + 1)[1],
                        jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return cubic_laplacian(y)

    def print_in_loop(x):
        def body(i, c):
            jax.debug.print("step {i}", i=i, ordered=True)
            return c + cubic_laplacian(x * i)
        return jax.lax.fori_loop(0, 3, body, 0.0)

    return {"debug_callback": debug_callback, "pure_callback": pure, "ordered_io_callback": ordered_io,
            "unordered_io_callback": unordered_io, "ordered_debug_print_in_loop": print_in_loop}


NAMES = list(programs([]))


@pytest.mark.parametrize("name", NAMES)
def test_callbacks_run_as_under_jax_jit(name, capfd):
    log = []
    fun = programs(log)[name]
    want = [jax.jit(fun)(X), jax.jit(fun)(X * 2)]
    want_log, want_out = list(log), capfd.readouterr().out
    log.clear()
    ours = hlopt.jit(fun)
    got = [ours(X), ours(X * 2)]
    assert log == want_log and capfd.readouterr().out == want_out
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert want_log or want_out  # the callbacks ran


def test_debug_print_output_is_jax_jits(capfd):
    def fun(x):
        jax.debug.print("x = {x}, sum = {s}", x=x, s=jnp.sum(x))
        return cubic_laplacian(x)

    jax.jit(fun)(X)
    want = capfd.readouterr().out
    hlopt.jit(fun)(X)
    assert capfd.readouterr().out == want and "sum = " in want


def test_a_raising_callback_raises_as_under_jax_jit():
    def fun(x):
        def fail(v):
            raise ValueError("negative input")
        jax.debug.callback(fail, x)
        return x

    with pytest.raises(Exception) as theirs:
        jax.jit(fun)(X).block_until_ready()
    with pytest.raises(type(theirs.value), match="negative input"):
        hlopt.jit(fun)(X).block_until_ready()


def test_checkify_as_under_jax_jit():
    fun = checkify.checkify(lambda x: (checkify.check(jnp.all(x > 1), "x must exceed 1, got {}", x[0]),
                                       cubic_laplacian(x))[1])
    (err, out), (want_err, want_out) = hlopt.jit(fun)(X), jax.jit(fun)(X)
    assert err.get() == want_err.get() and "x must exceed 1" in err.get()
    np.testing.assert_allclose(out, want_out)
    assert hlopt.jit(fun)(X + 1)[0].get() is None


@pytest.mark.parametrize("how", ["save", "serialize"])
def test_save_and_serialize_refuse_host_callbacks(how, tmp_path):
    compiled = hlopt.jit(programs([])["debug_callback"]).lower(X).compile()
    with pytest.raises(ValueError, match="cannot (save|serialize) a program with host callbacks"):
        compiled.save(tmp_path / "f.hlopt") if how == "save" else compiled.serialize()
    assert not list(tmp_path.iterdir())


def test_persistent_cache_never_holds_a_program_with_host_callbacks(tmp_path):
    log = []
    with cache_mod.using_cache_dir(tmp_path / "cache"):
        fun = programs(log)["debug_callback"]
        hlopt.jit(fun)(X)
        hlopt.jit(fun)(X)
        assert len(log) == 2
        assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".hlx"]
        hlopt.jit(cubic_laplacian)(X)  # while a program without callbacks is cached
        assert [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".hlx"]


def test_a_custom_pipeline_is_refused_for_host_callbacks():
    lowered = hlopt.lower(programs([])["debug_callback"], X)
    assert "stablehlo.custom_call @hlopt.jet" in lowered.as_text()  # the IR is hlopt's annotation form
    with pytest.raises(ValueError, match="compiles as under jax.jit.*'lower-bcoo' cannot be applied"):
        lowered.compile("lower-bcoo")


@pytest.mark.parametrize("check_key_reuse", [False, True])
def test_calls_after_a_host_program_go_through_jax_jits_dispatch(check_key_reuse):
    """Once a function's program calls back into Python, later calls run through one jax.jit of it: a new
    signature is traced once, by jax alone (hlopt's lowering and the compile of the host program trace
    it twice), with the callbacks and results of jax.jit. A function checked for key reuse stays on
    hlopt's dispatch, which checks each signature."""
    log, traces = [], []

    def fun(x):
        traces.append(x.shape)
        return programs(log)["unordered_io_callback"](x)

    ours = hlopt.jit(fun, check_key_reuse=check_key_reuse)
    got = [ours(X), ours(X), ours(X[:3])]
    assert traces.count(X.shape) >= 2  # the first signature: hlopt's lowering, then jax's compile
    assert (traces.count((3,)) > 1) == check_key_reuse  # jax alone traces a new signature once
    ours_log = list(log)
    log.clear()
    want = [jax.jit(fun)(X), jax.jit(fun)(X), jax.jit(fun)(X[:3])]
    assert ours_log == log and len(log) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
