#!/usr/bin/env bash
# The test command: installs what is missing, builds into build-test, and runs every test
# (unit tests, and the conformance suite on every backend built here) with ctest, except those
# labelled long (sweeps that take about an hour without a GPU; scripts/gpu-run.sh's ctest
# stage runs them, or: ctest --test-dir build-test -L long). Arguments go to ctest. The Python
# package's tests run in build-test/python-env (scripts/python-env.sh: pytest and PyTorch).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$here/scripts/setup.sh"
# The Python package's tests run in a virtual environment with pytest and PyTorch.
python=$("$here/scripts/python-env.sh" "$here/build-test/python-env")
# Tests only compile the GPU modules where there is no GPU: one CUDA target and one AMD target
# keep that short (scripts/main.sh builds every target).
FLASHPORT_CUDA_ARCHITECTURES=${FLASHPORT_CUDA_ARCHITECTURES:-90-real} \
FLASHPORT_HIP_TARGETS=${FLASHPORT_HIP_TARGETS:-gfx90a} \
  "$here/scripts/build.sh" "$here/build-test" "-DPython_EXECUTABLE=$python"
ctest --test-dir "$here/build-test" --output-on-failure -j"$(nproc)" -LE long "$@"
