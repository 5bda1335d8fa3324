"""Where a process runs: its host's boot and its network and PID namespaces.

The emulated runtime's memory keys carry their exporter's place in a few
bits, so that an import from elsewhere fails at once with the reason.
Shareable handles of physical memory are bare 64-bit numbers with no room
for it, so ShareableHandle carries the place here, in full, and open()
checks it before the runtime tries a door that cannot be reached.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

Place = Tuple[str, int, int]  # host boot id, network namespace, PID namespace ("" / 0: unknown)

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _namespace(kind: str) -> int:
    try:
        st = os.stat(f"/proc/self/ns/{kind}")
    except OSError:
        return 0
    return st.st_dev << 32 ^ st.st_ino


def _boot() -> str:
    try:
        with open(_BOOT_ID) as f:
            return f.read().strip()
    except OSError:
        return ""


def here() -> Place:
    """This process's place now."""
    return (_boot(), _namespace("net"), _namespace("pid"))


def differs(theirs: Optional[Place]) -> Optional[str]:
    """Why an object made at place theirs cannot be opened here, or None (same, or unknown)."""
    if not theirs:
        return None
    mine = here()
    parts = (
        ("on another host (or before this host last booted); it opens on its exporter's host only"),
        ("in another network namespace (another container?); run the opener in the exporter's network "
         "namespace (docker --network container:<exporter>, or one Kubernetes pod)"),
        ("in another PID namespace; run the opener in the exporter's PID namespace (docker --pid "
         "container:<exporter> or --pid host, or shareProcessNamespace in a pod)"),
    )
    for theirs_part, mine_part, why in zip(theirs, mine, parts):
        if theirs_part and mine_part and theirs_part != mine_part:
            return "it was exported " + why
    return None


FEATURE_NOT_SUPPORT = (207000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT")


def check(theirs: Optional[Place], call: str, what: str) -> None:
    """Raises AclError (207000, as the runtime's own keys do) when what, made at place theirs, is elsewhere."""
    why = differs(theirs)
    if why is None:
        return
    from ._C import AclError

    code, name = FEATURE_NOT_SUPPORT
    message = f"{call}: {what} cannot be opened here: {why}"
    error = AclError(f"[{code} {name}] {message}")
    error.code, error.name, error.message, error.call = code, name, message, call
    raise error
