"""ascend_ipc.torch: torch tensors in exportable device memory, shared zero-copy.

    import torch
    import ascend_ipc.torch as atorch

    t = atorch.empty((1024, 1024), dtype=torch.bfloat16)   # exportable memory
    h = atorch.share(t)                 # IpcHandle (picklable)
    u = h.open_torch()                  # in any process: a tensor over the same bytes

    q.put(t); del t                     # through torch.multiprocessing queues (and
                                        # DataLoader workers) such tensors arrive zero-copy

Tensors live in device memory of the current provider. On the emulated
provider that memory is host memory, so the tensors are CPU tensors to torch.
On the cann provider it is NPU memory (DLPack kDLExtDev), so the tensors are
torch_npu "npu" tensors, and torch_npu must be installed; share() then also
takes npu tensors from torch_npu's own allocator (it exports the segment the
tensor's storage lies in and carries the offset).

Lifetimes: a tensor made here (or opened here) keeps its memory alive as long
as it lives; a tensor or handle sent to another process is kept alive for it
until the receiver has opened it (put and drop: the sender may drop it at
once, as with CUDA tensors in torch.multiprocessing). For
an npu tensor from torch_npu's allocator, the handle share() returns keeps the
tensor's storage alive: keep the handle until the receivers have closed their
tensors (CANN wants importers to close before the exporter does).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Union

import torch

from . import _C, _state_dict, _vmm
from ._C import DeviceArray, IpcHandle, Stream
from ._state_dict import StateDictHandle

__all__ = [
    "empty", "zeros", "from_tensor", "share", "open_torch", "is_shared", "install", "installed", "stream",
    "current_stream", "record_stream", "share_state_dict", "StateDictHandle",
]

# torch dtype -> numpy dtype name of the device memory. bfloat16 has no numpy
# type: it is stored as int16 and viewed back as bfloat16.
_STORAGE = {
    torch.bool: "bool",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
    torch.uint16: "uint16",
    torch.uint32: "uint32",
    torch.uint64: "uint64",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
    torch.bfloat16: "int16",
}
_BY_NAME = {str(dt).split(".", 1)[1]: dt for dt in _STORAGE}

Shape = Union[int, Sequence[int], torch.Size]


_DTYPE_NAMES: Dict[torch.dtype, str] = {}  # filled as met: str(dtype) costs a microsecond a call


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).split(".", 1)[1]
    return name


def _storage_dtype(dtype: Any) -> str:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, not {type(dtype).__name__}")
    try:
        return _STORAGE[dtype]
    except KeyError:
        supported = ", ".join(sorted(_BY_NAME))
        raise TypeError(f"dtype {dtype} is not supported in device memory (supported: {supported})") from None


# --------------------------------------------------------------------------- NPU memory (cann provider)

_DL_EXT_DEV = 12  # DLPack kDLExtDev: the device type of NPU memory, as torch_npu uses it
_PAGE = _C.PAGE_SIZE


@functools.lru_cache(maxsize=None)
def _npu_memory() -> bool:
    """True when the provider's device memory is NPU memory (the cann provider)."""
    return _C.provider_info()["dlpack_device_type"] == _DL_EXT_DEV


def _torch_npu() -> Any:
    """torch_npu, imported; a RuntimeError that says why it is needed if it is missing."""
    try:
        import torch_npu  # noqa: F401  (registers the "npu" device with torch)
    except ImportError as exc:
        raise RuntimeError(
            "ascend_ipc.torch: device memory of this provider is NPU memory (DLPack kDLExtDev), so its "
            "tensors are 'npu' tensors, which need torch_npu (install the torch-npu release that matches "
            "your torch and CANN). Without torch_npu, use DeviceArray.numpy() and copy_from() for host "
            "copies, or ASCEND_IPC_PROVIDER=emulated"
        ) from exc
    return torch_npu


def _npu_tensor(array: DeviceArray) -> torch.Tensor:
    """An npu tensor over the NPU memory of array (zero-copy, via DLPack kDLExtDev)."""
    torch_npu = _torch_npu()
    convert = getattr(getattr(torch_npu, "_C", None), "_npu_from_dlpack", None)
    if convert is not None:
        # torch_npu's own converter builds an NPU storage for the capsule.
        t = convert(array.__dlpack__())
    else:
        # torch maps kDLExtDev to its PrivateUse1 device, which torch_npu registers as "npu".
        t = torch.from_dlpack(array)
    if t.device.type != "npu":
        raise RuntimeError(f"ascend_ipc.torch: expected an npu tensor from DLPack kDLExtDev memory, got {t.device}")
    return t


def _npu_segment(device: int, ptr: int, nbytes: int) -> Optional[tuple]:
    """(address, size) of torch_npu's allocator segment holding [ptr, ptr + nbytes), or None.

    A segment is one aclrtMalloc of torch_npu's caching allocator, carved into
    the blocks that back storages; torch_npu exports whole segments for its own
    IPC, so that is what is exported here too.
    """
    try:
        segments = torch.npu.memory_snapshot()
    except Exception:  # older torch_npu, or no snapshot support
        return None
    if isinstance(segments, dict):
        segments = segments.get("segments", [])
    for seg in segments:
        address, size = seg.get("address"), seg.get("total_size")
        if seg.get("device") != device or address is None or size is None:
            continue
        if address <= ptr and ptr + nbytes <= address + size:
            if seg.get("is_expandable"):
                return _EXPANDABLE
            if address % _PAGE or size % _PAGE:
                return None
            return int(address), int(size)
    return None


# _npu_segment(): the storage lives in an expandable segment (physical memory mapped piecewise).
_EXPANDABLE = ("expandable",)


def _share_mapped(tensor: torch.Tensor, pids: Optional[Iterable[int]], device: Optional[int] = None):
    """A MappedHandle if the tensor's bytes are memory mapped with aclrtMapMem (an expandable segment,
    a VirtualRange), else None: every physical allocation they span is shared through its shareable handle."""
    esize = tensor.element_size()
    lo, hi = 0, esize  # the bytes the view touches, from element 0
    for n, st in zip(tensor.shape, tensor.stride()):
        if n > 1 and st > 0:
            hi += (n - 1) * st * esize
        elif n > 1:
            lo += (n - 1) * st * esize
    start = tensor.data_ptr() + lo
    handle = _vmm.share_mapped(start, hi - lo, tuple(tensor.shape), tuple(s * esize for s in tensor.stride()),
                               _STORAGE[tensor.dtype], pids, device, torch_dtype=_dtype_name(tensor.dtype))
    if handle is not None:
        handle.offset -= lo  # where element 0 is, from the first chunk's start
    return handle


def _open_mapped(handle: "_vmm.MappedHandle", device: Optional[int] = None) -> torch.Tensor:
    """MappedHandle.open_torch(): the view mapped here, as a tensor."""
    dtype = _BY_NAME.get(handle.torch_dtype or handle.dtype)
    if dtype is None:
        raise TypeError(f"handle records dtype {handle.torch_dtype or handle.dtype!r}, which this torch does not have")
    return _wrap(handle.open(device), dtype)


def _npu_export_range(device: int, ptr: int, nbytes: int) -> tuple:
    """The page-aligned (address, size) to export for a storage at ptr of nbytes bytes."""
    segment = _npu_segment(device, ptr, nbytes)
    if segment is not None and segment is not _EXPANDABLE:
        return segment
    # No segment information: the pages the storage covers (CANN exports page-aligned ranges).
    start = ptr - ptr % _PAGE
    end = ptr + max(nbytes, 1)
    end += (-end) % _PAGE
    return start, end - start


def _share_npu(
    tensor: torch.Tensor, pids: Optional[Iterable[int]], link: Optional[str], stream: Optional[Stream] = None
) -> IpcHandle:
    """share() of an npu tensor from torch_npu's allocator: export its segment, carry the offset."""
    _torch_npu()
    if not _npu_memory():
        raise ValueError(
            f"ascend_ipc.torch.share(): an npu tensor can be shared only on the cann provider (this process "
            f"uses the {_C.provider()} provider; set ASCEND_IPC_PROVIDER=cann)"
        )
    storage = tensor.untyped_storage()
    device = tensor.device.index if tensor.device.index is not None else torch.npu.current_device()
    if _npu_segment(device, storage.data_ptr(), storage.nbytes()) is _EXPANDABLE:
        if stream is not None:
            raise ValueError("share(stream=...) of a tensor in an expandable segment: synchronize the stream first")
        if link is not None:
            raise ValueError("share(link=...) sets a memory key's attribute; a tensor in an expandable segment "
                             "travels by shareable handle, which has none")
        mapped = _share_mapped(tensor, pids, device)
        if mapped is None:
            raise ValueError("ascend_ipc.torch.share(): the expandable segment of this tensor is not mapped memory")
        mapped._keep += (storage,)  # the storage (and its segment) stays while the handle lives
        return mapped
    start, size = _npu_export_range(device, storage.data_ptr(), storage.nbytes())
    region = _C.wrap(start, size, device)
    try:
        esize = tensor.element_size()
        view = _C._subview(region, tensor.data_ptr() - start, tuple(tensor.shape),
                           [s * esize for s in tensor.stride()], _STORAGE[tensor.dtype])
    finally:
        region.close()
    try:
        # The handle keeps the storage (and so its segment) alive until it is closed.
        return _C.export(view, None if pids is None else list(pids), link, stream,
                         torch_dtype=_dtype_name(tensor.dtype), keepalive=storage)
    finally:
        view.close()


# --------------------------------------------------------------------------- tensors over DeviceArrays


def _wrap(array: DeviceArray, dtype: torch.dtype) -> torch.Tensor:
    try:
        if array.__dlpack_device__()[0] == _DL_EXT_DEV:
            t = _npu_tensor(array)
        else:
            t = torch.from_dlpack(array)
    except BaseException:
        array.close()
        raise
    if t.dtype != dtype:
        t = t.view(dtype)
    return t


def empty(shape: Shape, dtype: torch.dtype = torch.float32, device: Optional[int] = None) -> torch.Tensor:
    """A tensor in new, exportable device memory (contents unspecified).

    device is an ascend_ipc device id (None: the current device).
    """
    return _wrap(_C.empty(shape, _storage_dtype(dtype), device), dtype)


def zeros(shape: Shape, dtype: torch.dtype = torch.float32, device: Optional[int] = None) -> torch.Tensor:
    """Like empty(), filled with zeros."""
    return _wrap(_C.zeros(shape, _storage_dtype(dtype), device), dtype)


def from_tensor(tensor: torch.Tensor, device: Optional[int] = None) -> torch.Tensor:
    """A copy of a CPU tensor in new, exportable device memory (contiguous)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"from_tensor() needs a torch.Tensor, not {type(tensor).__name__}")
    out = empty(tuple(tensor.shape), tensor.dtype, device)
    with torch.no_grad():
        out.copy_(tensor)
    return out


def _view_of(tensor: torch.Tensor) -> Optional[DeviceArray]:
    """The DeviceArray over the bytes of tensor, or None if they are not ascend_ipc memory."""
    if tensor.layout != torch.strided or tensor.dtype not in _STORAGE or tensor.is_meta:
        return None
    try:
        address = tensor.data_ptr()
    except RuntimeError:  # tensors without storage (functional, nested, ...)
        return None
    size = tensor.element_size()
    strides = [s * size for s in tensor.stride()]
    return _C._view_at(address, tuple(tensor.shape), strides, _STORAGE[tensor.dtype])


def is_shared(tensor: torch.Tensor) -> bool:
    """True if tensor's bytes are ascend_ipc device memory of this process (exportable)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"is_shared() needs a torch.Tensor, not {type(tensor).__name__}")
    view = _view_of(tensor)
    if view is None:
        return False
    view.close()
    return True


def share(
    tensor: torch.Tensor,
    pids: Optional[Iterable[int]] = None,
    link: Optional[str] = None,
    stream: Optional[Stream] = None,
) -> Union[IpcHandle, "_vmm.MappedHandle"]:
    """Exports the memory behind tensor; returns a picklable IpcHandle for its view.

    Memory mapped piecewise -- an expandable segment of torch_npu's allocator
    on the cann provider, or a VirtualRange -- travels as a MappedHandle
    instead: one shareable handle per physical allocation the view spans
    (aclrtMemExportToShareableHandle), which the receiver maps side by side.

    pids and link as in ascend_ipc.export(). stream: the ascend_ipc.Stream whose
    queued work writes the tensor (None: the one of an enclosing ``with
    ascend_ipc.torch.stream(s):``, if any): the handle then carries an IPC event
    recorded there, and the receiver's open waits for that work, as torch does
    for CUDA tensors (event_sync_required). The tensor must live in ascend_ipc
    memory (empty(), zeros(), from_tensor(), open_torch(), or torch.from_dlpack
    of a DeviceArray), else ValueError -- except, on the cann provider with
    torch_npu, an npu tensor from torch_npu's allocator: then the segment that
    holds its storage is exported (page-aligned, the offset carried in the
    handle) and the handle keeps the storage alive until it is closed.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"share() needs a torch.Tensor, not {type(tensor).__name__}")
    if tensor.dtype not in _STORAGE:
        _storage_dtype(tensor.dtype)  # raises TypeError
    if tensor.numel() == 0:
        # No bytes to share (torch gives such tensors no address): the handle
        # gets a page of its own and opens as an empty tensor of this shape.
        view = _C.empty(tuple(tensor.shape), _STORAGE[tensor.dtype])
    else:
        view = _view_of(tensor)
        if view is None and tensor.device.type == "npu":
            return _share_npu(tensor, pids, link, _stream_for(stream, tensor))
        if view is None and tensor.device.type == "cpu" and link is None:
            # ascend_ipc memory mapped piecewise (a VirtualRange): its physical allocations travel
            mapped = _share_mapped(tensor, pids)
            if mapped is not None:
                if _stream_for(stream, tensor) is not None:
                    mapped.close()
                    raise ValueError("share(stream=...) of mapped memory: synchronize the stream first")
                return mapped
    if view is None:
        raise ValueError(
            "tensor is not backed by ascend_ipc device memory; create it with ascend_ipc.torch.empty(), "
            "zeros() or from_tensor() to share it"
        )
    try:
        return _C.export(view, None if pids is None else list(pids), link, _stream_for(stream, tensor),
                         torch_dtype=_dtype_name(tensor.dtype))
    finally:
        view.close()


def open_torch(handle: IpcHandle, device: Optional[int] = None) -> torch.Tensor:
    """Opens handle as a zero-copy tensor; same as handle.open_torch(device).

    On the cann provider the tensor is an npu tensor (needs torch_npu), mapped
    on the exporter's device id unless device says otherwise.
    """
    if isinstance(handle, _vmm.MappedHandle):
        return _open_mapped(handle, device)
    if not isinstance(handle, IpcHandle):
        raise TypeError(f"open_torch() needs an IpcHandle or a MappedHandle, not {type(handle).__name__}")
    if device is None and _npu_memory():
        # As torch_npu does: map NPU memory on the exporter's device id.
        device = handle.device
    array = handle.open(device)
    name = handle.torch_dtype
    if name is None:
        dtype = _BY_NAME.get(str(array.dtype))
        if dtype is None:  # pragma: no cover - every DeviceArray dtype has a torch twin
            array.close()
            raise TypeError(f"no torch dtype for {array.dtype}")
    else:
        dtype = _BY_NAME.get(name)
        if dtype is None:
            array.close()
            raise TypeError(f"handle records torch dtype {name!r}, which this torch does not have")
    # The tensor's DLPack capsule holds the import; it ends when the tensor dies.
    return _wrap(array, dtype)


# --------------------------------------------------------------------------- torch.multiprocessing

_install_lock = threading.Lock()
_fallbacks: dict = {}


def _rebuild_tensor(handle: IpcHandle, requires_grad: bool, parameter: bool) -> torch.Tensor:
    """Receiver side of install(): opens the handle (module level, so spawn children find it)."""
    tensor = open_torch(handle)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _reduce_tensor(fallback: Any, tensor: torch.Tensor) -> Any:
    # Empty tensors have no bytes (nor an address) to share: torch's way is fine.
    view = _view_of(tensor) if tensor.numel() > 0 else None
    if view is None:
        return fallback(tensor)
    try:
        if tensor.requires_grad and not tensor.is_leaf:
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not "
                "support crossing process boundaries.  If you just want to transfer the data, call detach() "
                "on the tensor before serializing (e.g., putting it on the queue)."
            )
        handle = _C.export(view, None, None, _stream_for(None, tensor), torch_dtype=_dtype_name(tensor.dtype))
    finally:
        view.close()
    return (_rebuild_tensor, (handle, tensor.requires_grad, isinstance(tensor, torch.nn.Parameter)))


_current = threading.local()


def current_stream() -> Optional[Stream]:
    """The Stream of the innermost ``with ascend_ipc.torch.stream(s):`` in this thread, or None."""
    return getattr(_current, "stream", None)


@contextlib.contextmanager
def stream(s: Optional[Stream]) -> Iterator[Optional[Stream]]:
    """Within the block, tensors shared in this thread (share(), and sends through
    install()) are ordered after the work queued on s: the receiver waits for it."""
    if s is not None and not isinstance(s, Stream):
        raise TypeError(f"stream() needs an ascend_ipc.Stream or None, not {type(s).__name__}")
    before = current_stream()
    _current.stream = s
    try:
        yield s
    finally:
        _current.stream = before


_writers: "weakref.WeakKeyDictionary[Any, Stream]" = weakref.WeakKeyDictionary()
_writers_lock = threading.Lock()


def record_stream(tensor: torch.Tensor, s: Optional[Stream]) -> None:
    """Says that work queued on s writes tensor's memory: from now on every send
    of it (share(), and install()'s reduction in whatever thread pickles it) is
    ordered after the work queued on s at that moment. None forgets it."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"record_stream() needs a torch.Tensor, not {type(tensor).__name__}")
    if s is not None and not isinstance(s, Stream):
        raise TypeError(f"record_stream() needs an ascend_ipc.Stream or None, not {type(s).__name__}")
    storage = tensor.untyped_storage()
    with _writers_lock:
        if s is None:
            _writers.pop(storage, None)
        else:
            _writers[storage] = s


def _stream_for(s: Optional[Stream], tensor: Optional[torch.Tensor] = None) -> Optional[Stream]:
    if s is not None:
        return s
    s = current_stream()
    if s is None and tensor is not None:
        with _writers_lock:
            s = _writers.get(tensor.untyped_storage())
        if s is not None and s.closed:
            s = None
    return s


def install() -> None:
    """Makes tensors in ascend_ipc memory travel zero-copy through torch.multiprocessing.

    Runs when ascend_ipc.torch is imported; calling it again is harmless.

    A tensor written on a stream (record_stream(t, s), or sent inside ``with
    ascend_ipc.torch.stream(s):`` by a sender that pickles in that thread) carries
    an IPC event recorded on s, and the receiver waits for the work queued there
    before it gets the tensor. Queues pickle in a feeder thread: use
    record_stream() for them.

    Registers a reduction with multiprocessing's ForkingPickler for torch.Tensor
    and torch.nn.Parameter that sends such tensors as an IpcHandle (export with
    pids=None) and opens them in the receiver; every other tensor goes to the
    reduction that was registered before (torch's own). Idempotent. Needed in
    the sending process only.
    """
    with _install_lock:
        if _fallbacks:
            return
        import torch.multiprocessing  # noqa: F401  (registers torch's reductions first)
        from multiprocessing.reduction import ForkingPickler
        from torch.multiprocessing import reductions

        for cls in (torch.Tensor, torch.nn.Parameter):
            fallback = ForkingPickler._extra_reducers.get(cls, reductions.reduce_tensor)
            _fallbacks[cls] = fallback
            ForkingPickler.register(cls, functools.partial(_reduce_tensor, fallback))


def installed() -> bool:
    """True once install() ran in this process."""
    return bool(_fallbacks)


# --------------------------------------------------------------------------- state dicts (SPEC 3.2)


def share_state_dict(state_dict: Mapping[str, torch.Tensor], pids: Optional[Iterable[int]] = None,
                     stream: Optional[Stream] = None, device: Optional[int] = None) -> StateDictHandle:
    """Packs state_dict into one buffer of exportable device memory (one pass) and exports it
    once. pids as in ascend_ipc.export(); stream: see StateDictHandle.update()."""
    return _state_dict.share(state_dict, pids, stream, device, _STATE_DICT_TENSORS)


def _rebuild_state_dict(handle: IpcHandle, plain: list, event: bytes, streamed: bool = True) -> StateDictHandle:
    """Unpickling of a StateDictHandle (module level, so that a receiver finds it)."""
    return _state_dict.rebuild(handle, plain, event, _STATE_DICT_TENSORS, streamed)


def _typed(buf: torch.Tensor, entries: list) -> dict:
    """The buffer viewed once per dtype (every offset is a multiple of ALIGN, so of every itemsize)."""
    return {dt: buf.view(dt) for dt in {e.dtype for e in entries}}


def _tensor_at(typed: dict, e: Any) -> torch.Tensor:
    # one torch call per tensor: a thousand-tensor dict opens in milliseconds
    base, strides = typed[e.dtype], e.strides
    if strides is None:  # the exporter's own entries (a receiver's are checked, strides and all)
        strides = _state_dict.contiguous_strides(e.shape)
    return base.as_strided(e.shape, strides, e.offset // base.element_size())


class _StateDictTensors:
    """What a StateDictHandle does with torch tensors (ascend_ipc._state_dict knows no torch)."""

    rebuild = staticmethod(_rebuild_state_dict)

    @staticmethod
    def describe(name: str, t: Any) -> tuple:
        """(dtype, its name, shape, bytes, is a Parameter, requires_grad) of a tensor to pack."""
        kind = _tensor_kinds.get(type(t))
        if kind is None:
            # isinstance(t, Parameter) asks Parameter's metaclass each time: once per type here
            kind = _tensor_kinds[type(t)] = (isinstance(t, torch.Tensor), isinstance(t, torch.nn.Parameter))
        if not kind[0]:
            raise TypeError(f"state dict entry {name!r} is a {type(t).__name__}, not a torch.Tensor")
        if t.layout is not torch.strided:
            raise TypeError(f"state dict entry {name!r}: only strided tensors can be shared ({t.layout})")
        dtype = t.dtype
        return (dtype, _dtype_name(dtype), tuple(t.shape), t.nbytes, kind[1], t.requires_grad)

    @staticmethod
    def dtype(name: str, dtype_name: str) -> torch.dtype:
        known = type(dtype_name) is str  # a pickle is data anyone can edit
        dt = _dtypes_seen.get(dtype_name) if known else None
        if dt is None:
            dt = getattr(torch, dtype_name, None) if known else None
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"state dict entry {name!r} has dtype {dtype_name!r}, which this torch does not have")
            _dtypes_seen[dtype_name] = dt  # only names of torch's dtypes: a bounded cache
        return dt

    @staticmethod
    def itemsize(dtype: torch.dtype) -> int:
        n = _itemsizes.get(dtype)
        if n is None:  # once per dtype (torch.dtype.itemsize is torch 2.1's)
            n = _itemsizes[dtype] = torch.empty((), dtype=dtype).element_size()
        return n

    @staticmethod
    def buffer(nbytes: int, device: Optional[int]) -> torch.Tensor:
        return empty((nbytes,), torch.uint8, device)

    @staticmethod
    def view_of(buf: torch.Tensor) -> Optional[DeviceArray]:
        return _view_of(buf)

    @staticmethod
    def matches(t: Any, e: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.dtype == e.dtype and tuple(t.shape) == e.shape

    @staticmethod
    def copy_in(buf: torch.Tensor, entries: list, state_dict: Any) -> None:
        # Contiguous CPU tensors (the usual state dict) go in one call, the GIL released once
        # (aclrtMemcpyBatch, 4,096 copies at a time): a torch copy_ per tensor costs several
        # microseconds each; the rest go one by one.
        pieces, rest = [], []
        for e in entries:
            t = state_dict[e.name]
            if t.is_cpu and t.is_contiguous() and not t.is_conj() and not t.is_neg():
                pieces.append((e.offset, t.data_ptr(), e.nbytes))
            else:
                rest.append(e)
        if pieces:
            view = _view_of(buf)
            try:
                view._gather_from_host(pieces)  # the tensors stay alive in state_dict meanwhile
            finally:
                view.close()
        if rest:
            typed = _typed(buf, rest)
            with torch.no_grad():
                for e in rest:
                    _tensor_at(typed, e).copy_(state_dict[e.name])

    @staticmethod
    def open(handle: IpcHandle, entries: list, device: Optional[int]) -> dict:
        """The zero-copy views of the opened buffer, one per entry."""
        typed = _typed(open_torch(handle, device), entries)
        out = {}
        for e in entries:
            t = _tensor_at(typed, e)
            if e.parameter:
                t = torch.nn.Parameter(t, requires_grad=e.requires_grad)
            elif e.requires_grad:
                t.requires_grad_(True)
            out[e.name] = t
        return out


_tensor_kinds: dict = {}  # type -> (is a torch.Tensor, is a Parameter)
_dtypes_seen: Dict[str, torch.dtype] = {}  # a dtype's name in a pickle -> the dtype
_itemsizes: Dict[torch.dtype, int] = {}
_STATE_DICT_TENSORS = _StateDictTensors()

# Using ascend_ipc.torch is enough: a process that makes tensors here (a DataLoader worker
# started with spawn or forkserver, which runs no code of the parent's) sends them zero-copy.
install()
