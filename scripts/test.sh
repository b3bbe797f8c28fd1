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
# A GPU module is built where its GPU is present, or everywhere with
# FLASHPORT_TEST_GPU_MODULES=1. Without the GPU its kernels can only be compiled, which is most
# of the build (many minutes on two cores), so .ci/run does that compile check, and runs the
# tests that need only the modules' files, as a step of its own. One CUDA target (sm_90, plus
# the sm_90a Hopper file) and one AMD target keep it short; scripts/main.sh builds every target.
gpu_args=()
if [ "${FLASHPORT_TEST_GPU_MODULES:-0}" = 1 ]; then
  gpu_args+=(-DFLASHPORT_CUDA=AUTO -DFLASHPORT_HIP=AUTO)
else
  if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    gpu_args+=(-DFLASHPORT_CUDA=OFF)
    echo "test.sh: no NVIDIA GPU here: the cuda module is left out (FLASHPORT_TEST_GPU_MODULES=1 compiles it)" >&2
  fi
  if [ ! -e /dev/kfd ]; then
    gpu_args+=(-DFLASHPORT_HIP=OFF)
    echo "test.sh: no AMD GPU here: the hip module is left out (FLASHPORT_TEST_GPU_MODULES=1 compiles it)" >&2
  fi
fi
FLASHPORT_CUDA_ARCHITECTURES=${FLASHPORT_CUDA_ARCHITECTURES:-90-real} \
FLASHPORT_HIP_TARGETS=${FLASHPORT_HIP_TARGETS:-gfx90a} \
  "$here/scripts/build.sh" "$here/build-test" "-DPython_EXECUTABLE=$python" "${gpu_args[@]}"
ctest --test-dir "$here/build-test" --output-on-failure -j"$(nproc)" -LE long "$@"
