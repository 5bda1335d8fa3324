"""DLPack: capsule names and versions, exactly-once deleters, zero-copy into numpy and torch."""

import ctypes
import gc
import sys
import threading

import numpy as np
import pytest

import ascend_ipc as aipc
from ascend_ipc import _C

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(60)

# ---------------------------------------------------------------------------- reading capsules with ctypes


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# PyCapsule_SetName keeps the pointer: these names must outlive every capsule.
USED_LEGACY = ctypes.create_string_buffer(b"used_dltensor")
USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # calls release the GIL


def capsule_name(cap):
    return _api.PyCapsule_GetName(cap).decode()


def managed(cap):
    name = capsule_name(cap)
    ptr = _api.PyCapsule_GetPointer(cap, name.encode())
    cls = DLManagedTensorVersioned if name == "dltensor_versioned" else DLManagedTensor
    return ptr, cls.from_address(ptr)


def consume_by_hand(cap):
    """What a consumer does: take the pointer, rename the capsule; returns the deleter call."""
    ptr, m = managed(cap)
    used = USED_VERSIONED if capsule_name(cap) == "dltensor_versioned" else USED_LEGACY
    assert _api.PyCapsule_SetName(cap, ctypes.cast(used, ctypes.c_char_p)) == 0
    fn = DELETER(m.deleter)
    return lambda: fn(ptr)


def live():
    gc.collect()
    return len(_C._live_allocations())


# ---------------------------------------------------------------------------- names, versions, contents


def test_capsule_names_and_versions():
    a = aipc.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert capsule_name(a.__dlpack__()) == "dltensor"
    assert capsule_name(a.__dlpack__(max_version=None)) == "dltensor"
    assert capsule_name(a.__dlpack__(max_version=(0, 8))) == "dltensor"
    for mv in [(1, 0), (1, 3), (2, 0)]:
        cap = a.__dlpack__(max_version=mv)
        assert capsule_name(cap) == "dltensor_versioned"
        _, m = managed(cap)
        assert (m.version.major, m.version.minor) == (1, 0)
        assert m.flags == 0  # writable, not a copy


@pytest.mark.parametrize("versioned", [False, True])
def test_tensor_fields(versioned):
    a = aipc.from_numpy(np.arange(30, dtype=np.int16).reshape(5, 6))
    v = a[1:4, ::2]
    cap = v.__dlpack__(max_version=(1, 0) if versioned else None)
    _, m = managed(cap)
    t = m.dl_tensor
    assert t.data == v.data_ptr and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (1, 0) == v.__dlpack_device__()
    assert t.ndim == 2
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1)
    assert [t.shape[i] for i in range(2)] == [3, 3]
    assert [t.strides[i] for i in range(2)] == [6, 2]  # elements


DLPACK_CODES = {
    "bool": (6, 8), "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64), "complex64": (5, 64), "complex128": (5, 128),
}


@pytest.mark.parametrize("dtype", sorted(DLPACK_CODES))
def test_every_dtype_zero_copy(dtype):
    a = aipc.zeros((4,), dtype=dtype)
    _, m = managed(a.__dlpack__(max_version=(1, 0)))
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == DLPACK_CODES[dtype]
    x = np.from_dlpack(a)
    t = torch.from_dlpack(a)
    assert x.dtype == np.dtype(dtype)
    assert t.dtype == getattr(torch, dtype) if dtype != "bool" else t.dtype == torch.bool
    one = np.ones(1, dtype=dtype)[0]
    x[1] = one  # written through numpy, read through torch and a host copy
    assert t[1].item() == one.item()
    t[2] = one.item()
    assert x[2] == one
    np.testing.assert_array_equal(a.numpy(), x)


def test_zero_d_zero_size_and_views():
    s = aipc.from_numpy(np.array(3, dtype=np.int64))
    assert np.from_dlpack(s).shape == () and torch.from_dlpack(s).item() == 3
    z = aipc.empty((0, 5))
    assert np.from_dlpack(z).shape == (0, 5) and torch.from_dlpack(z).shape == (0, 5)
    a = aipc.from_numpy(np.arange(20, dtype=np.float64).reshape(4, 5))
    v = a[1:, ::2]
    t = torch.from_dlpack(v)
    assert t.stride() == (5, 2)
    t.fill_(-1)
    x = a.numpy()
    assert (x[1:, ::2] == -1).all() and (x[0] == np.arange(5)).all() and (x[1:, 1::2] != -1).all()


def test_negative_strides_refused_not_crash():
    a = aipc.from_numpy(np.arange(5))
    r = a[::-1]
    with pytest.raises(BufferError, match="negative strides"):
        torch.from_dlpack(r)
    with pytest.raises(BufferError):
        np.from_dlpack(r)
    np.testing.assert_array_equal(r.numpy(), np.arange(5)[::-1])
    # one element along a negative stride is fine, and no capsule carries a negative stride
    one = a[3:2:-1]
    assert one.strides[0] < 0
    assert np.from_dlpack(one).tolist() == [3]
    t = torch.from_dlpack(one)
    assert t.tolist() == [3] and t.stride()[0] >= 0
    m = aipc.from_numpy(np.arange(12).reshape(3, 4))[1:2, ::-1][:, 2:3]
    assert m.shape == (1, 1) and m.strides[1] < 0
    assert torch.from_dlpack(m).tolist() == [[5]] and min(torch.from_dlpack(m).stride()) >= 0


# ---------------------------------------------------------------------------- lifetimes and deleters


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_capsule_runs_deleter_once(max_version):
    a = aipc.empty(8)
    rc = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=max_version)
    assert sys.getrefcount(a) == rc + 1
    caps = [a.__dlpack__(max_version=max_version) for _ in range(5)]
    assert sys.getrefcount(a) == rc + 6
    del cap, caps
    assert sys.getrefcount(a) == rc


@pytest.mark.parametrize("consumer", ["numpy", "torch", "torch-capsule"])
def test_consumers_run_deleter_once(consumer):
    a = aipc.from_numpy(np.arange(6, dtype=np.float32))
    rc = sys.getrefcount(a)
    if consumer == "numpy":
        x = np.from_dlpack(a)
    elif consumer == "torch":
        x = torch.from_dlpack(a)
    else:
        cap = a.__dlpack__()
        x = torch.utils.dlpack.from_dlpack(cap)
        assert capsule_name(cap) == "used_dltensor"
        del cap  # renamed: its destructor must not call the deleter
    assert sys.getrefcount(a) == rc + 1
    x[0] = 42  # zero-copy
    assert a.numpy()[0] == 42
    del x
    gc.collect()
    assert sys.getrefcount(a) == rc


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_deleter_from_a_thread_without_the_gil(max_version):
    a = aipc.empty(16)
    rc = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=max_version)
    call = consume_by_hand(cap)
    assert capsule_name(cap).startswith("used_")
    t = threading.Thread(target=call)  # ctypes drops the GIL; the deleter takes it
    t.start()
    t.join()
    assert sys.getrefcount(a) == rc
    del cap  # consumed: nothing more happens
    assert sys.getrefcount(a) == rc


def test_consumer_keeps_memory_after_close_and_gc():
    before = live()
    a = aipc.from_numpy(np.arange(4, dtype=np.int32))
    x = np.from_dlpack(a)
    t = torch.from_dlpack(a)
    a.close()
    del a
    assert live() == before + 1  # the memory is still in use
    x[0] = 9
    assert t[0].item() == 9
    del x
    assert live() == before + 1
    del t
    assert live() == before


def test_tensor_freed_in_another_thread():
    before = live()
    a = aipc.empty(1000)
    box = [torch.from_dlpack(a)]
    del a
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert live() == before


# ---------------------------------------------------------------------------- arguments


def test_dlpack_device():
    assert aipc.empty(1).__dlpack_device__() == (1, 0)
    assert aipc.empty(1, device=5).__dlpack_device__() == (1, 0)  # kDLCPU has only device 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stream": None}, {"stream": -1}, {"dl_device": (1, 0)}, {"copy": False}, {"copy": None},
        {"max_version": (1, 0), "dl_device": (1, 0), "copy": False, "stream": None},
    ],
)
def test_accepted_arguments(kwargs):
    assert capsule_name(aipc.empty(2).__dlpack__(**kwargs)).startswith("dltensor")


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"stream": 0}, BufferError),
        ({"stream": 1}, BufferError),
        ({"stream": 7}, BufferError),
        ({"stream": "s"}, BufferError),
        ({"dl_device": (2, 0)}, BufferError),
        ({"dl_device": (12, 0)}, BufferError),
        ({"dl_device": (1, 1)}, BufferError),
        ({"dl_device": "cpu"}, TypeError),
        ({"dl_device": (1,)}, TypeError),
        ({"dl_device": (1, "0")}, TypeError),
        ({"copy": True}, BufferError),
        ({"copy": 1}, TypeError),
        ({"max_version": 1}, TypeError),
        ({"max_version": (1,)}, TypeError),
        ({"max_version": ("1", 0)}, TypeError),
        ({"max_version": [1, 0]}, TypeError),
        ({"bogus": 1}, TypeError),
    ],
)
def test_refused_arguments(kwargs, exc):
    with pytest.raises(exc):
        aipc.empty(2).__dlpack__(**kwargs)


def test_positional_arguments_refused():
    with pytest.raises(TypeError):
        aipc.empty(2).__dlpack__(None)


def test_torch_copy_request():
    a = aipc.empty(3)
    with pytest.raises(BufferError):
        torch.from_dlpack(a, copy=True)
    assert torch.from_dlpack(a, copy=False).shape == (3,)


class _ClosesOnIndex:
    """An int-like whose conversion closes the array: Python code that runs in
    the middle of an argument conversion."""

    def __init__(self, array, value):
        self.array, self.value = array, value

    def __index__(self):
        self.array.close()
        return self.value


def test_dlpack_array_closed_while_its_arguments_are_read():
    a = aipc.empty((1024,), "float32")
    b = aipc.empty((1024,), "float32")
    bases = {a.data_ptr, b.data_ptr}
    with pytest.raises(ValueError, match="closed"):
        a.__dlpack__(max_version=(_ClosesOnIndex(a, 1), 0))
    with pytest.raises(ValueError, match="closed"):
        b.__dlpack__(dl_device=(1, _ClosesOnIndex(b, 0)))
    gc.collect()
    # no capsule came out, and the memory went back with the close
    assert [x for x in _C._live_allocations() if x[0] in bases] == []


def test_subview_of_an_array_closed_while_its_shape_is_read():
    a = aipc.empty((1024,), "float32")
    with pytest.raises(ValueError, match="closed"):
        _C._subview(a, 0, (_ClosesOnIndex(a, 4),), (4,), "float32")
