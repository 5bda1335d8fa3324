"""IpcHandle: export, pickling, open in other processes (spawn, fork, forkserver), whitelist,
link attribute, close semantics, exporter exit, strict mode."""

import gc
import multiprocessing
import os
import pickle
import textwrap

import numpy as np
import pytest

import aipc_workers as W
from conftest import settle
import ascend_ipc as aipc
from ascend_ipc import _C

pytestmark = pytest.mark.timeout(120)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
ERROR_CODES = {100000, 107000, 200000, 207000, 207006, 507000, 507022, 507899}


def live():
    gc.collect()
    return len(_C._live_allocations())


# ---------------------------------------------------------------------------- one process


def test_export_attributes_and_own_import():
    a = aipc.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = a[1:, 1:3]
    h = aipc.export(v)
    assert isinstance(h.key, str) and 1 <= len(h.key) <= 64 and h.key.isprintable()
    assert (h.shape, h.strides, h.dtype, h.ndim) == ((2, 2), (16, 4), np.dtype("float32"), 2)
    assert (h.offset, h.nbytes, h.size, h.device) == (20, 16, 4096, 0)
    assert h.pid == os.getpid() and h.is_exporter and not h.closed
    assert h.pid_validation is False and h.torch_dtype is None
    assert h.key not in repr(h) and h.key[:12] in repr(h) and "exporter" in repr(h)
    b1 = h.open()
    b2 = h.open()  # two imports of one's own key: two arrays over the same bytes
    assert b1.is_import and b2.is_import and b1 is not b2
    assert (b1.shape, b1.strides, b1.offset) == (v.shape, v.strides, v.offset)
    np.testing.assert_array_equal(b1.numpy(), v.numpy())
    np.from_dlpack(b1)[...] = -1
    np.testing.assert_array_equal(a.numpy()[1:, 1:3], -1)
    np.testing.assert_array_equal(b2.numpy(), -1)
    b1.close()
    np.testing.assert_array_equal(b2.numpy(), -1)  # the other import is unaffected
    b2.close()
    with h.open() as b3:
        assert b3.shape == (2, 2)
    assert b3.closed


def test_pids_none_shares_one_export_per_allocation():
    a = aipc.empty((4, 4), dtype="int32")
    h1, h2, h3 = aipc.export(a), aipc.export(a), aipc.export(a[1:])
    assert h1.key == h2.key == h3.key
    assert h1 == h2 and h1 != h3 and hash(h1) == hash(h3)
    assert h3.offset == 16 and h3.shape == (3, 4)
    w1, w2 = aipc.export(a, pids=[]), aipc.export(a, pids=[])
    assert len({w1.key, w2.key, h1.key}) == 3  # a whitelist export is always new
    assert w1.pid_validation is True
    assert {h1, h2, h3, w1, w2} == {h1, h3, w1, w2}


def test_pickle_never_imports():
    a = aipc.from_numpy(np.arange(6, dtype=np.int16)[::2].copy())
    h = aipc.export(a[1:])
    before = live()
    blob = pickle.dumps(h)
    g = pickle.loads(blob)
    assert live() == before  # nothing imported
    assert g == h and g.key == h.key and not g.is_exporter and g.pid == h.pid
    assert (g.shape, g.strides, g.offset, g.size, g.dtype) == (h.shape, h.strides, h.offset, h.size, h.dtype)
    assert g.pid_validation is None
    np.testing.assert_array_equal(g.open().numpy(), [2, 4])
    assert len(blob) < 400 and b"numpy" not in blob  # plain values only
    h.close()
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(h)


def test_handle_from_key():
    a = aipc.from_numpy(np.arange(8, dtype=np.uint8))
    h = aipc.export(a)
    raw = aipc.IpcHandle(h.key, h.size)  # as if the key came from a C program
    assert raw.shape == (4096,) and raw.dtype == np.uint8 and raw.offset == 0
    with raw.open() as b:
        assert b.numpy()[:8].tolist() == list(range(8))
    typed = aipc.IpcHandle(h.key, 4096, dtype="int16", shape=(2, 2), strides=(2, 4), offset=0, device=0)
    with typed.open() as b:
        assert b.numpy().tolist() == [[0x0100, 0x0504], [0x0302, 0x0706]]


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"key": 5, "size": 4096}, TypeError),
        ({"key": "", "size": 4096}, ValueError),
        ({"key": "k" * 65, "size": 4096}, ValueError),
        ({"key": "a b", "size": 4096}, ValueError),
        ({"key": "k\x00", "size": 4096}, ValueError),
        ({"key": "ké", "size": 4096}, ValueError),
        ({"key": "k", "size": 0}, ValueError),
        ({"key": "k", "size": "4096"}, TypeError),
        ({"key": "k", "size": 4096, "offset": -1}, ValueError),
        ({"key": "k", "size": 4096, "offset": 4096, "shape": (1,)}, ValueError),
        ({"key": "k", "size": 4096, "shape": (2000,), "dtype": "int32"}, ValueError),
        ({"key": "k", "size": 4096, "shape": (4,), "strides": (-8,)}, ValueError),
        ({"key": "k", "size": 4096, "strides": (4,)}, ValueError),
        ({"key": "k", "size": 4096, "shape": (2,), "strides": (4, 4)}, ValueError),
        ({"key": "k", "size": 4096, "dtype": "object"}, TypeError),
        ({"key": "k", "size": 4096, "torch_dtype": 5}, TypeError),
        ({"key": "k", "size": 4096, "device": -1}, ValueError),
        ({"key": "k"}, TypeError),
    ],
)
def test_handle_constructor_validation(kwargs, exc):
    with pytest.raises(exc):
        aipc.IpcHandle(**kwargs)


@pytest.mark.parametrize("key", ["forged", "aipc2." + "A" * 56, "aipc2." + "_" * 56, "aipc1." + "A" * 54, "x" * 64])
def test_forged_keys_fail_cleanly(key):
    with pytest.raises(aipc.AclError) as info:
        aipc.IpcHandle(key, 4096).open()
    assert info.value.code in ERROR_CODES and info.value.message
    assert info.value.call == "aclrtIpcMemImportByKey"


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda a: aipc.export(np.zeros(3)), TypeError),
        (lambda a: aipc.export(None), TypeError),
        (lambda a: aipc.export(a, pids=5), TypeError),
        (lambda a: aipc.export(a, pids="12"), TypeError),
        (lambda a: aipc.export(a, pids=[1.5]), TypeError),
        (lambda a: aipc.export(a, pids=[True]), TypeError),
        (lambda a: aipc.export(a, pids=[1 << 40]), OverflowError),
        (lambda a: aipc.export(a, link=1), TypeError),
        (lambda a: aipc.export(a, link="nvlink"), ValueError),
        (lambda a: aipc.export(a, torch_dtype=3), TypeError),
        (lambda a: aipc.export(a, stream=5), TypeError),
        (lambda a: aipc.export(a, None, None, None, None), TypeError),
        (lambda a: aipc.export(), TypeError),
    ],
)
def test_export_bad_arguments(call, exc):
    with pytest.raises(exc):
        call(aipc.empty(4))


def test_export_of_an_import_is_the_runtimes_error(worker):
    h = aipc.export(aipc.empty(4))
    b = h.open()
    try:
        aipc.export(b)  # allowed or the runtime's error, never a crash
    except aipc.AclError as e:
        assert e.code in ERROR_CODES
    b.close()


def test_link_attribute():
    a = aipc.empty(8)
    sio, hccs, plain = aipc.export(a, link="sio"), aipc.export(a, link="hccs"), aipc.export(a)
    assert len({sio.key, hccs.key, plain.key}) == 3
    assert aipc.export(a, link="sio").key == sio.key
    for ub in ("ub_one_port", "ub_multi_port"):
        with pytest.raises(aipc.AclError) as info:
            aipc.export(a, link=ub)
        assert info.value.code == 207021 and info.value.name == "ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED"
    with sio.open() as b:
        assert b.shape == (8,)


def test_close_semantics():
    a = aipc.from_numpy(np.arange(4, dtype=np.int64))
    h = aipc.export(a)
    copy = pickle.loads(pickle.dumps(h))
    b = copy.open()
    h.close()
    assert h.closed and not copy.closed
    h.close()  # harmless
    with pytest.raises(ValueError, match="closed"):
        h.open()
    with pytest.raises(ValueError, match="closed"):
        h.allow(1)
    np.testing.assert_array_equal(b.numpy(), np.arange(4))  # an import already open stays valid
    b.close()
    with pytest.raises(aipc.AclError) as info:
        copy.open()  # the export ended: new imports are refused
    assert info.value.code == 507022
    h2 = aipc.export(a)  # the array can be exported again
    assert h2.key != h.key
    with h2.open() as c:
        assert c.numpy().tolist() == [0, 1, 2, 3]
    copy.close()
    assert copy.closed
    with pytest.raises(ValueError):
        copy.open()
    with aipc.export(a, pids=[]) as h3:
        assert not h3.closed
    assert h3.closed


def test_handle_keeps_memory_alive():
    before = live()
    a = aipc.from_numpy(np.arange(3))
    h = aipc.export(a)
    a.close()
    del a
    assert live() == before + 1
    with h.open() as b:
        assert b.numpy().tolist() == [0, 1, 2]
    h.close()
    del b
    assert live() == before


def test_allow_arguments():
    h = aipc.export(aipc.empty(2), pids=[])
    with pytest.raises(TypeError):
        h.allow()
    with pytest.raises(TypeError):
        h.allow("1")
    with pytest.raises(TypeError):
        h.allow(1, bogus=2)
    with pytest.raises(TypeError):
        h.allow(1, sdid="0")
    h.allow(os.getpid())
    h.allow(os.getpid(), sdid=0)
    h.allow(123456, sdid=7)  # another server: recorded


# ---------------------------------------------------------------------------- across processes


def test_round_trip_writes_both_ways(worker):
    a = aipc.from_numpy(np.arange(10, dtype=np.float64))
    h = aipc.export(a[2:8])
    seen = worker.call(W.open_add, h, 100.0)
    np.testing.assert_array_equal(seen, np.arange(2, 8))
    x = a.numpy()
    np.testing.assert_array_equal(x[2:8], np.arange(2, 8) + 100.0)
    np.testing.assert_array_equal(x[:2], [0, 1])
    np.from_dlpack(a)[2] = -7
    assert worker.call(W.open_read, h)[0] == -7


def test_non_contiguous_views(worker):
    x = np.arange(60, dtype=np.int32).reshape(6, 10)
    a = aipc.from_numpy(x)
    strided = a[1::2, 2::3]
    offset_slice = a[4, 3:7]
    for view, expected in ((strided, x[1::2, 2::3]), (offset_slice, x[4, 3:7])):
        h = aipc.export(view)
        assert h.offset > 0
        got = worker.call(W.open_read, h)
        np.testing.assert_array_equal(got, expected)
        worker.call(W.open_add, h, 1000)
    y = a.numpy()
    touched = np.zeros_like(x, dtype=bool)
    touched[1::2, 2::3] = True
    touched[4, 3:7] = True
    np.testing.assert_array_equal(y[touched], x[touched] + 1000)
    np.testing.assert_array_equal(y[~touched], x[~touched])


def test_every_dtype(worker):
    rng = np.random.default_rng(1)
    arrays, handles = {}, {}
    for name in DTYPES:
        dt = np.dtype(name)
        vals = rng.integers(0, 100, 6).astype(dt) if dt.kind != "b" else np.array([1, 0, 1, 1, 0, 0], dtype=bool)
        arrays[name] = aipc.from_numpy(vals.reshape(2, 3))
        handles[name] = aipc.export(arrays[name])
    seen = worker.call(W.open_all_dtypes, handles)
    for name in DTYPES:
        original = seen[name]
        assert original.dtype == np.dtype(name)
        after = arrays[name].numpy()
        expected = ~original if original.dtype == np.bool_ else original + 1
        np.testing.assert_array_equal(after, expected)


def test_zero_d_and_zero_size(worker):
    s = aipc.from_numpy(np.array(2.5, dtype=np.float32))
    assert worker.call(W.open_read, aipc.export(s)).tolist() == 2.5
    z = aipc.empty((3, 0), dtype="int8")
    assert worker.call(W.open_info, aipc.export(z))["shape"] == (3, 0)


@pytest.mark.timeout(180)
def test_large_untouched(workers):
    w = workers.get("spawn")
    a = aipc.empty(1 << 30, dtype="uint8")
    h = aipc.export(a)
    rss = w.call(W.rss_kib)
    assert w.call(W.write_last_byte, h, 77) == 1 << 30
    assert w.call(W.rss_kib) - rss < 64 << 10  # KiB: importing 1 GiB touched one page
    assert a[-1:].numpy()[0] == 77


@pytest.mark.timeout(180)
def test_thousand_handles_through_a_queue():
    ctx = multiprocessing.get_context("spawn")
    arrays = [aipc.from_numpy(np.array([i], dtype=np.int64)) for i in range(1000)]
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=W.recv_many_to, args=(q_in, q_out, len(arrays)), daemon=True)
    p.start()
    try:
        for a in arrays:
            q_in.put(aipc.export(a))
        status, result = q_out.get(timeout=150)
        assert status == "ok", result
        assert result == []
        assert all(int(a.numpy()[0]) == -i for i, a in enumerate(arrays))
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()


def test_whitelist(workers, method):
    allowed, other = workers.get(method, 0), workers.get(method, 1)
    tgid = allowed.call(W.info)["tgid"]
    assert tgid == allowed.pid
    a = aipc.from_numpy(np.arange(4, dtype=np.int32))
    h = aipc.export(a, pids=[])
    err = allowed.call(W.open_error, h)
    assert err is not None and err[0] == 207006 and err[1] == "ACL_ERROR_RT_NO_PERMISSION"
    h.allow(tgid)
    assert allowed.call(W.open_error, h) is None
    assert other.call(W.open_error, h)[0] == 207006
    h2 = aipc.export(a, pids=[tgid])
    assert allowed.call(W.open_read, h2).tolist() == [0, 1, 2, 3]
    assert other.call(W.open_error, h2)[0] == 207006
    # only the exporter may change the whitelist
    answer = other.call(W.try_allow, h2, other.pid)
    assert answer is not None and answer[0] in ERROR_CODES
    assert other.call(W.open_error, h2)[0] == 207006


def test_exporter_exits(workers, method):
    w = workers.fresh(method)
    h = w.call(W.export_new, np.arange(5, dtype=np.int64))
    blob = pickle.dumps(h)
    b = h.open()
    w.stop()
    assert not w.alive()
    # the import already open stays valid, for reads and writes
    np.testing.assert_array_equal(b.numpy(), np.arange(5))
    np.from_dlpack(b)[0] = 42
    assert b.numpy()[0] == 42
    b.close()
    # unpickling a handle whose exporter is gone is fine; opening it is not
    g = pickle.loads(blob)
    with pytest.raises(aipc.AclError) as info:
        g.open()
    assert info.value.code == 507022 and info.value.name == "ACL_ERROR_RT_IPC_ERROR"
    assert workers.get(method).call(W.open_error, g)[0] == 507022


def test_unpickle_in_another_process_never_imports(worker):
    a = aipc.empty(4)
    h = aipc.export(a)
    seen = worker.call(W.unpickle_only, pickle.dumps(h))
    assert seen["key"] == h.key and not seen["is_exporter"] and not seen["closed"]
    assert seen["live"] == worker.call(W.live_allocations).__len__()


def test_receiver_close_is_local(worker):
    a = aipc.from_numpy(np.arange(3, dtype=np.int8))
    h = aipc.export(a)
    values, closed = worker.call(W.close_twice, h)
    assert values.tolist() == [0, 1, 2] and closed
    assert not h.closed
    assert worker.call(W.open_read, h).tolist() == [0, 1, 2]  # the export lives on


def test_other_device(worker):
    a = aipc.from_numpy(np.arange(6, dtype=np.float32), device=2)
    h = aipc.export(a)
    assert h.device == 2
    info = worker.call(W.open_info, h)
    assert info["device"] == 2
    # numpy() switches to the memory's device for the copy (CANN refuses
    # host<->device copies of memory imported from another device)
    np.testing.assert_array_equal(worker.call(W.open_read, h), np.arange(6))
    np.testing.assert_array_equal(worker.call(W.open_read, h, 2), np.arange(6))
    worker.call(W.open_add, h, 1)
    np.testing.assert_array_equal(a.numpy(), np.arange(6) + 1)


# ---------------------------------------------------------------------------- several opens of one key
#
# Each open() is an import of its own (a mapping of its own), and the runtime's
# aclrtIpcMemClose(key) releases the key's OLDEST mapping: closing the arrays in any
# order must never unmap one still in use. The importers here are other processes, as
# an import of one's own key gets the exporter's own memory.


@pytest.mark.parametrize("order", ["younger first", "older first"])
def test_two_opens_two_mappings_closed_in_any_order(worker, order):
    a = aipc.from_numpy(np.arange(512, dtype=np.int64))  # one page
    h = aipc.export(a)
    ptrs, maps, live_delta, seen = worker.call(W.two_opens, h, order)
    assert ptrs[0] != ptrs[1]  # two mappings over the same bytes
    assert maps["open"] == 2
    # the oldest mapping goes first: a younger one closed first waits for it
    assert maps["first closed"] == (2 if order == "younger first" else 1)
    assert maps["both closed"] == 0 and live_delta == 0
    expected = np.arange(512)
    expected[:3] = [11, 22, 33]
    np.testing.assert_array_equal(seen, expected)
    np.testing.assert_array_equal(a.numpy(), expected)  # the exporter saw every write


def test_dlpack_consumer_keeps_the_oldest_import(worker):
    a = aipc.from_numpy(np.zeros(4, dtype=np.int32))
    h = aipc.export(a)
    seen, held, after = worker.call(W.dlpack_outlives_close, h)
    assert seen.tolist() == [3, -5, 0, 0]  # three later opens wrote, the first still reads
    assert held == 4 and after == 0
    assert a.numpy().tolist() == [3, -5, 0, 0]


@pytest.mark.timeout(180)
def test_threads_open_and_close_one_key_in_any_order(workers):
    w = workers.get("spawn")
    a = aipc.from_numpy(np.arange(2048, dtype=np.int32))  # two pages
    h = aipc.export(a)
    errors, maps, live_delta = w.call(W.threads_open_close, h, 4, 150)
    assert errors == []
    assert maps == 0 and live_delta == 0


def test_own_import_keeps_the_exported_memory(recwarn):
    before, free = live(), aipc.mem_info(0)[0]
    a = aipc.from_numpy(np.arange(4, dtype=np.int64))
    h = aipc.export(a)
    b = h.open()
    copy = pickle.loads(pickle.dumps(h))
    h.close()  # ends the export once b, an import of it in this process, is closed
    assert h.closed
    with pytest.raises(aipc.AclError) as info:
        copy.open()  # ended: no new imports
    assert info.value.code == 507022
    del a, h
    gc.collect()
    np.from_dlpack(b)[0] = 7  # the exported memory is b's memory: still there
    assert b.numpy().tolist() == [7, 1, 2, 3]
    b.close()
    assert live() == before
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]
    assert aipc.mem_info(0)[0] == free  # freed once the export ended


# ---------------------------------------------------------------------------- strict mode


STRICT_SCRIPT = textwrap.dedent(
    """
    import gc, multiprocessing, sys, time, warnings
    import numpy as np
    sys.path.insert(0, {tests!r})
    import aipc_workers as W
    import ascend_ipc as aipc
    from ascend_ipc import _handoff

    if __name__ == "__main__":
        w = W.Worker(multiprocessing.get_context("spawn"))
        try:
            a = aipc.from_numpy(np.arange(4))
            h = aipc.export(a)
            w.call(W.open_and_keep, "x", h)
            try:
                h.close()
                print("close: ok")
            except aipc.AclError as e:
                print("close:", e.code)
            print("still exported:", not h.closed)
            w.call(W.drop, "x")
            h.close()
            print("after importer closed:", h.closed)
            a.close()
            a = aipc.from_numpy(np.arange(4))
            h = aipc.export(a)
            w.call(W.open_and_keep, "y", h)
            # the worker's release of the hand-off comes by itself, a little after its open:
            # until then the hand-off keeps h alive, and dropping h here would drop nothing
            deadline = time.monotonic() + 60
            while _handoff.held() and time.monotonic() < deadline:
                time.sleep(0.01)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                del a, h
                gc.collect()
            print("warned:", [c.category.__name__ for c in caught], "leaking" in str(caught[0].message))
            print("importer still reads:", w.call(W.read_kept, "y").tolist())
        finally:
            w.stop()
    """
)


@pytest.mark.timeout(120)
def test_strict_mode(python, tmp_path):
    script = tmp_path / "strict.py"
    script.write_text(STRICT_SCRIPT.format(tests=os.path.dirname(__file__)))
    rc, out, err = python(f"exec(open({str(script)!r}).read())", env={"ASCEND_IPC_STRICT": "1"}, timeout=100)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "close: 507000"
    assert lines[1] == "still exported: True"
    assert lines[2] == "after importer closed: True"
    assert lines[3] == "warned: ['ResourceWarning'] True"
    assert lines[4] == "importer still reads: [0, 1, 2, 3]"


# ---------------------------------------------------------------------------- a stopped exporter


STOPPED_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    import aipc_workers as W
    import ascend_ipc as aipc

    if __name__ == "__main__":
        w = W.Worker(multiprocessing.get_context("spawn"))
        try:
            stalled = w.call(W.export_new, np.arange(4), None, "stalled")
            held = w.call(W.export_new, np.arange(4) + 10, None, "held")
            b = held.open()
            os.kill(w.pid, signal.SIGSTOP)
            _, status = os.waitpid(w.pid, os.WUNTRACED)  # stopped for sure, every thread
            assert os.WIFSTOPPED(status)
            t0 = time.monotonic()
            try:
                stalled.open()
                print("import: succeeded")
            except aipc.AclError as e:
                print("import:", e.code, "no reply" in str(e))
            # ended by its timeout (10 s: long enough that the calls that must succeed do on
            # any machine): it waited at least that long
            print("bounded:", time.monotonic() - t0 >= 9.0)
            t0 = time.monotonic()
            b.close()
            # a reply would take the whole 10 s timeout; half of it is far beyond a ledger write
            print("close needs no reply:", time.monotonic() - t0 < 5.0)
            os.kill(w.pid, signal.SIGCONT)
            time.sleep(0.5)
            # strict closes in the exporter: the timed-out import left nothing behind
            print("exporter closes:", w.call(W.close_export, "stalled"), w.call(W.close_export, "held"))
        finally:
            os.kill(w.pid, signal.SIGCONT)
            w.stop()
    """
)


@pytest.mark.timeout(120)
def test_stopped_exporter_times_out_and_leaves_nothing_behind(python, tmp_path):
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_SCRIPT.format(tests=os.path.dirname(__file__)))
    env = {"ASCEND_IPC_STRICT": "1", "ASCEND_IPC_TIMEOUT_MS": "10000"}
    rc, out, err = python(f"exec(open({str(script)!r}).read())", env=env, timeout=100)
    assert rc == 0, err
    assert out.splitlines() == [
        "import: 507022 True",
        "bounded: True",
        "close needs no reply: True",
        "exporter closes: True True",
    ]


# ---------------------------------------------------------------------------- lifetimes


def test_gc_never_frees_memory_an_importer_uses(worker):
    a = aipc.from_numpy(np.arange(4, dtype=np.int32))
    h = aipc.export(a)
    worker.call(W.open_and_keep, "gc", h)
    before = live()
    del a, h
    # given back here once the worker's release of the hand-off arrives (a datagram a moment
    # after its open, served by this process's hold thread); the runtime keeps it for the importer
    assert settle(lambda: live() == before - 1), (live(), before)
    assert worker.call(W.read_kept, "gc").tolist() == [0, 1, 2, 3]
    worker.call(W.write_kept, "gc", [9, 9, 9, 9])
    assert worker.call(W.read_kept, "gc").tolist() == [9, 9, 9, 9]
    worker.call(W.drop, "gc")


def test_threads_export_open_close():
    import threading

    errors = []

    def work(seed):
        try:
            for i in range(100):
                a = aipc.from_numpy(np.full(3, seed * 1000 + i, dtype=np.int64))
                h = aipc.export(a, pids=[] if i % 2 else None)
                g = pickle.loads(pickle.dumps(h))
                if i % 2:
                    h.allow(os.getpid())
                with g.open() as b:
                    assert int(b.numpy()[0]) == seed * 1000 + i
                h.close()
                a.close()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
