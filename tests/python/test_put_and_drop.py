"""Put and drop for every kind of handle (SPEC 3.2): IpcHandle, StateDictHandle, MappedHandle,
ShareableHandle and IPC Event. The sender makes one, sends it and keeps nothing of it
(`q.put(atorch.share_state_dict(sd))`); the receiver opens it only after that, through
multiprocessing and torch.multiprocessing queues, a pipe and DataLoader workers, and reads what
the sender wrote. The sender's hold goes when the receiver opened, closed or dropped its copy;
a plain pickle's (many receivers) at the deadline."""

import gc
import multiprocessing as mp
import os
import pickle
import time
from multiprocessing.reduction import ForkingPickler

import pytest
from conftest import settle

import ascend_ipc as aipc
import handoff_kinds as K
from ascend_ipc import _handoff

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _only_this_tests_holds():
    # Holds earlier tests' plain pickles left (until their deadline, by design) go first.
    _handoff.release_all()


def _needs(kind):
    if kind in K.TORCH_KINDS:
        pytest.importorskip("torch")


def _settle(pred, timeout=30.0):
    return settle(pred, timeout)


class _Receiver:
    """A spawn child that gets each copy from the channel under test only once the sender,
    which keeps nothing of it, says which kind it was (K.receive)."""

    def __init__(self, ctx, target, chan_end):
        self.ctl, self.out = ctx.SimpleQueue(), ctx.Queue()
        self.process = ctx.Process(target=target, args=(chan_end, self.ctl, self.out), daemon=True)
        self.process.start()

    def result(self, kind):
        self.ctl.put(kind)  # after the sender dropped its copy: only now does the receiver get it
        return self.out.get(timeout=240)

    def stop(self):
        self.ctl.put(None)
        self.process.join(60)
        if self.process.is_alive():  # pragma: no cover
            self.process.kill()
            self.process.join()
        self.out.close()
        self.out.join_thread()


@pytest.fixture(scope="module")
def mp_queue():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    r = _Receiver(ctx, K.receive_queue, q)
    yield q.put, r
    r.stop()
    q.close()
    q.join_thread()


@pytest.fixture(scope="module")
def torch_queue():
    pytest.importorskip("torch")
    import torch.multiprocessing as tmp

    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    r = _Receiver(ctx, K.receive_queue, q)
    yield q.put, r
    r.stop()
    q.close()
    q.join_thread()


@pytest.fixture(scope="module")
def pipe():
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    r = _Receiver(ctx, K.receive_pipe, there)
    there.close()
    yield here.send, r
    r.stop()
    here.close()


def _put_and_drop(channel, kind):
    send, receiver = channel
    for v in (3, 5):
        send(K.make(kind, v))  # nothing of it is kept here: only the hand-off's hold
        gc.collect()
        assert receiver.result(kind) == K.expected(kind, v)
    # the receiver opened each copy: nothing is held for it any more
    assert _settle(lambda: _handoff.held() == 0), _handoff.held()


@pytest.mark.parametrize("kind", K.KINDS)
def test_through_a_multiprocessing_queue(mp_queue, kind):
    _needs(kind)
    _put_and_drop(mp_queue, kind)


@pytest.mark.parametrize("kind", K.KINDS)
def test_through_a_torch_multiprocessing_queue(torch_queue, kind):
    _needs(kind)
    import ascend_ipc.torch  # noqa: F401  (as a torch user's sender has it)

    _put_and_drop(torch_queue, kind)


@pytest.mark.parametrize("kind", K.KINDS)
def test_through_a_pipe(pipe, kind):
    _needs(kind)
    _put_and_drop(pipe, kind)


@pytest.mark.parametrize("kind", K.KINDS)
def test_from_dataloader_workers(kind):
    # The workers make the handles (Dataset.__getitem__) and keep nothing of them; the main
    # process opens each batch as it comes.
    torch = pytest.importorskip("torch")
    n = 6
    loader = torch.utils.data.DataLoader(K.Handles(kind, n), batch_size=None, collate_fn=K.identity,
                                         num_workers=2, multiprocessing_context="spawn")
    got = [K.read(kind, batch) for batch in loader]
    assert got == [K.expected(kind, i + 1) for i in range(n)]


@pytest.mark.parametrize("kind", [k for k in K.KINDS if k != "event"])
def test_closing_or_dropping_a_copy_unopened_releases_it(kind):
    # ForkingPickler: multiprocessing's pickler for queues and pipes, one receiver per copy
    _needs(kind)
    obj = K.make(kind, 2)
    copies = [pickle.loads(ForkingPickler.dumps(obj)) for _ in range(3)]
    del obj
    gc.collect()
    assert _handoff.held() == 3
    K.close(kind, copies[0])
    assert _settle(lambda: _handoff.held() == 2), _handoff.held()
    del copies[1]
    gc.collect()
    assert _settle(lambda: _handoff.held() == 1), _handoff.held()
    # an open releases too (in another process: shareable handles open there only)
    assert K.read_in_child(kind, lambda: copies[-1]) == K.expected(kind, 2)
    assert _settle(lambda: _handoff.held() == 0), _handoff.held()


def test_an_event_copy_releases_when_unpickled():
    # Unpickling an IPC event opens it (aclrtIpcOpenEventHandle): that is its receiver's open.
    ev = K.make("event", 1)
    blob = ForkingPickler.dumps(ev)
    del ev
    gc.collect()
    assert _handoff.held() == 1
    copy = pickle.loads(blob)
    assert _settle(lambda: _handoff.held() == 0), _handoff.held()
    assert K.read("event", copy) is True


PLAIN_PICKLE = r"""
import gc, os, pickle, sys, time
sys.path.insert(0, {here!r})
import handoff_kinds as K
from ascend_ipc import _handoff
import ascend_ipc as aipc

kind = {kind!r}
def settle(pred, timeout=120):
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.01)
    return pred()

# A plain pickle may feed many receivers (torch.distributed's broadcast_object_list): opening
# copies of it does not end the hold, so every receiver can open. A deadline nothing races.
os.environ["ASCEND_IPC_SEND_TIMEOUT_S"] = "600"
blob = pickle.dumps(K.make(kind, 4))
gc.collect()
assert _handoff.held() == 1, _handoff.held()
for receiver in range(2):
    got = K.read_in_child(kind, lambda: pickle.loads(blob))
    assert got == K.expected(kind, 4), (receiver, got)
assert _handoff.held() == 1, _handoff.held()  # the copies carry no release
_handoff.release_all()

# Unopened, a copy is let go at the deadline: then it cannot be opened (an event's copy fails
# in its unpickling).
os.environ["ASCEND_IPC_SEND_TIMEOUT_S"] = "0.5"
blob = pickle.dumps(K.make(kind, 6))
gc.collect()
assert settle(lambda: _handoff.held() == 0), _handoff.held()
print(K.read_in_child(kind, lambda: pickle.loads(blob)))
"""


@pytest.mark.parametrize("kind", K.KINDS)
def test_plain_pickle_copies_are_held_until_the_deadline(python, kind):
    _needs(kind)
    rc, out, err = python(PLAIN_PICKLE.format(here=HERE, kind=kind), timeout=240)
    assert rc == 0, out + err
    assert out.startswith("('error', "), out + err  # expired: the runtime's error


def test_crafted_holds_are_refused_or_harmless():
    from ascend_ipc import _vmm

    g = aipc.granularity()
    args = (1, g, 0, 0, None)
    for bad in (5, "ab", (b"a",), (b"a", b"b", b"c"), [b"a", b"b"]):
        with pytest.raises(TypeError):
            aipc._C._rebuild_handle(("aipc2." + "A" * 56, 4096), bad)
        with pytest.raises(TypeError):
            aipc._C._rebuild_event(b"\0" * 64, bad)
        with pytest.raises(TypeError):
            _vmm._rebuild_shareable(*args, bad)
        with pytest.raises(TypeError):
            _vmm._rebuild_mapped([args], 0, (4,), (1,), "uint8", None, bad)
    # The right shape aimed elsewhere, or of the wrong types: a copy made of it is harmless to
    # close and to drop (release() sends only to this package's sockets, only a 16-byte token).
    ev = aipc.Event(ipc=True)
    for pair in ((b"\0elsewhere", b"t" * 16), ("str", 5), (b"\0ascend_ipc.hold.1.x", b"short")):
        aipc._C._rebuild_handle(("aipc2." + "A" * 56, 4096), pair).close()
        _vmm._rebuild_shareable(*args, pair).close()
        _vmm._rebuild_mapped([args], 0, (4,), (1,), "uint8", None, pair).close()
        aipc._C._rebuild_event(ev.ipc_handle, pair).close()
        _vmm._rebuild_shareable(*args, pair)  # collected unopened
        gc.collect()
    ev.close()
