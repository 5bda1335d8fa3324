"""aipc.open_many: many handles opened with their requests in flight together."""

from __future__ import annotations

import concurrent.futures
from typing import List, Optional, Sequence

from ._C import DeviceArray, IpcHandle

_THREADS = 8


def open_many(handles: Sequence[IpcHandle], device: Optional[int] = None) -> List[DeviceArray]:
    """Opens every handle (IpcHandle.open) and returns the arrays in the same order.

    The imports run on a few threads with the GIL released, so the requests to one exporter
    are in flight together on its one connection (the runtime shares a connection between
    threads) instead of one round trip after another. All or nothing: if one open fails,
    the arrays already opened are closed and the first failure is raised.
    """
    handles = list(handles)
    for h in handles:
        if not isinstance(h, IpcHandle):
            raise TypeError(f"open_many() needs IpcHandles, not {type(h).__name__}")
    if len(handles) <= 1:
        return [h.open(device) for h in handles]
    results: List[Optional[DeviceArray]] = [None] * len(handles)
    errors: List[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(_THREADS, len(handles))) as pool:
        futures = {pool.submit(h.open, device): i for i, h in enumerate(handles)}
        for f in concurrent.futures.as_completed(futures):
            try:
                results[futures[f]] = f.result()
            except BaseException as e:  # noqa: BLE001  (re-raised below, after the clean-up)
                errors.append(e)
    if errors:
        for a in results:
            if a is not None:
                a.close()
        raise errors[0]
    return results  # type: ignore[return-value]
