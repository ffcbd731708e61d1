"""Every refusal of a file, key or input is an ExecutableFileError (the CLI: one line, exit status 1).

Each case runs in a capped process of its own (support/sandbox.py): `hlopt run` inputs that
lie (a zip bomb, a .npy whose header and size disagree, another shape), an
`--output` that is a link, names that are not UTF-8, NUL bytes in locations,
a manifest without its signature, weak or unusable keys. Where the harness
could miss the bad outcome a control shows it: numpy itself blows up on the
bomb, writing through the link does overwrite its target.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import hlopt

from support import forge
from support.attack_worker import X, Y, f
from support.sandbox import Outcome, assert_survived, attack, run_capped, run_forked, write

BOMB_SHAPE = (16384, 16384)  # float64: 2 GiB of zeros, about 10 MB compressed: as much as BOMB_CAP
BOMB_CAP = 2 << 30  # an hlopt process runs in it, but not with the bomb's data
CAP = 3 << 30


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("refusals")
    hlopt.lower(f, X, Y).compile().save(folder / "f.hlx")
    np.save(folder / "x.npy", X)
    np.save(folder / "y.npy", Y)
    return folder


def cli(*argv: str, cwd: Path, env: dict | None = None, memory: int = CAP) -> Outcome:
    outcome = run_forked(["hlopt", *argv], cwd=cwd, env=env, memory=memory)
    assert not outcome.timed_out and outcome.signal is None, outcome.describe()
    return outcome


def one_line_error(outcome: Outcome, message: str) -> None:
    assert outcome.returncode == 1, outcome.describe()
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hlopt: error: ") and message in lines[0], outcome.stderr
    assert "\x00" not in outcome.stderr and "Traceback" not in outcome.stderr


def npy_header(shape: tuple[int, ...], dtype) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": shape})
    return buffer.getvalue()  # the magic, the header's length and the header


def zip_bomb(path: Path, shape: tuple[int, ...]) -> None:
    """A .npz whose one array, `shape` float64 zeros, is written (and compressed) a chunk at a time."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z, \
            z.open("x.npy", "w", force_zip64=True) as member:
        member.write(npy_header(shape, np.float64))
        chunk, left = bytes(64 << 20), int(np.prod(shape)) * 8
        while left:
            member.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))


def test_a_zip_bomb_is_refused_from_its_header(program, tmp_path):
    bomb = tmp_path / "bomb.npz"
    zip_bomb(bomb, BOMB_SHAPE)
    assert bomb.stat().st_size < 32 << 20
    control = run_capped(["-c", "import sys, numpy as np; np.load(sys.argv[1])['x'].sum()", str(bomb)],
                         memory=BOMB_CAP)
    assert control.returncode != 0 and "MemoryError" in control.stderr, "numpy read the bomb: the test proves nothing"
    one_line_error(cli("run", "f.hlx", "--input", str(bomb), "--input", "y.npy", cwd=program, memory=BOMB_CAP),
                   f"input '{bomb}', array 'x.npy' holds float64{list(BOMB_SHAPE)} but f takes float32[8, 4] as input 0")


def test_npy_headers_that_lie_about_the_data_are_refused_before_reading(program, tmp_path):
    cases = {
        "long.npy": (npy_header((8, 4), np.float32) + bytes(128), 1 << 30,
                     "its data is 1073741952 bytes, its header says 128"),  # a sparse 1 GiB tail
        "short.npy": (npy_header((8, 4), np.float32) + bytes(64), 0, "its data is 64 bytes, its header says 128"),
        "object.npy": (npy_header((8, 4), object), 0, "holds object[8, 4] but f takes float32[8, 4]"),
        "header.npy": (np.lib.format.magic(1, 0) + b"\x10\x00{'descr': nope}  \n", 0, "not a valid .npy header"),
    }
    for name, (data, extra, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        if extra:
            os.truncate(path, len(data) + extra)
        one_line_error(cli("run", "f.hlx", "--input", str(path), "--input", "y.npy", cwd=program), message)
    bad_zip = tmp_path / "bad.npz"
    bad_zip.write_bytes(b"PK\x03\x04" + bytes(100))
    one_line_error(cli("run", "f.hlx", "--input", str(bad_zip), cwd=program), "is not a valid .npz file")
    os.mkfifo(tmp_path / "fifo.npy")
    one_line_error(cli("run", "f.hlx", "--input", str(tmp_path / "fifo.npy"), cwd=program), "is not a regular file")
    one_line_error(cli("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", "--input", "y.npy", cwd=program),
                   "3 were given (--input)")


def test_output_is_written_atomically_never_through_a_link(program, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = program / "out.npz"
    link.symlink_to(victim)
    control = tmp_path / "control-link"
    control.symlink_to(tmp_path / "control-target")
    (tmp_path / "control-target").write_text("precious")
    np.savez(open(control, "wb"), a=np.ones(1))  # the control: writing to the path follows the link
    assert (tmp_path / "control-target").read_bytes() != b"precious"
    done = cli("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", "--output", "out.npz", cwd=program)
    assert_survived(done)
    assert victim.read_text() == "precious" and not link.is_symlink()
    assert done.stdout.startswith("wrote out.npz: ")
    with np.load(link) as out:
        np.testing.assert_allclose(out["s"], np.sin(X) @ Y, rtol=1e-5)
    done = cli("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", "--output", "results", cwd=program)
    assert_survived(done)
    assert done.stdout.startswith("wrote results.npz: ") and (program / "results.npz").is_file()
    assert not (program / "results").exists()
    assert not [p for p in program.iterdir() if ".tmp-" in p.name]


NON_UTF8 = """func.func private @"\\FF\\FE"(%x: tensor<8x4xf32>, %y: tensor<4x2xf32>) -> tensor<8x2xf32> {
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  return %0 : tensor<8x2xf32>
}
func.func @main(%x: tensor<8x4xf32>, %y: tensor<4x2xf32>) -> (tensor<8x2xf32>, tensor<f32>) {
  %0 = func.call @"\\FF\\FE"(%x, %y) : (tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  return %0, %z : tensor<8x2xf32>, tensor<f32>
}"""
NUL_LOCATION = """func.func @main(%x: tensor<8x4xf32>, %y: tensor<4x2xf32>) -> (tensor<8x2xf32>, tensor<f32>) {
  %0 = stablehlo.custom_call @not_allowed(%x) {api_version = 4 : i32} : (tensor<8x4xf32>) -> tensor<8x2xf32> loc("/tmp/a\\00b\\1B[2J.py":3:4)
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  return %0, %z : tensor<8x2xf32>, tensor<f32>
}"""


def forged_module(tmp_path: Path, text: str, name: str) -> str:
    from hlopt.compiler.program import parse_module
    from hlopt.passes.mlir import serialize_portable_artifact

    manifest, sections = forge.unpack(hlopt.lower(f, X, Y).compile().serialize())
    artifact = forge.retag(serialize_portable_artifact(parse_module(text)), manifest["signature"])
    return write(tmp_path, name, forge.forge(manifest, dict(sections, module=artifact)))


def test_names_that_are_not_utf8_are_refused_typed(program, tmp_path):
    path = forged_module(tmp_path, NON_UTF8, "non-utf8.hlx")
    (portable,) = attack(tmp_path, [{"kind": "load", "file": path, "trust": "portable"}])
    assert "escaped bytes are not UTF-8 (byte 0 is 0xff)" in portable["refused"]
    one_line_error(cli("run", path, "--trust", "portable", "--input", "x.npy", "--input", "y.npy", cwd=program),
                   "escaped bytes are not UTF-8")
    (tmp_path / "non-utf8.mlir").write_text(NON_UTF8)
    for command in (["hlopt-opt", "non-utf8.mlir", "-p", "hlopt-default"],
                    ["hlopt", "compile", "non-utf8.mlir", "-o", "x.hlx"]):
        outcome = run_capped(command, cwd=tmp_path)
        assert outcome.returncode == 1 and outcome.stderr.strip() == (
            "non-utf8.mlir:1:20: error: a quoted name or string whose escaped bytes are not UTF-8 "
            "(byte 0 is 0xff); names must be UTF-8 text"), outcome.describe()


def test_nul_bytes_in_a_location_are_refused_typed_and_shown_escaped(program, tmp_path):
    path = forged_module(tmp_path, NUL_LOCATION, "nul.hlx")
    (portable,) = attack(tmp_path, [{"kind": "load", "file": path, "trust": "portable"}])
    assert "refused to compile the module section: /tmp/a\\x00b\\x1b[2J.py:3:4: custom call to 'not_allowed'" in \
        portable["refused"]
    (tmp_path / "nul.mlir").write_text(NUL_LOCATION.replace("not_allowed", "hlopt.jet"))
    outcome = run_capped(["hlopt-opt", "nul.mlir", "-p", "hlopt-default"], cwd=tmp_path)
    assert outcome.returncode == 1 and outcome.stderr.startswith("/tmp/a\\x00b\\x1b[2J.py:3:4: error: "), \
        outcome.describe()
    assert len(outcome.stderr.strip().splitlines()) == 1 and "\x00" not in outcome.stderr


def test_locations_are_never_looked_up_on_disk(tmp_path):
    import jax

    from hlopt.passes.ir import locations

    link = tmp_path / "link"
    link.symlink_to(Path(jax.__file__).parent)
    assert locations.in_library(str(Path(jax.__file__).parent / "numpy" / "x.py"))
    assert not locations.in_library(str(link / "numpy" / "x.py"))  # the text, not the file it leads to
    assert not locations.in_library("/tmp/a\x00b.py")
    assert locations.format_location('loc("/x/y\\00z.py":1:2)') == "/x/y\\x00z.py:1:2"


def test_a_manifest_without_its_signature_is_refused_typed(program, tmp_path):
    manifest, sections = forge.unpack((program / "f.hlx").read_bytes())
    del manifest["signature"]
    path = write(tmp_path, "nosig.hlx", forge.resign(manifest, sections))
    signed, portable = attack(tmp_path, [{"kind": "load", "file": path, "trust": t} for t in ("signed", "portable")])
    assert "the manifest has no valid 'signature'" in signed["refused"] + portable["refused"]
    one_line_error(cli("run", path, "--input", "x.npy", "--input", "y.npy", cwd=program),
                   "the manifest has no valid 'signature'")


@pytest.mark.parametrize("key, message", [
    (" " * 32, "HLOPT_KEY is one byte repeated (b' ')"),
    ("short but random", "HLOPT_KEY has 16 bytes"),
])
def test_weak_keys_are_one_line_refusals(program, key, message):
    one_line_error(cli("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", cwd=program,
                       env={"HLOPT_KEY": key}), message)


def test_a_folder_at_the_key_path_warns_and_compiles(program, tmp_path):
    config = tmp_path / "config"
    (config / "hlopt" / "key").mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(config), "HLOPT_CACHE_DIR": str(tmp_path / "cache")}
    script = ("import warnings, numpy as np, hlopt\nwith warnings.catch_warnings(record=True) as w:\n"
              "    warnings.simplefilter('always')\n    c = hlopt.lower(lambda x: x + 1, np.ones(3, np.float32)).compile()\n"
              "print(float(c(np.ones(3, np.float32)).sum()), [str(m.message) for m in w])")
    outcome = run_forked(["-c", script], env=env)
    assert_survived(outcome)
    assert outcome.stdout.startswith("6.0 ") and "compiling without the compilation cache: the key file" in outcome.stdout
    one_line_error(cli("run", "f.hlx", "--input", "x.npy", "--input", "y.npy", cwd=program, env=env),
                   "is not a regular file; remove it, or set HLOPT_KEY")


def test_each_input_file_is_opened_once(tmp_path, monkeypatch):
    """`hlopt run` counts the arrays and reads them from one open of each file (a file swapped
    between two opens could pass the count and then be read as another)."""
    from hlopt.cli import aot

    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "xy.npz", x=X, y=Y)
    opened = []
    real = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    import jax

    avals = [jax.core.ShapedArray(X.shape, X.dtype), jax.core.ShapedArray(Y.shape, Y.dtype)]
    got = aot.read_inputs([str(tmp_path / "xy.npz")], avals, "f")
    assert opened == [str(tmp_path / "xy.npz")]
    np.testing.assert_array_equal(got[0], X)
    np.testing.assert_array_equal(got[1], Y)
    opened.clear()
    with pytest.raises(hlopt.ExecutableFileError, match=r"f takes 2 arrays, 3 were given"):
        aot.read_inputs([str(tmp_path / "x.npy"), str(tmp_path / "xy.npz")], avals, "f")
    assert opened == [str(tmp_path / "x.npy"), str(tmp_path / "xy.npz")]
