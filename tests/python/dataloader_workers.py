"""Datasets for test_dataloader.py, in a module of their own so that spawn and forkserver
workers import them (they run none of the test's code): each makes its tensors with
ascend_ipc.torch and nothing else."""

import torch

import ascend_ipc.torch as atorch
from ascend_ipc import _handoff


class Batches(torch.utils.data.Dataset):
    """Whole batches from __getitem__ (DataLoader(batch_size=None))."""

    def __init__(self, n, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = atorch.empty(self.shape, dtype=torch.int64)
        t.fill_(i)
        # how many hand-offs this worker still holds: bounded by what is in flight
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
