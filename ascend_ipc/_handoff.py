"""Put and drop: a pickled hand-off keeps what it needs alive in the sender until it is opened.

Every kind of handle takes part, each holding the object that keeps what its receiver needs:

- IpcHandle (export()'s, or ascend_ipc.torch's reduction of a tensor): the exporter's handle,
  so the memory and its export (and, with a stream, its IPC event; with keepalive=, that
  object: a torch storage);
- StateDictHandle: its IpcHandle, as above, whose keepalive is the packed buffer and the IPC
  event that orders the exporter's writes;
- ShareableHandle: itself, which references the PhysicalMemory it was exported from;
- MappedHandle: itself, which keeps the retained PhysicalMemory of every chunk (and the torch
  storage);
- an IPC Event: the creator's Event.

When the process that made one pickles it, this process keeps that object alive for the copy
under a fresh 128-bit token (hold(): one dict insert). Through multiprocessing's
ForkingPickler (queues, pipes, DataLoader workers: one receiver per copy; ascend_ipc registers
the one-receiver reductions there), the pickle carries the hold — the address of this process's
release socket and the token — and the receiver's open(), or the copy's close or collection
without an open, sends the token back (a receiver's releases of one millisecond together, in
one datagram): the hold goes at once. An IPC event's copy is opened by its unpickling, which
gives the hold back. Plain pickle may feed many receivers (torch.distributed's
broadcast_object_list sends one pickle to every rank), so such a copy carries no release and
is held until the deadline. Either way a copy is let go after ASCEND_IPC_SEND_TIMEOUT_S
seconds (default 60), so what a sender holds is bounded by what is in flight. A copy
forwarded unopened passes its hold on.

IpcHandle and Event keep their hold in the extension (csrc/python); the Python handles keep
theirs in a Ticket, which gives it back exactly once. A pickle is data anyone can edit: a hold
of another shape than (address, token) is refused with TypeError, and release() sends only a
16-byte token, only to an ascend_ipc release socket.

The release socket is an abstract Unix datagram socket served by one daemon thread, made
on the first hold. Releases are accepted from processes of this user only (the kernel's
credentials), and a token names one hold: a forged release can only end a hold early,
which makes that copy's open fail with the runtime's error, as after the deadline.
"""

from __future__ import annotations

import atexit
import heapq
import os
import socket
import struct
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

_DEFAULT_TIMEOUT_S = 60.0
_TOKEN_LEN = 16
_TOKENS_PER_DATAGRAM = 256  # 4 KiB of tokens
_GATHER_S = 0.001  # how long releases gather before they go
_DRAIN_MAX = 256  # datagrams the hold thread takes in one turn
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def send_timeout_s() -> float:
    """ASCEND_IPC_SEND_TIMEOUT_S: seconds a sender keeps an unopened hand-off (default 60)."""
    raw = os.environ.get("ASCEND_IPC_SEND_TIMEOUT_S")
    if raw is None:
        return _DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        return _DEFAULT_TIMEOUT_S
    return value if 0 < value <= 86400 * 7 else _DEFAULT_TIMEOUT_S


class _Holds:
    """This process's holds and its release socket (one per process, remade after fork)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.RLock()
        self.holds: Dict[bytes, Tuple[Any, float]] = {}
        # (deadline, token) of every hold, soonest first; a released hold's entry stays until
        # its deadline comes up (it is then skipped)
        self.deadlines: List[Tuple[float, bytes]] = []
        # the deadline the thread sleeps until (inf: until a datagram comes), so that a hold
        # wakes it only when it must wake sooner
        self.sleeps_until = float("inf")
        self.released_datagrams = 0  # datagrams of tokens received (for tests)
        self.sock: Optional[socket.socket] = None
        self.address: Optional[bytes] = None
        self.thread: Optional[threading.Thread] = None
        self.pid = os.getpid()

    def _start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = b"\0ascend_ipc.hold.%d.%s" % (os.getpid(), os.urandom(8).hex().encode())
        sock.bind(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock, self.address = sock, address
        self.thread = threading.Thread(target=self._serve, name="ascend_ipc-handoff", daemon=True)
        self.thread.start()

    def hold(self, obj: Any) -> Tuple[bytes, bytes]:
        token = os.urandom(_TOKEN_LEN)
        deadline = time.monotonic() + send_timeout_s()
        with self.lock:
            if self.sock is None or not self.thread.is_alive():
                if self.sock is not None:  # the thread ended (it should not): start over
                    self.sock.close()
                self._start()
            self.holds[token] = (obj, deadline)
            heapq.heappush(self.deadlines, (deadline, token))
            address = self.address
            # the thread sleeps until a sooner deadline (the usual case: every hold has the
            # same timeout) or until a datagram: only in the second case must it look again
            poke = deadline < self.sleeps_until
            if poke:
                self.sleeps_until = deadline
        if poke:
            _send(address, b"")  # a zero-length datagram: look at the deadlines again
        return address, token

    def _next_timeout(self) -> Optional[float]:
        with self.lock:
            self.sleeps_until = until = self.deadlines[0][0] if self.deadlines else float("inf")
        if until == float("inf"):
            return None
        # at least a millisecond: a zero timeout would make the socket non-blocking
        return max(0.001, until - time.monotonic())

    def _expire(self) -> None:
        now = time.monotonic()
        dropped = []
        with self.lock:
            while self.deadlines and self.deadlines[0][0] <= now:
                _, token = heapq.heappop(self.deadlines)
                held = self.holds.get(token)
                if held is not None and held[1] <= now:  # not released, not a newer hold
                    dropped.append(self.holds.pop(token))
        del dropped  # the memory goes here, outside the lock

    def _serve(self) -> None:
        sock = self.sock
        uid = os.geteuid()
        space = socket.CMSG_SPACE(_CRED.size)
        while True:
            try:
                sock.settimeout(self._next_timeout())
                packets = [sock.recvmsg(_TOKEN_LEN * _TOKENS_PER_DATAGRAM, space)]
                # Then every datagram already queued, in this one turn of the GIL: the queue
                # holds few (net.unix.max_dgram_qlen), and a receiver that finds it full waits.
                sock.settimeout(0.0)  # (with a timeout, Python would wait for more)
                while len(packets) < _DRAIN_MAX:
                    try:
                        packets.append(sock.recvmsg(_TOKEN_LEN * _TOKENS_PER_DATAGRAM, space))
                    except (BlockingIOError, InterruptedError):
                        break
            except (socket.timeout, BlockingIOError, InterruptedError):
                self._expire()
                continue
            except OSError:
                return  # the socket was closed (exit)
            tokens = [data[i:i + _TOKEN_LEN] for data, anc, _flags, _addr in packets
                      if data and len(data) % _TOKEN_LEN == 0 and _sender_uid(anc) == uid
                      for i in range(0, len(data), _TOKEN_LEN)]
            self.released_datagrams += sum(1 for data, _a, _f, _ad in packets if data)
            if tokens:
                with self.lock:
                    dropped = [self.holds.pop(t, None) for t in tokens]
                    if len(self.deadlines) > 2 * len(self.holds) + 1024:
                        # mostly released holds: keep the heap in proportion to what is held
                        self.deadlines = [(d, t) for t, (_, d) in self.holds.items()]
                        heapq.heapify(self.deadlines)
                del dropped  # the memory goes here, outside the lock
            self._expire()

    def count(self) -> int:
        with self.lock:
            return len(self.holds)

    def after_fork_in_child(self) -> None:
        # The parent's holds, socket and thread are not this process's: forget them (the
        # memory they held is the parent's; dropping the objects here frees nothing of it).
        self._reset()


def _sender_uid(anc: List[Tuple[int, int, bytes]]) -> Optional[int]:
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= _CRED.size:
            return _CRED.unpack_from(payload)[1]
    return None


_state = _Holds()
os.register_at_fork(after_in_child=_state.after_fork_in_child)

_client_lock = threading.RLock()  # reentrant: a collection inside may release a copy
_client: Optional[Tuple[int, socket.socket]] = None  # (the pid that made it, the socket)


def hold(obj: Any, one_receiver: bool = True) -> Optional[Tuple[bytes, bytes]]:
    """Keeps obj alive for one pickled copy: until the deadline, and with one_receiver until
    the copy with the returned (address, token) is opened (None when not one_receiver: the
    copy carries no release)."""
    address_token = _state.hold(obj)
    return address_token if one_receiver else None


def carried(obj: Any, ticket: Optional["Ticket"], one_receiver: bool) -> Optional[Tuple[bytes, bytes]]:
    """The hold a pickled copy of obj carries: obj made in this process (ticket None) is held
    for the copy (hold()); a received copy passes on the hold it came with, if it has not
    given it back yet."""
    if ticket is None:
        return hold(obj, one_receiver)
    return ticket.pair


class Ticket:
    """The receiver's side of one copy's hold: release() gives it back to the sender, once —
    on the copy's open, its close, or its collection, whichever comes first."""

    __slots__ = ("pair",)

    def __init__(self, pair: Optional[Tuple[bytes, bytes]]) -> None:
        # A pickle is data anyone can edit: a pair of another shape is refused here; one of
        # the right shape with the wrong contents is refused by release(), which never raises.
        if pair is not None and (type(pair) is not tuple or len(pair) != 2):
            raise TypeError("hold must be None or an (address, token) pair")
        self.pair = pair

    def release(self) -> None:
        pair, self.pair = self.pair, None
        if pair is not None:
            release(*pair)

    def __del__(self) -> None:  # a copy collected unopened
        try:
            self.release()
        except Exception:  # at interpreter exit the module may be half gone: the deadline ends it
            pass


def release(address: bytes, token: bytes) -> None:
    """Tells the sender that this copy has been opened (or dropped), within a millisecond or
    so. Never raises: a sender that is gone has nothing left to release."""
    if not isinstance(address, bytes) or not isinstance(token, bytes) or len(token) != _TOKEN_LEN:
        return
    if not address.startswith(b"\0ascend_ipc.hold."):
        return  # only this package's sockets: a crafted pickle cannot aim datagrams elsewhere
    _releases.add(address, token)


class _Releases:
    """This process's releases on their way. One that comes alone goes at once; those that
    follow it within a millisecond gather and go to each sender as one datagram of tokens, sent
    by a daemon thread a millisecond later (and at exit, multiprocessing's children included,
    whatever is left). A datagram per release made the sender's thread take the GIL and run
    for each open, beside the IPC server thread serving the next import: a burst of opens now
    costs the sender one wake-up per millisecond."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # reentrant: a collection while a release is added may release another copy
        self.cond = threading.Condition(threading.RLock())
        self.sending = threading.RLock()
        self.pending: Dict[bytes, List[bytes]] = {}
        self.thread: Optional[threading.Thread] = None
        self.idle = True  # the thread waits for a release (or does not exist yet)
        self.last_sent = 0.0  # time.monotonic() of the last datagram
        self.pid = os.getpid()

    def add(self, address: bytes, token: bytes) -> None:
        now = time.monotonic()
        with self.cond:
            alone = not self.pending and now - self.last_sent >= _GATHER_S
            if alone:
                self.last_sent = now
            else:
                self.pending.setdefault(address, []).append(token)
                start = self.idle and self.thread is None
                if self.idle and not start:
                    self.cond.notify()
                self.idle = False
                if start:
                    self.thread = threading.current_thread()  # a placeholder: one starter
        if alone:
            _send(address, token)
        elif start:
            self._start()

    def _start(self) -> None:
        # Outside the lock: a collection in the new thread may release copies too.
        try:
            thread = threading.Thread(target=self._run, name="ascend_ipc-release", daemon=True)
            thread.start()
            # multiprocessing's children leave by os._exit after their finalizers, not atexit;
            # the lowest priority runs last, after finalizers that may release copies
            _mp_util().Finalize(None, self.flush, exitpriority=-1000)
        except Exception:  # no thread (interpreter shutting down, out of resources): send now
            with self.cond:
                self.thread = None
                self.idle = True
            self.flush()
            return
        with self.cond:
            self.thread = thread

    def _take(self) -> Dict[bytes, List[bytes]]:
        with self.cond:
            batch, self.pending = self.pending, {}
            if batch:
                self.last_sent = time.monotonic()
        return batch

    def _send_pending(self, wait: Optional[float] = None) -> None:
        # One sender at a time, so that a flush at exit also waits for a batch the thread has
        # taken but not sent yet (at most a queue's wait, a second)
        if self.sending.acquire(timeout=-1 if wait is None else wait):
            try:
                self._send(self._take())
            finally:
                self.sending.release()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.idle = True
                    self.cond.wait()
            time.sleep(_GATHER_S)  # the releases of a burst of opens go together
            self._send_pending()

    def flush(self) -> None:
        """Sends every release gathered so far now."""
        if self.pid == os.getpid():
            self._send_pending(wait=2.0)

    @staticmethod
    def _send(batch: Dict[bytes, List[bytes]]) -> None:
        for address, tokens in batch.items():
            for i in range(0, len(tokens), _TOKENS_PER_DATAGRAM):
                _send(address, b"".join(tokens[i:i + _TOKENS_PER_DATAGRAM]))

    def after_fork_in_child(self) -> None:
        self._reset()  # the parent's releases are the parent's to send


def _mp_util() -> Any:
    import multiprocessing.util

    return multiprocessing.util


_releases = _Releases()
os.register_at_fork(after_in_child=_releases.after_fork_in_child)


def _client_after_fork_in_child() -> None:
    # Another thread of the parent (the release thread, a poke) may have held the lock at
    # the fork: the child starts with its own lock and socket.
    global _client_lock, _client
    _client_lock = threading.RLock()
    _client = None


os.register_at_fork(after_in_child=_client_after_fork_in_child)


def _send(address: bytes, data: bytes) -> None:
    """One datagram to a release socket, on this process's client socket. Never raises."""
    global _client
    with _client_lock:
        try:
            if _client is None or _client[0] != os.getpid():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                # A sender's queue holds few datagrams: wait for its thread to read, but not
                # for a stopped sender (that copy's hold then ends at its deadline). The
                # kernel waits (SO_SNDTIMEO) on a blocking socket: one syscall per datagram;
                # with a Python timeout each send would be a poll first, and a full queue of
                # an unconnected datagram socket still polls writable.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("@ll", 1, 0))
                _client = (os.getpid(), sock)
            _client[1].sendto(data, address)
        except OSError:
            pass


@atexit.register
def _close_sockets() -> None:
    # At exit the holds go with the process; the sockets are closed rather than left to the
    # collector (which would warn about them).
    global _client
    _releases.flush()
    with _client_lock:
        if _client is not None and _client[0] == os.getpid():
            _client[1].close()
        _client = None
    sock = _state.sock
    if sock is not None and _state.pid == os.getpid():
        sock.close()


def release_all() -> None:
    """Lets every hold of this process go now, as if every deadline had passed (for tests that
    check what else is left, and for callers that know their receivers are done)."""
    with _state.lock:
        dropped = list(_state.holds.values())
        _state.holds.clear()
        _state.deadlines.clear()
        address = _state.address if _state.pid == os.getpid() else None
    del dropped
    if address is not None:
        _send(address, b"")  # the thread looks at the (now no) deadlines again


def held() -> int:
    """How many hand-offs this process is holding for receivers that have not opened them."""
    return _state.count()
