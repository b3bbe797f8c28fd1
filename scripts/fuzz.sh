#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# (fatal) into their own folder (default: build-fuzz), then runs each for a bounded time, one
# process at a time, starting from its seed corpus in fuzz/corpus/<target>/. Inputs found on the
# way go to <build>/corpus/<target>/ (the seeds in the repository are only read); a crash, a
# leak, a time-out or an out-of-memory leaves its input in <build>/artifacts/ and fails the run.
#
# Usage: scripts/fuzz.sh [--seconds S] [--runs N] [--build-dir DIR] [TARGET...]
#   --seconds S   time per target (default 12: about a minute for the five targets)
#   --runs N      stop a target after N inputs instead (whichever comes first)
#   TARGET        fuzz_npy, fuzz_backend_spec, fuzz_tile_env, fuzz_desc, fuzz_cpu_simd
#                 (default: all)
# A line per target gives the inputs run and the coverage reached, and the last line the count
# of targets that passed and failed.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$here/build-fuzz
seconds=12
runs=-1
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    fuzz_*) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_npy fuzz_backend_spec fuzz_tile_env fuzz_desc fuzz_cpu_simd)

"$here/scripts/setup.sh" --clang

# The library is instrumented for coverage (fuzzer-no-link); only the targets link libFuzzer.
san='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer'
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS=-O1 -fsanitize=fuzzer-no-link $san" \
  "-DCMAKE_CXX_FLAGS=-O1 -fsanitize=fuzzer-no-link $san" \
  "-DCMAKE_EXE_LINKER_FLAGS=$san" "-DCMAKE_SHARED_LINKER_FLAGS=$san" \
  "-DCMAKE_MODULE_LINKER_FLAGS=$san" \
  -DFLASHPORT_CUDA=OFF -DFLASHPORT_HIP=OFF -DFLASHPORT_OPENCL=ON \
  -DFLASHPORT_BUILD_TESTS=OFF -DFLASHPORT_BUILD_FUZZERS=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/artifacts"
status=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  log=$build/$t.log
  echo "== $t: ${seconds}s from fuzz/corpus/$t" >&2
  rc=0
  "$build/bin/$t" -max_total_time="$seconds" -runs="$runs" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$here/fuzz/corpus/$t" \
    >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  if [ $rc -ne 0 ]; then
    status=1
    tail -n 60 "$log" >&2
    summary+=("$t: FAILED (exit $rc) after ${execs:-?} inputs; input in $build/artifacts/")
  else
    summary+=("$t: ${execs:-?} inputs, no finding; ${last#* }")
  fi
done
printf '%s\n' "${summary[@]}"
failed=$(printf '%s\n' "${summary[@]}" | grep -c ': FAILED' || true)
echo "fuzz: $((${#targets[@]} - failed)) passed, $failed failed"
exit $status
