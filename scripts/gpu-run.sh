#!/usr/bin/env bash
# One visit to a GPU machine: build the CUDA and OpenCL modules, then run the stages named on
# the command line and pack every log and JSON into $OUT/gpu-results.tar.gz (after each stage,
# so a visit cut short still brings back what it measured). Stages:
#   build         configure and build (CUDA for the local GPU's architecture, OpenCL, no HIP);
#                 BUILD_TARGETS builds only those targets (and the fixtures)
#   conf          conformance suite on cuda and opencl, every kernel variant
#   conf-tc       conformance of the tensor-core variants under every tile configuration
#                 (FLASHPORT_CUDA_TC_CONFIG = 0 .. TC_CONFIGS-1, default 3;
#                 FLASHPORT_CUDA_TF32X3_CONFIG = 0 .. TF32X3_CONFIGS-1, default 4;
#                 FLASHPORT_CUDA_TF32X3_WIDE_CONFIG = 0 .. WIDE_CONFIGS-1, default 3;
#                 FLASHPORT_CUDA_HOPPER_CONFIG = 0 .. HOPPER_CONFIGS-1, default 2)
#   ctest         the unit tests, which also run every CUDA variant when a GPU is present, and
#                 those labelled long
#   streams       contexts on the caller's own queue: test_cuda_stream (a CUDA stream of the
#                 test's, beside a kernel of its own and a second busy stream) and
#                 test_opencl_queue (an OpenCL queue of the test's), with their output
#   memcheck, racecheck, synccheck, initcheck
#                 compute-sanitizer with that tool over small conformance cases (SANITIZE_CASES)
#                 on every CUDA variant at its default tile configuration (SANITIZE_KERNELS
#                 narrows), then on each tensor-core variant forced under each of its tile
#                 configurations (TC_CONFIGS, TF32X3_CONFIGS, WIDE_CONFIGS, HOPPER_CONFIGS as for
#                 conf-tc), then over test_guard_zones on cuda (every variant, outputs between
#                 canaries).
#                 Sanitizer stages named one after another run as one pool, SANITIZE_JOBS
#                 processes at a time (default 8): a sanitized kernel is bound by the tool's
#                 host-side bookkeeping, so one process leaves the GPU mostly idle
#   guard         test_guard_zones on every backend present (every variant of each), then on
#                 cuda under each tensor-core tile configuration
#   threads       test_threads on cuda and on opencl: 8 threads x 200 calls on one shared
#                 context and on a context each, bit-identical to the serial results
#   tc-sweep      tensor-core tile configurations (scripts/tc-sweep.sh), bf16 at N = 16384
#   tf32-sweep    the same for the 3xTF32 kernel, f32 at N = 4096, d = 64 and 128
#   wide-sweep    the wide-head 3xTF32 kernel under each tile configuration (WIDE_CONFIGS): the
#                 write-up's shape (N = d = 1024) and B = H = 4, N = 4096, d = 512
#   bench-ladder  peaks, the ladder preset, the seed shape on every variant and beside PyTorch
#   bench-f32     f32 at N = 4096, d = 64 and 128 beside PyTorch (F32_KERNEL: the variants
#                 timed, default all); the N = 131072 memory shape
#   bench-decode  the decode preset beside PyTorch
#   bench-tc      the fa-grid in bf16 and f16 beside PyTorch's flash, cuDNN and efficient
#                 (TC_RUNS narrows it: "bf16:flash,cudnn f16:flash" = dtype:implementations;
#                 "bf16:flash,cudnn,fa3" adds FlashAttention-3, whose wheels WHEELS installs)
#   bench-opencl  opencl beside cuda's exact f32 kernel (fa2_f32) and its planner's f32 choice on
#                 the same shapes (OPENCL_SEQS, default "1024 4096 16384"), f16/bf16 at
#                 N = 4096, then the opencl-sweep stage
#   opencl-nv     the NVIDIA tensor-core OpenCL kernel nv_tf32x3: which kernel the planner picks
#                 (log), the OpenCL unit tests (the real kernel on this GPU), conformance on opencl
#                 with nv_tf32x3 forced and with tiled forced, f32 opencl (nv_tf32x3, tiled) beside
#                 cuda's planner choice on the bench-opencl shapes (OPENCL_SEQS), N = 4096 timings
#                 under each other FLASHPORT_OPENCL_TF32X3_CONFIG (NV_CONFIGS, default "1 2 3";
#                 d = 128 has 0, 1) and conformance under each of NV_CONF_CONFIGS (default none);
#                 programs built afresh with FLASHPORT_LOG=info, so the logs show registers and spills
#   opencl-sweep  opencl f32 at N = 4096, d = 64 and 128, under each FLASHPORT_OPENCL_TILE
#                 override of OPENCL_TILES (space-separated; "default" for none; a built-in
#                 list when unset), each built afresh with FLASHPORT_LOG=info so that the log
#                 shows the compiler's registers and spills
#   cpu           cpu_simd on the host CPU beside PyTorch's CPU attention, for each thread
#                 count of CPU_THREADS (default "1 2") and each path of CPU_KERNELS (default:
#                 the planner's choice; e.g. "avx512 avx2")
# WHEELS=DIR installs every wheel in DIR first (python3 -m pip, offline, no dependencies), into
# the interpreter that runs compare_torch.py: the machine reaches no registry, so wheels such as
# fa3-fwd and einops are fetched elsewhere and carried.
# Stages after a failed one still run; the exit status says whether any failed.
set -uo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$here/gpu-out}
logs=$(mktemp -d)
build=$here/build-gpu
bin=$build/bin
stages=${*:-build conf ctest streams memcheck racecheck synccheck initcheck guard threads bench-ladder bench-f32 bench-decode bench-tc bench-opencl cpu}
failed=()
export PYTHONUNBUFFERED=1

stage() { # stage NAME COMMAND...: runs, logs to $logs/NAME.log, records failure
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" < /dev/null > "$logs/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$logs/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed+=("$name($rc)")
  mkdir -p "$out" && tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
}

if [ -n "${WHEELS:-}" ]; then
  stage wheels python3 -m pip install --no-deps --no-index "$WHEELS"/*.whl
fi

# FLASHPORT_OPENCL_TILE overrides timed by opencl-sweep, per head dim, unless OPENCL_TILES is set.
opencl_tiles() {
  local common="default rg=0 rg=168 qr=0 pf=1 ur=0 tn=4 tn=4,rg=128 tm=8,tn=4 tm=8,tn=8"
  common="$common br=128,bc=32,tm=8,tn=4"
  if [ $1 = 64 ]; then echo "$common qr=0,vc=64 qr=0,vc=64,rg=128"; else echo "$common rg=128 rg=192"; fi
}

# The tensor-core families, a line each: label, count of tile configurations, the variable
# that picks one, the family's variants.
tile_configs() {
  echo "tc ${TC_CONFIGS:-3} FLASHPORT_CUDA_TC_CONFIG tensor_core_mma,tensor_core_mma_split_kv"
  echo "tf32x3 ${TF32X3_CONFIGS:-4} FLASHPORT_CUDA_TF32X3_CONFIG tensor_core_tf32x3"
  echo "wide ${WIDE_CONFIGS:-3} FLASHPORT_CUDA_TF32X3_WIDE_CONFIG tensor_core_tf32x3_wide"
  echo "hopper ${HOPPER_CONFIGS:-2} FLASHPORT_CUDA_HOPPER_CONFIG hopper_wgmma"
}

# Stages queued to run side by side: a name and its command line (quoted for eval) each.
queued_names=()
queued_cmds=()
queue() { # queue [--first] NAME COMMAND...: --first puts it ahead of those queued, so the
           # longest runs start first and the pool does not end on one of them alone
  if [ "$1" = --first ]; then
    shift
    local name=$1; shift
    queued_names=("$name" "${queued_names[@]}")
    queued_cmds=("$(printf '%q ' "$@")" "${queued_cmds[@]}")
  else
    queued_names+=("$1"); shift
    queued_cmds+=("$(printf '%q ' "$@")")
  fi
}
run_queue() { # runs the queued stages, SANITIZE_JOBS at a time, then reports each as stage does
  [ ${#queued_names[@]} -gt 0 ] || return 0
  local i name rc t0=$SECONDS
  echo "== ${#queued_names[@]} stages, ${SANITIZE_JOBS:-8} at a time: ${queued_names[*]}"
  # Logs are packed each time a run ends, so a visit cut short still brings back those done.
  for i in "${!queued_names[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${SANITIZE_JOBS:-8}" ]; do
      wait -n
      mkdir -p "$out" && tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
    done
    name=${queued_names[$i]}
    ( eval "${queued_cmds[$i]}" < /dev/null > "$logs/$name.log" 2>&1; echo $? > "$logs/$name.rc" ) &
  done
  while [ -n "$(jobs -rp)" ]; do
    wait -n
    mkdir -p "$out" && tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
  done
  for i in "${!queued_names[@]}"; do
    name=${queued_names[$i]}
    rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 255)
    rm -f "$logs/$name.rc"
    echo "== $name: ${queued_cmds[$i]}: exit $rc"
    tail -n 3 "$logs/$name.log"
    [ "$rc" -eq 0 ] || failed+=("$name($rc)")
  done
  echo "== queued stages done after $((SECONDS - t0)) s"
  queued_names=()
  queued_cmds=()
  mkdir -p "$out" && tar -czf "$out/gpu-results.tar.gz" -C "$logs" .
}

opencl_sweep() {
  local d h t tile
  for d in 64 128; do
    h=$((2048 / d))
    for t in ${OPENCL_TILES:-$(opencl_tiles $d)}; do
      tile=$t
      [ "$t" = default ] && tile=
      rm -rf "$build/opencl-sweep-cache"
      stage "opencl-tile-d$d-$t" env FLASHPORT_OPENCL_TILE="$tile" FLASHPORT_LOG=info \
        FLASHPORT_CACHE_DIR="$build/opencl-sweep-cache" "$bin/flashport-bench" --backend opencl \
        --b 4 --hq $h --nq 4096 --d $d --dtype f32 --no-peaks --repeat 5 \
        --json "$logs/opencl-tile-d$d-$t.json"
    done
  done
}

for s in $stages; do
  b="$bin/flashport-bench"
  case $s in memcheck|racecheck|synccheck|initcheck) ;; *) run_queue ;; esac
  case $s in
  build)
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    stage configure cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DFLASHPORT_CUDA=ON -DFLASHPORT_OPENCL=ON -DFLASHPORT_HIP=OFF \
      -DFLASHPORT_CUDA_ARCHITECTURES="${arch}-real"
    targets=()
    for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
    stage build cmake --build "$build" -j"$(nproc)" "${targets[@]}"
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
  conf-tc)
    while read -r label count var kernels; do
      for c in $(seq 0 $((count - 1))); do
        stage "conf-$label-config$c" env "$var=$c" "$bin/flashport-conformance" --backend cuda \
          --kernel "$kernels" --json "$logs/conf-$label-config$c.json"
      done
    done < <(tile_configs)
    ;;
  ctest)
    stage ctest ctest --test-dir "$build" --output-on-failure -j8
    ;;
  streams)
    stage streams ctest --test-dir "$build" -R '^(test_cuda_stream|test_opencl_queue)$' \
      --output-on-failure -V
    ;;
  memcheck|racecheck|synccheck|initcheck)
    small=${SANITIZE_CASES:-seq17,seq127,dim80,gqa8_causal,decode_q1*,q100_kv300_causal,q300_kv100_causal,bnhd_gqa_causal,padded_rows*,f16_*,bf16_*,nan_in_k,dim300_gqa_causal,dim520_padded_causal}
    sanitizer=(compute-sanitizer --tool "$s" --error-exitcode 9)
    queue --first "sanitize-$s" "${sanitizer[@]}" "$bin/flashport-conformance" --backend cuda \
      --cases "$small" ${SANITIZE_KERNELS:+--kernel "$SANITIZE_KERNELS"}
    while read -r label count var kernels; do
      for c in $(seq 0 $((count - 1))); do
        queue "sanitize-$s-$label-config$c" env "$var=$c" "${sanitizer[@]}" \
          "$bin/flashport-conformance" --backend cuda --cases "$small" --kernel "$kernels"
      done
    done < <(tile_configs)
    queue "sanitize-$s-guard" "${sanitizer[@]}" "$bin/test_guard_zones" cuda
    ;;
  guard)
    stage guard "$bin/test_guard_zones"
    while read -r label count var kernels; do
      for c in $(seq 0 $((count - 1))); do
        stage "guard-$label-config$c" env "$var=$c" "$bin/test_guard_zones" cuda
      done
    done < <(tile_configs)
    ;;
  threads)
    stage threads-cuda "$bin/test_threads" cuda
    stage threads-opencl "$bin/test_threads" opencl
    ;;
  tc-sweep)
    stage tc-sweep env SEQS="${SWEEP_SEQS:-16384}" BIN="$bin" bash "$here/scripts/tc-sweep.sh"
    ;;
  tf32-sweep)
    stage tf32-sweep env KERNEL=tensor_core_tf32x3 CONFIGS="${TF32_SWEEP_CONFIGS:-0 1 2 3 4}" \
      SEQS=4096 DIMS="64 128" BIN="$bin" bash "$here/scripts/tc-sweep.sh"
    ;;
  wide-sweep)
    for c in $(seq 0 $((${WIDE_CONFIGS:-3} - 1))); do
      stage "wide-sweep-config$c" env FLASHPORT_CUDA_TF32X3_WIDE_CONFIG=$c "$b" --backend cuda \
        --kernel tensor_core_tf32x3_wide --preset seed --json "$logs/wide-seed-config$c.json"
      stage "wide-sweep-d512-config$c" env FLASHPORT_CUDA_TF32X3_WIDE_CONFIG=$c "$b" \
        --backend cuda --kernel tensor_core_tf32x3_wide --b 4 --hq 4 --nq 4096 --d 512 \
        --dtype f32 --json "$logs/wide-d512-config$c.json"
    done
    ;;
  bench-ladder)
    stage bench-peaks "$b" --backend cuda --peaks
    stage bench-ladder "$b" --preset ladder --backend cuda --json "$logs/ladder.json"
    stage bench-seed "$b" --preset seed --backend cuda --kernel all --json "$logs/seed-cuda.json"
    stage bench-seed-torch python3 "$here/bench/compare_torch.py" --preset seed --device cuda \
      --flashport-bench "$b" --backend cuda --json "$logs/seed-torch.json"
    ;;
  bench-f32)
    for d in 64 128; do
      stage "bench-f32-d$d" python3 "$here/bench/compare_torch.py" --b 4 --hq $((2048 / d)) \
        --nq 4096 --d $d --dtype f32 --device cuda --impl efficient,unfused \
        --flashport-bench "$b" --backend cuda --kernel "${F32_KERNEL:-all}" \
        --json "$logs/f32-d$d.json"
    done
    stage bench-memory "$b" --backend cuda --nq 131072 --d 128 --dtype bf16 --repeat 3 \
      --json "$logs/memory-n131072.json"
    ;;
  bench-decode)
    stage bench-decode python3 "$here/bench/compare_torch.py" --preset decode --device cuda \
      --impl flash,efficient,cudnn --flashport-bench "$b" --backend cuda --json "$logs/decode.json"
    ;;
  bench-tc)
    for run in ${TC_RUNS:-bf16:flash,cudnn,efficient f16:flash,cudnn,efficient}; do
      dt=${run%%:*}
      stage "bench-fa-grid-$dt" python3 "$here/bench/compare_torch.py" --preset fa-grid \
        --dtype "$dt" --device cuda --impl "${run#*:}" --flashport-bench "$b" \
        --backend cuda --json "$logs/fa-grid-$dt.json"
    done
    ;;
  bench-opencl)
    for d in 64 128; do
      h=$((2048 / d))
      for n in ${OPENCL_SEQS:-1024 4096 16384}; do
        stage "bench-opencl-f32-d$d-n$n" "$b" --backend opencl --b $((16384 / n)) --hq $h \
          --nq $n --d $d --dtype f32 --json "$logs/opencl-f32-d$d-n$n.json"
        stage "bench-cuda-f32-d$d-n$n" "$b" --backend cuda --b $((16384 / n)) --hq $h \
          --nq $n --d $d --dtype f32 --json "$logs/cuda-f32-d$d-n$n.json"
        stage "bench-cuda-fa2_f32-d$d-n$n" "$b" --backend cuda --kernel fa2_f32 \
          --b $((16384 / n)) --hq $h --nq $n --d $d --dtype f32 \
          --json "$logs/cuda-fa2_f32-d$d-n$n.json"
      done
      for dt in f16 bf16; do
        stage "bench-opencl-$dt-d$d" "$b" --backend opencl --b 4 --hq $h --nq 4096 --d $d \
          --dtype $dt --json "$logs/opencl-$dt-d$d.json"
        stage "bench-cuda-$dt-d$d" "$b" --backend cuda --b 4 --hq $h --nq 4096 --d $d \
          --dtype $dt --json "$logs/cuda-$dt-d$d.json"
      done
    done
    opencl_sweep
    ;;
  opencl-sweep)
    opencl_sweep
    ;;
  opencl-nv)
    rm -rf "$build/opencl-nv-cache"
    nv=(env FLASHPORT_LOG=info FLASHPORT_CACHE_DIR="$build/opencl-nv-cache")
    stage opencl-nv-choice "${nv[@]}" "$b" --backend opencl --b 1 --hq 2 --nq 512 --d 64 \
      --dtype f32 --no-peaks --repeat 1
    stage ctest-opencl ctest --test-dir "$build" -R opencl --output-on-failure
    stage conf-opencl-nv "${nv[@]}" "$bin/flashport-conformance" --backend opencl \
      --kernel nv_tf32x3 --json "$logs/conf-opencl-nv.json"
    stage conf-opencl-tiled "$bin/flashport-conformance" --backend opencl --kernel tiled \
      --json "$logs/conf-opencl-tiled.json"
    for d in 64 128; do
      h=$((2048 / d))
      for n in ${OPENCL_SEQS:-1024 4096 16384}; do
        shape=(--b $((16384 / n)) --hq $h --nq $n --d $d --dtype f32 --no-peaks)
        stage "bench-opencl-nv-f32-d$d-n$n" "${nv[@]}" "$b" --backend opencl --kernel nv_tf32x3 \
          "${shape[@]}" --json "$logs/opencl-nv-f32-d$d-n$n.json"
        stage "bench-opencl-tiled-f32-d$d-n$n" "$b" --backend opencl --kernel tiled \
          "${shape[@]}" --json "$logs/opencl-tiled-f32-d$d-n$n.json"
        stage "bench-cuda-f32-d$d-n$n" "$b" --backend cuda "${shape[@]}" \
          --json "$logs/cuda-f32-d$d-n$n.json"
      done
    done
    for c in ${NV_CONF_CONFIGS:-}; do
      stage "conf-opencl-nv-config$c" env FLASHPORT_OPENCL_TF32X3_CONFIG=$c \
        "$bin/flashport-conformance" --backend opencl --kernel nv_tf32x3 \
        --json "$logs/conf-opencl-nv-config$c.json"
    done
    for c in ${NV_CONFIGS:-1 2 3}; do
      for d in 64 128; do
        [ $d = 128 ] && [ $c -gt 1 ] && continue
        stage "opencl-nv-config$c-d$d" "${nv[@]}" FLASHPORT_OPENCL_TF32X3_CONFIG=$c "$b" \
          --backend opencl --kernel nv_tf32x3 --b 4 --hq $((2048 / d)) --nq 4096 --d $d \
          --dtype f32 --no-peaks --repeat 5 --json "$logs/opencl-nv-config$c-d$d.json"
      done
    done
    ;;
  cpu)
    # The GPU machine's host CPU is idle and has many cores: the cpu_simd figures come from here.
    for t in ${CPU_THREADS:-1 2}; do
      for k in ${CPU_KERNELS:-planner}; do
        kernel=()
        [ "$k" = planner ] || kernel=(--kernel "$k")
        stage "cpu-bench-$k-t$t" "$b" --preset cpu --backend cpu_simd "${kernel[@]}" \
          --threads $t --json "$logs/cpu-$k-t$t.json"
        stage "cpu-torch-$k-t$t" python3 "$here/bench/compare_torch.py" --preset cpu \
          --device cpu --threads $t --impl flash,math --flashport-bench "$b" \
          --backend cpu_simd "${kernel[@]}" --flashport-args "--threads $t" \
          --json "$logs/cpu-torch-$k-t$t.json"
      done
    done
    ;;
  *) echo "unknown stage $s"; failed+=("$s(unknown)") ;;
  esac
done

run_queue
echo "stages failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
