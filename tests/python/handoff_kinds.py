"""Every kind of picklable handle, for test_put_and_drop.py: made in the sender with nothing else
of it kept (the way `q.put(atorch.share_state_dict(sd))` is written), and opened and read in the
receiver. A module of its own, without pytest, so that spawn children and DataLoader workers
import it quickly; torch is imported only by the kinds that need it."""

import gc

import numpy as np

import ascend_ipc as aipc

KINDS = ["ipc_handle", "state_dict", "mapped", "shareable", "event"]
TORCH_KINDS = {"state_dict", "mapped"}


def make(kind, v):
    """The handle of kind over memory (or an event) that holds v, and nothing else kept of it."""
    if kind == "ipc_handle":
        return aipc.export(aipc.from_numpy(np.full(1024, v, np.int64)))
    if kind == "state_dict":
        import torch

        import ascend_ipc.torch as atorch

        sd = {"w": torch.full((64, 4), v, dtype=torch.int64), "b": torch.full((7,), v, dtype=torch.float32)}
        return atorch.share_state_dict(sd)
    if kind == "mapped":
        import torch

        import ascend_ipc.torch as atorch

        # A tensor over two physical allocations mapped side by side (torch_npu's expandable
        # segments): share() gives a MappedHandle. The range and tensor go when this returns.
        g = aipc.granularity()
        r = aipc.VirtualRange(2 * g)
        for i in range(2):
            pm = aipc.PhysicalMemory(g)
            r.map(pm, i * g).close()
            pm.close()  # the mapping holds it
        whole = torch.from_dlpack(r.array()).view(torch.int64)
        whole.fill_(v)
        n = whole.numel()
        h = atorch.share(whole[n // 2 - 512:n // 2 + 512])  # straddles the two allocations
        assert isinstance(h, aipc.MappedHandle) and len(h.chunks) == 2
        del whole
        r.close()
        return h
    if kind == "shareable":
        pm = aipc.PhysicalMemory(aipc.granularity())
        r = aipc.VirtualRange(pm.size)
        a = r.map(pm, 0)
        np.from_dlpack(a)[:] = v
        a.close()
        r.close()
        return pm.export()
    if kind == "event":
        ev = aipc.Event(ipc=True)
        ev.record()  # on the default stream: complete once that work has run
        return ev
    raise ValueError(kind)


def read(kind, obj):
    """Opens obj in this process and reads what it holds (an event: waits for it)."""
    if kind == "ipc_handle":
        with obj.open() as b:
            return int(b.numpy().sum())
    if kind == "state_dict":
        sd = obj.open()
        out = {name: float(t.sum()) for name, t in sd.items()}
        del sd
        gc.collect()
        return out
    if kind == "mapped":
        with obj.open() as b:
            return int(b.numpy().sum())
    if kind == "shareable":
        pm = obj.open()
        r = aipc.VirtualRange(pm.size)
        a = r.map(pm, 0)
        pm.close()  # the mapping holds it
        total = int(a.numpy().astype(np.int64).sum())
        a.close()
        r.close()
        return total
    if kind == "event":
        obj.synchronize(timeout=120)
        done = obj.query()
        obj.close()
        return done
    raise ValueError(kind)


def expected(kind, v):
    if kind == "ipc_handle":
        return 1024 * v
    if kind == "state_dict":
        return {"w": float(64 * 4 * v), "b": float(7 * v)}
    if kind == "mapped":
        return 1024 * v
    if kind == "shareable":
        return aipc.granularity() * v
    if kind == "event":
        return True
    raise ValueError(kind)


def close(kind, obj):
    """A receiver that closes its copy unopened (an event's copy is opened by unpickling)."""
    obj.close()


# ---------------------------------------------------------------------------- receivers


def receive(get, ctl, out):
    """A receiver process: for each kind that ctl names, gets one copy (with get(), from the
    channel under test) only then, reads it and puts the result on out; None ends it. The
    sender names the kind after it has dropped everything of the copy it sent."""
    while True:
        kind = ctl.get()
        if kind is None:
            return
        try:
            obj = get()
            result = read(kind, obj)
            del obj
            gc.collect()
        except Exception as e:  # reported to the sender, which fails the test with it
            result = ("error", type(e).__name__, str(e))
        out.put(result)


def read_in_child(kind, get):
    """read(kind, get()) in a forked child (a shareable handle opens in another process only):
    its result, or ("error", AclError code)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()

    def child():
        try:
            result = read(kind, get())
        except aipc.AclError as e:
            result = ("error", e.code)
        there.send(result)

    p = ctx.Process(target=child)
    p.start()
    there.close()  # the child's now: a child that dies unanswered is an EOF here, not a hang
    try:
        return here.recv()
    finally:
        p.join(60)
        here.close()


def receive_queue(q, ctl, out):
    receive(lambda: q.get(timeout=120), ctl, out)


def receive_pipe(conn, ctl, out):
    receive(conn.recv, ctl, out)


# ---------------------------------------------------------------------------- DataLoader workers


class Handles:
    """A map-style Dataset: item i is make(kind, i + 1), with nothing else of it kept."""

    def __init__(self, kind, n):
        self.kind, self.n = kind, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return make(self.kind, i + 1)


def identity(batch):
    return batch
