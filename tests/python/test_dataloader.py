"""DataLoader workers make batches in ascend_ipc memory; the main process gets them zero-copy,
with fork, spawn and forkserver, and no call in the worker code beyond using ascend_ipc.torch.
The workers drop each batch as soon as it is sent (put and drop)."""

import os
import sys

import pytest

torch = pytest.importorskip("torch")

import ascend_ipc as aipc  # noqa: E402
import ascend_ipc.torch as atorch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dataloader_workers as DW  # noqa: E402

pytestmark = pytest.mark.timeout(300)

METHODS = ["fork", "spawn", "forkserver"]


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("method", METHODS)
def test_batches_from_getitem_arrive_zero_copy(method):
    ds = DW.Batches(24, (64, 1024))  # 512 KiB batches
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method)
    seen = []
    for batch in loader:
        t = batch["data"]
        assert atorch.is_shared(t), "a copy arrived, not the worker's memory"
        assert t.shape == (64, 1024) and bool((t == batch["index"]).all())
        seen.append(batch["index"])
    assert sorted(seen) == list(range(24))


@pytest.mark.parametrize("method", METHODS)
def test_collate_fn_batches_arrive_zero_copy(method):
    loader = torch.utils.data.DataLoader(
        DW.Samples(40, 256), batch_size=8, num_workers=2, collate_fn=DW.collate, multiprocessing_context=method,
        persistent_workers=True,
    )
    for epoch in range(2):  # persistent workers serve both epochs
        rows = []
        for batch in loader:
            assert atorch.is_shared(batch) and batch.shape == (8, 256)
            rows.extend(int(v) for v in batch[:, 0])
            assert bool((batch == batch[:, :1]).all())
        assert sorted(rows) == list(range(40)), epoch


def test_pin_memory_keeps_working():
    # Without an accelerator torch leaves batches where they are (a warning says so); with
    # one it would copy them to pinned host memory, as for any CPU tensor.
    loader = torch.utils.data.DataLoader(DW.Batches(6, (4, 4)), batch_size=None, num_workers=2, pin_memory=True)
    with pytest.warns(UserWarning) if not torch.accelerator.is_available() else _nothing():
        got = sorted(int(b["data"][0, 0]) for b in loader)
    assert got == list(range(6))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_long_run_holds_only_what_is_in_flight():
    # Many small batches: what the workers hold for the main process stays bounded by the
    # prefetch window, and the main process's descriptors and device memory come back.
    n = 3000
    loader = torch.utils.data.DataLoader(
        DW.Batches(n, (16,), settle_to=2 * 4 + 4), batch_size=None, num_workers=2, prefetch_factor=4,
        multiprocessing_context="fork",
        persistent_workers=True,
    )
    for i, batch in enumerate(loader):  # a first epoch: connections to the workers are made
        if i == 50:
            break
    del batch
    fds0, used0 = _open_fds(), aipc.mem_info()[1] - aipc.mem_info()[0]
    most_held = 0
    count = 0
    for batch in loader:
        most_held = max(most_held, batch["held"])
        count += 1
        del batch
    assert count == n
    assert most_held <= 2 * 4 + 4, most_held  # 2 workers x prefetch 4, and a little slack
    assert _open_fds() <= fds0 + 1
    assert aipc.mem_info()[1] - aipc.mem_info()[0] == used0


@pytest.mark.parametrize("method", METHODS)
def test_stream_ordered_batches(method):
    numel = 32 << 20  # queued copies long enough that a batch sent early would read zeros
    loader = torch.utils.data.DataLoader(DW.StreamBatches(6, numel), batch_size=None, num_workers=2,
                                         multiprocessing_context=method)
    for batch in loader:
        t = batch["data"]
        assert atorch.is_shared(t)
        want = batch["index"] % 250 + 1
        assert int(t[-1]) == want and int(t[0]) == want
