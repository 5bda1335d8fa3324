"""``ascend_ipc.supernode_info()``: this process's server of a super-node, and the super-node.

The emulated provider models an Atlas A3 super-node on one machine: a server is a network
namespace, with its own sdid (``ASCEND_IPC_SDID``, else derived from the namespace), and the
servers of one super-node meet through a rendezvous directory of Unix sockets
(``ASCEND_IPC_SUPERNODE_DIR``). A process of another server whitelists this one with
``IpcHandle.allow(bare_tgid(), sdid=supernode_info()["sdid"])``.
"""

from __future__ import annotations

import os
from typing import Any, Dict

from . import _C


def supernode_info() -> Dict[str, Any]:
    """This process's server and super-node: ``{"sdid": int, "supernode_dir": str,
    "supernode_id": str, "netns": int, "problem": str}`` (``netns``: the inode of its network
    namespace, ``/proc/self/ns/net``; ``supernode_id`` is "" and ``problem`` says why when the
    rendezvous directory cannot be used, else ``problem`` is ""). A build of the runtime without
    super-nodes gives the sdid of ``ASCEND_IPC_SDID`` (0 when unset), ``netns``, None for
    ``supernode_dir`` and ``supernode_id``, and a ``problem`` saying so."""
    fn = getattr(_C, "supernode_info", None)
    if fn is not None:
        return dict(fn())
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = None
    return {"sdid": int(os.environ.get("ASCEND_IPC_SDID", "0"), 0), "supernode_dir": None, "supernode_id": None,
            "netns": netns, "problem": "this build of the runtime has no super-nodes"}
