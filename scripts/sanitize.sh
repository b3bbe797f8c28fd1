#!/usr/bin/env bash
# Builds flashport with clang's sanitizers into a folder of its own and runs tests under them.
#
# Default: AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer (CUDA and HIP off,
# OpenCL on; build-sanitize) over the unit tests, the conformance suite on the reference and
# cpu_simd backends, the OpenCL backend's tests on PoCL, module loading and the fault
# injection tests (not the sweeps labelled long, nor the Python package's tests). Any report
# fails the run: UBSan is fatal (-fno-sanitize-recover=all), and the only suppressions, in
# scripts/sanitize.supp, are for third-party code (PoCL and LLVM), each with its reason, in the
# tests that load PoCL alone.
#
# --thread: ThreadSanitizer instead (build-tsan) over test_threads on the reference, cpu_simd
# and OpenCL (PoCL) backends: 8 threads x 200 calls on one shared context and on a context
# each. cpu_simd's OpenMP teams run under TSan too: clang's libomp with its Archer tool, which
# tells TSan about OpenMP's own synchronisation. Code that is not instrumented (libomp, PoCL)
# is not checked; flashport's own accesses are, wherever they run.
#
# Usage: scripts/sanitize.sh [--thread] [--build-dir DIR] [--quick] [-- CTEST-ARGS...]
#   --quick   leaves out the slowest test (test_opencl_attention_nv_tf32x3, which emulates the
#             NVIDIA kernel warp operation by warp operation on PoCL); CI runs this
# Not run here: install_and_consume (it links a program that is not built with the sanitizers
# against the installed library, which checks packaging, not memory). flashport-dist's MPI
# tests run with every check but LeakSanitizer's (Open MPI's own allocations at exit, made by
# plugins unloaded by then, cannot be named in a suppression).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=address
build=
exclude='^install_and_consume$'
while [ $# -gt 0 ]; do
  case $1 in
    --thread) mode=thread; shift ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --quick) exclude='^(install_and_consume|test_opencl_attention_nv_tf32x3)$'; shift ;;
    --) shift; break ;;
    *) echo "sanitize.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

"$here/scripts/setup.sh" --clang

configure() { # build folder, sanitizer flags, then further cmake arguments
  local dir=$1 san=$2
  shift 2
  cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    "-DCMAKE_C_FLAGS=-O1 $san" "-DCMAKE_CXX_FLAGS=-O1 $san" \
    "-DCMAKE_EXE_LINKER_FLAGS=$san" "-DCMAKE_SHARED_LINKER_FLAGS=$san" \
    "-DCMAKE_MODULE_LINKER_FLAGS=$san" -DFLASHPORT_CUDA=OFF -DFLASHPORT_HIP=OFF "$@"
}

if [ $mode = thread ]; then
  build=${build:-$here/build-tsan}
  configure "$build" '-fsanitize=thread -fno-omit-frame-pointer' \
    -DFLASHPORT_OPENCL=ON -DFLASHPORT_BUILD_TOOLS=OFF
  cmake --build "$build" -j"$(nproc)" --target test_threads flashport-opencl
  archer=$(clang -print-resource-dir)/../../libarcher.so
  [ -f "$archer" ] || { echo "sanitize.sh: no libarcher.so beside clang's libomp" >&2; exit 1; }
  # ignore_noninstrumented_modules: libomp's and PoCL's own memory is synchronised in ways TSan
  # cannot see (Archer asks for it); races in flashport's code are still reported.
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1
  export OMP_TOOL_LIBRARIES=$archer
  ctest --test-dir "$build" --output-on-failure -R '^test_threads_' "$@"
  # OpenCL: not a ctest test of the other builds, whose test command it would slow down cold.
  FLASHPORT_BACKEND_PATH=$build/lib FLASHPORT_CACHE_DIR=$build/program_cache \
    "$build/bin/test_threads" opencl
  exit 0
fi

build=${build:-$here/build-sanitize}
configure "$build" '-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' \
  -DFLASHPORT_OPENCL=ON "-DFLASHPORT_CONFORMANCE_BACKENDS=reference;cpu_simd"
cmake --build "$build" -j"$(nproc)"

# allocator_may_return_null: the fault tests ask for absurd sizes, which the library must
# answer with OUT_OF_MEMORY rather than ASan stopping the process.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Left out: the Python package's tests (label python), whose interpreter is not built with the
# sanitizers and cannot load an instrumented libflashport; the C tests cover the library.
mpi='^dist_mpi'
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -LE '^(long|python|opencl)$' \
  -E "$exclude|$mpi" "$@"
ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -R "$mpi" -E "$exclude" "$@"
# The tests that compile OpenCL programs on PoCL carry the label opencl. PoCL's and LLVM's leaks
# at exit are named in scripts/sanitize.supp, and only these tests run with it (it names C++'s
# operator new, which only those libraries call).
LSAN_OPTIONS=suppressions=$here/scripts/sanitize.supp:print_suppressions=0 \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L '^opencl$' -LE '^(long|python)$' \
  -E "$exclude" "$@"
