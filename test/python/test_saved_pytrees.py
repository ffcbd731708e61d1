"""Programs taking the pytrees users have, saved and run elsewhere.

- an equinox MLP, a flax NNX model and a flax linen model compiled here, saved, and loaded and
  run in a fresh process that builds the same arguments: equal to `jax.jit` here;
- a node class that cannot be saved is one line naming its type and the registration call;
- a `jax.export` taking an `hlopt.sparse.BCOO` serializes, and deserializes and runs in a process
  where importing hlopt fails (jax.experimental.sparse's BCOO registered under hlopt's name).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest

import hlopt
from hlopt.runtime import container, encoding

from support import forge, saved_models_worker, script


def test_library_models_run_in_a_fresh_process(tmp_path):
    want = {}
    for name, build in saved_models_worker.PROGRAMS.items():
        fun, args = build()
        hlopt.jit(fun).lower(*args).compile().save(tmp_path / f"{name}.hlx")
        want[name] = jax.jit(fun)(*args)
    subprocess.run([*script("saved_models_worker"), "load", str(tmp_path)],
                   check=True, timeout=300)
    for name, value in want.items():
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.got.npy"), value, rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_a_node_class_that_cannot_be_saved_is_named_with_the_fix():
    class Local:
        def __init__(self, w):
            self.w = w

    jax.tree_util.register_pytree_node(Local, lambda n: ((n.w,), None), lambda aux, c: Local(*c))
    compiled = hlopt.lower(lambda n: n.w * 2, Local(np.ones(2, np.float32))).compile()
    with pytest.raises(ValueError) as info:
        compiled.serialize()
    message = str(info.value)
    assert "\n" not in message
    assert "pytree node of type test_saved_pytrees.test_a_node_class_that_cannot_be_saved_is_named_with_the_fix" \
           ".<locals>.Local cannot be saved" in message
    assert "jax.export.register_pytree_node_serialization(" in message


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["tags"])
@dataclasses.dataclass
class Tagged:
    """A pytree class whose aux data (a frozenset) has no JSON form."""

    w: Any
    tags: frozenset


def test_aux_data_that_cannot_be_saved_is_named():
    compiled = hlopt.lower(lambda t: t.w + 1, Tagged(np.ones(2, np.float32), frozenset({"a"}))).compile()
    with pytest.raises(ValueError, match=r"pytree node of type test_saved_pytrees.Tagged cannot be saved: aux data "
                                         r"frozenset\(\{'a'\}\) of type frozenset cannot be saved.*"
                                         r"register_pytree_node_serialization\(Tagged"):
        compiled.serialize()


BLOCK_HLOPT = textwrap.dedent("""
    import sys
    class _NoHlopt:
        def find_spec(self, name, path=None, target=None):
            if name == "hlopt" or name.startswith("hlopt."):
                raise ImportError("hlopt is not installed here")
    sys.meta_path.insert(0, _NoHlopt())
    """)

RUN_EXPORT = BLOCK_HLOPT + textwrap.dedent("""
    import json
    import jax, numpy as np
    from jax.experimental import sparse

    def aux_from_json(data):
        aux = json.loads(data)
        return dict(aux, shape=tuple(aux["shape"]))

    jax.export.register_pytree_node_serialization(
        sparse.BCOO, serialized_name="hlopt.sparse.BCOO", deserialize_auxdata=aux_from_json,
        serialize_auxdata=lambda aux: json.dumps(dict(aux, shape=list(aux["shape"]))).encode())
    folder = sys.argv[1]
    inputs = np.load(folder + "/inputs.npz")
    exported = jax.export.deserialize(bytearray(open(folder + "/f.jax", "rb").read()))
    out = exported.call(sparse.BCOO.fromdense(inputs["m"]), inputs["x"])
    np.save(folder + "/got.npy", np.asarray(out))
    """)


def test_a_jax_export_taking_a_bcoo_runs_without_hlopt(tmp_path):
    rng = np.random.default_rng(0)
    m = (rng.standard_normal((5, 4)) * (rng.random((5, 4)) < 0.4)).astype(np.float32)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    exported = jax.export.export(jax.jit(lambda a, b: a @ b))(hlopt.sparse.BCOO.fromdense(m), x)
    assert "@hlopt." not in exported.mlir_module()  # no annotation left for XLA
    (tmp_path / "f.jax").write_bytes(exported.serialize())
    np.savez(tmp_path / "inputs.npz", m=m, x=x)
    subprocess.run([sys.executable, "-c", RUN_EXPORT, str(tmp_path)], check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "got.npy"), m @ x, rtol=1e-5, atol=1e-6)
    with pytest.raises(subprocess.CalledProcessError):  # the blocker does block hlopt
        subprocess.run([sys.executable, "-c", BLOCK_HLOPT + "import hlopt"], check=True, timeout=60,
                       capture_output=True)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["scale"])
@dataclasses.dataclass
class Scaled:
    """A pytree class saved by module:qualname, with aux data."""

    w: Any
    scale: float


def test_a_file_not_authenticated_may_not_name_classes(monkeypatch):
    """Unflattening a named class runs its code with the file's data: only signed files may name one."""
    monkeypatch.setenv("HLOPT_KEY", "writer-key-" + "0" * 32)
    data = hlopt.jit(lambda s: Scaled(s.w * s.scale, s.scale)).lower(Scaled(np.ones(2, np.float32), 3.0)) \
        .compile().serialize()
    out = hlopt.deserialize(data)(Scaled(np.ones(2, np.float32), 3.0))  # signed: rebuilt
    assert isinstance(out, Scaled) and out.scale == 3.0
    np.testing.assert_allclose(out.w, [3.0, 3.0])
    monkeypatch.setenv("HLOPT_KEY", "reader-key-" + "1" * 32)
    with pytest.raises(hlopt.ExecutableFileError, match=r"names the class 'test_saved_pytrees:Scaled'; a file that "
                                                        r"is not authenticated may hold only"):
        hlopt.deserialize(data, trust="portable")
    with pytest.raises(hlopt.ExecutableFileError, match="MAC does not verify"):
        hlopt.deserialize(data)


def test_a_parameter_holding_a_class_is_named_as_written():
    """Its leaves are named `s.w` (an attribute): the parameter is `s`."""
    compiled = hlopt.jit(lambda s: s.w * s.scale).lower(Scaled(np.ones(2, np.float32), 3.0)).compile()
    with pytest.raises(TypeError, match=r"^<lambda> takes 1 argument \(s\), 0 were given"):
        compiled()


def _as_format_2(tree: Any) -> Any:
    """An encoded pytree as format version 2 recorded it: a BCOO as a node named "hlopt.sparse.BCOO"
    whose aux data is a static value, where version 3 records jax.export's serialized form."""
    if isinstance(tree, list):
        return [_as_format_2(t) for t in tree]
    if not isinstance(tree, dict):
        return tree
    if "export" in tree:
        name, aux, kids = tree["export"]
        aux = json.loads(base64.b64decode(aux))
        return {"node": [name, encoding.encode_static(dict(aux, shape=tuple(aux["shape"]))), _as_format_2(kids)]}
    return {k: _as_format_2(v) for k, v in tree.items()}


def test_a_format_2_file_holding_a_bcoo_says_to_compile_again(monkeypatch):
    """Format 3 changed how a BCOO is recorded: a version-2 file (forged here, signed with the
    user's key, its BCOO in the old form) is refused before its pytree is read."""
    m = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], np.float32)
    x = np.ones((3, 2), np.float32)
    data = hlopt.jit(lambda a, b: a @ b).lower(hlopt.sparse.BCOO.fromdense(m), x).compile().serialize()
    np.testing.assert_allclose(hlopt.deserialize(data)(hlopt.sparse.BCOO.fromdense(m), x), m @ x)
    manifest, sections = forge.unpack(data)
    old_tree = _as_format_2(manifest["signature"]["in_tree"])
    assert "hlopt.sparse.BCOO" in json.dumps(old_tree) and "export" not in json.dumps(old_tree)
    old_manifest = dict(manifest, signature=dict(manifest["signature"], in_tree=old_tree))
    with monkeypatch.context() as m2:
        m2.setattr(container, "FORMAT_VERSION", 2)
        old = forge.resign(old_manifest, sections)
    assert container.FORMAT_VERSION == 3
    with pytest.raises(hlopt.ExecutableFileError, match=r"format version 2, but this hlopt reads version 3; it was "
                                                        r"written by an older hlopt: compile it again"):
        hlopt.deserialize(old)


@dataclasses.dataclass(frozen=True)
class Config:
    """A frozen dataclass of static values, saved by class and fields."""

    width: int
    names: tuple


class Point(NamedTuple):
    x: int
    y: str


def test_static_dataclasses_and_namedtuples_round_trip_in_signed_files_only():
    value = Config(3, (Point(1, "a"), jax.tree_util.tree_structure({"a": 1, "b": (2, None)})))
    data = encoding.encode_static(value)
    assert data["dataclass"][0] == "test_saved_pytrees:Config"
    back = encoding.decode_static(data)
    assert back == value and type(back.names[0]) is Point
    with pytest.raises(encoding.EncodingError, match="names the object 'test_saved_pytrees:Config'; a file that "
                                                     "is not authenticated"):
        encoding.decode_static(data, named=False)

    @dataclasses.dataclass
    class Mutable:
        width: int

    with pytest.raises(encoding.EncodingError, match="of type Mutable cannot be saved: only .* frozen dataclasses"):
        encoding.encode_static(Mutable(3))
    forged = {"dataclass": ["test_saved_pytrees:Config", [["width", 3]]]}
    with pytest.raises(encoding.EncodingError, match="is not a dataclass with fields"):
        encoding.decode_static(forged)


def test_a_graphdef_holding_local_code_says_to_close_over_it():
    """A model class and a function defined in a function have no name a file can record."""
    from flax import nnx

    class WithLambda(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.linear = nnx.Linear(2, 2, rngs=rngs)
            self.act = lambda z: z * 2

        def __call__(self, x):
            return self.act(self.linear(x))

    split = nnx.split(WithLambda(nnx.Rngs(0)))
    compiled = hlopt.jit(lambda model, x: nnx.merge(*model)(x)).lower(split, np.ones(2, np.float32)).compile()
    with pytest.raises(ValueError) as info:
        compiled.serialize()
    message = str(info.value)
    assert "\n" not in message
    assert "pytree node of type flax.nnx.graphlib.GraphDef cannot be saved: aux data <" in message
    assert message.endswith("; or close over it rather than pass it, as it holds no arrays")
