"""ascend_ipc: share NPU device memory between processes, zero-copy.

The CANN runtime's IPC memory interface (export a range of device memory as a
key in one process, import it by key in another) for Python: picklable
handles, DLPack arrays that numpy and torch use without copying, and a
torch.multiprocessing integration (``ascend_ipc.torch``).

    import ascend_ipc as aipc
    a = aipc.from_numpy(np.arange(8, dtype=np.float32))
    h = aipc.export(a)                 # picklable IpcHandle
    # ... in another process:
    with h.open() as b:                # DeviceArray over the same bytes
        np.from_dlpack(b)[:] += 1      # the exporter sees the change

``import ascend_ipc`` does not import torch; ``ascend_ipc.torch`` does.

The runtime behind it is chosen at import by ASCEND_IPC_PROVIDER: ``emulated``
(an emulated NPU in host memory), ``cann`` (the CANN toolkit's libascendcl.so,
loaded at run time) or ``auto`` (cann when it loads and has a device, else
emulated); ``provider_info()`` says which, from where and why.
"""

from ._version import __version__
from ._C import (
    KEY_LEN,
    PAGE_SIZE,
    AclError,
    DeviceArray,
    Event,
    IpcHandle,
    Stream,
    bare_tgid,
    current_device,
    device_count,
    empty,
    export,
    from_numpy,
    mem_info,
    provider,
    provider_info,
    set_device,
    wrap,
    zeros,
)
from ._many import open_many
from ._supernode import supernode_info
from ._vmm import MappedHandle, PhysicalMemory, ShareableHandle, VirtualRange, granularity


def _register_one_receiver_pickling():
    # multiprocessing's queues and pipes (and so DataLoader workers and torch.multiprocessing)
    # pickle each copy for one receiver: there a hand-off's hold ends when it is opened. Every
    # kind of handle (ascend_ipc/_handoff.py); a StateDictHandle's IpcHandle is one of them.
    from multiprocessing.reduction import ForkingPickler

    from . import _C, _vmm

    ForkingPickler.register(IpcHandle, _C._reduce_for_one)
    ForkingPickler.register(Event, _C._reduce_for_one)
    ForkingPickler.register(MappedHandle, _vmm._reduce_for_one)
    ForkingPickler.register(ShareableHandle, _vmm._reduce_for_one)


def _hold(handle, one_receiver):
    from ._handoff import hold

    return hold(handle, one_receiver)


def _release(address, token):
    from ._handoff import release

    release(address, token)


def _open_torch(handle, *args, **kwargs):
    from .torch import open_torch

    return open_torch(handle, *args, **kwargs)


def _register_callbacks():
    # What the package's parts call back into it with; each module is imported on first use, so
    # that importing ascend_ipc imports neither put and drop's sockets nor torch. The extension
    # never imports the package: it gets put and drop's hold and release, and what
    # IpcHandle.open_torch() runs, here. MappedHandle.open_torch() runs the same.
    from . import _C, _vmm

    _C._register_callbacks(hold=_hold, release=_release, open_torch=_open_torch)
    _vmm._open_torch = _open_torch


_register_one_receiver_pickling()
_register_callbacks()
del _register_one_receiver_pickling, _register_callbacks

__all__ = [
    "KEY_LEN",
    "PAGE_SIZE",
    "AclError",
    "DeviceArray",
    "Event",
    "IpcHandle",
    "MappedHandle",
    "PhysicalMemory",
    "ShareableHandle",
    "Stream",
    "VirtualRange",
    "__version__",
    "bare_tgid",
    "current_device",
    "device_count",
    "empty",
    "export",
    "from_numpy",
    "granularity",
    "mem_info",
    "open_many",
    "provider",
    "provider_info",
    "set_device",
    "supernode_info",
    "wrap",
    "zeros",
]


def __getattr__(name):
    # ascend_ipc.torch on first use, so that importing ascend_ipc never imports torch.
    if name == "torch":
        import importlib

        return importlib.import_module("ascend_ipc.torch")
    raise AttributeError(f"module 'ascend_ipc' has no attribute {name!r}")
