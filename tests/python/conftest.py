"""Shared fixtures of the Python tests: a per-test timeout and reaped worker processes.

Timeouts: every test gets SIGALRM after its limit (``@pytest.mark.timeout(seconds)``,
default ASCEND_IPC_TEST_TIMEOUT or 600 s), which fails it with the stacks of all threads;
a faulthandler watchdog ends the whole run if even that cannot interrupt it. (If the
pytest-timeout plugin is installed, it handles the same marker instead.)

Workers: ``workers`` gives long-lived child processes per start method (spawn, fork,
forkserver), reused across tests so the suite does not pay interpreter and torch start-up
for each one; every child is reaped at the end of the session, or at once if a call to it
times out.

Super-nodes: ``supernode(n=2)`` makes emulated servers (network namespaces joined by veth
links) and starts processes in them; everything goes at the end of the test
(tests/python/supernode_servers.py).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import time
import traceback

import pytest

# The suite tests the emulator unless told otherwise: on a machine with CANN, `auto` would
# pick the real runtime. test_cann_provider.py and test_hardware.py choose their provider
# explicitly, in subprocesses.
os.environ.setdefault("ASCEND_IPC_PROVIDER", "emulated")

import aipc_workers  # noqa: E402  (imports ascend_ipc, which selects the provider)

# Every test is checked for leaked descriptors, device memory, mappings and child
# processes (tests/python/leakcheck.py); the supernode fixture is in supernode_servers.py.
pytest_plugins = ["leakcheck", "supernode_servers"]

DEFAULT_TIMEOUT = float(os.environ.get("ASCEND_IPC_TEST_TIMEOUT", "600"))
START_METHODS = ("spawn", "fork", "forkserver")


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): fail the test if it runs longer than this")
    config.addinivalue_line("markers", "python_only: runs none of the project's C code (it reads the extension's "
                            "signatures and stubs); the ASan pass (make test-py-asan) leaves it out")
    config.addinivalue_line("markers", "whole_program: runs a whole example, demo or tool in processes of its own, "
                            "making the calls the unit tests make under ASan; make test runs it, the ASan pass "
                            "leaves it out")


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I-J/N",
                     help="run only the tests whose id hashes (crc32 mod N) into I..J: CI splits the ASan "
                          "pass between its two lanes this way")


def pytest_collection_modifyitems(config, items):
    spec = config.getoption("--shard")
    if not spec:
        return
    import zlib

    try:
        span, n = spec.split("/")
        lo, _, hi = span.partition("-")
        lo, hi, n = int(lo), int(hi or lo), int(n)
        assert 0 <= lo <= hi < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--shard {spec!r}: expected I-J/N with 0 <= I <= J < N, as 0-3/5") from None
    keep, drop = [], []
    for item in items:
        (keep if lo <= zlib.crc32(item.nodeid.encode()) % n <= hi else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _plugin_timeout(config) -> bool:
    return config.pluginmanager.hasplugin("timeout")


@pytest.fixture(autouse=True)
def _per_test_timeout(request):
    if _plugin_timeout(request.config) or not hasattr(signal, "SIGALRM"):
        yield
        return
    marker = request.node.get_closest_marker("timeout")
    seconds = float(marker.args[0]) if marker and marker.args else DEFAULT_TIMEOUT

    def on_alarm(signum, frame):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"test timed out after {seconds:g} s", pytrace=False)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    # Backstop for a test stuck where the alarm cannot interrupt it: dump and exit.
    faulthandler.dump_traceback_later(seconds + 60, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


class WorkerPool:
    """Long-lived workers per start method; every one is reaped in close()."""

    def __init__(self):
        self._workers: dict = {}

    def get(self, method: str, index: int = 0) -> aipc_workers.Worker:
        key = (method, index)
        worker = self._workers.get(key)
        if worker is None or not worker.alive():
            if worker is not None:
                worker.stop()
            worker = aipc_workers.Worker(multiprocessing.get_context(method))
            self._workers[key] = worker
        return worker

    def fresh(self, method: str) -> aipc_workers.Worker:
        """A worker of one's own (the caller stops it; close() reaps it regardless)."""
        worker = aipc_workers.Worker(multiprocessing.get_context(method))
        self._workers[(method, "fresh", id(worker))] = worker
        return worker

    def close(self):
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()


@pytest.fixture(scope="session")
def workers():
    pool = WorkerPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(params=START_METHODS)
def method(request):
    return request.param


@pytest.fixture
def worker(workers, method):
    return workers.get(method)


def run_command(argv, env=None, timeout: float = 60, preexec_fn=None, merge_stderr: bool = False):
    """Runs argv in a process group of its own with env (the whole environment; None: this
    one's). On timeout the test fails with what the command printed; either way the group is
    killed afterwards, so nothing a crash left behind outlives the test. Returns (rc, stdout,
    stderr); stderr is None when merge_stderr puts it into stdout."""
    import subprocess

    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv} timed out after {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def settle(pred, timeout: float = 30.0):
    """Waits until pred() holds (for what comes by itself: a release datagram, a thread's
    turn), up to timeout seconds; returns pred()'s last value for the caller to assert."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.01)


def run_python(code: str, env=None, timeout: float = 60):
    """Runs code in a fresh interpreter (this environment plus env; run_command)."""
    return run_command([sys.executable, "-c", code], env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture
def python():
    return run_python


def pytest_sessionfinish(session, exitstatus):
    # Any child a test forgot: reap it rather than leave it behind.
    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)
    if multiprocessing.active_children():  # pragma: no cover
        traceback.print_stack()
