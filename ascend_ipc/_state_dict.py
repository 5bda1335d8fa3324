"""State dicts shared in one export (SPEC 3.2): the packing and the handle, for ascend_ipc.torch.

share() packs every tensor of a state dict into one buffer of exportable device memory, in one
pass, and exports that buffer once: a receiver's open() is one import (one round trip) and
gives zero-copy views, whatever the number of tensors. update() writes new values into the
same buffer — the trainer -> inference weight-sync loop — and, with a stream, records the
handle's IPC event behind the writes, so a receiver's synchronize() (and every later open())
waits for them.

Each tensor's bytes start at a multiple of ALIGN in the buffer; a tensor is stored
C-contiguous (its shape and dtype are kept; a non-contiguous tensor's own strides are not,
as torch's own serialisation does), and its Parameter-ness and requires_grad are kept.

This module knows no torch: what is done to tensors (describing them, copying them in,
viewing the buffer, rebuilding a handle from its pickle) is the `tensors` object that
ascend_ipc.torch hands to share() and that every StateDictHandle keeps, so imports go one
way, ascend_ipc.torch -> here.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from . import _C
from ._C import AclError, Event, IpcHandle, Stream

_FEATURE_NOT_SUPPORT = 207000  # ACL_ERROR_RT_FEATURE_NOT_SUPPORT: an IPC event of another server

ALIGN = 512  # bytes: every tensor starts on a cache line and a DMA-friendly boundary


class _Entry:
    __slots__ = ("name", "dtype", "dtype_name", "shape", "offset", "nbytes", "parameter", "requires_grad", "strides")

    def __init__(self, name, dtype, dtype_name, shape, offset, nbytes, parameter, requires_grad):
        self.name, self.dtype, self.dtype_name, self.shape = name, dtype, dtype_name, shape
        self.offset, self.nbytes = offset, nbytes
        self.parameter, self.requires_grad = parameter, requires_grad
        self.strides = None  # C-contiguous strides in elements, once _check_entries has checked the shape

    def plain(self) -> tuple:
        return (self.name, self.dtype_name, self.shape, self.offset, self.nbytes, self.parameter, self.requires_grad)


def _layout(state_dict: Mapping[str, Any], tensors: Any) -> Tuple[List[_Entry], int]:
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"share_state_dict() needs a mapping of names to tensors, not {type(state_dict).__name__}")
    entries, offset = [], 0
    describe, append = tensors.describe, entries.append  # a thousand tensors: the loop is the cost
    for name, t in state_dict.items():
        if type(name) is not str and not isinstance(name, str):
            raise TypeError(f"state dict keys must be str, not {type(name).__name__}")
        dtype, dtype_name, shape, nbytes, parameter, requires_grad = describe(name, t)
        append(_Entry(name, dtype, dtype_name, shape, offset, nbytes, parameter, requires_grad))
        offset += (nbytes + ALIGN - 1) // ALIGN * ALIGN if nbytes else ALIGN
    return entries, max(offset, ALIGN)


def contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """The strides, in elements, of a C-contiguous tensor of shape."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class StateDictHandle:
    """A picklable handle of a state dict shared in one export. open() in any process gives
    a dict of zero-copy tensors; the exporter's update() writes new values into them."""

    __slots__ = ("_handle", "_entries", "_event", "_tensors", "_buf", "_ev", "_streamed", "__weakref__")

    def __init__(self, handle: IpcHandle, entries: List[_Entry], event: bytes, tensors: Any, buf=None, ev=None,
                 streamed: bool = True):
        # event: the handle of the IPC event that orders the exporter's writes; tensors: what is
        # done to tensors (ascend_ipc.torch's); buf and ev: the exporter's buffer and that Event,
        # in the process that shared the state dict; streamed: whether a write was ever queued on
        # a stream before this copy was made (the exporter's: so far)
        self._handle, self._entries, self._event, self._tensors = handle, entries, event, tensors
        self._buf, self._ev, self._streamed = buf, ev, streamed

    # ---- what every side can do

    @property
    def handle(self) -> IpcHandle:
        """The IpcHandle of the packed buffer."""
        return self._handle

    @property
    def names(self) -> List[str]:
        return [e.name for e in self._entries]

    @property
    def nbytes(self) -> int:
        """Bytes of the packed buffer (the tensors and their alignment)."""
        return self._handle.size

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, device: Optional[int] = None) -> Dict[str, Any]:
        """The state dict in this process: one import of the buffer, a zero-copy view per
        tensor (dtype, shape, Parameter and requires_grad kept). The views keep the import
        alive; it ends when the last of them is collected. Waits first for the exporter's
        stream-ordered writes, if any."""
        _check_entries(self._entries, self._handle.size, self._tensors)
        self.synchronize(device)
        return self._tensors.open(self._handle, self._entries, device)

    def synchronize(self, device: Optional[int] = None) -> None:
        """Waits (GIL released, Ctrl-C interrupts) until the exporter's writes queued on its
        stream before its latest share or update have run (at once if they used no stream)."""
        if self._ev is not None:
            self._ev.synchronize()
            return
        try:
            ev = Event.from_handle(self._event, device)
        except AclError as e:
            # On another server of a super-node the event cannot be opened: CANN shares IPC events
            # within one server only. With no write ever queued on a stream there is nothing to
            # wait for (update() without a stream has written before it returned); otherwise the
            # refusal stands, naming the servers.
            if e.code == _FEATURE_NOT_SUPPORT and not self._streamed:
                return
            raise
        try:
            ev.synchronize()
        finally:
            ev.close()

    # ---- the exporter

    def update(self, state_dict: Mapping[str, Any], stream: Optional[Stream] = None) -> None:
        """Writes state_dict's values into the shared buffer (same names, dtypes and shapes),
        in place: every receiver's open views see them, no new export. With stream, the
        handle's IPC event is recorded there after the writes, so receivers' synchronize()
        orders after them. Only in the process that shared it."""
        if self._buf is None:
            raise ValueError("update() belongs to the process that shared the state dict")
        missing = [e.name for e in self._entries if e.name not in state_dict]
        extra = [k for k in state_dict if k not in {e.name for e in self._entries}]
        if missing or extra:
            raise ValueError(f"update() needs the shared names: missing {missing[:5]}, unknown {extra[:5]}")
        for e in self._entries:
            t = state_dict[e.name]
            if not self._tensors.matches(t, e):
                got = (getattr(t, "dtype", type(t).__name__), tuple(getattr(t, "shape", ())))
                raise ValueError(f"update(): {e.name!r} is {got}, the shared tensor is {(e.dtype, e.shape)}")
        self._tensors.copy_in(self._buf, self._entries, state_dict)
        if stream is not None:
            self._streamed = True
            self._ev.record(stream)

    def close(self) -> None:
        """Exporter: ends the export (views already open stay valid); elsewhere marks it closed."""
        self._handle.close()
        self._buf = self._ev = None

    def __enter__(self) -> "StateDictHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce__(self):
        return (self._tensors.rebuild, (self._handle, [e.plain() for e in self._entries], self._event, self._streamed))

    def __repr__(self) -> str:
        return (f"StateDictHandle({len(self._entries)} tensors, {self.nbytes} bytes, "
                f"key={self._handle.key[:12]!r}...{', exporter' if self._buf is not None else ''})")


def _check_entries(entries: List[_Entry], size: int, tensors: Any) -> None:
    """AclError unless every entry lies in the buffer's size bytes (which IpcHandle.open() in turn
    checks against the exporter's grant): a pickle is data anyone can edit, and a view past the
    buffer would read memory nobody granted. Sets each entry's strides."""
    itemsize_of = tensors.itemsize
    shapes: Dict[Any, Optional[Tuple[int, Tuple[int, ...]]]] = {}  # a model repeats its shapes
    for e in entries:
        shape = e.shape
        try:
            facts = shapes[shape]
        except KeyError:
            facts = shapes[shape] = _shape_facts(shape)
        except TypeError:  # a shape with something unhashable in it
            facts = None
        itemsize = itemsize_of(e.dtype)
        bad = None
        if facts is None:
            bad = f"shape {shape!r}, which is not a tuple of sizes,"
        elif e.nbytes != facts[0] * itemsize:
            bad = f"shape {shape} of {e.dtype_name} is {facts[0] * itemsize} bytes, the entry says {e.nbytes}"
        elif e.offset < 0 or e.offset % max(itemsize, 1) or e.offset + e.nbytes > size:
            bad = f"{e.nbytes} bytes at offset {e.offset}"
        if bad is not None:
            _C._refuse(100000, "aclrtIpcMemImportByKey",
                       f"StateDictHandle.open: tensor {e.name!r} claims {bad} but the exporter granted a buffer "
                       f"of {size} bytes (refused; nothing was imported)")
        e.strides = facts[1]


def _shape_facts(shape: Any) -> Optional[Tuple[int, Tuple[int, ...]]]:
    """(elements, C-contiguous strides) of a shape, or None unless it is a tuple of sizes (ints >= 0)."""
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        return None
    return math.prod(shape), contiguous_strides(shape)


def rebuild(handle: IpcHandle, plain: Iterable[tuple], event: bytes, tensors: Any,
            streamed: bool = True) -> StateDictHandle:
    """The receiver's StateDictHandle from what __reduce__ pickled (tensors.dtype(name, dtype_name)
    gives each entry's dtype)."""
    entries = []
    for name, dtype_name, shape, offset, nbytes, parameter, requires_grad in plain:
        entries.append(_Entry(name, tensors.dtype(name, dtype_name), dtype_name, tuple(shape), int(offset),
                              int(nbytes), bool(parameter), bool(requires_grad)))
    return StateDictHandle(handle, entries, event, tensors, streamed=bool(streamed))


def share(state_dict: Mapping[str, Any], pids, stream: Optional[Stream], device: Optional[int],
          tensors: Any) -> StateDictHandle:
    """Packs state_dict into one buffer of exportable device memory (tensors.buffer; one pass)
    and exports it once. pids as in ascend_ipc.export(); stream: see StateDictHandle.update()."""
    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(f"stream must be None or an ascend_ipc.Stream, not {type(stream).__name__}")
    entries, total = _layout(state_dict, tensors)
    buf = tensors.buffer(total, device)
    tensors.copy_in(buf, entries, state_dict)
    view = tensors.view_of(buf)
    try:
        # One IPC event for the life of the share: update(stream=...) records it again, and a
        # receiver holding an old copy of the handle still waits on the latest record.
        ev = Event(ipc=True, device=view.device)
        # The exporter's handle keeps the buffer and the event: a pickled copy of this
        # StateDictHandle holds that handle (put and drop), so both live until the copy is
        # opened, however soon the sender drops the StateDictHandle.
        handle = _C.export(view, None if pids is None else list(pids), None, keepalive=(buf, ev))
    finally:
        view.close()
    if stream is not None:
        ev.record(stream)
    return StateDictHandle(handle, entries, ev.ipc_handle, tensors, buf, ev, streamed=stream is not None)
