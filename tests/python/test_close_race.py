"""close() while another thread uses the same DeviceArray: never a crash.

close() waits for the calls already running on the memory it frees (numpy(),
copy_from(), ...), then frees it; later calls raise ValueError("... closed").
Each race runs in a child interpreter, so a segfault fails one assert instead
of killing pytest. No timing is assumed: a barrier starts the race, and a close
that lands before, during or after a copy is accepted, as long as nothing
crashes and every call either completes or raises the closed error.
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(300)

# The racing thread of every script here: calls fn until it raises. A ValueError that says
# closed ends it cleanly; anything else (an AclError: the object went mid-call) is an error.
# Uses the script's globals started (set once running: the main thread may close then),
# outcomes and errors.
UNTIL_CLOSED = textwrap.dedent(
    """
    def until_closed(fn):
        def run():
            while True:
                try:
                    started.set()
                    fn()
                    outcomes["done"] += 1
                except ValueError as e:
                    if "closed" not in str(e):
                        errors.append(repr(e))
                    outcomes["closed"] += 1
                    return
                except BaseException as e:
                    errors.append(repr(e))
                    return
        return run
    """
)

RACE = UNTIL_CLOSED + textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    import ascend_ipc as aipc
    from ascend_ipc import _C

    KIND, OP, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
    N = 16 << 20  # float32: 64 MiB
    host = np.ones(N, dtype=np.float32)
    other = aipc.from_numpy(host)

    def make():
        a = aipc.zeros(N, dtype=np.float32)
        if KIND == "owned":
            return a, [a]
        if KIND == "view":  # the view holds the allocation; close the view last
            v = a[1:]
            return v, [a, v]
        h = aipc.export(a)
        b = h.open()
        return b, [b, a, h]

    def use(arr, op):
        if op == "numpy":
            arr.numpy()
        elif op == "copy_from":
            arr.copy_from(host[: arr.size])
        elif op == "copy_from_device":
            arr.copy_from(other[: arr.size])
        elif op == "copy_to":
            other[: arr.size].copy_from(arr)

    outcomes = {"done": 0, "closed": 0}
    for _ in range(ROUNDS):
        before = len(_C._live_allocations())
        arr, to_close = make()
        started = threading.Event()
        errors = []

        worker = until_closed(lambda: use(arr, OP))

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        started.wait()
        for o in to_close:
            o.close()
        assert arr.closed
        if KIND != "imported":  # close() waited for the copies in flight, then freed the memory
            assert len(_C._live_allocations()) == before, _C._live_allocations()
        for t in threads:
            t.join()
        assert not errors, errors
        # After close every call fails with the closed error.
        try:
            use(arr, OP)
        except ValueError as e:
            assert "closed" in str(e), e
        else:
            raise AssertionError("a call after close() succeeded")
    print("OK", outcomes)
    """
)


@pytest.mark.parametrize("kind", ["owned", "view", "imported"])
@pytest.mark.parametrize("op", ["numpy", "copy_from", "copy_from_device", "copy_to"])
def test_close_while_another_thread_copies(kind, op):
    r = subprocess.run([sys.executable, "-c", RACE, kind, op, "4"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:{r.stdout}\nstderr:{r.stderr[-4000:]}"
    assert "OK" in r.stdout


STREAM_RACE = textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    import ascend_ipc as aipc

    OP, ROUNDS = sys.argv[1], int(sys.argv[2])
    N = 4 << 20
    host = np.ones(N, dtype=np.float32)
    for _ in range(ROUNDS):
        s = aipc.Stream()
        a = aipc.zeros(N, dtype=np.float32)
        ev = aipc.Event()
        for _ in range(4):
            a.copy_from(host, stream=s)  # queued work for synchronize() to wait for
        started = threading.Event()
        errors = []

        def worker():
            while True:
                try:
                    started.set()
                    if OP == "synchronize":
                        s.synchronize()
                    elif OP == "wait":
                        s.wait(ev)
                    elif OP == "copy_from":
                        a.copy_from(host, stream=s)
                    elif OP == "record":
                        ev.record(s)
                except ValueError as e:
                    if "closed" not in str(e):
                        errors.append(repr(e))
                    return
                except BaseException as e:  # e.g. AclError: the stream went mid-call
                    errors.append(repr(e))
                    return

        t = threading.Thread(target=worker)
        t.start()
        started.wait()
        s.close()
        assert s.closed
        t.join()
        assert not errors, errors
        a.close()
    print("OK")
    """
)


@pytest.mark.parametrize("op", ["synchronize", "wait", "copy_from", "record"])
def test_stream_close_while_another_thread_uses_it(op):
    r = subprocess.run([sys.executable, "-c", STREAM_RACE, op, "8"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:{r.stdout}\nstderr:{r.stderr[-4000:]}"
    assert "OK" in r.stdout


# ---- Event, VMM objects and handles --------------------------------------------------
#
# The same promise for the other objects: close() while another thread is in a call on the
# same object never crashes, and the other thread's call either completes or raises the
# object's "... closed" ValueError (never an AclError about a destroyed handle, never a
# second close of the same export). Each scenario runs ROUNDS times in a child interpreter;
# a barrier or an Event starts the race, no sleeps.

RUNNER = UNTIL_CLOSED + textwrap.dedent(
    """
    import pickle, sys, threading
    import numpy as np
    import ascend_ipc as aipc

    SCENARIO, ROUNDS = sys.argv[1], int(sys.argv[2])
    errors, outcomes = [], {"done": 0, "closed": 0}

    def race(work, close, threads=1):
        global started
        started = threading.Event()
        ts = [threading.Thread(target=until_closed(work)) for _ in range(threads)]
        for t in ts:
            t.start()
        started.wait()
        close()
        for t in ts:
            t.join()

    def together(fn, n=2):
        # n threads call fn at once (a barrier lines them up); every call must succeed.
        barrier = threading.Barrier(n)
        def run():
            barrier.wait()
            try:
                fn()
            except BaseException as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=run) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    N = 1 << 20
    host = np.ones(N, dtype=np.float32)
    G = aipc.granularity()
    for _ in range(ROUNDS):
        if SCENARIO.startswith("event_"):
            op = SCENARIO[len("event_"):]
            s = aipc.Stream()
            a = aipc.zeros(N, dtype=np.float32)
            ev = aipc.Event(timing=op == "elapsed", ipc=op == "opened")
            if op == "opened":  # an IPC event opened from its handle in this process
                ev = aipc.Event.from_handle(ev.ipc_handle)
            end = aipc.Event(timing=True)
            for _ in range(4):
                a.copy_from(host, stream=s)  # queued work for synchronize() to wait for
            ev.record(s)
            if op == "elapsed":
                end.record(s)
                s.synchronize()
            work = {
                "synchronize": lambda: ev.synchronize(),
                "opened": lambda: ev.synchronize(),
                "query": lambda: ev.query(),
                "record": lambda: ev.record(s),
                "wait": lambda: s.wait(ev),
                "elapsed": lambda: ev.elapsed(end),
            }[op]
            race(work, ev.close, threads=2)
            assert ev.closed
            s.synchronize()
            s.close()
            a.close()
        elif SCENARIO == "physical_map":
            pm = aipc.PhysicalMemory(G)
            def work():
                with aipc.VirtualRange(G) as r:
                    r.map(pm, 0).close()
            race(work, pm.close)
        elif SCENARIO == "physical_export":
            pm = aipc.PhysicalMemory(G)
            race(lambda: pm.export(), pm.close)
        elif SCENARIO == "range_map":
            r = aipc.VirtualRange(2 * G)
            pm = aipc.PhysicalMemory(G)
            def work():
                r.map(pm, G).close()
                r.unmap(G)
            race(work, r.close)
            pm.close()
        elif SCENARIO == "range_array":
            r = aipc.VirtualRange(2 * G)
            pm = aipc.PhysicalMemory(G)
            r.map(pm, 0).close()
            race(lambda: r.array(0, G).close(), r.close)
            pm.close()
        elif SCENARIO == "range_copy":
            r = aipc.VirtualRange(G)
            pm = aipc.PhysicalMemory(G)
            arr = r.map(pm, 0)
            src = np.ones(G, dtype=np.uint8)
            def close_all():
                r.close()
                pm.close()  # the array holds the mapping: its copies go on
                arr.close()
            race(lambda: arr.copy_from(src), close_all)
        elif SCENARIO == "handle_close_twice":
            a = aipc.zeros(N, dtype=np.float32)
            h = aipc.export(a)
            together(h.close)
            assert h.closed
            a.close()
        elif SCENARIO == "handle_close_open":
            a = aipc.zeros(N, dtype=np.float32)
            h = aipc.export(a)
            race(lambda: h.open().close(), h.close)
            assert h.closed
            a.close()
        elif SCENARIO == "handle_close_pickle":
            a = aipc.zeros(N, dtype=np.float32)
            h = aipc.export(a)
            race(lambda: pickle.dumps(h), h.close)
            a.close()
        elif SCENARIO == "handle_close_allow":
            a = aipc.zeros(N, dtype=np.float32)
            h = aipc.export(a, pids=[])
            race(lambda: h.allow(aipc.bare_tgid()), h.close)
            a.close()
        elif SCENARIO == "state_dict_close_twice":
            import torch
            from ascend_ipc import torch as atorch
            sd = atorch.share_state_dict({"w": torch.ones(1000), "b": torch.zeros(10)})
            together(sd.close)
        elif SCENARIO == "mapped_close_twice":
            r = aipc.VirtualRange(2 * G)
            pms = [aipc.PhysicalMemory(G), aipc.PhysicalMemory(G)]
            arrs = [r.map(pms[0], 0), r.map(pms[1], G)]
            whole = r.array()
            mh = aipc._vmm.share_mapped(whole.data_ptr, 2 * G, (2 * G,), (1,), "uint8")
            together(mh.close)
            whole.close()
            for x in arrs + pms:
                x.close()
            r.close()
        else:
            raise SystemExit("unknown scenario " + SCENARIO)
    assert not errors, errors[:5]
    print("OK", outcomes)
    """
)

SCENARIOS = [
    "event_synchronize", "event_opened", "event_query", "event_record", "event_wait", "event_elapsed",
    "physical_map", "physical_export", "range_map", "range_array", "range_copy",
    "handle_close_twice", "handle_close_open", "handle_close_pickle", "handle_close_allow",
    "state_dict_close_twice", "mapped_close_twice",
]  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_close_while_another_thread_uses_it(scenario):
    if scenario.startswith("state_dict"):
        pytest.importorskip("torch")
    # Python-level races (the VMM objects, the handles) need many rounds to land in the window;
    # each round is cheap. The event races land within a few.
    rounds = "20" if scenario.startswith("event") else "300"
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", RUNNER, scenario, rounds],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"rc={r.returncode}\nstdout:{r.stdout}\nstderr:{r.stderr[-4000:]}"
    assert "OK" in r.stdout
