"""State dicts shared in one export (SPEC 3.2), for ascend_ipc.torch.

share_state_dict() packs every tensor of a state dict into one buffer of exportable device
memory, in one pass, and exports that buffer once: a receiver's open() is one import (one
round trip) and gives zero-copy views, whatever the number of tensors. update() writes new
values into the same buffer — the trainer -> inference weight-sync loop — and, with a stream,
records the handle's IPC event behind the writes, so a receiver's synchronize() (and every
later open()) waits for them.

Each tensor's bytes start at a multiple of ALIGN in the buffer; a tensor is stored
C-contiguous (its shape and dtype are kept; a non-contiguous tensor's own strides are not,
as torch's own serialisation does), and its Parameter-ness and requires_grad are kept.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Tuple

import torch

from . import _C
from ._C import Event, IpcHandle, Stream

ALIGN = 512  # bytes: every tensor starts on a cache line and a DMA-friendly boundary


class _Entry:
    __slots__ = ("name", "dtype", "shape", "offset", "nbytes", "parameter", "requires_grad")

    def __init__(self, name, dtype, shape, offset, nbytes, parameter, requires_grad):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.offset, self.nbytes = offset, nbytes
        self.parameter, self.requires_grad = parameter, requires_grad

    def plain(self) -> tuple:
        return (self.name, str(self.dtype).replace("torch.", ""), self.shape, self.offset, self.nbytes,
                self.parameter, self.requires_grad)


def _layout(state_dict: Mapping[str, torch.Tensor]) -> Tuple[List[_Entry], int]:
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"share_state_dict() needs a mapping of names to tensors, not {type(state_dict).__name__}")
    entries, offset = [], 0
    for name, t in state_dict.items():
        if not isinstance(name, str):
            raise TypeError(f"state dict keys must be str, not {type(name).__name__}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"state dict entry {name!r} is a {type(t).__name__}, not a torch.Tensor")
        if t.is_sparse or t.layout != torch.strided:
            raise TypeError(f"state dict entry {name!r}: only strided tensors can be shared ({t.layout})")
        nbytes = t.numel() * t.element_size()
        entries.append(_Entry(name, t.dtype, tuple(t.shape), offset, nbytes, isinstance(t, torch.nn.Parameter),
                              bool(t.requires_grad)))
        offset += math.ceil(max(nbytes, 1) / ALIGN) * ALIGN
    return entries, max(offset, ALIGN)


def _typed(buf: torch.Tensor, entries: List[_Entry]) -> Dict[torch.dtype, torch.Tensor]:
    """The buffer viewed once per dtype (every offset is a multiple of ALIGN, so of every itemsize)."""
    return {dt: buf.view(dt) for dt in {e.dtype for e in entries}}


def _contiguous_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _tensor_at(typed: Dict[torch.dtype, torch.Tensor], e: _Entry) -> torch.Tensor:
    # one torch call per tensor: a thousand-tensor dict opens in milliseconds
    base = typed[e.dtype]
    return base.as_strided(e.shape, _contiguous_strides(e.shape), e.offset // base.element_size())


def _views(buf: torch.Tensor, entries: List[_Entry]) -> Dict[str, torch.Tensor]:
    typed = _typed(buf, entries)
    out: Dict[str, torch.Tensor] = {}
    for e in entries:
        t = _tensor_at(typed, e)
        if e.parameter:
            t = torch.nn.Parameter(t, requires_grad=e.requires_grad)
        elif e.requires_grad:
            t.requires_grad_(True)
        out[e.name] = t
    return out


def _copy_in(buf: torch.Tensor, entries: List[_Entry], state_dict: Mapping[str, torch.Tensor]) -> None:
    typed = _typed(buf, entries)
    with torch.no_grad():
        for e in entries:
            _tensor_at(typed, e).copy_(state_dict[e.name])


class StateDictHandle:
    """A picklable handle of a state dict shared in one export. open() in any process gives
    a dict of zero-copy tensors; the exporter's update() writes new values into them."""

    __slots__ = ("_handle", "_entries", "_event", "_buf", "_ev", "__weakref__")

    def __init__(self, handle: IpcHandle, entries: List[_Entry], event: bytes, buf=None, ev=None):
        # event: the handle of the IPC event that orders the exporter's writes; buf and ev:
        # the exporter's buffer and that Event, in the process that shared the state dict
        self._handle, self._entries, self._event, self._buf, self._ev = handle, entries, event, buf, ev

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

    def open(self, device: Optional[int] = None) -> Dict[str, torch.Tensor]:
        """The state dict in this process: one import of the buffer, a zero-copy view per
        tensor (dtype, shape, Parameter and requires_grad kept). The views keep the import
        alive; it ends when the last of them is collected. Waits first for the exporter's
        stream-ordered writes, if any."""
        from .torch import open_torch

        self.synchronize(device)
        buf = open_torch(self._handle, device)
        return _views(buf, self._entries)

    def synchronize(self, device: Optional[int] = None) -> None:
        """Waits (GIL released, Ctrl-C interrupts) until the exporter's writes queued on its
        stream before its latest share or update have run (at once if they used no stream)."""
        if self._ev is not None:
            self._ev.synchronize()
            return
        ev = Event.from_handle(self._event, device)
        try:
            ev.synchronize()
        finally:
            ev.close()

    # ---- the exporter

    def update(self, state_dict: Mapping[str, torch.Tensor], stream: Optional[Stream] = None) -> None:
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
            if not isinstance(t, torch.Tensor) or t.dtype != e.dtype or tuple(t.shape) != e.shape:
                got = (getattr(t, "dtype", type(t).__name__), tuple(getattr(t, "shape", ())))
                raise ValueError(f"update(): {e.name!r} is {got}, the shared tensor is {(e.dtype, e.shape)}")
        _copy_in(self._buf, self._entries, state_dict)
        if stream is not None:
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
        return (_rebuild, (self._handle, [e.plain() for e in self._entries], self._event))

    def __repr__(self) -> str:
        return (f"StateDictHandle({len(self._entries)} tensors, {self.nbytes} bytes, "
                f"key={self._handle.key[:12]!r}...{', exporter' if self._buf is not None else ''})")


def _rebuild(handle: IpcHandle, plain: list, event: bytes) -> StateDictHandle:
    entries = []
    for name, dtype, shape, offset, nbytes, parameter, requires_grad in plain:
        dt = getattr(torch, dtype, None)
        if not isinstance(dt, torch.dtype):
            raise TypeError(f"state dict entry {name!r} has dtype {dtype!r}, which this torch does not have")
        entries.append(_Entry(name, dt, tuple(shape), int(offset), int(nbytes), bool(parameter),
                              bool(requires_grad)))
    return StateDictHandle(handle, entries, event)


def share_state_dict(state_dict: Mapping[str, torch.Tensor], pids=None, stream: Optional[Stream] = None,
                     device: Optional[int] = None) -> StateDictHandle:
    """Packs state_dict into one buffer of exportable device memory (one pass) and exports it
    once. pids as in ascend_ipc.export(); stream: see StateDictHandle.update()."""
    from .torch import _view_of, empty

    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(f"stream must be None or an ascend_ipc.Stream, not {type(stream).__name__}")
    entries, total = _layout(state_dict)
    buf = empty((total,), torch.uint8, device)
    _copy_in(buf, entries, state_dict)
    view = _view_of(buf)
    try:
        handle = _C.export(view, None if pids is None else list(pids), None, keepalive=buf)
    finally:
        view.close()
    # One IPC event for the life of the share: update(stream=...) records it again, and a
    # receiver holding an old copy of the handle still waits on the latest record.
    ev = Event(ipc=True, device=handle.device)
    if stream is not None:
        ev.record(stream)
    return StateDictHandle(handle, entries, ev.ipc_handle, buf, ev)
