"""Views of numpy arrays, torch tensors and DLPack objects as tailor_tensor.

Nothing is copied: a view holds the object's data pointer, dtype, dims,
strides (in elements) and device. The caller keeps the object alive for the
call. Accepted:
  - torch.Tensor (data_ptr, dtype, shape, stride, device) — the fast path
  - numpy.ndarray (__array_interface__); bfloat16 through ml_dtypes' dtype
  - any object with __dlpack__ (cupy, jax, ...)
"""

import ctypes
import sys

from tailor import _capi
from tailor._capi import Tensor
from tailor._errors import invalid_argument

_NUMPY_TYPESTR = {
    "<f4": _capi.DTYPE_F32, "<f2": _capi.DTYPE_F16, "<i4": _capi.DTYPE_I32,
    "<i8": _capi.DTYPE_I64, "|u1": _capi.DTYPE_U8, "<f8": _capi.DTYPE_F64,
}
_ITEMSIZE = {_capi.DTYPE_F32: 4, _capi.DTYPE_BF16: 2, _capi.DTYPE_F16: 2,
             _capi.DTYPE_I32: 4, _capi.DTYPE_I64: 8, _capi.DTYPE_U8: 1,
             _capi.DTYPE_F64: 8, _capi.DTYPE_F8E4M3: 1}
_DEVICE_TYPES = {"cpu": _capi.DEVICE_CPU, "cuda": _capi.DEVICE_CUDA}

_torch_dtypes = None  # torch.dtype -> tailor dtype, built on first torch use


def _torch_dtype_map(torch):
    global _torch_dtypes
    if _torch_dtypes is None:
        _torch_dtypes = {
            torch.float32: _capi.DTYPE_F32, torch.bfloat16: _capi.DTYPE_BF16,
            torch.float16: _capi.DTYPE_F16, torch.int32: _capi.DTYPE_I32,
            torch.int64: _capi.DTYPE_I64, torch.uint8: _capi.DTYPE_U8,
            torch.float64: _capi.DTYPE_F64,
        }
        if hasattr(torch, "float8_e4m3fn"):  # FP8 MoE operands
            _torch_dtypes[torch.float8_e4m3fn] = _capi.DTYPE_F8E4M3
    return _torch_dtypes


def _fill_dims(t, shape, strides, name):
    rank = len(shape)
    if rank > _capi.MAX_RANK:
        raise invalid_argument(f"{name}: rank {rank} exceeds tailor's "
                               f"maximum {_capi.MAX_RANK}")
    t.rank = rank
    t.dims[:rank] = shape
    t.strides[:rank] = strides


def _from_torch(t, x, torch, name):
    dtype = _torch_dtype_map(torch).get(x.dtype)
    if dtype is None:
        raise invalid_argument(f"{name}: unsupported torch dtype {x.dtype}",
                               type_error=True)
    device = x.device
    t.data = x.data_ptr() or None
    t.dtype = dtype
    _fill_dims(t, x.shape, x.stride(), name)
    device_type = _DEVICE_TYPES.get(device.type)
    if device_type is None:
        raise invalid_argument(f"{name}: unsupported device {device}",
                               type_error=True)
    t.device_type = device_type
    t.device_index = device.index or 0


def _contiguous_strides(shape):
    strides, stride = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = stride
        stride *= shape[d]
    return strides


def _from_numpy(t, x, name, output):
    interface = x.__array_interface__
    typestr = interface["typestr"]
    dtype = _NUMPY_TYPESTR.get(typestr)
    if dtype is None and x.dtype.name == "bfloat16":  # ml_dtypes
        dtype = _capi.DTYPE_BF16
    if dtype is None and x.dtype.name == "float8_e4m3fn":  # ml_dtypes
        dtype = _capi.DTYPE_F8E4M3
    if dtype is None:
        raise invalid_argument(f"{name}: unsupported numpy dtype {x.dtype}",
                               type_error=True)
    if output and interface["data"][1]:
        raise invalid_argument(
            f"{name}: is read-only (an output must be writable: not a view "
            f"of bytes or of an array with writeable=False)")
    shape = interface["shape"]
    byte_strides = interface["strides"]
    if byte_strides is None:
        strides = _contiguous_strides(shape)
    else:
        itemsize = _ITEMSIZE[dtype]
        if any(s % itemsize for s in byte_strides):
            raise invalid_argument(f"{name}: strides {byte_strides} (bytes) "
                                   f"must be whole elements of {itemsize}")
        strides = [s // itemsize for s in byte_strides]
    t.data = interface["data"][0] or None
    t.dtype = dtype
    _fill_dims(t, shape, strides, name)
    t.device_type = _capi.DEVICE_CPU
    t.device_index = 0


# ---- DLPack ----------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DL_DTYPES = {(2, 32): _capi.DTYPE_F32, (4, 16): _capi.DTYPE_BF16,
              (2, 16): _capi.DTYPE_F16, (0, 32): _capi.DTYPE_I32,
              (0, 64): _capi.DTYPE_I64, (1, 8): _capi.DTYPE_U8,
              (2, 64): _capi.DTYPE_F64}
_DL_DEVICES = {1: _capi.DEVICE_CPU, 3: _capi.DEVICE_CPU,  # CPU, CUDA host
               2: _capi.DEVICE_CUDA, 13: _capi.DEVICE_CUDA,  # CUDA, managed
               10: _capi.DEVICE_HIP}
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(t, x, name):
    """Returns the capsule, which must outlive the call (it owns the view)."""
    capsule = x.__dlpack__()
    dl = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dtype = _DL_DTYPES.get((dl.dtype.code, dl.dtype.bits))
    device_type = _DL_DEVICES.get(dl.device.device_type)
    if dtype is None or dl.dtype.lanes != 1:
        raise invalid_argument(
            f"{name}: unsupported DLPack dtype (code {dl.dtype.code}, bits "
            f"{dl.dtype.bits}, lanes {dl.dtype.lanes})", type_error=True)
    if device_type is None:
        raise invalid_argument(f"{name}: unsupported DLPack device type "
                               f"{dl.device.device_type}", type_error=True)
    shape = [dl.shape[i] for i in range(dl.ndim)]
    strides = ([dl.strides[i] for i in range(dl.ndim)] if dl.strides
               else _contiguous_strides(shape))
    t.data = (dl.data or 0) + dl.byte_offset or None
    t.dtype = dtype
    _fill_dims(t, shape, strides, name)
    t.device_type = device_type
    t.device_index = dl.device.device_id
    return capsule


def fill(t, x, name="tensor", output=False):
    """Writes the view of `x` into the Tensor struct `t`. Returns an object
    that must stay alive for the call (a DLPack capsule), or None. `name`
    is the argument's name in errors; `output`: the call writes into `x`,
    so a read-only numpy array is refused (torch and DLPack views carry no
    read-only flag). Errors: tailor.InvalidArgumentError naming `name`."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        _from_torch(t, x, torch, name)
        return None
    if hasattr(x, "__array_interface__"):
        _from_numpy(t, x, name, output)
        return None
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(t, x, name)
    raise invalid_argument(
        f"{name}: expected a numpy array, torch tensor or DLPack object, got "
        f"{type(x).__name__}", type_error=True)


def view(x, name="tensor", output=False):
    """A new Tensor viewing `x`, and the keep-alive of fill()."""
    t = Tensor()
    return t, fill(t, x, name, output)


# Bytes of one element of each tailor_dtype.
_ELEMENT_BYTES = {1: 4, 2: 2, 3: 2, 4: 4, 5: 8, 6: 1, 7: 8}


def nbytes(t):
    """Bytes spanned by the dims of the Tensor struct `t` (contiguous)."""
    count = 1
    for d in t.dims[:t.rank]:
        count *= d
    return count * _ELEMENT_BYTES[t.dtype]


def cuda_stream_of(*tensors):
    """torch's current CUDA stream for the first torch CUDA tensor among
    `tensors`, else None (the host, or the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for x in tensors:
        if isinstance(x, torch.Tensor) and x.is_cuda:
            return torch.cuda.current_stream(x.device).cuda_stream
    return None


def stream_handle(stream):
    """A CUstream as an int from None, an int, or an object with
    .cuda_stream (torch.cuda.Stream, cupy streams have .ptr)."""
    if stream is None or isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(handle)
    raise invalid_argument(
        f"stream: expected None, an int CUstream or an object with "
        f".cuda_stream or .ptr, got {stream!r}", type_error=True)
