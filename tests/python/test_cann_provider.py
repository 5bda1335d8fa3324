"""The cann provider (libascendcl.so opened with dlopen), exercised without an NPU.

The project's own build/libascendcl_emu.so is a real, independent implementation of the
CANN ABI, so pointing ASCEND_IPC_CANN_LIB at it runs the whole cann code path -- library
search and dlopen, symbol resolution, aclInit, error codes and messages through the loaded
library's aclGetRecentErrMsg, the kDLExtDev DLPack branch -- across processes. Provider
selection happens at import, so every case runs in a fresh interpreter.

Two more libraries are built here, at test time, with the C compiler:
  * a copy of the emulator library that does not export aclrtIpcMemSetAttr and
    aclrtIpcMemImportPidInterServer (an older CANN), for the degraded path;
  * a tiny fake libascendcl whose aclInit result and device count the test chooses, for
    the auto-selection fallbacks and the once-only aclInit.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = pathlib.Path(__file__).resolve().parent
EMU_LIB = ROOT / "build" / "libascendcl_emu.so"
OMITTED = ("aclrtIpcMemSetAttr", "aclrtIpcMemImportPidInterServer", "aclrtIpcGetEventHandle", "aclrtIpcOpenEventHandle")


def _tool_env() -> dict:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the sanitizer run preloads ASan into Python, not into make/cc
    return env


def _compiler() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the test libraries")
    return cc


def _build(cmd, what):
    r = subprocess.run(cmd, cwd=ROOT, env=_tool_env(), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"building {what} failed: {' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}")


@pytest.fixture(scope="session")
def emu_lib() -> str:
    """build/libascendcl_emu.so, brought up to date with `make lib` when make is there."""
    make = shutil.which("make")
    if make is not None:
        _build([make, "-s", "lib"], "build/libascendcl_emu.so (make lib)")
    elif not EMU_LIB.exists():
        pytest.skip("build/libascendcl_emu.so is missing and there is no make to build it (run `make lib`)")
    return str(EMU_LIB)


@pytest.fixture(scope="session")
def old_cann_lib(tmp_path_factory) -> str:
    """The emulator library without the calls of OMITTED, as an older CANN would lack them."""
    cc = _compiler()
    calls = (ROOT / "csrc" / "core" / "calls.h").read_text()
    names = set(re.findall(r"\bX\(\w+,\s*(acl\w+),", calls))
    assert set(OMITTED) <= names, names
    out = tmp_path_factory.mktemp("old_cann")
    script = out / "old.map"
    script.write_text("{\n  global:\n" + "".join(f"    {n};\n" for n in sorted(names - set(OMITTED))) +
                      "  local: *;\n};\n")
    lib = out / "libascendcl.so"
    sources = sorted(str(p) for d in ("core", "os", "emu", "api") for p in (ROOT / "csrc" / d).rglob("*.c"))
    # An older CANN: the calls of OMITTED missing, and no version known from the library itself.
    _build([cc, "-std=gnu11", "-O1", "-fPIC", "-pthread", "-fvisibility=hidden", "-DACL_BUILDING_LIBRARY",
            "-DAIPC_EMU_VERSION_KNOWN=0", "-Icsrc/include", "-Icsrc", "-shared", "-o", str(lib), *sources,
            f"-Wl,--version-script={script}", "-Wl,-z,defs", "-ldl", "-lm"], "the reduced emulator library")
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                              env=_tool_env()).stdout if shutil.which("nm") else ""
    for name in OMITTED:
        assert not re.search(rf"\b{name}\b", exported), exported
    return str(lib)


FAKE_ACL = r"""
/* A minimal libascendcl: aclInit's result and the device count come from the environment. */
#include <stdlib.h>
#include <string.h>
#include "acl/acl.h"

static int init_calls;
static const char *pending;

__attribute__((visibility("default"))) int fakeAclInitCalls(void) { return init_calls; }
const char *aclGetRecentErrMsg(void) { const char *m = pending; pending = NULL; return m; }
aclError aclInit(const char *configPath) {
  (void)configPath;
  init_calls++;
  const char *rc = getenv("FAKE_ACL_INIT_RC");
  if (rc != NULL && atoi(rc) != 0) { pending = "fake: aclInit refused"; return atoi(rc); }
  return ACL_SUCCESS;
}
aclError aclrtGetDeviceCount(uint32_t *count) {
  const char *n = getenv("FAKE_ACL_DEVICES");
  *count = n != NULL ? (uint32_t)atoi(n) : 1;
  return ACL_SUCCESS;
}
aclError aclrtSetDevice(int32_t deviceId) { (void)deviceId; return ACL_SUCCESS; }
aclError aclrtGetDevice(int32_t *deviceId) { *deviceId = 0; return ACL_SUCCESS; }
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
  (void)policy;
  return posix_memalign(devPtr, 4096, size) == 0 ? ACL_SUCCESS : ACL_ERROR_BAD_ALLOC;
}
aclError aclrtFree(void *devPtr) { free(devPtr); return ACL_SUCCESS; }
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  (void)kind;
  if (count > destMax) return ACL_ERROR_INVALID_PARAM;
  memcpy(dst, src, count);
  return ACL_SUCCESS;
}
"""


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory) -> str:
    cc = _compiler()
    out = tmp_path_factory.mktemp("fake_cann")
    src = out / "fake_acl.c"
    src.write_text(FAKE_ACL)
    lib = out / "libascendcl.so"
    _build([cc, "-std=gnu11", "-O1", "-fPIC", "-shared", "-Icsrc/include", "-o", str(lib), str(src)],
           "the fake libascendcl")
    return str(lib)


def _cann_env(lib: str, **extra) -> dict:
    env = {"ASCEND_IPC_PROVIDER": "cann", "ASCEND_IPC_CANN_LIB": lib, "ASCEND_IPC_CANN_DLPACK": "",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.update(extra)
    return env


def _run_ok(python, code: str, env: dict, timeout: float = 120) -> str:
    rc, out, err = python(textwrap.dedent(code), env=env, timeout=timeout)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out


def _json(out: str):
    return json.loads(out.strip().splitlines()[-1])


def _scenario(python, lib: str, name: str, *args: str, **env):
    arglist = ", ".join(repr(a) for a in (name, *args))
    return _json(_run_ok(python, f"import cann_workers; cann_workers.main({arglist})", _cann_env(lib, **env)))


# --------------------------------------------------------------------------- selection and loading


def test_cann_provider_loads_the_library(python, emu_lib):
    out = _run_ok(python, """
        import json, ascend_ipc as a
        print(json.dumps({"provider": a.provider(), "info": a.provider_info(), "n": a.device_count(),
                          "mem": a.mem_info(1)}))
    """, _cann_env(emu_lib, ASCEND_IPC_EMU_DEVICES="3"))
    got = _json(out)
    assert got["provider"] == "cann"
    info = got["info"]
    assert info["name"] == "cann"
    assert info["library"] == os.path.realpath(emu_lib)
    # the emulator reports the CANN it follows, through CANN's version call
    assert info["version"] == "9.0.0" and info["version_source"] == "aclsysGetVersionStr(runtime)"
    assert info["dlpack_device_type"] == 12 and info["host_visible"] is False
    assert info["unsupported"] == {}
    assert info["selection"] == f"ASCEND_IPC_PROVIDER=cann: {os.path.realpath(emu_lib)}"
    assert got["n"] == 3
    assert 0 < got["mem"][1] and 0 <= got["mem"][0] <= got["mem"][1]


def test_auto_picks_cann_when_it_loads_and_has_devices(python, emu_lib):
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider()); print(a.provider_info()['selection'])",
                  _cann_env(emu_lib, ASCEND_IPC_PROVIDER="auto"))
    provider, selection = out.strip().splitlines()[-2:]
    assert provider == "cann"
    assert selection == f"auto: cann, {os.path.realpath(emu_lib)} with 8 device(s)"


@pytest.mark.parametrize("provider", ["auto", ""])
def test_auto_without_a_library_is_emulated_and_says_why(python, provider, tmp_path):
    missing = str(tmp_path / "libascendcl.so")
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider()); print(repr(a.provider_info()['selection']))",
                  _cann_env(missing, ASCEND_IPC_PROVIDER=provider))
    provider_name, selection = out.strip().splitlines()[-2:]
    assert provider_name == "emulated"
    assert "auto: emulated, because the cann provider is unavailable" in selection
    assert missing in selection and "cannot open shared object file" in selection


def test_explicit_cann_that_does_not_load_is_an_import_error(python, tmp_path):
    missing = str(tmp_path / "nowhere" / "libascendcl.so")
    rc, out, err = python("import ascend_ipc", env=_cann_env(missing))
    assert rc != 0
    assert "ImportError: ascend_ipc: ASCEND_IPC_PROVIDER=cann: could not load the CANN runtime" in err
    assert f"{missing}: cannot open shared object file: No such file or directory" in err


@pytest.mark.skipif(os.path.exists("/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so")
                    or ctypes.util.find_library("ascendcl") is not None,
                    reason="a CANN toolkit is installed where the search looks, so it would find it")
def test_search_order_lists_every_path_tried(python, tmp_path):
    home, toolkit = tmp_path / "home", tmp_path / "toolkit"
    rc, out, err = python("import ascend_ipc", env={
        "ASCEND_IPC_PROVIDER": "cann", "ASCEND_IPC_CANN_LIB": "", "ASCEND_HOME_PATH": str(home),
        "ASCEND_TOOLKIT_HOME": str(toolkit), "LD_LIBRARY_PATH": str(tmp_path)})
    assert rc != 0
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("tried:")) + 1
    tried = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        tried.append(line.strip().split(": ")[0])
    assert tried == [f"{home}/lib64/libascendcl.so", f"{toolkit}/lib64/libascendcl.so",
                     "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so", "libascendcl.so"], err
    assert "set ASCEND_IPC_CANN_LIB" in err and "set_env.sh" in err


def test_a_library_that_is_not_libascendcl_is_refused(python):
    rc, out, err = python("import ascend_ipc", env=_cann_env("libm.so.6"))
    assert rc != 0
    assert "libm.so.6: loaded, but it does not export aclInit" in err
    assert "aclrtMalloc" in err


def test_invalid_dlpack_switch_is_an_import_error(python, emu_lib):
    rc, out, err = python("import ascend_ipc", env=_cann_env(emu_lib, ASCEND_IPC_CANN_DLPACK="gpu"))
    assert rc != 0
    assert "ASCEND_IPC_CANN_DLPACK must be 'ext'" in err and "'gpu'" in err


def test_aclinit_runs_once_and_repeat_initialize_is_success(python, fake_lib):
    # A second module object runs module exec (and so the provider's init) again.
    out = _run_ok(python, f"""
        import ctypes, importlib.util, ascend_ipc as a
        spec = importlib.util.find_spec("ascend_ipc._C")
        again = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(again)
        print(a.provider(), again.provider(), ctypes.CDLL({fake_lib!r}).fakeAclInitCalls())
    """, _cann_env(fake_lib))
    assert out.split() == ["cann", "cann", "1"]
    # Another component (torch_npu) initialised first: ACL_ERROR_REPEAT_INITIALIZE counts as success.
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider())", _cann_env(fake_lib, FAKE_ACL_INIT_RC="100002"))
    assert out.split() == ["cann"]


def test_failed_aclinit(python, fake_lib):
    rc, out, err = python("import ascend_ipc", env=_cann_env(fake_lib, FAKE_ACL_INIT_RC="500000"))
    assert rc != 0
    assert "loaded, but aclInit failed: [500000]" in err and "fake: aclInit refused" in err
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider()); print(a.provider_info()['selection'])",
                  _cann_env(fake_lib, ASCEND_IPC_PROVIDER="auto", FAKE_ACL_INIT_RC="500000"))
    provider, selection = out.strip().splitlines()[-2:]
    assert provider == "emulated"
    assert "auto: emulated, because aclInit of" in selection and "fake: aclInit refused" in selection


def test_auto_needs_a_device(python, fake_lib):
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider()); print(a.provider_info()['selection'])",
                  _cann_env(fake_lib, ASCEND_IPC_PROVIDER="auto", FAKE_ACL_DEVICES="0"))
    provider, selection = out.strip().splitlines()[-2:]
    assert provider == "emulated"
    assert selection.endswith("has no usable device: it reports no device")
    # Asked for explicitly, cann is used even without devices.
    out = _run_ok(python, "import ascend_ipc as a; print(a.provider(), a.device_count())",
                  _cann_env(fake_lib, FAKE_ACL_DEVICES="0"))
    assert out.split() == ["cann", "0"]


def test_a_minimal_library_lacks_everything_else(python, fake_lib):
    out = _run_ok(python, """
        import json, numpy as np, ascend_ipc as a
        x = a.from_numpy(np.arange(4, dtype=np.float32))   # aclrtMalloc + aclrtMemcpy: present
        res = {"numpy": x.numpy().tolist(), "unsupported": a.provider_info()["unsupported"]}
        for name, fn in [("export", lambda: a.export(x)), ("zeros", lambda: a.zeros(4)),
                         ("bare_tgid", a.bare_tgid), ("mem_info", a.mem_info)]:
            try:
                fn()
            except a.AclError as e:
                res[name] = [e.code, e.name, e.call, e.message]
        print(json.dumps(res))
    """, _cann_env(fake_lib))
    got = _json(out)
    assert got["numpy"] == [0.0, 1.0, 2.0, 3.0]
    assert got["unsupported"]["aclrtIpcMemGetExportKey"] == "CANN 8.2.RC1"
    assert got["unsupported"]["aclrtIpcMemSetAttr"] == "CANN 8.5.0"
    assert got["unsupported"]["aclrtMemset"] == "a newer CANN"
    code, name, call, message = got["export"]
    assert (code, name, call) == (200006, "ACL_ERROR_FEATURE_UNSUPPORTED", "aclrtIpcMemGetExportKey")
    assert message.startswith("aclrtIpcMemGetExportKey is not available: ") and "CANN 8.2.RC1 and newer" in message
    assert got["zeros"][:3] == [200006, "ACL_ERROR_FEATURE_UNSUPPORTED", "aclrtMemset"]
    assert "needs a newer CANN" in got["zeros"][3]
    assert got["bare_tgid"][2] == "aclrtDeviceGetBareTgid" and "CANN 8.0.0" in got["bare_tgid"][3]
    assert got["mem_info"][2] == "aclrtGetMemInfo"


# --------------------------------------------------------------------------- IPC through the loaded library


def test_cross_process_round_trip(python, emu_lib):
    got = _scenario(python, emu_lib, "roundtrip")
    assert got["provider"] == "cann"
    assert "error" not in got["child"], got["child"]
    assert got["child"]["seen"] == list(range(16))
    assert got["child"]["dlpack_device"] == [12, 1]  # NPU memory of device 1
    assert got["exporter_sees"] == [2 * i for i in range(16)]  # the importer's write, no copy back
    assert got["child_after"]["after_exporter_write"] == [7] * 16
    assert got["exitcode"] == 0


def test_stream_ordered_hand_off_through_the_library(python, emu_lib):
    got = _scenario(python, emu_lib, "ordered")
    assert got["provider"] == "cann"
    assert "error" not in got["child"], got["child"]
    assert got["child"] == {"first": 3, "query": True}
    assert got["elapsed_ok"] is True and got["exitcode"] == 0


def test_two_opens_closed_younger_first(python, emu_lib):
    # CANN's rule, kept by the library: a close releases the key's oldest mapping.
    got = _scenario(python, emu_lib, "two_opens")
    assert "error" not in got, got["error"]
    assert got["distinct"] is True
    assert got["older_sees"] == list(range(10, 18))
    assert got["after_younger_closed"] == [2 * i for i in range(10, 18)]
    assert got["live"] == 0 and got["exitcode"] == 0
    assert got["exporter_sees"] == [2 * i for i in range(10, 18)]


def test_whitelist_refusal_comes_from_the_library(python, emu_lib):
    got = _scenario(python, emu_lib, "whitelist")
    assert got["error"] is None, got["error"]
    denied = got["denied"]
    assert denied["code"] == 207006 and denied["name"] == "ACL_ERROR_RT_NO_PERMISSION"
    assert denied["call"] == "aclrtIpcMemImportByKey"
    # The loaded library's own words (its aclGetRecentErrMsg), not a generic text.
    assert "is not on the whitelist" in denied["message"] and "aclrtIpcMemSetImportPid" in denied["message"]
    assert got["opened"] == {"opened": [0.0, 1.0, 2.0, 3.0]}


def test_error_mapping(python, emu_lib):
    out = _run_ok(python, """
        import json, numpy as np, ascend_ipc as a
        res = {}
        x = a.from_numpy(np.zeros(4, np.float32))
        cases = {
            "device": lambda: a.set_device(99),
            "memory": lambda: a.empty(2 << 20, "uint8"),
            "link": lambda: a.export(x, link="ub_one_port"),
            "key": lambda: a.IpcHandle("bogus-key", 4096).open(),
        }
        for name, fn in cases.items():
            try:
                fn()
                res[name] = None
            except a.AclError as e:
                res[name] = [e.code, e.name, e.call, e.message, str(e)]
        print(json.dumps(res))
    """, _cann_env(emu_lib, ASCEND_IPC_EMU_MEMORY="1M"))
    got = _json(out)
    assert got["device"][:3] == [107001, "ACL_ERROR_RT_INVALID_DEVICEID", "aclrtSetDevice"]
    assert "99" in got["device"][3] and got["device"][4].startswith("[107001 ACL_ERROR_RT_INVALID_DEVICEID] ")
    assert got["memory"][:3] == [207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "aclrtMalloc"]
    assert got["link"][:3] == [207021, "ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED", "aclrtIpcMemSetAttr"]
    assert got["key"][:3] == [100000, "ACL_ERROR_INVALID_PARAM", "aclrtIpcMemImportByKey"]
    for case in got.values():
        assert case[3], case  # every failure carries the library's message


def test_wrapped_foreign_memory_is_exported(python, emu_lib):
    got = _scenario(python, emu_lib, "wrap", emu_lib)
    assert got["region"] == [4 * 4096, 4 * 4096, False, True]
    assert got["same_key_twice"] is True
    assert got["child"] == {"seen": [1.0, 2.0, 3.0, 4.0], "offset": 8192}
    assert got["child_wrote"] == "wrote"
    assert got["exporter_sees"] == [100.0, 101.0, 102.0, 103.0]
    assert len(got["misaligned"]) == 2 and all("multiples of the page size 4096" in m for m in got["misaligned"])
    assert "overlaps device memory that ascend_ipc allocated here" in got["overlap"]
    assert got["live_after_close"] == ["owned"]  # the borrowed record went; the memory was not freed by us
    assert got["free_rc"] == 0  # ...its owner frees it


def test_share_of_a_torch_npu_tensor_exports_its_segment(python, emu_lib):
    pytest.importorskip("torch")
    got = _scenario(python, emu_lib, "npu_share", emu_lib)
    expected = [[float(16 + 4 * r + c) for c in range(4)] for r in range(4)]
    seg = got["segment"]
    assert "error" not in seg["child"], seg["child"]
    # The whole 2 MiB segment is exported; the handle carries where the view starts in it.
    assert (seg["offset"], seg["size"]) == (8704 + 64, 2 << 20)
    assert (seg["shape"], seg["strides"], seg["torch_dtype"]) == ([4, 4], [16, 4], "float32")
    assert seg["child"] == {"values": expected, "shape": [4, 4]}
    assert got["storage_kept_by_handle"] is True and got["storage_released_on_close"] is True
    # Without segment information: the page-aligned range around the storage.
    pages = got["pages"]
    assert (pages["offset"], pages["size"]) == (8704 + 64 - 8192, 4096)
    assert pages["child"] == {"values": expected, "shape": [4, 4]}
    # An expandable segment (physical memory mapped piecewise): one shareable handle per physical
    # allocation the view spans; the receiver maps them side by side and sees the view whole.
    assert got["expandable"] == {"chunks": 2, "offset": (2 << 20) - 32, "child": {"values": expected, "shape": [4, 4]}}
    assert got["free_rc"] == 0


# --------------------------------------------------------------------------- DLPack: kDLExtDev


def test_npu_memory_is_kdlextdev_and_refused_by_numpy(python, emu_lib):
    out = _run_ok(python, """
        import json, numpy as np, ascend_ipc as a
        x = a.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device=2)
        res = {"device": list(x.__dlpack_device__())}
        for name, fn in [("from_dlpack", lambda: np.from_dlpack(x)),
                         ("from_dlpack_cpu", lambda: np.from_dlpack(x, device="cpu")),
                         ("asarray_nocopy", lambda: np.asarray(x, copy=False))]:
            try:
                fn()
                res[name] = None
            except Exception as e:
                res[name] = [type(e).__name__, str(e)]
        res["own_device_capsule"] = type(x.__dlpack__(dl_device=(12, 2))).__name__
        res["numpy"] = x.numpy().tolist()          # device -> host aclrtMemcpy
        res["asarray"] = np.asarray(x).tolist()    # a copy, as numpy() 
        x[1].copy_from([7, 8, 9])                  # host -> device aclrtMemcpy into a view
        res["after_copy_from"] = x.numpy().tolist()
        print(json.dumps(res))
    """, _cann_env(emu_lib))
    got = _json(out)
    assert got["device"] == [12, 2]
    kind, message = got["from_dlpack"]
    assert kind == "BufferError" and "NPU device memory" in message and "DeviceArray.numpy()" in message
    kind, message = got["from_dlpack_cpu"]
    assert kind == "BufferError" and "kDLExtDev" in message and "CPU cannot address" in message
    assert got["asarray_nocopy"][0] == "ValueError" and "NPU memory" in got["asarray_nocopy"][1]
    assert got["own_device_capsule"] == "PyCapsule"
    assert got["numpy"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] == got["asarray"]
    assert got["after_copy_from"] == [[0.0, 1.0, 2.0], [7.0, 8.0, 9.0]]


def test_torch_without_torch_npu_is_told_why(python, emu_lib):
    pytest.importorskip("torch")
    out = _run_ok(python, """
        import importlib.util, ascend_ipc.torch as at
        if importlib.util.find_spec("torch_npu") is not None:
            print("has torch_npu")
        else:
            try:
                at.empty(4)
                print("no error")
            except RuntimeError as e:
                print(e)
    """, _cann_env(emu_lib))
    if out.strip() == "has torch_npu":
        pytest.skip("torch_npu is installed here")
    assert "need torch_npu" in out and "kDLExtDev" in out


def test_cpu_switch_for_host_memory_libraries(python, emu_lib):
    out = _run_ok(python, """
        import json, numpy as np, ascend_ipc as a
        x = a.from_numpy(np.arange(4, dtype=np.int32), device=3)
        n = np.from_dlpack(x)
        n += 10
        print(json.dumps({"device": list(x.__dlpack_device__()), "seen": x.numpy().tolist(),
                          "info": a.provider_info()["dlpack_device_type"], "visible": a.provider_info()["host_visible"]}))
    """, _cann_env(emu_lib, ASCEND_IPC_CANN_DLPACK="cpu"))
    got = _json(out)
    assert got == {"device": [1, 0], "seen": [10, 11, 12, 13], "info": 1, "visible": True}


def test_physical_memory_sharing_through_the_cann_provider(python, emu_lib):
    # The VMM calls forward like the others: two processes share physical memory through the
    # library as CANN's libascendcl, mapping it side by side with memory of their own.
    out = _run_ok(python, """
        import json, multiprocessing as mp, numpy as np, ascend_ipc as a
        g = a.granularity()
        pm = a.PhysicalMemory(g)
        r = a.VirtualRange(g)
        arr = r.map(pm, 0)
        arr.copy_from(a.from_numpy(np.full(g, 7, np.uint8)))
        h = pm.export(pids=None)

        def child(conn):
            mine = h.open()
            r2 = a.VirtualRange(2 * g)
            seen = r2.map(mine, g).numpy()
            conn.send([int(seen[0]), int(seen[-1]), int(seen.sum() // g)])

        ctx = mp.get_context("fork")
        here, there = ctx.Pipe()
        p = ctx.Process(target=child, args=(there,))
        p.start()
        there.close()
        got = here.recv()
        p.join(30)
        print(json.dumps({"seen": got, "exit": p.exitcode, "kind": list(arr.__dlpack_device__())}))
    """, _cann_env(emu_lib))
    got = _json(out)
    assert got == {"seen": [7, 7, 7], "exit": 0, "kind": [12, 0]}


# --------------------------------------------------------------------------- an older CANN


def test_missing_symbols_disable_only_their_calls(python, old_cann_lib):
    got = _scenario(python, old_cann_lib, "degraded")
    assert got["provider"] == "cann"
    assert got["unsupported"] == {call: "CANN 8.5.0" for call in OMITTED}
    for key, symbol in (("set_attr", "aclrtIpcMemSetAttr"), ("inter_server", "aclrtIpcMemImportPidInterServer")):
        err = got[key]
        assert err is not None, key
        assert (err["code"], err["name"], err["call"]) == (200006, "ACL_ERROR_FEATURE_UNSUPPORTED", symbol)
        assert err["message"].startswith(f"{symbol} is not available: {os.path.realpath(old_cann_lib)}")
        assert "it is in CANN 8.5.0 and newer" in err["message"]
    assert got["self_import"] == list(range(8))
    assert got["plain_export"] == list(range(8))
    err = got["ipc_event"]  # an older CANN: IPC events only are missing
    assert (err["code"], err["name"], err["call"]) == (200006, "ACL_ERROR_FEATURE_UNSUPPORTED", "aclrtIpcGetEventHandle")
    assert got["plain_event"] == [3 * i for i in range(8)]


# --------------------------------------------------------------------------- info


def test_info_command_on_cann(python, old_cann_lib):
    env = _cann_env(old_cann_lib, ASCEND_IPC_EMU_DEVICES="2")
    rc, out, err = python("import sys; from ascend_ipc.__main__ import main; sys.exit(main(['info']))", env=env)
    assert rc == 0, err
    lines = out.splitlines()
    assert "provider: cann" in lines
    assert f"  library: {os.path.realpath(old_cann_lib)}" in lines
    assert "  version: unknown" in lines
    assert "  dlpack: kDLExtDev (12), NPU memory, reached by the CPU only through copies" in lines
    assert ("  unsupported: aclrtIpcGetEventHandle (in CANN 8.5.0), aclrtIpcMemImportPidInterServer (in CANN 8.5.0), "
            "aclrtIpcMemSetAttr (in CANN 8.5.0), aclrtIpcOpenEventHandle (in CANN 8.5.0)" in lines)
    assert "devices: 2" in lines and sum(line.startswith("  device ") for line in lines) == 2
    rc, out, err = python("import sys; from ascend_ipc.__main__ import main; sys.exit(main(['info', '--json']))",
                          env=env)
    assert rc == 0, err
    info = json.loads(out)
    assert info["provider"] == "cann" and info["device_count"] == 2
    assert info["provider_info"]["library"] == os.path.realpath(old_cann_lib)
    assert set(info["provider_info"]["unsupported"]) == set(OMITTED)
    assert info["environment"]["ASCEND_IPC_CANN_LIB"] == old_cann_lib


def test_emulated_provider_info(python):
    out = _run_ok(python, "import json, ascend_ipc as a; print(json.dumps(a.provider_info()))",
                  {"ASCEND_IPC_PROVIDER": "emulated"})
    info = _json(out)
    assert info == {"name": "emulated", "library": None, "version": None, "version_source": None,
                    "dlpack_device_type": 1, "host_visible": True, "unsupported": {},
                    "selection": "ASCEND_IPC_PROVIDER=emulated"}
