"""Ray: trainer -> rollout weight sync between actors (docs/ray.md).

A trainer actor shares its model's state dict once (ascend_ipc.torch.share_state_dict, with a
whitelist of the rollout actors' bare_tgid()), the handle travels through Ray as an actor
method's return value, and two rollout actors open it once, zero-copy. Every training step
writes into the same buffer; the rollouts see each step's exact weights at the same addresses.
Then the error paths: a rollout that is not on the whitelist (until the trainer allow()s it),
an export that was closed, a rollout that died holding its import, and a trainer that died.

Everything runs on one local Ray node started by this module, on the loopback interface and
without a dashboard, and shut down at its end. The example runs too, on a node of its own.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import pickle
import sys
import time

import pytest
from conftest import run_command

# Ray's switch for a one-machine node, read when ray is imported: every Ray process listens
# on 127.0.0.1 rather than on the machine's network address.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
if os.environ.get("ASCEND_IPC_EXPECT_SANITIZED") == "1":
    # Ray's own native workers would start under the LD_PRELOADed ASan runtime.
    pytest.skip("not under ASan: the Ray test runs in the dev venv (make test)", allow_module_level=True)
with pytest.MonkeyPatch.context() as _mp:
    for _k, _v in LOOPBACK.items():
        _mp.setenv(_k, _v)
    ray = pytest.importorskip(
        "ray", reason="Ray is not installed for this Python (the `ray` extra: pip install -e '.[test,ray]')"
    )
torch = pytest.importorskip("torch", reason="the Ray weight sync shares torch tensors; torch is not installed")

import ascend_ipc as aipc  # noqa: E402
import ascend_ipc.torch as atorch  # noqa: E402

pytestmark = pytest.mark.timeout(240)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ROLLOUTS = 2
STEPS = 3


class Policy(torch.nn.Module):
    """About 1 MiB of float32 weights and an int64 buffer that counts the steps."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(), torch.nn.Linear(512, 256))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        return self.body(x)


def _fingerprint(state_dict) -> dict:
    """name -> (dtype, shape, SHA-256 of the bytes): an exact comparison that sends a few
    hundred bytes back through Ray instead of the weights."""
    out = {}
    for k, t in state_dict.items():
        raw = t.detach().reshape(-1).view(torch.uint8).numpy().tobytes()
        out[k] = (str(t.dtype), tuple(t.shape), hashlib.sha256(raw).hexdigest())
    return out


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self):
        self.model = Policy()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.stream = aipc.Stream()
        self.shared = None

    def where(self):
        return os.getpid(), aipc.bare_tgid(), aipc.__file__, aipc.provider()

    def share(self, pids):
        # The whitelist is the secure default: only these processes may open the key.
        self.shared = atorch.share_state_dict(self.model.state_dict(), pids=pids, stream=self.stream)
        return self.shared

    def allow(self, pid):
        self.shared.handle.allow(pid)

    def step(self):
        loss = self.model(torch.randn(32, 256)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            self.model.steps += 1
        self.shared.update(self.model.state_dict(), stream=self.stream)
        return _fingerprint(self.model.state_dict())

    def close(self):
        self.shared.close()

    def try_close(self):
        try:
            self.shared.close()
        except aipc.AclError as e:
            return e
        return None


@ray.remote(num_cpus=0)
class Rollout:
    def __init__(self):
        self.shared = self.model = self.addresses = None

    def where(self):
        return os.getpid(), aipc.bare_tgid(), aipc.__file__, aipc.provider()

    def load(self, shared):
        """Opens the handle (a Ray argument: the ObjectRef is resolved before the call)."""
        opened = shared.open()
        model = Policy()
        model.load_state_dict(opened, assign=True)  # the trainer's buffer, not a copy
        self.shared, self.model = shared, model
        self.addresses = {k: t.data_ptr() for k, t in model.state_dict().items()}
        return self.addresses, all(atorch.is_shared(t) for t in model.state_dict().values())

    def try_load(self, shared):
        try:
            return self.load(shared)
        except aipc.AclError as e:
            return e  # AclErrors pickle: the test looks at code and call

    def weights(self, sync=True):
        """The weights as this rollout sees them now, after waiting for the trainer's latest
        update (sync) or not; and whether they are still at the addresses of the first open."""
        if sync:
            self.shared.synchronize()
        sd = self.model.state_dict()
        same_place = {k: t.data_ptr() for k, t in sd.items()} == self.addresses
        return _fingerprint(sd), same_place

    def try_synchronize(self):
        try:
            self.shared.synchronize()
        except aipc.AclError as e:
            return e
        return None

    def drop(self):
        """Lets go of the import; returns the ascend_ipc allocations this process still has."""
        import gc

        self.model = self.addresses = None
        gc.collect()
        return aipc._C._live_allocations()


def test_example_runs():
    # Its own Ray node, in a fresh interpreter, as a user runs it. First in the file, so
    # that it does not share the two cores with this module's node (set up after it).
    rc, out, err = run_command([sys.executable, str(ROOT / "examples" / "python" / "ray_weight_sync.py")],
                               env=dict(os.environ, **LOOPBACK), timeout=200)
    assert rc == 0, out + err
    assert "ray weight sync: OK" in out, out
    assert out.count("matches the trainer") == 2 * 3, out


@pytest.fixture(scope="module")
def cluster():
    # Workers import Policy and the actor classes from this module by name.
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
           "ASCEND_IPC_PROVIDER": os.environ.get("ASCEND_IPC_PROVIDER", "emulated")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in LOOPBACK.items():
            mp.setenv(k, v)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=100 << 20, runtime_env={"env_vars": env})
    try:
        assert ray.util.get_node_ip_address() == "127.0.0.1", "ray was imported before LOOPBACK was set"
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def actors(cluster):
    trainer = Trainer.remote()
    rollouts = [Rollout.remote() for _ in range(ROLLOUTS)]
    # Started (in parallel) and connected before the first test, whose leak check then does
    # not count the driver's sockets to them.
    ray.get([a.where.remote() for a in (trainer, *rollouts)])
    yield trainer, rollouts
    for a in (trainer, *rollouts):
        ray.kill(a)


def _pids(rollouts):
    return [where[1] for where in ray.get([r.where.remote() for r in rollouts])]


def _assert_same(got: dict, expected: dict):
    assert got.keys() == expected.keys()
    for k in expected:
        assert got[k] == expected[k], k


def test_rollouts_see_every_update_zero_copy(actors):
    trainer, rollouts = actors
    places = ray.get([a.where.remote() for a in (trainer, *rollouts)])
    # Separate processes, each with this checkout's ascend_ipc on the driver's provider.
    assert len({p[0] for p in places}) == 1 + ROLLOUTS and os.getpid() not in {p[0] for p in places}
    assert {p[2] for p in places} == {aipc.__file__} and {p[3] for p in places} == {aipc.provider()}

    shared_ref = trainer.share.remote(_pids(rollouts))
    opened = ray.get([r.load.remote(shared_ref) for r in rollouts])
    for addresses, all_shared in opened:
        assert all_shared, "the rollout's tensors should be ascend_ipc imports, not copies"
        assert set(addresses) == {"steps", "body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias"}

    # What went through Ray is the handle, not the weights.
    shared = ray.get(shared_ref)
    assert shared.nbytes > 1 << 20 and len(pickle.dumps(shared)) < 4096

    before = ray.get(rollouts[0].weights.remote())[0]
    for _ in range(STEPS):
        expected = ray.get(trainer.step.remote())  # update() has returned: the step is published
        seen = ray.get([r.weights.remote() for r in rollouts])  # each waits on the IPC event first
        assert all(expected[k] != before[k] for k in expected), "every tensor should change each step"
        before = expected
        for got, same_place in seen:
            assert same_place, "the update should land in the buffer opened at the start"
            _assert_same(got, expected)

    # Letting go of the views releases the import in each rollout.
    assert ray.get([r.drop.remote() for r in rollouts]) == [[]] * ROLLOUTS


def test_whitelist_refuses_other_actors_until_allowed_and_close_ends_opens(actors):
    trainer, (member, stranger) = actors
    (stranger_pid,) = _pids([stranger])
    shared_ref = trainer.share.remote(_pids([member]))  # only the first rollout whitelisted
    ray.get(member.load.remote(shared_ref))

    # Not on the whitelist: the runtime refuses the import, naming the process.
    err = ray.get(stranger.try_load.remote(shared_ref))
    assert isinstance(err, aipc.AclError), err
    assert (err.code, err.name, err.call) == (207006, "ACL_ERROR_RT_NO_PERMISSION", "aclrtIpcMemImportByKey")
    assert str(stranger_pid) in err.message

    ray.get(trainer.allow.remote(stranger_pid))  # the exporter adds it later
    assert ray.get(stranger.load.remote(shared_ref))[1]
    expected = ray.get(trainer.step.remote())
    for got, same_place in ray.get([a.weights.remote() for a in (member, stranger)]):
        assert same_place
        _assert_same(got, expected)

    # The trainer ends the export: opens already made keep the last weights; a new open
    # (by a whitelisted process) and a wait on the export's event fail with 507022.
    ray.get(trainer.close.remote())
    got, same_place = ray.get(stranger.weights.remote(sync=False))
    assert same_place
    _assert_same(got, expected)
    for err in ray.get([member.try_load.remote(shared_ref), stranger.try_synchronize.remote()]):
        assert isinstance(err, aipc.AclError) and err.code == 507022, err
    assert ray.get([a.drop.remote() for a in (member, stranger)]) == [[], []]


def _gone(pid: int) -> bool:
    """Whether process pid has exited (no such process, or a zombie: its descriptors are closed)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _kill(actor, pid: int):
    """ray.kill() returns at once, and Ray reports the actor dead before its process has
    exited: wait for both (until then the process still serves its exports)."""
    ray.kill(actor)
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.get(actor.where.remote())
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, "the killed actor still answers"
        time.sleep(0.1)
    while not _gone(pid):
        assert time.monotonic() < deadline, f"the killed actor's process {pid} has not exited"
        time.sleep(0.02)


def test_actor_deaths(actors):
    """A rollout that dies gives its import back; the weights opened from a trainer that
    dies stay readable, and nothing new can be opened from it."""
    _, (r0, r1) = actors
    # ASCEND_IPC_STRICT=1: the trainer's close() refuses while any process still imports.
    trainer = Trainer.options(runtime_env={"env_vars": {"ASCEND_IPC_STRICT": "1"}}).remote()
    doomed = Rollout.remote()
    (trainer_pid, *_), (r0_pid, *_), (doomed_pid, *_) = ray.get([a.where.remote() for a in (trainer, r0, doomed)])
    shared_ref = trainer.share.remote(_pids([r0, r1, doomed]))
    ray.get([r.load.remote(shared_ref) for r in (r0, r1, doomed)])
    expected = ray.get(trainer.step.remote())

    _kill(doomed, doomed_pid)  # never closed its import: its death does
    assert ray.get(r1.drop.remote()) == []
    err = ray.get(trainer.try_close.remote())
    assert isinstance(err, aipc.AclError) and err.code == 507000, f"the trainer's strict close: {err!r}"
    assert f"process(es) {r0_pid} (1 reference" in err.message, "only r0 should still hold the key"
    assert str(doomed_pid) not in err.message

    _kill(trainer, trainer_pid)  # as if the trainer crashed, its export still open
    got, same_place = ray.get(r0.weights.remote(sync=False))
    assert same_place, "r0's import keeps the memory: the last weights stay readable in place"
    _assert_same(got, expected)
    # Nothing new can be opened from a dead exporter, nor its event waited on. (The message
    # says the exporter is gone, or closed the connection, as the rollout notices it first.)
    for what, err in zip(("r0 synchronize", "r1 open"), ray.get([r0.try_synchronize.remote(),
                                                               r1.try_load.remote(shared_ref)])):
        assert isinstance(err, aipc.AclError) and err.code == 507022, f"{what}: {err!r}"
        assert f"exporter process {trainer_pid} " in err.message
    assert ray.get(r0.drop.remote()) == []
