"""The leak check itself (tests/python/leakcheck.py): it must catch each kind of leak, in
the test that leaks, and must not blame tests for the runtime's long-lived caches.

Runs a small pytest session in a subprocess with the plugin and reads its report.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

HERE = pathlib.Path(__file__).resolve().parent

INNER = '''
import os, subprocess, sys, time
import numpy as np
import pytest
import ascend_ipc as aipc

KEEP = []

def test_leaks_a_file():
    KEEP.append(open(os.devnull))

def test_leaks_a_pipe():
    KEEP.append(os.pipe())

def test_leaks_device_memory():
    KEEP.append(aipc.empty(1000, dtype="float64"))

def test_leaks_an_export():
    a = aipc.empty(10)
    KEEP.append(aipc.export(a))
    a.close()

def test_leaks_an_import():
    a = aipc.from_numpy(np.arange(4.0))
    h = aipc.export(a)
    KEEP.append(h.open())
    del a

def test_leaks_a_mapping():
    # two imports of a key of another process; the younger is closed, the older kept: the
    # younger's mapping stays until the older is closed (a close releases the oldest)
    p = subprocess.Popen([sys.executable, "-c", CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        key, size = p.stdout.readline().split()
        h = aipc.IpcHandle(key, int(size), dtype="float64", shape=(3,))
        older, younger = h.open(), h.open()
        younger.close()
        KEEP.append(older)
    finally:
        p.stdin.close()
        p.wait(30)
        p.stdout.close()

def test_leaks_a_running_child():
    KEEP.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))

def test_leaks_a_zombie():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    time.sleep(0.2)

@pytest.mark.leaks_allowed("on purpose")
def test_allowed_leak():
    KEEP.append(open(os.devnull))

def test_clean_arrays_and_exports():
    a = aipc.from_numpy(np.arange(6.0))
    with aipc.export(a[1:]) as h, h.open() as b:
        assert b.numpy().tolist() == [1, 2, 3, 4, 5]
    a.close()

def test_clean_child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

CODE = (
    "import sys, numpy as np, ascend_ipc as aipc\\n"
    "a = aipc.from_numpy(np.arange(3.0)); h = aipc.export(a)\\n"
    "print(h.key, h.size, flush=True); sys.stdin.readline()\\n"
)

def test_zz_cleanup():
    # what the leaking tests kept goes now (fewer is never a leak)
    for obj in KEEP:
        if isinstance(obj, subprocess.Popen):
            obj.kill()
            obj.wait()
        elif isinstance(obj, tuple):
            for fd in obj:
                os.close(fd)
        else:
            obj.close()
    KEEP.clear()

def test_runtime_caches_are_not_leaks():
    # an import from another process leaves a cached connection and the ledger it maps:
    # bounded caches, by design (the import's own mapping goes with its close)
    p = subprocess.Popen([sys.executable, "-c", CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        key, size = p.stdout.readline().split()
        with aipc.IpcHandle(key, int(size), dtype="float64", shape=(3,)).open() as b:
            assert b.numpy().tolist() == [0, 1, 2]
    finally:
        p.stdin.close()
        p.wait(30)
        p.stdout.close()
'''


@pytest.mark.whole_program
def test_leakcheck_blames_the_leaking_tests_only(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    env["ASCEND_IPC_LEAKCHECK"] = "1"
    env["ASCEND_IPC_LEAKCHECK_GRACE"] = "1"
    env.setdefault("ASCEND_IPC_PROVIDER", "emulated")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "leakcheck", "-p", "no:cacheprovider", "-q", "-rE",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_inner.py")],
        capture_output=True, text=True, timeout=150, env=env, cwd=tmp_path,
    )  # fmt: skip
    out = r.stdout + r.stderr
    errors = {line.split("::")[1].split()[0] for line in out.splitlines() if line.startswith("ERROR ") and "::" in line}
    assert errors == {
        "test_leaks_a_file",
        "test_leaks_a_pipe",
        "test_leaks_device_memory",
        "test_leaks_an_export",
        "test_leaks_an_import",
        "test_leaks_a_mapping",
        "test_leaks_a_running_child",
        "test_leaks_a_zombie",
    }, out
    assert "file descriptor" in out and "ascend_ipc allocation still alive: owned" in out
    assert "ascend_ipc allocation still alive: imported" in out
    # pytest repeats the message in its short summary, untruncated where $CI is set: count distinct lines
    leaked_mappings = sorted({line.strip() for line in out.splitlines() if "ascend_ipc mapping left behind" in line})
    assert len(leaked_mappings) == 1 and "memfd:ascend_ipc_dev0" in leaked_mappings[0], out
    assert "still running" in out and "zombie" in out
    # the leaking tests pass, then error at teardown (newer Pythons may add a warning to the count)
    assert re.search(r"\b13 passed, (\d+ warnings?, )?8 errors\b", out), out
