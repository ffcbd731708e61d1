"""pytest setup: eight host CPU devices and cheap XLA compiles (set before jax is imported),
a key of the tests' own, the partitioner, float64 and Pallas-interpreter fixtures; each file
named as it starts and time per file; on another platform (a TPU), what holds for XLA:CPU alone
and float64 skipped with the reason;
`--shard K/N` and `--outcomes PATH` for runs split over several sittings (test/run_tpu.sh).

The user's key (HLOPT_KEY, else $XDG_CONFIG_HOME/hlopt/key) authenticates
executable files and cache entries; the tests (and the processes they start)
use a key file in a temporary folder, never the real ~/.config.
"""

import atexit
import collections
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pytest

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    flags += " --xla_force_host_platform_device_count=8"
# XLA:CPU compiling fast: its LLVM back end at -O0 without its expensive passes (what JAX's own
# `jax_disable_most_optimizations` sets), its loop emitters rather than the fusion emitters, and
# each program's code generated in one piece (the tests' workers already fill the cores). Most
# of the suite's time is compiling small programs, and each result is compared with a reference
# compiled the same way. An --xla_backend_optimization_level in XLA_FLAGS runs the tests with
# XLA's own settings at that level instead.
if "xla_backend_optimization_level" not in flags:
    flags += (" --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
              " --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1")
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


@pytest.fixture
def interpreted():
    """`tpu-sparse-products` calls its Pallas kernel in Pallas's interpreter (portable StableHLO, which
    runs here) while the test runs."""
    from hlopt.passes.tpu import sparse_products  # after the flags above are set
    from hlopt.sparse import tpu_products

    kept = sparse_products.register_product_kernel(
        lambda m, shape, nse, dtype, index: tpu_products.lowered_text(m, shape, nse, dtype, index, interpret=True)
        if tpu_products.takes(m, shape, dtype) else None)
    yield
    sparse_products.register_product_kernel(kept)


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


def _outcome(report: pytest.TestReport) -> str | None:
    """What a report says of its test: the call's outcome, or an error or skip in setup or
    teardown; None for a setup or teardown that passed."""
    if report.when == "call":
        return report.outcome
    if report.passed:
        return None
    return "error" if report.failed else report.outcome


def _detail(report: pytest.TestReport) -> str | None:
    """A skip's reason, or what the error that failed a test says (its start)."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    crash = getattr(report.longrepr, "reprcrash", None)
    return " ".join(crash.message.split())[:800] if crash is not None and crash.message else None


_test_outcomes: dict[str, tuple[str, str | None]] = {}
_seconds_per_test: collections.Counter[str] = collections.Counter()


def pytest_runtest_logreport(report):
    """Add up setup, call and teardown time per test file; with `--outcomes`, append the test's
    line once its teardown is done; under pytest-xdist, print a line per file when its last test is
    done (xdist's own progress names no file)."""
    path = _file(report.nodeid)
    _seconds_per_file[path] += report.duration
    _seconds_per_test[report.nodeid] += report.duration
    outcome = _outcome(report)
    if outcome is not None and _test_outcomes.get(report.nodeid, ("passed",))[0] == "passed":
        _test_outcomes[report.nodeid] = (outcome, _detail(report))
    outcomes = _config.getoption("outcomes")
    if report.when == "teardown":
        final, detail = _test_outcomes.pop(report.nodeid, ("passed", None))
        seconds = _seconds_per_test.pop(report.nodeid)
        if outcomes and not hasattr(_config, "workerinput"):  # under pytest-xdist, the controller writes
            line = {"test": report.nodeid, "file": path, "outcome": final, "seconds": round(seconds, 3),
                    "detail": detail}
            with open(outcomes, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
    if not _tests_left:
        return
    if outcome is not None:
        _outcomes[path][outcome] += 1
    if report.when != "teardown":
        return
    _tests_left[path] -= 1
    if _tests_left[path] == 0:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_outcomes[path].items()))
        reporter = _config.pluginmanager.get_plugin("terminalreporter")
        reporter.write_line(f"{path}: {counts} ({_seconds_per_file[path]:.1f} s)")


def pytest_configure(config):
    """Keep the config (the per-file line is written through its terminal reporter) and name the
    marker `float64`."""
    global _config
    _config = config
    config.addinivalue_line("markers", "float64: factors, solves or transforms (FFT) in float64 on the device, "
                            "which a TPU cannot")


def pytest_terminal_summary(terminalreporter):
    """The ten slowest files, so that a slow addition is seen where it lands."""
    if not _seconds_per_file:
        return
    terminalreporter.write_sep("=", "seconds per file (slowest 10)")
    for path, seconds in _seconds_per_file.most_common(10):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    terminalreporter.write_line(f"{sum(_seconds_per_file.values()):8.1f} s  in {len(_seconds_per_file)} files")


# Test files, tests (FILE::NAME) or cases (FILE::NAME[ID]) about XLA:CPU alone, skipped (with this reason) when the suite
# runs on another platform (`bash test/run_tpu.sh`): everything else runs there as on the CPU.
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
    "test_sparse_bcsr_products.py::test_products_equal_scipy_on_both_paths": "that a compile for the default "
    "device calls the CPU CSR kernel",
    "test_sparse_bcsr_products.py::test_edge_matrices": "that a compile for the default device calls the CPU CSR kernel",
    "test_sparse_bcsr_products.py::test_large_matrix_over_threads_equals_scipy": "the CPU CSR kernel's thread-pool split",
    "test_sparse_bcsr_products.py::test_large_spmv_equals_scipy": "the CPU CSR kernel's prefetching loop",
    "test_sparse_bcsr_products.py::test_portable_modules_never_name_the_kernel": "that a compile for the default "
    "device calls the CPU CSR kernel",
    "test_sparse_bcsr_products.py::test_a_bad_indptr_is_refused_when_the_program_runs": "the CPU CSR kernel's "
    "checks of its operands",
    "test_sparse_bcsr_products.py::test_the_allowlist_accepts_the_call_the_pass_emits": "that a compile for the "
    "default device calls the CPU CSR kernel",
    "test_jet_linear_solve.py::test_laplacian_of_slogdet_is_loop_free": "the LAPACK calls of a CPU compile",
    "test_linalg_table.py::test_scratch_entry_gives_the_taylor_rule": "a CPU LAPACK kernel under a scratch name",
    "test_linalg_table.py::test_scratch_entry_gives_the_reverse_mode_rule": "a CPU LAPACK kernel under a scratch name",
    "test_linalg_table.py::test_without_the_entry_the_target_has_no_rules_and_is_refused": "a CPU LAPACK kernel "
    "under a scratch name",
    "test_linalg_rules.py::test_unknown_layout_is_refused": "the layouts of a CPU LAPACK call",
    "test_linalg_rules.py::test_svd_spellings_are_gesdd_and_gesvd": "the LAPACK calls jax emits for the CPU",
    "test_linalg_rules.py::test_svd_modes_without_a_rule_are_refused": "the LAPACK calls jax emits for the CPU",
    "test_runtime_portable.py::test_every_rule_accepts_what_jax_emits": "the LAPACK calls jax emits for the CPU",
    "test_runtime_portable.py::test_every_target_refuses_a_second_or_changed_attribute_dictionary": "the LAPACK "
    "calls jax emits for the CPU",
    "test_op_table.py::test_one_entry_gives_a_custom_call_its_jet_and_vjp": "a CPU LAPACK kernel under a scratch name",
    "test_op_table.py::test_without_its_entry_a_custom_call_is_refused_by_target": "a CPU LAPACK kernel under a "
    "scratch name",
    "test_sparse_negative_indices.py::test_matrix_products_treat_negative_indices_as_padding[float32-True]": "that "
    "a compile for the default device calls the CPU BCOO kernel",
}
# Platforms whose compiler has no float64 factorizations (LU, Cholesky, triangular solve, eigh, QR, SVD) or FFT,
# though it computes float64 elementwise ops and products: a test marked `float64` is skipped there.
NO_FLOAT64 = {"tpu"}
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def pytest_addoption(parser):
    """`--shard K/N` and `--outcomes PATH`, with which `test/run_tpu.sh` splits a run into calls that
    each fit a time limit and keeps what each test gave when a call is cut short."""
    group = parser.getgroup("hlopt")
    group.addoption("--shard", metavar="K/N", help="run only the K-th of N groups of test files (1 <= K <= N), "
                    "balanced by the seconds per file of the newest records in bench/results/tpu_tests/ and cpu_tests/")
    group.addoption("--outcomes", metavar="PATH", help="append a JSON line per test to PATH as it ends: its "
                    "file, outcome, seconds and skip reason (test/tpu_record.py turns the lines into a record)")


def _record_seconds(kind: str) -> dict[str, float]:
    """Seconds per test file in the newest record of `kind` in bench/results/ (`tpu_tests`: a run on a
    TPU; `cpu_tests`: a CI run), empty when there is none."""
    records = sorted((RESULTS / kind).glob("*.json"))
    if not records:
        return {}
    files = json.loads(records[-1].read_text(encoding="utf-8"))["files"]
    return {path: entry["seconds"] for path, entry in files.items()}


def shard_of(files: list[str], shard: str) -> set[str]:
    """The files of shard `shard` ("K/N"): files go, longest first, to the group with the fewest
    seconds so far. A file's seconds are the newest TPU record's, else the CPU record's scaled by
    the median ratio of the files both hold, else the median file's."""
    match = re.fullmatch(r"(\d+)/(\d+)", shard)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise pytest.UsageError(f"--shard takes K/N with 1 <= K <= N, as 2/4; got {shard!r}")
    k, n = int(match[1]), int(match[2])
    tpu, cpu = _record_seconds("tpu_tests"), _record_seconds("cpu_tests")
    both = [tpu[p] / cpu[p] for p in tpu.keys() & cpu.keys() if cpu[p] > 0]
    scale = statistics.median(both) if both else 1.0
    known = {p: tpu[p] if p in tpu else cpu[p] * scale for p in files if p in tpu or p in cpu}
    default = statistics.median(known.values()) if known else 1.0
    weight = {path: known.get(path, default) for path in files}
    groups: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(n)]
    for path in sorted(files, key=lambda p: (-weight[p], p)):
        i = min(range(n), key=lambda j: (groups[j][0], j))
        groups[i] = (groups[i][0] + weight[path], [*groups[i][1], path])
    return set(groups[k - 1][1])


def pytest_collection_modifyitems(config, items):
    """Keep the files of `--shard`; on a platform other than CPU, skip with its reason what holds for
    XLA:CPU alone (`CPU_ONLY`) and, where the platform has no float64 factorizations or FFT
    (`NO_FLOAT64`), the tests marked `float64`. There the processes the tests start run on the CPU: one program at a time
    holds the chip, and this one does."""
    shard = config.getoption("shard")
    if shard:
        files = shard_of(sorted({_file(item.nodeid) for item in items}), shard)
        config.hook.pytest_deselected(items=[item for item in items if _file(item.nodeid) not in files])
        items[:] = [item for item in items if _file(item.nodeid) in files]
    import jax

    platform = jax.default_backend()
    if config.getoption("outcomes") and not hasattr(config, "workerinput"):
        with open(config.getoption("outcomes"), "a", encoding="utf-8") as out:
            out.write(json.dumps({"device": {"platform": platform, "kind": jax.devices()[0].device_kind,
                                             "count": jax.device_count()}, "jax": jax.__version__,
                                  "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    if platform == "cpu":
        return
    os.environ["JAX_PLATFORMS"] = "cpu"
    for item in items:
        reason = next((CPU_ONLY[key] for key in (item.path.name, f"{item.path.name}::{item.originalname}",
                                                  f"{item.path.name}::{item.name}") if key in CPU_ONLY), None)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"on {platform}: tests {reason}"))
        elif platform in NO_FLOAT64 and item.get_closest_marker("float64"):
            item.add_marker(pytest.mark.skip(reason=f"{platform.upper()} has no float64 factorizations or FFT"))
