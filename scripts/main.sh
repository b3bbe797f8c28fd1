#!/usr/bin/env bash
# The main job: installs what is missing, builds into build, then on every backend present
# prints what is there (flashport-info), runs the conformance suite, and a short benchmark.
# Exits non-zero when the build, a conformance case or a benchmark run fails.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$here/build
"$here/scripts/setup.sh"
"$here/scripts/build.sh" "$build"
bin=$build/bin
out=$build/results
mkdir -p "$out"

echo "== flashport-info"
"$bin/flashport-info"
"$bin/flashport-info" --json > "$out/info.json"

echo "== conformance (every available backend and kernel variant)"
cmake --build "$build" --target conformance-data
"$bin/flashport-conformance" \
  --json "$out/conformance.json" --junit "$out/conformance.xml"

echo "== short benchmark (the write-up's shape on every available backend)"
status=0
for backend in $("$bin/flashport-info" --available-backends); do
  case $backend in
    reference) continue ;;  # the oracle: seconds per call at this shape, and not a contender
  esac
  "$bin/flashport-bench" --preset seed --backend "$backend" --repeat 5 \
    --json "$out/bench-seed-$backend.json" || status=1
done
echo "results in $out"
exit $status
