"""Scenarios of test_cann_provider.py, run in a subprocess whose ascend_ipc uses the cann provider.

Each ``scenario_*`` function runs in that subprocess (``python -c "import cann_workers;
cann_workers.main('name')"``), spawns the helper processes it needs (they inherit the
environment, so they load the same library through the same provider), and prints one JSON
object with what it saw. The ``child_*`` functions run in those helpers; they live here, in an
importable module, so spawn children find them.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import traceback

import numpy as np

import ascend_ipc as aipc

TIMEOUT = 60


def _error(e: aipc.AclError) -> dict:
    return {"code": e.code, "name": e.name, "call": e.call, "message": e.message}


# --------------------------------------------------------------------------- cross-process round trip


def child_roundtrip(handle, conn):
    try:
        with handle.open() as b:
            seen = b.numpy().tolist()
            dev = b.__dlpack_device__()
            b.copy_from(b.numpy() * 2)  # host -> NPU copy into the shared bytes
            conn.send({"seen": seen, "dlpack_device": list(dev)})
            conn.recv()  # the exporter wrote
            conn.send({"after_exporter_write": b.numpy().tolist()})
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_roundtrip(device: str = "1") -> dict:
    ctx = multiprocessing.get_context("spawn")
    x = aipc.from_numpy(np.arange(16, dtype=np.int32), device=int(device))
    h = aipc.export(x)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_roundtrip, args=(h, child))
    p.start()
    first = parent.recv()
    seen_by_exporter = x.numpy().tolist()
    x.copy_from(np.full(16, 7, dtype=np.int32))
    parent.send("wrote")
    second = parent.recv()
    p.join(TIMEOUT)
    h.close()
    x.close()
    return {
        "provider": aipc.provider(),
        "child": first,
        "exporter_sees": seen_by_exporter,
        "child_after": second,
        "exitcode": p.exitcode,
    }


# --------------------------------------------------------------------------- stream order through the library


def child_ordered(handle, event, conn):
    try:
        with handle.open() as b:  # waits for the exporter's queued copies
            first = int(b.numpy()[-1])
        s = aipc.Stream()
        s.wait(event)  # the event opened from its pickled handle
        s.synchronize()
        event.record(s)  # and recorded from this side
        event.synchronize()
        conn.send({"first": first, "query": event.query()})
        s.close()
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_ordered() -> dict:
    ctx = multiprocessing.get_context("spawn")
    n = 32 << 20
    s = aipc.Stream()
    a = aipc.zeros(n, dtype="uint8")
    src = aipc.from_numpy(np.full(n, 3, dtype=np.uint8))
    for _ in range(4):
        a.copy_from(src, stream=s)
    h = aipc.export(a, stream=s)
    e = aipc.Event(ipc=True)
    e.record(s)
    t0, t1 = aipc.Event(timing=True), aipc.Event(timing=True)
    t0.record(s)
    a.copy_from(src, stream=s)
    t1.record(s)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_ordered, args=(h, e, child))
    p.start()
    got = parent.recv()
    p.join(TIMEOUT)
    e.synchronize()
    t1.synchronize()
    return {"provider": aipc.provider(), "child": got, "elapsed_ok": t0.elapsed(t1) >= 0, "exitcode": p.exitcode}


# --------------------------------------------------------------------------- two opens of one key


def child_two_opens(handle, conn):
    """Two imports of one key, the younger closed first: the older must keep working."""
    try:
        older, younger = handle.open(), handle.open()
        out = {"distinct": older.data_ptr != younger.data_ptr}
        younger.copy_from(np.arange(8, dtype=np.int32) + 10)  # seen through the other
        out["older_sees"] = older.numpy().tolist()
        younger.close()
        older.copy_from(older.numpy() * 2)  # still mapped: the close waited for it
        out["after_younger_closed"] = older.numpy().tolist()
        older.close()
        out["live"] = len(aipc._C._live_allocations())
        conn.send(out)
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_two_opens() -> dict:
    ctx = multiprocessing.get_context("spawn")
    x = aipc.from_numpy(np.zeros(8, dtype=np.int32))
    h = aipc.export(x)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_two_opens, args=(h, child))
    p.start()
    got = parent.recv()
    p.join(TIMEOUT)
    got["exporter_sees"] = x.numpy().tolist()
    got["exitcode"] = p.exitcode
    h.close()
    x.close()
    return got


# --------------------------------------------------------------------------- whitelist


def child_whitelist(conn):
    try:
        conn.send(aipc.bare_tgid())
        handle = conn.recv()
        try:
            handle.open()
            conn.send({"denied": None})
        except aipc.AclError as e:
            conn.send({"denied": _error(e)})
        conn.recv()  # allowed now
        with handle.open() as b:
            conn.send({"opened": b.numpy().tolist()})
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_whitelist() -> dict:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_whitelist, args=(child,))
    p.start()
    child_tgid = parent.recv()
    x = aipc.from_numpy(np.arange(4, dtype=np.float32))
    h = aipc.export(x, pids=[])  # whitelist enforced and empty
    parent.send(h)
    denied = parent.recv()
    h.allow(child_tgid)
    parent.send("allowed")
    opened = parent.recv()
    p.join(TIMEOUT)
    h.close()
    return {"denied": denied.get("denied"), "opened": opened, "error": denied.get("error"), "exitcode": p.exitcode}


# --------------------------------------------------------------------------- borrowed memory (wrap)


def child_wrapped(handle, conn):
    try:
        with handle.open() as b:
            conn.send({"seen": b.numpy().tolist(), "offset": handle.offset})
            b.copy_from(np.arange(4, dtype=np.float32) + 100)
            conn.send("wrote")
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_wrap(lib_path: str) -> dict:
    """Device memory from another user of the same library (ctypes aclrtMalloc), exported via wrap()."""
    import ctypes

    lib = ctypes.CDLL(lib_path)  # the same path: the same, already loaded library
    ptr = ctypes.c_void_p()
    assert lib.aclrtMalloc(ctypes.byref(ptr), 4 * 4096, 0) == 0
    out: dict = {}
    try:
        region = aipc.wrap(ptr.value, 4 * 4096)
        out["region"] = [region.nbytes, region.allocation_size, region.is_import, "borrowed" in repr(region)]
        view = aipc._C._subview(region, 8192, (4,), (4,), "float32")
        view.copy_from([1.0, 2.0, 3.0, 4.0])
        owner = object()
        h = aipc.export(view, keepalive=owner)
        out["same_key_twice"] = aipc.export(aipc.wrap(ptr.value, 4 * 4096)).key == h.key
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=child_wrapped, args=(h, child))
        p.start()
        out["child"] = parent.recv()
        out["child_wrote"] = parent.recv()
        p.join(TIMEOUT)
        out["exporter_sees"] = view.numpy().tolist()
        for bad in ((ptr.value + 8, 4096), (ptr.value, 100)):
            try:
                aipc.wrap(*bad)
            except ValueError as e:
                out.setdefault("misaligned", []).append(str(e))
        own = aipc.empty(1024, "uint8")
        try:
            aipc.wrap(own.data_ptr, 4096)
        except ValueError as e:
            out["overlap"] = str(e)
        h.close()
        del view, region
        import gc

        gc.collect()
        out["live_after_close"] = [k for (_, _, _, k) in aipc._C._live_allocations()]
    finally:
        out["free_rc"] = lib.aclrtFree(ptr)
    return out


# --------------------------------------------------------------------------- share() of a torch_npu tensor


def child_open_view(handle, conn):
    try:
        with handle.open() as b:
            conn.send({"values": b.numpy().tolist(), "shape": list(b.shape)})
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_npu_share(lib_path: str) -> dict:
    """ascend_ipc.torch's path for npu tensors of torch_npu's caching allocator, without torch_npu.

    Stand-ins: memory from aclrtMalloc of the loaded library plays a 2 MiB allocator
    segment; an object with the attributes share() reads plays the npu tensor (a 4x4 float32
    view 16 elements into a 64-element storage that starts mid-page in the segment); a module
    plays torch_npu and torch.npu.memory_snapshot() describes the segment.
    """
    import ctypes
    import gc
    import types
    import weakref

    import torch

    import ascend_ipc.torch as atorch

    lib = ctypes.CDLL(lib_path)
    seg = ctypes.c_void_p()
    assert lib.aclrtMalloc(ctypes.byref(seg), 2 << 20, 0) == 0
    base = seg.value
    storage_at = base + 8704  # mid-page, as the caching allocator's 512-byte blocks are
    data = np.arange(64, dtype=np.float32)
    assert lib.aclrtMemcpy(ctypes.c_void_p(storage_at), ctypes.c_size_t(data.nbytes),
                           ctypes.c_void_p(data.ctypes.data), ctypes.c_size_t(data.nbytes), 1) == 0

    class Storage:
        def data_ptr(self):
            return storage_at

        def nbytes(self):
            return data.nbytes

    class NpuTensor:
        device = types.SimpleNamespace(type="npu", index=0)
        dtype = torch.float32
        shape = (4, 4)

        def __init__(self, storage):
            self._storage = storage

        def untyped_storage(self):
            return self._storage

        def data_ptr(self):
            return storage_at + 16 * 4

        def stride(self):
            return (4, 1)

        def element_size(self):
            return 4

    segments = [{"device": 0, "address": base, "total_size": 2 << 20, "is_expandable": False}]
    sys.modules["torch_npu"] = types.ModuleType("torch_npu")
    torch.npu = types.SimpleNamespace(memory_snapshot=lambda: segments, current_device=lambda: 0)

    out: dict = {}
    ctx = multiprocessing.get_context("spawn")

    def share_and_open(storage):
        h = atorch._share_npu(NpuTensor(storage), None, None)
        parent, child = ctx.Pipe()
        p = ctx.Process(target=child_open_view, args=(h, child))
        p.start()
        seen = parent.recv()
        p.join(TIMEOUT)
        return h, {"offset": h.offset, "size": h.size, "shape": list(h.shape), "strides": list(h.strides),
                   "torch_dtype": h.torch_dtype, "child": seen}

    storage = Storage()
    alive = weakref.ref(storage)
    h, out["segment"] = share_and_open(storage)
    del storage
    gc.collect()
    out["storage_kept_by_handle"] = alive() is not None
    h.close()
    gc.collect()
    out["storage_released_on_close"] = alive() is None

    segments.clear()  # no allocator information: the pages the storage covers
    h, out["pages"] = share_and_open(Storage())
    h.close()

    # An expandable segment: two physical allocations mapped side by side in one reserved
    # range, the storage straddling them; share() sends it through shareable handles.
    class Prop(ctypes.Structure):
        _fields_ = [("handleType", ctypes.c_int), ("allocationType", ctypes.c_int), ("memAttr", ctypes.c_int),
                    ("id", ctypes.c_uint32), ("type", ctypes.c_int), ("reserve", ctypes.c_uint64)]

    g = 2 << 20
    vbase = ctypes.c_void_p()
    assert lib.aclrtReserveMemAddress(ctypes.byref(vbase), ctypes.c_size_t(2 * g), ctypes.c_size_t(0), None,
                                      ctypes.c_uint64(0)) == 0
    prop = Prop(0, 0, 5, 0, 1, 0)  # NONE, PINNED, ACL_HBM_MEM_NORMAL, device 0
    chunks = []
    for i in range(2):
        h = ctypes.c_void_p()
        assert lib.aclrtMallocPhysical(ctypes.byref(h), ctypes.c_size_t(g), ctypes.byref(prop), ctypes.c_uint64(0)) == 0
        assert lib.aclrtMapMem(ctypes.c_void_p(vbase.value + i * g), ctypes.c_size_t(g), ctypes.c_size_t(0), h,
                               ctypes.c_uint64(0)) == 0
        chunks.append(h)
    # (Storage and NpuTensor read storage_at when called: from here on they describe this one.)
    storage_at = vbase.value + g - 96  # the view (16 elements in) starts 32 bytes before the boundary
    assert lib.aclrtMemcpy(ctypes.c_void_p(storage_at), ctypes.c_size_t(data.nbytes),
                           ctypes.c_void_p(data.ctypes.data), ctypes.c_size_t(data.nbytes), 1) == 0
    segments.append({"device": 0, "address": vbase.value, "total_size": 2 * g, "is_expandable": True})
    h = atorch._share_npu(NpuTensor(Storage()), None, None)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_open_view, args=(h, child))
    p.start()
    out["expandable"] = {"chunks": len(h.chunks), "offset": h.offset, "child": parent.recv()}
    p.join(TIMEOUT)
    h.close()
    for i, ch in enumerate(chunks):
        assert lib.aclrtUnmapMem(ctypes.c_void_p(vbase.value + i * g)) == 0
        assert lib.aclrtFreePhysical(ch) == 0
    assert lib.aclrtReleaseMemAddress(vbase) == 0
    out["free_rc"] = lib.aclrtFree(seg)
    return out


# --------------------------------------------------------------------------- older CANN: missing symbols


def scenario_degraded() -> dict:
    out: dict = {"provider": aipc.provider(), "unsupported": aipc.provider_info()["unsupported"]}
    x = aipc.from_numpy(np.arange(8, dtype=np.int64))
    try:
        aipc.export(x, link="hccs")
        out["set_attr"] = None
    except aipc.AclError as e:
        out["set_attr"] = _error(e)
    h = aipc.export(x, pids=[])
    try:
        h.allow(aipc.bare_tgid(), sdid=0)
        out["inter_server"] = None
    except aipc.AclError as e:
        out["inter_server"] = _error(e)
    h.allow(aipc.bare_tgid())  # aclrtIpcMemSetImportPid is there
    with h.open() as b:  # importing one's own key works
        out["self_import"] = b.numpy().tolist()
    h.close()
    h2 = aipc.export(x)
    with h2.open() as b:
        out["plain_export"] = b.numpy().tolist()
    h2.close()
    try:
        aipc.Event(ipc=True)
        out["ipc_event"] = None
    except aipc.AclError as e:
        out["ipc_event"] = _error(e)
    s = aipc.Stream()  # plain events and streams are there
    ev = aipc.Event()
    x.copy_from(np.arange(8, dtype=np.int64) * 3, stream=s)
    ev.record(s)
    ev.synchronize()
    out["plain_event"] = x.numpy().tolist()
    s.close()
    return out


# --------------------------------------------------------------------------- real NPUs (test_hardware.py)


def child_open_elsewhere(handle, device, conn):
    try:
        with handle.open(device) as b:
            try:
                conn.send({"values": b.numpy().tolist()})
            except aipc.AclError as e:
                conn.send({"refused": _error(e)})
    except aipc.AclError as e:
        conn.send({"open_refused": _error(e)})
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_cross_device(exporter: str, importer: str) -> dict:
    """Export on one device, import on another (ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS)."""
    ctx = multiprocessing.get_context("spawn")
    x = aipc.from_numpy(np.arange(8, dtype=np.float32), device=int(exporter))
    h = aipc.export(x)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_open_elsewhere, args=(h, int(importer), child))
    p.start()
    got = parent.recv()
    p.join(TIMEOUT)
    h.close()
    got["exitcode"] = p.exitcode
    return got


def child_torch(handle, conn):
    try:
        import torch

        import ascend_ipc.torch  # noqa: F401  (open_torch needs it; it imports torch_npu)

        t = handle.open_torch()
        conn.send({"device": str(t.device), "dtype": str(t.dtype), "values": t.cpu().tolist()})
        t.add_(1)
        torch.npu.synchronize()
        conn.send("written")
        conn.recv()
        del t  # the importer closes first, as CANN requires
        import gc

        gc.collect()
        conn.send("closed")
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def scenario_torch_npu(kind: str) -> dict:
    """share() / open_torch() of npu tensors: ascend_ipc memory, or torch_npu's caching allocator."""
    import torch
    import torch_npu  # noqa: F401

    import ascend_ipc.torch as atorch

    torch.npu.set_device(0)
    if kind == "ascend":
        t = atorch.empty((16,), dtype=torch.float32, device=0)
        t.copy_(torch.arange(16, dtype=torch.float32).to("npu:0"))
    elif kind == "caching":
        base = torch.arange(4096, dtype=torch.float32, device="npu:0")
        t = base[100:116]  # a view inside a block inside a segment of torch_npu's allocator
    elif kind == "bfloat16":
        t = torch.arange(16, dtype=torch.float32, device="npu:0").to(torch.bfloat16)
    else:
        raise ValueError(kind)
    torch.npu.synchronize()
    expected = t.float().cpu().tolist()
    h = atorch.share(t)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_torch, args=(h, child))
    p.start()
    first = parent.recv()
    written = parent.recv()
    torch.npu.synchronize()
    after = t.float().cpu().tolist()
    parent.send("close")
    closed = parent.recv()
    p.join(TIMEOUT)
    h.close()
    return {"expected": expected, "child": first, "written": written, "exporter_after": after, "closed": closed,
            "offset": h.offset, "size": h.size, "exitcode": p.exitcode}


def main(name: str, *args: str) -> None:
    result = globals()[f"scenario_{name}"](*args)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
