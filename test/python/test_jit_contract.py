"""The jit contract of hlopt.jit, hlopt.lower, Compiled and loaded files, against jax.jit as the reference.

Each test runs the same call through jax.jit (or jax's compiled object,
`jax.jit(f).lower(x).compile()`) and through hlopt, and compares what comes
back: values, dtypes, shardings, committed-ness, and which calls are refused
with which exception type.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import hlopt
from hlopt.passes.ir.locations import hlopt_dirs
from hlopt.runtime.cache import using_cache_dir
from hlopt.runtime.host import HostCompiled

RNG = np.random.default_rng(12)


def outcome(call):
    """What a call gives: ('ok', dtype, weak type, value) or ('raises', exception type)."""
    try:
        out = call()
    except (TypeError, ValueError, OverflowError) as e:
        return ("raises", type(e).__name__)
    return ("ok", out.dtype, out.weak_type, np.asarray(out).tolist())


# --- output shardings on a mesh -------------------------------------------------------

ELEMENTWISE = {
    "sin": lambda a: jnp.sin(a) * 2,
    "rowsum": lambda a: a.sum(axis=1),
    "transpose": lambda a: a.T + 1,
    "reshape": lambda a: a.reshape(-1),
    "pair": lambda a: (a * 3, jnp.cos(a).sum(axis=1)),
}


def gathers(hlo: str) -> int:
    return hlo.count("all-gather(") + hlo.count("all-gather-start(")


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_outputs_keep_the_shardings_jax_jit_gives(partitioner, axis_type, name):
    fun = ELEMENTWISE[name]
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    placed = jax.device_put(x, NamedSharding(mesh, P("x")))
    with jax.set_mesh(mesh):
        reference = jax.jit(fun).lower(placed).compile()
    want = jax.tree_util.tree_leaves(reference(placed))

    compiled = hlopt.lower(fun, x, mesh=mesh, in_shardings=(P("x"),)).compile()
    calls = {
        "lower(host array, in_shardings)": lambda: compiled(x),
        "the same, placed input": lambda: compiled(placed),
        "jit(mesh=)": lambda: hlopt.jit(fun, mesh=mesh)(placed),
        "jit, mesh from the input": lambda: hlopt.jit(fun)(placed),
    }
    for what, call in calls.items():
        got = jax.tree_util.tree_leaves(call())
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
            assert g.sharding.is_equivalent_to(w.sharding, g.ndim), (what, g.sharding, w.sharding)
            assert g.committed
    # no collective jax.jit does not compile: outputs are not gathered and resharded
    assert gathers(compiled.as_text()) == gathers(reference.as_text())


def test_explicit_axes_type_host_arguments_by_their_in_shardings():
    """A sharding constraint inside the function sees the argument sharded, as with jax.jit on a placed array."""
    mesh = jax.make_mesh((8,), ("x",))
    fun = lambda a: jax.lax.with_sharding_constraint(a * 2, P("x"))  # an assertion on Explicit axes  # noqa: E731
    x = np.arange(16, dtype=np.float32)
    with jax.set_mesh(mesh):
        want = jax.jit(fun)(jax.device_put(x, P("x")))
    got = hlopt.lower(fun, x, mesh=mesh, in_shardings=(P("x"),)).compile()(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got.sharding.is_equivalent_to(want.sharding, 1)


def test_a_mesh_without_in_shardings_keeps_committed_arguments_shardings():
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    fun = lambda a, b: (a + 1, b * 2)  # noqa: E731
    a = jax.device_put(RNG.standard_normal((8, 4)).astype(np.float32), NamedSharding(mesh, P("x", "y")))
    b = np.ones((4,), np.float32)
    with jax.set_mesh(mesh):
        want = jax.jit(fun)(a, b)
    got = hlopt.jit(fun, mesh=mesh)(a, b)
    for g, w in zip(got, want):
        assert g.sharding.is_equivalent_to(w.sharding, g.ndim)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# --- argument checks: what jax's compiled object accepts and refuses --------------------

EXAMPLES = {
    "int32": np.int32(0), "float32": np.float32(0), "weak int32": 0, "weak float32": 0.0, "bool": np.bool_(False),
    "uint8": np.uint8(0), "complex64": np.complex64(0), "float16": np.float16(0), "int32[3]": np.zeros(3, np.int32),
}
ARGUMENTS = [
    3, 3.5, 3.0, True, 1j, 2**40, -(2**31) - 1,
    np.int32(3), np.int64(3), np.float32(3), np.float64(3.5), np.uint32(3), np.uint64(3), np.int16(3), np.bool_(True),
    np.array(3, np.int32), np.array(3, np.int64), np.array(3.5, np.float32), np.array([3], np.int32),
    np.zeros(3, np.int32), np.zeros(3, np.int64), np.zeros(3, np.float32), np.zeros((3, 1), np.int32),
    jnp.int32(3), jnp.float32(3.5), jnp.asarray(3), jnp.asarray(3.5), jnp.zeros(3, jnp.int32),
    [3], (3,), None, "3", b"3", object(),
]


@pytest.mark.parametrize("example", EXAMPLES)
def test_compiled_and_loaded_programs_accept_and_refuse_what_jax_does(example):
    spec = EXAMPLES[example]
    fun = lambda a: a * 2  # noqa: E731
    reference = jax.jit(fun).lower(spec).compile()
    compiled = hlopt.lower(fun, spec).compile()
    loaded = hlopt.deserialize(compiled.serialize())
    seeded = hlopt.lower(fun, spec).compile()
    seeded(spec)  # its C++ dispatch now knows the example's signature
    for arg in ARGUMENTS:
        want = outcome(lambda: reference(arg))
        for name, program in (("compiled", compiled), ("loaded", loaded), ("seeded", seeded)):
            got = outcome(lambda: program(arg))
            if want[0] == "ok":
                assert got[:2] == want[:2] and got[3] == want[3], (name, repr(arg), got, want)
            else:
                assert got == want, (name, repr(arg), got, want)


def test_a_float_for_an_int_parameter_is_refused_not_truncated():
    compiled = hlopt.lower(lambda n: n + 1, np.int32(0)).compile()
    with pytest.raises(TypeError, match=r"argument 0 is float32\[\] but the program was compiled for int32\[\]"):
        compiled(2.7)
    with pytest.raises(TypeError):
        jax.jit(lambda n: n + 1).lower(np.int32(0)).compile()(2.7)
    with pytest.raises(OverflowError, match="argument 0: Python int 1099511627776 too large to convert to int32"):
        compiled(2**40)


def test_pytree_arguments_are_checked_leaf_by_leaf():
    fun = lambda t: t["a"] * t["b"][0]  # noqa: E731
    tree = {"a": np.ones(3, np.float32), "b": (np.int32(2), None)}
    compiled = hlopt.lower(fun, tree).compile()
    reference = jax.jit(fun).lower(tree).compile()
    for arg in ({"a": np.ones(3, np.float32), "b": (2.5, None)}, {"a": np.ones(3, np.float32), "b": (2, None)},
                {"a": np.ones(3, np.float64), "b": (np.int64(2), None)}, {"a": np.ones(3, np.float32), "b": (2,)},
                {"a": np.ones(4, np.float32), "b": (2, None)}):
        want, got = outcome(lambda: reference(arg)), outcome(lambda: compiled(arg))
        assert got[:2] == want[:2] and got[-1] == want[-1], (arg, got, want)


def test_a_compiled_program_refuses_traced_arguments():
    compiled = hlopt.lower(lambda a: a * 2, np.ones(3, np.float32)).compile()
    with pytest.raises(TypeError, match="traced value"):
        jax.jit(compiled)(np.ones(3, np.float32))


# --- static arguments: keyed on type and value -------------------------------------------

def add_static(x, n):
    return jnp.asarray(n) + x


@pytest.mark.parametrize("static_argnums", [1, -1], ids=["C++ dispatch", "python path"])
def test_static_arguments_that_compare_equal_are_different_programs(static_argnums, tmp_path):
    ours, ref = hlopt.jit(add_static, static_argnums=static_argnums), jax.jit(add_static, static_argnums=1)
    x = jnp.int32(2)
    with using_cache_dir(tmp_path):
        for n in (1, 1.0, True, np.int32(1), 1.0, 1, True):  # the second round replays known signatures
            got, want = ours(x, n), ref(x, n)
            assert (got.dtype, got.weak_type, got.item()) == (want.dtype, want.weak_type, want.item()), n
        info = hlopt.cache_info()
    assert info.hits + info.misses == 4  # programs compiled (each a hit or a miss of the compilation cache)


def test_compiled_static_arguments_must_have_the_same_type():
    compiled = hlopt.lower(add_static, jnp.int32(2), 1, static_argnums=1).compile()
    assert compiled(jnp.int32(2), 1).item() == 3
    for other in (1.0, True, np.int64(1)):
        with pytest.raises(ValueError, match=r"static argument 1 is .* \(.*\) but the program was compiled for 1 \(int\)"):
            compiled(jnp.int32(2), other)


@pytest.mark.parametrize("static_argnums", [1, -1], ids=["C++ dispatch", "python path"])
def test_unhashable_static_arguments_are_refused_as_by_jax(static_argnums):
    with pytest.raises(ValueError, match="Non-hashable static arguments"):
        jax.jit(add_static, static_argnums=static_argnums)(1.0, np.ones(2))
    with pytest.raises(ValueError, match="(?i)non-hashable static arguments|static argument 1 .* is not hashable"):
        hlopt.jit(add_static, static_argnums=static_argnums)(1.0, np.ones(2))


def one(x):
    return x * 2


def two(x, n):
    return x * n


def many(*args):
    return sum(args)


STATIC_CASES = [
    (one, 0, (3.0,)), (one, 1, (3.0,)), (one, 3, (3.0,)), (one, -1, (3.0,)), (one, -2, (3.0,)),
    (two, 1, (3.0, 2)), (two, -1, (3.0, 2)), (two, -2, (2, 3.0)), (two, -3, (3.0, 2)), (two, (0, 1), (2, 3)),
    (two, (1, -1), (3.0, 2)), (many, 1, (3.0, 2)), (many, 3, (3.0, 2.0)), (many, -1, (3.0, 2)),
    (many, -3, (3.0, 2.0)), (many, -1, ()), (one, 0.5, (3.0,)), (one, "0", (3.0,)), (two, [1], (3.0, 2)),
    (two, np.int64(1), (3.0, 2)),
]


def resolve(outcome_of):
    try:
        return ("ok", outcome_of())
    except (TypeError, ValueError) as e:
        return ("raises", type(e).__name__)


@pytest.mark.parametrize("fun,static_argnums,args", STATIC_CASES,
                         ids=[f"{f.__name__}-{s!r}-{len(a)}args" for f, s, a in STATIC_CASES])
def test_static_argnums_are_checked_and_resolved_as_by_jax(fun, static_argnums, args):
    """jax.jit refuses indices outside the signature, ignores positive ones past a call's end (with *args)
    and refuses negative ones before its start; nothing wraps around."""
    want = resolve(lambda: jax.jit(fun, static_argnums=static_argnums).lower(*args).out_info.dtype)
    got_lower = resolve(lambda: hlopt.lower(fun, *args, static_argnums=static_argnums).signature.out_avals[0].dtype)
    got_jit = resolve(lambda: hlopt.jit(fun, static_argnums=static_argnums)(*args).dtype)
    assert got_lower == want
    assert got_jit == want


# --- committed and uncommitted inputs -----------------------------------------------------

def placement(x):
    return (x.sharding, x.committed)


def test_committed_inputs_keep_the_program_on_their_device():
    fun = lambda a, b: a * 2 + b  # noqa: E731
    host = RNG.standard_normal(3).astype(np.float32)
    d2, d3 = jax.devices()[2], jax.devices()[3]
    x3, x2, uncommitted = jax.device_put(host, d3), jax.device_put(host, d2), jnp.asarray(host)
    ours, ref = hlopt.jit(fun), jax.jit(fun)
    for args in ((x3, host), (host, host), (x3, uncommitted), (uncommitted, host), (x3, x3), (x2, host), (x3, host)):
        got, want = ours(*args), ref(*args)
        assert placement(got) == placement(want), args
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ValueError, match="incompatible devices"):
        ref(x3, x2)
    with pytest.raises(ValueError, match="incompatible devices"):
        ours(x3, x2)


def test_a_program_lowered_for_a_committed_input_runs_on_its_device():
    fun = lambda a: jnp.sin(a)  # noqa: E731
    host = RNG.standard_normal(3).astype(np.float32)
    d2, d3 = jax.devices()[2], jax.devices()[3]
    x3 = jax.device_put(host, d3)
    reference = jax.jit(fun).lower(x3).compile()
    compiled = hlopt.lower(fun, x3).compile()
    loaded = hlopt.deserialize(compiled.serialize())
    for program in (compiled, loaded):
        assert program.signature.device == d3
        for arg in (x3, host, jnp.asarray(host), x3):
            got, want = program(arg), reference(arg)
            assert placement(got) == placement(want) == (SingleDeviceSharding(d3), True)
        with pytest.raises(ValueError, match="committed to device 2 but the program runs on device 3"):
            program(jax.device_put(host, d2))
    with pytest.raises(ValueError, match="disagree"):
        reference(jax.device_put(host, d2))


def test_a_program_lowered_for_host_inputs_gives_uncommitted_outputs():
    fun = lambda a: a + 1  # noqa: E731
    host = np.ones(3, np.float32)
    reference = jax.jit(fun).lower(host).compile()
    compiled = hlopt.lower(fun, host).compile()
    for program in (compiled, hlopt.deserialize(compiled.serialize())):
        for arg in (host, jnp.asarray(host), host):
            assert placement(program(arg)) == placement(reference(arg)) == (SingleDeviceSharding(jax.devices()[0]), False)
        with pytest.raises(ValueError, match="committed to device 3 but the program runs on device 0"):
            program(jax.device_put(host, jax.devices()[3]))
    with pytest.raises(ValueError, match="disagree"):
        reference(jax.device_put(host, jax.devices()[3]))


# --- the call contract: keywords, static and donated arguments, the decorator form ----------------


def both(fun, **options):
    """The same function through jax.jit and hlopt.jit with the same options."""
    return jax.jit(fun, **options), hlopt.jit(fun, **options)


def scaled(x, y=2.0, *, n=1, scale=1.0):
    return x * y * n + scale


def call_outcomes(fun, calls, **options):
    jitted = both(fun, **options)
    return [[outcome(lambda: j(*args, **kwargs)) for args, kwargs in calls] for j in jitted]


X3 = np.arange(3.0, dtype=np.float32)
KEYWORD_CALLS = [((X3,), {}), ((X3,), {"y": 3.0}), ((X3,), {"y": X3}), ((X3, X3), {"scale": np.float32(2)}),
                 ((), {"x": X3, "y": X3}), ((X3,), {"n": 2}), ((X3,), {"z": 1.0}), ((X3, 1.0, 2.0), {})]


@pytest.mark.parametrize("options", [{}, {"static_argnames": "n"}, {"static_argnames": ("n", "y")},
                                     {"static_argnums": 1}, {"static_argnums": 1, "static_argnames": "n"}],
                         ids=["none", "n", "n_y", "argnum1", "argnum1_n"])
def test_keyword_and_static_arguments_as_jax_jit(options):
    theirs, ours = call_outcomes(scaled, KEYWORD_CALLS, **options)
    assert ours == theirs


def test_static_argnames_make_one_program_per_value_as_jax_jit():
    traces = []

    def f(x, *, n):
        traces.append(n)
        return x * n

    ours = hlopt.jit(f, static_argnames="n")
    assert [float(ours(X3, n=k)[1]) for k in (1, 2, 1, 2.0)] == [1.0, 2.0, 1.0, 2.0]
    assert traces == [1, 2, 2.0]  # 2 and 2.0 are two programs, as for jax.jit
    with pytest.raises(ValueError, match="hashable"):
        ours(X3, n=[1])
    with pytest.raises(ValueError):
        jax.jit(f, static_argnames="n")(X3, n=[1])


@pytest.mark.parametrize("options", [{"donate_argnums": 0}, {"donate_argnums": (0, 1)}, {"donate_argnames": "x"},
                                     {"donate_argnames": ("y",)}], ids=["num0", "num01", "name_x", "name_y"])
def test_donated_buffers_are_deleted_as_by_jax_jit(options):
    def f(x, y):
        return x * 2 + y, y - x

    deleted = []
    for jitted in both(f, **options):
        x, y = jnp.arange(4.0), jnp.ones(4)
        out = jitted(x, y=y) if "donate_argnames" in options else jitted(x, y)
        np.testing.assert_array_equal(out[0], np.arange(4.0) * 2 + 1)
        deleted.append((x.is_deleted(), y.is_deleted()))
    assert deleted[0] == deleted[1] and any(deleted[0])


def entry_parameters(hlo: str) -> int:
    """How many parameters the entry computation of an HLO module text takes."""
    entry = hlo[hlo.index("ENTRY"):]
    return entry[:entry.index("\n}")].count(" parameter(")


UNUSED = {  # a function, its arguments, and the input leaves it uses
    "middle": (lambda x, unused, z: x * 2 + z, (X3, np.ones(4, np.float32), X3), {}),
    "all_but_one_leaf": (lambda p, y: p["a"] * y, ({"a": X3, "b": np.ones(2, np.float32)}, X3), {}),
    "keyword": (lambda x, *, k=None: x + 1, (X3,), {"k": np.ones(5, np.float32)}),
    "none_used": (lambda x, y: jnp.float32(1.0), (X3, X3), {}),
    "static_and_unused": (lambda x, n, unused: x * n, (X3, 3, X3), {}),
}


@pytest.mark.parametrize("keep", [False, True], ids=["prune", "keep"])
@pytest.mark.parametrize("name", UNUSED)
def test_keep_unused_prunes_the_program_as_jax_jit(name, keep, tmp_path, monkeypatch):
    fun, args, kwargs = UNUSED[name]
    options = {"keep_unused": keep, "static_argnums": (1,) if name == "static_and_unused" else ()}
    theirs, ours = both(fun, **options)
    lowered = {"jax": theirs.lower(*args, **kwargs), "hlopt": ours.lower(*args, **kwargs)}
    counts = {k: entry_parameters(v.as_text("hlo")) for k, v in lowered.items()}
    compiled = {k: v.compile() for k, v in lowered.items()}
    counts.update({k + "_compiled": entry_parameters(v.as_text()) for k, v in compiled.items()})
    assert counts["hlopt"] == counts["jax"] == counts["hlopt_compiled"] == counts["jax_compiled"]
    n_leaves = len(jax.tree_util.tree_leaves((args, kwargs))) - (1 if options["static_argnums"] else 0)
    assert (counts["jax"] == n_leaves) == keep
    want = theirs(*args, **kwargs)
    np.testing.assert_array_equal(ours(*args, **kwargs), want)
    np.testing.assert_array_equal(compiled["hlopt"](*args, **kwargs), want)
    path = tmp_path / "f.hlopt"
    monkeypatch.setenv("HLOPT_KEY", "key A " * 8)
    compiled["hlopt"].save(path)
    for trust in ("signed", "portable"):
        if trust == "portable":  # under another key: recompiled from the file's portable artifact
            monkeypatch.setenv("HLOPT_KEY", "key B " * 8)
        with pytest.warns(hlopt.RecompileWarning) if trust == "portable" else contextlib.nullcontext():
            loaded = hlopt.load(path, trust=trust)
        np.testing.assert_array_equal(loaded(*args, **kwargs), want)
        assert entry_parameters(loaded.as_text()) == counts["jax"]
    with pytest.raises(TypeError):
        ours.lower(*args, **kwargs).compile()(*args[:-1])  # a pruned argument is still part of the call


@pytest.mark.parametrize("keep", [False, True], ids=["prune", "keep"])
def test_a_donated_unused_argument_is_consumed_as_by_jax_jit(keep):
    def f(x, unused):
        return x * 2

    deleted = []
    for jitted in both(f, keep_unused=keep, donate_argnums=(0, 1)):
        for _ in range(2):  # the second call runs from the C++ dispatch
            x, unused = jnp.arange(4.0), jnp.ones(4)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Some donated buffers were not usable")
                np.testing.assert_array_equal(jitted(x, unused), np.arange(4.0) * 2)
            deleted.append((x.is_deleted(), unused.is_deleted()))
    assert deleted[:2] == deleted[2:] and deleted[0] == (True, False)


STAGE_CASES = {  # a function, its positional and keyword arguments, jit options
    "pytree_kwargs": (lambda x, u, *, k: {"a": x * k, "b": (x.sum(),)}, (X3, np.ones(4, np.float32)),
                      {"k": np.float32(2)}, {"donate_argnums": 0}),
    "static": (lambda x, n: (x * n, x.astype(jnp.int32)), (X3, 3), {}, {"static_argnums": 1}),
    "unused_kept": (lambda x, y: x @ x, (X3, X3), {}, {"keep_unused": True}),
    "unused_pruned": (lambda x, y, z: x @ z, (X3, X3, X3), {}, {}),
    "closed_over_constant": (lambda x, dead: jnp.arange(16.0, dtype=jnp.float32)[3:6] * 2 + 42 + x, (X3, X3), {}, {}),
    "weak": (lambda x: (x + 1, 2.0), (X3,), {}, {}),
}


def without_static(args, options):
    return tuple(a for i, a in enumerate(args) if i not in np.atleast_1d(options.get("static_argnums", ())))


def with_host_callback(fun, seen):
    """`fun` that also hands its first output to a host callback (hlopt compiles it as jax.jit does)."""
    @functools.wraps(fun)
    def called_back(*args, **kwargs):
        out = fun(*args, **kwargs)
        jax.debug.callback(lambda v: seen.append(np.asarray(v)), jax.tree.leaves(out)[0])
        return out
    return called_back


def _instructions(text):
    return sum(1 for line in text.splitlines() if " = " in line.split("metadata")[0])


@pytest.mark.parametrize("host", [False, True], ids=["", "host_callback"])
@pytest.mark.parametrize("name", STAGE_CASES)
def test_stage_attributes_as_jax(name, host):
    fun, args, kwargs, options = STAGE_CASES[name]
    seen = []
    if host:
        fun = with_host_callback(fun, seen)
    theirs, ours = (j.lower(*args, **kwargs) for j in both(fun, **options))
    for lowered in (theirs, ours):
        assert lowered.args_info == theirs.args_info and lowered.in_tree == theirs.in_tree
        assert lowered.out_tree == theirs.out_tree and lowered.donate_argnums == theirs.donate_argnums
        assert lowered.in_avals == theirs.in_avals
        assert jax.tree.map(lambda s: (s.shape, s.dtype), lowered.out_info) == jax.tree.map(
            lambda s: (s.shape, s.dtype), theirs.out_info)
        assert lowered.compiler_ir("hlo").as_hlo_text() == lowered.as_text("hlo")
        assert str(lowered.compiler_ir()) == lowered.as_text() == str(lowered.compiler_ir("stablehlo"))
        assert lowered.cost_analysis()["flops"] == theirs.cost_analysis()["flops"]
    compiled = {"jax": theirs.compile(), "hlopt": ours.compile()}
    want = compiled["jax"]
    assert isinstance(compiled["hlopt"], HostCompiled) == host
    if host:  # the program jax.jit compiles
        assert _instructions(compiled["hlopt"].as_text()) == _instructions(want.as_text())
        assert "func.func public @main" in str(compiled["hlopt"].module)
    for c in compiled.values():
        assert c.args_info == want.args_info and c.in_tree == want.in_tree and c.out_tree == want.out_tree
        assert c.input_shardings == want.input_shardings and c.output_shardings == want.output_shardings
        assert jax.tree.map(lambda s: (s.shape, s.dtype, s.sharding, s.format), c.out_info) == jax.tree.map(
            lambda s: (s.shape, s.dtype, s.sharding, s.format), want.out_info)
        assert c.input_formats == want.input_formats and c.output_formats == want.output_formats
        assert c.cost_analysis()["flops"] == want.cost_analysis()["flops"]
        assert c.memory_analysis().argument_size_in_bytes == want.memory_analysis().argument_size_in_bytes
        assert c.memory_analysis().output_size_in_bytes == want.memory_analysis().output_size_in_bytes
        assert type(c.runtime_executable()) is type(want.runtime_executable())
    fresh = lambda: (tuple(jnp.array(a) if isinstance(a, np.ndarray) else a  # noqa: E731 - donated buffers go
                           for a in without_static(args, options)), kwargs)
    for _ in range(2):  # the second call runs from the C++ dispatch
        a, k = fresh()
        got = compiled["hlopt"](*a, **k)
        a, k = fresh()
        expected = want(*a, **k)
        assert jax.tree.structure(got) == jax.tree.structure(expected)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
            assert g.dtype == w.dtype and g.weak_type == w.weak_type
            np.testing.assert_array_equal(g, w)
    jax.effects_barrier()
    assert len(seen) == (4 if host else 0)


@pytest.mark.parametrize("use_np", [False, True], ids=["jnp", "np"])
@pytest.mark.parametrize("x64_at", [(), ("lower",), ("compile",), ("call",), ("lower", "compile", "call")],
                         ids=["none", "lower", "compile", "call", "all"])
def test_a_closed_over_64_bit_constant_as_jax(x64_at, use_np):
    with jax.enable_x64(True):
        const = (np.arange if use_np else jnp.arange)(8, dtype=np.int64) + 42

    def f(x):
        return jax.lax.convert_element_type(const, np.float32) + x

    x = np.arange(8.0, dtype=np.float32)
    results = []
    for jitted in both(f):
        with jax.enable_x64("lower" in x64_at):
            lowered = jitted.lower(x)
        with jax.enable_x64("compile" in x64_at):
            compiled = lowered.compile()
        assert len(compiled.args_info[0]) == len(compiled.in_avals[0]) == len(compiled.input_shardings[0]) == 1
        with jax.enable_x64("call" in x64_at):
            results.append(np.asarray(compiled(x)))
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[0], np.arange(8.0) + 42 + x)


@pytest.mark.parametrize("call", ["missing_keyword", "extra_keyword", "keyword_as_positional"])
def test_compiled_refuses_the_keyword_calls_jax_refuses(call):
    fun, args, kwargs, options = STAGE_CASES["pytree_kwargs"]
    calls = {"missing_keyword": (args, {}), "extra_keyword": (args, {**kwargs, "z": X3}),
             "keyword_as_positional": (args + (kwargs["k"],), {})}
    a, k = calls[call]
    for jitted in both(fun):
        with pytest.raises(TypeError):
            jitted.lower(*args, **kwargs).compile()(*a, **k)


def test_the_decorator_factory_form():
    @hlopt.jit(static_argnums=1)
    def power(x, n):
        return x**n

    @hlopt.jit
    def plain(x):
        return x + 1

    np.testing.assert_array_equal(power(X3, 3), X3**3)
    np.testing.assert_array_equal(plain(X3), X3 + 1)
    assert power.__name__ == "power" and isinstance(power, hlopt.jit(lambda x: x).__class__)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))
    sharded = hlopt.jit(in_shardings=NamedSharding(mesh, P("x")))(lambda x: x * 2)
    want = jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh, P("x")))(np.arange(8.0))
    got = sharded(np.arange(8.0))
    assert got.sharding == want.sharding
    np.testing.assert_array_equal(got, want)


def test_lowered_as_text_dialects_as_jax():
    def f(x):
        return jnp.sin(x) * 2

    ours, theirs = hlopt.jit(f).lower(X3), jax.jit(f).lower(X3)
    assert ours.as_text("hlo") == theirs.as_text("hlo")
    assert ours.as_text(dialect="stablehlo") == ours.as_text() and "stablehlo.sine" in ours.as_text()
    assert "metadata={" in ours.as_text("hlo", debug_info=True) and "metadata={" not in ours.as_text("hlo")
    assert "loc(" in ours.as_text(debug_info=True) and "loc(" not in ours.as_text()
    with pytest.raises(ValueError, match="unknown dialect"):
        ours.as_text("mhlo-ish")
    with pytest.raises(ValueError, match="unknown dialect"):
        theirs.as_text("mhlo-ish")


def source_files(text: str) -> set[str]:
    """The files named by the source locations of a StableHLO or HLO text."""
    return set(re.findall(r'"([^"]+\.py)"', text))


def test_debug_info_names_the_users_frames_as_jax():
    """XLA's HLO text carries jax.jit's metadata: the user's frames, not hlopt's (the StableHLO
    text prints the module's own locations, the same before and after passes that change nothing)."""
    dialect = "hlo"

    def plain(x):
        return jnp.sin(x) * jnp.cos(x[0])

    def with_ops(x):
        return hlopt.laplacian(lambda p: jnp.sum(jnp.sin(p) ** 2))(x) + plain(x)

    texts = {j.__module__: j(plain).lower(X3).as_text(dialect, debug_info=True) for j in (jax.jit, hlopt.jit)}
    assert source_files(texts["hlopt.staging"]) == source_files(texts["jax._src.api"])
    ours = hlopt.jit(with_ops).lower(X3).as_text(dialect, debug_info=True)
    assert __file__ in source_files(ours) and not [d for d in hlopt_dirs() if d in ours]
    assert "loc(" not in hlopt.jit(with_ops).lower(X3).as_text(dialect) and "source_file" not in ours


def test_trace_stage_as_jax():
    def f(x, n):
        return x * n

    ours, theirs = hlopt.jit(f, static_argnums=1), jax.jit(f, static_argnums=1)
    assert str(ours.trace(X3, 3).jaxpr) == str(theirs.trace(X3, 3).jaxpr)
    assert "stablehlo.custom_call @hlopt.jet" in hlopt.jit(hlopt.laplacian(lambda x: jnp.sum(x**3))).lower(
        X3).as_text()


def test_a_closed_over_mutable_array_is_refused_at_lowering():
    ref = jax.new_ref(jnp.zeros(3))

    def f(x):
        ref[...] += x
        return x * 2

    with pytest.raises(ValueError, match="closes over 1 mutable array.*pass the array as an argument"):
        hlopt.jit(f).lower(X3)
    with pytest.raises(ValueError, match="closes over 1 mutable array"):
        hlopt.jit(f)(X3)
    np.testing.assert_array_equal(ref[...], np.zeros(3))


# --- the mesh, from the arguments and in_shardings -------------------------------------------------


def _fft_op(seen, custom):
    from jax.experimental import custom_partitioning as jax_cp

    def partition(mesh, arg_shapes, result_shape):
        seen.append(arg_shapes[0].sharding.spec)
        s = NamedSharding(mesh, P(*arg_shapes[0].sharding.spec[:1], None))
        return mesh, jnp.fft.fft, s, (s,)

    op = (hlopt.custom_partitioning if custom == "hlopt" else jax_cp.custom_partitioning)(lambda x: jnp.fft.fft(x))
    op.def_partition(partition=partition, sharding_rule="...i -> ...i")
    return op


@pytest.mark.parametrize("how", ["argument", "in_shardings"])
def test_the_mesh_comes_from_named_shardings_as_for_jax_jit(how):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))
    x = (RNG.standard_normal((8, 16)) + 1j * RNG.standard_normal((8, 16))).astype(np.complex64)
    results = {}
    for side, jit in (("jax", jax.jit), ("hlopt", hlopt.jit)):
        seen = []
        op = _fft_op(seen, side)
        if how == "argument":
            out = jit(op)(jax.device_put(x, NamedSharding(mesh, P("x"))))
        else:
            out = jit(op, in_shardings=NamedSharding(mesh, P("x")))(x)
        results[side] = (out.sharding, seen, np.asarray(out))
    assert results["hlopt"][:2] == results["jax"][:2] and results["jax"][1] == [P("x", None)]
    np.testing.assert_allclose(results["hlopt"][2], results["jax"][2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constraint", ["named", "spec_under_set_mesh", "spec_without_mesh"])
def test_with_sharding_constraint_without_mesh_option_as_jax_jit(constraint):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))
    x = jax.device_put(np.arange(16.0, dtype=np.float32), NamedSharding(mesh, P("x")))
    target = NamedSharding(mesh, P()) if constraint == "named" else P()

    def f(x):
        return jax.lax.with_sharding_constraint(x * 2, target)

    def run(jit):
        try:
            with jax.set_mesh(mesh) if constraint == "spec_under_set_mesh" else contextlib.nullcontext():
                out = jit(f)(x)
        except (RuntimeError, ValueError) as e:
            return type(e).__name__
        return out.sharding.spec, np.asarray(out).tolist()

    assert run(hlopt.jit) == run(jax.jit)


def test_a_custom_partitioned_function_called_eagerly_evaluates_its_body_as_jax():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))
    x = RNG.standard_normal((8, 16)).astype(np.complex64)
    outs = {}
    for side in ("jax", "hlopt"):
        seen = []
        with jax.set_mesh(mesh):
            outs[side] = (np.asarray(_fft_op(seen, side)(jax.device_put(x, NamedSharding(mesh, P("x"))))), seen)
    assert outs["hlopt"][1] == outs["jax"][1] == []
    np.testing.assert_allclose(outs["hlopt"][0], outs["jax"][0], rtol=1e-5, atol=1e-5)


def test_the_mesh_comes_from_sharding_constraints_in_the_body_as_for_jax_jit():
    mesh = jax.make_mesh((4, 2), ("i", "j"), axis_types=(AxisType.Auto,) * 2)

    def f(x):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(("i", "j"))))
        return jax.lax.with_sharding_constraint(jnp.sin(x) * 2, NamedSharding(mesh, P("i")))

    x = np.arange(8.0, dtype=np.float32)
    want, got = jax.jit(f)(x), hlopt.jit(f)(x)
    assert got.sharding == want.sharding
    np.testing.assert_array_equal(got, want)


# --- compiler_options: XLA's options, as jax.jit takes them ---------------------------------------

def _fusions(compiled):
    return compiled.as_text().count(" fusion(")


COMPILER_OPTION_CASES = {  # name -> a function of X3 (plain, with an hlopt operation, with a host callback)
    "plain": lambda x: jnp.sum(jnp.sin(x) * jnp.cos(x) + x**2),
    "hlopt_op": lambda x: hlopt.laplacian(lambda y: jnp.sum(jnp.sin(y) ** 3))(x) + jnp.sum(jnp.cos(x) * x),
    "host_callback": with_host_callback(lambda x: jnp.sum(jnp.sin(x) * jnp.cos(x) + x**2), []),
}
NO_FUSION = {"xla_disable_hlo_passes": "fusion"}


@pytest.mark.parametrize("name", COMPILER_OPTION_CASES)
def test_compiler_options_change_the_program_as_under_jax_jit(name):
    """An XLA option (here: no fusion pass) changes hlopt.jit's optimized program as it changes jax.jit's,
    given to the jit, to `Lowered.compile`, or to both (the compile's then win, as in jax)."""
    fun = COMPILER_OPTION_CASES[name]
    forms = {
        "default": lambda j: j(fun).lower(X3).compile(),
        "jit": lambda j: j(fun, compiler_options=NO_FUSION).lower(X3).compile(),
        "decorator": lambda j: j(compiler_options=NO_FUSION)(fun).lower(X3).compile(),
        "compile": lambda j: j(fun).lower(X3).compile(compiler_options=NO_FUSION),
        "compile_wins": lambda j: j(fun, compiler_options={"xla_disable_hlo_passes": ""}).lower(X3).compile(
            compiler_options=NO_FUSION),
    }
    counts = {}
    for form, make in forms.items():
        theirs, ours = make(jax.jit), make(hlopt.jit)
        counts[form] = (_fusions(theirs), _fusions(ours))
        np.testing.assert_allclose(ours(X3), theirs(X3), rtol=1e-6)
    # the option does something: the count of fusions changes (it grows with XLA:CPU's fusion emitters,
    # which wrap single ops in fusions, and drops to none with its loop emitters, as the tests compile)
    assert counts["default"][0] != counts["jit"][0], counts
    assert len(set(counts.values()) - {counts["default"]}) == 1, counts  # and the same in each form
    for theirs, ours in counts.values():
        assert ours == theirs, counts
    np.testing.assert_allclose(hlopt.jit(fun, compiler_options=NO_FUSION)(X3), jax.jit(fun)(X3), rtol=1e-6)


@pytest.mark.parametrize("name", COMPILER_OPTION_CASES)
@pytest.mark.parametrize("options", [{"no_such_option": 1}, {"xla_cpu_enable_fast_math": "not a bool"}],
                         ids=["unknown name", "bad value"])
@pytest.mark.parametrize("where", ["jit", "compile"])
def test_compiler_options_xla_refuses_are_refused_as_by_jax_jit(name, options, where):
    fun = COMPILER_OPTION_CASES[name]

    def compile_with(j):
        return j(fun, compiler_options=options)(X3) if where == "jit" else \
            j(fun).lower(X3).compile(compiler_options=options)

    with pytest.raises(Exception) as theirs:
        compile_with(jax.jit)
    with pytest.raises(type(theirs.value)) as ours:
        compile_with(hlopt.jit)
    assert str(ours.value) == str(theirs.value) and ("No such compile option" in str(ours.value)
                                                     or "not a valid bool" in str(ours.value))


@pytest.mark.parametrize("options, match", [
    ([("xla_cpu_enable_fast_math", True)], "must be a dict of XLA option names"),
    ({1: True}, "an option name must be a str, not int"),
    ({"xla_cpu_enable_fast_math": [True]}, "xla_cpu_enable_fast_math must be a str, bool, int or float, not list"),
])
def test_compiler_options_of_the_wrong_type_are_refused_at_once(options, match):
    with pytest.raises(TypeError, match=match):
        hlopt.jit(jnp.sin, compiler_options=options)
    with pytest.raises(TypeError, match=match):
        hlopt.jit(jnp.sin).lower(X3).compile(compiler_options=options)
    with pytest.raises(TypeError, match="pass XLA's options by keyword"):
        hlopt.jit(jnp.sin).lower(X3).compile({"xla_cpu_enable_fast_math": True})


def test_compiler_options_are_part_of_the_persistent_cache_key(tmp_path):
    from hlopt.runtime import cache as cache_mod

    fun = COMPILER_OPTION_CASES["hlopt_op"]
    with cache_mod.using_cache_dir(tmp_path / "cache"):
        plain = hlopt.jit(fun).lower(X3).compile()
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 1)
        unfused = hlopt.jit(fun, compiler_options=NO_FUSION).lower(X3).compile()  # not the entry above
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 2)
        again = hlopt.jit(fun).lower(X3).compile(compiler_options=dict(NO_FUSION))  # the same options: a hit
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 2)
    assert _fusions(unfused) == _fusions(again) != _fusions(plain)


def test_xla_dump_options_dump_the_program_as_under_jax_jit(tmp_path):
    """XLA's dump options write the optimized HLO for hlopt.jit as for jax.jit (the same instructions)."""
    fun = COMPILER_OPTION_CASES["hlopt_op"]
    texts = {}
    for side, j in (("jax", jax.jit), ("hlopt", hlopt.jit)):
        j(fun, compiler_options={"xla_dump_to": str(tmp_path / side), "xla_dump_hlo_as_text": True})(X3)
        (dump,) = (tmp_path / side).glob("*after_optimizations.txt")
        texts[side] = dump.read_text()
    assert _instructions(texts["hlopt"]) == _instructions(texts["jax"]) > 0
