#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/).

Deterministic: run it again and the same files come out. Each file is named
by the SHA-1 of its content, as libFuzzer names the inputs it keeps. Inputs
found by fuzzing (make fuzz) can be added next to these seeds.

    python3 tests/fuzz/make_corpus.py
"""

import base64
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x43504941
PAGE = 4096


def write(target, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


# ---- keys ------------------------------------------------------------------


def record(pid=1234, sdid=0, nonce=0x112233445566, place=0x9ABCDEF0, export_id=1, secret=bytes(range(16))):
    # pid, sdid, nonce (48 bits), place, export id, secret: 42 bytes
    return struct.pack("<II", pid, sdid) + nonce.to_bytes(6, "little") + struct.pack("<IQ", place, export_id) + secret


def key(prefix=b"aipc2.", **fields):
    return prefix + base64.urlsafe_b64encode(record(**fields))


def keys():
    good = key()
    seeds = [
        good,
        key(pid=0x7FFFFFFF, sdid=0xFFFFFFFF, nonce=2**48 - 1, place=2**32 - 1, export_id=2**64 - 1, secret=b"\xff" * 16),
        key(pid=1, nonce=1, place=0, export_id=1, secret=bytes(16)),
        key(pid=0), key(pid=0x80000000), key(nonce=0), key(export_id=0),
        b"", b"a", b"aipc2.", b"aipc2", b"aipc1." + good[6:], b"aipc3." + good[6:], b"AIPC2." + good[6:],
        good[:-1], good + b"A", good[:-1] + b"B",  # truncated, too long, changed last character
        good[:30] + b"=" + good[31:], good[:30] + b"+" + good[31:], good[:30] + b"/" + good[31:],
        good[:30] + b"\x00" + good[31:], good + b"\x00garbage after the NUL",
        b"A" * 64, b"A" * 65, b"A" * 80, b"aipc2." + b"A" * 60,
        b"aipc1.0gQAAAAAAACId2ZVRDMiEQEAAAAAAAAAAAECAwQFBgcICQoLDA0ODw",  # a version-1 key
        bytes(range(1, 70)), bytes(range(128, 200)),
        record(pid=42, nonce=7, export_id=9, secret=bytes(16)),  # a raw record (drives the round trip)
        key(prefix=b"aipn2."), key(prefix=b"aipe2."), key(prefix=b"aipv2."), key(prefix=b"aipx2."),
        key(prefix=b"aipn2.")[:-1],
        record(pid=42, nonce=7, export_id=9, secret=bytes(15) + b"\x01"),  # a raw record of another kind
    ]
    for s in seeds:
        write("key", s)


# ---- IPC event handles (64 bytes: the key, its NUL, zeros) -----------------


def handles():
    good = key(prefix=b"aipe2.") + bytes(2)
    seeds = [
        good, good[:62], good[:-1] + b"\x01", good[:63] + b"\xff",
        key(prefix=b"aipc2.") + bytes(2), key(prefix=b"aipn2.") + bytes(2),
        key(pid=0, prefix=b"aipe2.") + bytes(2), key(prefix=b"aipe2.")[:61] + bytes(3),
        bytes(64), b"\xff" * 64, b"aipe2." + b"A" * 58, good + b"longer than a handle",
        # shareable handles of physical memory: door << 32 | 32 random bits, as 8 little-endian bytes
        struct.pack("<Q", 0x1234ABCD << 32 | 0x5A5A5A5A), struct.pack("<Q", 0x1234ABCD << 32), struct.pack("<Q", 0xFFFFFFFF),
        struct.pack("<Q", (1 << 64) - 1),
    ]
    for s in seeds:
        write("handle", s)


# ---- protocol messages -----------------------------------------------------


def header(mtype, length, req=1, version=1, reserved=0, magic=MAGIC):
    return struct.pack("<IHHIIQ", magic, version, mtype, length, reserved, req)


def imp(export_id=5, secret=bytes(range(16)), flags=0, sdid=0, req=1, settled=0):
    return header(1, 64, req) + struct.pack("<Q", export_id) + secret + struct.pack("<IIQ", flags, sdid, settled)


def cancel(req=1, body=b""):
    return header(5, 24 + len(body), req) + body


def release(export_id=5, count=1, req=2, reserved=0):
    return header(3, 40, req) + struct.pack("<QII", export_id, count, reserved)


def reply(status=0, flags=1, device=0, attr=0, offset=0, size=PAGE, text=b"", slot=0, req=1):
    body = struct.pack("<iIiIQQII", status, flags, device, attr, offset, size, len(text), slot) + text
    return header(2, 24 + len(body), req) + body


def error(status=507022, text=b"exporter speaks IPC protocol version 1, not 2", req=1):
    body = struct.pack("<iI", status, len(text)) + text
    return header(4, 24 + len(body), req) + body


def protos():
    seeds = [
        imp(), imp(flags=1), imp(export_id=0), imp(flags=2), imp(sdid=7), imp(export_id=2**64 - 1),
        imp(req=9, settled=9), imp(req=9, settled=3), imp(req=9, settled=10), imp(req=0, settled=0),
        cancel(), cancel(req=2**64 - 1), cancel(body=b"\x00" * 8),
        release(), release(count=0), release(reserved=1), release(count=0xFFFFFFFF),
        reply(), reply(flags=3, slot=0), reply(flags=0, slot=0xFFFFFFFF, device=65535, attr=1,
                                              offset=PAGE * 3, size=2**47),
        reply(size=0), reply(size=100), reply(offset=1), reply(slot=16384), reply(attr=2),
        reply(device=-1), reply(flags=4), reply(text=b"x"),
        reply(status=507022, flags=0, size=0, text=b"key not exported by process 1 (closed, never issued, or forged)"),
        reply(status=207006, flags=0, size=0, text=b"not on the whitelist"),
        reply(status=12345, flags=0, size=0), reply(status=507022, flags=0, size=0, text=b"bad\x01text"),
        reply(status=507022, flags=0, size=0, text=b"y" * 255),
        error(), error(text=b""), error(status=0), error(text=b"z" * 256),
        header(1, 24), header(2, 24), header(5, 24), header(0, 24),
        header(1, 64, version=2) + bytes(40), header(1, 64, reserved=1) + bytes(40),
        header(1, 64, magic=0) + bytes(40), header(1, 65) + bytes(40), header(1, 56) + bytes(32),
        imp()[:40], imp() + b"\x00", b"", b"AIPC", bytes(512), bytes(513),
    ]
    for s in seeds:
        write("proto", s)


# ---- exporter scripts (tests/fuzz/fuzz_server.c) -----------------------------
# byte 0: peer (low nibble % 5: 0 whitelisted pid, 1 the exporter itself, 2 a stranger, 3 a ghost
# (whitelisted on export 1 while it ran, gone since), 4 no credentials; +0x10 another uid)
# ops (op % 13): 0 raw packet (u16 len, bytes), 1 IMPORT (slot, flags), 2 RELEASE (slot, count;
# count >= 0x80: CANCEL of an earlier request),
# 3 ledger write (flags[, u16 slot][, u32 value]), 4 service (n), 5 read replies,
# 6 exporter close (slot), 7 own import (slot), 8 sweep, 9 IMPORT with fds (slot, flags),
# 10 half-close (op 23: the peer's credentials change: serve, read, then a peer byte),
# 11 whitelist/attribute (slot, flags), 12 random-field packet (type, bytes)

SERVE, READ, SWEEP, HALF = bytes([4, 3]), bytes([5]), bytes([8]), bytes([10])


def become(who):
    """The peer's credentials change (setuid, or the socket handed on): byte 0's encoding."""
    return bytes([23, who])


def op_import(slot, flags=0):
    return bytes([1, slot, flags])


def op_release(slot, count=1):
    return bytes([2, slot, count])


def op_cancel(back=0):
    """CANCEL of the request `back` before the last one sent."""
    return bytes([2, 0, 0x80 | (back << 2)])


def op_ledger(pick_granted=True, value_index=1, slot=0, value=None):
    f = (1 if pick_granted else 0) | (value_index << 4) | (0x80 if value is not None else 0)
    out = bytes([3, f])
    if not pick_granted:
        out += struct.pack("<H", slot)
    if value is not None:
        out += struct.pack("<I", value)
    return out


def servers():
    seeds = [
        # import, serve, read the grant; release by message; release by ledger
        bytes([0]) + op_import(0) + SERVE + READ + op_release(0) + SERVE,
        bytes([0]) + op_import(0) + SERVE + READ + op_ledger(True, 1) + bytes([6, 0]) + SWEEP,
        # every export, every peer
        bytes([0]) + b"".join(op_import(i) + SERVE + READ for i in range(4)),
        bytes([1]) + b"".join(op_import(i) + SERVE + READ for i in range(4)),
        bytes([2]) + b"".join(op_import(i) + SERVE + READ for i in range(4)),
        bytes([0x10]) + op_import(0) + SERVE + READ,
        # exporter closes while imported, then the importer releases through the ledger
        bytes([0]) + op_import(0) + op_import(0) + SERVE + SERVE + READ + bytes([6, 0])
        + op_ledger(True, 2) + SWEEP + bytes([6, 0]),
        # more released than held: by message, by ledger
        bytes([0]) + op_import(2) + SERVE + READ + op_release(2, 3) + SERVE,
        bytes([0]) + op_import(2) + SERVE + READ + op_ledger(True, 5) + op_import(2) + SERVE,
        # a ledger count waiting in a slot before its grant
        bytes([0]) + op_import(0) + SERVE + READ + op_ledger(False, 0, slot=1, value=5) + op_import(1) + SERVE + READ
        + bytes([6, 1]),
        # replayed, forged, with descriptors, bad flags, another server
        bytes([0]) + op_import(0, 1) + op_import(0, 1) + SERVE + SERVE + READ,
        bytes([0]) + op_import(0, 4 | 0x30) + SERVE + READ,
        bytes([0]) + op_import(0, 2 | 0x10) + SERVE + READ,
        bytes([0]) + bytes([9, 0, 0]) + SERVE,
        bytes([0]) + bytes([9, 0, 1]) + SERVE,
        bytes([0]) + op_import(0, 8 | 0x80) + SERVE,
        bytes([0]) + op_import(0, 0xC0) + SERVE + READ,
        # self imports around an export's close; whitelist and attribute calls
        bytes([0]) + bytes([7, 3, 11, 3, 1, 1, 3]) + op_import(3) + SERVE + READ + bytes([6, 3, 6, 3]),
        bytes([2]) + bytes([11, 3, 2]) + op_import(3) + SERVE + READ + bytes([11, 3, 3]) + op_import(3) + SERVE + READ,
        bytes([0]) + bytes([11, 0, 4]) + op_import(0) + SERVE + READ + bytes([11, 0, 4]),
        # raw garbage, truncated, oversized, an empty packet, a reply type
        bytes([0]) + bytes([0]) + struct.pack("<H", 24) + header(2, 24) + SERVE,
        bytes([0]) + bytes([0]) + struct.pack("<H", 0) + SERVE,
        bytes([0]) + bytes([0]) + struct.pack("<H", 40) + imp()[:40] + SERVE,
        bytes([0]) + bytes([0]) + struct.pack("<H", 600) + bytes(600) + SERVE,
        bytes([0]) + bytes([12, 0]) + bytes(32) + SERVE,
        bytes([0]) + bytes([12, 2]) + bytes(16) + SERVE,
        # half-close with work queued; the importer going away while holding references
        bytes([0]) + op_import(0) + op_import(1) + HALF + SERVE + SERVE + SERVE,
        bytes([0]) + op_import(0) + op_import(2) + SERVE + SERVE + READ + bytes([6, 0, 6, 2]),
        # another protocol version
        bytes([0]) + bytes([0]) + struct.pack("<H", 64) + header(1, 64, version=2) + bytes(40) + SERVE + READ,
        # cancelled grants: served then cancelled, cancelled twice, settled then cancelled, never granted
        bytes([0]) + op_import(0) + op_cancel() + SERVE + SERVE + READ + bytes([6, 0]) + SWEEP,
        bytes([0]) + op_import(0) + op_import(1) + op_cancel(1) + op_cancel(1) + SERVE + SERVE + SERVE + SERVE + READ,
        bytes([0]) + op_import(0) + op_import(1, 0x20) + op_cancel(1) + SERVE + SERVE + SERVE + READ,
        bytes([2]) + op_import(0) + op_cancel() + SERVE + SERVE + READ,
        bytes([0]) + op_import(0) + SERVE + READ + op_release(0) + op_cancel() + SERVE + SERVE,
        # credentials per request: a ghost's pid; a whitelisted importer that becomes another user (refused,
        # releases still taken), a ghost, a stranger, a sender without credentials; another user that becomes
        # the friend
        bytes([3]) + op_import(1) + op_import(0) + SERVE + SERVE + READ,
        bytes([0]) + op_import(1) + SERVE + READ + become(0x10) + op_import(1) + op_import(0) + SERVE + SERVE + READ
        + op_release(1) + SERVE + op_ledger(True, 1) + bytes([6, 1]),
        bytes([0]) + op_import(1) + SERVE + READ + become(3) + op_import(1) + SERVE + READ + op_release(1) + SERVE,
        bytes([0]) + op_import(0) + op_import(1) + become(2) + op_import(1) + SERVE + READ,
        bytes([0]) + op_import(0) + SERVE + READ + become(4) + op_import(0) + SERVE + READ,
        bytes([0x10]) + op_import(1) + SERVE + READ + become(0) + op_import(1) + SERVE + READ,
        bytes([4]) + op_import(0) + SERVE,
    ]
    for s in seeds:
        write("server", s)


# ---- fabric handles (tests/fuzz/fuzz_fabric.c) ---------------------------------
# 128 bytes: magic "AIPF", u16 version 1, u16 0, u64 super-node id, u32 sdid, u32 pid, u64 nonce,
# u32 place, u32 0, u64 export id, 16 secret bytes, 64 zero bytes (docs/design-ipc.md)


def fabric(magic=0x46504941, version=1, res=0, supernode=0x1122334455667788, sdid=0, pid=1234,
           nonce=0x112233445566, place=0x9ABCDEF0, res2=0, export_id=1, secret=bytes(range(1, 17)), tail=bytes(64)):
    return (struct.pack("<IHHQII", magic, version, res, supernode, sdid, pid) + struct.pack("<QII", nonce, place, res2)
            + struct.pack("<Q", export_id) + secret + tail)


def fabrics():
    seeds = [
        fabric(), fabric(sdid=4026532368), fabric(pid=0x7FFFFFFF, nonce=2**48 - 1, export_id=2**64 - 1),
        fabric(magic=0), fabric(version=2), fabric(res=1), fabric(supernode=0), fabric(pid=0), fabric(pid=2**31),
        fabric(nonce=0), fabric(nonce=2**48), fabric(res2=1), fabric(export_id=0), fabric(secret=bytes(16)),
        fabric(tail=b"\x01" + bytes(63)), fabric()[:64], bytes(128), b"",
    ]
    for s in seeds:
        write("fabric", s)


if __name__ == "__main__":
    keys()
    handles()
    protos()
    servers()
    fabrics()
