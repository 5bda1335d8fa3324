"""The ascend_ipc demo: one producer, four workers, one tensor, zero bytes copied.

Run it with ``python -m ascend_ipc.demo`` (``make demo``).

1. Four worker processes are started with the ``spawn`` method; each imports torch and
   ascend_ipc and reports that it is ready (and its bare tgid, for the CANN whitelist).
   Start-up is not part of the timing.
2. The producer allocates a float32 tensor in exportable device memory
   (``ascend_ipc.torch.empty``), fills it with a known pattern and exports it with the
   workers' pids on the whitelist (``ascend_ipc.torch.share``).
3. Each worker receives the picklable handle through its queue, opens it
   (``handle.open_torch()``), checks that it sees the producer's pattern in its slice,
   overwrites the slice with its own value in place, closes the import and reports.
4. The producer checks every byte of its own tensor: each slice must now hold its
   worker's value. Only the small pickled handle ever crossed between processes.

The exit status is 0 when every byte verified, 1 otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import queue
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence, Tuple

DEFAULT_MIB = 64
DEFAULT_WORKERS = 4
DEFAULT_TIMEOUT = 120.0
PATTERN_MODULUS = 251  # the producer's pattern: element i holds float(i % 251)


# --------------------------------------------------------------------------- helpers


def plan_slices(numel: int, workers: int) -> List[Tuple[int, int]]:
    """Split ``numel`` elements into ``workers`` contiguous [start, stop) ranges."""
    base, extra = divmod(numel, workers)
    slices = []
    start = 0
    for i in range(workers):
        stop = start + base + (1 if i < extra else 0)
        slices.append((start, stop))
        start = stop
    return slices


def worker_value(index: int) -> float:
    """The value worker ``index`` writes: negative, so it never matches the pattern."""
    return -float(index + 1)


def fill_pattern(tensor: Any) -> None:
    """Fill a 1-D float32 tensor with the producer's known pattern, in place."""
    import torch

    tensor.copy_(torch.arange(tensor.numel(), dtype=torch.int64).remainder_(PATTERN_MODULUS))


def pattern_mismatches(part: Any, start: int) -> int:
    """How many elements of ``part`` (elements start.. of the tensor) differ from the pattern."""
    import torch

    expected = torch.arange(start, start + part.numel(), dtype=torch.int64).remainder_(PATTERN_MODULUS)
    return int((part != expected.to(part.dtype)).sum())


def verify(tensor: Any, slices: Sequence[Tuple[int, int]]) -> List[Dict[str, Any]]:
    """Check, bit for bit, that slice i of ``tensor`` holds ``worker_value(i)`` everywhere.

    Returns one dictionary per slice: ``index``, ``bytes_checked``, ``mismatches`` and
    ``first_bad`` (element index of the first wrong element, or None).
    """
    import torch

    bits = tensor.view(torch.int32)  # compare bit patterns, not float equality
    report = []
    for index, (start, stop) in enumerate(slices):
        want = torch.tensor([worker_value(index)], dtype=torch.float32).view(torch.int32)
        bad = bits[start:stop] != want
        mismatches = int(bad.sum())
        first_bad = None
        if mismatches:
            first_bad = start + int(bad.nonzero()[0, 0])
        report.append(
            {
                "index": index,
                "bytes_checked": (stop - start) * tensor.element_size(),
                "mismatches": mismatches,
                "first_bad": first_bad,
            }
        )
    return report


def format_duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} \u00b5s"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------- worker


def _get_job(jobs: Any, timeout: float) -> Any:
    """Wait for this worker's job; give up if the producer died or the timeout passed."""
    parent = multiprocessing.parent_process()
    deadline = time.monotonic() + timeout
    while True:
        try:
            return jobs.get(timeout=0.5)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                raise RuntimeError("the producer exited before sending a job") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no job from the producer within {timeout:.0f} s") from None


def _worker(index: int, jobs: Any, results: Any, timeout: float) -> None:
    """A worker process: get ready, receive a handle, write our slice in place, report."""
    try:
        import torch

        torch.set_num_threads(1)
        import ascend_ipc as aipc
        import ascend_ipc.torch  # noqa: F401  (provides IpcHandle.open_torch)

        results.put(("ready", index, os.getpid(), int(aipc.bare_tgid())))
        job = _get_job(jobs, timeout)
        if job is None:  # the producer is shutting down early
            return
        handle, start, stop, value = job

        t0 = time.perf_counter()
        tensor = handle.open_torch()
        import_time = time.perf_counter() - t0

        t1 = time.perf_counter()
        part = tensor[start:stop]
        saw_pattern = pattern_mismatches(part, start) == 0
        part.fill_(value)  # in place, in the producer's memory
        written = part.numel() * part.element_size()
        work_time = time.perf_counter() - t1
        del part
        del tensor  # the last reference: this closes the import (before the exporter closes)
        results.put(("done", index, import_time, written, saw_pattern, work_time))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))


# --------------------------------------------------------------------------- producer


class DemoError(RuntimeError):
    pass


def _collect(results: Any, procs: List[Any], kind: str, timeout: float) -> Dict[int, tuple]:
    """Collect one ``kind`` message from every worker, failing fast if one dies or errs."""
    got: Dict[int, tuple] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(procs):
        try:
            msg = results.get(timeout=0.2)
        except queue.Empty:
            for i, p in enumerate(procs):
                if i not in got and not p.is_alive():
                    raise DemoError(f"worker {i} (pid {p.pid}) exited with code {p.exitcode} before '{kind}'")
            if time.monotonic() > deadline:
                missing = sorted(set(range(len(procs))) - set(got))
                raise DemoError(f"timed out after {timeout:.0f} s waiting for '{kind}' from workers {missing}")
            continue
        if msg[0] == "error":
            raise DemoError(f"worker {msg[1]} failed:\n{msg[2]}")
        if msg[0] != kind:
            raise DemoError(f"unexpected message {msg[0]!r} from worker {msg[1]} (waiting for {kind!r})")
        got[msg[1]] = msg
    return got


def _stop_workers(procs: List[Any], jobs: List[Any]) -> None:
    """Reap every worker: let it finish, then terminate, then kill."""
    for p, q in zip(procs, jobs):
        if p.is_alive():
            try:
                q.put_nowait(None)
            except Exception:
                pass
    for p in procs:
        p.join(timeout=10)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


def run(mib: int = DEFAULT_MIB, workers: int = DEFAULT_WORKERS, timeout: float = DEFAULT_TIMEOUT,
        out: Any = None) -> bool:
    """Run the demo and print its report to ``out``; return True when every byte verified."""
    out = sys.stdout if out is None else out
    if mib <= 0:
        raise ValueError("--mib must be positive")
    if workers <= 0:
        raise ValueError("--workers must be positive")

    import torch

    import ascend_ipc as aipc
    import ascend_ipc.torch as aipc_torch

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    nbytes = mib << 20
    numel = nbytes // 4
    slices = plan_slices(numel, workers)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    jobs = [ctx.Queue() for _ in range(workers)]
    procs = [
        ctx.Process(target=_worker, args=(i, jobs[i], results, timeout), name=f"ascend_ipc-demo-worker-{i}",
                    daemon=True)
        for i in range(workers)
    ]

    say(f"ascend_ipc demo: provider {aipc.provider()}, {aipc.device_count()} device(s), "
        f"producer pid {os.getpid()}")
    handle = None
    tensor = aipc_torch.empty((numel,), dtype=torch.float32)  # exportable device memory
    fill_pattern(tensor)
    t_start_workers = time.perf_counter()
    try:
        for p in procs:
            p.start()
        ready = _collect(results, procs, "ready", timeout)
        startup = time.perf_counter() - t_start_workers
        tgids = [ready[i][3] for i in range(workers)]
        say(f"{workers} workers ready (spawn, start-up {format_duration(startup)}, not timed): "
            f"pids {', '.join(str(ready[i][2]) for i in range(workers))}")

        # ---- timed section: export, hand out, workers import and write, verify
        t0 = time.perf_counter()
        handle = aipc_torch.share(tensor, pids=tgids)
        t_export = time.perf_counter() - t0
        handle_bytes = len(pickle.dumps(handle))
        queued_bytes = 0
        for i, (start, stop) in enumerate(slices):
            job = (handle, start, stop, worker_value(i))
            queued_bytes += len(pickle.dumps(job))  # what the queue's pickler sends
            jobs[i].put(job)
        done = _collect(results, procs, "done", timeout)
        report = verify(tensor, slices)
        wall = time.perf_counter() - t0
        # ----

        say(f"tensor: float32[{numel}] = {format_bytes(nbytes)} ({nbytes} bytes) in exportable device memory")
        say(f"export: {format_duration(t_export)}; whitelist = the workers' bare tgids; "
            f"key {handle.key[:12]}... ; pickled handle {handle_bytes} bytes")
        say("worker  pid       import    check+write  wrote in place              value  saw producer's pattern")
        total_written = 0
        for i in range(workers):
            _, _, import_time, written, saw_pattern, work_time = done[i]
            total_written += written
            say(f"{i:<7} {ready[i][2]:<8} {format_duration(import_time):>9} {format_duration(work_time):>11}   "
                f"{format_bytes(written):>9} ({written:>10} B)   {worker_value(i):>5}  "
                f"{'yes' if saw_pattern else 'NO'}")
        say(f"bytes written in place by workers: {total_written} ({format_bytes(total_written)})")
        say(f"bytes copied between processes: 0 (the queues carried {queued_bytes} bytes in all: a "
            f"{handle_bytes}-byte handle and a slice range per worker; the tensor's bytes never moved)")

        bad = [r for r in report if r["mismatches"]]
        checked = sum(r["bytes_checked"] for r in report)
        unseen = [i for i in range(workers) if not done[i][4]]
        if bad:
            for r in bad:
                say(f"verification FAILED: slice {r['index']}: {r['mismatches']} wrong elements, "
                    f"first at element {r['first_bad']}")
        elif unseen:
            say(f"verification FAILED: workers {unseen} did not see the producer's pattern")
        else:
            say(f"verification: OK - all {checked} bytes checked, each slice holds its worker's value")
        say(f"total wall time: {format_duration(wall)} (export, {workers} handles sent, "
            f"{workers} imports + writes, verify)")
        return not bad and not unseen
    finally:
        _stop_workers(procs, jobs)
        if handle is not None:
            handle.close()
        del tensor
        for q in jobs + [results]:
            q.close()
            q.join_thread()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ascend_ipc.demo",
        description="A producer shares one tensor with worker processes; each writes its own slice "
                    "in place; the producer verifies every byte. Zero bytes are copied.",
    )
    parser.add_argument("--mib", type=int, default=DEFAULT_MIB, help=f"tensor size in MiB (default {DEFAULT_MIB})")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"number of worker processes (default {DEFAULT_WORKERS})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the workers at each step (default {DEFAULT_TIMEOUT:.0f})")
    args = parser.parse_args(argv)
    if args.mib <= 0:
        parser.error("--mib must be a positive integer")
    if args.workers <= 0:
        parser.error("--workers must be a positive integer")
    try:
        ok = run(args.mib, args.workers, args.timeout)
    except DemoError as exc:
        print(f"ascend_ipc demo: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        from ascend_ipc import AclError

        if not isinstance(exc, AclError):
            raise
        print(f"ascend_ipc demo: error: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
