#!/usr/bin/env bash
# usage: scripts/python-env.sh DIR
# Makes (or completes) the Python environment of the package's tests: a virtual environment in
# DIR that sees the interpreter's own packages and adds what is missing of NumPy, pytest and
# PyTorch, from PyPI by package name. PyPI's torch wheel for Linux is the CUDA build (about 3 GB with its NVIDIA
# dependencies); it runs on CPUs too, which is how the tests use it without a GPU.
# FLASHPORT_TEST_TORCH=0 leaves PyTorch out (the torch tests then report themselves skipped).
# Prints the environment's python.
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ] || [ $# -ne 1 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  [ $# -eq 1 ] && exit 0 || exit 2
fi
dir=$1
[ -x "$dir/bin/python" ] || python3 -m venv --system-site-packages "$dir" >&2
py=$dir/bin/python
want=(numpy pytest)
[ "${FLASHPORT_TEST_TORCH:-1}" = 0 ] || want+=(torch)
missing=()
for m in "${want[@]}"; do
  "$py" -c "import $m" 2>/dev/null || missing+=("$m")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-env: installing ${missing[*]} into $dir" >&2
  "$py" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$py"
