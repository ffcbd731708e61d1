"""2,000+ mutations of genuine executable files, and of `hlopt run`'s input files and `hlopt inspect`'s
manifests: none crashes, hangs or escapes as an untyped exception.

Two genuine programs (one device; eight devices over a mesh) are saved under
the user's key, and forged copies of them under an attacker's key. Mutations
(support/fuzz_worker.py) edit the header, the manifest, the executable or the module
section, with the checksums left as they are or recomputed (`forged`);
signed files are loaded with trust="signed", the attacker's with
trust="portable", in CI-sized batches, each a fresh capped process with a
timeout, two at a time. Every case must be refused with an
ExecutableFileError or load and run; a batch that dies or hangs fails the
test, naming its cases. The control: a batch that crashes is reported as one.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hlopt

from support import TESTS, forge, script
from support.attack_worker import X, Y, f
from support.sandbox import Outcome, run_capped

WORKER = script("fuzz_worker")
REGIONS = ("header", "manifest", "executable", "module")
# (file, trust, forged, regions, how many per region)
SECTIONS = ("manifest", "executable", "module")
PORTABLE = ("header", "manifest", "module")  # a file loaded portably never has its executable read
# (file, trust, forged, regions, how many per region): cheap refusals by the MAC make up the count; the
# portable cases that reach the module's scan and XLA cost about a second each
PLAN = [
    ("f", "signed", False, REGIONS, 325), ("mesh", "signed", False, REGIONS, 80),
    ("f", "signed", True, SECTIONS, 30), ("mesh", "signed", True, ("manifest", "module"), 10),
    ("f-foreign", "portable", False, ("header",), 40), ("f-foreign", "portable", False, ("manifest", "module"), 60),
    ("mesh-foreign", "portable", False, PORTABLE, 20),
    ("f-foreign", "portable", True, ("manifest", "module"), 25), ("mesh-foreign", "portable", True, ("module",), 6),
]
BATCHES = 6
BATCH_TIMEOUT_S = 240  # a batch takes 15-40 s alone; the machine running it may be busy


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("fuzz")
    mesh = jax.make_mesh((8,), ("x",))
    programs = {"f": hlopt.lower(f, X, Y).compile(),
                "mesh": hlopt.lower(f, X, Y, mesh=mesh, in_shardings=(P("x"), P())).compile()}
    paths = {}
    for name, compiled in programs.items():
        data = compiled.serialize()
        for label, blob in ((name, data), (f"{name}-foreign", forge.forge(*forge.unpack(data)))):
            paths[label] = str(folder / f"{label}.hlx")
            Path(paths[label]).write_bytes(blob)
    return paths


def cases() -> list[list]:
    out = []
    for name, trust, forged, regions, count in PLAN:
        for region in regions:
            out += [[name, trust, forged, region, 1000 * len(out) + i] for i in range(count)]
    return out


def run_batch(tmp_path: Path, files: dict[str, str], batch: list[list], index: int) -> tuple[Outcome, list]:
    spec = tmp_path / f"batch-{index}.json"
    spec.write_text(json.dumps({"files": files, "cases": batch}))
    return run_capped([*WORKER, str(spec)], timeout=BATCH_TIMEOUT_S), batch


def test_mutated_files_are_refused_or_run(tmp_path, genuine):
    all_cases = cases()
    assert len(all_cases) >= 2000
    batches = [all_cases[i::BATCHES] for i in range(BATCHES)]
    totals = {"refused": 0, "loaded": 0, "errors": []}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for outcome, batch in pool.map(lambda ib: run_batch(tmp_path, genuine, ib[1], ib[0]), enumerate(batches)):
            assert not outcome.timed_out and outcome.signal is None and outcome.returncode == 0, (
                f"{outcome.describe()}\ncases: {batch[:5]}...")
            counts = json.loads(outcome.stdout.strip().splitlines()[-1])
            for k in ("refused", "loaded"):
                totals[k] += counts[k]
            totals["errors"] += counts["errors"]
    assert totals["errors"] == [], totals["errors"][:10]
    assert totals["refused"] + totals["loaded"] == len(all_cases)
    assert totals["refused"] > 0.9 * len(all_cases)


# (file, entry, forged, region, how many): `hlopt run`'s --input reader on mutated .npy and .npz files
# (stored and deflated), and what `hlopt inspect` prints of mutated and forged manifests.
READ_PLAN = [
    ("x.npy", "inputs", False, "bytes", 120), ("xy.npz", "inputs", False, "bytes", 200),
    ("xy-deflated.npz", "inputs", False, "bytes", 200),
    ("f", "inspect", False, "header", 40), ("f-foreign", "inspect", False, "manifest", 80),
    ("f-foreign", "inspect", True, "manifest", 160), ("mesh-foreign", "inspect", True, "manifest", 160),
]


@pytest.fixture(scope="module")
def genuine_inputs(genuine, tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("fuzz-inputs")
    np.save(folder / "x.npy", X)
    np.savez(folder / "xy.npz", X, Y)
    np.savez_compressed(folder / "xy-deflated.npz", X, Y)
    return dict(genuine, **{name: str(folder / name) for name in ("x.npy", "xy.npz", "xy-deflated.npz")})


def test_mutated_inputs_and_manifests_are_refused_or_read(tmp_path, genuine_inputs):
    """`hlopt run`'s inputs and `hlopt inspect`: every mutation refused in one typed line, or read right."""
    batch = [[name, entry, forged, region, 7000 * i + seed] for i, (name, entry, forged, region, count)
             in enumerate(READ_PLAN) for seed in range(count)]
    halves = [batch[0::2], batch[1::2]]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda ib: run_batch(tmp_path, genuine_inputs, ib[1], 100 + ib[0]), enumerate(halves)))
    counts = {"refused": 0, "loaded": 0}
    for outcome, cases_run in done:
        assert not outcome.timed_out and outcome.signal is None and outcome.returncode == 0, (
            f"{outcome.describe()}\ncases: {cases_run[:5]}...")
        found = json.loads(outcome.stdout.strip().splitlines()[-1])
        assert found["errors"] == [], found["errors"][:10]
        for k in counts:
            counts[k] += found[k]
    assert counts["refused"] + counts["loaded"] == len(batch) and counts["refused"] > len(batch) // 4, counts


def test_an_untyped_exception_is_reported(tmp_path, genuine_inputs):
    """The control: a reader that raises something other than a refusal is counted as an error."""
    spec = tmp_path / "untyped.json"
    spec.write_text(json.dumps({"files": genuine_inputs, "cases": [["xy.npz", "inputs", False, "bytes", 1]]}))
    script = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from support import fuzz_worker\n"
              "from hlopt.cli import aot\n"
              "def fail(*args): raise KeyError('untyped')\n"
              "aot.read_inputs = fail\nsys.argv = ['w', sys.argv[1]]\nfuzz_worker.main()")
    outcome = run_capped(["-c", script, str(spec)], timeout=BATCH_TIMEOUT_S)
    assert outcome.returncode == 0, outcome.describe()
    assert "KeyError: 'untyped'" in json.loads(outcome.stdout.strip().splitlines()[-1])["errors"][0][-1]


def test_a_batch_that_crashes_is_reported(tmp_path, genuine, monkeypatch):
    """The control: a worker that segfaults on its first case fails the batch, not silently."""
    spec = tmp_path / "crash.json"
    spec.write_text(json.dumps({"files": genuine, "cases": [["f", "signed", False, "header", 1]]}))
    script = (f"import sys, ctypes; sys.path.insert(0, {str(TESTS)!r}); from support import fuzz_worker\n"
              "fuzz_worker.run = lambda data, trust: ctypes.string_at(0)\nsys.argv = ['w', sys.argv[1]]\n"
              "fuzz_worker.main()")
    outcome = run_capped(["-c", script, str(spec)], timeout=BATCH_TIMEOUT_S)
    assert outcome.signal == "SIGSEGV"
