"""DeviceArray in one process: allocation, copies, views, attributes, close, bad arguments."""

import gc
import os
import pickle
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ascend_ipc as aipc
from ascend_ipc import _C
from conftest import run_command

pytestmark = pytest.mark.timeout(60)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True).reshape(shape)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt).reshape(shape)
    return rng.standard_normal(n).astype(dt).reshape(shape)


def live():
    gc.collect()
    return len(_C._live_allocations())


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(dtype):
    x = sample((3, 5), dtype)
    with aipc.from_numpy(x) as a:
        assert a.dtype == np.dtype(dtype)
        assert a.shape == (3, 5) and a.strides == x.strides and a.ndim == 2
        assert a.nbytes == x.nbytes and a.itemsize == x.itemsize and a.size == 15
        y = a.numpy()
        assert y.dtype == x.dtype and y.flags.c_contiguous and y.flags.owndata
        np.testing.assert_array_equal(y, x)
        z = np.from_dlpack(a)
        np.testing.assert_array_equal(z, x)


@pytest.mark.parametrize("maker", [aipc.empty, aipc.zeros])
def test_empty_and_zeros(maker):
    a = maker((2, 3), dtype="int32")
    assert a.shape == (2, 3) and a.dtype == np.int32 and a.strides == (12, 4)
    assert a.allocation_size == 4096 and a.offset == 0 and not a.is_import and a.base is None
    assert a.device == aipc.current_device()
    if maker is aipc.zeros:
        assert not a.numpy().any()
    assert aipc.empty(4).dtype == np.float32  # default dtype
    for spec in (np.float64, np.dtype("float64"), "f8", "float64", float):
        assert aipc.empty(1, dtype=spec).dtype == np.float64
    assert aipc.empty([2, 2]).shape == (2, 2)
    assert aipc.empty(np.int64(3)).shape == (3,)


def test_zero_d_and_zero_size():
    s = aipc.from_numpy(np.array(7.5))
    assert s.shape == () and s.strides == () and s.nbytes == 8 and s.size == 1
    assert s.numpy() == np.array(7.5, dtype=np.float64)
    assert s.allocation_size == 4096
    with pytest.raises(TypeError):
        len(s)
    for shape in [(0,), (3, 0), (0, 4, 5)]:
        z = aipc.empty(shape, dtype="int16")
        assert z.shape == shape and z.nbytes == 0 and z.size == 0
        assert z.allocation_size == 4096  # at least one page
        assert z.numpy().shape == shape
        assert np.from_dlpack(z).shape == shape
        assert z.is_contiguous()
    e = aipc.from_numpy(np.zeros((0, 3), dtype=np.uint8))
    assert e.shape == (0, 3)


def test_page_rounding_and_device():
    a = aipc.empty(4097, dtype="uint8")
    assert a.allocation_size == 8192
    b = aipc.empty(10, device=3)
    assert b.device == 3
    assert aipc.current_device() == 0  # allocation does not move the caller
    np.testing.assert_array_equal(aipc.from_numpy(np.arange(5), device=2).numpy(), np.arange(5))


def _meminfo_kib(field):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def test_large_allocation_takes_its_pages_at_once_where_the_host_can_spare_them():
    # As a device commits its memory at aclrtMalloc: made now, in transparent huge pages
    # under the default policy (HUGE_FIRST, above 1 MiB) where the kernel makes them.
    n = 256 << 20
    spare = _meminfo_kib("MemAvailable") - _meminfo_kib("MemTotal") // 4
    if spare < 2 * (n >> 10):
        pytest.skip("the host has no 512 MiB to spare: pages are made at first touch")
    rss = _rss()
    a = aipc.empty(n, dtype="uint8")
    assert _rss() - rss >= (n >> 10) - 1024  # KiB, before any touch
    x = np.from_dlpack(a)
    assert not x[:: 1 << 16].any()  # zeros
    x[-1] = 7
    assert a[-1:].numpy()[0] == 7
    del x
    a.close()
    assert _rss() - rss < 64 << 10


def test_zero_makes_pages_at_first_touch():
    # ASCEND_IPC_HUGE_PAGES=0: nothing is made until touched, so a large allocation is
    # cheap (the configuration is read once per process: a process of its own)
    code = (
        "import numpy as np, ascend_ipc as aipc\n"
        "def rss():\n"
        "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS:')][0].split()[1])\n"
        "r = rss(); a = aipc.empty(1 << 30, dtype='uint8'); assert a.nbytes == 1 << 30\n"
        "assert rss() - r < 64 << 10, rss() - r\n"
        "x = np.from_dlpack(a); x[-1] = 7; assert a[-1:].numpy()[0] == 7\n"
        "assert rss() - r < 64 << 10, rss() - r\n"
        "print('ok')\n"
    )
    env = dict(os.environ, ASCEND_IPC_HUGE_PAGES="0")
    rc, out, err = run_command([sys.executable, "-c", code], env=env, timeout=120)
    assert rc == 0 and out.strip() == "ok", err


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def test_from_numpy_non_contiguous_and_byte_order():
    x = np.arange(24, dtype=np.int64).reshape(4, 6)
    for view in (x[:, ::2], x.T, x[::-1], x[1:3, 2:5]):
        a = aipc.from_numpy(view)
        assert a.is_contiguous()
        np.testing.assert_array_equal(a.numpy(), view)
    be = np.arange(5, dtype=">i4")
    a = aipc.from_numpy(be)
    assert a.dtype == np.dtype("=i4")
    np.testing.assert_array_equal(a.numpy(), np.arange(5))
    # an unaligned input is realigned
    raw = np.zeros(17, dtype=np.uint8)
    unaligned = raw[1:].view(np.int32)
    unaligned[:] = [1, 2, 3, 4]
    np.testing.assert_array_equal(aipc.from_numpy(unaligned).numpy(), [1, 2, 3, 4])


BASIC_KEYS = [
    (slice(None),), (1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (slice(None, None, -1),),
    (Ellipsis, 1), (None,), (1, None, slice(2, None)), (slice(1, 2), Ellipsis), (0, 0, 0),
    (Ellipsis,), (slice(5, 1),), (np.int64(2),), (slice(-2, None), slice(None, None, 3), 1),
]


@pytest.mark.parametrize("key", BASIC_KEYS, ids=repr)
def test_basic_indexing_matches_numpy(key):
    x = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    a = aipc.from_numpy(x)
    v = a[key if len(key) > 1 else key[0]]
    expected = x[key + (Ellipsis,)] if not any(k is Ellipsis for k in key) else x[key]  # a view, never a scalar
    assert isinstance(v, aipc.DeviceArray)
    assert v.shape == expected.shape and v.strides == expected.strides
    assert v.base is a and v.offset == expected.__array_interface__["data"][0] - x.__array_interface__["data"][0]
    np.testing.assert_array_equal(v.numpy(), expected)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_slicing_property(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    keys = []
    for n in shape:
        keys.append(data.draw(st.one_of(
            st.slices(max(n, 1)),
            st.integers(-n, n - 1) if n > 0 else st.just(slice(None)),
            st.just(None),
        )))
    key = tuple(keys)
    a = aipc.from_numpy(x)
    try:
        expected = x[key + (Ellipsis,)]
    except IndexError:
        with pytest.raises(IndexError):
            a[key]
        return
    v = a[key]
    assert v.shape == expected.shape
    np.testing.assert_array_equal(v.numpy(), expected)
    if expected.size and all(s >= 0 for s in expected.strides):
        np.testing.assert_array_equal(np.from_dlpack(v), expected)
    a.close()
    v.close()


def test_views_share_memory_and_outlive_base():
    a = aipc.from_numpy(np.arange(10, dtype=np.float64))
    v = a[2:8:2]
    y = np.from_dlpack(a)
    y[4] = -1
    np.testing.assert_array_equal(v.numpy(), [2, -1, 6])
    del y
    before = live()
    a.close()
    assert a.closed and not v.closed
    assert live() == before  # the view still uses the memory
    np.testing.assert_array_equal(v.numpy(), [2, -1, 6])
    v.close()
    assert live() == before - 1


def test_indexing_errors():
    a = aipc.from_numpy(np.arange(12).reshape(3, 4))
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError):
        a[0, 0, 0]
    for bad in ([0, 1], np.array([0, 1]), np.array([True, False, True]), True, np.bool_(False), 1.5, "x",
                (0, [1]), {0}):
        with pytest.raises(TypeError):
            a[bad]
    with pytest.raises(IndexError):
        a[..., ...]
    assert len(a) == 3


def test_attributes():
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    a = aipc.from_numpy(x)
    assert isinstance(a.data_ptr, int) and a.data_ptr % 4096 == 0
    v = a[1:, 1:]
    assert v.data_ptr == a.data_ptr + v.offset == a.data_ptr + 10
    assert not v.is_contiguous() and a.is_contiguous()
    assert a.__dlpack_device__() == (1, 0)
    r = repr(v)
    assert r.startswith("DeviceArray(shape=(2, 3), dtype=int16, device=0, ptr=0x") and "owned" in r
    with pytest.raises(AttributeError):
        a.shape = (4, 3)
    a.close()
    assert "closed" in repr(a)


def test_close_and_use_after_close():
    before = live()
    a = aipc.empty(100)
    assert live() == before + 1
    free0 = aipc.mem_info()[0]
    a.close()
    assert live() == before
    assert aipc.mem_info()[0] >= free0
    a.close()  # harmless
    for op in (a.numpy, lambda: a[0], lambda: a.__dlpack__(), lambda: a.data_ptr, lambda: aipc.export(a),
               lambda: a.__enter__()):
        with pytest.raises(ValueError, match="closed"):
            op()
    assert a.shape == (100,) and a.closed  # metadata stays readable
    with aipc.empty(3) as b:
        assert not b.closed
    assert b.closed


def test_gc_frees_and_cycles_are_collected():
    before = live()
    a = aipc.empty(10)
    cycle = [a]
    cycle.append(cycle)
    del a, cycle
    gc.collect()
    assert live() == before


def test_memory_comes_back():
    free0, _ = aipc.mem_info()
    arrays = [aipc.empty(1 << 20, dtype="uint8") for _ in range(8)]
    assert aipc.mem_info()[0] <= free0 - 8 * (1 << 20)
    del arrays
    gc.collect()
    assert aipc.mem_info()[0] == free0


def test_numpy_conversion_protocol():
    a = aipc.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    x = np.asarray(a)
    assert x.dtype == np.int32 and x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    assert np.array(a[:, 1]).tolist() == [1, 4]
    x[0, 0] = 99  # a copy
    assert a.numpy()[0, 0] == 0
    with pytest.raises(ValueError, match="from_dlpack"):
        np.array(a, copy=False)
    np.testing.assert_array_equal(a, [[0, 1, 2], [3, 4, 5]])
    a.close()
    with pytest.raises(ValueError, match="closed"):
        np.asarray(a)


def test_not_picklable():
    a = aipc.empty(3)
    with pytest.raises(TypeError, match="export"):
        pickle.dumps(a)


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda: aipc.empty(-1), ValueError),
        (lambda: aipc.empty((2, -3)), ValueError),
        (lambda: aipc.empty("3"), TypeError),
        (lambda: aipc.empty(3.0), TypeError),
        (lambda: aipc.empty((2, 2.0)), TypeError),
        (lambda: aipc.empty(None), TypeError),
        (lambda: aipc.empty((1,) * 65), ValueError),
        (lambda: aipc.empty(1 << 62, dtype="float64"), ValueError),
        (lambda: aipc.empty((1 << 40, 1 << 40)), ValueError),
        (lambda: aipc.empty(3, dtype="object"), TypeError),
        (lambda: aipc.empty(3, dtype="U4"), TypeError),
        (lambda: aipc.empty(3, dtype="float128" if hasattr(np, "float128") else "longdouble"), TypeError),
        (lambda: aipc.empty(3, dtype=[("a", "i4")]), TypeError),
        (lambda: aipc.empty(3, dtype="M8[s]"), TypeError),
        (lambda: aipc.empty(3, dtype="nonsense"), TypeError),
        (lambda: aipc.empty(3, dtype=None), TypeError),
        (lambda: aipc.empty(3, dtype=">f4"), ValueError),
        (lambda: aipc.empty(3, device="0"), TypeError),
        (lambda: aipc.empty(3, device=1.0), TypeError),
        (lambda: aipc.empty(3, device=True), TypeError),
        (lambda: aipc.empty(3, device=-1), ValueError),
        (lambda: aipc.empty(), TypeError),
        (lambda: aipc.empty(3, "f4", None, 4), TypeError),
        (lambda: aipc.empty(3, bogus=1), TypeError),
        (lambda: aipc.from_numpy([1, 2, 3]), TypeError),
        (lambda: aipc.from_numpy(None), TypeError),
        (lambda: aipc.from_numpy(np.array(["a"])), TypeError),
        (lambda: aipc.from_numpy(np.array([object()])), TypeError),
        (lambda: aipc.from_numpy(np.arange(3), device="x"), TypeError),
    ],
)
def test_bad_arguments(call, exc):
    with pytest.raises(exc):
        call()


def test_bad_device_is_the_runtimes_error():
    with pytest.raises(aipc.AclError) as info:
        aipc.empty(3, device=aipc.device_count())
    assert info.value.code == 107001
    with pytest.raises(aipc.AclError) as info:
        aipc.from_numpy(np.arange(3), device=1000)
    assert info.value.code == 107001


def test_threads_share_one_array():
    import threading

    a = aipc.from_numpy(np.arange(1 << 16, dtype=np.int64))
    errors = []

    def reader():
        try:
            for _ in range(50):
                v = a[100:200]
                assert v.numpy()[0] == 100
                v.close()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
