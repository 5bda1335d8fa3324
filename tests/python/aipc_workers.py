"""Child-process side of the Python tests.

``Worker`` runs functions of this module in a long-lived child process (any start
method) and returns their results or re-raises their exceptions. The functions live
here, in an importable module without pytest, so spawn and forkserver children can
find them and start quickly. Nothing here imports torch unless a torch task runs.
"""

from __future__ import annotations

import gc
import os
import pickle
import queue
import time
import traceback
from multiprocessing.reduction import ForkingPickler

import numpy as np

import ascend_ipc as aipc

# ---------------------------------------------------------------------------- the worker


class WorkerError(RuntimeError):
    """An exception of the child that could not be sent as itself."""


def _serve(requests, responses):
    while True:
        item = requests.get()
        if item is None:
            return
        fn, args, kwargs = item
        try:
            value = ("ok", fn(*args, **kwargs))
        except BaseException as exc:  # report everything, keep serving
            text = traceback.format_exc()
            try:
                ForkingPickler.dumps(exc)
                value = ("err", (exc, text))
            except Exception:
                value = ("err", (WorkerError(text), text))
        try:
            ForkingPickler.dumps(value)
        except Exception:
            value = ("err", (WorkerError("result cannot be pickled:\n" + traceback.format_exc()), ""))
        responses.put(value)
        del value, item, fn, args, kwargs


class Worker:
    def __init__(self, ctx, name: str = "aipc-test-worker"):
        self.ctx = ctx
        self._requests = ctx.Queue()
        self._responses = ctx.Queue()
        self.process = ctx.Process(target=_serve, args=(self._requests, self._responses), name=name, daemon=True)
        self.process.start()
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def call(self, fn, *args, timeout: float = 120, **kwargs):
        self._requests.put((fn, args, kwargs))
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, value = self._responses.get(timeout=0.2)
                break
            except queue.Empty:
                if not self.process.is_alive():
                    raise WorkerError(f"worker {self.pid} died (exit code {self.process.exitcode})") from None
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"worker {self.pid} did not answer {fn.__name__} within {timeout} s") from None
        if status == "ok":
            return value
        exc, text = value
        if text:
            exc.add_note("in the worker process:\n" + text) if hasattr(exc, "add_note") else None
        raise exc

    def stop(self, timeout: float = 10):
        if self.process.is_alive():
            try:
                self._requests.put(None)
            except Exception:
                pass
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        for q in (self._requests, self._responses):
            q.close()
            q.cancel_join_thread()


# ---------------------------------------------------------------------------- state kept in the child

_kept: dict = {}


def keep(name, obj):
    _kept[name] = obj


def drop(name=None):
    if name is None:
        _kept.clear()
    else:
        _kept.pop(name, None)
    gc.collect()


def held_count():
    return len(_kept)


# ---------------------------------------------------------------------------- plain tasks


def info():
    return {"pid": os.getpid(), "tgid": aipc.bare_tgid(), "provider": aipc.provider(), "device": aipc.current_device()}


def live_allocations():
    return aipc._C._live_allocations()


def open_read(handle, device=None):
    """Opens, copies the view to the host, closes."""
    with handle.open(device) as b:
        return b.numpy()


def open_info(handle):
    with handle.open() as b:
        return {"shape": b.shape, "strides": b.strides, "dtype": str(b.dtype), "nbytes": b.nbytes,
                "ptr": b.data_ptr, "device": b.device, "is_import": b.is_import}


def open_add(handle, amount):
    """Opens, adds amount in place through numpy.from_dlpack, returns what it saw first."""
    with handle.open() as b:
        x = np.from_dlpack(b)
        before = x.copy()
        x += np.asarray(amount).astype(x.dtype)
        del x
    return before


def open_set_through_dlpack(handle, values):
    with handle.open() as b:
        x = np.from_dlpack(b)
        before = x.copy()
        x[...] = values
        del x
    return before


def open_error(handle, device=None):
    """The AclError of opening handle, as (code, name, message), or None if it opened."""
    try:
        b = handle.open(device)
    except aipc.AclError as e:
        return (e.code, e.name, e.message)
    b.close()
    return None


def open_and_keep(name, handle):
    b = handle.open()
    keep(name, b)
    return b.data_ptr


def read_kept(name):
    return _kept[name].numpy()


def write_kept(name, values):
    x = np.from_dlpack(_kept[name])
    x[...] = values
    return True


def export_new(values, pids=None, name="exported"):
    """Exports a new array holding values; keeps it alive here; returns the handle."""
    a = aipc.from_numpy(np.asarray(values))
    keep(name, a)
    return aipc.export(a, pids=pids)


def close_export(name):
    """Closes the export of a kept array (raises AclError if importers hold it, in strict mode)."""
    aipc.export(_kept[name]).close()
    return True


def open_many(handles):
    """Opens each handle, checks element 0 equals its index, writes -index, closes."""
    bad = []
    for i, h in enumerate(handles):
        with h.open() as b:
            x = np.from_dlpack(b)
            if int(x[0]) != i:
                bad.append(i)
            x[0] = -i
            del x
    return bad


def recv_many(q, n):
    """Takes n handles from a multiprocessing queue and processes them like open_many."""
    handles = [q.get(timeout=60) for _ in range(n)]
    return open_many(handles)


def open_all_dtypes(handles):
    """{dtype: values} for a dict of handles; adds 1 (True for bool) in place."""
    out = {}
    for name, h in handles.items():
        with h.open() as b:
            x = np.from_dlpack(b)
            out[name] = x.copy()
            if x.dtype == np.bool_:
                x[...] = ~x
            else:
                x += 1
            del x
    return out


def unpickle_only(blob):
    """Unpickles a handle without opening it; reports what it sees."""
    h = pickle.loads(blob)
    return {"key": h.key, "closed": h.closed, "is_exporter": h.is_exporter, "live": len(aipc._C._live_allocations())}


def bytes_of(handle):
    with handle.open() as b:
        return b.numpy().tobytes()


def write_last_byte(handle, value):
    with handle.open() as b:
        x = np.from_dlpack(b)
        x[-1] = value
        del x
        return b.nbytes


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def sleep_then(value, seconds):
    time.sleep(seconds)
    return value


# ---------------------------------------------------------------------------- several opens of one key


def device_mappings():
    """How many mappings of emulated device memory this process has: its own allocations
    and every import (each import is a mapping of its own, until it is released)."""
    with open("/proc/self/maps") as f:
        return sum("memfd:ascend_ipc_dev" in line for line in f)


def two_opens(handle, order):
    """Opens handle twice, checks both views share the bytes, then closes them in `order`
    ("younger first" or "older first"), using the other one after each close.

    Returns (pointers, mappings after each step relative to the start, live allocations
    relative to the start, what the last survivor read)."""
    gc.collect()
    maps0, live0 = device_mappings(), len(aipc._C._live_allocations())
    older = handle.open()
    younger = handle.open()
    ptrs = (older.data_ptr, younger.data_ptr)
    maps = {"open": device_mappings() - maps0}
    x_old, x_young = np.from_dlpack(older), np.from_dlpack(younger)
    x_young[0] = 11  # a write through one is seen through the other
    assert int(x_old[0]) == 11 and int(older.numpy()[0]) == 11
    x_old[1] = 22
    assert int(x_young[1]) == 22
    del x_old, x_young
    first, survivor = (younger, older) if order == "younger first" else (older, younger)
    first.close()
    maps["first closed"] = device_mappings() - maps0
    x = np.from_dlpack(survivor)  # still mapped, still the shared bytes
    x[2] = 33
    del x
    seen = survivor.numpy()
    survivor.close()
    gc.collect()
    maps["both closed"] = device_mappings() - maps0
    return ptrs, maps, len(aipc._C._live_allocations()) - live0, seen


def dlpack_outlives_close(handle):
    """A numpy array from DLPack keeps an import alive after its DeviceArray closed, while a
    later open of the same key is opened and closed; returns what the array reads at the end
    and the mapping counts."""
    gc.collect()
    maps0 = device_mappings()
    first = handle.open()
    x = np.from_dlpack(first)
    first.close()  # x still holds the import
    for _ in range(3):
        later = handle.open()
        np.from_dlpack(later)[0] += 1
        later.close()
    x[1] = -5
    seen = x.copy()
    held = device_mappings() - maps0
    del x
    gc.collect()
    return seen, held, device_mappings() - maps0


def threads_open_close(handle, threads=4, rounds=200, seed=0):
    """Threads that open one key, hold the import a random while, check its bytes and close
    it, in random order; returns the errors and the mapping/live counts relative to the start."""
    import random
    import threading

    gc.collect()
    maps0, live0 = device_mappings(), len(aipc._C._live_allocations())
    expected = bytes_of(handle)
    errors = []

    def work(i):
        rng = random.Random(seed * 100 + i)
        held = []
        try:
            for _ in range(rounds):
                if held and (len(held) > 3 or rng.random() < 0.5):
                    b = held.pop(rng.randrange(len(held)))  # any one, not the oldest
                    if np.from_dlpack(b).tobytes() != expected:
                        errors.append("wrong bytes")
                    b.close()
                else:
                    held.append(handle.open())
            for b in held:
                b.close()
        except BaseException as e:  # reported to the caller
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    gc.collect()
    return errors, device_mappings() - maps0, len(aipc._C._live_allocations()) - live0


# ---------------------------------------------------------------------------- torch tasks


def torch_setup():
    import torch

    torch.set_num_threads(1)
    import ascend_ipc.torch  # noqa: F401

    return True


def torch_open_fill(handle, value):
    """Opens as a tensor, remembers what it saw, fills with value, drops the import."""
    import torch

    torch.set_num_threads(1)
    t = handle.open_torch()
    seen = t.clone()
    t.fill_(value)
    info = {"dtype": str(t.dtype), "shape": tuple(t.shape), "stride": t.stride()}
    del t
    gc.collect()
    return seen, info


def torch_open_add_all(handles):
    """{name: (seen, dtype)} for a dict of handles; adds 1 in place (logical not for bool)."""
    import torch

    torch.set_num_threads(1)
    out = {}
    for name, h in handles.items():
        t = h.open_torch()
        out[name] = (t.clone(), str(t.dtype))
        if t.dtype == torch.bool:
            t.logical_not_()
        elif t.dtype in (torch.uint16, torch.uint32, torch.uint64):  # torch has no add for these
            t.copy_(torch.from_numpy(t.numpy() + np.array(1, dtype=t.numpy().dtype)))
        else:
            t.add_(1)
        del t
    gc.collect()
    return out


def torch_open_then_close_later_opens(handle):
    """open_torch(), then more opens of the same key (arrays, a tensor, through a copy of
    the handle) that are closed or dropped first; the first tensor must still work."""
    import torch

    torch.set_num_threads(1)
    gc.collect()
    maps0 = device_mappings()
    t = handle.open_torch()
    copy = pickle.loads(pickle.dumps(handle))
    later = [handle.open(), copy.open(), handle.open()]
    u = copy.open_torch()
    later[1].close()
    later[2].close()
    del u
    gc.collect()
    later[0].close()
    copy.close()
    del copy, later
    gc.collect()
    held = device_mappings() - maps0  # the tensor's import, and those younger that waited for it
    t += 1  # still the exporter's bytes
    seen = t.clone()
    del t
    gc.collect()
    return seen, held, device_mappings() - maps0


def torch_recv_tensor(tensor, value):
    """Receives a tensor through the request queue (install() reduction), writes value in place."""
    import ascend_ipc.torch as atorch

    import torch

    seen = tensor.detach().clone()
    shared = atorch.is_shared(tensor)
    with torch.no_grad():
        tensor.fill_(value)
    return seen, shared, type(tensor).__name__, tensor.requires_grad, str(tensor.dtype)


def torch_mp_receiver(q_in, q_out):
    """Target of a torch.multiprocessing process: receives tensors, writes, reports."""
    import torch

    torch.set_num_threads(1)
    import ascend_ipc.torch as atorch

    try:
        while True:
            item = q_in.get(timeout=120)
            if item is None:
                break
            tag, tensor = item
            seen = tensor.clone()
            shared = atorch.is_shared(tensor)
            tensor.add_(1)
            q_out.put((tag, seen, shared))
            del tensor, item
    except BaseException:
        q_out.put(("error", traceback.format_exc(), None))


def recv_many_to(q_in, q_out, n):
    """Process target: n handles arrive one by one on q_in; the result goes to q_out."""
    try:
        q_out.put(("ok", recv_many(q_in, n)))
    except BaseException:
        q_out.put(("err", traceback.format_exc()))


def try_allow(handle, pid):
    """allow() from a process that is not the exporter: the runtime's answer."""
    try:
        handle.allow(pid)
    except aipc.AclError as e:
        return (e.code, e.name)
    return None


def close_twice(handle):
    with handle.open() as b:
        x = b.numpy()
    b.close()
    handle.close()
    handle.close()
    return x, handle.closed


def fork_child_checks(a, h, view, q):
    """Runs in a child forked while the parent held a, its view and its exporter handle h."""
    try:
        out = {}
        for name, op in (("numpy", a.numpy), ("dlpack", a.__dlpack__), ("export", lambda: aipc.export(a)),
                         ("slice", lambda: a[1:]), ("view_numpy", view.numpy), ("data_ptr", lambda: a.data_ptr)):
            try:
                op()
                out[name] = "no error"
            except ValueError as e:
                out[name] = "fork" in str(e)
        out["repr"] = "inherited across fork" in repr(a)
        out["shape"] = a.shape
        out["is_exporter"] = h.is_exporter
        with h.open() as b:  # the parent's export, imported like any other process
            x = np.from_dlpack(b)
            out["seen"] = x.tolist()
            x += 10
            del x
        h.close()  # only this child's copy of the handle
        out["handle_closed"] = h.closed
        del a, view, h
        gc.collect()  # must not free (or touch) the parent's memory
        fresh = aipc.from_numpy(np.arange(3))
        out["fresh"] = fresh.numpy().tolist()
        fresh.close()
        q.put(("ok", out))
    except BaseException:
        q.put(("err", traceback.format_exc()))
