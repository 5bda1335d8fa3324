"""Attacks on an exporter by processes the kernel lets reach it (docs/design-ipc.md, "Security model").

- A guesser of shareable handles: a handle whose whitelist lacks it answers exactly as an
  unknown number does, and failed lookups are rate-limited by the exporter.
- A process that uses a connection it did not open (a forked child of the opener) is refused,
  speaking the wire protocol by hand as an attacker would.

Rate bounds are stated against the clock the guesser reads itself, so a slow machine makes
them looser, never false.
"""

import base64
import multiprocessing as mp
import os
import re
import socket
import struct
import time

import numpy as np

import ascend_ipc as aipc

G = aipc.granularity()
BURST, PER_S = 64, 16  # the exporter's allowance of failed shareable-handle lookups


def _open_and_report(conn, values):
    out = []
    for v in values:
        try:
            aipc.ShareableHandle(v, G, 0, os.getppid()).open().close()
            out.append((0, ""))
        except aipc.AclError as e:
            out.append((e.code, str(e)))
    conn.send(out)


def _in_child(target, *args):
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=target, args=(there,) + args)
    p.start()
    there.close()  # the child's end is the child's: a child that dies unanswered is an EOF here, not a hang
    try:
        return here.recv()
    finally:
        p.join(60)
        assert p.exitcode == 0


def _strip_numbers(text):
    return re.sub(r"\d+|0x[0-9a-f]+", "#", text)


def test_a_whitelisted_handle_answers_a_stranger_as_an_unknown_one_does():
    pm = aipc.PhysicalMemory(G)
    h = pm.export(pids=[1])  # whitelisted for some other process
    wrong = h.value ^ 0x5A5A
    (code_right, right), (code_wrong, wrong_text) = _in_child(_open_and_report, [h.value, wrong])
    assert code_right == code_wrong == 207006
    assert _strip_numbers(right) == _strip_numbers(wrong_text)
    assert "aclrtMemSetPidToShareableHandle" in right  # still says what a legitimate importer lacks
    pm.close()


def _guess(conn, value, n):
    looked_up = held_off = hits = 0
    t0 = time.monotonic()
    rng = np.random.default_rng(os.getpid())
    for g in rng.integers(1, 2**32, size=n, dtype=np.uint64):
        guess = (value & ~0xFFFFFFFF) | int(g)
        if guess == value:
            guess ^= 2  # a wrong number still
        try:
            aipc.ShareableHandle(guess, G, 0, os.getppid()).open().close()
            hits += 1
        except aipc.AclError as e:
            if "too many failed" in str(e):
                held_off += 1
            else:
                assert e.code == 207006 and "never issued" in str(e), str(e)
                looked_up += 1
    conn.send((looked_up, held_off, hits, time.monotonic() - t0))


def test_guessing_shareable_handles_is_rate_limited():
    pm = aipc.PhysicalMemory(G)
    h = pm.export(pids=None)  # any process of the user may open it: only the number guards it
    looked_up, held_off, hits, seconds = _in_child(_guess, h.value, 1000)
    assert hits == 0
    assert looked_up + held_off == 1000  # every guess answered: a miss, or held off
    assert looked_up <= BURST + PER_S * (seconds + 1)
    # once the guessing stops, the allowance grows back (a lower bound on the wait)
    time.sleep(2 / PER_S)
    [(code, text)] = _in_child(_open_and_report, [h.value])
    assert code == 0, text
    pm.close()


# ---- a connection serves the process that opened it ---------------------------------------

_HEADER = struct.Struct("<IHHIIQ")  # magic, version, type, length, reserved, request id
_MAGIC, _IMPORT, _REPLY = 0x43504941, 1, 2


def _key_record(key):
    body = key.split(".", 1)[1]
    rec = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    pid, _sdid = struct.unpack_from("<II", rec, 0)
    nonce = int.from_bytes(rec[8:14], "little")
    export_id = struct.unpack_from("<Q", rec, 18)[0]
    return pid, nonce, export_id, rec[26:42]


def _raw_import(sock, export_id, secret, req):
    body = struct.pack("<Q16sIIQ", export_id, secret, 0, 0, 0)
    sock.send(_HEADER.pack(_MAGIC, 1, _IMPORT, _HEADER.size + len(body), 0, req) + body)
    data, ancdata, _flags, _addr = sock.recvmsg(1024, socket.CMSG_SPACE(8 * 4))
    for level, kind, fds in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            for i in range(0, len(fds) - len(fds) % 4, 4):
                os.close(int.from_bytes(fds[i:i + 4], "little"))
    _magic, _ver, typ, _len, _res, rid = _HEADER.unpack_from(data, 0)
    assert typ == _REPLY and rid == req
    status, = struct.unpack_from("<i", data, 24)
    text_len, = struct.unpack_from("<I", data, 56)
    return status, data[64:64 + text_len].decode()


def _connection_sharer(conn, key):
    pid, nonce, export_id, secret = _key_record(key)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(f"\0ascend_ipc.{pid}.{nonce:016x}")
    first = _raw_import(s, export_id, secret, 1)
    child = os.fork()
    if child == 0:  # holds the same connection, and was not the one to open it
        try:
            conn.send(_raw_import(s, export_id, secret, 2))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    conn.send((first, _raw_import(s, export_id, secret, 3)))
    s.close()


def test_an_inherited_connection_serves_only_the_process_that_opened_it():
    a = aipc.from_numpy(np.arange(1024, dtype=np.uint8))
    h = aipc.export(a, pids=None)
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_connection_sharer, args=(there, h.key))
    p.start()
    child_status, child_text = here.recv()
    (first, _), (again, _) = here.recv()
    p.join(60)
    assert p.exitcode == 0
    assert first == 0 and again == 0  # the opener is served
    assert child_status == 207006 and "opened by process" in child_text
    h.close()
    a.close()
