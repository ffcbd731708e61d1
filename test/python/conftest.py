"""pytest setup: eight host CPU devices and cheap XLA compiles (set before jax is imported),
a key of the tests' own, the partitioner fixture; each file named as it starts and time per file.

The user's key (HLOPT_KEY, else $XDG_CONFIG_HOME/hlopt/key) authenticates
executable files and cache entries; the tests (and the processes they start)
use a key file in a temporary folder, never the real ~/.config.
"""

import atexit
import collections
import os
import shutil
import tempfile

import pytest

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    flags += " --xla_force_host_platform_device_count=8"
# XLA:CPU's LLVM back end at -O0 without its expensive passes (what JAX's own
# `jax_disable_most_optimizations` sets): most of the suite's time is compiling small programs,
# and each result is compared with a reference compiled the same way. An
# --xla_backend_optimization_level in XLA_FLAGS runs the tests at that level instead.
if "xla_backend_optimization_level" not in flags:
    flags += " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = flags.strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_config_home = tempfile.mkdtemp(prefix="hlopt-test-config-")
atexit.register(shutil.rmtree, _config_home, ignore_errors=True)
os.environ["XDG_CONFIG_HOME"] = _config_home
os.environ.pop("HLOPT_KEY", None)


@pytest.fixture(params=[True, False], ids=["shardy", "gspmd"])
def partitioner(request):
    """Runs a test with Shardy, then with GSPMD, as XLA's SPMD partitioner."""
    import jax  # after the flags above are set

    old = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", request.param)
    yield request.param
    jax.config.update("jax_use_shardy_partitioner", old)


@pytest.fixture(scope="module")
def x64_module():
    """float64 on for a whole test module (`pytestmark = pytest.mark.usefixtures("x64_module")`), as before after it."""
    import jax

    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


_seconds_per_file: collections.Counter[str] = collections.Counter()
# Under pytest-xdist (`-n`), the controller's progress line per file: tests left, outcomes.
_tests_left: collections.Counter[str] = collections.Counter()
_outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
_config: pytest.Config | None = None


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under pytest-xdist, count each file's tests once (every worker collects the same ids)."""
    if not _tests_left:
        _tests_left.update(_file(nodeid) for nodeid in ids)


_started: set[str] = set()


def pytest_runtest_logstart(nodeid, location):
    """Under pytest-xdist, name each file as its first test starts, so a file that runs for
    minutes is seen running (xdist's own progress is dots)."""
    path = _file(nodeid)
    if _tests_left and path not in _started:
        _started.add(path)
        reporter = _config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line(f"{path}: started, {_tests_left[path]} tests")


def pytest_runtest_logreport(report):
    """Add up setup, call and teardown time per test file; under pytest-xdist, print a line
    per file when its last test is done (xdist's own progress names no file)."""
    path = _file(report.nodeid)
    _seconds_per_file[path] += report.duration
    if not _tests_left:
        return
    if report.when == "call":
        _outcomes[path][report.outcome] += 1
    elif not report.passed:  # an error in setup or teardown, or a skip at setup
        _outcomes[path]["error" if report.failed else report.outcome] += 1
    if report.when != "teardown":
        return
    _tests_left[path] -= 1
    if _tests_left[path] == 0:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_outcomes[path].items()))
        reporter = _config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line(f"{path}: {counts} ({_seconds_per_file[path]:.1f} s)")


def pytest_configure(config):
    """Keep the config: the per-file line is written through its terminal reporter."""
    global _config
    _config = config


def pytest_terminal_summary(terminalreporter):
    """The ten slowest files, so that a slow addition is seen where it lands."""
    if not _seconds_per_file:
        return
    terminalreporter.write_sep("=", "seconds per file (slowest 10)")
    for path, seconds in _seconds_per_file.most_common(10):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    terminalreporter.write_line(f"{sum(_seconds_per_file.values()):8.1f} s  in {len(_seconds_per_file)} files")


# Test files about XLA:CPU alone, skipped (with this reason) when the suite runs on another platform
# (`bash test/run_tpu.sh`): everything else runs there as on the CPU.
CPU_ONLY = {
    "test_xla_cpu_tuning.py": "XLA:CPU tuning passes, which run only for CPU compiles",
    "test_xla_cpu_column_selects.py": "an XLA:CPU tuning pass, which runs only for CPU compiles",
    "test_xla_cpu_ynn_fusion.py": "an XLA:CPU compile option",
    "test_sparse_kernels.py": "hlopt's C++ CPU kernels",
    "test_native_asan.py": "hlopt's C++ CPU kernels",
    "test_native_optional.py": "hlopt's C++ CPU kernels",
    "test_sharded.py": "eight devices (the CPU's --xla_force_host_platform_device_count)",
    "test_runtime_multiprocess.py": "several processes on one device (one program at a time holds a TPU)",
    "test_cache.py": "cache entries shared by several processes (one program at a time holds a TPU)",
}


def pytest_collection_modifyitems(config, items):
    """On a platform other than CPU, skip with its reason what holds for XLA:CPU alone (`CPU_ONLY`)
    and what needs float64, which a TPU does not compute (tests under `x64_module`)."""
    import jax

    platform = jax.default_backend()
    if platform == "cpu":
        return
    for item in items:
        reason = CPU_ONLY.get(item.path.name)
        if reason is None and "x64_module" in getattr(item, "fixturenames", ()):
            reason = "float64, which the TPU does not compute"
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"on {platform}: tests {reason}"))
