#!/usr/bin/env bash
# usage: pip_install.sh PYTHON SOURCE_DIR WORK_DIR
# `pip install SOURCE_DIR` into WORK_DIR/site (pip's --target: nothing outside WORK_DIR changes),
# without the GPU modules, which only lengthen the build; then the numpy group of the tests
# against that copy, from outside the source tree and with no FLASHPORT_* variable: the
# installed core must find the OpenCL module (when built) beside itself. scikit-build-core is
# fetched by pip unless PYTHON has it already (then the build uses it: no network needed).
set -euo pipefail
python=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
isolation=()
"$python" -c 'import scikit_build_core' 2>/dev/null && isolation=(--no-build-isolation)
"$python" -m pip install -q --disable-pip-version-check "${isolation[@]}" --target "$work/site" \
  "$src" -C cmake.define.FLASHPORT_CUDA=OFF -C cmake.define.FLASHPORT_HIP=OFF \
  -C build-dir="$work/build"
cd "$work"
unset FLASHPORT_BACKEND FLASHPORT_BACKEND_PATH FLASHPORT_KERNEL
export PYTHONPATH=$work/site
site=$("$python" -c 'import flashport, os; print(os.path.dirname(flashport.__file__))')
[ "$site" = "$work/site/flashport" ] || { echo "flashport imported from $site" >&2; exit 1; }
"$python" -m flashport
if [ -e "$site/libflashport-opencl.so" ]; then
  "$python" -m flashport --json | "$python" -c '
import json, sys
b = {x["name"]: x for x in json.load(sys.stdin)["backends"]}["opencl"]
assert b["location"] == sys.argv[1] + "/libflashport-opencl.so", b["location"]
print("opencl module found beside the installed core:", b["location"])' "$site"
fi
"$python" "$src/python/tests/run_pytest.py" numpy
