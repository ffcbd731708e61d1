"""Attacks on executable files and the cache, each in a fresh process with a timeout.

The attacker can edit any byte of a file or cache entry and recompute every
checksum that needs no key (forge.forge), put FIFOs, devices, symlinks and
huge sparse files where files are expected, and write terminal escape
sequences into manifests. Each attack runs in a process of its own
(support/attack_worker.py, or the `hlopt` command), forked from one that has only imported jax
(sandbox.run_forked), with a timeout; the tests check
that it neither crashed nor hung, that no payload ran, and that every case
was refused with an ExecutableFileError (the CLI: one line, exit status 1)
or, with trust="portable", gave the right numbers.
"""

from __future__ import annotations

import hashlib
import base64
import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.runtime import container, files

from support import forge, script
from support.attack_worker import X, Y, f, g
from support.sandbox import Outcome, assert_survived, attack, run_forked, write

WORKER = script("attack_worker")


@pytest.fixture(scope="module")
def identity() -> bytes:
    """The file of `lambda x: x` on a float32[4], whose module section the forger replaces."""
    return hlopt.lower(lambda x: x, np.ones(4, np.float32)).compile().serialize()


@pytest.fixture(scope="module")
def data():
    mesh = jax.make_mesh((8,), ("x",))
    return hlopt.lower(f, X, Y, mesh=mesh, in_shardings=(P("x"), P())).compile().serialize()


def want(fun=f) -> dict:
    return {jax.tree_util.keystr(p): np.asarray(x).tolist()
            for p, x in jax.tree_util.tree_flatten_with_path(jax.jit(fun)(X, Y))[0]}


def assert_close(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for k in expected:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(expected[k]), rtol=1e-5, atol=1e-5)


def hlopt_cli(*argv: str, env: dict | None = None, cwd: str | os.PathLike | None = None) -> Outcome:
    """`hlopt ARGV` under sandbox.py's caps (a process forked from its server); it must neither crash nor hang."""
    proc = run_forked(["hlopt", *argv], env=env, cwd=cwd)
    assert not proc.timed_out and proc.signal is None, proc.describe()
    return proc


def assert_one_line_error(proc: Outcome, message: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("hlopt: error: ") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.skipif(not forge.can_patch_kernels(), reason="the payload is x86-64 machine code")
def test_patched_kernel_never_runs(tmp_path):
    marker = tmp_path / "payload-ran"
    compiled = hlopt.lower(f, X, Y).compile()
    manifest, sections = forge.unpack(compiled.serialize())
    patched = forge.patch_first_kernel(sections["executable"], str(marker))
    # The control: PJRT itself runs the patched kernel, so the payload is real.
    control = write(tmp_path, "control.bin", patched)
    script = ("import sys, jax, numpy as np; from jax.extend import backend; from jaxlib import xla_client as xc\n"
              "e = backend.get_backend().deserialize_executable(open(sys.argv[1], 'rb').read(), "
              "xc.DeviceList(tuple(jax.devices()[:1])), xc.CompileOptions())\n"
              "a = [jax.device_put(np.ones((8, 4), np.float32)), jax.device_put(np.ones((4, 2), np.float32))]\n"
              "e.execute_sharded(a).disassemble_into_single_device_arrays()[0][0].block_until_ready()\n")
    run_forked(["-c", script, control])
    assert marker.exists(), "the payload did not run even when PJRT loaded it: the test proves nothing"
    marker.unlink()

    forged = write(tmp_path, "patched.hlx", forge.forge(manifest, dict(sections, executable=patched)))
    signed, portable = attack(tmp_path, [{"kind": "load", "file": forged, "trust": "signed"},
                                         {"kind": "load", "file": forged, "trust": "portable"}])
    assert "MAC does not verify" in signed["refused"]
    assert_close(portable["out"], want())
    assert_one_line_error(hlopt_cli("run", forged), "MAC does not verify")
    np.savez(tmp_path / "xy.npz", X, Y)
    ran = hlopt_cli("run", forged, "--trust", "portable", "--input", str(tmp_path / "xy.npz"),
                    "--output", str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["s"], jax.jit(f)(X, Y)["s"], rtol=1e-5)
    shown = hlopt_cli("inspect", forged)
    assert shown.returncode == 0 and "MAC:        DOES NOT VERIFY" in shown.stdout
    assert_one_line_error(hlopt_cli("inspect", forged, "--trust", "signed"), "MAC does not verify")
    assert not marker.exists(), "the payload ran"


def test_spliced_sections_never_run(tmp_path):
    mesh8, mesh4 = jax.make_mesh((8,), ("x",)), jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    f8 = hlopt.lower(f, X, Y, mesh=mesh8, in_shardings=(P("x"), P())).compile()
    f4 = hlopt.lower(f, X, Y, mesh=mesh4, in_shardings=(P("x"), P())).compile()
    g4 = hlopt.lower(g, X, Y, mesh=mesh4, in_shardings=(P("x"), P())).compile()
    m4, s4 = forge.unpack(f4.serialize())
    _, s8 = forge.unpack(f8.serialize())
    _, sg = forge.unpack(g4.serialize())
    cases = {
        "8-device executable, 4-device manifest": forge.forge(m4, dict(s4, executable=s8["executable"])),
        "another program's executable, same signature": forge.forge(m4, dict(s4, executable=sg["executable"])),
        "another program's module": forge.forge(m4, dict(s4, module=sg["module"])),
        "the 8-device program's module": forge.forge(m4, dict(s4, module=s8["module"])),
    }
    paths = [write(tmp_path, f"splice{i}.hlx", data) for i, data in enumerate(cases.values())]
    results = attack(tmp_path, [{"kind": "load", "file": p, "trust": t} for p in paths for t in files.TRUST_LEVELS])
    for i, name in enumerate(cases):
        signed, portable = results[2 * i : 2 * i + 2]
        assert "MAC does not verify" in signed["refused"], name
        if "module" in name:
            assert "signature the module records differs" in portable["refused"], name
        else:
            assert_close(portable["out"], want())  # f's artifact, never the spliced executable


def test_cache_poisoning_is_a_miss(tmp_path):
    """Whoever can write into the cache folder cannot make the next process run their code."""
    cache = tmp_path / "cache"
    env = {"HLOPT_CACHE_DIR": str(cache)}
    names = ("executable", "module")
    (first, second) = attack(tmp_path, [{"kind": "compile", "program": "f"}, {"kind": "compile", "program": "g"}], env)
    assert (first["cache"], second["cache"]) == ([0, 1], [0, 2])
    by_size = sorted(cache.glob("*.hlx"), key=lambda p: p.stat().st_mtime)
    entry, g_entry = by_size
    genuine = entry.read_bytes()
    manifest, sections = forge.unpack(genuine, "hlopt-cache-entry", names)
    g_sections = forge.unpack(g_entry.read_bytes(), "hlopt-cache-entry", names)[1]
    marker = tmp_path / "payload-ran"
    poisons = {
        "g's entry under f's name": g_entry.read_bytes(),
        "g's executable, checksums recomputed": forge.forge(manifest, dict(sections, executable=g_sections["executable"])),
        "fifo": None, "symlink to /dev/zero": None, "huge sparse": None,
    }
    if forge.can_patch_kernels():
        poisons["patched kernel"] = forge.forge(manifest, dict(
            sections, executable=forge.patch_first_kernel(sections["executable"], str(marker))))
    for name, poison in poisons.items():
        entry.unlink()
        if name == "fifo":
            os.mkfifo(entry)
        elif name == "symlink to /dev/zero":
            entry.symlink_to("/dev/zero")
        elif name == "huge sparse":
            with open(entry, "wb") as fh:
                fh.write(genuine[: container.HEADER.size])
                fh.truncate(1 << 36)
        else:
            entry.write_bytes(poison)
        miss, hit = attack(tmp_path, [{"kind": "compile", "program": "f"}] * 2, env)
        assert (miss["cache"], hit["cache"]) == ([0, 1], [1, 1]), name  # a miss, replaced by an entry that hits
        assert_close(miss["out"], want())
        assert_close(hit["out"], want())
        assert entry.is_file() and not entry.is_symlink() and entry.stat().st_size < 1 << 30, name
    assert not marker.exists(), "the payload ran"


def test_fifos_devices_and_huge_files_are_refused_without_reading(tmp_path, data):
    fifo = tmp_path / "f.hlx"
    os.mkfifo(fifo)
    header = data[: container.HEADER.size]
    huge = tmp_path / "huge.hlx"
    with open(huge, "wb") as fh:  # a genuine header that claims the whole 64 GiB sparse file
        fh.write(header[:20] + (1 << 36).to_bytes(8, "little") + header[28:])
        fh.truncate(1 << 36)
    manifest, sections = forge.unpack(data)
    exe = sections["executable"]
    head = forge.forge_head(manifest, [{"name": "executable", "size": len(exe),
                                        "sha256": hashlib.sha256(exe).hexdigest()},
                                       {"name": "module", "size": 3 << 29, "sha256": "0" * 64}])
    big_module = tmp_path / "big-module.hlx"  # a forged 1.5 GiB module section of zeros
    with open(big_module, "wb") as fh:
        fh.write(head + exe)
        fh.truncate(len(head) + len(exe) + (3 << 29))
    too_big = tmp_path / "too-big.hlx"  # a section larger than XLA can hold
    head = forge.forge_head(manifest, [{"name": "executable", "size": 1 << 33, "sha256": "0" * 64},
                                       {"name": "module", "size": 0, "sha256": "0" * 64}])
    with open(too_big, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + (1 << 33))
    paths = [fifo, "/dev/zero", huge, big_module, too_big]
    cases = [{"kind": "load", "file": str(p), "trust": t} for p in paths for t in files.TRUST_LEVELS]
    results = attack(tmp_path, cases)
    for case, result in zip(cases, results):
        assert "refused" in result, (case, result)
    assert "not a regular file (a FIFO)" in results[0]["refused"]
    assert "not a regular file (a character device)" in results[2]["refused"]
    assert "section 'module' does not start as it must" in results[7]["refused"]
    assert "section 'executable': malformed size" in results[9]["refused"]
    for argv in (["inspect", str(fifo)], ["run", str(fifo)], ["inspect", "/dev/zero"], ["run", str(huge)],
                 ["run", str(big_module), "--trust", "portable"]):
        assert_one_line_error(hlopt_cli(*argv), "")


def test_forged_device_counts_are_capped(tmp_path, data):
    manifest, sections = forge.unpack(data)
    for count in (100000, 1000):
        manifest["signature"]["mesh"].update(shape=[count], device_ids=list(range(count)))
        manifest["device_count"] = count
        forged = write(tmp_path, f"d{count}.hlx", forge.forge(manifest, dict(
            sections, module=forge.retag(sections["module"], manifest["signature"]))))
        signed, portable = attack(tmp_path, [{"kind": "load", "file": forged, "trust": t} for t in files.TRUST_LEVELS])
        assert "MAC does not verify" in signed["refused"]
        assert f"runs on {count} devices but only 8" in portable["refused"]
    proc = hlopt_cli("run", str(tmp_path / "d100000.hlx"), "--trust", "portable", env={"XLA_FLAGS": ""})
    assert_one_line_error(proc, "the program runs on 100000 devices; hlopt run sets up at most 1024 host devices")


@pytest.fixture(scope="module")
def bcoo_program():
    """A compiled program with BCOO arguments and results, its arguments (m, v), and m as a dense array."""
    dense = np.array([[1, 0, 2, 0], [0, 0, 3, 4], [5, 0, 0, 0]], np.float32)

    def h(m, v):
        return {"t": hlopt.sparse.bcoo_transpose(m, permutation=(1, 0)), "mv": hlopt.sparse.bcoo_multiply_dense(m, v)}

    m, v = hlopt.sparse.BCOO.fromdense(dense), np.arange(1, 5, dtype=np.float32)
    return hlopt.lower(h, m, v).compile(), (m, v), dense


BCOO_LIES = {
    "sparse dim": ([5, 3], "signature the module records differs"),
    "rank": ([4, 3, 1], "the buffers hold 0 batch, 2 sparse and 0 dense dims"),
    "index range": ([4, 300], "int8 indices cannot address every sparse dim"),
}


@pytest.mark.parametrize("lie", list(BCOO_LIES))
def test_forged_bcoo_shapes_are_refused(tmp_path, lie, bcoo_program):
    compiled, (m, v), dense = bcoo_program
    manifest, sections = forge.unpack(compiled.serialize())
    shape, match = BCOO_LIES[lie]
    transposed = manifest["signature"]["out_tree"]["dict"][1][1]["export"]  # [name, aux, children] of "t"
    aux = json.loads(base64.b64decode(transposed[1]))
    assert transposed[0] == "hlopt.sparse.BCOO" and aux["shape"] == [4, 3]
    transposed[1] = base64.b64encode(json.dumps(dict(aux, shape=shape)).encode()).decode()
    if lie == "index range":
        manifest["signature"]["out_avals"][2]["dtype"] = "int8"  # leaves: mv, t.data, t.indices
    forged = write(tmp_path, "bcoo.hlx", forge.forge(manifest, sections))
    signed, portable = attack(tmp_path, [{"kind": "load", "file": forged, "trust": t} for t in files.TRUST_LEVELS])
    assert "MAC does not verify" in signed["refused"]
    assert match in portable["refused"], portable


def test_bcoo_file_under_another_key_gives_the_right_sums(tmp_path, bcoo_program):
    compiled, (m, v), dense = bcoo_program
    path = tmp_path / "bcoo.hlx"
    compiled.save(path)
    script = ("import sys, numpy as np, hlopt, warnings\nwarnings.simplefilter('ignore')\n"
              "c = hlopt.load(sys.argv[1], trust='portable')\n"
              "dense = np.array([[1, 0, 2, 0], [0, 0, 3, 4], [5, 0, 0, 0]], np.float32)\n"
              "out = c(hlopt.sparse.BCOO.fromdense(dense), np.arange(1, 5, dtype=np.float32))\n"
              "np.savez(sys.argv[2], t=np.asarray(out['t'].todense()), mv=np.asarray(out['mv']))\n")
    assert_survived(run_forked(["-c", script, str(path), str(tmp_path / "out.npz")],
                               env={"HLOPT_KEY": "another key " * 4}))
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["t"], dense.T)
    from jax.experimental import sparse as jsparse

    np.testing.assert_array_equal(out["mv"], jsparse.bcoo_multiply_dense(jsparse.BCOO.fromdense(dense), v))


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e\r\n"


def test_escape_sequences_in_a_manifest_are_shown_escaped(tmp_path, data):
    manifest, sections = forge.unpack(data)
    manifest["pipeline"] = "hlopt-default" + ESCAPES
    manifest["jax_version"] = ESCAPES
    manifest["signature"]["name"] = "f" + ESCAPES
    manifest["signature"]["mesh"]["axis_names"] = ["x" + ESCAPES]
    manifest["signature"]["out_tree"] = {"dict": [["s" + ESCAPES, "*"], ["t", "*"]]}
    forged = write(tmp_path, "escapes.hlx", forge.forge(manifest, sections))
    shown = None
    for argv in (["inspect", forged], ["inspect", forged, "--json"], ["run", forged],
                 ["run", forged, "--trust", "portable"], ["inspect", forged, "--trust", "portable"]):
        proc = hlopt_cli(*argv)
        shown = proc.stdout if shown is None else shown  # `hlopt inspect FILE`'s
        for stream in (proc.stdout, proc.stderr):
            assert not any(c in stream for c in "\x1b\x07\r\u202e"), (argv, stream)
        if argv[0] == "run" or "--trust" in argv:
            assert_one_line_error(proc, "")
    assert "program:    f\\x1b]0;owned\\x07" in shown and "pipeline:   hlopt-default\\x1b" in shown
    assert "s\\x1b]0;owned" in shown and "mesh x\\x1b" in shown


def nested_cases(depth: int) -> str:
    """@main with `depth` nested `case` regions, each on an index read from the input (XLA keeps them)."""
    inner = "stablehlo.return %a : tensor<4xf32>"
    for i in range(depth):
        inner = (f"%s{i} = stablehlo.slice %a [0:1] : (tensor<4xf32>) -> tensor<1xf32>\n"
                 f"%t{i} = stablehlo.reshape %s{i} : (tensor<1xf32>) -> tensor<f32>\n"
                 f"%i{i} = stablehlo.convert %t{i} : (tensor<f32>) -> tensor<i32>\n"
                 f'%r{i} = "stablehlo.case"(%i{i}) ({{\n{inner}\n}}) : (tensor<i32>) -> tensor<4xf32>\n'
                 f"stablehlo.return %r{i} : tensor<4xf32>")
    body = inner.rsplit("stablehlo.return", 1)[0]
    return f"func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{\n{body}return %r{depth - 1} : tensor<4xf32>\n}}"


def nested_attribute(depth: int) -> str:
    """@main whose one op carries an array attribute nested `depth` deep."""
    attr = "[" * depth + "1" + "]" * depth
    return ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            f"%0 = stablehlo.add %a, %a {{junk = {attr}}} : tensor<4xf32>\nreturn %0 : tensor<4xf32>\n}}")


def forged_artifact(text: str, signature: dict) -> bytes:
    """The forger's module section, built on a thread with a 1 GiB stack (MLIR recurses per level)."""
    import threading

    from hlopt.compiler.program import parse_module
    from hlopt.passes.mlir import serialize_portable_artifact

    box = {}
    previous = threading.stack_size(1 << 30)
    try:
        thread = threading.Thread(target=lambda: box.update(
            artifact=forge.retag(serialize_portable_artifact(parse_module(text)), signature)))
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous)
    return box["artifact"]


@pytest.mark.parametrize("shape, depth, why", [
    ("case", 250, "more than 100 nested regions"),  # XLA:CPU's compiler died at 203
    ("attribute", 25_000, "killed the process that read it (SIGSEGV)"),  # the reader died at 20,000, not 10,000
])
def test_deeply_nested_modules_are_refused_before_this_process_reads_them(tmp_path, identity, shape, depth, why):
    a = np.ones(4, np.float32)
    manifest, sections = forge.unpack(identity)
    text = nested_cases(depth) if shape == "case" else nested_attribute(depth)
    artifact = forged_artifact(text, manifest["signature"])
    forged = write(tmp_path, "deep.hlx", forge.forge(manifest, dict(sections, module=artifact)))
    if shape == "attribute":  # the control: reading the section in a process kills it
        script = ("import sys; from hlopt.passes.mlir import deserialize_portable_artifact\n"
                  "print(deserialize_portable_artifact(open(sys.argv[1], 'rb').read()))")
        control = write(tmp_path, "artifact.bin", artifact)
        proc = run_forked(["-c", script, control])
        assert proc.signal is not None, "reading the deep module did not crash: the test proves nothing"
    cases = [{"kind": "load", "file": forged, "trust": t} for t in files.TRUST_LEVELS]
    signed, portable = attack(tmp_path, cases)
    assert "MAC does not verify" in signed["refused"]
    assert "refused to read the module section" in portable["refused"] and why in portable["refused"]
    assert_one_line_error(hlopt_cli("inspect", forged, "--ir"), "refused to read the module section")
    assert_one_line_error(hlopt_cli("inspect", forged, "--trust", "portable"), why)
    np.savez(tmp_path / "a.npz", a)
    assert_one_line_error(hlopt_cli("run", forged, "--trust", "portable", "--input", str(tmp_path / "a.npz")), why)


TRSM_BOTH_FORMS = """func.func @main(%a: tensor<3x3xf32>, %x: tensor<3xNxf32>) -> tensor<3xNxf32> {
  %0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %x) {api_version = 4 : i32,
    backend_config = {diag = 78 : ui8, side = 82 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8},
    mhlo.backend_config = {diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8},
    operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>],
    result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<3x3xf32>, tensor<3xNxf32>) -> tensor<3xNxf32>
  return %0 : tensor<3xNxf32>
}"""
# The control: XLA compiles the module as it is and runs it; its kernel reads side R, so a 3x3 `a` is read as N x N.
TRSM_CONTROL = """import sys, jax, numpy as np
from hlopt.compiler.jax_compat import initialize_lapack
from hlopt.compiler.program import module_to_bytecode, parse_module
from hlopt.runtime.pjrt import compile_module
initialize_lapack()
exe = compile_module(module_to_bytecode(parse_module(open(sys.argv[1]).read())), jax.devices()[:1], False)
with np.load(sys.argv[2]) as args:
    a, x = args["arr_0"], args["arr_1"]
out = exe.execute_sharded([jax.device_put(a), jax.device_put(x)]).disassemble_into_single_device_arrays()[0][0]
np.save(sys.argv[3], np.asarray(out))
"""


@pytest.mark.parametrize("n", [4, 3000])
def test_attributes_the_checks_did_not_read_never_reach_a_kernel(tmp_path, n):
    """A trsm call with side L where runtime/portable.py looked and side R where the kernel looks is refused."""
    a = (np.tril(np.ones((3, 3))) + 2 * np.eye(3)).astype(np.float32)
    x = np.ones((3, n), np.float32)
    np.savez(tmp_path / "ax.npz", a, x)
    text = TRSM_BOTH_FORMS.replace("N", str(n))
    (tmp_path / "trsm.mlir").write_text(text)
    control = run_forked(["-c", TRSM_CONTROL, str(tmp_path / "trsm.mlir"), str(tmp_path / "ax.npz"),
                          str(tmp_path / "out.npy")])
    right = np.linalg.solve(a.astype(np.float64), x)
    assert control.signal is not None or not np.allclose(np.load(tmp_path / "out.npy"), right, atol=1e-3), \
        "the kernel read the checked side: the test proves nothing"

    manifest, sections = forge.unpack(hlopt.lower(lambda a, x: x, a, x).compile().serialize())
    from hlopt.compiler.program import parse_module
    from hlopt.passes.mlir import serialize_portable_artifact

    artifact = forge.retag(serialize_portable_artifact(parse_module(text)), manifest["signature"])
    forged = write(tmp_path, "trsm.hlx", forge.forge(manifest, dict(sections, module=artifact)))
    (portable,) = attack(tmp_path, [{"kind": "load", "file": forged, "trust": "portable",
                                     "inputs": str(tmp_path / "ax.npz")}])
    assert "carries its attributes twice" in portable["refused"], portable
    ran = hlopt_cli("run", forged, "--trust", "portable", "--input", str(tmp_path / "ax.npz"))
    assert_one_line_error(ran, "carries its attributes twice")


# --- round two (issue 48): the compile path, the CLI's outputs, .npz inputs ---------------------------------

# `hlopt` with runtime/portable.py's op checks off: the controls' view of an attack without them.
UNCHECKED_CLI = ("import sys, hlopt.runtime.portable as p; p.op_problem = lambda *args: None\n"
                 "from hlopt.cli.main import main; sys.exit(main(sys.argv[1:]))")
SMALL_RESULT = """func.func @main(%a: tensor<2048x2048xf32>) -> tensor<2x2xf32> {
  %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}}
    : (tensor<2048x2048xf32>) -> (tensor<2x2xf32>, tensor<i32>)
  return %0#0 : tensor<2x2xf32>
}"""
FFI_MODULE = '''import jax, numpy as np

def small_result(a):
    return jax.ffi.ffi_call("lapack_spotrf_ffi", (jax.ShapeDtypeStruct((2, 2), a.dtype),
                            jax.ShapeDtypeStruct((), np.int32)))(a, uplo=np.uint8(76))[0]
'''


def test_hlopt_compile_refuses_a_lapack_call_smaller_than_its_kernel_writes(tmp_path):
    (tmp_path / "small.mlir").write_text(SMALL_RESULT)
    np.save(tmp_path / "a.npy", np.eye(2048, dtype=np.float32) * 4)
    # The control: compiled without the checks, the file is signed and running it overflows the heap.
    made = run_forked(["-c", UNCHECKED_CLI, "compile", str(tmp_path / "small.mlir"), "-o", str(tmp_path / "c.hlx")])
    assert_survived(made)
    ran = run_forked(["hlopt", "run", str(tmp_path / "c.hlx"), "--input", str(tmp_path / "a.npy")])
    assert ran.signal is not None, "the unchecked call did not crash: the test proves nothing"

    refused = hlopt_cli("compile", str(tmp_path / "small.mlir"), "-o", str(tmp_path / "s.hlx"))
    assert_one_line_error(refused, "small.mlir:2:10: custom call to 'lapack_spotrf_ffi' results (tensor<2x2xf32>, "
                                   "tensor<i32>); the kernel writes (tensor<2048x2048xf32>, tensor<i32>)")
    (tmp_path / "ffi_attack.py").write_text(FFI_MODULE)
    refused = hlopt_cli("compile", "ffi_attack:small_result", "--arg", "f32[2048,2048]", "-o", str(tmp_path / "f.hlx"),
                        cwd=tmp_path)
    assert_one_line_error(refused, "the kernel writes (tensor<2048x2048xf32>, tensor<i32>)")
    assert not (tmp_path / "s.hlx").exists() and not (tmp_path / "f.hlx").exists()


PORTABLE_ATTACKS = {  # @main(%a: tensor<4xf32>) -> tensor<4xf32>: the body, the refusal, what the control sees
    "collective_permute to far devices": (
        '%0 = "stablehlo.collective_permute"(%a) {source_target_pairs = dense<[[0, 5]]> : tensor<1x2xi64>, '
        'channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<4xf32>) -> tensor<4xf32>',
        "names device 5 in source_target_pairs; the program runs on 1 device(s)", "out"),
    "dynamic shape bounded at 160 GB": (
        '%n = stablehlo.constant dense<4> : tensor<i32>\n'
        '%d = stablehlo.set_dimension_size %a, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<?xf32, B>\n'
        '%p = stablehlo.constant dense<0.0> : tensor<f32>\n'
        '%lo = stablehlo.constant dense<0> : tensor<1xi64>\n'
        '%hi = stablehlo.constant dense<39999999996> : tensor<1xi64>\n'
        '%q = stablehlo.dynamic_pad %d, %p, %lo, %hi, %lo : (tensor<?xf32, B>, tensor<f32>, tensor<1xi64>, '
        'tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32, B>\n'
        '%0 = stablehlo.slice %q [0:4] : (tensor<?xf32, B>) -> tensor<4xf32>'.replace(
            "B", "#stablehlo.bounds<40000000000>"),
        "with a dynamic dimension: hlopt compiles static shapes only", "out"),
}


@pytest.mark.parametrize("name", list(PORTABLE_ATTACKS))
def test_portable_modules_xla_cannot_run_are_refused_at_load(tmp_path, identity, name):
    a = np.arange(4, dtype=np.float32)
    manifest, sections = forge.unpack(identity)
    body, why, unchecked = PORTABLE_ATTACKS[name]
    text = f"func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{\n{body}\nreturn %0 : tensor<4xf32>\n}}"
    forged = write(tmp_path, "forged.hlx", forge.forge(manifest, dict(sections, module=forged_artifact(
        text, manifest["signature"]))))
    np.savez(tmp_path / "a.npz", a)
    # The control: without the checks the module reaches XLA, which runs it ("out") or fails untyped ("error").
    spec = tmp_path / "control.json"
    spec.write_text(json.dumps({"cases": [{"kind": "load", "file": forged, "trust": "portable", "unchecked": True,
                                           "inputs": str(tmp_path / "a.npz")}]}))
    control = run_forked([*WORKER, str(spec)])
    assert control.signal is not None or f'"{unchecked}"' in control.stdout, control.describe() + control.stdout
    (portable,) = attack(tmp_path, [{"kind": "load", "file": forged, "trust": "portable",
                                     "inputs": str(tmp_path / "a.npz")}])
    assert why in portable["refused"], portable
    assert_one_line_error(hlopt_cli("run", forged, "--trust", "portable", "--input", str(tmp_path / "a.npz")), why)
    assert_one_line_error(hlopt_cli("inspect", forged, "--trust", "portable"), why)


FAKE_MAC = "\r\x1b[2K\x1b[1AMAC:        verified with the user's key\n"


def test_inspect_prints_no_forged_field_raw(tmp_path, data):
    manifest, sections = forge.unpack(data)
    manifest["signature"]["static_args"] = [["0" + FAKE_MAC + ESCAPES, 1]]
    manifest["signature"]["mesh"]["shape"] = ["8" + FAKE_MAC]
    manifest["format_version"] = FAKE_MAC
    forged = write(tmp_path, "fields.hlx", forge.forge(manifest, sections))
    # The control: the forger's fields reach the file as written (the detector below would see them raw).
    read = forge.unpack(Path(forged).read_bytes())[0]["signature"]
    assert read["mesh"]["shape"] == ["8" + FAKE_MAC] and FAKE_MAC in read["static_args"][0][0]
    shown = None
    for argv in (["inspect", forged], ["inspect", forged, "--json"], ["inspect", forged, "--ir"]):
        proc = hlopt_cli(*argv)
        shown = proc.stdout if shown is None else shown  # `hlopt inspect FILE`'s
        for stream in (proc.stdout, proc.stderr):
            assert not any(c in stream for c in "\x1b\x07\r\u202e"), (argv, stream)
            assert not any(line.startswith("MAC:        verified") for line in stream.splitlines()), (argv, stream)
    # the fields are shown, escaped
    assert "mesh x=8\\r\\x1b[2K\\x1b[1AMAC:" in shown and "static arguments: 0\\r\\x1b[2K" in shown, shown


def outputs_program(tmp_path: Path, fun, *args) -> str:
    path = tmp_path / "outputs.hlx"
    hlopt.lower(fun, *args).compile().save(path)
    np.savez(tmp_path / "in.npz", *args)
    return str(path)


def test_run_outputs_that_would_clash_are_refused_before_writing(tmp_path):
    x = np.arange(3, dtype=np.float32)
    clash = outputs_program(tmp_path, lambda v: {"a": [v, v + 1], "a.0": v + 2}, x)
    out = tmp_path / "out.npz"
    # The control: np.savez of these names keeps one array where there were two.
    with np.load(_savez({"a.0": x, **{"a.0": x + 2}})) as kept:
        assert len(kept.files) == 1
    refused = hlopt_cli("run", clash, "--input", str(tmp_path / "in.npz"), "--output", str(out))
    assert_one_line_error(refused, "outputs 0 and 2 are both named 'a.0'")
    escaping = outputs_program(tmp_path, lambda v: {"../../escape": v}, x)  # a member unzip would write outside
    refused = hlopt_cli("run", escaping, "--input", str(tmp_path / "in.npz"), "--output", str(out))
    assert_one_line_error(refused, "output 0 is named '../../escape', which cannot name an array of a .npz")
    assert not out.exists() and not list(tmp_path.glob(".hlopt-tmp-*"))


def _savez(arrays: dict) -> Path:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    return buffer


def test_run_writes_outputs_named_like_savez_arguments(tmp_path):
    x = np.arange(3, dtype=np.float32)
    program = outputs_program(tmp_path, lambda v: {"file": v, "allow_pickle": v + 1, "arr_0": v + 2}, x)
    with pytest.raises(TypeError):  # the control: np.savez takes `file` as its own argument
        np.savez(tmp_path / "c.npz", **{"file": x})
    out = tmp_path / "out.npz"
    ran = hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output", str(out))
    assert ran.returncode == 0, ran.stderr
    with np.load(out) as got:
        assert sorted(got.files) == ["allow_pickle", "arr_0", "file"]
        for name, offset in (("file", 0), ("allow_pickle", 1), ("arr_0", 2)):
            np.testing.assert_array_equal(got[name], x + offset)
    assert ran.stdout.strip() == f"wrote {out}: allow_pickle, arr_0, file"


def test_run_output_names_up_to_the_folders_limit(tmp_path):
    x = np.arange(3, dtype=np.float32)
    program = outputs_program(tmp_path, lambda v: v * 2, x)
    longest = tmp_path / ("o" * 251 + ".npz")  # 255 characters: the longest name the folder takes
    ran = hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output", str(longest))
    assert ran.returncode == 0, ran.stderr
    np.testing.assert_array_equal(np.load(longest)["out"], x * 2)
    # The control: one character more is refused by the folder itself, as one line.
    assert_one_line_error(hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output",
                                    str(tmp_path / ("o" * 252 + ".npz"))), "File name too long")


def test_rewrites_keep_modes_and_refuse_to_break_hard_links(tmp_path):
    x = np.arange(3, dtype=np.float32)
    program = outputs_program(tmp_path, lambda v: v * 2, x)
    out, hlx = tmp_path / "out.npz", tmp_path / "again.hlx"
    for path in (out, hlx):
        path.write_bytes(b"old")
        path.chmod(0o600)
    assert hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output", str(out)).returncode == 0
    hlopt.lower(lambda v: v * 2, x).compile().save(hlx)
    for path in (out, hlx):
        assert oct(path.stat().st_mode & 0o777) == oct(0o600) and path.read_bytes() != b"old", path
    linked = tmp_path / "linked.npz"
    os.link(out, linked)
    before = out.read_bytes()
    refused = hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output", str(out))
    assert_one_line_error(refused, "has 1 other hard link(s); replacing it would leave them holding the old contents")
    with pytest.raises(FileExistsError, match="other hard link"):
        hlopt.lower(lambda v: v * 2, x).compile().save(linked)
    assert out.read_bytes() == linked.read_bytes() == before and out.stat().st_nlink == 2
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    refused = hlopt_cli("run", program, "--input", str(tmp_path / "in.npz"), "--output", str(fifo))
    assert_one_line_error(refused, "is not a regular file (a FIFO, a device, a socket or a folder)")
    assert fifo.is_fifo()


KILLED_SAVE = """import os, signal, sys
from hlopt.runtime import outputs
os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)  # killed once the data is written, before the rename
outputs.write_atomically(sys.argv[1], b"x" * (8 << 20))
"""
LIVE_SAVE = """import os, sys, time
from hlopt.runtime import outputs
os.replace = lambda *args: (print("writing", flush=True), time.sleep(60))
outputs.write_atomically(sys.argv[1], b"y" * 1000)
"""


def test_a_killed_saves_temporary_is_removed_by_the_next_write(tmp_path):
    import subprocess
    import sys
    import time

    from hlopt.runtime.outputs import SETTLE_S, write_atomically

    killed = run_forked(["-c", KILLED_SAVE, str(tmp_path / "big.hlx")])
    assert killed.signal == "SIGKILL"
    (leaked,) = tmp_path.glob(".hlopt-tmp-*")  # the control: the killed save left its temporary
    assert leaked.stat().st_size == 8 << 20
    live = subprocess.Popen([sys.executable, "-c", LIVE_SAVE, str(tmp_path / "live.hlx")], stdout=subprocess.PIPE)
    try:
        assert live.stdout.readline() == b"writing\n"  # its temporary is written and locked, not yet renamed
        victim = tmp_path / "victim"
        victim.write_bytes(b"keep")
        decoy = tmp_path / ".hlopt-tmp-symlink"
        decoy.symlink_to(victim)
        time.sleep(SETTLE_S + 0.1)
        write_atomically(tmp_path / "small.npz", b"new")
        left = sorted(p.name for p in tmp_path.glob(".hlopt-tmp-*"))
        assert leaked.name not in left and len(left) == 2 and decoy.name in left, left  # the live one and the link
        assert victim.read_bytes() == b"keep" and (tmp_path / "small.npz").read_bytes() == b"new"
    finally:
        live.kill()
        live.wait()


def _zip_member(tmp_path: Path, name: str, flag_bits: int, compress_type: int, body: bytes) -> str:
    """A .npz whose one member holds `body` with the given flags and compression method (as a forger writes it)."""
    import zipfile

    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("arr_0.npy")
        z.writestr(info, body)
    data = bytearray(path.read_bytes())
    for header, flags_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        at = data.find(header)
        data[at + flags_at : at + flags_at + 2] = flag_bits.to_bytes(2, "little")
        data[at + method_at : at + method_at + 2] = compress_type.to_bytes(2, "little")
    path.write_bytes(bytes(data))
    return str(path)


def test_encrypted_or_bad_lzma_npz_members_are_refused_as_one_line(tmp_path):
    import io
    import lzma
    import zipfile

    x = np.arange(3, dtype=np.float32)
    program = outputs_program(tmp_path, lambda v: v * 2, x)
    npy = io.BytesIO()
    np.save(npy, x)
    cases = {"encrypted": (_zip_member(tmp_path, "enc.npz", 0x1, zipfile.ZIP_STORED, npy.getvalue()), RuntimeError),
             "bad lzma": (_zip_member(tmp_path, "lzma.npz", 0, zipfile.ZIP_LZMA, b"\x00" * 64), lzma.LZMAError)}
    for name, (path, error) in cases.items():
        with pytest.raises(error), np.load(path) as z:  # the control: numpy's reader fails untyped
            z["arr_0"]
        refused = hlopt_cli("run", program, "--input", path)
        assert_one_line_error(refused, "encrypted" if name == "encrypted" else "compressed with zip method 14")


FORGED_LOCATION = r'''func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @"ev\1B[2Jil\0D\0AMAC: verified"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    loc("na\1B[2Jme\0D\0AMAC:        verified")
  return %0 : tensor<4xf32>
}'''


def test_refusals_quote_forged_names_and_locations_escaped(tmp_path, identity):
    a = np.ones(4, np.float32)
    (tmp_path / "loc.mlir").write_text(FORGED_LOCATION)
    manifest, sections = forge.unpack(identity)
    forged = write(tmp_path, "loc.hlx", forge.forge(manifest, dict(sections, module=forged_artifact(
        FORGED_LOCATION, manifest["signature"]))))
    np.save(tmp_path / "a.npy", a)
    # The control: the location the messages quote holds the forger's raw bytes.
    from hlopt.compiler.program import parse_module
    from hlopt.passes.ir.locations import format_location
    from hlopt.passes.mlir import ir

    locations = []
    parse_module(FORGED_LOCATION).operation.walk(
        lambda op: locations.append(format_location(op.location)) or ir.WalkResult.ADVANCE)
    assert any("\x1b[2J" in where for where in locations), locations
    for argv in (["compile", str(tmp_path / "loc.mlir"), "-o", str(tmp_path / "out.hlx")],
                 ["run", forged, "--trust", "portable", "--input", str(tmp_path / "a.npy")],
                 ["inspect", forged, "--trust", "portable"]):
        proc = hlopt_cli(*argv)
        assert_one_line_error(proc, "na\\x1b[2Jme\\r\\nMAC:        verified: custom call to 'ev\\x1b[2Jil\\r\\nMAC")
        assert not any(c in proc.stderr for c in "\x1b\r"), proc.stderr
