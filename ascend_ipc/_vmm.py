"""Physical memory sharing: CANN's virtual-memory calls for Python.

Another way to share device memory between processes, the one torch_npu's
expandable segments are built on::

    pm = aipc.PhysicalMemory(2 << 20)          # aclrtMallocPhysical
    h = pm.export(pids=None)                   # picklable ShareableHandle (64-bit number)
    # ... in another process:
    r = aipc.VirtualRange(4 << 20)             # aclrtReserveMemAddress
    a = r.map(h.open(), 0)                     # aclrtMapMem: a DeviceArray over it
    b = r.map(h2.open(), 2 << 20)              # side by side in one range
    whole = r.array()                          # one DeviceArray across both

Lifetimes follow the objects: a mapping lasts while its VirtualRange holds it
or any array over it lives, physical memory while a PhysicalMemory or a
mapping holds it, a reservation while its VirtualRange or a mapping in it
lives. In a forked child, objects inherited from the parent do nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _C
from ._C import AclError, DeviceArray

__all__ = ["PhysicalMemory", "ShareableHandle", "VirtualRange", "MappedHandle", "granularity", "share_mapped"]

# MappedHandle.open_torch(): ascend_ipc.torch.open_torch, which ascend_ipc/__init__.py sets here (this
# module knows no torch).
_open_torch: Optional[Callable[..., Any]] = None


def granularity(device: Optional[int] = None, huge1g: bool = False) -> int:
    """The bytes physical sizes, mappings and reservations are multiples of."""
    return _C._vmm_granularity(device, huge1g)


def _round_up(n: int, g: int) -> int:
    return (n + g - 1) // g * g


def _release_quietly(fn, arg, what: str) -> None:
    try:
        fn(arg)
    except AclError as e:  # never raise from a finalizer: say what leaked
        warnings.warn(f"ascend_ipc: could not release {what}: {e}", ResourceWarning, stacklevel=3)


class PhysicalMemory:
    """Device memory no address reaches until a VirtualRange maps it.

    ``PhysicalMemory(size, device=None)`` allocates (size rounded up to the
    granularity); ``ShareableHandle.open()`` returns one over another
    process's memory. ``close()`` gives this handle back; the memory goes when
    no mapping and no other process holds it.
    """

    __slots__ = ("_handle", "size", "device", "imported", "_pid", "_lock", "__weakref__")

    def __init__(self, size: int, device: Optional[int] = None, *, huge1g: bool = False) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size must be a positive int, not {size!r}")
        dev = _C.current_device() if device is None else int(device)
        rounded = _round_up(size, granularity(dev, huge1g))
        self._adopt(_C._vmm_malloc(size, dev, huge1g), rounded, dev, False)

    @classmethod
    def _from_handle(cls, handle: int, size: int, device: int, imported: bool) -> "PhysicalMemory":
        self = cls.__new__(cls)
        self._adopt(handle, size, device, imported)
        return self

    def _adopt(self, handle: int, size: int, device: int, imported: bool) -> None:
        self._handle = handle
        self.size = size
        self.device = device
        self.imported = imported
        self._pid = os.getpid()
        # Held by close() and by every call that passes the handle to the runtime, so a close in
        # another thread waits for the call (and the call then sees it closed), never frees the
        # handle under it.
        self._lock = threading.RLock()

    @property
    def handle(self) -> int:
        """The aclrtDrvMemHandle, as an int (ValueError once closed)."""
        handle = self._handle  # read once: a close() in another thread may clear it
        if handle is None:
            raise ValueError("PhysicalMemory is closed")
        if self._pid != os.getpid():
            raise ValueError("PhysicalMemory was inherited across fork: it belongs to the parent process")
        return handle

    @contextlib.contextmanager
    def _held(self):
        """The handle, kept from close() until the block ends (ValueError once closed)."""
        with self._lock:
            yield self.handle

    def export(self, pids: Optional[Iterable[int]] = None) -> "ShareableHandle":  # noqa: D417
        """A picklable ShareableHandle other processes of this user open.

        pids: the processes (aclrtDeviceGetBareTgid ids) that may open it;
        None lets any process of this user that holds the number open it
        (ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION). A physical allocation
        has one shareable handle: exporting again adds pids to its whitelist.
        """
        if self.imported:
            raise ValueError("memory imported from another process cannot be exported again (CANN)")
        want = None if pids is None else [int(p) for p in pids]
        with self._held() as handle:
            value = _shareable_number(handle, want is not None)
            if want:
                _C._vmm_set_pids(value, want)
        h = ShareableHandle(value, self.size, self.device, os.getpid(), _C._place_here())
        h._keep = self  # put and drop: a pickled copy holds h, so this memory, until it is opened
        return h

    def close(self) -> None:
        """Gives this handle back (aclrtFreePhysical); idempotent. Waits for a call on it that
        another thread is making (map, export); later calls raise ValueError."""
        lock = getattr(self, "_lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            handle, self._handle = self._handle, None
            if handle is not None and self._pid == os.getpid():
                _release_quietly(_C._vmm_free, handle, "a physical memory handle")

    def __enter__(self) -> "PhysicalMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else ("imported" if self.imported else "allocated")
        return f"<ascend_ipc.PhysicalMemory {state} size={self.size} device={self.device}>"


class ShareableHandle:
    """The 64-bit number of an exported PhysicalMemory; picklable, plain data.

    Holding the number is not enough to open it: the exporter's whitelist
    (export(pids=...)) decides, unless it exported with pids=None. The one
    PhysicalMemory.export() returns keeps that PhysicalMemory alive while it
    lives, and a pickled copy of it keeps it until the copy is opened (put and
    drop: see ascend_ipc/_handoff.py).
    """

    __slots__ = ("value", "size", "device", "pid", "place", "_keep", "_ticket")

    def __init__(self, value: int, size: int, device: int, pid: int,
                 place: Optional[Tuple[int, int, int]] = None) -> None:
        self.value, self.size, self.device, self.pid = int(value), int(size), int(device), int(pid)
        # Where the exporter runs, _C._place_here() there: (host boot, network namespace, PID
        # namespace) ids, 0 where unknown; None: unknown, e.g. a number from a C program. The
        # number itself has no room for it, as a key has, so the handle carries it in full.
        self.place = None if place is None else (int(place[0]), int(place[1]), int(place[2]))
        self._keep: Optional[PhysicalMemory] = None  # sender side: the memory exported
        self._ticket: Any = None  # a received copy: its _handoff.Ticket; None: made in this process

    def open(self, device: Optional[int] = None) -> PhysicalMemory:
        """This process's PhysicalMemory over the exporter's (on device, default: the exporter's id)."""
        dev = self.device if device is None else int(device)
        if self.size <= 0 or self.size % granularity(dev):
            # A physical allocation is whole granules; the size is the handle's claim, checked
            # again by the runtime when it is mapped (aclrtMapMem maps exactly the allocation).
            _C._refuse(100000, "aclrtMemImportFromShareableHandle",
                       f"ShareableHandle.open: the handle claims {self.size} bytes, which no physical allocation "
                       f"has (a positive multiple of the {granularity(dev)}-byte granularity) (refused)")
        if _C.provider() == "emulated":
            # The emulator's door is a socket of the exporter's network namespace; on NPUs
            # the driver shares across containers, so only the emulator refuses.
            _C._place_check(self.place, "aclrtMemImportFromShareableHandle", f"shareable handle 0x{self.value:016x}",
                            "shareable handle")
        handle = _C._vmm_import(self.value, dev)
        real = _C._vmm_physical_size(handle)  # None where the runtime cannot tell
        if real is not None and real != self.size:
            _release_quietly(_C._vmm_free, handle, "an imported physical memory handle")
            _C._refuse(100000, "aclrtMemImportFromShareableHandle",
                       f"ShareableHandle.open: the handle claims {self.size} bytes but the exporter's physical "
                       f"allocation has {real} (refused; the import is given back)")
        pm = PhysicalMemory._from_handle(handle, self.size, dev, True)
        if self._ticket is not None:
            self._ticket.release()  # imported: the sender need not hold its memory for this copy
        return pm

    def close(self) -> None:
        """A received copy: gives the sender's hold back unopened. The exporter's: lets go of
        its PhysicalMemory (which goes when nothing else holds it). Idempotent."""
        if self._ticket is not None:
            self._ticket.release()
        self._keep = None

    def _plain(self) -> tuple:
        return (self.value, self.size, self.device, self.pid, self.place)

    def _reduce(self, one_receiver: bool):
        from . import _handoff

        return (_rebuild_shareable, self._plain() + (_handoff.carried(self, self._ticket, one_receiver),))

    def __reduce__(self):
        return self._reduce(False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShareableHandle) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"<ascend_ipc.ShareableHandle 0x{self.value:016x} size={self.size} device={self.device} pid={self.pid}>"


def _rebuild_shareable(value: int, size: int, device: int, pid: int, place: Optional[Tuple[int, int, int]],
                       hold: Optional[Tuple[bytes, bytes]]) -> ShareableHandle:
    """Unpickling of a ShareableHandle: the copy carries the sender's hold (or None)."""
    from . import _handoff

    ticket = _handoff.Ticket(hold)  # first: a hold of the wrong shape is refused
    h = ShareableHandle(value, size, device, pid, place)
    h._ticket = ticket
    return h


def _reduce_for_one(h: Any):
    """ShareableHandle and MappedHandle pickling for one receiver per copy (multiprocessing's
    ForkingPickler, where ascend_ipc registers it): the hold ends when that copy is opened."""
    return h._reduce(True)


class _Reservation:
    """An aclrtReserveMemAddress range, released when nothing holds it."""

    __slots__ = ("address", "size", "_pid")

    def __init__(self, size: int) -> None:
        self.address = _C._vmm_reserve(size)
        self.size = size
        self._pid = os.getpid()

    def __del__(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            _release_quietly(_C._vmm_release, self.address, "a reserved address range")


class _Mapping:
    """One physical allocation mapped in a reservation, unmapped when nothing holds it."""

    __slots__ = ("reservation", "physical", "address", "size", "_pid")

    def __init__(self, reservation: _Reservation, physical: PhysicalMemory, address: int, access: bool) -> None:
        with physical._held() as handle:
            _C._vmm_map(address, physical.size, handle, access)
        self.reservation, self.physical, self.address, self.size = reservation, physical, address, physical.size
        self._pid = os.getpid()

    def __del__(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            _release_quietly(_C._vmm_unmap, self.address, "a mapping")


class VirtualRange:
    """A reserved range of device address space (aclrtReserveMemAddress).

    size is rounded up to the granularity. map() puts PhysicalMemory in it at
    an offset, side by side with others; array() views mapped parts as one
    DeviceArray.
    """

    def __init__(self, size: int, device: Optional[int] = None) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size must be a positive int, not {size!r}")
        self.device = _C.current_device() if device is None else int(device)
        self._granularity = granularity(self.device)
        self._res: Optional[_Reservation] = _Reservation(_round_up(size, self._granularity))
        self._maps: Dict[int, _Mapping] = {}
        self._lock = threading.Lock()

    @property
    def address(self) -> int:
        return self._reservation().address

    @property
    def size(self) -> int:
        return self._reservation().size

    def _reservation(self) -> _Reservation:
        if self._res is None:
            raise ValueError("VirtualRange is closed")
        return self._res

    def map(self, physical: PhysicalMemory, offset: int = 0, access: bool = True) -> DeviceArray:
        """Maps all of physical at offset (a multiple of the granularity); returns a uint8 array over it.

        access=False maps it with aclrtMemMapNoAccess: nothing may touch it
        until set_access(offset).
        """
        if not isinstance(physical, PhysicalMemory):
            raise TypeError(f"map() needs a PhysicalMemory, not {type(physical).__name__}")
        # Under the lock, from the closed check on: a close() in another thread lands before
        # (ValueError here) or after (the array returned holds its mapping).
        with self._lock:
            res = self._reservation()
            if offset < 0 or offset % self._granularity or offset + physical.size > res.size:
                raise ValueError(
                    f"offset {offset} must be a multiple of {self._granularity} with the {physical.size} bytes "
                    f"inside the range's {res.size}"
                )
            if offset in self._maps:
                raise ValueError(f"offset {offset} is mapped already; unmap() it first")
            m = _Mapping(res, physical, res.address + offset, access)
            self._maps[offset] = m
        if not access:
            return None  # type: ignore[return-value]
        return _C.wrap(m.address, m.size, physical.device, owner=m)

    def set_access(self, offset: int) -> DeviceArray:
        """Opens a mapping made with access=False for reading and writing; returns an array over it."""
        with self._lock:
            self._reservation()
            m = self._maps.get(offset)
        if m is None:
            raise ValueError(f"nothing is mapped at offset {offset}")
        _C._vmm_set_access(m.address, m.size, m.physical.device)
        return _C.wrap(m.address, m.size, m.physical.device, owner=m)

    def array(self, offset: int = 0, size: Optional[int] = None) -> DeviceArray:
        """A uint8 DeviceArray over [offset, offset + size) of the range, which must be mapped throughout."""
        with self._lock:  # the reservation and its mappings as one snapshot
            res = self._reservation()
            spans = sorted(self._maps.items())
        end = res.size if size is None else offset + size
        if offset < 0 or end <= offset or end > res.size:
            raise ValueError(f"[{offset}, {end}) is not a part of the range's {res.size} bytes")
        held: List[_Mapping] = []
        at = offset
        for start, m in spans:
            if start + m.size <= at:
                continue
            if start > at:
                break
            held.append(m)
            at = start + m.size
            if at >= end:
                break
        if at < end:
            raise ValueError(f"offset {at} of the range is not mapped")
        device = held[0].physical.device
        lo = offset - offset % _C.PAGE_SIZE
        hi = _round_up(end, _C.PAGE_SIZE)
        whole = _C.wrap(res.address + lo, hi - lo, device, owner=tuple(held))
        if lo == offset and hi == end:
            return whole
        try:
            return whole[offset - lo:end - lo]
        finally:
            whole.close()

    def unmap(self, offset: int) -> None:
        """Takes the mapping at offset out of the range (when no array over it is left)."""
        with self._lock:
            self._reservation()
            if self._maps.pop(offset, None) is None:
                raise ValueError(f"nothing is mapped at offset {offset}")

    def close(self) -> None:
        """Drops every mapping and the reservation; each goes when no array holds it."""
        with self._lock:
            self._maps.clear()
            self._res = None

    def __enter__(self) -> "VirtualRange":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._res is None:
            return "<ascend_ipc.VirtualRange closed>"
        return f"<ascend_ipc.VirtualRange 0x{self._res.address:x} size={self._res.size} mappings={len(self._maps)}>"


# --------------------------------------------------------------------------- memory mapped by others


def _shareable_number(handle: int, check_pids: bool) -> int:
    """The shareable handle of a physical allocation of this process: exported now, or the number it got
    before (CANN gives one per allocation, and a handle retained twice is the same allocation)."""
    with _shares_lock:
        try:
            value = _C._vmm_export(handle, check_pids)
        except AclError:
            known = _shares.get(handle)
            if known is None:
                raise  # not exported through us: CANN's own error says why
            value, checked = known
            if checked and not check_pids:
                raise ValueError(
                    "this memory is already shared with a whitelist; it cannot be opened to every process now"
                ) from None
            return value
        _shares[handle] = (value, check_pids)
        return value


# handle -> (its shareable number, exported with a whitelist): CANN has no call that says either.
_shares: Dict[int, Tuple[int, bool]] = {}
_shares_lock = threading.Lock()


def _forget_in_child() -> None:
    # A forked child inherits neither the parent's runtime state nor a lock a parent thread held.
    global _shares_lock
    _shares.clear()
    _shares_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


class MappedHandle:
    """A picklable handle to a view of memory mapped piecewise (an expandable segment).

    It carries one ShareableHandle per physical allocation the view spans,
    and where the view starts in the first. open() maps them side by side in
    a VirtualRange of the receiver and returns the view; the sender's
    PhysicalMemory references stay with this object while it lives, and a
    pickled copy keeps this object until the copy is opened (put and drop:
    see ascend_ipc/_handoff.py).
    """

    def __init__(self, chunks: Sequence[ShareableHandle], offset: int, shape: Tuple[int, ...],
                 strides: Tuple[int, ...], dtype: str, torch_dtype: Optional[str] = None,
                 keep: Tuple[Any, ...] = ()) -> None:
        self.chunks = tuple(chunks)
        self.offset, self.shape, self.strides, self.dtype = offset, tuple(shape), tuple(strides), dtype
        self.torch_dtype = torch_dtype
        self._keep = keep  # sender side: the retained PhysicalMemory objects (and the torch storage)
        self._ticket: Any = None  # a received copy: its _handoff.Ticket; None: made in this process

    def _reduce(self, one_receiver: bool):
        from . import _handoff

        # The chunks travel as plain values: this handle's one hold keeps all of their memory.
        return (_rebuild_mapped, (tuple(c._plain() for c in self.chunks), self.offset, self.shape, self.strides,
                                  self.dtype, self.torch_dtype, _handoff.carried(self, self._ticket, one_receiver)))

    def __reduce__(self):
        return self._reduce(False)

    def open(self, device: Optional[int] = None) -> DeviceArray:
        """Maps the chunks in a new VirtualRange of this process; returns the view (shape, strides, dtype)."""
        total = sum(c.size for c in self.chunks)
        dev = self.chunks[0].device if device is None else int(device)
        lo, hi = _extent(self.shape, self.strides, self.dtype)
        if self.offset + lo < 0 or self.offset + hi > total:
            # Checked before anything is imported; each chunk's size in turn is checked by the
            # runtime when it is mapped (aclrtMapMem maps exactly the physical allocation).
            _C._refuse(100000, "aclrtMemImportFromShareableHandle",
                       f"MappedHandle.open: the view claims bytes [{self.offset + lo}, {self.offset + hi}) but the "
                       f"exporter granted {total} bytes in {len(self.chunks)} chunk(s) (refused)")
        rng = VirtualRange(total, dev)
        at = 0
        for c in self.chunks:
            pm = c.open(dev)
            try:
                rng.map(pm, at).close()
            finally:
                pm.close()  # the mapping holds the memory now
            at += c.size
        whole = rng.array()
        rng.close()  # the array holds what it needs
        try:
            view = _C._subview(whole, self.offset, self.shape, self.strides, self.dtype)
        finally:
            whole.close()
        if self._ticket is not None:
            self._ticket.release()  # mapped: the sender need not hold its memory for this copy
        return view

    def open_torch(self, device: Optional[int] = None):
        """open() as a tensor (needs torch)."""
        if _open_torch is None:
            raise RuntimeError("MappedHandle.open_torch(): import ascend_ipc, which sets up its torch side")
        return _open_torch(self, device)

    def close(self) -> None:
        """Sender side: lets the retained physical memory (and whatever else the handle kept) go.
        A received copy: gives the sender's hold back unopened."""
        if self._ticket is not None:
            self._ticket.release()
        for obj in self._keep:
            if isinstance(obj, PhysicalMemory):
                obj.close()
        self._keep = ()

    def __repr__(self) -> str:
        return f"<ascend_ipc.MappedHandle {len(self.chunks)} chunk(s) offset={self.offset} shape={self.shape}>"


def _rebuild_mapped(chunks: Sequence[tuple], offset: int, shape: Tuple[int, ...], strides: Tuple[int, ...],
                    dtype: str, torch_dtype: Optional[str], hold: Optional[Tuple[bytes, bytes]]) -> MappedHandle:
    """Unpickling of a MappedHandle (chunks as ShareableHandle._plain() values): the copy
    carries the sender's hold (or None)."""
    from . import _handoff

    ticket = _handoff.Ticket(hold)  # first: a hold of the wrong shape is refused
    h = MappedHandle([ShareableHandle(*c) for c in chunks], offset, shape, strides, dtype, torch_dtype)
    h._ticket = ticket
    return h


def _extent(shape: Tuple[int, ...], strides: Tuple[int, ...], dtype: str) -> Tuple[int, int]:
    """[lo, hi): the bytes a view touches, from its element 0 (0, 0 when it has no element)."""
    import numpy as np  # a dependency of the package; only needed here

    if len(shape) != len(strides):
        raise ValueError(f"shape {shape} and strides {strides} differ in length")
    if any(n == 0 for n in shape):
        return 0, 0
    lo, hi = 0, np.dtype(dtype).itemsize
    for n, st in zip(shape, strides):
        if n < 0:
            raise ValueError(f"shape {shape} has a negative dimension")
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi


def share_mapped(address: int, nbytes: int, shape: Tuple[int, ...], strides: Tuple[int, ...], dtype: str,
                 pids: Optional[Iterable[int]] = None, device: Optional[int] = None,
                 torch_dtype: Optional[str] = None) -> Optional[MappedHandle]:
    """A MappedHandle for the view at address, if its bytes are memory mapped with aclrtMapMem; else None.

    The view's extent is [address, address + nbytes); every physical
    allocation it touches is exported (once per allocation; pids as in
    PhysicalMemory.export()).
    """
    want = None if pids is None else [int(p) for p in pids]
    dev = _C.current_device() if device is None else int(device)
    end = address + max(nbytes, 1)
    at = address
    chunks: List[ShareableHandle] = []
    keep: List[PhysicalMemory] = []
    first = None
    try:
        while at < end:
            try:
                base, size = _C._vmm_address_range(at)
                handle = _C._vmm_retain(base)
            except AclError:
                if not chunks:
                    return None  # not mapped memory: the caller shares it another way
                raise
            pm = PhysicalMemory._from_handle(handle, size, dev, False)
            keep.append(pm)
            chunks.append(pm.export(want))
            if first is None:
                first = base
            at = base + size
    except BaseException:
        for pm in keep:
            pm.close()
        raise
    return MappedHandle(chunks, address - first, shape, strides, dtype, torch_dtype, tuple(keep))
