"""``python -m ascend_ipc.demo`` and ``python -m ascend_ipc info``, run as real subprocesses."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import pytest
from conftest import run_command

TIMEOUT = 240  # seconds; the demo starts four spawn workers that each import torch

# the conftest's (or pytest-timeout's) per-test limit, above the subprocess timeouts
pytestmark = pytest.mark.timeout(300)


def _env(**extra: str) -> dict:
    import ascend_ipc

    env = dict(os.environ)
    pkg_parent = str(pathlib.Path(ascend_ipc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _run(args, timeout=TIMEOUT, **env):
    """``python <args>``: (rc, stdout, stderr)."""
    return run_command([sys.executable, *args], env=_env(**env), timeout=timeout)


# --------------------------------------------------------------------------- demo


@pytest.mark.whole_program
@pytest.mark.parametrize("strict", ["0", "1"], ids=["default", "strict"])
def test_demo_runs_and_verifies(strict):
    pytest.importorskip("torch", reason="the demo shares torch tensors; torch is not installed for this Python")
    # ASCEND_IPC_STRICT=1 turns close-order mistakes into errors: the demo must close
    # every import before the exporter closes.
    rc, out, err = _run(["-m", "ascend_ipc.demo", "--mib", "4"], ASCEND_IPC_STRICT=strict)
    assert rc == 0, f"exit code {rc}\nstdout:\n{out}\nstderr:\n{err}"

    assert "tensor: float32[1048576] = 4.0 MiB (4194304 bytes)" in out, out
    assert "verification: OK - all 4194304 bytes checked" in out, out
    m = re.search(r"bytes copied between processes: 0 \(the queues carried (\d+) bytes in all: a (\d+)-byte handle", out)
    assert m, out
    assert 0 < int(m.group(2)) < 4096, "the pickled handle should be tiny"
    assert int(m.group(1)) < 4 * 4096, "only handles and slice ranges go through the queues"
    assert "bytes written in place by workers: 4194304" in out, out

    duration = r"[\d.]+ (?:\u00b5s|ms|s)"
    rows = re.findall(rf"^(\d+)\s+(\d+)\s+({duration})\s+({duration})\s+1\.0 MiB \(\s*1048576 B\)\s+(-[\d.]+)\s+yes$",
                      out, re.M)
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3], out
    assert len({r[1] for r in rows}) == 4, "four distinct worker processes"
    assert [float(r[4]) for r in rows] == [-1.0, -2.0, -3.0, -4.0], out
    assert "total wall time:" in out


def test_demo_rejects_bad_size():
    rc, out, err = _run(["-m", "ascend_ipc.demo", "--mib", "0"], timeout=60)
    assert rc == 2
    assert "--mib must be a positive integer" in err


def test_verify_reports_a_wrong_slice():
    """The demo's check fails on a wrong byte (so its exit code means something)."""
    torch = pytest.importorskip("torch")
    from ascend_ipc import demo

    numel = 4096 + 3  # uneven slices
    slices = demo.plan_slices(numel, 4)
    assert slices[0][0] == 0 and slices[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))

    t = torch.empty(numel, dtype=torch.float32)
    for i, (start, stop) in enumerate(slices):
        t[start:stop] = demo.worker_value(i)
    assert all(r["mismatches"] == 0 for r in demo.verify(t, slices))
    assert sum(r["bytes_checked"] for r in demo.verify(t, slices)) == numel * 4

    bad_at = slices[2][0] + 17
    t[bad_at] = demo.worker_value(1)
    report = demo.verify(t, slices)
    assert [r["mismatches"] for r in report] == [0, 0, 1, 0]
    assert report[2]["first_bad"] == bad_at

    t[5] = float("nan")
    assert demo.verify(t, slices)[0]["mismatches"] == 1


def test_pattern_is_seen_by_check():
    torch = pytest.importorskip("torch")
    from ascend_ipc import demo

    t = torch.empty(1000, dtype=torch.float32)
    demo.fill_pattern(t)
    assert demo.pattern_mismatches(t[300:700], 300) == 0
    t[400] = -1.0
    assert demo.pattern_mismatches(t[300:700], 300) == 1


# --------------------------------------------------------------------------- info


def test_info_prints_version_provider_devices_and_memory():
    import ascend_ipc as aipc

    rc, out, err = _run(["-m", "ascend_ipc", "info"], timeout=60, ASCEND_IPC_EMU_DEVICES="3")
    assert rc == 0, err
    lines = out.splitlines()
    assert re.match(r"ascend_ipc \S+ \(Python \d+\.\d+", lines[0]), out
    assert f"provider: {aipc.provider()}" in lines
    if aipc.provider() == "emulated":
        assert "devices: 3" in lines, out
        assert sum(1 for line in lines if line.startswith("  device ")) == 3, out
        assert "ASCEND_IPC_EMU_DEVICES=3" in out


def test_info_json_matches_the_package():
    import ascend_ipc as aipc

    rc, out, err = _run(["-m", "ascend_ipc", "info", "--json"], timeout=60)
    assert rc == 0, err
    info = json.loads(out)
    assert info["provider"] == aipc.provider()
    assert info["device_count"] == aipc.device_count()
    assert [d["id"] for d in info["devices"]] == list(range(aipc.device_count()))
    if getattr(aipc, "__version__", None):
        assert info["version"] == aipc.__version__
    for dev in info["devices"]:
        if dev.get("total") is not None:
            assert dev["total"] > 0
            assert dev.get("free") is None or 0 <= dev["free"] <= dev["total"]


@pytest.mark.parametrize("args", [[], ["--help"], ["-h"]], ids=["no-args", "--help", "-h"])
def test_cli_usage(args):
    rc, out, err = _run(["-m", "ascend_ipc", *args], timeout=60)
    assert rc == 0, err
    assert "usage: python -m ascend_ipc" in out
    assert "info" in out and "demo" in out


def test_cli_unknown_command_exits_2():
    rc, out, err = _run(["-m", "ascend_ipc", "frobnicate"], timeout=60)
    assert rc == 2
    assert "invalid choice: 'frobnicate'" in err
    assert "usage: python -m ascend_ipc" in err
