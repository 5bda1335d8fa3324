"""Datasets for test_dataloader.py, in a module of their own so that spawn and forkserver
workers import them (they run none of the test's code): each makes its tensors with
ascend_ipc.torch and nothing else."""

import time

import torch

import ascend_ipc.torch as atorch
from ascend_ipc import _handoff


class Batches(torch.utils.data.Dataset):
    """Whole batches from __getitem__ (DataLoader(batch_size=None))."""

    def __init__(self, n, shape, settle_to=None):
        self.n, self.shape, self.settle_to = n, shape, settle_to

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = atorch.empty(self.shape, dtype=torch.int64)
        t.fill_(i)
        # How many hand-offs this worker still holds: bounded by what is in flight. Releases
        # of batches the main process opened come in by themselves, whenever the machine lets
        # the threads run: with settle_to, wait for them (however long a loaded machine takes,
        # up to a minute) so the count says what is still unreleased, not how busy the CPUs are.
        deadline = time.monotonic() + 60
        while self.settle_to is not None and _handoff.held() > self.settle_to and time.monotonic() < deadline:
            time.sleep(0.001)
        return {"index": i, "data": t, "held": _handoff.held()}


class Samples(torch.utils.data.Dataset):
    """Plain samples; collate() below makes the batch in ascend_ipc memory."""

    def __init__(self, n, width):
        self.n, self.width = n, width

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((self.width,), i, dtype=torch.float32)


def collate(samples):
    out = atorch.empty((len(samples), samples[0].shape[0]), dtype=torch.float32)
    torch.stack(samples, out=out)
    return out


_stream = None


class StreamBatches(torch.utils.data.Dataset):
    """Batches written by work queued on a stream of the worker: the tensor says so
    (record_stream), and the main process gets it only once that work has run."""

    def __init__(self, n, numel):
        self.n, self.numel = n, numel

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np

        import ascend_ipc as aipc

        global _stream
        if _stream is None:
            _stream = aipc.Stream()
        t = atorch.zeros((self.numel,), dtype=torch.uint8)
        dev = atorch._view_of(t)
        for _ in range(4):  # queued, not yet run when the batch is sent
            dev.copy_from(np.full(self.numel, i % 250 + 1, np.uint8), stream=_stream)
        atorch.record_stream(t, _stream)
        dev.close()
        return {"index": i, "data": t}
