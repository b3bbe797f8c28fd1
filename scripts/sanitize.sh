#!/usr/bin/env bash
# Builds flashport with AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer (clang;
# CUDA and HIP off, OpenCL on) into its own folder (default: build-sanitize), then runs under
# them with ctest: the unit tests, the conformance suite on the reference and cpu_simd backends,
# the OpenCL backend's tests on PoCL, and module loading (not the sweeps labelled long). Any
# report fails the run: UBSan is
# fatal (-fno-sanitize-recover=all), and the only suppressions, in scripts/sanitize.supp, are
# for third-party code (PoCL and LLVM), each with its reason, in the OpenCL tests alone.
#
# Usage: scripts/sanitize.sh [--build-dir DIR] [--quick] [-- CTEST-ARGS...]
#   --quick   leaves out the slowest test (test_opencl_attention_nv_tf32x3, which emulates the
#             NVIDIA kernel warp operation by warp operation on PoCL); CI runs this
# Not run here: install_and_consume (it links a program that is not built with the sanitizers
# against the installed library, which checks packaging, not memory).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$here/build-sanitize
exclude='^install_and_consume$'
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --quick) exclude='^(install_and_consume|test_opencl_attention_nv_tf32x3)$'; shift ;;
    --) shift; break ;;
    *) echo "sanitize.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

"$here/scripts/setup.sh" --clang

san='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer'
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS=-O1 $san" "-DCMAKE_CXX_FLAGS=-O1 $san" \
  "-DCMAKE_EXE_LINKER_FLAGS=$san" "-DCMAKE_SHARED_LINKER_FLAGS=$san" \
  "-DCMAKE_MODULE_LINKER_FLAGS=$san" \
  -DFLASHPORT_CUDA=OFF -DFLASHPORT_HIP=OFF -DFLASHPORT_OPENCL=ON \
  "-DFLASHPORT_CONFORMANCE_BACKENDS=reference;cpu_simd"
cmake --build "$build" -j"$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -LE long -E "$exclude|^test_opencl" "$@"
# The OpenCL tests load PoCL and LLVM, whose leaks at exit scripts/sanitize.supp names (and
# only these tests run with it: it names C++'s operator new, which only those libraries call).
LSAN_OPTIONS=suppressions=$here/scripts/sanitize.supp:print_suppressions=0 \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -LE long -R '^test_opencl' -E "$exclude" \
  "$@"
