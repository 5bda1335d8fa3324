"""State dicts shared in one export (SPEC 3.2): ascend_ipc.torch.share_state_dict,
StateDictHandle.open / update / synchronize; and the examples that use them."""

import multiprocessing as mp
import os
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import ascend_ipc as aipc  # noqa: E402
import ascend_ipc.torch as atorch  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mixed():
    sd = {
        "w": torch.nn.Parameter(torch.randn(8, 4)),
        "frozen": torch.nn.Parameter(torch.randn(3), requires_grad=False),
        "bias16": torch.arange(5, dtype=torch.bfloat16),
        "count": torch.tensor(7, dtype=torch.int64),  # a scalar
        "empty": torch.empty(0, 3),
        "mask": torch.tensor([True, False, True]),
        "strided": torch.arange(12.0).view(3, 4).t(),  # stored contiguous, values kept
        "conj": torch.tensor([1 + 2j, 3 - 4j]).conj(),  # a lazy conjugate: its values, not its bits
        "neg": torch.tensor([1 + 2j, 3 - 4j]).conj().imag,  # a lazy negation
        "device": atorch.zeros(6).add_(5),  # ascend_ipc memory as a source
    }
    return sd


def test_open_keeps_every_tensor():
    sd = _mixed()
    h = atorch.share_state_dict(sd)
    assert len(h) == len(sd) and h.names == list(sd)
    got = pickle.loads(pickle.dumps(h)).open()
    for name, t in sd.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(got[name].detach(), t.detach()), name
    assert isinstance(got["w"], torch.nn.Parameter) and got["w"].requires_grad
    assert isinstance(got["frozen"], torch.nn.Parameter) and not got["frozen"].requires_grad
    assert not isinstance(got["count"], torch.nn.Parameter)


def test_packing_checks_its_pieces():
    """The buffer is packed in one call of host-to-device copies; its pieces are checked."""
    buf = aipc.empty((4096,), "uint8")
    src = torch.arange(16, dtype=torch.uint8)
    buf._gather_from_host([(100, src.data_ptr(), 16), (0, src.data_ptr(), 0)])
    assert bytes(buf.numpy()[100:116]) == bytes(range(16))
    for bad in ([(4090, src.data_ptr(), 16)], [(-1, src.data_ptr(), 1)], [(0, src.data_ptr(), -1)], [(0, 0, 4)]):
        with pytest.raises(ValueError, match="outside|view"):
            buf._gather_from_host(bad)
    for bad in ([(0, 1)], [[0, 1, 2]], 5, [("0", 1, 2)]):
        with pytest.raises(TypeError):
            buf._gather_from_host(bad)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf[::2]._gather_from_host([])
    buf.close()
    with pytest.raises(ValueError, match="closed"):
        buf._gather_from_host([])


def test_one_buffer_one_import_for_thousands_of_tensors():
    sd = {f"layer{i}.weight": torch.full((4, 4), float(i)) for i in range(2000)}
    h = atorch.share_state_dict(sd)
    got = pickle.loads(pickle.dumps(h)).open()
    assert all(got[f"layer{i}.weight"][0, 0].item() == i for i in range(0, 2000, 97))
    bases = {t.untyped_storage().data_ptr() for t in got.values()}
    assert len(bases) == 1  # every tensor a view of the one import
    assert h.nbytes >= 2000 * 64


def test_packing_more_pieces_than_one_batch_takes():
    """Packing goes 4,096 pieces to an aclrtMemcpyBatch (CANN's limit); a batch with a source
    that is itself device memory (an ascend_ipc tensor) is copied piece by piece instead."""
    n = 4096 + 1500
    sd = {f"t{i}": torch.full((3,), float(i)) for i in range(n)}
    sd["t4500"] = atorch.zeros(3).add_(4500)  # in the second batch
    got = pickle.loads(pickle.dumps(atorch.share_state_dict(sd))).open()
    assert all(got[f"t{i}"].tolist() == [float(i)] * 3 for i in range(n)), "a piece was lost or misplaced"


def test_update_writes_in_place_and_checks_its_input():
    sd = {"a": torch.zeros(4), "b": torch.zeros(2, 2, dtype=torch.float64)}
    h = atorch.share_state_dict(sd)
    view = pickle.loads(pickle.dumps(h)).open()
    h.update({"a": torch.ones(4), "b": torch.full((2, 2), 2.0, dtype=torch.float64)})
    assert view["a"].tolist() == [1, 1, 1, 1] and view["b"].sum().item() == 8
    with pytest.raises(ValueError, match="missing"):
        h.update({"a": torch.ones(4)})
    with pytest.raises(ValueError, match="shared tensor"):
        h.update({"a": torch.ones(5), "b": torch.zeros(2, 2, dtype=torch.float64)})
    with pytest.raises(ValueError, match="shared tensor"):
        h.update({"a": torch.ones(4, dtype=torch.int32), "b": torch.zeros(2, 2, dtype=torch.float64)})
    with pytest.raises(ValueError, match="process that shared"):
        pickle.loads(pickle.dumps(h)).update(sd)


def test_bad_input():
    with pytest.raises(TypeError):
        atorch.share_state_dict([torch.zeros(1)])
    with pytest.raises(TypeError, match="not a torch.Tensor"):
        atorch.share_state_dict({"x": 3})
    with pytest.raises(TypeError):
        atorch.share_state_dict({1: torch.zeros(1)})
    with pytest.raises(TypeError):
        atorch.share_state_dict({"x": torch.zeros(1)}, stream=3)


def _follow(h, q_in, q_out):
    sd = h.open()
    while (step := q_in.get(timeout=120)) is not None:
        h.synchronize()
        q_out.put((step, float(sd["w"].sum()), float(sd["big"][-1])))


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_updates_reach_another_process(method):
    big = 1 << 22
    sd = {"w": torch.zeros(16), "big": torch.zeros(big)}
    s = aipc.Stream()
    h = atorch.share_state_dict(sd, stream=s)
    ctx = mp.get_context(method)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_follow, args=(h, q_in, q_out))
    p.start()
    for step in range(1, 4):
        h.update({"w": torch.full((16,), float(step)), "big": torch.full((big,), float(step))}, stream=s)
        q_in.put(step)
        assert q_out.get(timeout=120) == (step, 16.0 * step, float(step))
    q_in.put(None)
    p.join(60)
    assert p.exitcode == 0
    s.close()


@pytest.mark.whole_program
def test_weight_sync_example():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "weight_sync.py")],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "weight sync: OK" in r.stdout and r.stdout.count("matches") == 6


@pytest.mark.whole_program
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_dataloader_example(method):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "dataloader.py"), method],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "zero-copy OK" in r.stdout
