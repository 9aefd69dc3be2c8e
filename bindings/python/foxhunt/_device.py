"""Arrays in CUDA device memory, recognised without importing the library that made them: an
object with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) or a DLPack producer
(``__dlpack__`` and ``__dlpack_device__``: PyTorch, CuPy, JAX) on a CUDA device. What the
library needs is the data pointer; the shape and dtype are checked here. Nothing is copied or
converted: a device array must already have the exact dtype and be C-contiguous."""
import ctypes
from collections import namedtuple

import numpy as np

# DLPack (dlpack.h): DLDeviceType and DLDataTypeCode values used here.
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {0: "i", 1: "u", 2: "f", 6: "b"}  # kDLInt, kDLUInt, kDLFloat, kDLBool

#: ptr (int), shape (tuple), dtype (numpy dtype), keep (objects to keep alive while the
#: library reads the memory: the array and, for DLPack, its capsule).
DeviceArray = namedtuple("DeviceArray", "ptr shape dtype keep")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _c_contiguous(shape, strides_elems):
    expect = 1
    for n, s in zip(reversed(shape), reversed(strides_elems)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _from_cai(obj, cai):
    if cai.get("mask") is not None:
        raise ValueError("a masked __cuda_array_interface__ array is not supported")
    shape = tuple(int(n) for n in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None and not _c_contiguous(shape, [s // dtype.itemsize for s in strides]):
        raise ValueError("device array of shape %s is not C-contiguous" % (shape,))
    return DeviceArray(int(cai["data"][0]), shape, dtype, (obj,))


def _from_dlpack(obj):
    capsule = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))  # DLManagedTensor starts
    if t.device.device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):          # with its DLTensor
        return None
    if t.dtype.lanes != 1 or t.dtype.code not in _DL_CODES:
        raise TypeError("device array with DLPack dtype code %d, %d bits, %d lanes"
                        % (t.dtype.code, t.dtype.bits, t.dtype.lanes))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    kind = _DL_CODES[t.dtype.code]
    dtype = np.dtype(bool) if kind == "b" else np.dtype("%s%d" % (kind, t.dtype.bits // 8))
    if t.strides and not _c_contiguous(shape, [t.strides[i] for i in range(t.ndim)]):
        raise ValueError("device array of shape %s is not C-contiguous" % (shape,))
    # The capsule is not consumed: kept alive, it keeps the tensor alive, and its destructor
    # calls the producer's deleter (DLPack's rule for an unconsumed capsule).
    return DeviceArray(int(t.data or 0) + int(t.byte_offset), shape, dtype, (obj, capsule))


def device_array(obj):
    """A DeviceArray when @p obj lives in CUDA device (or managed) memory, else None (host
    arrays, numpy's included, go through numpy)."""
    if isinstance(obj, np.ndarray):
        return None
    cai = getattr(obj, "__cuda_array_interface__", None)  # CPU torch tensors raise: None
    if cai is not None:
        return _from_cai(obj, cai)
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None and int(dev()[0]) in (KDL_CUDA, KDL_CUDA_MANAGED):
        return _from_dlpack(obj)
    return None


def check(a, what, shape, dtypes):
    """Raise unless device array @p a has @p shape and one of @p dtypes (numpy dtypes)."""
    if a.shape != tuple(shape):
        raise ValueError("%s: expected shape %s, got %s" % (what, tuple(shape), a.shape))
    if a.dtype not in dtypes:
        raise TypeError("%s: a device array must be %s (got %s; device arrays are not "
                        "converted)" % (what, " or ".join(str(d) for d in dtypes), a.dtype))
