"""Damaged, forged and foreign files are refused with a clear error before PJRT sees them."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.runtime import container, files


def f(x, y):
    return {"s": jnp.sin(x) @ y, "t": x.sum()}


X = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
Y = np.ones((4, 2), np.float32)


@pytest.fixture(scope="module")
def data():
    mesh = jax.make_mesh((8,), ("x",))
    return hlopt.lower(f, X, Y, mesh=mesh, in_shardings=(P("x"), P())).compile().serialize()


@pytest.fixture
def nothing_loads(monkeypatch):
    """Fail the test if PJRT is asked to load or compile anything."""
    calls = []
    monkeypatch.setattr(files, "load_executable", lambda *a, **k: calls.append("load"))
    monkeypatch.setattr(files, "compile_program", lambda *a, **k: calls.append("compile"))
    yield calls
    assert calls == []


def layout(data: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of the header, the manifest and each section."""
    _, _, length, _ = container.HEADER.unpack_from(data)
    ranges = {"header": (0, container.HEADER.size), "manifest": (container.HEADER.size, container.HEADER.size + length)}
    offset = container.HEADER.size + length
    for s in json.loads(data[container.HEADER.size : offset])["sections"]:
        ranges[s["name"]] = (offset, offset + s["size"])
        offset += s["size"]
    assert offset == len(data)
    return ranges


def forge(data: bytes, edit) -> bytes:
    """The file with its manifest edited by `edit` and every checksum recomputed."""
    manifest, sections = files.read_file(data, "x")
    edit(manifest)
    return container.pack(manifest, sections)


def test_intact_file_loads(data):
    out = hlopt.deserialize(data)(X, Y)
    np.testing.assert_allclose(out["s"], jax.jit(f)(X, Y)["s"], rtol=1e-6)


@pytest.mark.parametrize("where", ["magic", "header", "manifest", "executable", "module", "end"])
def test_truncated_files_are_refused(data, nothing_loads, where):
    ranges = layout(data)
    cut = {"magic": 5, "header": 20, "manifest": ranges["manifest"][0] + 10,
           "executable": ranges["executable"][0] + 100, "module": ranges["module"][0] + 7,
           "end": len(data) - 1}[where]
    with pytest.raises(hlopt.ExecutableFileError, match="truncated|not an hlopt file"):
        hlopt.deserialize(data[:cut])


@pytest.mark.parametrize("section,match", [
    ("magic", "not an hlopt file"),
    ("version", "format version"),
    ("length", "manifest|truncated"),
    ("checksum", "manifest checksum mismatch"),
    ("manifest", "manifest checksum mismatch"),
    ("executable", "section 'executable' checksum mismatch"),
    ("module", "section 'module' checksum mismatch"),
])
@pytest.mark.parametrize("position", [0.0, 0.5, 1.0])
def test_flipped_bytes_are_refused(data, nothing_loads, section, match, position):
    ranges = layout(data)
    start, end = {"magic": (0, 8), "version": (8, 12), "length": (12, 20), "checksum": (20, 52)}.get(
        section, ranges.get(section, (0, 0)))
    i = start + int(position * (end - start - 1))
    damaged = bytearray(data)
    damaged[i] ^= 0x40
    with pytest.raises(hlopt.ExecutableFileError, match=match):
        hlopt.deserialize(bytes(damaged))


def test_appended_bytes_are_refused(data, nothing_loads):
    with pytest.raises(hlopt.ExecutableFileError, match="3 unexpected bytes after the last section"):
        hlopt.deserialize(data + b"abc")


LIES = {
    "input shape": (lambda m: m["signature"]["in_avals"][0].update(shape=[8, 5]),
                    r"does not match the module: input 0 is listed as float32\[8,5\], @main has tensor<8x4xf32>"),
    "input dtype": (lambda m: m["signature"]["in_avals"][1].update(dtype="int32"),
                    r"input 1 is listed as int32\[4,2\]"),
    "output count": (lambda m: (m["signature"].update(out_tree={"tuple": ["*"]}, out_avals=m["signature"]["out_avals"][:1]),
                                m.update(out_shardings=m["out_shardings"][:1])),
                     "1 outputs listed, @main has 2"),
    "output names": (lambda m: m["signature"].update(out_tree={"dict": [["s", "*"], ["z", "*"]]}),
                     r"output 1 is listed as result\['z'\], @main returns it as result\['t'\]"),
    "output structure": (lambda m: m["signature"].update(out_tree={"tuple": ["*", "*"]}),
                         r"output 0 is listed as result\[0\], @main returns it as result\['s'\]"),
    "leaf count": (lambda m: m["signature"].update(in_tree={"tuple": [{"tuple": ["*"]}, {"dict": []}]}),
                   "the input pytree has 1 leaves but 2 input avals"),
    "device count": (lambda m: m.update(device_count=4), "manifest says 4 devices but its mesh has 8"),
    "mesh": (lambda m: (m["signature"].update(mesh=dict(m["signature"]["mesh"], shape=[4], device_ids=[0, 1, 2, 3])),
                        m.update(device_count=4)),
             "partitioned for 8"),
    "sharding spec": (lambda m: m.update(in_shardings=[[None, "x"], []]),
                 r"does not match the executable: input 0 is listed with sharding"),
    "sharding axis": (lambda m: m.update(in_shardings=[["nope"], []]), r"input 0 is listed with sharding"),
    "sharding count": (lambda m: m.update(in_shardings=[]), "one sharding for each of the 2 values"),
    "format": (lambda m: m.update(format="something-else"), "'something-else' file, expected 'hlopt-executable'"),
    "dtype": (lambda m: m["signature"]["out_avals"][0].update(dtype="object"), "unsupported dtype 'object'"),
    "pytree node": (lambda m: m["signature"].update(out_tree={"os.system": ["*"]}), "unknown pytree node kind 'os.system'"),
    "jaxlib version type": (lambda m: m.update(jaxlib_version=1), "no valid 'jaxlib_version'"),
    "process count": (lambda m: m.update(process_count=0), "no valid 'process_count'"),
    "too many devices": (lambda m: m["signature"].update(mesh=dict(m["signature"]["mesh"], shape=[16],
                                                                   device_ids=list(range(100, 116)))),
                         "runs on 16 devices but only 8"),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_lying_manifests_are_refused(data, lie, monkeypatch):
    edit, match = LIES[lie]
    forged = forge(data, edit)
    if lie not in ("sharding spec", "sharding axis"):  # a sharding lie is found by comparing with what PJRT loaded
        monkeypatch.setattr(files, "load_executable", lambda *a, **k: pytest.fail("PJRT was reached"))
    with pytest.raises(hlopt.ExecutableFileError, match=match):
        hlopt.deserialize(forged)


def test_executable_of_another_program_is_refused(data):
    """A file whose executable section takes other inputs than its manifest and module list."""
    other = hlopt.lower(jnp.cos, X, mesh=jax.make_mesh((8,), ("x",)), in_shardings=(P("x"),)).compile()
    manifest, sections = files.read_file(data, "x")
    _, other_sections = files.read_file(other.serialize(), "x")
    forged = container.pack(manifest, dict(sections, executable=other_sections["executable"]))
    with pytest.raises(hlopt.ExecutableFileError,
                       match="does not match the executable: 2 inputs listed, the executable has 1"):
        hlopt.deserialize(forged)


def test_manifest_version_must_match_header(data, nothing_loads):
    manifest, sections = files.read_file(data, "x")
    text = json.dumps(dict(manifest, format_version=2)).encode()
    header = container.HEADER.pack(container.MAGIC, container.FORMAT_VERSION, len(text), hashlib.sha256(text).digest())
    with pytest.raises(hlopt.ExecutableFileError, match="manifest says format version 2 but the header says 1"):
        hlopt.deserialize(header + text + b"".join(sections.values()))


def test_sections_in_another_order_are_refused(data, nothing_loads):
    manifest, sections = files.read_file(data, "x")
    forged = container.pack(manifest, dict(reversed(sections.items())))
    with pytest.raises(hlopt.ExecutableFileError, match=r"section table lists \['module', 'executable'\]"):
        hlopt.deserialize(forged)


def test_pjrt_failure_is_reported_as_a_file_error(data, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError()

    monkeypatch.setattr(files, "load_executable", fail)
    with pytest.raises(hlopt.ExecutableFileError, match="PJRT cannot load the executable section: RuntimeError"):
        hlopt.deserialize(data)


def test_module_section_that_is_not_an_artifact_is_refused(data, nothing_loads):
    manifest, sections = files.read_file(data, "x")
    forged = container.pack(manifest, dict(sections, module=b"ML\xefR garbage"))
    with pytest.raises(hlopt.ExecutableFileError, match="not a StableHLO portable artifact"):
        hlopt.deserialize(forged)


def test_module_with_annotations_is_refused(data, nothing_loads):
    from hlopt.compiler.program import parse_module
    from hlopt.passes.mlir import serialize_portable_artifact

    module = parse_module("""
      func.func @main(%a: tensor<8x4xf32>, %b: tensor<4x2xf32>) -> (tensor<8x2xf32>, tensor<f32>) {
        %0:2 = stablehlo.custom_call @hlopt.jet(%a) {api_version = 4 : i32} : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<f32>)
        return %0#0, %0#1 : tensor<8x2xf32>, tensor<f32>
      }""")
    module.operation.attributes["mhlo.num_partitions"] = hlopt.passes.mlir.ir.IntegerAttr.get(
        hlopt.passes.mlir.ir.IntegerType.get_signless(32, module.context), 8)
    manifest, sections = files.read_file(data, "x")
    forged = container.pack(manifest, dict(sections, module=serialize_portable_artifact(module)))
    with pytest.raises(hlopt.ExecutableFileError, match="custom_call @hlopt.jet .*run the 'jet-expand' pass"):
        hlopt.deserialize(forged)


@pytest.mark.parametrize("foreign", ["npy", "empty", "text", "zip", "cache-entry"])
def test_foreign_files_are_refused(tmp_path, nothing_loads, foreign):
    path = tmp_path / "foreign"
    if foreign == "npy":
        np.save(tmp_path / "a.npy", np.ones(3))
        path = tmp_path / "a.npy"
    elif foreign == "zip":
        np.savez(tmp_path / "a.npz", a=np.ones(3))
        path = tmp_path / "a.npz"
    else:
        content = {"empty": b"", "text": b"module {}\n",
                   "cache-entry": container.pack({"format": "hlopt-cache-entry", "key": "0"}, {"executable": b"x"})}
        path.write_bytes(content[foreign])
    match = "is a 'hlopt-cache-entry' file" if foreign == "cache-entry" else "not an hlopt file"
    with pytest.raises(hlopt.ExecutableFileError, match=match):
        hlopt.load(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(hlopt.ExecutableFileError, match="cannot read .*nope.hlx.*No such file"):
        hlopt.load(tmp_path / "nope.hlx")


FUZZ_VALUES = [None, True, 0, -1, 3, 2.5, "", "x", "*", "float32", "Explicit", [], {}, ["*"], [1, 2], [[1]], ["x"],
               {"a": 1}, {"tuple": []}, {"tuple": [["*"]]}, {"node": [["x"], None, []]}, {"node": ["x", None, []]},
               {"dict": [[["k"], "*"]]}, {"list": {"a": 1}}, {"tuple": ["*", "*"]}]


def test_random_manifest_edits_never_escape_as_other_errors(data, monkeypatch):
    """Any edit either loads or is refused with ExecutableFileError: never a TypeError or a crash."""

    class Reached(BaseException):  # not an Exception: nothing on the way may turn it into another error
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(files, "load_executable", reached)
    monkeypatch.setattr(files, "compile_program", reached)
    manifest, sections = files.read_file(data, "x")

    def paths(obj, prefix=()):
        yield prefix
        children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in children:
            yield from paths(v, prefix + (k,))

    targets = [p for p in paths(manifest) if p and p[0] != "sections"]
    rng = random.Random(6)
    refused = 0
    for _ in range(400):
        edited = copy.deepcopy(manifest)
        for _ in range(rng.choice([1, 2])):
            *parents, last = rng.choice(targets)
            obj = edited
            try:
                for k in parents:
                    obj = obj[k]
                obj[last] = copy.deepcopy(rng.choice(FUZZ_VALUES))
            except (KeyError, IndexError, TypeError):
                continue  # an earlier edit replaced this path
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", hlopt.RecompileWarning)
                hlopt.deserialize(container.pack(edited, sections))
        except hlopt.ExecutableFileError:
            refused += 1
        except Reached:
            pass
    assert refused > 300
