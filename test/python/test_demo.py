"""`hlopt demo`, the README's main job, runs end to end in a fresh process."""

import subprocess
import sys


def test_demo_runs_every_section():
    proc = subprocess.run([sys.executable, "-m", "hlopt.cli.main", "demo"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from hlopt.demo import SECTIONS

    assert f"hlopt demo: {len(SECTIONS)} section(s) ran, every result matches JAX" in proc.stdout
    assert "--- after hlopt-default ---" in proc.stdout


def test_demo_unknown_section():
    proc = subprocess.run([sys.executable, "-m", "hlopt.cli.main", "demo", "nope"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("hlopt: error: no demo section 'nope'")
    assert "Traceback" not in proc.stderr
