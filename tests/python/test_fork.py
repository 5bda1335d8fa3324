"""Objects that cross fork(): the child does not own its parent's device memory."""

import gc
import multiprocessing
import os

import numpy as np
import pytest

import aipc_workers as W
import ascend_ipc as aipc
from ascend_ipc import _C

pytestmark = pytest.mark.timeout(60)


def test_forked_child_and_parent():
    ctx = multiprocessing.get_context("fork")
    a = aipc.from_numpy(np.arange(6, dtype=np.int64))
    view = a[2:]
    h = aipc.export(a)
    q = ctx.Queue()
    p = ctx.Process(target=W.fork_child_checks, args=(a, h, view, q), daemon=True)
    p.start()
    try:
        status, out = q.get(timeout=40)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    assert status == "ok", out
    assert p.exitcode == 0
    for op in ("numpy", "dlpack", "export", "slice", "view_numpy", "data_ptr"):
        assert out[op] is True, (op, out[op])  # ValueError that mentions fork
    assert out["repr"] and out["shape"] == (6,)
    assert out["is_exporter"] is False
    assert out["seen"] == list(range(6))
    assert out["handle_closed"] is True
    assert out["fresh"] == [0, 1, 2]
    # the parent still owns its memory and its export
    np.testing.assert_array_equal(a.numpy(), np.arange(6) + 10)
    np.testing.assert_array_equal(view.numpy(), np.arange(2, 6) + 10)
    assert h.is_exporter and not h.closed
    with aipc.IpcHandle(h.key, h.size, dtype="int64", shape=(6,)).open() as b:
        assert b.numpy()[0] == 10


def test_raw_os_fork_dealloc_in_child():
    a = aipc.from_numpy(np.arange(4, dtype=np.int32))
    h = aipc.export(a)
    before = len(_C._live_allocations())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop everything inherited, then report
        status = 1
        try:
            del a, h
            gc.collect()
            os.write(w, str(len(_C._live_allocations())).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    try:
        data = os.read(r, 100)
    finally:
        os.close(r)
        _, code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(code) == 0
    assert data == b"0"  # the child sees none of the parent's memory as its own
    assert len(_C._live_allocations()) == before
    np.testing.assert_array_equal(a.numpy(), np.arange(4))
    with h.open() as b:
        assert b.numpy().tolist() == [0, 1, 2, 3]


def test_child_imports_a_key_its_parent_holds(workers):
    # The child's runtime starts with no imports, and so does the extension's record of
    # their order: the parent's import of the key must not hold up the child's close.
    exporter = workers.get("spawn")
    h = exporter.call(W.export_new, np.arange(4, dtype=np.int32), None, "fork-parent-holds")
    b = h.open()  # the parent's import, open across the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            maps0 = W.device_mappings()
            c = h.open()
            np.from_dlpack(c)[0] = 40
            opened = W.device_mappings() - maps0
            c.close()
            os.write(w, f"{opened} {W.device_mappings() - maps0}".encode())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    try:
        data = os.read(r, 100)
    finally:
        os.close(r)
        _, code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(code) == 0
    assert data == b"1 0"  # the child's import was mapped, then released by its close
    assert b.numpy().tolist() == [40, 1, 2, 3]  # the parent's import is untouched
    b.close()
    exporter.call(W.drop, "fork-parent-holds")
