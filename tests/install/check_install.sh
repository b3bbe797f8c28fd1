#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds the example from another project twice:
# through find_package(flashport) and through pkg-config. Both programs must run and match
# the causal identity the example prints.
set -euo pipefail
build=$1 source=$2 scratch=$3
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$source/tests/install" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DEXAMPLE_SOURCE="$source/examples/attention_host.c" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
libdir=$(ls -d "$scratch"/prefix/lib*/ | head -1)
run() { LD_LIBRARY_PATH=$libdir FLASHPORT_BACKEND=reference "$@"; }
out=$(run "$scratch/consumer/attention_host")
echo "find_package: $out"
PKG_CONFIG_PATH=$libdir/pkgconfig cc -o "$scratch/via_pkgconfig" "$source/examples/attention_host.c" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs flashport) -lm
out2=$(run "$scratch/via_pkgconfig")
echo "pkg-config:   $out2"
# The example prints O[0][0] and V[0][0]; for the first causal row they must agree.
for o in "$out" "$out2"; do
  a=$(sed -E 's/.*O\[0\]\[0\] = ([-0-9.]+).*/\1/' <<<"$o")
  b=$(sed -E 's/.*V\[0\]\[0\] = ([-0-9.]+).*/\1/' <<<"$o")
  [ "$a" = "$b" ] || { echo "O[0][0]=$a differs from V[0][0]=$b"; exit 1; }
done
