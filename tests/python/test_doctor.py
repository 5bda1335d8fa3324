"""``python -m ascend_ipc doctor``, run as real subprocesses (and its parsers, in process).

The open-file limit of each run is set in the child (preexec_fn), so the outcome does not
depend on the limit the tests happen to run under. The cann cases reuse the libraries of
test_cann_provider.py: its fake libascendcl (only the calls a runtime cannot do without,
so every IPC call is missing) and the emulator library without the CANN 8.5.0 calls.
Namespaces are provoked with unshare(1) where this machine lets us, else skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys

import pytest
from conftest import run_command

import ascend_ipc as aipc
from ascend_ipc import _doctor
from test_cann_provider import FAKE_ACL, OMITTED, _build, _compiler, old_cann_lib  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(300)

# The folder the package under test was imported from (the source tree when installed
# editable, site-packages otherwise): the doctor's process must import the same one.
PACKAGE_HOME = pathlib.Path(aipc.__file__).resolve().parents[1]
CHECKS = {"open_files", "provider", "pid_namespace", "net_namespace", "supernode", "ptrace_scope", "sharing"}
LABELS = ("ok", "info", "warn", "FAIL")


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_HOME), env.get("PYTHONPATH")) if p)
    env["ASCEND_IPC_PROVIDER"] = "emulated"  # unless a test says otherwise: the machine may have CANN
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _nofile(soft: int):
    def apply():
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
    return apply


def _doctor_run(*args: str, soft=None, prefix=(), timeout: float = 180, **env):
    """``[prefix...] python -m ascend_ipc doctor args``: (rc, stdout, stderr)."""
    return run_command([*prefix, sys.executable, "-m", "ascend_ipc", "doctor", *args], env=_env(**env),
                       timeout=timeout, preexec_fn=_nofile(soft) if soft is not None else None)


def _lines_by_title(out: str) -> dict:
    """{check title: its status line} of the text report."""
    found = {}
    for line in out.splitlines():
        label = line[:5].strip()
        if label in LABELS and line[6:7] != " ":
            title = line[6:].split("  ")[0].strip()
            found[title] = line
    return found


def _hard_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _ample_soft() -> int:
    hard = _hard_limit()
    if hard != resource.RLIM_INFINITY and hard < _doctor.RECOMMENDED_NOFILE:
        pytest.skip(f"the hard RLIMIT_NOFILE here is {hard}, below the doctor's {_doctor.RECOMMENDED_NOFILE}: "
                    "the all-ok case cannot be set up without privilege")
    return _doctor.RECOMMENDED_NOFILE


# --------------------------------------------------------------------------- the whole report


def test_all_well_exits_0():
    rc, out, err = _doctor_run(soft=_ample_soft())
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    lines = _lines_by_title(out)
    assert set(lines) == {"open files", "provider", "pid namespace", "net namespace", "super-node", "ptrace scope",
                          "sharing"}, out
    assert not any(line.startswith("FAIL") for line in out.splitlines()), out
    assert lines["open files"].startswith("ok"), out
    assert lines["provider"].startswith("ok") and "ASCEND_IPC_PROVIDER=emulated" in lines["provider"], out
    assert lines["sharing"].startswith("ok") and "whitelisted by bare_tgid()" in lines["sharing"], out
    assert lines["ptrace scope"].startswith("info") and "not needed by ascend_ipc" in lines["ptrace scope"], out
    if hasattr(aipc._C, "supernode_info"):
        assert "a server of the emulated super-node" in lines["net namespace"], out
        assert lines["super-node"].startswith("info") and "usable" in lines["super-node"], out
    else:
        assert "keys can be opened only by processes in the same network namespace as the exporter" in out
    assert out.rstrip().splitlines()[-1].endswith("exit status 0)"), out


def test_low_open_file_limit_fails_and_names_the_fix():
    hard = _hard_limit()
    rc, out, err = _doctor_run(soft=256)
    assert rc == 1, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["open files"]
    assert line.startswith("FAIL") and "soft 256" in line, out
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    assert f"fix: ulimit -n {hard_text}" in out, out
    assert "resource.setrlimit(resource.RLIMIT_NOFILE" in out, out
    assert "something needs fixing" in out and "exit status 1" in out, out
    # Everything else still runs and passes under the low limit.
    assert _lines_by_title(out)["sharing"].startswith("ok"), out


def test_middling_open_file_limit_warns_and_exits_0():
    hard = _hard_limit()
    if hard != resource.RLIM_INFINITY and hard <= 2048:
        pytest.skip(f"the hard RLIMIT_NOFILE here is {hard}: no soft limit between 1024 and it to try")
    rc, out, err = _doctor_run(soft=2048)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["open files"]
    assert line.startswith("warn") and "soft 2048" in line, out
    assert "works, with warnings" in out, out


def test_json_report():
    soft = _ample_soft()
    rc, out, err = _doctor_run("--json", soft=soft)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    report = json.loads(out)
    import ascend_ipc

    assert report["version"] == ascend_ipc.__version__
    assert report["provider"] == "emulated"
    assert report["exit_status"] == 0 and report["status"] in ("ok", "info", "warn")
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == CHECKS
    for c in checks.values():
        assert c["status"] in ("ok", "info", "warn", "fail"), c
        assert isinstance(c["summary"], str) and c["summary"]
        assert isinstance(c["details"], list) and isinstance(c["fix"], list) and isinstance(c["data"], dict)
    files = checks["open_files"]["data"]
    assert files["soft"] == soft and files["minimum"] == _doctor.MIN_NOFILE
    assert files["raised_by_runtime"] is True
    pid = checks["pid_namespace"]["data"]
    assert pid["namespace"] == os.readlink("/proc/self/ns/pid")  # the test's namespace is the child's
    assert pid["bare_tgid"] == pid["getpid"]  # the emulator's bare tgid is the pid
    assert checks["net_namespace"]["data"]["namespace"] == os.readlink("/proc/self/ns/net")
    yama = checks["ptrace_scope"]
    assert yama["status"] == "info"
    if os.path.exists("/proc/sys/kernel/yama/ptrace_scope"):
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            assert yama["data"] == {"ptrace_scope": int(f.read()), "yama": True}
    else:
        assert yama["data"] == {"ptrace_scope": None, "yama": False}
    assert checks["sharing"]["status"] == "ok" and checks["sharing"]["data"]["whitelisted"]


def test_json_of_a_failure_exits_1():
    rc, out, err = _doctor_run("--json", soft=256)
    assert rc == 1, err
    report = json.loads(out)
    assert report["status"] == "fail" and report["exit_status"] == 1
    files = next(c for c in report["checks"] if c["name"] == "open_files")
    assert files["status"] == "fail" and files["data"]["soft"] == 256
    assert any(f.startswith("ulimit -n ") for f in files["fix"]), files


def test_auto_without_a_toolkit_says_so():
    if any(os.path.exists(p) for p in _doctor._expected_libraries({})):
        pytest.skip("a CANN toolkit is installed at its default path here")
    rc, out, err = _doctor_run(soft=_ample_soft(), ASCEND_IPC_PROVIDER="auto", ASCEND_IPC_CANN_LIB=None,
                               ASCEND_HOME_PATH=None, ASCEND_TOOLKIT_HOME=None, LD_LIBRARY_PATH=None)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["provider"]
    if "cann" in out.splitlines()[0]:
        pytest.skip("libascendcl.so is on the loader's path here: auto chose cann")
    assert line.startswith("ok") and "no CANN toolkit found; emulated provider in use" in line, out


def test_auto_with_a_named_library_that_does_not_load_warns(tmp_path):
    missing = tmp_path / "lib64" / "libascendcl.so"
    rc, out, err = _doctor_run(soft=_ample_soft(), ASCEND_IPC_PROVIDER="auto", ASCEND_IPC_CANN_LIB=str(missing))
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["provider"]
    assert line.startswith("warn") and f"ASCEND_IPC_CANN_LIB={missing} did not load" in line, out
    assert "fix: or set ASCEND_IPC_PROVIDER=emulated" in out, out


# --------------------------------------------------------------------------- the cann provider


def _toolkit(root: pathlib.Path, library: pathlib.Path, version: str) -> pathlib.Path:
    """A toolkit's layout around a library: <root>/lib64/libascendcl.so and its install info."""
    (root / "lib64").mkdir(parents=True)
    (root / "x86_64-linux").mkdir()
    (root / "x86_64-linux" / "ascend_toolkit_install.info").write_text(
        f"package_name=Ascend-cann-toolkit\nversion={version}\narch=x86_64\n")
    target = root / "lib64" / "libascendcl.so"
    shutil.copyfile(library, target)
    return target


@pytest.fixture(scope="module")
def fake_toolkit(tmp_path_factory) -> pathlib.Path:
    """test_cann_provider's fake libascendcl (no IPC call at all), in a toolkit of CANN 8.2.RC1."""
    cc = _compiler()
    out = tmp_path_factory.mktemp("doctor_fake")
    src = out / "fake_acl.c"
    src.write_text(FAKE_ACL)
    lib = out / "fake.so"
    _build([cc, "-std=gnu11", "-O1", "-fPIC", "-shared", "-Icsrc/include", "-o", str(lib), str(src)],
           "the fake libascendcl")
    return _toolkit(out / "toolkit", lib, "8.2.RC1")


def test_cann_library_without_the_ipc_calls_fails_and_lists_them(fake_toolkit):
    env = {"ASCEND_IPC_PROVIDER": "cann", "ASCEND_IPC_CANN_LIB": str(fake_toolkit), "ASCEND_IPC_CANN_DLPACK": None}
    rc, out, err = _doctor_run(soft=_ample_soft(), **env)
    assert rc == 1, f"stdout:\n{out}\nstderr:\n{err}"
    assert out.splitlines()[0].endswith("(provider: cann)"), out
    line = _lines_by_title(out)["provider"]
    assert line.startswith("FAIL"), out
    for call in _doctor.CORE_IPC_CALLS:
        assert call in line, out
    assert "off: export(): no memory can be shared; missing aclrtIpcMemGetExportKey (in CANN 8.2.RC1)" in out, out
    assert "aclrtIpcGetEventHandle (in CANN 8.5.0)" in out and "aclrtDeviceGetBareTgid (in CANN 8.0.0)" in out, out
    assert f"toolkit: {fake_toolkit.parent.parent}, version 8.2.RC1" in out, out
    assert "fix: install CANN 8.2.RC1 or newer" in out, out
    assert _lines_by_title(out)["sharing"].startswith("FAIL") and "not tried" in out, out

    rc, out, err = _doctor_run("--json", soft=_ample_soft(), **env)
    assert rc == 1, err
    provider = next(c for c in json.loads(out)["checks"] if c["name"] == "provider")
    missing = provider["data"]["missing_calls"]
    assert set(_doctor.CORE_IPC_CALLS) <= set(missing)
    assert missing["aclrtIpcMemSetAttr"] == {"since": "CANN 8.5.0", "disables": "export(link='sio' or 'hccs')"}
    assert provider["data"]["toolkit"]["version"] == "8.2.RC1"


def test_older_cann_warns_with_what_is_off_and_still_shares(old_cann_lib, tmp_path):  # noqa: F811
    lib = _toolkit(tmp_path / "toolkit", pathlib.Path(old_cann_lib), "8.3.RC1")
    env = {"ASCEND_IPC_PROVIDER": "cann", "ASCEND_IPC_CANN_LIB": str(lib), "ASCEND_IPC_CANN_DLPACK": None}
    rc, out, err = _doctor_run(soft=_ample_soft(), **env)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    lines = _lines_by_title(out)
    assert lines["provider"].startswith("warn") and f"{len(OMITTED)} call(s) missing" in lines["provider"], out
    assert "CANN 8.3.RC1 (the toolkit's)" in lines["provider"], out
    assert ("off: Event(ipc=True), export(..., stream=s), and opening handles that carry an event; missing "
            "aclrtIpcGetEventHandle (in CANN 8.5.0), aclrtIpcOpenEventHandle (in CANN 8.5.0)") in out, out
    assert "off: export(link='sio' or 'hccs'); missing aclrtIpcMemSetAttr (in CANN 8.5.0)" in out, out
    assert "fix: for every feature: install CANN 8.5.0 or newer" in out, out
    assert "pids=None) needs CANN 8.3.RC1" not in out, out
    assert lines["sharing"].startswith("ok"), out  # through the cann provider, end to end


def test_cann_before_8_3_warns_about_pids_none(old_cann_lib, tmp_path):  # noqa: F811
    lib = _toolkit(tmp_path / "toolkit", pathlib.Path(old_cann_lib), "8.2.RC1")
    rc, out, err = _doctor_run(soft=_ample_soft(), ASCEND_IPC_PROVIDER="cann", ASCEND_IPC_CANN_LIB=str(lib),
                               ASCEND_IPC_CANN_DLPACK=None)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["provider"]
    assert line.startswith("warn") and "export(pids=None) needs CANN 8.3.RC1" in line, out
    assert "fix: install CANN 8.3.RC1 or newer, or export with pids=[importer bare_tgid(), ...]" in out, out


# --------------------------------------------------------------------------- namespaces


def _unshare(*flags: str) -> list:
    """An unshare(1) prefix that works here, trying a user namespace when not privileged; skips otherwise."""
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("no unshare(1) to make a namespace")
    for prefix in ([tool, *flags], [tool, "--user", "--map-root-user", *flags]):
        r = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return prefix
    pytest.skip(f"unshare {' '.join(flags)} is not permitted here: {r.stderr.strip()}")


def test_pid_namespace_of_its_own_is_reported_with_the_advice():
    prefix = _unshare("--pid", "--fork", "--mount-proc")
    rc, out, err = _doctor_run("--json", prefix=prefix, soft=_ample_soft())
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    pid = checks["pid_namespace"]
    assert pid["status"] == "info" and pid["data"]["initial"] is False, pid
    assert pid["data"]["namespace"] != os.readlink("/proc/self/ns/pid")
    assert pid["data"]["bare_tgid"] == pid["data"]["getpid"]
    assert any("bare_tgid()" in f and "never its os.getpid()" in f for f in pid["fix"]), pid
    assert any("one PID namespace" in f for f in pid["fix"]), pid
    assert checks["sharing"]["status"] == "ok", checks["sharing"]  # exporter and importer in the same one


def test_network_namespace_is_reported():
    prefix = _unshare("--net")
    rc, out, err = _doctor_run(prefix=prefix, soft=_ample_soft())
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    line = _lines_by_title(out)["net namespace"]
    assert line.startswith("info") and os.readlink("/proc/self/ns/net") not in line, out
    if not hasattr(aipc._C, "supernode_info"):
        assert "keys can be opened only by processes in the same network namespace as the exporter" in line, out
    assert _lines_by_title(out)["sharing"].startswith("ok"), out


# --------------------------------------------------------------------------- parsers, in process


def test_cann_version_order():
    order = ["8.0.RC2.beta1", "8.0.RC3", "8.0.0", "8.2.RC1", "8.3.RC1", "8.3.RC2", "8.3.0", "8.5.0", "9.0.0"]
    keys = [_doctor.cann_version_key(v) for v in order]
    assert None not in keys and keys == sorted(keys) and len(set(keys)) == len(keys)
    assert _doctor.cann_version_key("unknown (AscendCL API 1.2.3)") is None
    assert _doctor.cann_version_key(None) is None


def test_driver_version_follows_the_install_info(tmp_path):
    root = tmp_path / "Ascend"
    (root / "driver").mkdir(parents=True)
    (root / "driver" / "version.info").write_text("Version=24.1.rc1\nascendhal_version=7.35.19\n")
    info = tmp_path / "ascend_install.info"
    info.write_text(f"Driver_Install_Type=full\nDriver_Install_Path_Param={root}\n")
    assert _doctor.driver_version(str(info), str(tmp_path / "nowhere")) == {
        "version": "24.1.rc1", "file": str(root / "driver" / "version.info")}
    # No install info: the default root; nothing there: None.
    assert _doctor.driver_version(str(tmp_path / "none"), str(root))["version"] == "24.1.rc1"
    assert _doctor.driver_version(str(tmp_path / "none"), str(tmp_path / "nowhere")) is None


def test_toolkit_found_from_the_library_or_the_environment(tmp_path):
    lib = tmp_path / "latest" / "lib64" / "libascendcl.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    arch = tmp_path / "latest" / "aarch64-linux"
    arch.mkdir()
    (arch / "ascend_toolkit_install.info").write_text('version=8.5.0\npath="/somewhere"\n')
    got = _doctor.toolkit_info(str(lib), env={})
    assert got == {"path": str(tmp_path / "latest"), "version": "8.5.0",
                   "file": str(arch / "ascend_toolkit_install.info")}
    assert _doctor.toolkit_info(None, env={"ASCEND_HOME_PATH": str(tmp_path / "latest")})["version"] == "8.5.0"
    assert _doctor.toolkit_info(str(tmp_path / "elsewhere" / "libascendcl.so"), env={}) is None


def test_every_missing_call_has_a_feature_or_is_c_only():
    groups = _doctor.missing_by_feature({"aclrtMapMem": "a newer CANN", "aclFinalize": "a newer CANN",
                                         "aclrtIpcMemSetAttr": "CANN 8.5.0"})
    assert [what for what, _ in groups] == [
        "export(link='sio' or 'hccs')",
        "PhysicalMemory, VirtualRange, ShareableHandle, and share() of tensors in torch_npu's expandable segments",
        _doctor._C_ONLY,
    ]
    assert groups[0][1] == ["aclrtIpcMemSetAttr (in CANN 8.5.0)"]


# --------------------------------------------------------------------------- super-node, in process


def _info(tmp_path, **over):
    d = tmp_path / "node"
    info = {"sdid": 7, "supernode_dir": str(d), "supernode_id": "abc123", "netns": os.stat("/proc/self/ns/net").st_ino}
    info.update(over)
    return info


def test_supernode_reports_server_and_rendezvous(tmp_path):
    info = _info(tmp_path)
    c = _doctor.check_supernode("emulated", lambda: info, env={})
    assert c.status == "info", c.as_dict()
    assert "server sdid 7 (derived from the network namespace)" in c.summary, c.summary
    assert f"super-node abc123 at {info['supernode_dir']} (the default): usable, made on first use" in c.summary
    assert c.data["rendezvous"]["exists"] is False and c.data["info"] == info

    os.mkdir(info["supernode_dir"], 0o700)
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.bind(os.path.join(info["supernode_dir"], "s1"))
        c = _doctor.check_supernode("emulated", lambda: info,
                                    env={"ASCEND_IPC_SDID": "7", "ASCEND_IPC_SUPERNODE_DIR": info["supernode_dir"]})
    assert c.status == "info" and "(ASCEND_IPC_SDID)" in c.summary, c.summary
    assert "(ASCEND_IPC_SUPERNODE_DIR)" in c.summary, c.summary
    assert "usable, 1 server socket(s) there" in c.summary, c.summary
    assert c.data["settings"] == {"ASCEND_IPC_SDID": "7", "ASCEND_IPC_SUPERNODE_DIR": info["supernode_dir"]}


def test_supernode_rendezvous_others_may_write_warns(tmp_path):
    info = _info(tmp_path)
    os.mkdir(info["supernode_dir"])
    os.chmod(info["supernode_dir"], 0o777)
    c = _doctor.check_supernode("emulated", lambda: info, env={})
    assert c.status == "warn" and "not usable, mode 0777: other users may write in it" in c.summary, c.summary
    assert any("mode 0700" in f for f in c.fix), c.fix
    assert c.data["rendezvous"]["usable"] is False


def test_supernode_runtime_problem_warns(tmp_path):
    info = _info(tmp_path, supernode_id="", problem="the super-node directory /x belongs to uid 5, another user")
    c = _doctor.check_supernode("emulated", lambda: info, env={})
    assert c.status == "warn" and "super-node (none) at" in c.summary, c.summary
    assert "not usable, the super-node directory /x belongs to uid 5, another user" in c.summary, c.summary


def test_supernode_rendezvous_not_a_directory_warns(tmp_path):
    info = _info(tmp_path)
    pathlib.Path(info["supernode_dir"]).write_text("")
    c = _doctor.check_supernode("emulated", lambda: info, env={})
    assert c.status == "warn" and "it is not a directory" in c.summary, c.summary


def test_supernode_without_the_core_support_or_on_cann():
    def broken():
        raise RuntimeError("no server")

    c = _doctor.check_supernode("emulated", broken, env={})
    assert c.status == "warn" and "cannot read this process's server: RuntimeError: no server" in c.summary, c.summary
    c = _doctor.check_supernode("emulated", None, env={"ASCEND_IPC_SDID": "3"})
    if hasattr(aipc._C, "supernode_info"):
        assert c.status == "info" and c.data["available"] is True, c.as_dict()
    else:
        assert c.status == "info" and "emulates no super-node (sdid 3 (ASCEND_IPC_SDID))" in c.summary, c.summary
        assert c.data["available"] is False
    c = _doctor.check_supernode("cann", lambda: {}, env={})
    assert c.status == "info" and "the NPU's" in c.summary, c.summary
