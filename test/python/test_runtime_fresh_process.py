"""Saved programs that call every allowlisted custom-call target run in a fresh process.

One process compiles and saves programs calling each LAPACK kernel of
runtime/portable.py's allowlist (four element types), hlopt's own CPU kernels
(two) and the GSPMD partitioner's markers (support/fresh_worker.py); fresh processes,
each with a timeout and a memory cap, load them by every route (`hlopt.load`,
`hlopt.deserialize`, `trust="portable"`, a cache hit, `hlopt run`) and call
them before anything else touched LAPACK or registered hlopt's kernels (a
cache hit is the exception for LAPACK: lowering the function again lets jax
initialise it). Their numbers must be jax.jit's.
A control shows the harness reports a child that segfaults.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlopt.runtime.portable import CUSTOM_CALLS

from support import script
from support.fresh_worker import PROGRAMS
from support.sandbox import assert_survived, run_capped

WORKER = script("fresh_worker")
ENV = {"JAX_ENABLE_X64": "1", "HLOPT_KEY": "fresh-process key " * 2}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path]:
    folder, cache = tmp_path_factory.mktemp("programs"), tmp_path_factory.mktemp("cache") / "c"
    outcome = run_capped([*WORKER, "save", str(folder)], env=dict(ENV, HLOPT_CACHE_DIR=str(cache)))
    assert_survived(outcome)
    return folder, cache


def assert_matches_jax(folder: Path, suffix: str) -> None:
    for name in PROGRAMS:
        with np.load(folder / f"{name}.want.npz") as want, np.load(folder / f"{name}.{suffix}.npz") as got:
            assert sorted(got.files) == sorted(want.files), name
            for k in want.files:
                tol = 1e-4 if want[k].dtype in (np.float32, np.complex64) else 1e-10
                np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=f"{name} output {k}")


def test_the_programs_call_every_allowlisted_target(saved):
    targets = json.loads((saved[0] / "targets.json").read_text())
    assert set().union(*targets.values()) == set(CUSTOM_CALLS)


@pytest.mark.parametrize("mode", ["signed", "bytes", "portable", "cache"])
def test_saved_programs_run_in_a_fresh_process(saved, mode):
    folder, cache = saved
    env = dict(ENV, HLOPT_CACHE_DIR=str(cache))
    if mode == "portable":
        env["HLOPT_KEY"] = "another user's key " * 2
    assert_survived(run_capped([*WORKER, "load", str(folder), mode], env=env))
    assert_matches_jax(folder, mode)


def test_hlopt_run_runs_saved_programs_in_a_fresh_process(saved):
    folder, _ = saved
    for name in PROGRAMS:
        out = folder / f"{name}.run.npz"
        outcome = run_capped(["hlopt", "run", str(folder / f"{name}.hlx"), "--input", str(folder / f"{name}.in.npz"),
                              "--output", str(out)], env=ENV)
        assert_survived(outcome)
        with np.load(out) as got:  # named by output path: put them in leaf order
            np.savez(folder / f"{name}.run-ordered.npz", **{f"{i:02d}": got[k] for i, k in enumerate(got.files)})
    assert_matches_jax(folder, "run-ordered")


def test_the_harness_reports_a_crash_a_hang_and_a_blow_up():
    outcome = run_capped(["-c", "import ctypes; ctypes.string_at(0)"])
    assert outcome.signal == "SIGSEGV" and not outcome.timed_out
    with pytest.raises(AssertionError, match="killed by SIGSEGV"):
        assert_survived(outcome)
    with pytest.raises(AssertionError, match="ran past its timeout"):
        assert_survived(run_capped(["-c", "import time; time.sleep(60)"], timeout=2))
    blow_up = run_capped(["-c", "x = bytearray(8 << 30)"], memory=1 << 30)
    assert blow_up.returncode == 1 and "MemoryError" in blow_up.stderr


LOAD_IMPORTS = """import sys, numpy as np, hlopt
with np.load(sys.argv[1] + '.in.npz') as inputs:
    args = [inputs[k] for k in inputs.files]
hlopt.load(sys.argv[1] + '.hlx')(*args)
print(sorted(m for m in ('jax.extend', 'jax._src.pallas.core', 'scipy.linalg') if m in sys.modules))
"""


def test_loading_imports_only_what_the_program_needs(saved):
    """hlopt.load never imports jax.extend (and Pallas); LAPACK (and scipy's BLAS) only for a program that calls it."""
    folder, _ = saved
    for name, want in (("markers", "[]"), ("linalg_float32", "['scipy.linalg']")):
        outcome = run_capped(["-c", LOAD_IMPORTS, str(folder / name)], env=ENV)
        assert_survived(outcome)
        assert outcome.stdout.strip() == want, (name, outcome.stdout)
