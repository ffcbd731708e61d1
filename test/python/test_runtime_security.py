"""Damaged, forged and foreign files are refused with a clear error before PJRT sees them.

The attacker can edit any byte and recompute every checksum that needs no
key (forge.forge); only the user's key makes a MAC that verifies. These
tests never reach native code (fixtures fail them if PJRT is asked to load
an executable); the attacks that could run code or hang are in
test_runtime_attacks.py, each in a fresh process.
"""

from __future__ import annotations

import copy
import random
import warnings

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.runtime import container, files

from support import forge
from support.attack_worker import X, Y, f

@pytest.fixture(scope="module")
def data():
    mesh = jax.make_mesh((8,), ("x",))
    return hlopt.lower(f, X, Y, mesh=mesh, in_shardings=(P("x"), P())).compile().serialize()


@pytest.fixture
def no_native_code(monkeypatch):
    """Fail the test if PJRT is asked to load a serialized executable."""
    monkeypatch.setattr(files, "load_executable", lambda *a, **k: pytest.fail("native code was handed to PJRT"))


@pytest.fixture
def nothing_loads(monkeypatch, no_native_code):
    """Fail the test if PJRT is asked to load or compile anything."""
    monkeypatch.setattr(files, "compile_program", lambda *a, **k: pytest.fail("the module was compiled"))


# --- the container: damage and truncation are refused before anything is loaded ----------------


@pytest.mark.parametrize("where", ["magic", "header", "manifest", "executable", "module", "end"])
def test_truncated_files_are_refused(data, nothing_loads, where):
    ranges = forge.layout(data)
    cut = {"magic": 5, "header": 20, "manifest": ranges["manifest"][0] + 10,
           "executable": ranges["executable"][0] + 100, "module": ranges["module"][0] + 7,
           "end": len(data) - 1}[where]
    for trust in files.TRUST_LEVELS:
        with pytest.raises(hlopt.ExecutableFileError, match="truncated|not an hlopt file"):
            hlopt.deserialize(data[:cut], trust=trust)


@pytest.mark.parametrize("section,match", [
    ("magic", "not an hlopt file"),
    ("version", "format version"),
    ("length", "MAC does not verify|manifest|truncated|unexpected bytes"),
    ("total", "truncated|unexpected bytes"),
    ("mac", "MAC does not verify"),
    ("manifest", "MAC does not verify"),
    ("executable", "section 'executable' checksum mismatch"),
    ("module", "section 'module' (checksum mismatch|does not start as it must)"),
])
@pytest.mark.parametrize("position", [0.0, 0.5, 1.0])
def test_flipped_bytes_are_refused(data, nothing_loads, section, match, position):
    ranges = forge.layout(data)
    start, end = {"magic": (0, 8), "version": (8, 12), "length": (12, 20), "total": (20, 28),
                  "mac": (28, 60)}.get(section, ranges.get(section, (0, 0)))
    damaged = bytearray(data)
    damaged[start + int(position * (end - start - 1))] ^= 0x40
    with pytest.raises(hlopt.ExecutableFileError, match=match):
        hlopt.deserialize(bytes(damaged))


def test_appended_bytes_are_refused(data, nothing_loads):
    with pytest.raises(hlopt.ExecutableFileError, match="3 unexpected bytes after the last section"):
        hlopt.deserialize(data + b"abc")


def test_sections_in_another_order_are_refused(data, nothing_loads):
    manifest, sections = forge.unpack(data)
    with pytest.raises(hlopt.ExecutableFileError, match=r"section table lists \['module', 'executable'\]"):
        hlopt.deserialize(forge.resign(manifest, dict(reversed(sections.items()))))


def test_manifest_version_must_match_header(data, nothing_loads):
    manifest, sections = forge.unpack(data)
    from hlopt.runtime.keys import user_key

    forged = forge.forge_head(dict(manifest, format_version=1), forge.table(data), user_key())
    with pytest.raises(hlopt.ExecutableFileError, match=f"manifest says format version 1 but the header says {container.FORMAT_VERSION}"):
        hlopt.deserialize(forged + b"".join(sections.values()))


def test_older_format_says_to_compile_again(data, nothing_loads):
    old = bytearray(data)
    old[8:12] = (1).to_bytes(4, "little")
    with pytest.raises(hlopt.ExecutableFileError, match="format version 1.*older hlopt: compile it again"):
        hlopt.deserialize(bytes(old))


def test_bad_trust_is_a_value_error(data):
    with pytest.raises(ValueError, match="trust must be one of 'signed', 'portable', not 'yes'"):
        hlopt.deserialize(data, trust="yes")


def test_pjrt_failure_is_reported_as_a_file_error(data, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError()

    monkeypatch.setattr(files, "load_executable", fail)
    with pytest.raises(hlopt.ExecutableFileError, match="PJRT cannot load the executable section: RuntimeError"):
        hlopt.deserialize(data)


def test_module_section_that_is_not_an_artifact_is_refused(data, nothing_loads):
    manifest, sections = forge.unpack(data)
    forged = forge.forge(manifest, dict(sections, module=b"ML\xefR garbage"))
    with pytest.warns(hlopt.RecompileWarning), \
            pytest.raises(hlopt.ExecutableFileError, match="not a StableHLO portable artifact"):
        hlopt.deserialize(forged, trust="portable")


def test_module_with_annotations_is_refused(data, nothing_loads):
    from hlopt.compiler.program import parse_module
    from hlopt.passes.mlir import ir, serialize_portable_artifact

    module = parse_module("""
      func.func @main(%a: tensor<8x4xf32>, %b: tensor<4x2xf32>) -> (tensor<8x2xf32>, tensor<f32>) {
        %0:2 = stablehlo.custom_call @hlopt.jet(%a) {api_version = 4 : i32} : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<f32>)
        return %0#0, %0#1 : tensor<8x2xf32>, tensor<f32>
      }""")
    module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(32, module.context), 8)
    manifest, sections = forge.unpack(data)
    artifact = forge.retag(serialize_portable_artifact(module), manifest["signature"])
    forged = forge.forge(manifest, dict(sections, module=artifact))
    with pytest.warns(hlopt.RecompileWarning), \
            pytest.raises(hlopt.ExecutableFileError, match="custom call to 'hlopt.jet', which is not on hlopt's list"):
        hlopt.deserialize(forged, trust="portable")
    # a key holder's file from another jaxlib is recompiled from its artifact: the annotation is named
    stale = forge.resign(dict(manifest, jaxlib_version="0.0.1"), dict(sections, module=artifact))
    with pytest.warns(hlopt.RecompileWarning), \
            pytest.raises(hlopt.ExecutableFileError, match="custom_call @hlopt.jet .*run the 'jet-expand' pass"):
        hlopt.deserialize(stale)


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
        from hlopt.runtime.keys import user_key

        content = {"empty": b"", "text": b"module {}\n",
                   "cache-entry": container.pack({"format": "hlopt-cache-entry", "key": "0"},
                                                 {"executable": b"x", "module": b""}, user_key())}
        path.write_bytes(content[foreign])
    match = "is a 'hlopt-cache-entry' file" if foreign == "cache-entry" else "not an hlopt file"
    for trust in files.TRUST_LEVELS:
        with pytest.raises(hlopt.ExecutableFileError, match=match):
            hlopt.load(path, trust=trust)


def test_missing_file_and_folder_are_clear_errors(tmp_path):
    with pytest.raises(hlopt.ExecutableFileError, match="cannot read .*nope.hlx.*No such file"):
        hlopt.load(tmp_path / "nope.hlx")
    with pytest.raises(hlopt.ExecutableFileError, match="embedded null byte"):
        hlopt.load(str(tmp_path) + "/a\0b.hlx")

    with pytest.raises(hlopt.ExecutableFileError, match="not a regular file \\(a folder\\)"):
        hlopt.load(tmp_path)


# --- manifests that lie: the MAC refuses them; trust="portable" compares them with the module ----

LIES = {
    "input shape": (lambda m: m["signature"]["in_avals"][0].update(shape=[8, 5]),
                    r"does not match the module: input 0 is listed as float32\[8,5\], @main has tensor<8x4xf32>"),
    "input dtype": (lambda m: m["signature"]["in_avals"][1].update(dtype="int32"),
                    r"input 1 is listed as int32\[4,2\]"),
    "output count": (lambda m: (m["signature"].update(out_tree={"tuple": ["*"]}, out_avals=m["signature"]["out_avals"][:1]),
                                m.update(out_shardings=m["out_shardings"][:1], flags=dict(
                                    m["flags"], propagate_to_output=m["flags"]["propagate_to_output"][:1]))),
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
    "build flags": (lambda m: m["flags"].update(shardy=False), "build flags differ"),
    "too many devices": (lambda m: (m["signature"].update(mesh=dict(m["signature"]["mesh"], shape=[100000],
                                                                    device_ids=list(range(100000)))),
                                    m.update(device_count=100000)),
                         "runs on 100000 devices but only 8"),
    "mesh overflow": (lambda m: m["signature"].update(mesh=dict(m["signature"]["mesh"], shape=[2**32, 2**32],
                                                                axis_names=["x", "y"], axis_types=["Auto", "Auto"],
                                                                device_ids=[])),
                      "do not fill shape"),
    "rank": (lambda m: m["signature"]["in_avals"][0].update(shape=[1] * 100000), "rank 100000"),
    "name": (lambda m: m["signature"].update(name="f\x1b]0;owned\x07"), "malformed signature name"),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_lying_manifests_are_refused(data, lie, no_native_code):
    """A forger who also rewrites the signature the module records: each lie is found by its own check."""
    edit, match = LIES[lie]
    manifest, sections = forge.unpack(data)
    edit(manifest)
    forged = forge.forge(manifest, dict(sections, module=forge.retag(sections["module"], manifest["signature"])))
    with pytest.raises(hlopt.ExecutableFileError, match="MAC does not verify"):
        hlopt.deserialize(forged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hlopt.RecompileWarning)
        with pytest.raises(hlopt.ExecutableFileError, match=match):
            hlopt.deserialize(forged, trust="portable")


@pytest.mark.parametrize("lie", ["output count", "device count", "sharding spec", "too many devices", "rank"])
def test_lies_of_a_key_holder_are_refused_before_a_call(data, lie):
    """Behind the MAC: what PJRT loaded is compared with the manifest (counts, ranks, devices, shardings)."""
    edit, match = LIES[lie]
    manifest, sections = forge.unpack(data)
    edit(manifest)
    match = {"output count": "does not match the executable: 1 outputs listed, the executable has 2"}.get(lie, match)
    with pytest.raises(hlopt.ExecutableFileError, match=match):
        hlopt.deserialize(forge.resign(manifest, sections))


def test_manifest_and_module_must_record_one_signature(data, no_native_code):
    manifest, sections = forge.unpack(data)
    manifest["signature"]["name"] = "h"
    with pytest.warns(hlopt.RecompileWarning), pytest.raises(
            hlopt.ExecutableFileError, match="the signature the module records differs from the manifest's"):
        hlopt.deserialize(forge.forge(manifest, sections), trust="portable")


FUZZ_VALUES = [None, True, 0, -1, 3, 2.5, "", "x", "*", "float32", "Explicit", [], {}, ["*"], [1, 2], [[1]], ["x"],
               {"a": 1}, {"tuple": []}, {"tuple": [["*"]]}, {"node": [["x"], None, []]}, {"node": ["x", None, []]},
               {"dict": [[["k"], "*"]]}, {"list": {"a": 1}}, {"tuple": ["*", "*"]}, "\x1b[31m", 2**70]


def test_random_manifest_edits_never_escape_as_other_errors(data, monkeypatch):
    """Any forged edit is refused with ExecutableFileError (or, portable, compiled): never a TypeError or a crash."""

    class Reached(BaseException):  # not an Exception: nothing on the way may turn it into another error
        pass

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(files, "load_executable", lambda *a, **k: pytest.fail("native code was handed to PJRT"))
    monkeypatch.setattr(files, "compile_program", reached)
    manifest, sections = forge.unpack(data)

    def paths(obj, prefix=()):
        yield prefix
        children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in children:
            yield from paths(v, prefix + (k,))

    targets = [p for p in paths(manifest) if p]
    rng = random.Random(6)
    refused = 0
    for _ in range(300):
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
        forged = forge.forge(edited, sections)
        for trust in files.TRUST_LEVELS:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", hlopt.RecompileWarning)
                    hlopt.deserialize(forged, trust=trust)
            except hlopt.ExecutableFileError:
                refused += 1
            except Reached:
                assert trust == "portable"
    assert refused > 500


# --- a genuine file under another key --------------------------------------------------------------


def test_file_from_another_key_is_refused_then_portable(tmp_path, monkeypatch):
    compiled = hlopt.lower(f, X, Y).compile()
    monkeypatch.setenv("HLOPT_KEY", "key A, 40 bytes long, " * 2)
    compiled.save(tmp_path / "a.hlx")
    monkeypatch.setenv("HLOPT_KEY", "key B, 40 bytes long, " * 2)
    with pytest.raises(hlopt.ExecutableFileError, match="MAC does not verify with HLOPT_KEY.*trust='portable'"):
        hlopt.load(tmp_path / "a.hlx")
    with pytest.warns(hlopt.RecompileWarning, match="not authenticated"):
        loaded = hlopt.load(tmp_path / "a.hlx", trust="portable")
    out, ref = loaded(X, Y), jax.jit(f)(X, Y)
    np.testing.assert_allclose(out["s"], ref["s"], rtol=1e-6)
    np.testing.assert_allclose(out["t"], ref["t"], rtol=1e-6)
    loaded.save(tmp_path / "b.hlx")  # saved again: now under key B, it loads as it is
    monkeypatch.setattr(files, "compile_program", lambda *a, **k: pytest.fail("a signed file was recompiled"))
    again = hlopt.load(tmp_path / "b.hlx")
    np.testing.assert_allclose(again(X, Y)["s"], jax.jit(f)(X, Y)["s"], rtol=1e-6)
    monkeypatch.setenv("HLOPT_KEY", "key A, 40 bytes long, " * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(hlopt.load(tmp_path / "a.hlx")(X, Y)["s"], jax.jit(f)(X, Y)["s"], rtol=1e-6)


def test_weak_key_is_refused(monkeypatch):
    monkeypatch.setenv("HLOPT_KEY", "short")
    with pytest.raises(ValueError, match="HLOPT_KEY has 5 bytes; use at least 32"):
        hlopt.lower(f, X, Y).compile().serialize()
