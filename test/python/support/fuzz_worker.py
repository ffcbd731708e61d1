"""Hand mutated copies of genuine files to an entry point in this process; count how each ended.

`python -m support.fuzz_worker SPEC.json` reads a spec {"files": {name: path}, "cases":
[[name, entry, forged, region, seed], ...]}. For each case it mutates the file's
bytes in `region` ("header", "manifest", "executable" or "module" of an
executable file; "bytes": anywhere in an input .npy/.npz) with a generator
seeded by `seed` (flips, random bytes, insertions, deletions, truncation, a
duplicated range; `forged`: the section or manifest edited and every checksum
recomputed under an attacker's key, as forge.py does) and hands it to `entry`:
"signed" or "portable" (`hlopt.deserialize(data, trust=entry)`, then the
program is called), "inspect" (what `hlopt inspect` prints: every line must be
printable) or "inputs" (`hlopt run`'s reader of --input files, against
attack_worker's X and Y; what it reads must have their shapes and dtypes).
It prints one JSON line: counts of "refused" (ExecutableFileError, or the
CLI's UsageError), "loaded", and the cases that raised anything else or read
something wrong ("errors"). A crash or a hang kills the process: the test sees
that from outside.

`python -m support.fuzz_worker --text SEED COUNT FOLDER` runs `hlopt-opt` (and, for
every tenth case, `hlopt compile`) in this process on COUNT mutations of
valid modules (`text_case`: other line terminators, deep nesting, huge
dimension lists, recursion, doubling call chains, random pipeline strings,
random bytes) written under FOLDER. A case ends well with exit status 0, or 1
and one line `file:line:col: error:` / `TOOL: error:` from a typed hlopt error
(PipelineError, ParseError, UsageError, ExecutableFileError); anything else
(a traceback, another exception, more lines) is listed under "errors".
"""

from __future__ import annotations

import json
import random
import re
import sys
import warnings

import jax
import numpy as np

from support import forge



def regions(data: bytes) -> dict[str, tuple[int, int]]:
    return forge.layout(data)


def mutate_bytes(blob: bytes, rng: random.Random) -> bytes:
    """`blob` with one random edit."""
    b = bytearray(blob)
    n = len(b)
    kind = rng.choice(["flip", "byte", "insert", "delete", "truncate", "duplicate", "zero"])
    at = rng.randrange(max(n, 1))
    if kind == "flip" and n:
        b[at] ^= 1 << rng.randrange(8)
    elif kind == "byte" and n:
        b[at] = rng.choice([0, 0xFF, 0x7F, 0x80, ord('"'), ord("{"), ord("9"), rng.randrange(256)])
    elif kind == "insert":
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 64])))
    elif kind == "delete":
        del b[at:at + rng.choice([1, 4, 64])]
    elif kind == "truncate":
        del b[at:]
    elif kind == "duplicate":
        end = min(n, at + rng.choice([4, 64, 1024]))
        b[at:at] = b[at:end]
    elif n:
        b[at:at + rng.choice([8, 256])] = bytes(len(b[at:at + 8]))
    return bytes(b)


def mutate_json(value, rng: random.Random):
    """The manifest with one value somewhere replaced by a plausible wrong one."""
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        out = dict(value)
        if rng.random() < 0.1:
            del out[key]
        else:
            out[key] = mutate_json(value[key], rng)
        return out
    if isinstance(value, list) and value:
        i = rng.randrange(len(value))
        return value[:i] + [mutate_json(value[i], rng)] + value[i + 1:]
    return rng.choice([None, 0, -1, 1, 2 ** 31, 2 ** 63, 1e308, "", "x" * 1000, [], {}, True,
                       "\udcff" if isinstance(value, str) else 7])


def mutated(data: bytes, forged: bool, region: str, seed: int) -> bytes:
    rng = random.Random(seed)
    if region == "bytes":  # an input file: anywhere in it, possibly more than once
        for _ in range(rng.choice([1, 1, 2, 4])):
            data = mutate_bytes(data, rng)
        return data
    if not forged or region == "header":  # the header holds no checksum to recompute
        start, end = regions(data)[region]
        return data[:start] + mutate_bytes(data[start:end], rng) + data[end:]
    manifest, sections = forge.unpack(data)
    if region == "manifest":
        manifest = mutate_json(manifest, rng)
    else:
        sections = dict(sections, **{region: mutate_bytes(sections[region], rng)})
    try:
        return forge.forge(manifest, sections)
    except (TypeError, ValueError):  # a manifest json cannot write: edit its bytes instead
        return mutated(data, False, "manifest", seed)


def run(data: bytes, entry: str) -> str:
    import hlopt
    from hlopt.cli.errors import UsageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if entry in ("inspect", "inputs"):
                return read(data, entry)
            compiled = hlopt.deserialize(data, trust=entry)
        except (hlopt.ExecutableFileError, UsageError):
            return "refused"
        sig = compiled.signature
        args, _ = jax.tree_util.tree_unflatten(sig.in_tree, [np.zeros(a.shape, a.dtype) for a in sig.in_avals])
        jax.block_until_ready(compiled(*args))
        return "loaded"


T = "tensor<4xf32>"
TEXT_BASES = [
    f"func.func @main(%a: {T}) -> {T} {{\n  %0 = stablehlo.add %a, %a : {T}\n  return %0 : {T}\n}}\n",
    f"func.func private @f(%x: {T}) -> {T} {{\n  %0 = stablehlo.sine %x : {T}\n  return %0 : {T}\n}}\n"
    f"func.func @main(%x: {T}) -> {T} {{\n  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %x, %x) {{api_version = 4 : "
    f"i32, backend_config = {{order = 2 : i64}}, called_computations = [@f]}} : ({T}, {T}, {T}) -> ({T}, {T}, {T})\n"
    f"  return %r#2 : {T}\n}}\n",
    f"func.func private @f(%x: {T}) -> {T} {{\n  %0 = stablehlo.exponential %x : {T}\n  return %0 : {T}\n}}\n"
    f"func.func @main(%x: {T}, %c: {T}) -> {T} {{\n  %0 = stablehlo.custom_call @hlopt.vjp(%x, %c) {{api_version = "
    f"4 : i32, backend_config = {{}}, called_computations = [@f]}} : ({T}, {T}) -> {T}\n  return %0 : {T}\n}}\n",
]
PASS_NAMES = ["cse", "canonicalize", "inline", "symbol-dce", "sdy-propagation-pipeline", "jet-expand", "vjp-expand",
              "lower-bcoo", "hlopt-default", "no-such-pass", "chlo-legalize-to-stablehlo", "jet-collapse"]
OP_NAMES = ["func.func", "builtin.module", "any", "canonicalize", "stablehlo.while", "x.y"]
OPTIONS = ["", "", "{max-iterations=3}", "{x=1}", "{default-pipeline=cse}", "{default-pipeline=sdy-propagation-pipeline}",
           "{func=f order=2}", "{order=x}", "{", "}"]


def random_pipeline(rng: random.Random, depth: int = 0) -> str:
    """A pipeline string: passes, options and operations nested at random, valid or not."""
    parts = []
    for _ in range(rng.randint(1, 3)):
        if depth < 3 and rng.random() < 0.35:
            parts.append(f"{rng.choice(OP_NAMES)}({random_pipeline(rng, depth + 1)})")
        else:
            parts.append(rng.choice(PASS_NAMES) + rng.choice(OPTIONS))
    return ",".join(parts)


def _terminators(text: str, rng: random.Random) -> str:
    end = rng.choice(["\r", "\r\n", " //\r", "// c\r", "\n// -----\r"])
    return ("//\r" if rng.random() < 0.5 else "") + text.replace("\n", end)


def text_case(seed: int) -> tuple[str, str, str]:
    """(what, module text, pipeline) of case `seed`."""
    from support.nesting_limits import GENERATORS

    rng = random.Random(seed)
    base, pipeline = rng.choice(TEXT_BASES), random_pipeline(rng) if rng.random() < 0.5 else "hlopt-default"
    what = rng.choice(["terminators", "nesting", "dims", "recursion", "chain", "pipeline", "bytes"])
    if what == "terminators":
        text = _terminators(base, rng)
    elif what == "nesting":
        kind = rng.choice(sorted(GENERATORS))
        text = GENERATORS[kind](rng.choice([3, 90, 600, 3000] if kind not in ("while", "if") else [3, 90, 300]))
        text = _terminators(text, rng) if rng.random() < 0.5 else text
    elif what == "dims":
        separator = rng.choice(["x", " x ", "x//c\r", "x\r"])
        dims = separator.join([rng.choice(["1", "?", "[1]"])] * rng.choice([2, 250, 300, 60_000]))
        text = f"func.func @main(%a: tensor<{dims}{separator}f32>) {{\n  return\n}}\n"
    elif what == "recursion":
        n = rng.randint(1, 3)
        text = base + "".join(f"func.func private @r{i}(%x: {T}) -> {T} {{\n  %0 = func.call @r{(i + 1) % n}(%x) : "
                              f"({T}) -> {T}\n  return %0 : {T}\n}}\n" for i in range(n))
        text = text.replace("@f]", "@r0]") if rng.random() < 0.5 else text
    elif what == "chain":
        levels = rng.choice([4, 25, 60])
        text = base.replace("@f]", f"@c{levels}]") + "".join(
            f"func.func private @c{i}(%x: {T}) -> {T} {{\n  %0 = func.call @c{i - 1}(%x) : ({T}) -> {T}\n"
            f"  %1 = func.call @c{i - 1}(%0) : ({T}) -> {T}\n  return %1 : {T}\n}}\n" for i in range(1, levels + 1)
        ) + f"func.func private @c0(%x: {T}) -> {T} {{\n  %0 = stablehlo.sine %x : {T}\n  return %0 : {T}\n}}\n"
    elif what == "pipeline":
        text, pipeline = base, random_pipeline(rng)
    else:
        text = mutate_bytes(base.encode(), rng).decode("utf-8", "replace")
    return what, text, pipeline


TYPED = ("PipelineError", "ParseError", "UsageError", "ExecutableFileError")


def run_tool(argv: list[str], tool: str) -> tuple[int, str, list[str]]:
    """Exit status, stderr and the types of the exceptions reported, of `tool` (opt or hlopt) run here."""
    import contextlib
    import io

    import hlopt.cli.errors as errors
    from hlopt.cli.main import main as hlopt_main
    from hlopt.cli.opt import main as opt_main

    raised, original = [], errors.error_message

    def recording(error: BaseException, prog: str, debug: bool) -> str:
        raised.append(type(error).__name__)
        return original(error, prog, debug)

    errors.error_message = recording
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = (opt_main if tool == "opt" else hlopt_main)(argv)
    finally:
        errors.error_message = original
    return status, stderr.getvalue(), raised


def text_outcome(status: int, stderr: str, raised: list[str]) -> str | None:
    """None if a run ended well (exit 0, or 1 with one located line from a typed error), else what went wrong."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if status == 0 and not raised:
        return None
    if status == 1 and len(lines) == 1 and raised and all(name in TYPED for name in raised) \
            and re.match(r"^(\S.*:\d+:\d+|hlopt-opt|hlopt|\S+): error: ", lines[0]) and "Traceback" not in stderr:
        return None
    return f"status {status}, raised {raised}: {stderr[-300:]}"


def main_text(seed: int, count: int, folder: str) -> None:
    counts = {"ok": 0, "refused": 0, "errors": []}
    for case in range(seed, seed + count):
        what, text, pipeline = text_case(case)
        path = f"{folder}/case{case}.mlir"
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        with open(f"{folder}/current", "w") as f:  # the case a crash or a hang stopped at
            f.write(json.dumps([case, what, pipeline]))
        if case % 10 == 0:
            argv, tool = ["compile", path, "-o", f"{folder}/case{case}.hlx"], "hlopt"
        else:
            argv, tool = [path, "-p", pipeline, "-o", "/dev/null"], "opt"
        status, stderr, raised = run_tool(argv, tool)
        problem = text_outcome(status, stderr, raised)
        if problem is not None:
            counts["errors"].append([case, what, tool, pipeline[:200], problem])
        counts["ok" if status == 0 else "refused"] += problem is None
    print(json.dumps(counts))


def read(data: bytes, entry: str) -> str:
    """`data` as `hlopt inspect` shows a file, or as `hlopt run` reads an --input file (from a file of its own)."""
    import tempfile

    from support.attack_worker import X, Y
    from hlopt.cli import aot
    from hlopt.runtime import files

    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(data)
        f.flush()
        if entry == "inspect":
            found, mac = files.read_file(f.name, sections=files.SECTIONS)
            text = aot.describe(found.manifest, found.size, f.name, mac)
            bad = [line for line in text.splitlines() if not line.isprintable()]
            if bad:
                raise AssertionError(f"printed unescaped: {bad[0]!r}")
            return "loaded"
        avals = [jax.core.ShapedArray(a.shape, a.dtype) for a in (X, Y)]
        arrays = aot.read_inputs([f.name], avals, "f")
        if [(a.shape, a.dtype) for a in arrays] != [(a.shape, a.dtype) for a in avals]:
            raise AssertionError(f"read {[(a.shape, a.dtype) for a in arrays]}")
        return "loaded"


def main() -> None:
    if sys.argv[1] == "--text":
        main_text(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    spec = json.loads(open(sys.argv[1]).read())
    files = {name: open(path, "rb").read() for name, path in spec["files"].items()}
    counts = {"refused": 0, "loaded": 0, "errors": []}
    for name, entry, forged, region, seed in spec["cases"]:
        try:
            counts[run(mutated(files[name], forged, region, seed), entry)] += 1
        except Exception as e:  # noqa: BLE001 - reported: the test fails on any
            counts["errors"].append([name, entry, forged, region, seed, f"{type(e).__name__}: {str(e)[:300]}"])
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
