#!/usr/bin/env bash
# The README's test command: install hlopt with its test dependencies, then run
# the lit suite and the pytest suite, each on every core (pytest-xdist sends whole files to
# its workers, so a file's module fixtures and compiled programs are built once).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e '.[test]'
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=8"
python3 -c "import lit.main; lit.main.main()" -sv test/lit
python3 -m pytest -n auto --dist loadfile test/python
