#!/usr/bin/env bash
# usage: pip_install.sh PYTHON SOURCE_DIR WORK_DIR
# `pip install SOURCE_DIR` into a fresh virtual environment in WORK_DIR (no GPU modules, which
# only lengthen the build), then the numpy group of the tests against the installed package,
# from outside the source tree and with no FLASHPORT_* variable: the installed core must find
# the OpenCL module (when built) beside itself.
set -euo pipefail
python=$1 src=$2 work=$3
rm -rf "$work"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$src" pytest \
  -C cmake.define.FLASHPORT_CUDA=OFF -C cmake.define.FLASHPORT_HIP=OFF \
  -C build-dir="$work/build"
cd "$work"
unset FLASHPORT_BACKEND FLASHPORT_BACKEND_PATH FLASHPORT_KERNEL
site=$("$work/venv/bin/python" -c 'import flashport, os; print(os.path.dirname(flashport.__file__))')
case $site in "$work"/venv/*) ;; *) echo "flashport imported from $site, not the venv" >&2; exit 1 ;; esac
"$work/venv/bin/python" -m flashport
if [ -e "$site/libflashport-opencl.so" ]; then
  "$work/venv/bin/python" -m flashport --json | "$work/venv/bin/python" -c '
import json, sys
b = {x["name"]: x for x in json.load(sys.stdin)["backends"]}["opencl"]
assert b["location"].startswith(sys.argv[1]), b["location"]
print("opencl module found beside the installed core:", b["location"])' "$site"
fi
"$work/venv/bin/python" "$src/python/tests/run_pytest.py" numpy
