"""The cann provider on real Ascend NPUs (skipped unless ASCEND_IPC_HARDWARE=1).

Run on a machine with the CANN toolkit and at least one NPU (docs/hardware.md):

    source /usr/local/Ascend/ascend-toolkit/set_env.sh
    ASCEND_IPC_HARDWARE=1 python -m pytest -ra tests/python/test_hardware.py

Every case runs in fresh interpreters with ASCEND_IPC_PROVIDER=cann (ASCEND_IPC_CANN_LIB is
passed through if set). The torch cases need torch_npu and skip without it.
"""

from __future__ import annotations

import json
import os
import pathlib
import textwrap

import pytest

HARDWARE = os.environ.get("ASCEND_IPC_HARDWARE") == "1"
TESTS = pathlib.Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.skipif(not HARDWARE, reason="needs Ascend NPUs with CANN: run with ASCEND_IPC_HARDWARE=1 on a "
                                            "CANN machine (see docs/hardware.md)"),
    pytest.mark.timeout(600),
]


def _env(**extra) -> dict:
    env = {"ASCEND_IPC_PROVIDER": "cann",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.update(extra)
    return env


def _run_ok(python, code: str, timeout: float = 300, **extra) -> str:
    rc, out, err = python(textwrap.dedent(code), env=_env(**extra), timeout=timeout)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out


def _json(out: str):
    return json.loads(out.strip().splitlines()[-1])


def _scenario(python, name: str, *args: str):
    arglist = ", ".join(repr(a) for a in (name, *args))
    return _json(_run_ok(python, f"import cann_workers; cann_workers.main({arglist})"))


@pytest.fixture(scope="module")
def npu(python_module):
    """provider_info() and the device count of the real runtime; skips if the IPC calls are missing."""
    out = python_module("""
        import json, ascend_ipc as a
        print(json.dumps({"info": a.provider_info(), "count": a.device_count()}))
    """)
    got = _json(out)
    ipc = {"aclrtIpcMemGetExportKey", "aclrtIpcMemImportByKey", "aclrtIpcMemClose", "aclrtIpcMemSetImportPid"}
    missing = ipc & set(got["info"]["unsupported"])
    if missing:
        pytest.skip(f"this CANN lacks {sorted(missing)} (needs {got['info']['unsupported'][sorted(missing)[0]]})")
    return got


@pytest.fixture(scope="module")
def python_module():
    from conftest import run_python

    def run(code: str) -> str:
        rc, out, err = run_python(textwrap.dedent(code), env=_env(), timeout=300)
        assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
        return out

    return run


def test_runtime_and_devices(npu, python):
    info = npu["info"]
    assert info["name"] == "cann"
    assert os.path.isfile(info["library"]), info
    assert isinstance(info["version"], str) and info["version"]
    assert info["dlpack_device_type"] == 12 and info["host_visible"] is False
    assert npu["count"] >= 1
    out = _run_ok(python, """
        import json, ascend_ipc as a
        print(json.dumps([a.mem_info(d) for d in range(a.device_count())]))
    """)
    for free, total in _json(out):
        assert 0 <= free <= total and total > 0
    rc, out, err = python("import sys; from ascend_ipc.__main__ import main; sys.exit(main(['info']))", env=_env())
    assert rc == 0, err
    assert "provider: cann" in out and f"  library: {info['library']}" in out


def test_host_copies_and_numpy_refusal(npu, python):
    out = _run_ok(python, """
        import json, numpy as np, ascend_ipc as a
        x = a.from_numpy(np.arange(1 << 20, dtype=np.float32))
        x.copy_from(np.full(1 << 20, 3, dtype=np.float32))
        try:
            np.from_dlpack(x)
            refused = None
        except BufferError as e:
            refused = str(e)
        print(json.dumps({"sum": float(x.numpy().sum()), "device": list(x.__dlpack_device__()), "refused": refused}))
    """)
    got = _json(out)
    assert got["sum"] == 3.0 * (1 << 20)
    assert got["device"][0] == 12
    assert got["refused"] and "NPU device memory" in got["refused"]


def test_ipc_round_trip(npu, python):
    device = "1" if npu["count"] > 1 else "0"
    got = _scenario(python, "roundtrip", device)
    assert "error" not in got["child"], got["child"]
    assert got["child"]["seen"] == list(range(16))
    assert got["child"]["dlpack_device"] == [12, int(device)]
    assert got["exporter_sees"] == [2 * i for i in range(16)]
    assert got["child_after"]["after_exporter_write"] == [7] * 16
    assert got["exitcode"] == 0


def test_whitelist(npu, python):
    got = _scenario(python, "whitelist")
    assert got["error"] is None, got["error"]
    denied = got["denied"]
    assert denied is not None, "a process off the whitelist could import"
    assert denied["code"] != 0 and denied["call"] == "aclrtIpcMemImportByKey"
    assert got["opened"] == {"opened": [0.0, 1.0, 2.0, 3.0]}


def test_cross_device_import(npu, python):
    if npu["count"] < 2:
        pytest.skip("needs two NPUs")
    got = _scenario(python, "cross_device", "0", "1")
    assert "error" not in got, got.get("error")
    # CANN refuses host copies of memory imported from another device on some products;
    # either outcome must be a clear result, never a crash.
    if "values" in got:
        assert got["values"] == [float(i) for i in range(8)]
    else:
        refusal = got.get("refused") or got.get("open_refused")
        assert refusal and refusal["code"] != 0 and refusal["message"], got
    assert got["exitcode"] == 0


@pytest.mark.parametrize("kind", ["ascend", "caching", "bfloat16"])
def test_torch_npu_share(npu, python, kind):
    probe = _run_ok(python, "import importlib.util as u; print(u.find_spec('torch_npu') is not None)")
    if probe.strip().splitlines()[-1] != "True":
        pytest.skip("torch_npu is not installed")
    got = _scenario(python, "torch_npu", kind)
    assert "error" not in got["child"], got["child"]
    assert got["child"]["device"].startswith("npu")
    assert got["child"]["values"] == got["expected"]
    assert got["written"] == "written"
    assert got["exporter_after"] == [v + 1 for v in got["expected"]]
    assert got["closed"] == "closed" and got["exitcode"] == 0
    if kind == "caching":
        assert got["offset"] % 4 == 0 and got["size"] % 4096 == 0
