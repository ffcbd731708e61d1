"""Load mutated copies of genuine executable files in this process; count how each ended.

`python fuzz_worker.py SPEC.json` reads a spec {"files": {name: path}, "cases":
[[name, trust, forged, region, seed], ...]}. For each case it mutates the file's
bytes in `region` ("header", "manifest", "executable" or "module") with a
generator seeded by `seed` (flips, random bytes, insertions, deletions,
truncation, a duplicated range; `forged`: the section or manifest edited and
every checksum recomputed under an attacker's key, as forge.py does), calls
`hlopt.deserialize(data, trust=trust)` and, if it loads, calls the program.
It prints one JSON line: counts of "refused" (ExecutableFileError), "loaded",
and the cases that raised anything else ("errors"). A crash or a hang kills
the process: the test sees that from outside.
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


def run(data: bytes, trust: str) -> str:
    import hlopt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled = hlopt.deserialize(data, trust=trust)
        except hlopt.ExecutableFileError:
            return "refused"
        sig = compiled.signature
        args, _ = jax.tree_util.tree_unflatten(sig.in_tree, [np.zeros(a.shape, a.dtype) for a in sig.in_avals])
        jax.block_until_ready(compiled(*args))
        return "loaded"


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    files = {name: open(path, "rb").read() for name, path in spec["files"].items()}
    counts = {"refused": 0, "loaded": 0, "errors": []}
    for name, trust, forged, region, seed in spec["cases"]:
        try:
            counts[run(mutated(files[name], forged, region, seed), trust)] += 1
        except Exception as e:  # noqa: BLE001 - reported: the test fails on any
            counts["errors"].append([name, trust, forged, region, seed, f"{type(e).__name__}: {str(e)[:300]}"])
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
