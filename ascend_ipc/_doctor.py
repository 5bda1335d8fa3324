"""``python -m ascend_ipc doctor``: what in this process's environment makes sharing fail, and the fix.

Each check returns one result: a status, one line of what was found, optional details, the
fix (commands or settings) and its raw data for ``--json``. Statuses, mildest first:

  ok    nothing to do;
  info  nothing is wrong, but the line says what to keep in mind (namespaces, Yama);
  warn  works, with a limit or a missing feature worth fixing;
  fail  something needs fixing before sharing works as documented.

``run()`` gives exit status 1 when any check fails and 0 otherwise (warnings included), so
scripts can gate on it. docs/doctor.md describes every check.
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
_RANK = {OK: 0, INFO: 1, WARN: 2, FAIL: 3}
_LABEL = {OK: "ok", INFO: "info", WARN: "warn", FAIL: "FAIL"}

# RLIMIT_NOFILE thresholds (docs/doctor.md). Below MIN_NOFILE, under every common default, a
# few hundred allocations or opened handles already run out; RECOMMENDED_NOFILE leaves room
# for a state dict of about 8,000 tensors shared one by one on a stream (an allocation and an
# IPC event each) besides what Python, torch and its DataLoader hold.
MIN_NOFILE = 1024
RECOMMENDED_NOFILE = 16384

# The ids the kernel gives its initial namespaces (include/linux/proc_ns.h). The pid one is
# fixed on every kernel; the net one only on recent kernels, so it is used only to say "initial".
_INIT_PID_NS = 0xEFFFFFFC
_INIT_NET_NS = 0xEFFFFFF9

CANN_ROOT = "/usr/local/Ascend"  # CANN's documented default install root
DEFAULT_TOOLKIT = CANN_ROOT + "/ascend-toolkit/latest"
_INSTALL_INFO = "/etc/ascend_install.info"  # written by the driver's installer
_YAMA = "/proc/sys/kernel/yama/ptrace_scope"

# Without these the package cannot share memory at all (CANN 8.2.RC1 added them).
CORE_IPC_CALLS = ("aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid", "aclrtIpcMemImportByKey", "aclrtIpcMemClose")

# What stops working when the loaded libascendcl lacks a call: the calls the Python package
# makes (csrc/python), grouped by the features that make them.
_FEATURES: Tuple[Tuple[Tuple[str, ...], str], ...] = (
    (("aclrtIpcMemGetExportKey",), "export(): no memory can be shared"),
    (("aclrtIpcMemImportByKey",), "IpcHandle.open(), open_many(), open_torch(): nothing can be opened"),
    (("aclrtIpcMemClose",), "closing exports and opened handles"),
    (("aclrtIpcMemSetImportPid",), "export(pids=[...]) and IpcHandle.allow(): whitelisted exports"),
    (("aclrtIpcMemSetAttr",), "export(link='sio' or 'hccs')"),
    (("aclrtIpcMemImportPidInterServer",), "IpcHandle.allow(..., sdid=...): pids of other servers of a super node"),
    (("aclrtDeviceGetBareTgid",),
     "bare_tgid(): importers cannot learn the pid a whitelist needs (export with pids=None instead)"),
    (("aclrtCreateEventExWithFlag", "aclrtDestroyEvent", "aclrtRecordEvent", "aclrtQueryEventStatus",
      "aclrtSynchronizeEvent", "aclrtSynchronizeEventWithTimeout", "aclrtEventElapsedTime"),
     "Event, and export(..., stream=s)"),
    (("aclrtIpcGetEventHandle", "aclrtIpcOpenEventHandle"),
     "Event(ipc=True), export(..., stream=s), and opening handles that carry an event"),
    (("aclrtCreateStream", "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout",
      "aclrtStreamWaitEvent", "aclrtMemcpyAsync"), "Stream, and copies on a stream"),
    (("aclrtMallocPhysical", "aclrtFreePhysical", "aclrtReserveMemAddress", "aclrtReleaseMemAddress", "aclrtMapMem",
      "aclrtMemMapNoAccess", "aclrtUnmapMem", "aclrtMemSetAccess", "aclrtMemGetAllocationGranularity",
      "aclrtMemExportToShareableHandle", "aclrtMemSetPidToShareableHandle", "aclrtMemImportFromShareableHandle",
      "aclrtMemRetainAllocationHandle", "aclrtMemGetAddressRange"),
     "PhysicalMemory, VirtualRange, ShareableHandle, and share() of tensors in torch_npu's expandable segments"),
    (("aclrtMemset",), "zeros()"),
    (("aclrtGetMemInfo",), "mem_info()"),
)
_C_ONLY = "nothing in the Python package (C programs that call them get AclError 200006)"


def feature_of(call: str) -> str:
    """What fails without ``call`` (ACL_ERROR_FEATURE_UNSUPPORTED, 200006)."""
    for calls, what in _FEATURES:
        if call in calls:
            return what
    return _C_ONLY


def missing_by_feature(unsupported: Dict[str, str]) -> List[Tuple[str, List[str]]]:
    """[(feature, [missing call (in CANN x), ...])], in the order of _FEATURES, C-only calls last."""
    groups: Dict[str, List[str]] = {}
    for call in sorted(unsupported):
        groups.setdefault(feature_of(call), []).append(f"{call} (in {unsupported[call]})")
    order = [what for _, what in _FEATURES] + [_C_ONLY]
    return [(what, groups[what]) for what in order if what in groups]


class Check:
    """One check's result."""

    def __init__(self, name: str, title: str, status: str, summary: str, *, details: Sequence[str] = (),
                 fix: Sequence[str] = (), data: Optional[Dict[str, Any]] = None) -> None:
        assert status in _RANK, status
        self.name, self.title, self.status, self.summary = name, title, status, summary
        self.details, self.fix = list(details), list(fix)
        self.data = dict(data or {})

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status, "summary": self.summary,
                "details": self.details, "fix": self.fix, "data": self.data}


# --------------------------------------------------------------------------- helpers


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_key_values(path: str) -> Dict[str, str]:
    """``key=value`` lines (CANN's .info files), keys lower-cased; {} if unreadable."""
    text = _read(path)
    out: Dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out.setdefault(key.strip().lower(), value.strip().strip('"'))
    return out


def cann_version_key(text: Optional[str]) -> Optional[Tuple[int, int, int, int]]:
    """An ordering key for CANN versions: 8.2.RC1 < 8.3.RC1 < 8.3.0 < 8.5.0; None if not one."""
    m = re.match(r"\s*(\d+)\.(\d+)\.(?:RC(\d+)|(\d+))", text or "", re.IGNORECASE)
    if m is None:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    if m.group(3) is not None:
        return (major, minor, 0, int(m.group(3)))  # release candidates come before the release
    return (major, minor, 1, int(m.group(4)))


def toolkit_info(library: Optional[str], env: Optional[Dict[str, str]] = None) -> Optional[Dict[str, str]]:
    """The toolkit that holds ``library`` (else the one the environment names) and its version.

    CANN writes its version into ``<toolkit>/<arch>-linux/ascend_toolkit_install.info``
    (``version=...``); the library sits in ``<toolkit>/lib64`` (possibly through links).
    """
    env = os.environ if env is None else env
    candidates: List[str] = []
    paths = [p for p in (library, env.get("ASCEND_IPC_CANN_LIB")) if p]
    if paths:
        for path in dict.fromkeys(paths + [os.path.realpath(p) for p in paths]):
            parent = os.path.dirname(path)
            for _ in range(3):
                candidates.append(parent)
                parent = os.path.dirname(parent)
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(var):
            candidates.append(env[var])
    if not paths:
        candidates.append(DEFAULT_TOOLKIT)
    for directory in dict.fromkeys(candidates):
        per_arch = glob.glob(os.path.join(glob.escape(directory), "*-linux", "ascend_toolkit_install.info"))
        for info in sorted(per_arch) + [os.path.join(directory, "ascend_toolkit_install.info")]:
            values = read_key_values(info)
            if values.get("version"):
                return {"path": directory, "version": values["version"], "file": info}
    return None


def driver_version(install_info: str = _INSTALL_INFO, default_root: str = CANN_ROOT) -> Optional[Dict[str, str]]:
    """The NPU driver's version from ``<root>/driver/version.info`` (``Version=...``).

    The driver's installer records its root in /etc/ascend_install.info
    (``Driver_Install_Path_Param``); CANN's default is /usr/local/Ascend.
    """
    roots = [read_key_values(install_info).get("driver_install_path_param"), default_root]
    for root in dict.fromkeys(r for r in roots if r):
        path = os.path.join(root, "driver", "version.info")
        version = read_key_values(path).get("version")
        if version:
            return {"version": version, "file": path}
    return None


def _device_nodes() -> Dict[str, Any]:
    """The NPU driver's device nodes that a container must be given."""
    npus = sorted(os.path.basename(p) for p in glob.glob("/dev/davinci[0-9]*"))
    shared = {n: os.path.exists("/dev/" + n) for n in ("davinci_manager", "devmm_svm", "hisi_hdc")}
    return {"npus": npus, "shared": shared}


def _ns_id(kind: str) -> Tuple[Optional[str], Optional[int]]:
    """('pid:[4026531836]', inode) of this process's namespace of ``kind``, or (None, None)."""
    try:
        return os.readlink(f"/proc/self/ns/{kind}"), os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None, None


def _status_field(name: str) -> Optional[List[int]]:
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith(name + ":"):
            try:
                return [int(v) for v in line.split()[1:]]
            except ValueError:
                return None
    return None


def _limit_text(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


# --------------------------------------------------------------------------- checks


def check_open_files(provider: Optional[str]) -> Check:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    soft_n = soft if soft != inf else 1 << 62
    hard_n = hard if hard != inf else 1 << 62
    data = {"soft": None if soft == inf else soft, "hard": None if hard == inf else hard,
            "minimum": MIN_NOFILE, "recommended": RECOMMENDED_NOFILE,
            "raised_by_runtime": provider == "emulated"}
    summary = f"RLIMIT_NOFILE soft {_limit_text(soft)}, hard {_limit_text(hard)}"
    if provider == "cann":
        details = ["what the CANN runtime holds per allocation or import is CANN's (not documented); ascend_ipc adds "
                   "two sockets for hand-offs"]
    else:
        details = [
            "the emulator holds a descriptor per live allocation, IPC event, physical allocation and opened "
            "shareable handle, and per connection between an importer and an exporter; opening a memory key or an "
            "IPC event holds none",
            "the emulator raises the soft limit to the hard one by itself when an allocation runs out of "
            "descriptors; opening shareable handles, connecting, and other libraries do not",
        ]
    if soft_n >= RECOMMENDED_NOFILE:
        return Check("open_files", "open files", OK, summary, details=details, data=data)
    problems = []
    if soft_n < MIN_NOFILE:
        status = FAIL
        problems.append(f"soft limit below {MIN_NOFILE}: a process runs out after a few hundred descriptors")
    else:
        status = WARN
        if soft_n < hard_n:
            problems.append("opening many shareable handles (PhysicalMemory, tensors of expandable segments) "
                            "can run out of the soft limit")
    if hard_n < RECOMMENDED_NOFILE:
        problems.append(f"the hard limit caps every process at {_limit_text(hard)} descriptors: with one per "
                        "allocation and one per IPC event, a state dict shared tensor by tensor may not fit")
    summary += ": " + "; ".join(problems)
    # Up to the hard limit the soft one can be raised without privilege; beyond it, only by root.
    fix: List[str] = []
    if soft_n < hard_n:
        fix.append(f"ulimit -n {_limit_text(hard)}   (in the shell that starts the processes; no privilege needed "
                   "up to the hard limit)")
        fix.append("or in Python, before sharing: soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE); "
                   "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))")
    if hard_n >= RECOMMENDED_NOFILE:
        fix.append(f"or for a container: docker run --ulimit nofile={_limit_text(hard)}:{_limit_text(hard)}")
    else:
        n = RECOMMENDED_NOFILE
        fix.append(f"raise the hard limit (as root): /etc/security/limits.conf ('* soft nofile {n}' and "
                   f"'* hard nofile {n}'), systemd LimitNOFILE={n}, docker run --ulimit nofile={n}:{n}")
    return Check("open_files", "open files", status, summary, details=details, fix=fix, data=data)


def _expected_libraries(env: Dict[str, str]) -> List[str]:
    """Where cann_provider.c looks for libascendcl.so, as files (the loader search left out)."""
    if env.get("ASCEND_IPC_CANN_LIB"):
        return [env["ASCEND_IPC_CANN_LIB"]]
    paths = [os.path.join(env[v], "lib64", "libascendcl.so") for v in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
             if env.get(v)]
    paths.append(os.path.join(DEFAULT_TOOLKIT, "lib64", "libascendcl.so"))
    return list(dict.fromkeys(paths))


_CONTAINER_DEVICES = ("in a container, give it the NPUs and the driver: docker run --device /dev/davinci0 "
                      "--device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc "
                      "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro ...")


def check_provider(aipc: Any, env: Optional[Dict[str, str]] = None) -> Check:
    # No check for a provider that cannot load: then `import ascend_ipc` itself fails, with
    # every path tried (ASCEND_IPC_PROVIDER=cann), before this module can run.
    env = dict(os.environ if env is None else env)
    wanted = env.get("ASCEND_IPC_PROVIDER", "") or "auto"
    name = aipc.provider()
    info = dict(aipc.provider_info())
    selection = info.get("selection") or ""
    data: Dict[str, Any] = {"requested": wanted, "name": name, "provider_info": info}
    sel_first, _, sel_rest = selection.partition("\n")
    sel_lines = [sel_first] + [line.strip() for line in sel_rest.splitlines() if line.strip()]

    if name == "emulated":
        if wanted == "emulated":
            return Check("provider", "provider", OK, "emulated (ASCEND_IPC_PROVIDER=emulated)", data=data)
        found = [p for p in _expected_libraries(env) if os.path.exists(p)]
        data["libraries_present"] = found
        unavailable = "because the cann provider is unavailable" in selection
        if unavailable and not found and not env.get("ASCEND_IPC_CANN_LIB"):
            return Check("provider", "provider", OK, "no CANN toolkit found; emulated provider in use",
                         details=sel_lines, data=data)
        # A toolkit is there (or was asked for), but the emulator runs: say why and what to do.
        fix: List[str] = []
        if unavailable and env.get("ASCEND_IPC_CANN_LIB"):
            summary = f"ASCEND_IPC_CANN_LIB={env['ASCEND_IPC_CANN_LIB']} did not load; emulated provider in use"
            fix.append("point ASCEND_IPC_CANN_LIB at the toolkit's lib64/libascendcl.so, or unset it to search "
                       "the CANN paths")
        elif unavailable:
            summary = "a CANN toolkit is installed but libascendcl.so did not load; emulated provider in use"
            fix.append("source the toolkit's set_env.sh (it sets ASCEND_HOME_PATH and LD_LIBRARY_PATH); the loader's "
                       "message above names what is missing, often a library of the driver (driver/lib64)")
            fix.append("or point ASCEND_IPC_CANN_LIB at libascendcl.so")
        else:
            nodes = _device_nodes()
            data["device_nodes"] = nodes
            summary = ("the CANN runtime loaded but " + ("aclInit failed" if "because aclInit of" in selection else
                                                         "reports no usable NPU") + "; emulated provider in use")
            sel_lines.append("device nodes: " + (", ".join("/dev/" + n for n in nodes["npus"]) or "no /dev/davinciN")
                             + "; " + ", ".join(f"/dev/{n} {'present' if ok else 'missing'}"
                                                for n, ok in nodes["shared"].items()))
            fix.append("check the driver with npu-smi info")
            fix.append(_CONTAINER_DEVICES)
        fix.append("or set ASCEND_IPC_PROVIDER=emulated to use the emulator on purpose")
        return Check("provider", "provider", WARN, summary, details=sel_lines, fix=fix, data=data)

    # The cann provider.
    library = info.get("library")
    version = info.get("version") or "unknown"
    toolkit = toolkit_info(library, env)
    driver = driver_version()
    data.update({"toolkit": toolkit, "driver": driver,
                 "environment": {v: env[v] for v in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_IPC_CANN_LIB")
                                 if env.get(v)}})
    details = [f"library: {library}"]
    source = info.get("version_source")
    details.append(f"runtime version: {version}" + (f" (from {source})" if source else ""))
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(var):
            details.append(f"{var}={env[var]}")
    details.append(f"toolkit: {toolkit['path']}, version {toolkit['version']} (from {toolkit['file']})" if toolkit
                   else "toolkit: no ascend_toolkit_install.info next to the library")
    details.append(f"driver: version {driver['version']} (from {driver['file']})" if driver
                   else "driver: no driver/version.info found (it is under the driver's install root, "
                        "/usr/local/Ascend by default)")
    unsupported: Dict[str, str] = dict(info.get("unsupported") or {})
    missing_core = [c for c in CORE_IPC_CALLS if c in unsupported]
    for what, calls in missing_by_feature(unsupported):
        details.append(f"off: {what}; missing {', '.join(calls)}")
    data["missing_calls"] = {c: {"since": unsupported[c], "disables": feature_of(c)} for c in sorted(unsupported)}

    fix = []
    status = OK
    known = cann_version_key(version) or cann_version_key(toolkit["version"] if toolkit else None)
    shown = (f"CANN {version}" if cann_version_key(version) else
             f"CANN {toolkit['version']} (the toolkit's)" if toolkit else "CANN version unknown")
    summary = f"cann: {library}, {shown}"
    data["version_key"] = list(known) if known else None
    if missing_core:
        status = FAIL
        summary += f"; the library lacks {', '.join(missing_core)}: memory cannot be shared"
        fix.append("install CANN 8.2.RC1 or newer (8.3.RC1 or newer for export(pids=None)) and source its set_env.sh")
    elif unsupported:
        status = WARN
        summary += f"; {len(unsupported)} call(s) missing, the features that need them are off"
        named = [v for v in unsupported.values() if cann_version_key(v.split()[-1])]
        newest = max(named, key=lambda v: cann_version_key(v.split()[-1]) or (0,) * 4) if named else None
        fix.append(f"for every feature: install {newest} or newer" if newest and len(named) == len(unsupported)
                   else "for every feature: install a newer CANN")
    if known is not None and known < (8, 3, 0, 1) and not missing_core:
        status = max(status, WARN, key=_RANK.__getitem__)
        summary += "; export(pids=None) needs CANN 8.3.RC1"
        details.append("CANN before 8.3.RC1 has no ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION: "
                       "export(pids=None), share() without pids and tensors sent through torch.multiprocessing "
                       "queues fail; export(pids=[...]) works")
        fix.append("install CANN 8.3.RC1 or newer, or export with pids=[importer bare_tgid(), ...]")
    return Check("provider", "provider", status, summary, details=details, fix=fix, data=data)


def check_pid_namespace(aipc: Any) -> Check:
    ns, ino = _ns_id("pid")
    nspid = _status_field("NSpid")
    pid = os.getpid()
    tgid: Optional[int] = None
    tgid_error: Optional[str] = None
    provider = aipc.provider()
    try:
        tgid = int(aipc.bare_tgid())
    except Exception as exc:  # a CANN without aclrtDeviceGetBareTgid
        tgid_error = f"{type(exc).__name__}: {exc}"
    initial = None if ino is None else ino == _INIT_PID_NS
    data = {"namespace": ns, "initial": initial, "nspid": nspid, "getpid": pid, "bare_tgid": tgid,
            "bare_tgid_error": tgid_error}
    pids = f"os.getpid() {pid}, bare_tgid() {tgid if tgid is not None else 'unavailable'}"
    if initial is None:
        return Check("pid_namespace", "pid namespace", WARN, f"cannot read /proc/self/ns/pid; {pids}",
                     details=["is /proc mounted? the emulator reads /proc/<pid>/stat to check whitelists"],
                     fix=["mount /proc (docker and Kubernetes do so by default)"], data=data)
    if initial and (tgid is None or tgid == pid):
        return Check("pid_namespace", "pid namespace", OK, f"the initial one, {ns}; {pids}", data=data)
    where = "the initial one" if initial else "one of its own, as in a container"
    details = []
    if nspid and len(nspid) > 1:
        details.append(f"NSpid {' '.join(map(str, nspid))}: pid {nspid[0]} outside, {nspid[-1]} inside")
    fix = ["whitelist what the importer's ascend_ipc.bare_tgid() returns (aclrtDeviceGetBareTgid), never its "
           "os.getpid()"]
    if provider == "cann":
        fix.append("the NPU driver knows host pids: run exporter and importers in the same PID namespace "
                   "(docker run --pid=host, or --pid=container:<exporter>) or pass bare_tgid() values between them")
    else:
        fix.append("the emulator's keys name their exporter by its pid, which means that process only in its PID "
                   "namespace: a key from another one fails at once (207000, naming the cause); run exporter and "
                   "importers in one PID namespace (docker run --pid=container:<exporter> or --pid=host; "
                   "Kubernetes: shareProcessNamespace: true)")
    status = INFO
    if tgid is None and provider == "cann":
        status = WARN
        details.append(f"bare_tgid() failed: {tgid_error}")
        fix.append("install CANN 8.0.0 or newer (aclrtDeviceGetBareTgid), or export with pids=None")
    return Check("pid_namespace", "pid namespace", status, f"{where}, {ns}; {pids}", details=details, fix=fix,
                 data=data)


def check_net_namespace(provider: Optional[str], supernodes: bool = False) -> Check:
    ns, ino = _ns_id("net")
    initial = True if ino == _INIT_NET_NS else None  # other ids: unknown on older kernels
    data = {"namespace": ns, "initial": initial}
    if ns is None:
        return Check("net_namespace", "net namespace", WARN, "cannot read /proc/self/ns/net", data=data,
                     fix=["mount /proc"])
    details = ["put-and-drop releases (a receiver's word that it opened a pickled handle) travel on an abstract "
               "Unix socket too: from another network namespace they are lost and the sender holds the memory "
               "until ASCEND_IPC_SEND_TIMEOUT_S"]
    if provider != "cann":
        details[:0] = ["the emulator's exporter listens on an abstract Unix socket, which exists only in its "
                       "network namespace",
                       "compare this id across the processes that share: it must be the same"]
    fix = ["run exporter and importers with the same network (docker run --network=container:<exporter> or "
           "--network=host; the containers of one Kubernetes pod share it)"]
    where = " (the initial one)" if initial else ""
    if provider == "cann":
        summary = (f"{ns}{where}: memory keys are the NPU driver's to check; hand-off releases (put and drop) reach "
                   "the sender only within one network namespace")
    elif supernodes:
        summary = (f"{ns}{where}: a server of the emulated super-node; other network namespaces are other servers, "
                   "whose processes open keys exported here when whitelisted by (sdid, pid) or exported without "
                   "a whitelist (see super-node)")
    else:
        summary = (f"{ns}{where}: keys can be opened only by processes in the same network namespace as the exporter "
                   "(from another one they fail at once with 207000, naming the cause)")
    return Check("net_namespace", "net namespace", INFO, summary, details=details, fix=fix, data=data)


def rendezvous_state(path: Optional[str]) -> Dict[str, Any]:
    """What the super-node's rendezvous directory is like for this process: whether it exists, its
    owner and mode, whether it is usable (a directory of this user that no other user may enter or
    write, or one that can be made), and how many servers' sockets are in it."""
    state: Dict[str, Any] = {"path": path, "exists": False, "usable": False, "sockets": 0, "problem": None}
    if not path:
        state["problem"] = "no rendezvous directory is set"
        return state
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path)) or "/"
        if os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
            state["usable"] = True  # made, mode 0700, by the first process that needs it
        else:
            state["problem"] = f"it does not exist and {parent} does not let this user make it"
        return state
    except OSError as exc:
        state["problem"] = f"cannot read it: {exc.strerror}"
        return state
    state.update(exists=True, owner=st.st_uid, mode=f"{stat.S_IMODE(st.st_mode):04o}")
    if not stat.S_ISDIR(st.st_mode):
        state["problem"] = "it is not a directory" + (" (a symbolic link)" if stat.S_ISLNK(st.st_mode) else "")
    elif st.st_uid != os.geteuid():
        state["problem"] = f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    elif stat.S_IMODE(st.st_mode) & 0o022:
        state["problem"] = f"mode {state['mode']}: other users may write in it"
    elif not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        state["problem"] = "this user cannot write in it"
    else:
        state["usable"] = True
        try:
            with os.scandir(path) as entries:
                state["sockets"] = sum(1 for e in entries if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode))
        except OSError:
            pass
    return state


def check_supernode(provider: Optional[str], info_fn: Optional[Callable[[], Dict[str, Any]]] = None,
                    env: Optional[Dict[str, str]] = None) -> Check:
    """This process's server of the emulated super-node (sdid, network namespace) and the
    super-node (rendezvous directory, id, whether it is usable); _C.supernode_info() where the
    build has it."""
    env = os.environ if env is None else env
    title = "super-node"
    settings = {k: env[k] for k in ("ASCEND_IPC_SDID", "ASCEND_IPC_SUPERNODE_DIR") if k in env}
    if info_fn is None:
        from ascend_ipc import _C

        info_fn = getattr(_C, "supernode_info", None)  # absent from a runtime build without super-nodes
    if provider == "cann":
        return Check("supernode", title, INFO, "the NPU's: servers, sdids and fabric handles are the hardware's "
                     "(ASCEND_IPC_SDID and ASCEND_IPC_SUPERNODE_DIR are the emulator's and unused here)",
                     details=["on an Atlas A3 super-node, aclGetDeviceInfo(ACL_DEV_ATTR_SUPER_POD_DEVICE_ID) gives "
                              "a device's sdid; whitelist other servers' processes with "
                              "IpcHandle.allow(pid, sdid=...)"],
                     data={"provider": provider, "settings": settings})
    if info_fn is None:
        sdid = f"sdid {env['ASCEND_IPC_SDID']} (ASCEND_IPC_SDID)" if "ASCEND_IPC_SDID" in env else "sdid 0"
        return Check("supernode", title, INFO, f"this build emulates no super-node ({sdid}): other servers' keys "
                     "and fabric handles are refused (207000)",
                     data={"available": False, "settings": settings})
    try:
        info = dict(info_fn())
    except Exception as exc:  # the runtime says why
        return Check("supernode", title, WARN, f"cannot read this process's server: {type(exc).__name__}: {exc}",
                     data={"available": True, "error": str(exc), "settings": settings})
    ns, ino = _ns_id("net")
    rdv = rendezvous_state(info.get("supernode_dir"))
    sdid = info.get("sdid")
    how = "ASCEND_IPC_SDID" if "ASCEND_IPC_SDID" in settings else "derived from the network namespace"
    where = "ASCEND_IPC_SUPERNODE_DIR" if "ASCEND_IPC_SUPERNODE_DIR" in settings else "the default"
    server = f"server sdid {sdid} ({how}) in {ns or 'net:[?]'}"
    node = f"super-node {info.get('supernode_id') or '(none)'} at {rdv['path']} ({where})"
    data = {"available": True, "info": info, "rendezvous": rdv, "settings": settings, "namespace": ns}
    details = [
        "a server of the emulated super-node is a network namespace; its processes share memory with processes "
        "of other servers of the same super-node (the same rendezvous directory) that they whitelist by "
        "(sdid, pid): IpcHandle.allow(pid, sdid=...), aclrtIpcMemImportPidInterServer, "
        "aclrtNotifySetImportPidInterServer, and fabric shareable handles",
        "processes of another super-node (another ASCEND_IPC_SUPERNODE_DIR) or of another user are refused",
    ]
    if info.get("netns") is not None and ino is not None and info["netns"] != ino:
        details.append(f"the runtime's namespace {info['netns']} is not this thread's {ino}: the process moved "
                       "after it first used IPC")
    problem = info.get("problem") or rdv["problem"]  # the runtime's own verdict first
    if info.get("problem") or not rdv["usable"]:
        return Check("supernode", title, WARN, f"{server}; {node}: not usable, {problem}",
                     details=details + ["sharing within this server works; with other servers it fails"],
                     fix=[f"point ASCEND_IPC_SUPERNODE_DIR at a directory of this user with mode 0700, the same "
                          "for every server of the super-node (e.g. mkdir -m 700 /tmp/my-supernode)"],
                     data=data)
    seen = f", {rdv['sockets']} server socket(s) there" if rdv["exists"] else ", made on first use"
    return Check("supernode", title, INFO, f"{server}; {node}: usable{seen}", details=details,
                 fix=["run each server's processes with the same ASCEND_IPC_SUPERNODE_DIR; give servers distinct "
                      "network namespaces (tests/supernode/servers.sh makes them)"], data=data)


def check_ptrace_scope() -> Check:
    raw = _read(_YAMA)
    scope: Optional[int] = None
    if raw is not None:
        try:
            scope = int(raw.strip())
        except ValueError:
            pass
    data = {"ptrace_scope": scope, "yama": raw is not None}
    found = f"kernel.yama.ptrace_scope = {scope}" if scope is not None else "no Yama in this kernel"
    details = [
        "Yama restricts only ptrace attach and what needs the same access: /proc/<pid>/mem, process_vm_readv/writev, "
        "pidfd_getfd",
        "ascend_ipc uses none of them: descriptors travel over Unix sockets (SCM_RIGHTS), identities come from "
        "SO_PEERCRED/SCM_CREDENTIALS, and whitelists read /proc/<pid>/stat start times, which Yama does not restrict",
    ]
    if scope == 0:
        details.append("at 0 any process of your user may attach to an exporter and read its memory; "
                       "1 (a common default) limits that to its ancestors, without effect on sharing")
    return Check("ptrace_scope", "ptrace scope", INFO, f"{found}: not needed by ascend_ipc", details=details,
                 data=data)


_CHILD = r"""
import json, sys
import numpy as np
import ascend_ipc as a
try:
    tgid = int(a.bare_tgid())
except Exception:
    tgid = None
print(json.dumps({"tgid": tgid, "provider": a.provider()}), flush=True)
m = json.loads(sys.stdin.readline())
h = a.IpcHandle(m["key"], m["size"], dtype="uint64", shape=(1,), device=m["device"], pid=m["pid"])
b = h.open()
seen = int(b.numpy()[0])
b.copy_from(np.array([seen + 1], dtype=np.uint64))
b.close()
print(json.dumps({"seen": seen}), flush=True)
"""

_MAGIC = 0x61697063_646F6374  # "aipcdoct"


def check_sharing(aipc: Any, timeout: float = 120.0) -> Check:
    """Exports a page here and has a fresh interpreter open it under the whitelist, read and write it."""
    title = "sharing"
    info = aipc.provider_info()
    missing = [c for c in CORE_IPC_CALLS if c in (info.get("unsupported") or {})]
    if missing:
        return Check("sharing", title, FAIL, f"not tried: the runtime lacks {', '.join(missing)} (see provider)",
                     data={"missing": missing})
    try:
        if int(aipc.device_count()) < 1:
            return Check("sharing", title, FAIL, "not tried: the runtime reports no device")
    except Exception as exc:
        return Check("sharing", title, FAIL, f"not tried: device_count() failed: {type(exc).__name__}: {exc}")

    import numpy as np

    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(aipc.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    start = time.monotonic()
    deadline = start + timeout
    step = "starting a Python process"
    errfile = tempfile.TemporaryFile(mode="w+")  # a file, so a talkative child never blocks on it
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=errfile, text=True, env=env, start_new_session=True)
    lines = _LineReader(proc.stdout)
    array = handle = None
    err: Optional[str] = None
    try:
        hello = lines.json(deadline, "starting")
        step = "exporting"
        array = aipc.from_numpy(np.array([_MAGIC], dtype=np.uint64))
        pids = [hello["tgid"]] if hello.get("tgid") is not None else None
        handle = aipc.export(array, pids=pids)
        step = "opening the export in the child"
        proc.stdin.write(json.dumps({"key": handle.key, "size": handle.size, "device": handle.device,
                                     "pid": handle.pid}) + "\n")
        proc.stdin.flush()
        answer = lines.json(deadline, "opening")  # sent after the child closed its import
        after = int(array.numpy()[0])
        elapsed = time.monotonic() - start
        data = {"seconds": round(elapsed, 3), "whitelisted": pids, "child_provider": hello.get("provider")}
        if answer.get("seen") != _MAGIC or after != _MAGIC + 1:
            return Check("sharing", title, FAIL, "the child saw other bytes than were exported, or its write did not "
                         f"arrive (it read {answer.get('seen')!r}, then {after!r} here)", data=data)
        how = f"whitelisted by bare_tgid() {pids[0]}" if pids else "without a whitelist (no bare_tgid())"
        return Check("sharing", title, OK, f"a child process opened a page exported here ({how}), read it and "
                     f"wrote to it ({elapsed:.2f} s)", data=data)
    except Exception as exc:
        err = _finish(proc, errfile)
        stderr = [ln for ln in err.strip().splitlines() if ln.strip()]
        cause = stderr[-1] if stderr else f"{type(exc).__name__}: {exc}"
        return Check("sharing", title, FAIL, f"failed while {step}: {cause}",
                     details=[f"{type(exc).__name__}: {exc}"] + stderr[-6:],
                     fix=["the message names the cause; docs/doctor.md lists the usual ones"],
                     data={"step": step, "error": cause})
    finally:
        if err is None:
            _finish(proc, errfile)  # the child first: importers close before the exporter does
        errfile.close()
        for thing in (handle, array):
            if thing is not None:
                try:
                    thing.close()
                except Exception:
                    pass


class _LineReader:
    """The child's stdout, line by line, with a deadline (a thread reads; lines queue up)."""

    def __init__(self, stream: Any) -> None:
        import queue
        import threading

        self._queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        try:
            for line in stream:
                self._queue.put(line)
        except (OSError, ValueError):
            pass
        self._queue.put(None)

    def json(self, deadline: float, what: str) -> Dict[str, Any]:
        """The next line that is a JSON object (libraries may print other lines first)."""
        import queue

        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"the child process gave no answer in time ({what})") from None
            if line is None:
                raise RuntimeError(f"the child process ended without an answer ({what})")
            if line.lstrip().startswith("{"):
                return json.loads(line)


def _finish(proc: subprocess.Popen, errfile: Any) -> str:
    """Ends the child (its input closed first, killed after 30 s) and returns its stderr."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    try:
        errfile.seek(0)
        return errfile.read()
    except (OSError, ValueError):
        return ""


# --------------------------------------------------------------------------- the report


def collect(sharing: bool = True) -> Dict[str, Any]:
    """Runs every check; the report ``doctor --json`` prints."""
    import ascend_ipc as aipc

    provider = aipc.provider()
    checks: List[Check] = [
        check_open_files(provider),
        check_provider(aipc),
        check_pid_namespace(aipc),
        check_net_namespace(provider, supernodes=provider != "cann" and hasattr(aipc._C, "supernode_info")),
        check_supernode(provider),
        check_ptrace_scope(),
    ]
    if sharing:
        checks.append(check_sharing(aipc))
    worst = max((c.status for c in checks), key=_RANK.__getitem__)
    return {
        "version": aipc.__version__,
        "provider": provider,
        "status": worst,
        "exit_status": 1 if worst == FAIL else 0,
        "checks": [c.as_dict() for c in checks],
    }


def _print(report: Dict[str, Any], verbose: bool, out: Callable[[str], None]) -> None:
    out(f"ascend_ipc {report['version']} doctor (provider: {report['provider']})")
    width = max(len(c["title"]) for c in report["checks"])
    for c in report["checks"]:
        out(f"{_LABEL[c['status']]:<5} {c['title']:<{width}}  {c['summary']}")
        # Details explain a warning or a failure (all of them with -v); an info line's
        # advice is a hint, not a fix.
        if verbose or c["status"] in (WARN, FAIL):
            for d in c["details"]:
                out(f"{'':<5} {'':<{width}}    {d}")
        if c["status"] != OK:
            label = "hint" if c["status"] == INFO else "fix"
            for f in c["fix"]:
                out(f"{'':<5} {'':<{width}}    {label}: {f}")
    counts = {s: sum(c["status"] == s for c in report["checks"]) for s in (FAIL, WARN)}
    verdict = ("something needs fixing" if counts[FAIL] else
               "works, with warnings" if counts[WARN] else "all well")
    out(f"result: {verdict} ({counts[FAIL]} FAIL, {counts[WARN]} warn; exit status {report['exit_status']})")


def run(as_json: bool = False, verbose: bool = False, sharing: bool = True, stream: Any = None) -> int:
    """Prints the report (text or JSON) and returns the exit status: 1 if a check failed, else 0."""
    stream = sys.stdout if stream is None else stream
    report = collect(sharing=sharing)
    if as_json:
        print(json.dumps(report, indent=2, sort_keys=True), file=stream)
    else:
        _print(report, verbose, lambda s: print(s, file=stream))
    return int(report["exit_status"])
