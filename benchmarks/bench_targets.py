#!/usr/bin/env python3
"""The five speed targets, each beside its baseline measured in the same run (make bench).

    .venv/bin/python benchmarks/bench_targets.py             # one run
    .venv/bin/python benchmarks/bench_targets.py --runs 3    # what make bench runs: the spread
    .venv/bin/python benchmarks/bench_targets.py --quick     # tiny sizes, few repetitions (smoke test)

Each row is a ratio of two figures taken in the same run, under the same machine load:

  (1) a 64 MiB tensor handed off, ÷ the floor (8 bytes through the same queue), the floor
      measured in blocks interleaved with the hand-off (bench_share.measure_latency): (a) an
      IpcHandle and open(), (b) the tensor itself through torch.multiprocessing. Target <= 1.5.
  (2) 4 KiB tensors through one torch.multiprocessing queue, 1,000 back to back, each opened and
      read by the receiver (bench_share.measure_throughput): ascend_ipc.torch tensors (b) per
      second ÷ torch's own sharing (CPU tensors after share_memory_(), strategy
      'file_descriptor') per second. Target >= 5.
  (3) DataLoader, 2 fork workers, 1 MiB batches (bench_workflows.bench_dataloader): the dataset
      making its batches with ascend_ipc.torch, batches/s ÷ torch's default DataLoader. Target >= 3.
  (4) a 1 GiB import, every page read (one float32 per 4 KiB page), closed, ÷ the same read again
      while the import is resident: one reader process, spawned once, reads the same mapping
      twice and the second read is the baseline. Target <= 3.
  (5) a state dict of 2,000 tensors of 1-16 KiB handed to a waiting receiver through a
      torch.multiprocessing queue, from the sender's first call until the receiver holds every
      tensor: torch's share_memory_() on every tensor and q.put(sd) ÷
      q.put(ascend_ipc.torch.share_state_dict(sd)) with the handle dropped, as a torch user
      writes it. Target >= 50. A receiver that fails makes the row 'failed: <message>'; the same
      with the handle kept until the receiver has it is measured too, as a reference.

--runs N repeats the five rows N times (the reader processes spawned once) and reports each
ratio's median and min-max. Writes a JSON file (build/bench_targets.json), the section between
the TARGETS markers of docs/benchmarks.md and a plot (docs/img/bench_targets.png); with --quick
only where --json/--markdown/--img-dir say so. No pass/fail exit status: the report says which
targets each run met.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import statistics
import sys
import time
import traceback
from time import perf_counter, perf_counter_ns

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_share as BS  # noqa: E402
import bench_workflows as BW  # noqa: E402

KiB, MiB, GiB = BS.KiB, BS.MiB, BS.GiB

BEGIN = "<!-- BEGIN TARGETS by benchmarks/bench_targets.py: edits inside are overwritten -->"
END = "<!-- END TARGETS -->"

# key, what is measured ({hs}: the hand-off's size, {rs}: the read's, {n}: the state dict's tensors),
# the figure's and the baseline's name, unit, direction, target
ROWS = [
    ("handoff_a", "{hs} tensor hand-off, (a) IpcHandle + open(), ÷ the floor", "hand-off", "floor", "µs", "<=", 1.5),
    ("handoff_b", "{hs} tensor hand-off, (b) the tensor through torch.multiprocessing, ÷ the floor", "hand-off",
     "floor", "µs", "<=", 1.5),
    ("queue_4k", "4 KiB tensors through one torch.multiprocessing queue, each opened and read: ascend_ipc.torch "
     "tensors/s ÷ torch's sharing (share_memory_(), file_descriptor)", "ascend_ipc.torch", "torch", "/s", ">=", 5.0),
    ("dataloader", "DataLoader, 2 fork workers, 1 MiB batches: ascend_ipc.torch batches/s ÷ torch's default",
     "ascend_ipc.torch", "torch", "/s", ">=", 3.0),
    ("full_read", "{rs} import, read every page, close ÷ the same read of the import when resident",
     "import + read + close", "resident", "ms", "<=", 3.0),
    ("state_dict", "{n}-tensor state dict, `q.put(share_state_dict(sd))`, handle dropped: torch's "
     "share_memory_() ÷ share_state_dict", "share_state_dict", "torch", "ms", ">=", 50.0),
    ("state_dict_kept", "the same with the handle kept until the receiver has it (reference)", "share_state_dict",
     "torch", "ms", ">=", 50.0),
]
ROW = {r[0]: r for r in ROWS}
NUM = {"handoff_a": "1a", "handoff_b": "1b", "queue_4k": "2", "dataloader": "3", "full_read": "4", "state_dict": "5",
       "state_dict_kept": "5'"}
SHORT = {"handoff_a": "hand-off (a) ÷ floor", "handoff_b": "hand-off (b) ÷ floor",
         "queue_4k": "4 KiB tensors/s ÷ torch's", "dataloader": "DataLoader 1 MiB ÷ torch's",
         "full_read": "import, full read ÷ resident", "state_dict": "state dict, put and dropped",
         "state_dict_kept": "state dict, handle kept"}


def _what(template, a):
    return template.format(hs=BS.size_label(a["handoff_size"]), rs=BS.size_label(a["read_size"]),
                           n=f"{a['sd_tensors']:,}")


def _label(key):
    return f"({NUM[key]}) {SHORT[key]}"


def log(msg):
    print(f"[targets {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _wait_ready(conn, proc, timeout):
    """Until a reader spawned with proc has done its imports: no timing while one is starting."""
    if not conn.poll(timeout) or conn.recv() != "ready":
        raise BS.ConsumerError(f"a reader did not start (exit code {proc.exitcode})")


def _error_text(e):
    """One line for the report: the exception's last line of text."""
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[-1].strip() if lines else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


# --------------------------------------------------------------------------- (4) full reads


def _read_every_page(v):
    """One float32 of every 4 KiB page."""
    return float(v[::1024].sum())


def _full_read_main(conn):
    """The reader of (4), spawned once: per handle, import + read + close, the second read between."""
    import numpy as np

    import ascend_ipc  # noqa: F401  (the unpickled handles need it)

    conn.send("ready")
    while True:
        h = conn.recv()
        if h is None:
            return
        try:
            t0 = perf_counter_ns()
            b = h.open()
            v = np.from_dlpack(b)
            s1 = _read_every_page(v)
            t1 = perf_counter_ns()
            s2 = _read_every_page(v)  # the same pages, now resident in this process: the baseline
            t2 = perf_counter_ns()
            del v
            b.close()
            t3 = perf_counter_ns()
            del h, b
            conn.send(("ok", (t1 - t0) + (t3 - t2), t2 - t1, s1, s2))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class FullRead:
    def __init__(self, ctx, size, timeout):
        self.size, self.timeout = size, timeout
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_full_read_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        _wait_ready(self.conn, self.proc, timeout)

    def measure(self, reps):
        import numpy as np

        import ascend_ipc as aipc

        n = self.size // 4
        x = aipc.empty((n,), "float32")
        try:
            v = np.from_dlpack(x)
            v[:] = 1.0  # every page written by the exporter
            del v
            want = float(n // 1024)
            imp, res = [], []
            for r in range(reps + 1):  # r = 0 warms up
                self.conn.send(aipc.export(x))  # pickled here: the exporter holds the export meanwhile
                if not self.conn.poll(self.timeout):
                    raise BS.ConsumerError(f"the reader gave no answer within {self.timeout:g} s")
                msg = self.conn.recv()
                if msg[0] != "ok":
                    raise BS.ConsumerError(f"the reader failed:\n{msg[1]}")
                _, t_imp, t_res, s1, s2 = msg
                if s1 != want or s2 != want:
                    raise BS.ConsumerError(f"the reader read {s1}, {s2}; expected {want}")
                if r:
                    imp.append(t_imp * 1e-6)
                    res.append(t_res * 1e-6)
        finally:
            aipc.export(x).close()
            x.close()
            gc.collect()
        return {"figure": statistics.median(imp), "baseline": statistics.median(res), "reps": reps,
                "size_bytes": self.size, "import_ms": imp, "resident_ms": res,
                "huge_pages": os.environ.get("ASCEND_IPC_HUGE_PAGES", "0") == "1"}

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# --------------------------------------------------------------------------- (5) state dicts


def _sd_receiver_main(q, conn):
    """The receiver of (5), spawned once: for each command, one state dict from the queue."""
    import torch.multiprocessing as tmp

    import ascend_ipc.torch  # noqa: F401

    tmp.set_sharing_strategy("file_descriptor")
    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        try:
            obj = q.get()  # unpickling rebuilds what the sender put (a handle, or torch's tensors)
            tensors = obj.open() if cmd == "sd" else obj
            first, last = next(iter(tensors.values())), tensors[next(reversed(tensors))]
            got = (len(tensors), float(first[0]), float(last[-1]))
            del obj, tensors, first, last
            conn.send(("ok", got))
        except BaseException as e:
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))


def state_dict(n):
    """n float32 tensors of 1 to 16 KiB, like a model's parameters (about 8.5 KiB each on average)."""
    import torch

    return {f"layer{i}.weight": torch.full((256 * (1 + i % 16),), float(i % 1000)) for i in range(n)}


class StateDicts:
    def __init__(self, ctx, n, timeout):
        self.n, self.timeout = n, timeout
        self.q = ctx.Queue()
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_sd_receiver_main, args=(self.q, child), daemon=True)
        self.proc.start()
        child.close()
        _wait_ready(self.conn, self.proc, timeout)

    def _answer(self, sd):
        if not self.conn.poll(self.timeout):
            raise BS.ConsumerError(f"the receiver gave no answer within {self.timeout:g} s")
        msg = self.conn.recv()
        if msg[0] != "ok":
            return msg[1]
        names = list(sd)
        want = (len(sd), float(sd[names[0]][0]), float(sd[names[-1]][-1]))
        if msg[1] != want:
            return f"the receiver read {msg[1]}; expected {want}"
        return None

    def measure(self, reps):
        import ascend_ipc.torch as atorch

        sd = state_dict(self.n)
        out = {k: [] for k in ("dropped", "kept", "torch", "share_state_dict_call", "share_memory_calls")}
        failed = None
        torch_ok = BW._descriptors_for(self.n)  # one descriptor per tensor in each process
        for r in range(reps + 1):  # r = 0 warms up
            # (5) as a user writes it: the handle is dropped once the queue's feeder has pickled it.
            if failed is None:
                self.conn.send("sd")
                t0 = perf_counter()
                self.q.put(atorch.share_state_dict(sd))
                err = self._answer(sd)
                t1 = perf_counter()
                if err is not None:
                    failed = err
                elif r:
                    out["dropped"].append((t1 - t0) * 1e3)
            # The handle kept until the receiver has opened it.
            self.conn.send("sd")
            t0 = perf_counter()
            h = atorch.share_state_dict(sd)
            t1 = perf_counter()
            self.q.put(h)
            err = self._answer(sd)
            t2 = perf_counter()
            del h
            if err is not None:
                raise BS.ConsumerError(f"the receiver failed with the handle kept: {err}")
            if r:
                out["kept"].append((t2 - t0) * 1e3)
                out["share_state_dict_call"].append((t1 - t0) * 1e3)
            # torch: share_memory_() on every tensor, then the dict through the same queue.
            if torch_ok:
                fresh = {k: v.clone() for k, v in sd.items()}  # not yet shared (untimed)
                self.conn.send("torch")
                t0 = perf_counter()
                for v in fresh.values():
                    v.share_memory_()
                t1 = perf_counter()
                self.q.put(fresh)
                err = self._answer(sd)
                t2 = perf_counter()
                del fresh
                if err is not None:
                    raise BS.ConsumerError(f"the receiver failed with torch's tensors: {err}")
                if r:
                    out["torch"].append((t2 - t0) * 1e3)
                    out["share_memory_calls"].append((t1 - t0) * 1e3)
            gc.collect()
        med = {k: (statistics.median(v) if v else None) for k, v in out.items()}
        return {"tensors": self.n, "nbytes": sum(v.numel() * 4 for v in sd.values()), "reps": reps,
                "failed": failed, "median_ms": med, "samples_ms": out}

    def close(self):
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.q.close()
        self.q.join_thread()


# --------------------------------------------------------------------------- one run of the five rows


def _ratio(key, figure, baseline):
    """The row's ratio as its target reads it: times over the baseline's time (1, 4), rates over
    the baseline's rate (2, 3), the baseline's time over ascend_ipc's (5)."""
    if not figure or not baseline:
        return None
    return baseline / figure if key.startswith("state_dict") else figure / baseline


def _met(key, ratio):
    if ratio is None:
        return None
    _, _, _, _, _, op, target = ROW[key]
    return ratio <= target if op == "<=" else ratio >= target


def one_run(args, cons, fullread, sds, torch_reducers):
    rows = {}

    def row(key, fn):
        t = time.monotonic()
        try:
            r = fn()
        except Exception as e:  # the row reports the failure; the others still run
            r = {"figure": None, "baseline": None, "failed": _error_text(e), "traceback": traceback.format_exc()}
        r["ratio"] = _ratio(key, r.get("figure"), r.get("baseline"))
        r["met"] = False if r.get("failed") else _met(key, r["ratio"])
        rows[key] = r
        unit = ROW[key][4]
        if r.get("failed"):
            log(f"({NUM[key]}) failed: {r['failed']}")
        else:
            log(f"({NUM[key]}) {_fmt(r['figure'], unit)} vs baseline {_fmt(r['baseline'], unit)}: "
                f"{r['ratio']:.3g}x (target {ROW[key][5]} {ROW[key][6]:g}: {'met' if r['met'] else 'NOT met'}) "
                f"({time.monotonic() - t:.1f} s)")

    def handoff(m):
        def fn():
            st = BS.measure_latency(cons[m], BS.Producer(m, torch_reducers), args.handoff_size, args.handoff_reps,
                                    args.warmup, floor=cons["f"])
            return {"figure": st["median_us"], "baseline": st["floor_paired_median_us"],
                    "size_bytes": args.handoff_size, "reps": st["n"], "p10_us": st["p10_us"], "p90_us": st["p90_us"],
                    "floor_p10_us": st["floor_paired_p10_us"], "floor_p90_us": st["floor_paired_p90_us"]}
        return fn

    row("handoff_a", handoff("a"))
    row("handoff_b", handoff("b"))

    def queue_4k():
        st = {m: BS.measure_throughput(cons[m], BS.Producer(m, torch_reducers), args.queue_count, args.queue_rounds,
                                       4 * KiB) for m in ("b", "c")}
        return {"figure": st["b"]["median_per_s"], "baseline": st["c"]["median_per_s"], "count": args.queue_count,
                "rounds": args.queue_rounds, "rates_per_s": {m: st[m]["rates_per_s"] for m in st}}

    row("queue_4k", queue_4k)

    def dataloader():
        r = BW.bench_dataloader([("1 MiB", MiB, args.loader_batches)], args.loader_reps)["1 MiB"]
        return {"figure": r["ascend_ipc"], "baseline": r["torch_default"], "batches": args.loader_batches,
                "reps": args.loader_reps, "batch_bytes": MiB}

    row("dataloader", dataloader)
    row("full_read", lambda: fullread.measure(args.read_reps))

    sd_res = {}

    def sd_dropped():
        sd_res.update(sds.measure(args.sd_reps))
        med = sd_res["median_ms"]
        return {"figure": med["dropped"], "baseline": med["torch"], "failed": sd_res["failed"],
                **{k: sd_res[k] for k in ("tensors", "nbytes", "reps")}}

    def sd_kept():
        if not sd_res:
            raise RuntimeError("not measured: the put-and-drop measurement failed before it")
        med = sd_res["median_ms"]
        return {"figure": med["kept"], "baseline": med["torch"],
                "share_state_dict_call_ms": med["share_state_dict_call"],
                "share_memory_calls_ms": med["share_memory_calls"], "samples_ms": sd_res["samples_ms"],
                **{k: sd_res[k] for k in ("tensors", "nbytes", "reps")}}

    row("state_dict", sd_dropped)
    row("state_dict_kept", sd_kept)
    return rows


def summarize(runs):
    """Per row: the median and min-max over the runs of figure, baseline and ratio, and the runs that met it."""
    out = {}
    for key, *_ in ROWS:
        rs = [r[key] for r in runs if key in r]
        s = {"runs": len(rs), "failed": [r.get("failed") for r in rs if r.get("failed")],
             "met_runs": sum(1 for r in rs if r.get("met")),
             "measured_runs": sum(1 for r in rs if r.get("met") is not None)}
        for k in ("figure", "baseline", "ratio"):
            vals = [r[k] for r in rs if r.get(k) is not None and (k == "baseline" or not r.get("failed"))]
            s[k] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)} if vals else None
        out[key] = s
    return out


# --------------------------------------------------------------------------- report


def _fmt(v, unit):
    if v is None:
        return "–"
    if unit == "/s":
        return f"{v:,.0f}/s"
    if unit == "µs":
        return BS.fmt_us(v)
    return f"{v:,.3g} ms" if v < 100 else f"{v:,.0f} ms"


def _spread(s, unit, fmt=None):
    fmt = fmt or (lambda v: _fmt(v, unit))
    if s is None:
        return "–"
    if s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def _x(v):
    return f"{v:.3g}×"


def render_markdown(res, img_rel):
    summ, n = res["summary"], res["runs_done"]
    L = [BEGIN, "", f"{'Quick smoke run' if res['quick'] else 'Run'} of {res['generated']}: "
         f"{n} run{'s' if n != 1 else ''} of the five rows, one after the other, the readers spawned once "
         f"({res['duration_s']:.0f} s; machine: {res['machine']}). Each figure beside its baseline, "
         "both measured in the same run" + ("; medians over the runs, min–max in brackets." if n > 1 else ".")
         + (f" 1-minute load average at the end {res['loadavg_end'][0]:.1f}." if res.get("loadavg_end") else ""), ""]
    L.append("| measure | figure | baseline | ratio | target | met? |")
    L.append("|---|---:|---:|---:|---:|---|")
    for key, what, _f, bname, unit, op, target in ROWS:
        s = summ[key]
        if s["failed"] and s["ratio"] is None:
            fig = f"**failed**: {s['failed'][0]}"
            base = _spread(s["baseline"], unit)
        else:
            fig = _spread(s["figure"], unit)
            base = _spread(s["baseline"], unit)
            if s["failed"]:
                fig += f"; failed in {len(s['failed'])} of {s['runs']} runs: {s['failed'][0]}"
        ratio = _spread(s["ratio"], None, _x)
        if key == "state_dict_kept":
            met = "(reference)"
        elif s["measured_runs"] == 0:
            met = "not measured"
        else:
            met = ("yes" if s["met_runs"] == s["runs"] else "**no**" if s["met_runs"] == 0 else "**partly**")
            if s["runs"] > 1:
                met += f", {s['met_runs']} of {s['runs']} runs"
        base = base if base == "–" else f"{bname}: {base}"
        L.append(f"| ({NUM[key]}) {_what(what, res['args'])} | {fig} | {base} | {ratio} | "
                 f"{'≤' if op == '<=' else '≥'} {target:g}× | {met} |")
    L.append("")
    busy = max([x[0] for x in (res.get("loadavg_start"), res.get("loadavg_end")) if x] or [0])
    if res.get("cpus") and busy > res["cpus"] + 0.5:
        L.append(f"The machine was busy with other work (1-minute load average up to {busy:.1f} on {res['cpus']} "
                 "CPUs; the benchmark itself accounts for about 1–2): the absolute figures are noisier and higher "
                 "than on an idle machine; each ratio compares figures taken under the same load.")
        L.append("")
    if n > 1:
        L.append("Each run's ratio (the table above: their median and min–max):")
        L.append("")
        L.append("| measure | " + " | ".join(f"run {i + 1}" for i in range(n)) + " |")
        L.append("|---|" + "---:|" * n)
        for key, what, *_ in ROWS:
            cells = []
            for r in res["runs"]:
                x = r.get(key, {})
                cells.append("failed" if x.get("failed") and x.get("ratio") is None else
                             "–" if x.get("ratio") is None else
                             _x(x["ratio"]) + ("" if x.get("met") or key == "state_dict_kept" else " (not met)"))
            L.append(f"| {_label(key)} | " + " | ".join(cells) + " |")
        L.append("")
    a = res["args"]
    L.append(
        f"How: (1) `bench_share.py`'s latency, one object in flight, {a['handoff_reps']} repetitions of "
        f"{BS.size_label(a['handoff_size'])}, the floor measured in blocks of {BS.PAIR_BLOCK} interleaved with them; "
        f"from just before `export()`/`put()` to the receiver having read the first and last element. "
        f"(2) {a['queue_count']:,} tensors of 4 KiB put back to back, {a['queue_rounds']} rounds after a warm-up, "
        "until the receiver has opened, read and released the last (`bench_share.py`'s throughput, methods (b) "
        "and (c)). "
        f"(3) `bench_workflows.py`'s DataLoader: {a['loader_batches']} batches of 1 MiB, median of "
        f"{a['loader_reps']} epochs. "
        f"(4) one reader process: `open()`, `view[::1024].sum()` over float32 (one element per 4 KiB page), and "
        f"`close()`, against the same read again before the close; {BS.size_label(a['read_size'])}, median of "
        f"{a['read_reps']} after a warm-up. "
        f"(5) {a['sd_tensors']:,} float32 tensors of 1–16 KiB, through a `torch.multiprocessing` queue to a waiting "
        "receiver, until it holds every tensor: `q.put(ascend_ipc.torch.share_state_dict(sd))` against "
        "`share_memory_()` on every tensor and `q.put(sd)`; the reference row keeps the handle until the "
        f"receiver has opened it; median of {a['sd_reps']} after a warm-up. The calls alone, without the "
        "hand-over: " + _sd_calls(res) + ".")
    L.append("")
    if img_rel:
        L.append(f"![the five targets]({img_rel})")
        L.append("")
    L.append(END)
    return "\n".join(L)


def _sd_calls(res):
    calls = [r["state_dict_kept"] for r in res["runs"] if r.get("state_dict_kept", {}).get("share_state_dict_call_ms")]
    if not calls:
        return "not measured"
    a = statistics.median(c["share_state_dict_call_ms"] for c in calls)
    b = [c["share_memory_calls_ms"] for c in calls if c.get("share_memory_calls_ms")]
    text = f"`share_state_dict(sd)` {a:.3g} ms"
    if b:
        text += f", `share_memory_()` on every tensor {statistics.median(b):.3g} ms ({statistics.median(b) / a:.3g}×)"
    return text


def write_markdown(path, block):
    try:
        with open(path, encoding="utf-8") as f:
            old = f.read()
    except OSError:
        old = ""
    if BEGIN in old and END in old:
        new = old.split(BEGIN, 1)[0] + block + old.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n## Speed targets (`make bench`, `bench_targets.py`)\n\n" + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def plot(res, path):
    """One bar per row: how far its ratio is from the target (1 = the target; right of it, met)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    summ = res["summary"]
    labels, score, lo, hi, notes = [], [], [], [], []
    for key, *_, op, target in ROWS:
        s = summ[key]
        labels.append(_label(key))

        def sc(v, op=op, target=target):
            return v / target if op == ">=" else target / v

        if s["ratio"] is None:
            score.append(0)
            lo.append(0)
            hi.append(0)
            notes.append("failed" if s["failed"] else "not measured")
            continue
        m = sc(s["ratio"]["median"])
        a, b = sc(s["ratio"]["min"]), sc(s["ratio"]["max"])
        score.append(m)
        lo.append(m - min(a, b))
        hi.append(max(a, b) - m)
        notes.append(f"{s['ratio']['median']:.3g}× (target {'≤' if op == '<=' else '≥'} {target:g}×)")
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ys = list(range(len(labels)))[::-1]
    colors = ["C2" if v >= 1 else "C3" for v in score]
    ax.barh(ys, [v if v > 0 else 1e-9 for v in score], xerr=[lo, hi], color=colors, capsize=3)
    for y, v, h, t in zip(ys, score, hi, notes):
        ax.annotate(t, (max(v + h, 0.02), y), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                    color="C3" if not v else "black")
    ax.axvline(1, color="k", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(0.02, max([4] + [v * 4 for v in score]))
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("ratio against the target (1 = the target; right of the line: met)")
    runs = res["runs_done"]
    ax.set_title(f"The five speed targets, each against its baseline in the same run"
                 f"{f' (median of {runs} runs; bars: min–max)' if runs > 1 else ''}", fontsize=10)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repetitions (smoke test)")
    p.add_argument("--runs", type=int, default=1, help="runs of the five rows; the report gives min-max (default 1)")
    p.add_argument("--json", help="JSON output (default build/bench_targets.json; quick: none)")
    p.add_argument("--markdown", help="Markdown report; text outside the TARGETS markers is kept "
                                      "(default docs/benchmarks.md; quick: none)")
    p.add_argument("--img-dir", help="where the plot goes (default docs/img; quick: none)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for any one answer")
    p.add_argument("--from-json", metavar="PATH", help="measure nothing: write the report and the plot of the "
                                                         "run saved in PATH (its --json)")
    a = p.parse_args(argv)
    q = a.quick
    if a.runs < 1:
        p.error("--runs must be at least 1")
    a.handoff_size = 1 * MiB if q else 64 * MiB
    a.handoff_reps = 20 if q else 200
    a.warmup = 3 if q else 10
    a.queue_count = 50 if q else 1000
    a.queue_rounds = 2 if q else 5
    a.loader_batches = 20 if q else 400
    a.loader_reps = 1 if q else 3
    a.read_size = 16 * MiB if q else 1 * GiB
    a.read_reps = 3 if q else 9
    a.sd_tensors = 200 if q else 2000
    a.sd_reps = 2 if q else 5
    if not q:
        a.json = a.json or os.path.join(ROOT, "build", "bench_targets.json")
        a.markdown = a.markdown or os.path.join(ROOT, "docs", "benchmarks.md")
        a.img_dir = a.img_dir or os.path.join(ROOT, "docs", "img")
    return a


def _machine():
    m = BS.describe_machine()
    return (f"{m['cpus_usable']} usable CPUs, {m['cpu_model']}; Python {m['python']}, torch {m['torch']}, "
            f"ascend_ipc {m['ascend_ipc']} (provider `{m['provider']}`); 1-minute load average at the start "
            f"{m['loadavg_start'][0]:.1f}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            res = json.load(f)
        report(res, args)
        return 0
    start = time.monotonic()
    import torch.multiprocessing as tmp

    import ascend_ipc.torch  # noqa: F401  (install(): tensors in ascend_ipc memory go zero-copy)

    tmp.set_sharing_strategy("file_descriptor")
    torch_reducers = BS.torch_reducers()  # torch's sharing through its own reduction, not the dispatcher
    ctx = tmp.get_context("spawn")
    res = {"schema": 1, "generated": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "argv": sys.argv[1:] if argv is None else list(argv), "quick": args.quick, "machine": _machine(),
           "args": {k: getattr(args, k) for k in ("handoff_size", "handoff_reps", "queue_count", "queue_rounds",
                                                   "loader_batches", "loader_reps", "read_size", "read_reps",
                                                   "sd_tensors", "sd_reps")},
           "rows": {k: {"what": _what(w, vars(args)), "figure": f, "baseline": b, "unit": u, "target": f"{op} {t:g}"}
                    for k, w, f, b, u, op, t in ROWS},
           "runs": [], "loadavg_start": list(os.getloadavg()), "cpus": len(os.sched_getaffinity(0))}
    log(f"machine: {res['machine']}")
    log("starting the readers")
    cons = {m: BS.Consumers(ctx, m, 1, args.timeout) for m in ("a", "b", "c", "f")}
    fullread = FullRead(ctx, args.read_size, args.timeout)
    sds = StateDicts(ctx, args.sd_tensors, args.timeout)
    try:
        for i in range(args.runs):
            log(f"run {i + 1} of {args.runs}")
            res["runs"].append(one_run(args, cons, fullread, sds, torch_reducers))
    finally:
        for c in cons.values():
            c.close()
        fullread.close()
        sds.close()
    res["runs_done"] = len(res["runs"])
    res["summary"] = summarize(res["runs"])
    res["duration_s"] = time.monotonic() - start
    res["loadavg_end"] = list(os.getloadavg())
    report(res, args)
    return 0


def report(res, args):
    """The plot, the Markdown part and the JSON, where args say; the verdicts on stdout."""
    img_rel = None
    if args.img_dir:
        path = plot(res, os.path.join(args.img_dir, "bench_targets.png"))
        if path and args.markdown:
            img_rel = os.path.relpath(path, os.path.dirname(os.path.abspath(args.markdown)))
    if args.markdown:
        write_markdown(args.markdown, render_markdown(res, img_rel))
    if args.json and not args.from_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    for key, what, *_ , op, target in ROWS:
        s = res["summary"][key]
        r = s["ratio"]
        fig = "failed: " + s["failed"][0] if (s["failed"] and r is None) else (
            f"{r['median']:.3g}x" + (f" ({r['min']:.3g}-{r['max']:.3g}x)" if s["runs"] > 1 else "") if r else "-")
        verdict = "reference" if key == "state_dict_kept" else f"met in {s['met_runs']} of {s['runs']} runs"
        print(f"({NUM[key]}) target {op} {target:g}x: {_what(what, res['args'])}: {fig}; {verdict}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
