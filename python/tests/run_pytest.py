#!/usr/bin/env python3
"""Runs one group of the package's tests, as ctest registers them.

usage: run_pytest.py numpy|torch|gpu [pytest arguments]

  numpy  everything that needs only NumPy (the host backends)
  torch  PyTorch tensors on the host backends
  gpu    torch CUDA tensors and CuPy arrays on the GPU backends

A group whose requirement is missing here (PyTorch not installed; no CUDA device seen by torch
or CuPy) prints why and exits 77, which ctest reports as skipped. Inside a group, pytest -rs
lists every test skipped and its reason.
"""
import os
import sys

import pytest

SKIP = 77
MARKS = {"numpy": "not torch and not gpu", "torch": "torch and not gpu", "gpu": "gpu"}


def gpu_missing():
    reasons = []
    try:
        import torch
        if torch.cuda.is_available():
            return None
        reasons.append("torch %s sees no CUDA device" % torch.__version__)
    except ImportError as e:
        reasons.append("PyTorch not installed (%s)" % e)
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        reasons.append("CuPy sees no CUDA device")
    except Exception as e:  # ImportError, or CuPy's error for a machine without a driver
        reasons.append("CuPy unusable (%s)" % str(e).splitlines()[0])
    return "; ".join(reasons)


def main(argv):
    if len(argv) < 2 or argv[1] not in MARKS:
        print(__doc__, file=sys.stderr)
        return 2
    group = argv[1]
    why = None
    if group == "torch":
        try:
            import torch  # noqa: F401
        except ImportError as e:
            why = "PyTorch is not installed for %s (%s)" % (sys.executable, e)
    elif group == "gpu":
        why = gpu_missing()
    if why:
        print("SKIPPED: the %s group of the Python tests: %s" % (group, why))
        return SKIP
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main([here, "-m", MARKS[group], "-rs", "-q", "-p", "no:cacheprovider"]
                       + argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
