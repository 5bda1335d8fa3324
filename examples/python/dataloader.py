"""DataLoader workers make batches in ascend_ipc memory (python examples/python/dataloader.py).

The dataset builds each batch with ascend_ipc.torch; DataLoader(num_workers=2) sends it to the
main process, which gets the workers' memory itself — no copy — with every start method.
Nothing in the worker code beyond ascend_ipc.torch; the workers drop each batch once sent.
"""

import sys

import torch

import ascend_ipc.torch as atorch


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        batch = atorch.empty((256, 256), dtype=torch.float32)  # exportable memory
        batch.fill_(float(i * i))
        return i, batch


def main(method: str = "spawn") -> int:
    loader = torch.utils.data.DataLoader(Squares(), batch_size=None, num_workers=2, multiprocessing_context=method)
    ok = True
    for i, batch in loader:
        zero_copy = atorch.is_shared(batch)  # the worker's memory, opened here
        ok &= zero_copy and bool((batch == i * i).all())
    print(f"dataloader ({method}): {len(loader)} batches,", "zero-copy OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
