#!/usr/bin/env bash
# The README's test command: install hlopt with its test and docs dependencies, then run
# the lit suite, build the documentation with warnings as errors, and run the pytest suite
# on every logical core (pytest-xdist sends whole files to its workers, so a file's module
# fixtures are built once; "logical" counts a VM's vCPUs even where psutil would call two
# of them one physical core).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e '.[test,docs]'
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=8"
python3 -c "import lit.main; lit.main.main()" -sv test/lit
docs_out="$(mktemp -d)"
python3 -m sphinx -W --keep-going -q -b html docs "$docs_out/html"  # the tutorials run into $docs_out/jupyter_execute
rm -rf "$docs_out"
python3 -m pytest -n logical --dist loadfile test/python
