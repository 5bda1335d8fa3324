"""The module: provider selection, device functions, AclError, laziness of torch."""

import gc
import os
import pickle
import sys

import pytest

import ascend_ipc as aipc
from ascend_ipc import _C

pytestmark = pytest.mark.timeout(60)


def test_public_names():
    for name in aipc.__all__:
        assert hasattr(aipc, name), name
    assert aipc.__version__
    assert aipc.DeviceArray.__module__ == "ascend_ipc._C"
    assert aipc.IpcHandle.__module__ == "ascend_ipc._C"
    assert issubclass(aipc.AclError, Exception)
    # the documented constants, at package level
    assert aipc.PAGE_SIZE == 4096
    h = aipc.export(aipc.empty(4))
    assert aipc.KEY_LEN == 65 and len(h.key) < aipc.KEY_LEN  # the C buffer size, NUL included


def test_provider_and_devices():
    assert aipc.provider() == "emulated"
    n = aipc.device_count()
    assert n == int(os.environ.get("ASCEND_IPC_EMU_DEVICES", "8"))
    assert aipc.bare_tgid() == os.getpid()
    free, total = aipc.mem_info()
    assert 0 <= free <= total and total > 0
    assert aipc.mem_info(n - 1)[1] == total


def test_set_device_is_per_thread():
    import threading

    before = aipc.current_device()
    try:
        aipc.set_device(3)
        assert aipc.current_device() == 3
        seen = []
        t = threading.Thread(target=lambda: seen.append(aipc.current_device()))
        t.start()
        t.join()
        assert seen == [0]  # a new thread starts on device 0
    finally:
        aipc.set_device(before)


def test_device_errors():
    with pytest.raises(aipc.AclError) as info:
        aipc.set_device(aipc.device_count())
    e = info.value
    assert e.code == 107001
    assert e.name == "ACL_ERROR_RT_INVALID_DEVICEID"
    assert e.call == "aclrtSetDevice"
    assert str(e).startswith("[107001 ACL_ERROR_RT_INVALID_DEVICEID] ")
    assert e.message and e.message in str(e)
    with pytest.raises(aipc.AclError) as info:
        aipc.set_device(-1)
    assert info.value.code == 107001
    for bad in ("0", 1.0, None, True):
        with pytest.raises(TypeError):
            aipc.set_device(bad)
    with pytest.raises(OverflowError):
        aipc.set_device(1 << 40)
    with pytest.raises(aipc.AclError) as info:
        aipc.mem_info(aipc.device_count())
    assert info.value.code == 107001
    with pytest.raises(ValueError):
        aipc.mem_info(-1)
    with pytest.raises(TypeError):
        aipc.mem_info("0")


def test_acl_error_pickles():
    with pytest.raises(aipc.AclError) as info:
        aipc.set_device(-5)
    e2 = pickle.loads(pickle.dumps(info.value))
    assert type(e2) is aipc.AclError
    assert (e2.code, e2.name, e2.message, str(e2)) == (info.value.code, info.value.name, info.value.message,
                                                     str(info.value))


def test_messages_are_not_stale():
    # A failure's message belongs to that failure, not to an earlier one.
    with pytest.raises(aipc.AclError) as first:
        aipc.set_device(99)
    with pytest.raises(aipc.AclError) as second:
        aipc.empty(4, device=77)
    assert "77" in second.value.message
    assert "99" not in second.value.message
    assert first.value.message != second.value.message


def test_not_instantiable():
    with pytest.raises(TypeError):
        aipc.DeviceArray()
    with pytest.raises(TypeError):
        aipc.DeviceArray.__new__(aipc.DeviceArray)


def test_import_does_not_import_torch(python):
    rc, out, err = python("import sys, ascend_ipc; print('torch' in sys.modules)")
    assert rc == 0, err
    assert out.strip() == "False"


def test_torch_submodule_is_lazy_attribute(python):
    pytest.importorskip("torch", reason="ascend_ipc.torch needs torch, which is not installed for this Python")
    rc, out, err = python("import ascend_ipc, sys; m = ascend_ipc.torch; print(m.__name__, 'torch' in sys.modules)")
    assert rc == 0, err
    assert out.split() == ["ascend_ipc.torch", "True"]


# No CANN library at this path: `cann` cannot load, `auto` falls back to the emulator
# (whatever CANN the machine has; test_cann_provider.py covers the cann provider).
_NO_CANN = {"ASCEND_IPC_CANN_LIB": "/nonexistent/libascendcl.so"}


@pytest.mark.parametrize(
    "value, message",
    [
        ("cann", "ASCEND_IPC_PROVIDER=cann: could not load the CANN runtime"),
        ("bogus", "must be 'auto', 'emulated' or 'cann'"),
    ],
)
def test_provider_env_errors(python, value, message):
    rc, out, err = python("import ascend_ipc", env={"ASCEND_IPC_PROVIDER": value, **_NO_CANN})
    assert rc != 0
    assert "ImportError" in err and message in err


@pytest.mark.parametrize("value", ["auto", "emulated", ""])
def test_provider_env_ok(python, value):
    rc, out, err = python("import ascend_ipc; print(ascend_ipc.provider())",
                          env={"ASCEND_IPC_PROVIDER": value, **_NO_CANN})
    assert rc == 0, err
    assert out.strip() == "emulated"


def test_emulated_device_count_env(python):
    rc, out, err = python("import ascend_ipc; print(ascend_ipc.device_count())", env={"ASCEND_IPC_EMU_DEVICES": "3"})
    assert rc == 0, err
    assert out.strip() == "3"


def test_capacity_error(python):
    code = (
        "import ascend_ipc as a\n"
        "try:\n"
        "    a.empty(2 << 20, dtype='uint8')\n"
        "except a.AclError as e:\n"
        "    print(e.code, e.name)\n"
        "x = a.empty(512 << 10, dtype='uint8'); print(x.nbytes)\n"
    )
    rc, out, err = python(code, env={"ASCEND_IPC_EMU_MEMORY": "1M"})
    assert rc == 0, err
    assert out.split() == ["207001", "ACL_ERROR_RT_MEMORY_ALLOCATION", str(512 << 10)]


def test_module_state_survives_reimport():
    # The extension is multi-phase: a second module object has state of its own.
    import importlib.util

    spec = importlib.util.find_spec("ascend_ipc._C")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod is not _C
    assert mod.AclError is not _C.AclError
    a = mod.empty(3)
    assert type(a) is mod.DeviceArray and type(a) is not aipc.DeviceArray
    with pytest.raises(TypeError):
        aipc.export(a)  # types are per module object
    h = mod.export(a)
    with h.open() as b:
        assert b.shape == (3,)
    a.close()
    del mod, a, h, b
    gc.collect()


def test_a_module_object_without_callbacks_says_so():
    # The extension never imports the package: ascend_ipc/__init__.py hands it what it calls
    # back into, and a module object nobody registered with says so instead of importing.
    import importlib.util

    spec = importlib.util.find_spec("ascend_ipc._C")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = mod.empty(3)
    h = mod.export(a)
    with pytest.raises(RuntimeError, match="no hold callback is registered"):
        pickle.dumps(h)
    with pytest.raises(RuntimeError, match="no open_torch callback is registered"):
        h.open_torch()
    with pytest.raises(TypeError, match="needs a callable hold"):
        mod._register_callbacks(hold=1, release=print, open_torch=print)
    assert pickle.loads(pickle.dumps(aipc.export(aipc.empty(1)))) is not None  # the package's own still pickles
    a.close()
    del mod, a, h
    gc.collect()


@pytest.mark.skipif(os.environ.get("ASCEND_IPC_EXPECT_SANITIZED") != "1",
                    reason="set ASCEND_IPC_EXPECT_SANITIZED=1 when testing an ASCEND_IPC_SANITIZE=1 build")
def test_extension_is_the_sanitized_build():
    # Guards the sanitizer CI run against testing a plain build by mistake.
    import subprocess

    out = subprocess.run(["ldd", _C.__file__], capture_output=True, text=True, check=True).stdout
    assert "libasan" in out and "libubsan" in out, out
