"""A lying exporter, written in Python: the importer (ascend_ipc, in a subprocess so that a crash
shows as a signal) must refuse its grants with an AclError and keep nothing it was handed.

The exporter here is the test process itself: it listens on the abstract socket a key names
(its own pid and a nonce it made up; the importer checks the peer's pid) and speaks the wire
protocol of csrc/emu/ipc/proto.h by hand: struct for the packets, SCM_RIGHTS for the memfds.
"""

from __future__ import annotations

import base64
import fcntl
import os
import socket
import struct
import subprocess
import sys
import textwrap

import pytest

MAGIC = 0x43504941
IMPORT_REPLY = 2
REPLY_FD, REPLY_LEDGER = 1, 2
LEDGER_BYTES = 16384 * 4
PAGE = 4096
IPC_ERROR = 507022
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE = 0x1, 0x2, 0x4, 0x8
SEALED = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL  # what this library's exporter seals

# The importer: prints its own place (in a key of its own), reads the fake key, imports it.
# Accepted: says so, waits for the word (the exporter cuts the ledger meanwhile), closes.
IMPORTER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import ascend_ipc as aipc

    def loose_fds():  # descriptors other than sockets (the connection may stay)
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not os.readlink("/proc/self/fd/" + fd).startswith("socket:"):
                    n += 1
            except OSError:
                pass
        return n

    a = aipc.from_numpy(np.zeros(4, dtype=np.uint8))
    print(aipc.export(a).key, flush=True)
    key = sys.stdin.readline().strip()
    before = loose_fds()
    try:
        b = aipc.IpcHandle(key, 4096).open()
    except aipc.AclError as e:
        print("REFUSED", e.code, loose_fds() - before, e.message, flush=True)
    else:
        print("ACCEPTED", flush=True)
        sys.stdin.readline()
        b.close()
        print("CLOSED", flush=True)
    """
)


def key_for(pid: int, nonce: int, place: int) -> str:
    record = struct.pack("<II", pid, 0) + nonce.to_bytes(6, "little") + struct.pack("<IQ", place, 7) + bytes(16)
    return "aipc2." + base64.urlsafe_b64encode(record).decode().rstrip("=")


def place_of(key: str) -> int:
    record = base64.urlsafe_b64decode(key[6:] + "=" * (-len(key[6:]) % 4))
    return struct.unpack_from("<I", record, 14)[0]


def sealed_memfd(size: int, seals: int) -> int:
    fd = os.memfd_create("liar", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def grant(req: int, slot: int, flags: int) -> bytes:
    body = struct.pack("<iIiIQQII", 0, flags, 0, 0, 0, PAGE, 0, slot)
    return struct.pack("<IHHIIQ", MAGIC, 1, IMPORT_REPLY, 24 + len(body), 0, req) + body


def serve_one_lie(mem_seals: int, ledger_seals: int | None):
    """Runs the importer against one lying grant: its answer (split), the rest of its output, its exit status."""
    nonce = 0x5EED0000 | (os.getpid() & 0xFFFF)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(b"\0" + f"ascend_ipc.{os.getpid()}.{nonce:016x}".encode())
    ls.listen(4)
    env = dict(os.environ, ASCEND_IPC_TIMEOUT_MS="86400000")  # a refusal comes at once, never by timeout
    proc = subprocess.Popen([sys.executable, "-c", IMPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    fds = []
    try:
        own_key = proc.stdout.readline().strip()
        assert own_key.startswith("aipc2."), own_key
        proc.stdin.write(key_for(os.getpid(), nonce, place_of(own_key)) + "\n")
        proc.stdin.flush()
        conn, _ = ls.accept()
        with conn:
            packet = conn.recv(512)
            assert len(packet) == 64 and struct.unpack_from("<H", packet, 6)[0] == 1  # an IMPORT
            req = struct.unpack_from("<Q", packet, 16)[0]
            fds.append(sealed_memfd(PAGE, mem_seals))
            flags = REPLY_FD
            if ledger_seals is not None:
                fds.append(sealed_memfd(LEDGER_BYTES, ledger_seals))
                flags |= REPLY_LEDGER
            socket.send_fds(conn, [grant(req, 1, flags)], fds)
            line = proc.stdout.readline().rstrip("\n").split(" ", 3)
            if line[0] == "ACCEPTED" and ledger_seals is not None and not ledger_seals & F_SEAL_SHRINK:
                os.ftruncate(fds[1], 0)  # cut the ledger under the importer's mapping
            if line[0] == "ACCEPTED":
                proc.stdin.write("go\n")
                proc.stdin.flush()
            proc.stdin.close()
            rest = proc.stdout.read()
            rc = proc.wait(timeout=120)
        return line, rest, rc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        for fd in fds:
            os.close(fd)
        ls.close()




@pytest.mark.parametrize(
    "mem_seals, ledger_seals, needle",
    [
        # the critical one: a ledger the exporter can cut would kill the importer at its close
        (SEALED, 0, "release ledger that is not sealed against shrinking"),
        (SEALED, F_SEAL_SHRINK | F_SEAL_SEAL, "release ledger that is not sealed against growing"),
        (F_SEAL_SHRINK | F_SEAL_SEAL, SEALED, "granted memory that is not sealed against growing"),
        (SEALED | F_SEAL_WRITE, SEALED, "granted memory that is sealed against writing"),
    ],
    ids=["ledger-unsealed-then-cut", "ledger-can-grow", "memory-can-grow", "memory-write-sealed"],
)
def test_lying_exporter_gets_an_acl_error(mem_seals, ledger_seals, needle):
    line, rest, rc = serve_one_lie(mem_seals, ledger_seals)
    assert rc == 0, f"the importer ended with {rc} (a negative number is the signal that killed it): {line} {rest}"
    assert line[0] == "REFUSED", f"the importer accepted the grant: {line} {rest}"
    code, leaked, message = int(line[1]), int(line[2]), line[3]
    assert code == IPC_ERROR and needle in message, message
    assert leaked == 0, f"{leaked} descriptor(s) of the grant left open"
