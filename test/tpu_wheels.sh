#!/usr/bin/env bash
# The wheels of the packages the test suite and the docs' examples import that a TPU machine lacks
# (it has jax, jaxlib, numpy, scipy, pytest and hypothesis, and reaches no package index), at the
# versions installed here, for its Python 3.11 on x86-64 Linux, saved in .whl-tpu/suite (a folder
# git ignores) for `run` to carry there. Their own dependencies are named here too, not fetched by pip:
# only those the suite imports (flax's orbax-checkpoint and tensorstore are left out).
#
#   bash test/tpu_wheels.sh            run here (where pip reaches PyPI), before the TPU run
#   then on the TPU machine, first:    bash test/run_tpu.sh --wheels .whl-tpu/suite ...
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
    flatbuffers lit filecheck                                # jax.export serialization; the lit tests
    flax optax msgpack PyYAML rich markdown-it-py mdurl Pygments treescope absl-py typing_extensions
    equinox diffrax lineax optimistix jaxtyping wadler_lindig folx
)
out=.whl-tpu/suite
rm -rf "$out"
mkdir -p "$out"
pins=()
for name in "${PACKAGES[@]}"; do
    version="$(python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")" || {
        echo "$name is not installed here: install the test dependencies (pip install -e '.[test]') first" >&2
        exit 1
    }
    pins+=("$name==$version")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$out" "${pins[@]}"
du -sh "$out"
