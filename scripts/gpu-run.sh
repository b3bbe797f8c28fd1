#!/usr/bin/env bash
# One visit to a GPU machine: build the CUDA and OpenCL modules, then run the stages named on
# the command line (default: all) and pack every log and JSON into $OUT/gpu-results.tar.gz.
#   build     configure and build (CUDA for the local GPU's architecture, OpenCL, no HIP)
#   conf      conformance suite on cuda and opencl, every kernel variant
#   ctest     the unit tests, which also run every CUDA variant when a GPU is present
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on small conformance cases
#   cpu       cpu_simd on the host CPU, 1 and 2 threads, beside PyTorch's CPU attention
#   bench     ladder, seed, fa-grid (bf16, f16, f32 subset), decode; opencl beside cuda;
#             PyTorch's SDPA on the same shapes in the same run
# Stages after a failed one still run; the exit status says whether any failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$here/gpu-out}
logs=$(mktemp -d)
build=$here/build-gpu
bin=$build/bin
stages=${*:-build conf ctest sanitize bench}
failed=()
export PYTHONUNBUFFERED=1

stage() { # stage NAME COMMAND...: runs, logs to $logs/NAME.log, records failure
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$logs/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed+=("$name($rc)")
  # Packed after every stage, so that a visit cut short still brings back what it measured.
  mkdir -p "$out" && tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
}

for s in $stages; do
  case $s in
  build)
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    stage configure cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DFLASHPORT_CUDA=ON -DFLASHPORT_OPENCL=ON -DFLASHPORT_HIP=OFF \
      -DFLASHPORT_CUDA_ARCHITECTURES="${arch}-real"
    stage build cmake --build "$build" -j"$(nproc)"
    stage fixtures cmake --build "$build" --target conformance-data
    stage info "$bin/flashport-info"
    "$bin/flashport-info" --json > "$logs/info.json" 2>&1
    ;;
  conf)
    stage conf-cuda "$bin/flashport-conformance" --backend cuda \
      --json "$logs/conf-cuda.json" --junit "$logs/conf-cuda.xml"
    stage conf-opencl "$bin/flashport-conformance" --backend opencl \
      --json "$logs/conf-opencl.json"
    ;;
  ctest)
    stage ctest ctest --test-dir "$build" --output-on-failure -j8
    ;;
  sanitize)
    small=${SANITIZE_CASES:-seq17,seq127,dim80,gqa8_causal,decode_q1*,q100_kv300_causal,q300_kv100_causal,bnhd_gqa_causal,padded_rows*,f16_*,bf16_*,nan_in_k}
    for tool in memcheck racecheck synccheck; do
      stage "sanitize-$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$bin/flashport-conformance" --backend cuda --cases "$small"
    done
    ;;
  bench)
    b="$bin/flashport-bench"
    stage bench-peaks "$b" --backend cuda --peaks
    stage bench-ladder "$b" --preset ladder --backend cuda --json "$logs/ladder.json"
    stage bench-seed "$b" --preset seed --backend cuda --kernel all --json "$logs/seed-cuda.json"
    for dt in bf16 f16; do
      stage "bench-fa-grid-$dt" python3 "$here/bench/compare_torch.py" --preset fa-grid \
        --dtype $dt --device cuda --impl flash,cudnn,efficient --flashport-bench "$b" \
        --backend cuda --json "$logs/fa-grid-$dt.json"
    done
    stage bench-f32 python3 "$here/bench/compare_torch.py" --preset fa-grid --dtype f32 \
      --device cuda --impl efficient --flashport-bench "$b" --backend cuda \
      --json "$logs/fa-grid-f32.json"
    stage bench-seed-torch python3 "$here/bench/compare_torch.py" --preset seed --device cuda \
      --flashport-bench "$b" --backend cuda --json "$logs/seed-torch.json"
    stage bench-decode python3 "$here/bench/compare_torch.py" --preset decode --device cuda \
      --flashport-bench "$b" --backend cuda --json "$logs/decode.json"
    for d in 64 128; do
      for n in 1024 4096 16384; do
        h=$((2048 / d)); bsz=$((16384 / n))
        stage "bench-opencl-f32-d$d-n$n" "$b" --backend opencl --b $bsz --hq $h --nq $n --d $d \
          --dtype f32 --json "$logs/opencl-f32-d$d-n$n.json"
        stage "bench-cuda-f32-d$d-n$n" "$b" --backend cuda --b $bsz --hq $h --nq $n --d $d \
          --dtype f32 --json "$logs/cuda-f32-d$d-n$n.json"
      done
      stage "bench-opencl-f16-d$d" "$b" --backend opencl --b 4 --hq $((2048 / d)) --nq 4096 \
        --d $d --dtype f16 --json "$logs/opencl-f16-d$d.json"
    done
    ;;
  cpu)
    # The GPU machine's host CPU is idle and has many cores: the cpu_simd figures come from here.
    b="$bin/flashport-bench"
    for t in 1 2; do
      stage "cpu-bench-t$t" "$b" --preset cpu --backend cpu_simd --threads $t \
        --json "$logs/cpu-t$t.json"
      stage "cpu-torch-t$t" python3 "$here/bench/compare_torch.py" --preset cpu --device cpu \
        --threads $t --impl flash,math --flashport-bench "$b" --backend cpu_simd \
        --flashport-args "--threads $t" --json "$logs/cpu-torch-t$t.json"
    done
    ;;
  *) echo "unknown stage $s"; failed+=("$s(unknown)") ;;
  esac
done

echo "stages failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
