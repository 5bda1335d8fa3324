"""Ray's trainer -> rollout weight sync (examples/python/ray_weight_sync.py, docs/ray.md) on a Ray
cluster of two emulated servers: run by test_supernode.py as the driver, in server 0, once a
head node runs there (custom resource ``server0``) and a worker node in server 1 (``server1``).

The trainer and one rollout run on server 0, another rollout on server 1. The trainer shares its
state dict once with an empty whitelist and allows each rollout on its own server
(``allow(pid, sdid=...)``: the same server's sdid makes it a local entry, another's an
inter-server one); each rollout opens it once; every training step writes into the same buffer
and the rollouts' forward passes match the trainer's. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

import ray
import torch

import ascend_ipc as aipc
import ascend_ipc.torch as atorch

STEPS = 3


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def prompts() -> torch.Tensor:
    return torch.linspace(-1, 1, 8 * 32).view(8, 32)


def where() -> dict:
    return {"pid": int(aipc.bare_tgid()), "sdid": int(aipc.supernode_info()["sdid"]),
            "netns": os.readlink("/proc/self/ns/net")}


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self):
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.shared = None

    def where(self):
        return where()

    def share(self, rollouts):
        self.shared = atorch.share_state_dict(self.model.state_dict(), pids=[])
        for r in rollouts:
            self.shared.handle.allow(r["pid"], sdid=r["sdid"])
        return self.shared

    def train_step(self):
        loss = self.model(torch.randn(16, 32)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.shared.update(self.model.state_dict())
        with torch.no_grad():
            return self.model(prompts())

    def close(self):
        self.shared.close()


@ray.remote(num_cpus=0)
class Rollout:
    def __init__(self):
        self.model = make_model()
        self.shared = None

    def where(self):
        return where()

    def load(self, shared):
        self.shared = shared
        try:
            self.model.load_state_dict(shared.open(), assign=True)
        except aipc.AclError as e:
            return {"code": e.code, "message": e.message}
        return None

    def generate(self):
        self.shared.synchronize()
        with torch.no_grad():
            return self.model(prompts())


def main() -> int:
    ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["AIPC_ADDR"], log_to_driver=False)
    result: dict = {}
    try:
        trainer = Trainer.options(resources={"server0": 0.01}).remote()
        rollouts = [Rollout.options(resources={f"server{i}": 0.01}).remote() for i in (0, 1)]
        result["trainer"] = ray.get(trainer.where.remote())
        result["rollouts"] = ray.get([r.where.remote() for r in rollouts])
        shared_ref = trainer.share.remote(result["rollouts"])
        result["load_errors"] = ray.get([r.load.remote(shared_ref) for r in rollouts])
        matches = []
        if not any(result["load_errors"]):
            for _ in range(STEPS):
                expected = ray.get(trainer.train_step.remote())
                outputs = ray.get([r.generate.remote() for r in rollouts])
                matches.append([bool(torch.equal(out, expected)) for out in outputs])
        result["matches"] = matches
        ray.get(trainer.close.remote())
    finally:
        ray.shutdown()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
