"""A handle broadcast with torch.distributed: the trainer -> inference weight-sync pattern.

Four ranks on this host (gloo backend, started by ``torch.multiprocessing.spawn``):

* rank 0 ("the trainer") allocates a tensor in exportable device memory, exports it with
  ``pids=None`` and broadcasts the handle with ``dist.broadcast_object_list``; every rank,
  rank 0 included, opens it with ``open_torch()`` and writes its own slice in place; after a
  barrier rank 0 checks every slice in its own tensor.
* then the CANN whitelist: ranks all-gather their ``bare_tgid()``, rank 0 exports a second
  tensor for every rank but the last; the listed ranks open it and read rank 0's values, the
  last rank is refused with ``AclError`` 207006 (ACL_ERROR_RT_NO_PERMISSION).
* then put and drop: rank 0 broadcasts a handle and drops the tensor and the handle at once;
  the other ranks open it afterwards (the pickled copies held the memory for them).

The ranks run in a child process group that the test kills on timeout, so no process
outlives the test. This file is also the script that child runs (see ``__main__`` below).
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import socket
import sys

import pytest

WORLD_SIZE = 4
NUMEL = 1 << 20  # 4 MiB of float32
TIMEOUT = 300  # seconds for the whole run (four ranks import torch on a small machine)
NO_PERMISSION = 207006

# the conftest's (or pytest-timeout's) per-test limit, above the run's own TIMEOUT
pytestmark = pytest.mark.timeout(420)


def _slice(rank: int, world: int, numel: int):
    per = numel // world
    return rank * per, (rank + 1) * per if rank < world - 1 else numel


def _rank_main(rank: int, world: int, numel: int, result_path: str) -> None:
    """One rank. Runs in a process started by torch.multiprocessing.spawn."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    try:
        import ascend_ipc as aipc
        import ascend_ipc.torch as aipc_torch

        result = {"world_size": world}

        # --- 1. pids=None: broadcast the handle; every rank writes its own slice in place
        weights = handle = None
        if rank == 0:
            weights = aipc_torch.empty((numel,), dtype=torch.float32)
            weights.fill_(-1.0)
            handle = aipc_torch.share(weights, pids=None)
        box = [handle]
        dist.broadcast_object_list(box, src=0)
        received = box[0]
        assert type(received).__name__ == "IpcHandle", type(received)

        tensor = received.open_torch()
        assert tensor.shape == (numel,) and tensor.dtype == torch.float32
        start, stop = _slice(rank, world, numel)
        tensor[start:stop].fill_(float(rank + 1))
        del tensor, box, received
        gc.collect()  # importers close before the exporter does
        dist.barrier()

        if rank == 0:
            per_rank = []
            for r in range(world):
                s, e = _slice(r, world, numel)
                bad = int((weights[s:e] != float(r + 1)).sum())
                per_rank.append({"rank": r, "elements": e - s, "mismatches": bad})
            result["broadcast"] = per_rank
            assert all(p["mismatches"] == 0 for p in per_rank), per_rank
            handle.close()

        # --- 2. whitelist: every rank's bare tgid but the last one's
        tgids = [None] * world
        dist.all_gather_object(tgids, int(aipc.bare_tgid()))
        handle2 = weights2 = None
        if rank == 0:
            weights2 = aipc_torch.empty((1024,), dtype=torch.float32)
            weights2.copy_(torch.arange(1024, dtype=torch.float32))
            handle2 = aipc_torch.share(weights2, pids=tgids[:-1])
        box = [handle2]
        dist.broadcast_object_list(box, src=0)
        received = box[0]
        outcome = {}
        if rank == world - 1:
            try:
                received.open_torch()
            except aipc.AclError as exc:
                outcome = {"refused": True, "code": exc.code, "name": exc.name}
            else:
                outcome = {"refused": False}
        else:
            tensor = received.open_torch()
            outcome = {"refused": False, "read_ok": bool(torch.equal(tensor, torch.arange(1024, dtype=torch.float32)))}
            del tensor
        del box, received
        gc.collect()
        outcomes = [None] * world
        dist.all_gather_object(outcomes, outcome)
        if rank == 0:
            result["whitelist"] = outcomes
            handle2.close()

        # --- 3. put and drop: rank 0 drops its tensor and handle right after the broadcast;
        # the pickled copies keep the memory until each rank has opened its own
        box = [None]
        if rank == 0:
            dropped = aipc_torch.empty((4096,), dtype=torch.float32)
            dropped.fill_(5.0)
            box = [aipc_torch.share(dropped)]
        dist.broadcast_object_list(box, src=0)
        if rank == 0:
            del dropped, box
            gc.collect()
        dist.barrier()  # rank 0 holds neither tensor nor handle any more
        opened = box[0].open_torch() if rank != 0 else None
        total = float(opened.sum()) if opened is not None else None
        del opened
        sums = [None] * world
        dist.all_gather_object(sums, total)
        if rank == 0:
            result["put_and_drop"] = sums
            with open(result_path, "w") as f:
                json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _package_env() -> dict:
    """Let the child import the same ascend_ipc as this test process."""
    import ascend_ipc

    env = dict(os.environ)
    pkg_parent = str(pathlib.Path(ascend_ipc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(_free_port())
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo's connections on this host
    return env


def _run_ranks(result_path: pathlib.Path):
    """Runs this file as a script: (rc, its output)."""
    from conftest import run_command  # here: the ranks run this file without pytest

    rc, output, _ = run_command([sys.executable, str(pathlib.Path(__file__).resolve()), str(result_path)],
                                env=_package_env(), timeout=TIMEOUT, merge_stderr=True)
    return rc, output


@pytest.mark.whole_program
def test_handle_broadcast_with_torch_distributed(tmp_path):
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")

    result_path = tmp_path / "result.json"
    rc, output = _run_ranks(result_path)
    assert rc == 0, f"ranks failed (exit code {rc}):\n{output}"
    assert "DISTRIBUTED OK" in output, output
    result = json.loads(result_path.read_text())

    assert result["world_size"] == WORLD_SIZE
    assert [p["rank"] for p in result["broadcast"]] == list(range(WORLD_SIZE))
    assert all(p["mismatches"] == 0 for p in result["broadcast"]), result["broadcast"]
    assert sum(p["elements"] for p in result["broadcast"]) == NUMEL

    whitelist = result["whitelist"]
    for rank in range(WORLD_SIZE - 1):
        assert whitelist[rank] == {"refused": False, "read_ok": True}, (rank, whitelist)
    last = whitelist[WORLD_SIZE - 1]
    assert last["refused"] and last["code"] == NO_PERMISSION, last
    assert result["put_and_drop"] == [None] + [5.0 * 4096] * (WORLD_SIZE - 1)


if __name__ == "__main__":
    import torch.multiprocessing as tmp

    tmp.spawn(_rank_main, args=(WORLD_SIZE, NUMEL, sys.argv[1]), nprocs=WORLD_SIZE, join=True)
    print("DISTRIBUTED OK", flush=True)
