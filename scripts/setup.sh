#!/usr/bin/env bash
# Installs what flashport needs on Debian 12 (run as root, or with sudo available), skipping
# what is already there: the build tools, NumPy for the conformance references, PoCL and the
# OpenCL loader, hwloc, Debian's HIP toolchain, and Open MPI (flashport-dist's ring tests). The
# CUDA toolkit is expected to be installed already (nvcc on PATH or in /usr/local/cuda/bin);
# without it the CUDA module is not built.
# --clang adds clang with its sanitizer and libFuzzer runtimes and its OpenMP library, for
# scripts/sanitize.sh and scripts/fuzz.sh (not needed to build or test).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi

packages=(cmake make gcc g++ pkg-config python3 python3-pip python3-dev python3-venv
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
          libhwloc-dev hipcc libamdhip64-dev openmpi-bin libopenmpi-dev)
[ "${1:-}" = --clang ] && packages+=(clang libclang-rt-14-dev libomp-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# NumPy for whichever python3 comes first on PATH: Debian's package for the system Python,
# pip otherwise (a virtual environment or another interpreter).
if ! python3 -c 'import numpy' 2>/dev/null; then
  echo "setup: installing numpy for $(command -v python3)" >&2
  if [ "$(command -v python3)" = /usr/bin/python3 ]; then
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-numpy
  else
    python3 -m pip install -q numpy
  fi
fi

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc found in /usr/local/cuda/bin (add it to PATH to skip this note)" >&2
fi
