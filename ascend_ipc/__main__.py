"""Command line entry point: ``python -m ascend_ipc <command>``.

Commands:
  info   the package version, the provider (its library, version and why it was
         chosen), and each device with its memory
  demo   the producer/four-workers demo (same as ``python -m ascend_ipc.demo``)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

PROG = "python -m ascend_ipc"

_ENV_VARS = (
    "ASCEND_IPC_PROVIDER",
    "ASCEND_IPC_CANN_LIB",
    "ASCEND_IPC_CANN_DLPACK",
    "ASCEND_IPC_EMU_DEVICES",
    "ASCEND_IPC_EMU_MEMORY",
    "ASCEND_IPC_STRICT",
    "ASCEND_IPC_SDID",
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


def _version(aipc: Any) -> str:
    version = getattr(aipc, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib import metadata

        for dist in ("ascend_ipc", "ascend-ipc"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    except ImportError:  # pragma: no cover - Python < 3.8
        pass
    return "unknown"


def _find_mem_info(aipc: Any) -> Tuple[Optional[Callable[..., Any]], str]:
    """Return the memory-info function the package exposes, and its name."""
    fn = getattr(aipc, "mem_info", None)
    if callable(fn):
        return fn, "ascend_ipc.mem_info"
    ext = getattr(aipc, "_C", None)
    fn = getattr(ext, "mem_info", None)
    if callable(fn):
        return fn, "ascend_ipc._C.mem_info"
    return None, ""


def _as_free_total(result: Any) -> Tuple[Optional[int], Optional[int]]:
    """Normalise what a mem_info function returns to (free, total) bytes."""
    if isinstance(result, dict):
        return result.get("free"), result.get("total")
    if hasattr(result, "total"):
        return getattr(result, "free", None), getattr(result, "total")
    if isinstance(result, (tuple, list)) and len(result) == 2:
        # CANN's aclrtGetMemInfo order: (free, total)
        return int(result[0]), int(result[1])
    raise TypeError(f"unexpected mem_info result {result!r}")


def _device_memory(aipc: Any, mem_info: Callable[..., Any], device: int) -> Tuple[Optional[int], Optional[int]]:
    try:
        return _as_free_total(mem_info(device))
    except TypeError:
        pass
    # A mem_info() that reports on the current device, as aclrtGetMemInfo does.
    previous = aipc.current_device()
    aipc.set_device(device)
    try:
        return _as_free_total(mem_info())
    finally:
        aipc.set_device(previous)


def collect_info() -> Dict[str, Any]:
    """Everything ``info`` prints, as a dictionary (also used by ``info --json``)."""
    import ascend_ipc as aipc

    provider_info = getattr(aipc, "provider_info", None)
    info: Dict[str, Any] = {
        "version": _version(aipc),
        "python": sys.version.split()[0],
        "provider": aipc.provider(),
        "provider_info": dict(provider_info()) if callable(provider_info) else None,
        "device_count": int(aipc.device_count()),
        "environment": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
        "devices": [],
    }
    mem_info, source = _find_mem_info(aipc)
    info["memory_source"] = source or None
    devices: List[Dict[str, Any]] = info["devices"]
    for device in range(info["device_count"]):
        entry: Dict[str, Any] = {"id": device}
        if mem_info is not None:
            free, total = _device_memory(aipc, mem_info, device)
            entry["free"] = free
            entry["total"] = total
        devices.append(entry)
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
        total, free = dev.get("total"), dev.get("free")
        if total is None:
            memory = "memory: not reported by this build"
        else:
            memory = f"memory {_format_bytes(total)} total ({total} bytes)"
            if free is not None:
                memory += f", {_format_bytes(free)} free"
        print(f"  device {dev['id']}: {memory}")
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="ascend_ipc: CANN IPC memory sharing for PyTorch and NumPy processes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    info = sub.add_parser("info", help="print the version, the provider and the devices with their memory")
    info.add_argument("--json", action="store_true", help="print the same information as JSON")
    info.set_defaults(func=_cmd_info)
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
