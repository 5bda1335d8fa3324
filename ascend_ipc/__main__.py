"""Command line entry point: ``python -m ascend_ipc <command>``.

Commands:
  info    the package version, the provider (its library, version and why it was
          chosen), and each device with its memory
  doctor  checks what makes sharing fail on real machines (open-file limit, provider
          and CANN versions, namespaces, super-node, Yama, a sharing round trip) and says how
          to fix each; exit status 1 when something needs fixing, else 0
          (warnings included); docs/doctor.md
  demo    the producer/four-workers demo (same as ``python -m ascend_ipc.demo``)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Optional, Sequence

PROG = "python -m ascend_ipc"

_ENV_VARS = (
    "ASCEND_IPC_PROVIDER",
    "ASCEND_IPC_CANN_LIB",
    "ASCEND_IPC_CANN_DLPACK",
    "ASCEND_IPC_EMU_DEVICES",
    "ASCEND_IPC_EMU_MEMORY",
    "ASCEND_IPC_STRICT",
    "ASCEND_IPC_SDID",
    "ASCEND_IPC_SUPERNODE_DIR",
    "ASCEND_IPC_TIMEOUT_MS",
    "ASCEND_IPC_POLL_US",
    "ASCEND_IPC_HUGE_PAGES",
    "ASCEND_IPC_SEND_TIMEOUT_S",
)


def _format_bytes(n: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value = float(n)
    for unit in units:
        if value < 1024 or unit == units[-1]:
            if unit == "B":
                return f"{n} B"
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # not reached


def collect_info() -> Dict[str, Any]:
    """Everything ``info`` prints, as a dictionary (also used by ``info --json``)."""
    import ascend_ipc as aipc

    info: Dict[str, Any] = {
        "version": aipc.__version__,
        "python": sys.version.split()[0],
        "provider": aipc.provider(),
        "provider_info": dict(aipc.provider_info()),
        "device_count": int(aipc.device_count()),
        "environment": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
        "devices": [],
    }
    for device in range(info["device_count"]):
        free, total = aipc.mem_info(device)  # aclrtGetMemInfo's order
        info["devices"].append({"id": device, "free": int(free), "total": int(total)})
    return info


_DLPACK_NAMES = {1: "kDLCPU", 12: "kDLExtDev"}


def _print_provider(details: Optional[Dict[str, Any]]) -> None:
    if not details:
        return
    if details.get("library"):
        print(f"  library: {details['library']}")
    else:
        print("  library: none (the emulator is built into ascend_ipc._C)")
    if details.get("version") is not None:
        source = details.get("version_source")
        print(f"  version: {details['version']}" + (f" (from {source})" if source else ""))
    dl = details.get("dlpack_device_type")
    if dl is not None:
        where = "host memory" if details.get("host_visible") else "NPU memory, reached by the CPU only through copies"
        print(f"  dlpack: {_DLPACK_NAMES.get(dl, dl)} ({dl}), {where}")
    unsupported = details.get("unsupported") or {}
    if unsupported:
        calls = ", ".join(f"{name} (in {since})" for name, since in sorted(unsupported.items()))
        print(f"  unsupported: {calls}")
    selection = details.get("selection")
    if selection:
        first, _, rest = selection.partition("\n")
        print(f"  selection: {first}")
        for line in rest.splitlines():
            print(f"    {line.strip()}")


def _print_info(info: Dict[str, Any]) -> None:
    print(f"ascend_ipc {info['version']} (Python {info['python']})")
    print(f"provider: {info['provider']}")
    _print_provider(info.get("provider_info"))
    print(f"devices: {info['device_count']}")
    for dev in info["devices"]:
        total, free = dev["total"], dev["free"]
        print(f"  device {dev['id']}: memory {_format_bytes(total)} total ({total} bytes), {_format_bytes(free)} free")
    env = info["environment"]
    if env:
        print("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))


def _cmd_info(args: argparse.Namespace) -> int:
    try:
        info = collect_info()
    except Exception as exc:  # report any failure of the runtime clearly
        print(f"{PROG} info: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_info(info)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from ascend_ipc import _doctor

    return _doctor.run(as_json=args.json, verbose=args.verbose)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="ascend_ipc: CANN IPC memory sharing for PyTorch and NumPy processes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    info = sub.add_parser("info", help="print the version, the provider and the devices with their memory")
    info.add_argument("--json", action="store_true", help="print the same information as JSON")
    info.set_defaults(func=_cmd_info)
    doctor = sub.add_parser(
        "doctor",
        help="check what makes sharing fail here and say how to fix it (exit status 1 if something must be fixed)",
        description="Checks the open-file limit, the provider and CANN versions, the PID and network namespaces, "
        "this process's server of a super-node, Yama's ptrace_scope, and shares a page with a child process. "
        "One line per check: ok, info, warn or FAIL, with the fix for each that is not ok. "
        "Exit status: 1 if any check FAILs, else 0.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("-v", "--verbose", action="store_true", help="print the details of every check")
    doctor.set_defaults(func=_cmd_doctor)
    sub.add_parser(
        "demo",
        help="run the producer / four-workers demo (options: python -m ascend_ipc.demo --help)",
        add_help=False,
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from ascend_ipc import demo

        return demo.main(argv[1:])
    parser = _parser()
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)  # exits 2 with a message on an unknown command
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
