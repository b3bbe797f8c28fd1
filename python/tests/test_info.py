"""flashport.backends(), flashport.info(), python -m flashport, and the environment variables,
which work as they do in C."""
import json
import os
import subprocess
import sys

import numpy as np

import flashport


def run_python(code, **env):
    full = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_backends():
    bs = flashport.backends()
    names = [b.name for b in bs]
    assert names[-2:] == ["cpu_simd", "reference"] and names[0] == "cuda"
    ref = bs[-1]
    assert ref.available and ref.device_count == 1 and not ref.is_module
    assert ref.location == "built-in"
    for b in bs:
        assert b.available or b.reason
        if b.is_module and b.location:  # found beside libflashport: the package needs no path
            assert os.path.basename(b.location) == "libflashport-%s.so" % b.name


def test_info_mirrors_flashport_info():
    data = flashport.info()
    assert data["version"] == flashport.__version__
    assert [b["name"] for b in data["backends"]] == [b.name for b in flashport.backends()]
    ref = data["backends"][-1]
    assert ref["devices"][0]["kind"] == "cpu"
    assert ref["kernels"][0]["name"] == "double_accumulation"
    assert [b["name"] for b in flashport.info("reference")["backends"]] == ["reference"]


def test_main():
    r = subprocess.run([sys.executable, "-m", "flashport"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("flashport %s\n" % flashport.__version__)
    assert "reference  available, 1 device  [built-in]" in r.stdout
    r = subprocess.run([sys.executable, "-m", "flashport", "--json"], capture_output=True,
                       text=True)
    assert json.loads(r.stdout) == flashport.info()
    r = subprocess.run([sys.executable, "-m", "flashport", "--backend", "nosuch"],
                       capture_output=True, text=True)
    assert r.returncode == 4 and "unknown backend 'nosuch'" in r.stderr


def test_environment():
    code = ("import numpy as np, flashport; x = np.ones((1, 4, 1, 16), np.float32); "
            "p = flashport.plan(x, x, x); print(p.backend, p.kernel)")
    assert run_python(code, FLASHPORT_BACKEND="reference") == "reference double_accumulation"
    assert run_python(code, FLASHPORT_BACKEND="cpu_simd", FLASHPORT_KERNEL="portable") == \
        "cpu_simd portable"
    failing = ("import numpy as np, flashport; x = np.ones((1, 4, 1, 16), np.float32); "
               "flashport.attention(x, x, x)")
    r = subprocess.run([sys.executable, "-c", failing], capture_output=True, text=True,
                       env=dict(os.environ, FLASHPORT_BACKEND="nosuch"))
    assert r.returncode != 0 and "UnknownBackendError" in r.stderr


def test_zero_copy_output_kind():
    x = np.ones((1, 4, 1, 16), np.float32)
    o = flashport.attention(x, x, x, backend="reference")
    assert type(o) is np.ndarray and np.allclose(o, 1.0)
