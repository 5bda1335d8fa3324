"""The two sides of a cross-server hand-off, run by test_supernode.py in two emulated servers.

    python supernode_workers.py export KIND PORT [--no-allow | --allow-other]
    python supernode_workers.py receive KIND HOST PORT

As servers of a super-node do: the receiver connects to the exporter over TCP, through the
servers' link, and sends who it is (its bare_tgid() and its server's sdid); the exporter
shares KIND (``tensor``: a tensor through ascend_ipc.torch.share; ``state_dict``: a state dict
through share_state_dict), whitelists the receiver on its server (``allow(pid, sdid=...)``,
unless --no-allow; --allow-other whitelists another process of the receiver's server instead)
and sends the pickled handle back over the same connection. The receiver
opens it, checks the bytes, writes, and both check that the other side's writes arrived.

Each side prints one JSON line as its last line: what it saw, or the AclError (code, name,
message) of a refused open. Messages on the connection are pickles with a 4-byte length.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import socket
import struct
import sys
import time

import torch

import ascend_ipc as aipc
import ascend_ipc.torch as atorch

TIMEOUT_S = 120.0  # every wait on the other side; the test's own limit is above it
N = 4096


def send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!I", len(data)) + data)


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        buf += chunk
    return buf


def recv(sock: socket.socket):
    (n,) = struct.unpack("!I", _exact(sock, 4))
    return pickle.loads(_exact(sock, n))


def here() -> dict:
    info = aipc.supernode_info()
    return {"pid": int(aipc.bare_tgid()), "sdid": int(info["sdid"]), "info": dict(info)}


def done(result: dict) -> None:
    print(json.dumps(result), flush=True)


def error(e: aipc.AclError) -> dict:
    return {"error": {"code": e.code, "name": e.name, "message": e.message}}


def expected_tensor() -> torch.Tensor:
    return torch.arange(N, dtype=torch.int64) * 7 + 3


def expected_state_dict(step: int) -> dict:
    g = torch.Generator().manual_seed(1234 + step)
    return {
        "body.weight": torch.nn.Parameter(torch.randn(64, 32, generator=g)),
        "body.bias": torch.randn(64, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(step, dtype=torch.int64),
        "mask": torch.arange(100, dtype=torch.int32) % 3 == 0,
    }


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k].detach(), b[k].detach()) for k in a)


# ---------------------------------------------------------------------------------- exporter


def _allow(handle, who: dict, allow: str) -> None:
    if allow == "receiver":
        handle.allow(who["pid"], sdid=who["sdid"])
    elif allow == "other":
        handle.allow(1, sdid=who["sdid"])  # pid 1 of the receiver's server: not the receiver


def export(kind: str, port: int, allow: str) -> None:
    me = here()
    lsock = socket.create_server((os.environ["AIPC_ADDR"], port))
    lsock.settimeout(TIMEOUT_S)
    conn, peer = lsock.accept()
    lsock.close()
    conn.settimeout(TIMEOUT_S)
    with conn:
        who = recv(conn)
        result = {"me": me, "peer": who, "peer_address": peer[0]}
        if kind == "tensor":
            t = atorch.empty((N,), dtype=torch.int64)
            t.copy_(expected_tensor())
            h = atorch.share(t, pids=[])
            _allow(h, who, allow)
            send(conn, h)
            reply = recv(conn)
            result["reply"] = reply
            if "error" not in reply:
                result["saw_write"] = int(t[5]) == -5 and int(t[6]) == int(expected_tensor()[6])
                send(conn, "seen")
                result["closed"] = recv(conn)
            h.close()
        else:
            sd = expected_state_dict(0)
            shared = atorch.share_state_dict(sd, pids=[])
            _allow(shared.handle, who, allow)
            mine = shared.open()  # the exporter's own view of the buffer: sees the receiver's writes
            send(conn, shared)
            reply = recv(conn)
            result["reply"] = reply
            if "error" not in reply:
                result["saw_write"] = int(mine["steps"]) == 99
                shared.update(expected_state_dict(1))  # the weight-sync step: same buffer, new values
                send(conn, "updated")
                result["closed"] = recv(conn)
            del mine
            shared.close()
    done(result)


# ---------------------------------------------------------------------------------- receiver


def connect(host: str, port: int) -> socket.socket:
    """Connects, retrying while the exporter is not listening yet (until TIMEOUT_S)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
            sock.settimeout(TIMEOUT_S)
            return sock
        except OSError as e:
            if e.errno != errno.ECONNREFUSED or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def receive(kind: str, host: str, port: int) -> None:
    me = here()
    result = {"me": me}
    with connect(host, port) as sock:
        send(sock, me)
        handle = recv(sock)
        try:
            if kind == "tensor":
                got = handle.open_torch()
            else:
                got = handle.open()
        except aipc.AclError as e:
            result.update(error(e))
            send(sock, result)
            done(result)
            return
        if kind == "tensor":
            result["bytes_ok"] = torch.equal(got, expected_tensor())
            got[5] = -5
            send(sock, {"read": result["bytes_ok"]})
            recv(sock)  # the exporter saw the write
            del got
            send(sock, "closed")
        else:
            result["bytes_ok"] = same(got, expected_state_dict(0))
            result["parameter_kept"] = isinstance(got["body.weight"], torch.nn.Parameter)
            got["steps"].fill_(99)
            send(sock, {"read": result["bytes_ok"]})
            recv(sock)  # "updated"
            handle.synchronize()
            result["update_seen"] = same(got, expected_state_dict(1))
            del got
            send(sock, "closed")
    done(result)


def main(argv) -> None:
    role, kind = argv[0], argv[1]
    if role == "export":
        rest = argv[3:]
        export(kind, int(argv[2]), "none" if "--no-allow" in rest else "other" if "--allow-other" in rest else "receiver")
    elif role == "receive":
        receive(kind, argv[2], int(argv[3]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
