"""flashport: exact attention on NumPy, PyTorch and CuPy arrays, on CUDA, HIP, OpenCL and x86
CPU backends, through the flashport C library.

    import flashport
    o = flashport.attention(q, k, v, causal=True)          # q, k, v: [B, N, H, d]
    o, lse = flashport.attention(q, k, v, return_lse=True)
    flashport.plan(q, k, v)                                 # which kernel would run, and why
    flashport.info()                                        # what flashport-info shows
    flashport.torch.attention(q, k, v)                      # differentiable, on torch tensors

Arrays are read and written in place through DLPack (no copies); GPU arrays run on the
caller's current stream (torch's or CuPy's).
"""
from . import _C
from ._arrays import kind_for as _kind_for
from ._attention import Plan, attention, plan
from ._errors import (BackendUnavailableError, BadTableError, DeviceError, DeviceMismatchError,
                      DtypeError, Error, InternalError, InvalidArgumentError, LayoutError,
                      MismatchError, NoDeviceError, OutOfMemoryError, SizeOverflowError,
                      StrideError, UnknownBackendError, UnknownKernelError, UnsupportedError)
from ._errors import STATUS_CLASSES as _STATUS_CLASSES
from ._info import Backend, backends, info

_C.init(_STATUS_CLASSES, (InvalidArgumentError, DtypeError, LayoutError, StrideError,
                          DeviceMismatchError), _kind_for)

__version__ = _C.version()


def __getattr__(name):
    # flashport.torch (the autograd function) imports torch, so it loads on first use only.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'flashport' has no attribute %r" % name)

__all__ = ["attention", "plan", "Plan", "backends", "Backend", "info", "Error",
           "InvalidArgumentError", "SizeOverflowError", "UnsupportedError",
           "UnknownBackendError", "UnknownKernelError", "BackendUnavailableError",
           "NoDeviceError", "OutOfMemoryError", "DeviceError", "MismatchError", "InternalError",
           "BadTableError", "DtypeError", "LayoutError", "StrideError", "DeviceMismatchError"]
