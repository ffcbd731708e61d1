"""Executable files: round trips (in-process and in a fresh process) against jax.jit."""

from __future__ import annotations

import base64
import collections
import dataclasses
import functools
import json
import os
import subprocess
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import hlopt
from hlopt.runtime import container, encoding, files

from support import forge

RNG = np.random.default_rng(6)


def tree_f(x, y):
    return {"s": jnp.sin(x) * y, "pair": (x.sum(), [x.T, None])}


def int_f(x, k):
    return (x * k) % 7, (x > 3)


def narrow_f(x):
    return (x * 2).astype(x.dtype), jnp.abs(x).sum()


def complex_f(z):
    return jnp.conj(z) * z, jnp.angle(z)


CASES = {
    "tree-f32": (tree_f, lambda: (RNG.standard_normal((3, 4)).astype(np.float32), np.float32(1.5)), ()),
    "int32-static": (int_f, lambda: (np.arange(12, dtype=np.int32).reshape(3, 4), 5), (1,)),
    "bf16": (narrow_f, lambda: (RNG.standard_normal((5,)).astype(ml_dtypes.bfloat16),), ()),
    "f16": (narrow_f, lambda: (RNG.standard_normal((2, 3)).astype(np.float16),), ()),
    "uint8": (narrow_f, lambda: (np.arange(6, dtype=np.uint8),), ()),
    "complex64": (complex_f, lambda: ((RNG.standard_normal(4) + 1j * RNG.standard_normal(4)).astype(np.complex64),), ()),
    "scalar-weak": (lambda a, b: a * b + 1, lambda: (np.float32(2), 3.0), ()),
}


def assert_same(got, want):
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    assert g_tree == w_tree
    for g, w in zip(g_leaves, w_leaves, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_in_process(case, tmp_path):
    fun, make_args, static = CASES[case]
    args = make_args()
    compiled = hlopt.lower(fun, *args, static_argnums=static).compile()
    path = tmp_path / "f.hlx"
    compiled.save(path)
    for loaded in (hlopt.load(path), hlopt.deserialize(compiled.serialize())):
        assert loaded.signature == compiled.signature
        assert loaded.pipeline == compiled.pipeline == "hlopt-default"
        assert loaded.as_text().startswith("HloModule")  # stack-frame tables are renumbered on reload
        assert str(loaded.module) == str(compiled.module)  # serializing left compiled.module alone
        assert_same(loaded(*args), compiled(*args))
        want = jax.jit(fun, static_argnums=static)(*args)
        assert_same(loaded(*args), want)


@pytest.fixture(scope="module")
def sharded():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)  # a @ b leaves its sharding to XLA
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 4)).astype(np.float32)

    def f(a, b):
        return {"act": jnp.tanh(a @ b), "total": a.sum()}

    compiled = hlopt.lower(f, a, b, mesh=mesh, in_shardings=(P("x", "y"), P("y", None)),
                           out_shardings={"act": P("x"), "total": P()}).compile()
    return compiled, (a, b), f


def test_sharded_round_trip_keeps_mesh_and_shardings(sharded):
    compiled, args, f = sharded
    loaded = hlopt.deserialize(compiled.serialize())
    mesh = loaded.signature.mesh
    assert mesh.shape == {"x": 4, "y": 2}
    assert mesh.axis_types == compiled.signature.mesh.axis_types
    assert [d.id for d in mesh.devices.flat] == [d.id for d in compiled.signature.mesh.devices.flat]
    for got, want, ndim in zip(loaded.in_shardings + loaded.out_shardings,
                               compiled.in_shardings + compiled.out_shardings, (2, 2, 2, 0)):
        assert got.is_equivalent_to(want, ndim)
    out = loaded(*args)
    assert out["act"].sharding.spec == P("x")
    assert len(out["act"].sharding.device_set) == 8
    np.testing.assert_allclose(out["act"], jax.jit(f)(*args)["act"], rtol=1e-5, atol=1e-5)
    assert_same(out, compiled(*args))


WORKER = r"""
import sys, numpy as np, jax, hlopt
out = {}
for name in sys.argv[2:]:
    compiled = hlopt.load(f"{sys.argv[1]}/{name}.hlx")
    inputs = np.load(f"{sys.argv[1]}/{name}-in.npz")
    args, _ = jax.tree_util.tree_unflatten(compiled.signature.in_tree, [inputs[k] for k in inputs.files])
    leaves = jax.tree_util.tree_leaves(compiled(*args))
    out.update({f"{name}-{i}": np.asarray(x) for i, x in enumerate(leaves)})
np.savez(f"{sys.argv[1]}/out.npz", **out)
"""


def fft_partition(mesh, arg_shapes, result_shape):
    sharding = NamedSharding(mesh, P(arg_shapes[0].sharding.spec[0], None))
    return mesh, jnp.fft.fft, sharding, (sharding,)


@hlopt.custom_partitioning
def my_fft(x):
    return jnp.fft.fft(x)


my_fft.def_partition(partition=fft_partition, sharding_rule="...i -> ...i",
                     infer_sharding_from_operands=lambda mesh, shapes, result: NamedSharding(mesh, P("x", None)))


def fresh_process_programs(sharded):
    """name -> (Compiled, args, JAX's result) for every kind of program a file may hold."""
    from jax.experimental import jet as jax_jet

    programs = {}
    args = CASES["tree-f32"][1]()
    programs["single"] = (hlopt.lower(tree_f, *args).compile(), args, jax.jit(tree_f)(*args))
    compiled, args, f = sharded
    programs["sharded"] = (compiled, args, jax.jit(f)(*args))
    x = np.linspace(0, 1, 6, dtype=np.float32)
    jet_f = lambda x, t: hlopt.jet(jnp.sin, (x,), ((t, t * 2),))  # noqa: E731
    programs["jet"] = (hlopt.lower(jet_f, x, x).compile(), (x, x), jax_jet.jet(jnp.sin, (x,), ((x, x * 2),)))
    mesh = jax.make_mesh((8,), ("x",))
    z = (RNG.standard_normal((16, 8)) + 1j * RNG.standard_normal((16, 8))).astype(np.complex64)
    programs["partitioned"] = (
        hlopt.lower(my_fft, z, mesh=mesh, in_shardings=(P("x"),), out_shardings=P("x")).compile(), (z,),
        jnp.fft.fft(z))
    from jax.experimental import sparse as jsparse

    dense = np.array([[1, 0, 2, 0], [0, 0, 3, 4], [5, 0, 0, 0]], np.float32)
    v = np.arange(1, 5, dtype=np.float32)

    def sparse_f(m, v):
        sp = jsparse if isinstance(m, jsparse.BCOO) else hlopt.sparse
        return {"t": sp.bcoo_transpose(m, permutation=(1, 0)), "mv": sp.bcoo_multiply_dense(m, v)}

    m = hlopt.sparse.BCOO.fromdense(dense)
    programs["sparse"] = (hlopt.lower(sparse_f, m, v).compile(), (m, v),
                          sparse_f(jsparse.BCOO.fromdense(dense), v))
    return programs


def dense_leaves(tree):
    """Leaves, with every BCOO (hlopt's or JAX's) as its dense array."""
    is_sparse = lambda x: hasattr(x, "todense")  # noqa: E731
    return [x.todense() if is_sparse(x) else x for x in jax.tree_util.tree_leaves(tree, is_leaf=is_sparse)]


def test_round_trip_in_a_fresh_process(sharded, tmp_path):
    """The worker imports nothing of this test: the files alone carry each program."""
    want = {}
    programs = fresh_process_programs(sharded)
    for name, (compiled, args, ref) in programs.items():
        compiled.save(tmp_path / f"{name}.hlx")
        np.savez(tmp_path / f"{name}-in.npz", *jax.tree_util.tree_leaves(args))
        out = compiled(*args)
        for x, r in zip(dense_leaves(out), dense_leaves(ref), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(r), rtol=1e-4, atol=1e-4)
        want.update({f"{name}-{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(out))})
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path), *programs],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out.npz")
    assert sorted(got.files) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_too_few_devices_says_how_many_are_needed(sharded, tmp_path):
    compiled, _, _ = sharded
    compiled.save(tmp_path / "s.hlx")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    script = "import sys, hlopt\ntry:\n    hlopt.load(sys.argv[1])\nexcept hlopt.ExecutableFileError as e:\n    print(e)\n"
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.hlx")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "the program runs on 8 devices but only 4 cpu device(s) are available" in proc.stdout
    assert "xla_force_host_platform_device_count=8" in proc.stdout


def test_other_jaxlib_version_is_recompiled_with_a_warning():
    args = CASES["tree-f32"][1]()
    compiled = hlopt.lower(tree_f, *args).compile()
    manifest, sections = forge.unpack(compiled.serialize())
    for key, value in (("jaxlib_version", "0.0.1"), ("platform_version", "other 1.0"), ("process_count", 2)):
        data = forge.resign(dict(manifest, **{key: value}), sections)
        with pytest.warns(hlopt.RecompileWarning, match=f"{key} {value!r}.*compiling it from its portable artifact"):
            loaded = hlopt.deserialize(data)
        assert_same(loaded(*args), compiled(*args))


def test_matching_file_loads_without_warning():
    args = CASES["tree-f32"][1]()
    data = hlopt.lower(tree_f, *args).compile().serialize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hlopt.deserialize(data)


def test_recompile_warning_points_at_the_callers_line():
    args = CASES["tree-f32"][1]()
    manifest, sections = forge.unpack(hlopt.lower(tree_f, *args).compile().serialize())
    data = forge.resign(dict(manifest, jaxlib_version="0.0.1"), sections)
    with pytest.warns(hlopt.RecompileWarning) as caught:
        hlopt.deserialize(data)  # the line the warning must name: this file's, not hlopt's or jax's
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, sys._getframe().f_lineno - 1)]


@pytest.mark.parametrize("where, says", [
    ("missing/deeper/p.hlx", "its folder {tmp}/missing/deeper does not exist: create it first (mkdir -p "),
    ("a_file/p.hlx", "{tmp}/a_file is a file, not a folder"),
])
def test_saving_where_no_file_can_be_written_names_the_path_and_the_fix(tmp_path, where, says):
    (tmp_path / "a_file").write_text("")
    compiled = hlopt.lower(jnp.sin, np.ones(3, np.float32)).compile()
    with pytest.raises(OSError) as refused:
        compiled.save(tmp_path / where)
    message = str(refused.value)
    assert message.startswith(f"cannot write {tmp_path / where}: ") and says.format(tmp=tmp_path) in message
    assert ".hlopt-tmp-" not in message  # the temporary file it would have written is not the user's path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_manifest_records_what_inspect_shows(sharded):
    compiled, _, _ = sharded
    manifest, sections = forge.unpack(compiled.serialize())
    assert manifest["format"] == "hlopt-executable" and manifest["format_version"] == container.FORMAT_VERSION
    assert manifest["flags"] == {"shardy": True, "propagate_to_output": [False, False]}
    assert manifest["device_count"] == 8
    assert manifest["platform"] == "cpu"
    assert manifest["jaxlib_version"] == jaxlib.__version__
    assert manifest["signature"]["mesh"]["shape"] == [4, 2]
    assert manifest["in_shardings"] == [["x", "y"], ["y"]]
    assert manifest["out_shardings"][0][0] == "x"
    assert [a["shape"] for a in manifest["signature"]["in_avals"]] == [[16, 8], [8, 4]]
    assert manifest["pipeline"] == "hlopt-default"
    assert list(sections) == ["executable", "module"]
    module = hlopt.passes.mlir.deserialize_portable_artifact(sections["module"])
    assert "sdy.mesh" in str(module)
    recorded = hlopt.passes.mlir.ir.StringAttr(module.operation.attributes[files.SIGNATURE_ATTR]).value
    assert json.loads(recorded) == manifest["signature"]


def test_unsupported_pytrees_and_static_args_are_refused_when_saving():
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")
    compiled = hlopt.lower(lambda x: Pair(x, x + 1), np.ones(2, np.float32)).compile()
    with pytest.raises(ValueError, match="pytree node of type .*Pair cannot be saved"):
        compiled.serialize()
    arr_static = hlopt.lower(lambda x, s: x * len(s), np.ones(2, np.float32), frozenset({1, 2}), static_argnums=1)
    with pytest.raises(ValueError, match="static argument frozenset.*cannot be saved"):
        arr_static.compile().serialize()


Point = collections.namedtuple("Point", "x y")


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["act", "depth"])
@dataclasses.dataclass
class Layer:
    """A user pytree class whose aux data names a function and holds an int."""

    w: Any
    act: Any
    depth: int


@pytest.mark.parametrize("tree", [
    ((1, 2), {}),
    (Point(1, {"a": 2}), Layer(3, act=jnp.tanh, depth=2)),
    [hlopt.sparse.BCSR.fromdense(np.eye(3))],
    {"b": [1, None, (2,)], "a": {3: 4, 1: []}},
    [],
    None,
    7,
    ((), {"x": [[[1]]]}),
    ((hlopt.sparse.BCOO((np.ones(2), np.zeros((2, 1), np.int32)), shape=(3,), indices_sorted=True), [None]), {}),
])
def test_tree_encoding_round_trips(tree):
    treedef = jax.tree_util.tree_structure(tree)
    assert encoding.decode_tree(encoding.encode_tree(treedef)) == treedef


@pytest.mark.parametrize("value", [None, True, 3, -2.5, "s", (1, (2, "a")), [1, [None]], ()])
def test_static_encoding_round_trips(value):
    decoded = encoding.decode_static(encoding.encode_static(value))
    assert decoded == value and type(decoded) is type(value)


@pytest.mark.parametrize("bad,match", [
    ({"set": [1]}, "unknown pytree node kind"),
    ({"tuple": 3}, "malformed pytree node"),
    ({"dict": [[1.5, "*"]]}, "malformed dict entry"),
    ("leaf", "malformed pytree node"),
    (["*"], "malformed pytree node"),
    ({"dict": [[1, "*"], ["a", "*"]]}, "cannot build the pytree"),
    ({"dict": [["a", "*"], ["a", "*"]]}, "duplicate dict key"),
    ({"node": ["os.system", None, ["*"]]}, "malformed pytree node 'os.system'"),
    ({"node": ["os:system", None, ["*"]]}, "os.system is not a pytree node class"),
    ({"node": ["no_such_module:Model", None, ["*"]]}, "not defined in this process: import no_such_module"),
    ({"node": ["__main__:NoSuchModel", None, ["*"]]},  # a class of the script that saved the file
     r"not defined in this process: it was defined in the script that saved the file \(__main__\): define it in a"),
    ({"export": ["no.such.Name", "", []]}, "registered with jax.export as 'no.such.Name', which this process has not"),
    ({"export": ["hlopt.sparse.BCOO", base64.b64encode(b"{}").decode(), ["*", "*"]]},
     "cannot build pytree node 'hlopt.sparse.BCOO'"),
    ({"export": ["hlopt.sparse.BCOO", "not base64!", ["*", "*"]]}, "malformed aux data of pytree node"),
    ({"export": ["hlopt.sparse.BCOO", base64.b64encode(
        b'{"shape":[3],"indices_sorted":true,"unique_indices":false}').decode(), ["*", "*"]]}, "not in canonical form"),
    ({"dict": [["b", "*"], ["a", "*"]]}, "not in canonical form"),
])
def test_malformed_trees_are_refused(bad, match):
    with pytest.raises(encoding.EncodingError, match=match):
        encoding.decode_tree(bad)


@pytest.mark.parametrize("bad,match", [
    ({"shape": [2], "dtype": "object", "weak_type": False}, "unsupported dtype 'object'"),
    ({"shape": [-1], "dtype": "float32", "weak_type": False}, "malformed shape"),
    ({"shape": [2], "dtype": "float32"}, "malformed aval"),
    ({"shape": [2.0], "dtype": "float32", "weak_type": False}, "malformed shape"),
])
def test_malformed_avals_are_refused(bad, match):
    with pytest.raises(encoding.EncodingError, match=match):
        encoding.decode_aval(bad)
