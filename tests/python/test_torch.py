"""ascend_ipc.torch: exportable tensors, share/open_torch, and torch.multiprocessing after install()."""

import gc
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import aipc_workers as W
import ascend_ipc as aipc
from ascend_ipc import _C

torch = pytest.importorskip("torch")
import ascend_ipc.torch as atorch  # noqa: E402

pytestmark = pytest.mark.timeout(180)

TORCH_DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
                torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
                torch.complex64, torch.complex128]


def live():
    gc.collect()
    return len(_C._live_allocations())


def ramp(dtype, n=6):
    if dtype == torch.bool:
        return torch.tensor([True, False] * (n // 2))
    return torch.arange(n).to(dtype)


# ---------------------------------------------------------------------------- one process


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_empty_zeros_from_tensor(dtype):
    t = atorch.empty((2, 3), dtype=dtype)
    assert t.dtype == dtype and t.shape == (2, 3) and t.is_contiguous() and t.device.type == "cpu"
    assert atorch.is_shared(t)
    z = atorch.zeros(4, dtype=dtype)
    assert not z.any() if dtype != torch.bool else not z.any()
    c = atorch.from_tensor(ramp(dtype))
    assert torch.equal(c, ramp(dtype)) and atorch.is_shared(c)


def test_is_shared_and_share_refusals():
    assert not atorch.is_shared(torch.zeros(3))
    with pytest.raises(ValueError, match="not backed by ascend_ipc"):
        atorch.share(torch.zeros(3))
    with pytest.raises(TypeError):
        atorch.share(np.zeros(3))
    with pytest.raises(TypeError):
        atorch.is_shared([1])
    with pytest.raises(TypeError):
        atorch.empty(3, dtype="float32")
    with pytest.raises(TypeError):
        atorch.empty(3, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError):
        atorch.share(torch.zeros(2, dtype=torch.float8_e4m3fn))
    with pytest.raises(TypeError):
        atorch.open_torch("key")
    t = atorch.empty(4)
    assert atorch.is_shared(t[1:]) and atorch.is_shared(t.view(2, 2).t())
    # a tensor that merely aliases the memory through numpy is still ascend_ipc memory
    assert atorch.is_shared(torch.from_numpy(np.from_dlpack(aipc.empty(4))))


def test_share_records_view_and_dtype():
    t = atorch.empty((4, 6), dtype=torch.bfloat16)
    v = t[1:3, ::2]
    h = atorch.share(v)
    assert h.torch_dtype == "bfloat16" and h.dtype == np.int16
    assert h.shape == (2, 3) and h.strides == (12, 4) and h.offset == 12
    u = h.open_torch()
    assert u.dtype == torch.bfloat16 and u.shape == (2, 3) and u.stride() == (6, 2)
    u.fill_(1.5)
    assert (t[1:3, ::2] == 1.5).all() and not (t[0] == 1.5).any()
    assert atorch.open_torch(h).dtype == torch.bfloat16


def test_open_torch_keeps_import_alive():
    before = live()
    t = atorch.from_tensor(torch.arange(5.0))
    h = atorch.share(t)
    u = h.open_torch()
    del h
    assert live() == before + 2  # t's memory and u's import
    assert u.tolist() == [0, 1, 2, 3, 4]
    del u
    assert live() == before + 1
    del t
    assert live() == before


def test_open_torch_refusal_closes_the_import():
    a = aipc.from_numpy(np.arange(5, dtype=np.float32))
    h = aipc.export(a[::-1])
    before = live()
    with pytest.raises(BufferError):
        h.open_torch()
    assert live() == before


def test_zero_numel_and_zero_d():
    for shape in [(0,), (3, 0)]:
        h = atorch.share(atorch.empty(shape))
        assert h.open_torch().shape == shape
    h = atorch.share(torch.zeros(0))  # no bytes to share: allowed for empty tensors
    assert h.open_torch().shape == (0,)
    s = atorch.from_tensor(torch.tensor(3.5))
    assert atorch.share(s).open_torch().item() == 3.5


def test_share_arguments():
    t = atorch.empty(8)
    assert atorch.share(t, pids=[]).pid_validation is True
    assert atorch.share(t).pid_validation is False
    assert atorch.share(t, link="hccs").key != atorch.share(t).key
    with pytest.raises(aipc.AclError) as info:
        atorch.share(t, link="ub_one_port")
    assert info.value.code == 207021


def test_install_is_idempotent_and_wraps_torch():
    from torch.multiprocessing import reductions

    atorch.install()
    first = ForkingPickler._extra_reducers[torch.Tensor]
    atorch.install()
    assert ForkingPickler._extra_reducers[torch.Tensor] is first
    assert atorch.installed()
    assert first.args[0] is reductions.reduce_tensor
    assert ForkingPickler._extra_reducers[torch.nn.Parameter].args[0] is reductions.reduce_tensor


def test_reduction_in_process():
    atorch.install()
    t = atorch.from_tensor(torch.arange(6.0)).view(2, 3)
    blob = ForkingPickler.dumps(t[:, 1:])
    assert len(blob) < 1000  # a handle, not the data
    u = pickle.loads(blob)
    assert atorch.is_shared(u) and u.tolist() == [[1, 2], [4, 5]]
    u.mul_(10)
    assert t.tolist() == [[0, 10, 20], [3, 40, 50]]
    with pytest.raises(RuntimeError, match="non-leaf"):
        ForkingPickler.dumps(atorch.zeros(3).requires_grad_(True) * 2)
    # empty tensors go torch's way
    assert pickle.loads(ForkingPickler.dumps(atorch.empty(0))).shape == (0,)


# ---------------------------------------------------------------------------- across processes


def test_round_trip(worker):
    t = atorch.from_tensor(torch.arange(12, dtype=torch.float32).view(3, 4))
    h = atorch.share(t[1:, 1:])
    seen, info = worker.call(W.torch_open_fill, h, -1.0)
    assert seen.tolist() == [[5, 6, 7], [9, 10, 11]]
    assert info == {"dtype": "torch.float32", "shape": (2, 3), "stride": (4, 1)}
    assert t.tolist() == [[0, 1, 2, 3], [4, -1, -1, -1], [8, -1, -1, -1]]
    t[2, 3] = 99
    seen, _ = worker.call(W.torch_open_fill, h, 0.0)
    assert seen[1, 2].item() == 99


def test_every_dtype(worker):
    tensors = {str(dt): atorch.from_tensor(ramp(dt)) for dt in TORCH_DTYPES}
    handles = {name: atorch.share(t) for name, t in tensors.items()}
    out = worker.call(W.torch_open_add_all, handles)
    for dt in TORCH_DTYPES:
        seen, dtype_name = out[str(dt)]
        assert dtype_name == str(dt) and seen.dtype == dt
        assert torch.equal(seen, ramp(dt))
        if dt == torch.bool:
            expected = ~ramp(dt)
        elif dt in (torch.uint16, torch.uint32, torch.uint64):
            expected = torch.from_numpy(ramp(dt).numpy() + 1)
        else:
            expected = ramp(dt) + 1
        assert torch.equal(tensors[str(dt)], expected.to(dt)), dt


def test_open_torch_outlives_later_opens_of_the_same_key(worker):
    # Each open is a mapping of its own and a close releases the key's oldest: the
    # tensor's import (the oldest) must survive the later ones being closed first.
    t = atorch.from_tensor(torch.arange(6, dtype=torch.int64))
    h = atorch.share(t)
    seen, held, after = worker.call(W.torch_open_then_close_later_opens, h)
    assert seen.tolist() == [1, 2, 3, 4, 5, 6]
    assert held == 5 and after == 0  # the younger four wait for the tensor's, then all go
    assert t.tolist() == [1, 2, 3, 4, 5, 6]


def test_install_through_a_worker_queue(worker):
    atorch.install()
    worker.call(W.torch_setup)
    t = atorch.from_tensor(torch.arange(8, dtype=torch.int32))
    seen, shared, kind, requires_grad, dtype = worker.call(W.torch_recv_tensor, t[2:6], 7)
    assert shared is True and kind == "Tensor" and dtype == "torch.int32"
    assert seen.tolist() == [2, 3, 4, 5]
    assert t.tolist() == [0, 1, 7, 7, 7, 7, 6, 7]  # written in place by the worker
    # bfloat16 and a Parameter that requires grad
    p = torch.nn.Parameter(atorch.from_tensor(torch.ones(3, dtype=torch.bfloat16)))
    seen, shared, kind, requires_grad, dtype = worker.call(W.torch_recv_tensor, p, 2)
    assert shared and kind == "Parameter" and requires_grad and dtype == "torch.bfloat16"
    with torch.no_grad():
        assert p.tolist() == [2, 2, 2]
    # any other tensor keeps torch's behaviour
    plain = torch.arange(4.0)
    seen, shared, kind, _, _ = worker.call(W.torch_recv_tensor, plain, 1)
    assert shared is False and seen.tolist() == [0, 1, 2, 3]


@pytest.mark.timeout(240)
def test_torch_multiprocessing_queue(method):
    import torch.multiprocessing as tmp

    atorch.install()
    ctx = tmp.get_context(method)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=W.torch_mp_receiver, args=(q_in, q_out), daemon=True)
    p.start()
    try:
        big = atorch.zeros((256, 1024), dtype=torch.float32)  # 1 MiB
        q_in.put(("big", big[64:128]))
        tag, seen, shared = q_out.get(timeout=200)
        assert tag == "big", seen
        assert shared and seen.shape == (64, 1024) and not seen.any()
        assert big[64:128].eq(1).all() and big[:64].eq(0).all() and big[128:].eq(0).all()
        plain = torch.zeros(5)
        q_in.put(("plain", plain))
        tag, seen, shared = q_out.get(timeout=60)
        assert tag == "plain" and not shared and seen.tolist() == [0] * 5
        q_in.put(None)
        p.join(30)
        assert p.exitcode == 0
    finally:
        if p.is_alive():
            p.kill()
        p.join()
