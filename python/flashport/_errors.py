"""Exceptions: one class per flashport status, all derived from flashport.Error.

The message is the library's (flashport_last_error(): the call, and the cause). The extension
raises the class of the status it got; checks made by the binding itself, before the library
is called, raise the more specific subclasses at the end of this file.
"""


class Error(RuntimeError):
    """A flashport call failed; `status` is the C status code, `status_name` its name."""

    status = None
    status_name = None


def _status_class(name, status, status_name, *bases, doc):
    return type(name, (Error,) + bases,
                {"status": status, "status_name": status_name, "__doc__": doc,
                 "__module__": "flashport"})


InvalidArgumentError = _status_class(
    "InvalidArgumentError", 1, "invalid argument", ValueError,
    doc="A size, stride, option or array that the call cannot take.")
SizeOverflowError = _status_class(
    "SizeOverflowError", 2, "size overflow", OverflowError,
    doc="A byte or element count does not fit in 64 bits.")
UnsupportedError = _status_class(
    "UnsupportedError", 3, "unsupported",
    doc="A valid problem that the backend or kernel variant cannot run; the message names the "
        "feature.")
UnknownBackendError = _status_class(
    "UnknownBackendError", 4, "unknown backend", ValueError,
    doc="A backend name this build does not know.")
UnknownKernelError = _status_class(
    "UnknownKernelError", 5, "unknown kernel", ValueError,
    doc="A kernel variant name the backend does not have.")
BackendUnavailableError = _status_class(
    "BackendUnavailableError", 6, "backend unavailable",
    doc="The backend is known but cannot run here (no driver, no device, not built).")
NoDeviceError = _status_class(
    "NoDeviceError", 7, "no such device",
    doc="A device index or name that matches no device.")
OutOfMemoryError = _status_class(
    "OutOfMemoryError", 8, "out of memory", MemoryError,
    doc="A host or device allocation failed.")
DeviceError = _status_class(
    "DeviceError", 9, "device error",
    doc="The driver or runtime reported an error.")
MismatchError = _status_class(
    "MismatchError", 10, "buffer mismatch", ValueError,
    doc="Arrays too small, aliased, or of another device or context.")
InternalError = _status_class(
    "InternalError", 11, "internal error",
    doc="A bug in flashport: please report it with the message.")
BadTableError = _status_class(
    "BadTableError", 12, "bad table content", ValueError,
    doc="An entry of cu_seqlens_q, cu_seqlens_kv, seqlens_kv or block_table out of range.")

# Index = status code; 0 (ok) has no class.
STATUS_CLASSES = (None, InvalidArgumentError, SizeOverflowError, UnsupportedError,
                  UnknownBackendError, UnknownKernelError, BackendUnavailableError,
                  NoDeviceError, OutOfMemoryError, DeviceError, MismatchError, InternalError,
                  BadTableError)


class DtypeError(UnsupportedError, TypeError):
    """An array of a dtype the call does not take (Q, K, V: float32, float16, bfloat16 or
    float64 of one kind; tables int32; slopes and sinks float32)."""


class LayoutError(InvalidArgumentError):
    """An array whose rank or shape does not fit the layout, or shapes that disagree."""


class StrideError(InvalidArgumentError):
    """A head dimension that is not contiguous, a negative stride, or a table that is not
    contiguous."""


class DeviceMismatchError(MismatchError):
    """Arrays on different devices, or on a device the backend asked for cannot read (a CUDA
    tensor with a CPU backend)."""


for _cls in (DtypeError, LayoutError, StrideError, DeviceMismatchError):
    _cls.__module__ = "flashport"
del _cls
