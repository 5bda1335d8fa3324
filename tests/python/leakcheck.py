"""pytest plugin: fail the test that leaks.

Loaded by ``tests/python/conftest.py`` (``pytest_plugins = ["leakcheck"]``). For every
test it takes a snapshot of the process after the test's setup and compares it with one
taken after its teardown (fixtures created by the setup are in both; what a test's own
fixtures clean up is gone again). A test fails (an error at teardown) when, after a
garbage collection and a short grace period, any of these grew:

* **file descriptors** (``/proc/self/fd``): any descriptor opened during the test and
  still open, except the runtime's long-lived ones (see below);
* **device memory** of ascend_ipc: allocation records still alive
  (``ascend_ipc._C._live_allocations()``: owned, imported and borrowed arrays, export
  handles), and each emulated device's used bytes (``mem_info``);
* **ascend_ipc mappings** (``/proc/self/maps``): mappings of an emulated device's memory
  (``memfd:ascend_ipc_dev*``) made during the test and still there, that no live
  allocation record accounts for. Every ``aclrtMalloc`` allocation is a memfd of its own,
  mapped inside a ``PROT_NONE`` reservation of its device, and every import is a mapping
  of exactly its allocation's range, unmapped by the ``aclrtIpcMemClose`` that releases
  it: one left behind is an import the runtime still maps although nothing uses it (a
  close that never reached the runtime, e.g. one waiting for an older import of its key
  that was never closed), or memory the runtime never freed;
* **ascend_ipc descriptors**: the memfd of each allocation is the exporter's to keep
  while the allocation lives, so such descriptors may grow by at most the allocations
  still alive (an importer keeps none);
* **child processes** (``/proc/<pid>/stat`` whose parent is this process, zombies
  included): a child that the test started and that still exists.

Legitimately long-lived state is not a leak, and is told apart by what it is, not by
when it appeared:

* the runtime's caches, which are made on first use and bounded: the device
  reservations and the importer's anchors (anonymous, so never counted), the exporter's
  server socket, epoll and eventfd, the importer's persistent connections
  (``SOCK_SEQPACKET`` sockets, and on the exporter's side a pidfd of each connection's
  opener) and the
  exporters' release ledgers (``memfd:ascend_ipc_ledger``) they hold; and the two
  datagram sockets of put and drop (``ascend_ipc/_handoff.py``: the release socket a
  sender serves, the one a receiver sends its releases from);
* hand-offs a sender holds for receivers that have not opened them yet (put and drop:
  bounded by ``ASCEND_IPC_SEND_TIMEOUT_S``), which the check lets go before it looks again;
* the session's worker processes (``aipc_workers.Worker`` objects that are still alive,
  and the queues to them), and multiprocessing's own helpers (the forkserver and the
  resource tracker, and the descriptors leading to them).

Opt out for one test with ``@pytest.mark.leaks_allowed("why")``, or for the run with
``ASCEND_IPC_LEAKCHECK=0``.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time
import weakref

import pytest

ENABLED = os.environ.get("ASCEND_IPC_LEAKCHECK", "1") != "0"
GRACE_S = float(os.environ.get("ASCEND_IPC_LEAKCHECK_GRACE", "3"))
_DEBUG = os.environ.get("ASCEND_IPC_LEAKCHECK_DEBUG", "0") != "0"

_DEV_MEMFD = "memfd:ascend_ipc_dev"  # csrc/emu/memory.c: the memfd of one allocation
_SNAPSHOT = pytest.StashKey[dict]()
_FAILED = pytest.StashKey[bool]()


# ---------------------------------------------------------------------------- what exists


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        if int(name) <= 2:
            continue  # stdin/out/err: pytest's capture points them elsewhere and back
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, or one closed meanwhile
            pass
    return out


def _seqpacket_inodes() -> set[str]:
    """Inodes of SOCK_SEQPACKET Unix sockets (ascend_ipc's only kind of socket)."""
    out = set()
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) >= 7 and parts[4] == "0005":
                    out.add(parts[6])
    except OSError:
        pass
    return out


def _children() -> dict[int, str]:
    """pid -> state of every child of this process (all threads'), zombies included."""
    me = os.getpid()
    pids: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            try:
                with open(f"/proc/{me}/task/{tid}/children") as f:
                    pids.update(int(p) for p in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    if not pids and not os.path.exists(f"/proc/{me}/task/{me}/children"):  # no CONFIG_PROC_CHILDREN
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _stat(int(name))
                if st and st[1] == me:
                    pids.add(int(name))
    out = {}
    for pid in pids:
        st = _stat(pid)
        if st:
            out[pid] = st[0]
    return out


def _stat(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2 :].split()
    return rest[0], int(rest[1])  # state, ppid


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


_MAPS_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s*(.*)$")


def _device_mappings() -> set[tuple]:
    """(start, size, file offset, name) of every mapping of emulated device memory: this
    process's own allocations and its imports."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                m = _MAPS_LINE.match(line)
                if m and _DEV_MEMFD in m.group(4):
                    lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                    out.add((lo, hi - lo, int(m.group(3), 16), m.group(4).strip()))
    except OSError:
        pass
    return out


def _aipc_state():
    mod = sys.modules.get("ascend_ipc")
    if mod is None:
        return None, None
    live = None
    try:
        live = sorted(mod._C._live_allocations())
    except Exception:
        pass
    used = None
    try:
        if mod.provider() == "emulated":
            used = []
            for d in range(mod.device_count()):
                free, total = mod.mem_info(d)
                used.append(total - free)
    except Exception:
        pass
    return live, used


def _long_lived_fds_and_pids():
    """Descriptors and processes that live on by design: the workers and their queues,
    multiprocessing's forkserver and resource tracker."""
    fds: set[int] = set()
    pids: set[int] = set()
    for worker in list(_workers):
        # a worker the pool still holds keeps its pipes (even once stopped) until the
        # pool lets go of it at the end of the session
        proc = getattr(worker, "process", None)
        if proc is not None and proc.is_alive():
            pids.add(proc.pid)
        popen = getattr(proc, "_popen", None)
        if isinstance(getattr(popen, "sentinel", None), int):
            fds.add(popen.sentinel)
        finalizer = getattr(popen, "finalizer", None)  # multiprocessing closes these with the Popen
        for arg in getattr(finalizer, "_args", None) or ():  # (r, w) for fork, [r, w] for spawn
            if isinstance(arg, int):
                fds.add(arg)
            elif isinstance(arg, (list, tuple)):
                fds.update(x for x in arg if isinstance(x, int))
        for q in (getattr(worker, "_requests", None), getattr(worker, "_responses", None)):
            for end in (getattr(q, "_reader", None), getattr(q, "_writer", None)):
                try:
                    fds.add(end.fileno())
                except Exception:  # closed
                    pass
    mp_fs = sys.modules.get("multiprocessing.forkserver")
    if mp_fs is not None:
        fs = getattr(mp_fs, "_forkserver", None)
        for attr in ("_forkserver_alive_fd", "_forkserver_pid"):
            v = getattr(fs, attr, None)
            if isinstance(v, int):
                (pids if attr.endswith("pid") else fds).add(v)
    # put and drop: one release socket served, one to send releases from (bounded caches)
    handoff = sys.modules.get("ascend_ipc._handoff")
    if handoff is not None:
        for sock in (getattr(handoff._state, "sock", None), (handoff._client or (None, None))[1]):
            try:
                fds.add(sock.fileno())
            except Exception:  # not made, or closed
                pass
    # multiprocessing's resource sharer (passing descriptors to spawned processes, as
    # torch's tensor reductions do) listens on a socket for the rest of the process
    mp_rs = sys.modules.get("multiprocessing.resource_sharer")
    rs = getattr(mp_rs, "_resource_sharer", None)
    listener = getattr(rs, "_listener", None)
    try:
        fds.add(listener._listener._socket.fileno())
    except Exception:
        pass
    # an asyncio event loop that a library keeps for the thread (jupyter_core's run_sync,
    # used by nbclient, sets one and never closes it): its self-pipe and selector
    aio = sys.modules.get("asyncio")
    if aio is not None:
        loops = []
        try:
            loops.append(aio.get_event_loop_policy()._local._loop)
        except Exception:
            pass
        ju = sys.modules.get("jupyter_core.utils")
        try:
            loops.append(ju._loop.get())
        except Exception:
            pass
        for loop in loops:
            if loop is None or loop.is_closed():
                continue
            for end in (getattr(loop, "_ssock", None), getattr(loop, "_csock", None), getattr(loop, "_selector", None)):
                try:
                    fds.add(end.fileno())
                except Exception:
                    pass
    mp_rt = sys.modules.get("multiprocessing.resource_tracker")
    if mp_rt is not None:
        rt = getattr(mp_rt, "_resource_tracker", None)
        for attr, bucket in (("_fd", fds), ("_pid", pids)):
            v = getattr(rt, attr, None)
            if isinstance(v, int):
                bucket.add(v)
    return fds, pids


# Worker objects of the session's pool (tests/python/aipc_workers.py), recorded as they are
# made (pytest_configure wraps Worker.__init__): their processes and queues live on by design.
_workers: "weakref.WeakSet" = weakref.WeakSet()


def _track_workers():
    mod = sys.modules.get("aipc_workers")
    cls = getattr(mod, "Worker", None)
    if cls is None or getattr(cls, "_leakcheck_tracked", False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _workers.add(self)

    cls.__init__ = __init__
    cls._leakcheck_tracked = True


def _is_mp_helper(pid: int) -> bool:
    cmd = _cmdline(pid)
    return "multiprocessing.forkserver" in cmd or "multiprocessing.resource_tracker" in cmd


def _runtime_fd(target: str, seqpacket: set[str]) -> bool:
    """A descriptor the ascend_ipc runtime keeps on purpose (bounded caches)."""
    if target.startswith("/memfd:ascend_ipc_ledger"):
        return True  # release ledgers shared with exporters and importers
    if target in ("anon_inode:[eventpoll]", "anon_inode:[eventfd]"):
        return True  # the exporter's server thread
    if target == "anon_inode:[pidfd]":
        return True  # the process that opened a server connection, kept with it
    if target.startswith("socket:["):
        return target[8:-1] in seqpacket  # server socket, server and client connections
    return False


def snapshot() -> dict:
    live, used = _aipc_state()
    return {
        "fds": _fds(),
        "children": _children(),
        "live": live,
        "used": used,
        "maps": _device_mappings(),
    }


def problems(before: dict, after: dict) -> list[str]:
    out = []
    allowed_fds, allowed_pids = _long_lived_fds_and_pids()
    live_after = after["live"] or []
    # New allocations alive after the test (reported below) account for their memfds.
    new_owned = max(0, sum(r[3] != "imported" for r in live_after)
                    - sum(r[3] != "imported" for r in before["live"] or []))
    seq = None
    for fd, target in sorted(after["fds"].items()):
        if before["fds"].get(fd) == target or fd in allowed_fds:
            continue
        if target.startswith("/" + _DEV_MEMFD) and new_owned > 0:
            new_owned -= 1
            continue
        if seq is None:
            seq = _seqpacket_inodes()
        if _runtime_fd(target, seq):
            continue
        out.append(f"file descriptor {fd} -> {target} is still open")
    for pid, state in sorted(after["children"].items()):
        if pid in before["children"] or pid in allowed_pids or _is_mp_helper(pid):
            continue
        what = "a zombie (never waited for)" if state == "Z" else "still running"
        out.append(f"child process {pid} is {what}: {_cmdline(pid)[:120]!r}")
    if before["live"] is not None and after["live"] is not None:
        gone = list(before["live"])
        extra = []
        for rec in after["live"]:
            if rec in gone:
                gone.remove(rec)
            else:
                extra.append(rec)
        for base, size, device, kind in extra:
            out.append(f"ascend_ipc allocation still alive: {kind} {size} bytes at {base:#x} on device {device}")
    if before["used"] is not None and after["used"] is not None:
        for d, (u0, u1) in enumerate(zip(before["used"], after["used"])):
            if u1 > u0:
                out.append(f"device {d}: {u1 - u0} more bytes in use than before the test")
    for m in sorted(after["maps"] - before["maps"]):
        if any(base <= m[0] and m[0] + m[1] <= base + size for base, size, _, _ in live_after):
            continue  # the mapping of a live allocation, reported above
        out.append(f"ascend_ipc mapping left behind: {m[1]} bytes at {m[0]:#x} ({m[3]}, offset {m[2]:#x})")
    return out


def _reap():
    """Collects what the test let go of, and the children that already ended."""
    gc.collect()
    try:
        import multiprocessing

        multiprocessing.active_children()  # joins finished multiprocessing children
    except Exception:
        pass
    sp = sys.modules.get("subprocess")
    cleanup = getattr(sp, "_cleanup", None)
    if cleanup is not None:
        try:
            cleanup()  # waits for finished Popen children whose objects are gone
        except Exception:
            pass


# ---------------------------------------------------------------------------- pytest hooks


def pytest_configure(config):
    _track_workers()
    config.addinivalue_line(
        "markers", "leaks_allowed(reason): the leak check (tests/python/leakcheck.py) skips this test"
    )


def _wanted(item) -> bool:
    return ENABLED and item.get_closest_marker("leaks_allowed") is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.failed:  # a failed test's traceback keeps its objects alive: not a leak to report
        item.stash[_FAILED] = True
    return rep


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item):
    result = yield
    if _wanted(item):
        item.stash[_SNAPSHOT] = snapshot()
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    before = item.stash.get(_SNAPSHOT, None)
    if before is None or item.stash.get(_FAILED, False):
        return result
    # Cheap first: most tests leave nothing. Else collect garbage, reap finished
    # children, and look again until the grace period is over.
    found = problems(before, snapshot())
    t0 = time.monotonic()
    first = found
    while found and time.monotonic() < t0 + GRACE_S:
        _reap()
        # Hand-offs held for receivers (put and drop) are bounded by their deadline, not
        # leaks: let them go now, and see what else is left.
        handoff = sys.modules.get("ascend_ipc._handoff")
        if handoff is not None:
            handoff.release_all()
        found = problems(before, snapshot())
        if found:
            time.sleep(0.05)
    if first and _DEBUG:
        print(f"\nleakcheck: {item.nodeid}: {time.monotonic() - t0:.2f} s until clean: {first}", file=sys.stderr)
    if found:
        # Leaked state stays leaked: the next test measures from here, and so is not blamed.
        pytest.fail(
            f"{item.nodeid} leaked:\n  " + "\n  ".join(found) + "\n(tests/python/leakcheck.py explains what is checked)",
            pytrace=False,
        )
    return result
