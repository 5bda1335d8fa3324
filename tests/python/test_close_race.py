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

RACE = textwrap.dedent(
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

        def worker():
            while True:  # until the close lands
                try:
                    started.set()  # the main thread gets the GIL back once this thread releases it
                    use(arr, OP)
                    outcomes["done"] += 1
                except ValueError as e:
                    if "closed" not in str(e):
                        errors.append(repr(e))
                    outcomes["closed"] += 1
                    return
                except BaseException as e:  # e.g. AclError: the memory went mid-call
                    errors.append(repr(e))
                    return

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
