"""Handles say where they belong: opened from another network or PID namespace (a container) or
another host, they fail at once with an AclError that names the cause, not a timeout or "gone".

The namespace tests start the opener with unshare(1), which needs root; they skip otherwise."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import ascend_ipc as aipc
from ascend_ipc import _C

pytestmark = pytest.mark.timeout(120)

# The opener: reads a pickled handle on stdin, opens it, prints what happened as JSON.
OPENER = r"""
import json, pickle, sys, time
import ascend_ipc as aipc
h = pickle.loads(sys.stdin.buffer.read())
t0 = time.monotonic()
try:
    h.open()
    out = {"opened": True}
except aipc.AclError as e:
    out = {"code": e.code, "name": e.name, "message": e.message, "call": e.call}
out["seconds"] = time.monotonic() - t0
print(json.dumps(out))
"""

NAMESPACES = {
    "network": (["--net"], "in another network namespace"),
    "pid": (["--pid", "--fork"], "in another PID namespace"),
}


def _unshare_or_skip(flags):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a namespace with unshare")
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("unshare(1) is not installed")
    if subprocess.run([tool, *flags, "true"], capture_output=True).returncode != 0:
        pytest.skip(f"unshare {' '.join(flags)} is refused here")
    return tool


def _open_in(flags, handle):
    tool = _unshare_or_skip(flags)
    # a day's timeout: a refusal that waited for one would run into the subprocess's
    # 60 s limit, however loaded the machine; no clock decides "at once"
    env = dict(os.environ, ASCEND_IPC_PROVIDER="emulated", ASCEND_IPC_TIMEOUT_MS="86400000")
    r = subprocess.run([tool, *flags, sys.executable, "-c", OPENER], input=pickle.dumps(handle),
                       capture_output=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def _assert_refused(out, says, call):
    assert "opened" not in out, out
    assert out["code"] == 207000 and out["name"] == "ACL_ERROR_RT_FEATURE_NOT_SUPPORT", out
    assert says in out["message"] and "gone" not in out["message"], out
    assert out["call"] == call  # for its place (FEATURE_NOT_SUPPORT), not a timeout (507022)


@pytest.mark.parametrize("where", sorted(NAMESPACES))
def test_key_from_another_namespace(where):
    flags, says = NAMESPACES[where]
    a = aipc.from_numpy(np.arange(1024, dtype=np.float32))
    h = aipc.export(a)  # no whitelist: only the namespace stands in the way
    try:
        _assert_refused(_open_in(flags, h), says, "aclrtIpcMemImportByKey")
        # the same handle still opens here
        with h.open() as b:
            assert np.from_dlpack(b)[5] == 5
    finally:
        h.close()
        a.close()


@pytest.mark.parametrize("where", sorted(NAMESPACES))
def test_shareable_handle_from_another_namespace(where):
    flags, says = NAMESPACES[where]
    pm = aipc.PhysicalMemory(aipc.granularity())
    try:
        h = pm.export(pids=None)
        assert h.place == _C._place_here()
        _assert_refused(_open_in(flags, h), says, "aclrtMemImportFromShareableHandle")
    finally:
        pm.close()


def test_state_dict_from_another_network_namespace():
    torch = pytest.importorskip("torch")
    from ascend_ipc import torch as atorch

    shared = atorch.share_state_dict({"w": torch.ones(4, 4)})
    try:
        # its IPC event is opened first, then its buffer's key: either names the cause
        out = _open_in(["--net"], shared)
        assert out.get("call") in ("aclrtIpcOpenEventHandle", "aclrtIpcMemImportByKey"), out
        _assert_refused(out, "in another network namespace", out["call"])
    finally:
        shared.close()


def test_shareable_handle_from_another_host():
    """Another host's handle looks like this one with another boot id: refused before any connection."""
    pm = aipc.PhysicalMemory(aipc.granularity())
    try:
        h = pm.export(pids=None)
        boot, net, pid = h.place
        elsewhere = aipc.ShareableHandle(h.value, h.size, h.device, h.pid, (boot ^ 1, net, pid))
        elsewhere = pickle.loads(pickle.dumps(elsewhere))
        with pytest.raises(aipc.AclError) as info:
            elsewhere.open()
        # refused for its place (a timeout would be 507022 "no reply"), so at once
        assert info.value.code == 207000 and "on another host" in info.value.message
        assert info.value.call == "aclrtMemImportFromShareableHandle"
        # unknown parts are no evidence: a handle without a place (from a C program) is tried
        unknown = aipc.ShareableHandle(h.value, h.size, h.device, h.pid)
        call, who = "aclrtMemImportFromShareableHandle", "shareable handle"
        assert unknown.place is None and _C._place_check(None, call, who, who) is None
        assert _C._place_check((0, 0, 0), call, who, who) is None
        assert _C._place_check(_C._place_here(), call, who, who) is None
    finally:
        pm.close()
