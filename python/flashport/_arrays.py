"""How each array library's arrays are exported and allocated, told to the extension once per
type (flashport._C caches the answer).

kind_for(type) returns (export, pass_stream, empty_like, empty_f32, current_stream):
  export          callable(array) -> DLPack capsule, or None to call array.__dlpack__()
  pass_stream     whether __dlpack__ is given the consumer's stream for GPU arrays
  empty_like      callable(array) -> uninitialised array of its shape, dtype and device
  empty_f32       callable(shape, like) -> uninitialised float32 array on like's device
  current_stream  callable(device index) -> the caller's current stream there, as an int
"""
def _numpy_kind():
    import numpy as np

    def empty_f32(shape, like):
        return np.empty(shape, np.float32)

    return None, False, np.empty_like, empty_f32, None


def _torch_kind():
    import torch
    from torch.utils import dlpack

    def empty_f32(shape, like):
        return torch.empty(shape, dtype=torch.float32, device=like.device)

    # torch's own raw-stream query is one C call; the public spelling builds a Stream object.
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw_stream is None:
        def raw_stream(index):
            return torch.cuda.current_stream(index).cuda_stream

    # to_dlpack exports without Tensor.__dlpack__'s Python-level checks, which refuse tensors
    # that require grad (the autograd function's inputs); the storage is shared either way.
    return dlpack.to_dlpack, False, torch.empty_like, empty_f32, raw_stream


def _cupy_kind():
    import cupy

    def empty_like(a):
        with a.device:
            return cupy.empty_like(a)

    def empty_f32(shape, like):
        with like.device:
            return cupy.empty(shape, cupy.float32)

    def current_stream(index):
        with cupy.cuda.Device(index):
            return cupy.cuda.get_current_stream().ptr

    return None, True, empty_like, empty_f32, current_stream


def _other_kind():
    # Any other producer of DLPack: read through __dlpack__ on the legacy default stream;
    # outputs must be given (out=).
    return None, True, None, None, None


_KINDS = {"numpy": _numpy_kind, "torch": _torch_kind, "cupy": _cupy_kind}


def kind_for(array_type):
    module = array_type.__module__.partition(".")[0]
    return _KINDS.get(module, _other_kind)()
