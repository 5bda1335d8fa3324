"""Trainer -> rollout weight sync between Ray actors with ascend_ipc
(python examples/python/ray_weight_sync.py; needs the `ray` extra: pip install 'ascend_ipc[ray]').

The trainer actor shares its model's state dict once, with a whitelist of the rollout actors'
processes (their bare_tgid()). The handle goes to the rollouts as an ordinary Ray argument and
each opens it once, zero-copy, into its own copy of the model. After every training step the
trainer writes the new weights into the same buffer; the rollouts wait for those writes
(synchronize()) and their forward passes match the trainer's. Runs on a local Ray node.
"""

import os
import pickle
import sys

# A one-machine demo (IPC never leaves the machine): Ray's switch, read on import, that keeps
# its processes on 127.0.0.1; and no usage report.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
import torch  # noqa: E402

import ascend_ipc as aipc  # noqa: E402
import ascend_ipc.torch as atorch  # noqa: E402

STEPS, ROLLOUTS = 3, 2


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def prompts() -> torch.Tensor:
    return torch.linspace(-1, 1, 8 * 32).view(8, 32)


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self):
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.stream = aipc.Stream()
        self.shared = None

    def share(self, pids):
        self.shared = atorch.share_state_dict(self.model.state_dict(), pids=pids, stream=self.stream)
        return self.shared  # Ray pickles the handle (a key and a layout), never the weights

    def train_step(self):
        loss = self.model(torch.randn(16, 32)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.shared.update(self.model.state_dict(), stream=self.stream)  # same buffer, no new export
        with torch.no_grad():
            return self.model(prompts())

    def close(self):
        self.shared.close()
        self.stream.close()


@ray.remote(num_cpus=0)
class Rollout:
    def __init__(self):
        self.model = make_model()
        self.shared = None

    def bare_tgid(self):
        return aipc.bare_tgid()  # the id the trainer must whitelist (not always os.getpid())

    def load(self, shared):
        self.shared = shared
        self.model.load_state_dict(shared.open(), assign=True)  # zero-copy: the trainer's buffer
        return os.getpid()

    def generate(self):
        self.shared.synchronize()  # the trainer's latest update has been written
        with torch.no_grad():
            return self.model(prompts())


def main() -> int:
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 << 20)
    try:
        trainer = Trainer.remote()
        rollouts = [Rollout.remote() for _ in range(ROLLOUTS)]
        pids = ray.get([r.bare_tgid.remote() for r in rollouts])
        shared_ref = trainer.share.remote(pids)
        rollout_pids = ray.get([r.load.remote(shared_ref) for r in rollouts])  # each opens it once
        shared = ray.get(shared_ref)
        ok = True
        for step in range(STEPS):
            expected = ray.get(trainer.train_step.remote())
            outputs = ray.get([r.generate.remote() for r in rollouts])
            for pid, out in zip(rollout_pids, outputs):
                match = torch.allclose(out, expected)
                ok &= match
                verdict = "matches" if match else "DIFFERS from"
                print(f"step {step}: rollout (pid {pid}) forward {verdict} the trainer's")
        ray.get(trainer.close.remote())
        print(f"{len(shared)} tensors, {shared.nbytes} bytes shared once; Ray carried a "
              f"{len(pickle.dumps(shared))}-byte handle to {ROLLOUTS} rollouts, then {STEPS} updates in place")
    finally:
        ray.shutdown()
    print("ray weight sync:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
