"""Property-based tests of the Python API (Hypothesis): random shapes, dtypes, views
(basic indexing with steps, negative strides, new axes), export/open of any view, any
string as a key, and any object as any argument. The promise checked: results agree
with numpy, and bad input gives the documented exception (TypeError, ValueError,
IndexError, BufferError, AclError with a known code), never a crash, a SystemError or
some other exception.

Bounded so that the whole module runs in well under a minute (ASCEND_IPC_HYPOTHESIS_EXAMPLES
scales the number of examples; the database is off, so a run leaves no files).
"""

from __future__ import annotations

import os
import pickle
import string
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import ascend_ipc as aipc  # noqa: E402

pytestmark = pytest.mark.timeout(120)

EXAMPLES = int(os.environ.get("ASCEND_IPC_HYPOTHESIS_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
PAGE = aipc.PAGE_SIZE
KNOWN_CODES = {100000, 107000, 107001, 200000, 200002, 200006, 207000, 207001, 207006, 207021, 507000, 507022}

dtypes = st.sampled_from(DTYPES).map(np.dtype)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)


def arrays(dtype=dtypes, shape=shapes):
    return hnp.arrays(dtype=dtype, shape=shape)


def contig(x) -> np.ndarray:
    """A C-contiguous copy with the same shape (np.ascontiguousarray makes 0-d 1-d)."""
    return np.array(x, order="C", copy=True)


def c_strides(shape, itemsize):
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (NaNs and signed zeros included)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@st.composite
def basic_index(draw, shape):
    """A basic numpy index for an array of this shape: ints (in range or not), slices
    with any step, Ellipsis, None."""
    parts = []
    dims = list(shape)
    used_ellipsis = False
    while dims and draw(st.booleans()):
        n = dims.pop(0)
        kind = draw(st.sampled_from(["int", "slice", "slice", "none", "ellipsis"]))
        if kind == "int":
            parts.append(draw(st.integers(-n - 1, n)))  # out of range now and then
        elif kind == "slice":
            start = draw(st.none() | st.integers(-n - 2, n + 2))
            stop = draw(st.none() | st.integers(-n - 2, n + 2))
            step = draw(st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
            parts.append(slice(start, stop, step))
        elif kind == "none":
            parts.append(None)
            dims.insert(0, n)
        elif not used_ellipsis:
            parts.append(Ellipsis)
            used_ellipsis = True
            dims = []
    return tuple(parts) if len(parts) != 1 or draw(st.booleans()) else parts[0]


# ---------------------------------------------------------------------------- arrays and views


@SETTINGS
@given(arrays())
def test_from_numpy_round_trip(host):
    with aipc.from_numpy(host) as a:
        assert a.shape == host.shape and a.dtype == host.dtype
        assert a.nbytes == host.nbytes and a.size == host.size and a.ndim == host.ndim
        assert a.strides == c_strides(host.shape, host.itemsize)
        assert a.allocation_size % PAGE == 0 and a.allocation_size >= max(host.nbytes, 1)
        assert same(a.numpy(), host)
        if host.size:
            assert same(np.from_dlpack(a), host)


@SETTINGS
@given(shapes, dtypes, st.sampled_from([None, 0, 1, 7]))
def test_empty_and_zeros(shape, dtype, device):
    with aipc.zeros(shape, dtype=dtype, device=device) as z, aipc.empty(shape, dtype=dtype, device=device) as e:
        dev = aipc.current_device() if device is None else device
        assert z.shape == e.shape == tuple(shape) and z.dtype == e.dtype == dtype
        assert z.device == e.device == dev
        assert not z.numpy().any()
        assert e.numpy().shape == tuple(shape)


@SETTINGS
@given(st.data())
def test_views_match_numpy(data):
    host = data.draw(arrays(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6)))
    idx = data.draw(basic_index(host.shape))
    with aipc.from_numpy(host) as a:
        try:
            expect = host[idx]
        except IndexError:
            with pytest.raises(IndexError):
                a[idx]
            return
        v = a[idx]
        if np.isscalar(expect) or not isinstance(expect, np.ndarray) or expect.ndim == 0:
            expect = np.asarray(expect)
        assert v.shape == expect.shape and v.dtype == expect.dtype
        assert v.strides == expect.strides or v.size == 0
        assert same(v.numpy(), contig(expect))
        assert v.base is not None
        # negative strides are never offered through DLPack (torch would abort on them);
        # along a dimension of extent 1 a stride means nothing and may be anything
        backwards = any(s < 0 and n > 1 for s, n in zip(v.strides, v.shape))
        if v.size and not backwards:
            assert same(np.from_dlpack(v), expect)
        elif v.size:
            with pytest.raises(BufferError):
                v.__dlpack__()


@SETTINGS
@given(st.data())
def test_export_any_view_and_open_it(data):
    host = data.draw(arrays(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)))
    idx = data.draw(basic_index(host.shape))
    try:
        expect = np.asarray(host[idx])
    except IndexError:
        return
    with aipc.from_numpy(host) as a:
        v = a[idx]
        pids = data.draw(st.sampled_from([None, [], [aipc.bare_tgid()]]))
        with aipc.export(v, pids=pids) as h:
            assert h.shape == expect.shape and h.dtype == expect.dtype and h.size == a.allocation_size
            h2 = pickle.loads(pickle.dumps(h))
            assert h2 == h and hash(h2) == hash(h) and not h2.is_exporter
            with h2.open() as b:  # our own pid is always allowed
                assert same(b.numpy(), contig(expect))
        assert h.closed


# ---------------------------------------------------------------------------- keys


def _real_key():
    a = aipc.empty(1)
    h = aipc.export(a)
    return a, h


KEY_ALPHABET = string.ascii_letters + string.digits + "-_"


@st.composite
def near_keys(draw, real):
    """Strings near a real key: one character changed, cut, extended, or a new key
    of the right shape."""
    kind = draw(st.sampled_from(["change", "cut", "extend", "shape", "prefix"]))
    if kind == "change":
        i = draw(st.integers(0, len(real) - 1))
        c = draw(st.sampled_from(KEY_ALPHABET + "=+/. ~"))
        return real[:i] + c + real[i + 1 :]
    if kind == "cut":
        return real[: draw(st.integers(1, len(real) - 1))]
    if kind == "extend":
        return real + draw(st.text(KEY_ALPHABET, min_size=1, max_size=4))
    if kind == "shape":
        return "aipc2." + draw(st.text(KEY_ALPHABET, min_size=56, max_size=56))
    return draw(st.sampled_from(["aipc2.", "aipc1.", "aipc3.", "AIPC2.", "aipc2"])) + real[6:]


any_text = st.text(max_size=80) | st.text(string.printable, max_size=70)


@SETTINGS
@given(st.data())
def test_any_string_as_a_key(data):
    a, h = _real_key()
    try:
        key = data.draw(any_text | near_keys(h.key))
        assume(key != h.key)
        try:
            g = aipc.IpcHandle(key, PAGE)
        except (TypeError, ValueError):
            return  # refused up front: not 1-64 printable characters without spaces
        assert g.key == key and not g.is_exporter
        with pytest.raises(aipc.AclError) as info:
            g.open()
        assert info.value.code in KNOWN_CODES, info.value
        assert info.value.message and info.value.name.startswith("ACL_")
    finally:
        h.close()
        a.close()


@SETTINGS
@given(
    size=st.integers(-5, 1 << 20) | st.sampled_from([0, 1, 4095, 4096, 4097, 2**63, -(2**63)]),
    dtype=st.sampled_from(DTYPES + ["float128", "object", "U4", ">i4", "V3"]),
    shape=st.none() | st.lists(st.integers(-2, 5000), max_size=4).map(tuple),
    offset=st.integers(-10, 10000),
)
def test_handle_constructor_checks_the_view(size, dtype, shape, offset):
    a, h = _real_key()
    try:
        try:
            g = aipc.IpcHandle(h.key, size, dtype=dtype, shape=shape, offset=offset)
        except (TypeError, ValueError, OverflowError):
            return
        # accepted: the view fits in size; opening the real key gives exactly it when the
        # size is within the grant, and AclError (nothing imported) when it claims more
        assert g.offset + g.nbytes <= g.size or g.nbytes == 0
        if g.size <= h.size:
            with g.open() as b:
                assert b.shape == g.shape and b.dtype == g.dtype
                b.numpy()
                if b.nbytes:
                    np.from_dlpack(b).copy()  # read in place, every byte
        else:
            with pytest.raises(aipc.AclError, match="granted"):
                g.open()
    finally:
        h.close()
        a.close()


# ---------------------------------------------------------------------------- any object anywhere


def _odd_objects():
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        st.text(max_size=10),
        st.binary(max_size=10),
        st.lists(st.integers(-3, 10) | st.text(max_size=2) | st.none(), max_size=4),
        st.tuples(st.integers(-3, 10), st.floats()),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.just(np.arange(3)),
        st.just(np.float32(2.0)),
        st.just(object()),
        st.just(slice(1, 2)),
        st.just(Ellipsis),
    )


ALLOWED = (TypeError, ValueError, OverflowError, IndexError, BufferError, aipc.AclError)


def call_allowed(fn, *args, **kwargs):
    """Calls fn; any documented exception is fine, anything else (SystemError: a C
    error without an exception set, or the reverse) fails the test."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's casts of odd values to float32
            r = fn(*args, **kwargs)
    except ALLOWED as e:
        assert not isinstance(e, SystemError)
        if isinstance(e, aipc.AclError):
            assert e.code in KNOWN_CODES, e
        return None
    return r


def _close(obj):
    close = getattr(obj, "close", None)
    if close is not None:
        close()


@SETTINGS
@given(obj=_odd_objects(), which=st.integers(0, 15))
def test_any_object_as_any_argument(obj, which):
    dev = aipc.current_device()
    a = aipc.from_numpy(np.arange(6, dtype=np.float32))
    h = aipc.export(a)
    try:
        calls = [
            lambda: aipc.empty(obj),
            lambda: aipc.empty(3, dtype=obj),
            lambda: aipc.zeros(2, device=obj),
            lambda: aipc.from_numpy(obj),
            lambda: aipc.export(obj),
            lambda: aipc.export(a, pids=obj),
            lambda: aipc.export(a, link=obj),
            lambda: aipc.IpcHandle(obj, 4096),
            lambda: aipc.IpcHandle(h.key, obj),
            lambda: aipc.IpcHandle(h.key, 4096, shape=obj),
            lambda: a[obj],
            lambda: a.__dlpack__(max_version=obj),
            lambda: a.__dlpack__(stream=obj),
            lambda: h.open(device=obj),
            lambda: aipc.set_device(obj),
            lambda: a.copy_from(obj),
        ]
        r = call_allowed(calls[which])
        if r is not None and r is not a and r is not h:
            _close(r)
    finally:
        aipc.set_device(dev)
        h.close()
        a.close()
