#!/usr/bin/env bash
# The pytest suite on a machine whose JAX sees a TPU (jax and jaxlib 0.10.2 installed; hlopt runs
# from this checkout, its C++ kernels not needed): one process, since one program at a time holds
# the chip. Files about XLA:CPU alone and float64 cases are skipped with their reason
# (test/python/conftest.py); arguments go to pytest (a file, -k, -x...).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-tpu,cpu}"
# float32 products at float32 precision, as on a CPU (a TPU's default passes are bfloat16): the tests
# compare with references computed the same way, to float32 tolerances
export JAX_DEFAULT_MATMUL_PRECISION="${JAX_DEFAULT_MATMUL_PRECISION:-highest}"
exec python3 -m pytest -p no:cacheprovider -q -rs --continue-on-collection-errors "${@:-test/python}"
