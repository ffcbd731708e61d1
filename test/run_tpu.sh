#!/usr/bin/env bash
# The pytest suite, or every example of the docs, on a machine whose JAX sees a TPU (jax and jaxlib
# 0.10.2 installed; hlopt runs from this checkout, its C++ kernels not needed). One process, since
# one program at a time holds the chip; the processes a test starts run on the CPU. Files about
# XLA:CPU alone, and tests marked float64, are skipped with their reason (test/python/conftest.py).
#
#   bash test/run_tpu.sh [PYTEST ARGS]      the suite (test/python), or the files, -k, @FILE given
#   bash test/run_tpu.sh --shard 2/12 --outcomes out.jsonl
#                                           a twelfth of the files (a few minutes), a JSON line per test in out.jsonl
#   bash test/run_tpu.sh --docs [--outcomes out.jsonl] [-k TEXT]
#                                           every example of the README and the docs (test/docs_examples.py)
#   bash test/run_tpu.sh --wheels DIR ...   first install the wheels in DIR (test/tpu_wheels.sh saves the
#                                           suite's in .whl-tpu/suite) in a temporary folder, after jax's
#   python3 test/tpu_record.py out.jsonl    the outcomes as a record in bench/results/tpu_tests/
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-tpu,cpu}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [[ "${1:-}" == --wheels ]]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$tmp/site" "$2"/*.whl
    export PYTHONPATH="$PYTHONPATH:$tmp/site"  # after the machine's own jax, numpy and scipy
    export PATH="$PATH:$tmp/site/bin"  # filecheck and lit
    shift 2
fi
# float32 products at float32 precision, as on a CPU (a TPU's default passes are bfloat16): the tests
# compare with references computed the same way, to float32 tolerances
export JAX_DEFAULT_MATMUL_PRECISION="${JAX_DEFAULT_MATMUL_PRECISION:-highest}"
# hlopt's console scripts where hlopt is not installed: tests and examples run `hlopt` and `hlopt-opt`
if ! command -v hlopt-opt >/dev/null; then
    bin="$tmp/bin"
    mkdir "$bin"
    for tool in "hlopt hlopt" "hlopt-opt hlopt.cli.opt"; do  # this checkout first, as an install's scripts
        printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m %s "$@"\n' \
            "$PWD/python" "${tool#* }" >"$bin/${tool%% *}"
    done
    chmod +x "$bin/hlopt" "$bin/hlopt-opt"
    export PATH="$bin:$PATH"
fi
if [[ "${1:-}" == --docs ]]; then
    python3 test/docs_examples.py "${@:2}"
else
    python3 -m pytest -p no:cacheprovider -q -rfEs --continue-on-collection-errors "$@"
fi
