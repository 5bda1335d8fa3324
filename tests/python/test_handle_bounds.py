"""A handle never makes the receiver map or wrap more than the exporter granted.

A handle is plain data: whoever pickles it, or edits the pickle, chooses its size, offset,
shape and dtype. The receiver maps and wraps what the grant says (the runtime's import),
never what the handle claims: a handle that claims more than was granted (size, offset,
the view past the end) is refused with AclError and leaves nothing imported; values that
are wrong on their face (negative sizes and offsets, a view that does not fit the size it
claims) are refused when the handle is built (ValueError). The receiver runs in a child
process, so a crash shows as a signal instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ascend_ipc as aipc

pytestmark = pytest.mark.timeout(300)

PAGE = aipc.PAGE_SIZE
GRANT = 4 * PAGE  # what the exporter exports (the whole allocation)

# The receiver: unpickles each pickle given on stdin (a JSON list of latin-1 strings), opens
# it, reads every byte of what it got and prints one outcome per pickle.
RECEIVER = textwrap.dedent(
    """
    import json, pickle, sys
    import numpy as np
    import ascend_ipc as aipc
    from ascend_ipc import _C

    out = []
    for blob in json.load(sys.stdin):
        before = len(_C._live_allocations())
        try:
            obj = pickle.loads(blob.encode("latin-1"))
        except (TypeError, ValueError, OverflowError) as e:
            out.append(["built", type(e).__name__, str(e)])
            continue
        try:
            opened = obj.open()
        except aipc.AclError as e:
            # refused: nothing may be left imported
            out.append(["AclError", e.code, e.message, len(_C._live_allocations()) - before])
            continue
        except (TypeError, ValueError, OverflowError) as e:
            out.append(["open", type(e).__name__, str(e)])
            continue
        if isinstance(opened, dict):  # a StateDictHandle: read every tensor
            total = sum(float(t.double().sum()) for t in opened.values())
            out.append(["OK", total])
            continue
        if isinstance(opened, aipc.PhysicalMemory):  # a ShareableHandle: map it and read it all
            try:
                with aipc.VirtualRange(opened.size) as r:
                    arr = r.map(opened, 0)
            except aipc.AclError as e:
                out.append(["AclError", e.code, e.message, 0])
                continue
            finally:
                opened.close()
        else:
            arr = opened
        # every byte the array claims, read in place (the emulated provider's memory is host
        # memory, as a consumer of its DLPack capsule reads it): no bounds check but the mapping's
        host = np.from_dlpack(arr).copy()
        out.append(["OK", int(host.size), arr.nbytes, arr.allocation_size])
        arr.close()
    print(json.dumps(out))
    """
)


def receive(blobs):
    """Outcomes of opening each pickle in a child process (which must not die by a signal)."""
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", RECEIVER],
        input=json.dumps([b.decode("latin-1") for b in blobs]),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode >= 0, f"the receiver died by signal {signal.Signals(-r.returncode).name}:\n{r.stderr[-3000:]}"
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def exported():
    a = aipc.from_numpy(np.arange(GRANT, dtype=np.uint8))
    h = aipc.export(a)
    assert h.size == GRANT
    yield h
    h.close()
    a.close()


class _Reduced:
    """Pickles as fn(*args): what an edited pickle of a handle says."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def crafted(h, **change):
    """A pickle of h with the constructor arguments in change replaced (as an edited pickle
    would say them): size, dtype, shape, strides, offset."""
    # What IpcHandle.__reduce__ sends, without the sender's hold (pickling the exporter's
    # handle would keep its memory alive for each copy until the hold's deadline)
    names = ["key", "size", "dtype", "shape", "strides", "offset", "device", "pid", "torch_dtype", "event"]
    args = [h.key, h.size, h.dtype.str, h.shape, h.strides, h.offset, h.device, h.pid, h.torch_dtype, h.event]
    for k, v in change.items():
        args[names.index(k)] = v
    if "shape" in change and "strides" not in change:
        args[names.index("strides")] = None
    return pickle.dumps(_Reduced(aipc._C._rebuild_handle, (tuple(args), None)))


def refused(outcome):
    assert outcome[0] == "AclError", outcome
    assert outcome[1] in (100000, 107000), outcome
    assert "granted" in outcome[2] and "refused" in outcome[2], outcome
    assert outcome[3] == 0, f"{outcome}: an import was left open"


def test_the_granted_size_opens(exported):
    (ok,) = receive([crafted(exported)])
    assert ok[0] == "OK" and ok[1] == GRANT


def test_less_than_granted_opens(exported):
    (ok,) = receive([crafted(exported, size=PAGE, shape=(PAGE,))])
    assert ok[0] == "OK" and ok[1] == PAGE


@pytest.mark.parametrize(
    "change",
    [
        {"size": GRANT + PAGE},  # one page more: the shape defaults to all of it
        {"size": GRANT + 1},
        {"size": 1 << 40},  # huge
        {"size": (1 << 62)},
        {"size": 2 * GRANT, "shape": (GRANT,), "offset": GRANT},  # the view past the grant's end
        {"size": 2 * GRANT, "shape": (1,), "offset": GRANT + PAGE},  # the offset beyond the grant
        {"size": 2 * GRANT, "dtype": "<f8", "shape": (GRANT // 4,)},  # dtype * shape > the grant
        {"size": 1 << 40, "dtype": "<i4", "shape": (2, 3), "offset": (1 << 40) - 64},
    ],
    ids=["page-more", "byte-more", "1TiB", "2**62", "view-past-end", "offset-beyond", "dtype-shape", "far-offset"],
)
def test_more_than_granted_is_refused(exported, change):
    (outcome,) = receive([crafted(exported, **change)])
    refused(outcome)


@pytest.mark.parametrize(
    "change",
    [
        {"size": -PAGE},
        {"size": 0},
        {"offset": -PAGE},
        {"offset": -1, "shape": (4,)},
        {"shape": (GRANT + 1,)},  # the view does not fit the size the handle claims
        {"dtype": "<f8", "shape": (GRANT,)},
        {"shape": (2, GRANT), "strides": (GRANT, 1)},
        {"shape": (4,), "strides": (-1,)},  # reaches before the start
    ],
    ids=["negative-size", "zero-size", "negative-offset", "offset-minus-one", "shape-over-size", "dtype-over-size",
         "2d-over-size", "negative-stride"],
)
def test_inconsistent_handles_are_refused_when_built(exported, change):
    (outcome,) = receive([crafted(exported, **change)])
    assert outcome[0] == "built" and outcome[1] in ("ValueError", "OverflowError"), outcome


def test_in_process_open_refuses_too(exported):
    """The same check in the exporting process itself (its own key)."""
    g = aipc.IpcHandle(exported.key, GRANT + PAGE)
    before = len(aipc._C._live_allocations())
    with pytest.raises(aipc.AclError) as info:
        g.open()
    assert "granted 16 KiB" in info.value.message or "granted" in info.value.message, info.value.message
    assert len(aipc._C._live_allocations()) == before
    # and the handle of the grant still opens: the refused import was closed again
    with aipc.IpcHandle(exported.key, GRANT).open() as b:
        assert (b.numpy() == np.arange(GRANT, dtype=np.uint8)).all()


def test_open_many_refuses_an_oversized_handle(exported):
    good = aipc.IpcHandle(exported.key, GRANT)
    bad = aipc.IpcHandle(exported.key, 2 * GRANT)
    before = len(aipc._C._live_allocations())
    with pytest.raises(aipc.AclError):
        aipc.open_many([good, bad])
    assert len(aipc._C._live_allocations()) == before


# ---- the other handle kinds


def test_state_dict_entry_beyond_its_buffer_is_refused():
    torch = pytest.importorskip("torch")
    from ascend_ipc import torch as atorch

    sd = atorch.share_state_dict({"w": torch.arange(64, dtype=torch.float32), "b": torch.ones(8)})
    try:
        rebuild, (handle, plain, event, *rest) = sd.__reduce__()
        good = pickle.dumps(sd)
        size = handle.size
        bad = []
        for i, change in enumerate([
            {"offset": size},  # starts past the buffer
            {"offset": size - 8},  # runs past its end
            {"shape": [size]},  # float32 * size > the buffer
            {"offset": -512},
            {"nbytes": 4},  # says fewer bytes than its shape has
            {"shape": [-8, -8], "nbytes": 256},  # negative sizes whose product is right
            {"shape": [16.0], "nbytes": 64},  # sizes that are not ints
            {"shape": ["16"], "nbytes": 64},
            {"shape": [[16]], "nbytes": 64},  # unhashable
        ]):
            entries = [list(e) for e in plain]
            fields = ["name", "dtype", "shape", "offset", "nbytes", "parameter", "requires_grad"]
            for k, v in change.items():
                entries[0][fields.index(k)] = v
            if "shape" in change and "nbytes" not in change:
                entries[0][fields.index("nbytes")] = int(np.prod(change["shape"])) * 4
            bad.append(pickle.dumps(_Reduced(rebuild, (handle, [tuple(e) for e in entries], event, *rest))))
        outcomes = receive([good] + bad)
        assert outcomes[0][0] == "OK", outcomes[0]
        for o in outcomes[1:]:
            assert o[0] == "AclError", o
            assert "granted" in o[2] or "buffer" in o[2], o
            assert o[3] == 0, o
    finally:
        sd.close()


def test_shareable_handle_size_other_than_the_allocation_is_refused():
    g = aipc.granularity()
    pm = aipc.PhysicalMemory(g)
    try:
        h = pm.export()
        # the sizes of other allocations (whole granules: only the runtime can tell), and sizes none has
        blobs = [pickle.dumps(aipc.ShareableHandle(h.value, size, h.device, h.pid, h.place))
                 for size in (2 * g, 4 * g, 1 << 40, g + PAGE, g // 2, -g)]
        mapped = []
        for size in (2 * g, 1 << 40):
            mh = aipc.MappedHandle([aipc.ShareableHandle(h.value, size, h.device, h.pid, h.place)], 0, (g,), (1,),
                                   "uint8")
            mapped.append(pickle.dumps(mh))
        mh = aipc.MappedHandle([h], g - 8, (64,), (1,), "uint8")  # the view past the chunks' end
        mapped.append(pickle.dumps(mh))
        outcomes = receive(blobs + mapped)
        for o in outcomes:
            assert o[0] == "AclError", o
            assert o[3] == 0, o
        for o in outcomes[:3]:  # refused at open(), before any mapping: the import is given back
            assert "ShareableHandle.open: the handle claims" in o[2] and "physical allocation has" in o[2], o
    finally:
        pm.close()


# ---- fuzz: edited pickles never kill the receiver


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    st = None

if st is not None:
    _ints = st.one_of(
        st.integers(-2 * GRANT, 3 * GRANT),
        st.sampled_from([0, 1, PAGE - 1, PAGE, GRANT - 1, GRANT, GRANT + 1, 1 << 31, 1 << 40, (1 << 63) - 1]),
    )
    _changes = st.fixed_dictionaries(
        {},
        optional={
            "size": _ints,
            "offset": _ints,
            "dtype": st.sampled_from(["|u1", "<f4", "<f8", "<i2", "<c16"]),
            "shape": st.lists(st.integers(0, GRANT), max_size=3).map(tuple),
        },
    )

    # Each example is one receiver process opening a batch of edited pickles.
    @settings(max_examples=int(os.environ.get("ASCEND_IPC_FUZZ_BATCHES", "6")), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(batch=st.lists(_changes, min_size=60, max_size=60))
    def test_fuzzed_pickles_never_kill_the_receiver(exported, batch):
        outcomes = receive([crafted(exported, **c) for c in batch])  # no death by a signal
        for c, o in zip(batch, outcomes):
            assert o[0] in ("OK", "AclError", "built", "open"), (c, o)
            if o[0] == "AclError":
                assert o[3] == 0, (c, o)  # nothing left imported
            if o[0] == "OK":
                assert o[2] <= GRANT, (c, o)  # never more than the grant


EVENT_FUZZ = textwrap.dedent(
    """
    import random, sys
    import ascend_ipc as aipc

    real, rounds = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
    rnd = random.Random(7)
    seen = set()
    for i in range(rounds):
        b = bytearray(real) if i % 2 else bytearray(rnd.randbytes(64))
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(64)] = rnd.randrange(256)
        try:
            with aipc.Event.from_handle(bytes(b)) as e:
                e.synchronize(timeout=0.01)
            seen.add("OK")
        except aipc.AclError as err:
            seen.add(err.name)
    print(sorted(seen))
    """
)


def test_forged_event_handles_never_kill_the_receiver():
    """An IPC event handle is 64 opaque bytes: edited ones are refused (AclError), never a crash."""
    with aipc.Event(ipc=True) as e:
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", EVENT_FUZZ, e.ipc_handle.hex(), "1000"],
                           capture_output=True, text=True, timeout=240)
    assert r.returncode >= 0, f"died by signal {signal.Signals(-r.returncode).name}:\n{r.stderr[-3000:]}"
    assert r.returncode == 0, r.stderr[-3000:]
