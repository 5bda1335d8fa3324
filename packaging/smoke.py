"""Cross-process smoke test of an installed ascend_ipc (run by `make wheel-check`).

The parent exports an array; a child started with the 'spawn' method (a
fresh interpreter that imports the package on its own) opens the handle,
writes through it, and the parent checks that it sees the write in its own
memory. Run it from outside the source tree, so that the package imported
is the installed one.
"""

import multiprocessing as mp
import os
import platform
import sys

import numpy as np

import ascend_ipc as aipc

N = 1 << 16


def child(handle, done):
    with handle.open() as b:
        view = np.from_dlpack(b)
        assert view.shape == (N,) and view.dtype == np.float32, (view.shape, view.dtype)
        assert view[7] == 7.0, view[:8]
        view[:] += 1.0  # in place: the exporter's memory, not a copy
    done.put(os.getpid())


def main():
    where = os.path.dirname(aipc.__file__)
    tree = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ascend_ipc")
    if os.path.realpath(where) == os.path.realpath(tree):
        sys.exit(f"smoke: imported the package from the source tree ({where}); run it from elsewhere")

    a = aipc.from_numpy(np.arange(N, dtype=np.float32))
    h = aipc.export(a)
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    p = ctx.Process(target=child, args=(h, done))
    p.start()
    p.join(120)  # the queue holds one small int: the child's exit does not wait on it
    if p.exitcode != 0:
        sys.exit(f"smoke: the child exited with {p.exitcode}")
    child_pid = done.get(timeout=10)
    got = a.numpy()
    if not np.array_equal(got, np.arange(N, dtype=np.float32) + 1.0):
        sys.exit(f"smoke: the parent does not see the child's write: {got[:8]}")
    libc = "-".join(platform.libc_ver())
    print(
        f"smoke ok: Python {platform.python_version()}, ascend_ipc {aipc.__version__} from {where}, "
        f"provider {aipc.provider()}, {libc}; child {child_pid} wrote {N} floats the parent sees"
    )


if __name__ == "__main__":
    main()
