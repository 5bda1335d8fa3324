"""Physical memory sharing from Python: PhysicalMemory, ShareableHandle, VirtualRange, and
torch tensors over memory mapped piecewise, between real processes."""

import gc
import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import ascend_ipc as aipc

pytestmark = pytest.mark.timeout(180)

G = aipc.granularity()


def _exporter(conn, pids_of_parent):
    """Two physical allocations, filled, shared; waits until told, then checks the receiver's writes."""
    pms = [aipc.PhysicalMemory(G), aipc.PhysicalMemory(G)]
    r = aipc.VirtualRange(2 * G)
    views = [np.from_dlpack(r.map(pm, i * G)) for i, pm in enumerate(pms)]
    views[0][:] = 11
    views[1][:] = 22
    pids = [os.getppid()] if pids_of_parent else None
    conn.send(pickle.dumps([pm.export(pids) for pm in pms]))
    conn.recv()  # the parent wrote
    conn.send((int(views[0][0]), int(views[1][-1])))
    conn.recv()  # the parent is done: exit without closing anything (the parent's maps stay valid)
    os._exit(0)


@pytest.mark.parametrize("whitelisted", [True, False])
def test_two_allocations_of_another_process_side_by_side(whitelisted):
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_exporter, args=(there, whitelisted))
    p.start()
    try:
        handles = pickle.loads(here.recv())
        assert all(isinstance(h, aipc.ShareableHandle) and h.pid == p.pid for h in handles)
        r = aipc.VirtualRange(2 * G)
        for i, h in enumerate(handles):
            pm = h.open()
            assert pm.imported and pm.size == G
            r.map(pm, i * G).close()
            pm.close()  # the mapping holds it
        whole = np.from_dlpack(r.array())
        assert whole.shape == (2 * G,)
        assert (whole[:G] == 11).all() and (whole[G:] == 22).all()  # both, in one range
        whole[0] = 1
        whole[-1] = 2
        here.send("wrote")
        assert here.recv() == (1, 2)  # the exporter sees our bytes
        here.send("done")
        p.join(30)
        assert p.exitcode == 0
        assert whole[5] == 11 and whole[G + 5] == 22  # the exporter is gone; the memory is not
        del whole
        r.close()
        gc.collect()
    finally:
        if p.is_alive():
            p.kill()
            p.join()


def _stranger(conn, value):
    h = aipc.ShareableHandle(value, G, 0, os.getppid())
    try:
        h.open()
        conn.send(None)
    except aipc.AclError as e:
        conn.send((e.code, str(e)))


def test_the_whitelist_decides_not_the_number():
    pm = aipc.PhysicalMemory(G)
    h = pm.export(pids=[1])  # some other process
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_stranger, args=(there, h.value))
    p.start()
    code, text = here.recv()
    p.join(30)
    assert code == 207006 and "aclrtMemSetPidToShareableHandle" in text
    assert pm.export(pids=[p.pid]) == h  # one number per allocation; more pids on its whitelist
    with pytest.raises(ValueError, match="whitelist"):
        pm.export(pids=None)
    pm.close()


def test_rules_and_errors():
    pm = aipc.PhysicalMemory(1)
    assert pm.size == G
    with pytest.raises(ValueError):
        aipc.PhysicalMemory(0)
    r = aipc.VirtualRange(G + 1)
    assert r.size == 2 * G and r.address % G == 0
    with pytest.raises(ValueError, match="multiple"):
        r.map(pm, 4096)
    with pytest.raises(ValueError, match="inside"):
        r.map(pm, 2 * G)
    with pytest.raises(TypeError):
        r.map(object(), 0)
    a = r.map(pm, 0)
    with pytest.raises(ValueError, match="mapped already"):
        r.map(pm, 0)
    with pytest.raises(ValueError, match="not mapped"):
        r.array()  # the second granule is not mapped
    assert r.array(0, G).nbytes == G
    # the runtime's own checks arrive as AclError with CANN's code
    with pytest.raises(aipc.AclError) as e:
        aipc._C._vmm_map(r.address + G, G // 2, pm.handle)
    assert e.value.code == 107000
    with pytest.raises(aipc.AclError) as e:
        aipc.ShareableHandle(0, G, 0, 1).open()
    assert e.value.code == 100000
    # a mapping made without access is opened by set_access
    pm2 = aipc.PhysicalMemory(G)
    assert r.map(pm2, G, access=False) is None
    blocked = aipc.wrap(r.address + G, G)
    with pytest.raises(aipc.AclError, match="aclrtMemSetAccess"):
        aipc.from_numpy(np.zeros(G, np.uint8)).copy_from(blocked)
    blocked.close()
    b = r.set_access(G)
    np.from_dlpack(b)[:] = 3
    assert np.from_dlpack(r.array())[G] == 3
    imported_like = aipc.PhysicalMemory._from_handle(pm.handle, G, 0, True)
    with pytest.raises(ValueError, match="imported"):
        imported_like.export()
    imported_like._handle = None  # not ours to free
    for x in (a, b):
        x.close()
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.array()
    pm.close()
    pm.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        pm.handle
    pm2.close()
    gc.collect()


def test_arrays_keep_their_mapping():
    r = aipc.VirtualRange(G)
    pm = aipc.PhysicalMemory(G)
    a = r.map(pm, 0)
    np.from_dlpack(a)[:] = 9
    pm.close()
    r.close()  # the array still holds the mapping, the mapping the memory and the reservation
    gc.collect()
    assert (np.from_dlpack(a) == 9).all()
    base, size = aipc._C._vmm_address_range(np.from_dlpack(a).ctypes.data)
    assert size == G
    a.close()
    gc.collect()
    with pytest.raises(aipc.AclError):
        aipc._C._vmm_address_range(base)  # unmapped with the last array


def _torch_receiver(conn):
    import ascend_ipc.torch as at

    h = pickle.loads(conn.recv())
    t = at.open_torch(h)
    conn.send((tuple(t.shape), float(t.sum()), t[0, 1].item()))
    t.mul_(2)
    del t
    conn.recv()
    os._exit(0)


def test_torch_tensor_over_mapped_memory_travels_as_mapped_handle():
    torch = pytest.importorskip("torch")
    import ascend_ipc.torch as at

    r = aipc.VirtualRange(2 * G)
    for i in range(2):
        pm = aipc.PhysicalMemory(G)
        r.map(pm, i * G).close()
        pm.close()
    whole = torch.from_dlpack(r.array()).view(torch.float32)  # spans both allocations
    whole.fill_(1.0)
    n = (2 * G) // 4
    t = whole[n // 2 - 8:n // 2 + 8].view(4, 4)  # straddles the boundary of the two
    t[0, 1] = 5.0
    h = at.share(t)
    assert isinstance(h, aipc.MappedHandle) and len(h.chunks) == 2
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_torch_receiver, args=(there,))
    p.start()
    here.send(pickle.dumps(h))
    shape, total, x = here.recv()
    assert shape == (4, 4) and total == 20.0 and x == 5.0
    here.send("done")
    p.join(30)
    assert p.exitcode == 0
    assert t[0, 1].item() == 10.0 and float(t.sum()) == 40.0  # the receiver's writes
    assert at.share(t).chunks == h.chunks  # one shareable handle per physical allocation
    h.close()
    del t, whole
    r.close()
    gc.collect()


def _child_drops_inherited(pm, r, arr, conn):
    try:
        pm.close()  # not the child's: nothing happens
        del pm, r, arr
        gc.collect()
        conn.send("ok")
    except BaseException as e:  # pragma: no cover - reported to the parent
        conn.send(repr(e))
    os._exit(0)


def test_inherited_objects_do_nothing_in_a_forked_child():
    pm = aipc.PhysicalMemory(G)
    r = aipc.VirtualRange(G)
    arr = r.map(pm, 0)
    np.from_dlpack(arr)[:] = 5
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_child_drops_inherited, args=(pm, r, arr, there))
    p.start()
    assert here.recv() == "ok"
    p.join(30)
    assert (np.from_dlpack(arr) == 5).all()  # the parent's memory, mapping and handle are intact
    h = pm.export()
    assert h.value != 0
    arr.close()
    r.close()
    pm.close()
    gc.collect()


def test_export_and_share_of_one_allocation_agree():
    torch = pytest.importorskip("torch")
    import ascend_ipc.torch as at

    pm = aipc.PhysicalMemory(G)
    h = pm.export(pids=[os.getpid()])
    r = aipc.VirtualRange(G)
    t = torch.from_dlpack(r.map(pm, 0))
    mh = at.share(t[:16], pids=[1])  # the same allocation: its one number, one more pid on its whitelist
    assert [c.value for c in mh.chunks] == [h.value]
    with pytest.raises(ValueError, match="whitelist"):
        at.share(t[:16])  # cannot open a whitelisted allocation to everyone
    mh.close()
    del t
    r.close()
    pm.close()
    gc.collect()
