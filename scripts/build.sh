#!/usr/bin/env bash
# Configures and builds flashport into the folder given (default: build). Extra arguments go to
# cmake's configure step. FLASHPORT_CUDA_ARCHITECTURES picks the CUDA targets (default: the
# project's sm_80, sm_89, sm_90 + PTX), FLASHPORT_HIP_TARGETS the AMD targets (default: gfx90a,
# gfx940, gfx1030; a semicolon-separated list).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
shift || true
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
args=(-S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release)
[ -n "${FLASHPORT_CUDA_ARCHITECTURES:-}" ] && args+=("-DFLASHPORT_CUDA_ARCHITECTURES=$FLASHPORT_CUDA_ARCHITECTURES")
[ -n "${FLASHPORT_HIP_TARGETS:-}" ] && args+=("-DFLASHPORT_HIP_TARGETS=$FLASHPORT_HIP_TARGETS")
cmake "${args[@]}" "$@"
cmake --build "$build" -j"$(nproc)"
