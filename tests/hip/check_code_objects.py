#!/usr/bin/env python3
"""Checks the code objects inside the hip module: every kernel is present for every target.

usage: check_code_objects.py MODULE OBJECT_DIR TARGET...

roc-obj-ls lists the module's offload bundles (one per compiled source) with the offset and size
of each target's code object; each code object's kernel descriptors (<kernel>.kd symbols) are
read with llvm-readelf. The expected kernels come from the compiler's own device assembly for
each source (hipcc -save-temps leaves it in OBJECT_DIR). The check fails when a target has no
code object, when a kernel the compiler produced is missing from the module for some target,
or when the targets' kernel sets differ.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def tool(*names):
    for n in names:
        path = shutil.which(n)
        if path:
            return path
    sys.exit(f"check_code_objects: none of {names} found")


def list_bundles(module):
    """[(target, offset, size)] for every amdgcn code object in the module."""
    out = subprocess.run([tool("roc-obj-ls"), "-v", module], capture_output=True, text=True,
                         check=True).stdout
    entries = []
    for line in out.splitlines():
        m = re.search(r"amdgcn-amd-amdhsa--(\w+)\s+file://\S+#offset=(\d+)&size=(\d+)", line)
        if m:
            entries.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return entries


def kernels_of(code_object, readelf):
    out = subprocess.run([readelf, "--wide", "-s", code_object], capture_output=True, text=True,
                         check=True).stdout
    return {f.split()[-1][:-3] for f in out.splitlines() if f.split() and f.split()[-1].endswith(".kd")}


def expected_kernels(obj_dir, target):
    names = set()
    for path in glob.glob(os.path.join(obj_dir, f"*-hip-amdgcn-amd-amdhsa-{target}.s")):
        with open(path, encoding="utf-8", errors="replace") as f:
            names |= set(re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", f.read(), re.M))
    return names


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    module, obj_dir, targets = argv[0], argv[1], argv[2:]
    readelf = tool("llvm-readelf-15", "llvm-readelf")
    found = {t: set() for t in targets}
    with open(module, "rb") as f, tempfile.TemporaryDirectory() as tmp:
        for i, (target, offset, size) in enumerate(list_bundles(module)):
            if size == 0:
                continue
            f.seek(offset)
            path = os.path.join(tmp, f"{i}-{target}.co")
            with open(path, "wb") as co:
                co.write(f.read(size))
            found.setdefault(target, set()).update(kernels_of(path, readelf))
    failures = 0
    union = set().union(*found.values())
    for t in targets:
        expected = expected_kernels(obj_dir, t)
        missing = (expected | union) - found[t]
        print(f"{t}: {len(found[t])} kernels in the module, {len(expected)} compiled")
        if not expected:
            print(f"  no device assembly for {t} in {obj_dir}")
            failures += 1
        for k in sorted(missing):
            print(f"  missing for {t}: {k}")
            failures += 1
    extra = set(found) - set(targets)
    if extra:
        print(f"code objects for targets not asked for: {sorted(extra)}")
        failures += 1
    print("every kernel present for every target" if not failures else f"{failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
