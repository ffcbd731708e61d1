"""`hlopt demo`, the README's main job, runs end to end in a fresh process, as a newcomer runs it."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HLOPT = str(pathlib.Path(sys.executable).parent / "hlopt")  # the console script next to this interpreter


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> subprocess.CompletedProcess:
    """`hlopt demo`, every section, run once for the tests that read its output."""
    # From the folder that holds the clone (named hlopt), with one host device and the user's log level:
    # the partitioning section reruns itself with 8 devices, and nothing may shadow the package or log.
    folder = tmp_path_factory.mktemp("demo")
    (folder / "hlopt").symlink_to(ROOT)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")}
    return subprocess.run([HLOPT, "demo"], capture_output=True, text=True, timeout=900, cwd=folder, env=env)


def section_output(demo: subprocess.CompletedProcess, name: str) -> str:
    """What the demo's section `name` printed, between its announcement and its "done" line."""
    assert demo.returncode == 0, demo.stderr[-3000:]
    match = re.search(rf"^\[\d+/\d+\] {re.escape(name)}\.\.\.\n(.*)^\[\d+/\d+\] {re.escape(name)}: done in ",
                      demo.stdout, re.S | re.M)
    assert match, demo.stdout[-3000:]
    return match[1]


def test_demo_runs_every_section(demo):
    proc = demo
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    from hlopt.demos import SECTIONS

    assert f"hlopt demo: {len(SECTIONS)} section(s) ran, every result matches JAX" in proc.stdout
    assert "--- after hlopt-default ---" in proc.stdout


def test_demo_unknown_section():
    proc = subprocess.run([sys.executable, "-m", "hlopt", "demo", "nope"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("hlopt: error: no demo section 'nope'")
    assert "Traceback" not in proc.stderr


def test_key_reuse_section_names_the_example_lines(demo):
    # The example is compiled under its own file name: reports point into it, not at hlopt's
    # console script (which is the first frame outside hlopt's folders).
    from hlopt.demos.key_reuse import EXAMPLE, EXAMPLE_FILE

    lines = EXAMPLE.splitlines()
    second = next(n for n, line in enumerate(lines, 1) if "bernoulli(key" in line)
    first = next(n for n, line in enumerate(lines, 1) if "normal(key" in line)
    out = section_output(demo, "key-reuse").splitlines()
    column = lines[second - 1].index("jax.random.bernoulli")
    assert f"{EXAMPLE_FILE}:{second}:{column}: error: PRNG key is consumed a second time" in out
    column = lines[first - 1].index("jax.random.normal")
    assert f"{EXAMPLE_FILE}:{first}:{column}: note: the key was first consumed here" in out
    assert not any("bin/hlopt:" in line for line in out)


def test_demo_announces_and_times_each_section():
    proc = subprocess.run([sys.executable, "-m", "hlopt", "demo", "driver", "key-reuse"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert [re.sub(r"\d+\.\d s$", "T s", line) for line in steps] == [
        "[1/2] driver...", "[1/2] driver: done in T s", "[2/2] key-reuse...", "[2/2] key-reuse: done in T s"]
    out = proc.stdout
    assert out.index("[1/2] driver...") < out.index("=== driver") < out.index("[1/2] driver: done in")


def test_vmc_section_lowers_the_energy_and_matches_the_hessian_trace(demo):
    """`hlopt demo`'s vmc section: the printed energies fall toward the exact 6.5, and on every step the
    kinetic energy by hlopt.laplacian equals the one by jnp.trace(jax.hessian)."""
    rows = [line.split() for line in section_output(demo, "vmc").splitlines()
            if re.fullmatch(r"\s*\d+( +[-+\d.e]+){6}", line)]
    from hlopt.demos.vmc import EXACT, STEPS

    assert [int(r[0]) for r in rows] == list(range(STEPS))
    energy, error, by_hlopt, by_hessian, difference = (np.array([float(r[i]) for r in rows]) for i in range(1, 6))
    np.testing.assert_allclose(by_hlopt, by_hessian, rtol=1e-9)
    assert np.all(difference < 1e-9)
    assert energy[-1] < energy[0] - 5 * (error[0] + error[-1])
    assert abs(energy[-1] - EXACT) < 0.5 * abs(energy[0] - EXACT)
    assert np.all(energy > EXACT - 5 * error)  # variational: never below the ground state beyond the noise


def test_demo_help_lists_every_section():
    from hlopt.demos import SECTIONS

    proc = subprocess.run([sys.executable, "-m", "hlopt", "demo", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    listed = " ".join(proc.stdout.split())  # argparse wraps the help text
    assert all(name in listed for name in SECTIONS), listed
