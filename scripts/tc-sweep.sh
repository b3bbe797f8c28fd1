#!/usr/bin/env bash
# Tile-configuration sweep of a CUDA tensor-core forward, for choosing each padded head dim's
# default in its tile_configs.h. Run on the GPU machine after the project is built in build-gpu
# (scripts/gpu-run.sh build):
#   scripts/tc-sweep.sh                                   tensor_core_mma, bf16
#   KERNEL=tensor_core_tf32x3 scripts/tc-sweep.sh         the 3xTF32 kernel, f32
# For each config index (FLASHPORT_CUDA_TC_CONFIG, or FLASHPORT_CUDA_TF32X3_CONFIG) it
# benchmarks batch*N = 16384 and hidden 2048 (B = 16384/N, H = 2048/d) over d in {64, 128, 256},
# N in {4096, 16384}, causal off and on, each output checked against the reference on a slice
# (within the dtype's tolerance), and prints one table: config, d, N, causal, TFLOP/s, max abs
# error, rel L2 error, and "ok" or what went wrong.
# Environment: KERNEL (tensor_core_mma | tensor_core_tf32x3), CONFIGS (default "0 1 2"), DIMS,
# SEQS, BIN (default build-gpu/bin) narrow it.
set -uo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-$here/build-gpu/bin}
configs=${CONFIGS:-0 1 2}
dims=${DIMS:-64 128 256}
seqs=${SEQS:-4096 16384}
bench=$bin/flashport-bench
kernel=${KERNEL:-tensor_core_mma}
case $kernel in
  tensor_core_mma)
    config_env=FLASHPORT_CUDA_TC_CONFIG dtype=bf16 tolerance=1e-2
    config_list=backends/cuda/kernels/mma/tile_configs.h
    fields="d, index, warps, slices a warp, key tile, stages, Q in registers, min blocks an SM" ;;
  tensor_core_tf32x3)
    config_env=FLASHPORT_CUDA_TF32X3_CONFIG dtype=f32 tolerance=1e-5
    config_list=backends/cuda/kernels/tf32x3/tile_configs.h
    fields="d, index, warps, slices a warp, key tile, stages, min blocks an SM" ;;
  *) echo "tc-sweep: KERNEL must be tensor_core_mma or tensor_core_tf32x3" >&2; exit 2 ;;
esac
if [ ! -x "$bench" ]; then
  echo "tc-sweep: $bench not found; build first (scripts/gpu-run.sh build)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows.tsv
: > "$rows"
start=$SECONDS

for cfg in $configs; do
  for d in $dims; do
    for n in $seqs; do
      for causal in 0 1; do
        csv=$tmp/run.csv
        rm -f "$csv"
        flags=(--backend cuda --kernel "$kernel" --dtype "$dtype" --b $((16384 / n))
               --hq $((2048 / d)) --nq "$n" --d "$d" --check --check-gflop 1 --repeat 10
               --no-peaks --csv "$csv")
        [ "$causal" = 1 ] && flags+=(--causal)
        env "$config_env=$cfg" timeout 60 "$bench" "${flags[@]}" \
          > "$tmp/run.log" 2>&1
        rc=$?
        if [ -s "$csv" ]; then
          # Last record of the CSV (header on line 1), tagged with the sweep's own coordinates.
          python3 - "$csv" "$cfg" "$d" "$n" "$causal" "$rc" "$tolerance" >> "$rows" <<'PY'
import csv, sys
path, cfg, d, n, causal, rc, tolerance = sys.argv[1:]
recs = list(csv.DictReader(open(path)))
r = recs[-1] if recs else {}
def num(key):
    try:
        return float(r.get(key, "nan"))
    except ValueError:
        return float("nan")
status = r.get("status", "no record")
rel = num("rel_l2_err")
if status != "ok":
    print("\t".join([cfg, d, n, causal, "-", "-", "-", status + ": " + r.get("message", "")]))
    sys.exit(0)
note = "ok" if rel <= float(tolerance) else "ERROR above the tolerance " + tolerance
if note == "ok" and rc != "0":
    note = "exit " + rc
print("\t".join([cfg, d, n, causal, "%.1f" % num("tflops"), "%.3g" % num("max_abs_err"),
                 "%.3g" % rel, note]))
PY
        else
          printf '%s\t%s\t%s\t%s\t-\t-\t-\texit %s: %s\n' "$cfg" "$d" "$n" "$causal" "$rc" \
            "$(tail -n 1 "$tmp/run.log")" >> "$rows"
        fi
      done
    done
  done
done

echo "$kernel $dtype tile-config sweep, batch*N = 16384, hidden 2048" \
  "($((SECONDS - start)) s)"
{
  printf 'config\td\tN\tcausal\tTFLOP/s\tmax_err\trel_l2\tstatus\n'
  cat "$rows"
} | if command -v column > /dev/null; then column -t -s $'\t'; else cat; fi
echo
echo "configs as listed in $config_list"
echo "  X($fields):"
grep -o 'X([0-9, ]*)' "$here/$config_list" | sed 's/^/  /'
echo
echo "best config per (d, N, causal):"
sort -t $'\t' -k2,2n -k3,3n -k4,4n -k5,5gr "$rows" | awk -F '\t' '
  $8 == "ok" && !seen[$2 FS $3 FS $4]++ {
    printf "  d=%-4s N=%-6s causal=%s  config %s  %s TFLOP/s\n", $2, $3, $4, $1, $5
  }'
