#!/usr/bin/env bash
# The README's test command: install hlopt with its test and docs dependencies (skipped when
# test/install_is_current.py finds nothing to do), then run the lit suite, build the
# documentation with warnings as errors, and run the pytest suite on every logical core
# (pytest-xdist sends whole files to its workers, so a file's module fixtures are built once;
# "logical" counts a VM's vCPUs even where psutil would call two of them one physical core).
#
#   bash test/run_all.sh           everything (what CI runs)
#   bash test/run_all.sh --quick   lit, the docs build and the smoke files of SMOKE below
set -euo pipefail
cd "$(dirname "$0")/.."

# One or two fast files per area, or a slow file's fast tests (each entry runs in seconds on an
# idle machine): the API contract and jax seam, pipelines and hlopt-opt, jets and Laplacians,
# sparse arrays, executable files and their pytrees, hlopt inside plain jax.
SMOKE=(
    test/python/test_architecture.py
    test/python/test_install_is_current.py
    test/python/test_jax_compat.py
    test/python/test_driver.py
    test/python/test_hlopt_opt.py
    test/python/test_jet_api.py
    "test/python/test_sparse_api2.py::test_info_and_pytree_round_trip"
    "test/python/test_sparse_api2.py::test_fromdense_and_sum_duplicates_long_rows"
    "test/python/test_sparse_api2.py::test_jacobians_match_jax"
    "test/python/test_sparse_api2.py::test_grad_options_and_errors"
    test/python/test_runtime_files.py
    test/python/test_saved_pytrees.py
    "test/python/test_plain_jax.py::test_jax_export_runs_where_hlopt_is_never_imported"
    "test/python/test_plain_jax.py::test_plain_jax_jit_matches_reference_and_hlopt_jit[laplacian]"
    "test/python/test_plain_jax.py::test_plain_jax_jit_matches_reference_and_hlopt_jit[bcoo_matvec]"
)

case "${1:-}" in
    "") tests=(test/python) ;;
    --quick) tests=("${SMOKE[@]}") ;;
    *) echo "usage: bash test/run_all.sh [--quick]" >&2; exit 2 ;;
esac

if ! python3 test/install_is_current.py; then
    python3 -m pip install --quiet -e '.[test,docs]'
fi
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=8"
python3 -c "import lit.main; lit.main.main()" -sv test/lit
docs_out="$(mktemp -d)"
python3 -m sphinx -W --keep-going -q -b html docs "$docs_out/html"  # the tutorials run into $docs_out/jupyter_execute
rm -rf "$docs_out"
python3 -m pytest -n logical --dist loadfile "${tests[@]}"
