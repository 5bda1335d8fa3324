"""Trainer -> inference workers weight sync with ascend_ipc (python examples/python/weight_sync.py).

The trainer shares its model's state dict once (one export, one buffer); each inference
worker opens it once, zero-copy, and loads it into its own copy of the model. After every
training step the trainer writes the new weights into the same buffer (update(), ordered on
its stream); the workers wait for those writes and their forward passes match the trainer's.
"""

import multiprocessing as mp
import sys

import torch

import ascend_ipc as aipc
import ascend_ipc.torch as atorch

STEPS, WORKERS = 3, 2


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def inference_worker(handle, requests, answers):
    model = make_model()
    model.load_state_dict(handle.open(), assign=True)  # zero-copy: the trainer's buffer
    x = torch.linspace(-1, 1, 8 * 32).view(8, 32)
    while (step := requests.get()) is not None:
        handle.synchronize()  # the trainer's update has been written
        with torch.no_grad():
            answers.put((step, model(x)))


def main() -> int:
    model = make_model()
    stream = aipc.Stream()
    shared = atorch.share_state_dict(model.state_dict(), stream=stream)
    ctx = mp.get_context("spawn")
    requests = [ctx.Queue() for _ in range(WORKERS)]
    answers = ctx.Queue()
    workers = [ctx.Process(target=inference_worker, args=(shared, q, answers)) for q in requests]
    for w in workers:
        w.start()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 8 * 32).view(8, 32)
    ok = True
    for step in range(STEPS):
        loss = model(torch.randn(16, 32)).pow(2).mean()  # one training step
        opt.zero_grad()
        loss.backward()
        opt.step()
        shared.update(model.state_dict(), stream=stream)  # same buffer, no new export
        for q in requests:
            q.put(step)
        with torch.no_grad():
            expected = model(x)
        for _ in range(WORKERS):
            got_step, out = answers.get(timeout=120)
            match = got_step == step and torch.allclose(out, expected)
            ok &= match
            print(f"step {step}: worker forward {'matches' if match else 'DIFFERS from'} the trainer's")
    for q in requests:
        q.put(None)
    for w in workers:
        w.join(60)
    stream.close()
    print("weight sync:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
