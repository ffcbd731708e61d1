"""Hand mutated copies of genuine files to an entry point in this process; count how each ended.

`python fuzz_worker.py SPEC.json` reads a spec {"files": {name: path}, "cases":
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
"""

from __future__ import annotations

import json
import random
import sys
import warnings

import jax
import numpy as np

import forge


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


def read(data: bytes, entry: str) -> str:
    """`data` as `hlopt inspect` shows a file, or as `hlopt run` reads an --input file (from a file of its own)."""
    import tempfile

    from attack_worker import X, Y
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
