"""pytest setup: eight host CPU devices (set before jax is imported) and float64; time per file."""

import collections
import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_seconds_per_file: collections.Counter[str] = collections.Counter()


def pytest_runtest_logreport(report):
    """Add up setup, call and teardown time per test file."""
    _seconds_per_file[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    """The ten slowest files, so that a slow addition is seen where it lands."""
    if not _seconds_per_file:
        return
    terminalreporter.write_sep("=", "seconds per file (slowest 10)")
    for path, seconds in _seconds_per_file.most_common(10):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    terminalreporter.write_line(f"{sum(_seconds_per_file.values()):8.1f} s  in {len(_seconds_per_file)} files")
