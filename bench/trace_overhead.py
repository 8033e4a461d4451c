"""The cost of tracing a data pipeline with lotus_trace.

A DataLoader-like pipeline (multiprocessing workers, fork) of millisecond
CPU ops runs alternately without and with tracing, each run in a fresh
process, in the same invocation: the plain run uses the raw callables and
dataset (lotus_trace not even imported); the traced run wraps the ops
(lotus_trace.wrap), the dataset (TracedDataset) and marks the batches
(worker_batch, main_wait, main_consume), with tracing enabled into a temp
folder. Timed: the main process's loop, from the first task sent to the
last batch consumed. Printed: median wall times, the overhead (target
under 2%), events and log bytes per event; and the cost of one traced op
call, measured in-process against the raw call.

usage: python3 bench/trace_overhead.py [--workers 2] [--batches 40]
           [--batch-size 8] [--ops 3] [--op-ms 1.0] [--reps 7]

(--workers defaults to 2, or 1 on a machine of two CPUs or fewer, where a
second worker would compete with the main process and the noise would hide
the overhead.)
"""

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.normpath(os.path.join(HERE, "..", "lotus-tracer", "python"))


class Spin:
    """A CPU-bound op of a fixed duration."""

    def __init__(self, ms):
        self.ns = int(ms * 1e6)

    def __call__(self, x):
        end = time.perf_counter_ns() + self.ns
        acc = 0
        while time.perf_counter_ns() < end:
            acc += 1
        return x + (acc & 1)


class Items:
    def __init__(self, n, ops):
        self.n = n
        self.ops = ops

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = i
        for op in self.ops:
            x = op(x)
        return x


def worker(ds, index_q, result_q, traced):
    if traced:
        import lotus_trace

        batch = lotus_trace.worker_batch
    else:
        batch = None
    while True:
        task = index_q.get()
        if task is None:
            break
        bid, indices = task
        if batch is None:
            data = [ds[i] for i in indices]
            out = sum(data)
        else:
            with batch(bid) as b:
                data = [ds[i] for i in indices]
                with b.collate():
                    out = sum(data)
        result_q.put((bid, out))


def child(args):
    """One run of the pipeline; prints {"wall_s": ...}."""
    traced = args.child == "traced"
    ops = [Spin(args.op_ms) for _ in range(args.ops)]
    if traced:
        sys.path.insert(0, HARNESS)
        import lotus_trace

        lotus_trace.enable(args.out)
        ops = [lotus_trace.wrap(op, f"Spin{k}") for k, op in enumerate(ops)]
        wait = lotus_trace.main_wait
        consume = lotus_trace.main_consume
    else:
        wait = lambda bid, ready=False: contextlib.nullcontext()  # noqa: E731
        consume = lambda bid: None  # noqa: E731
    n = args.batches * args.batch_size
    ds = Items(n, ops)
    if traced:
        ds = lotus_trace.TracedDataset(ds)
    ctx = mp.get_context("fork")
    result_q = ctx.Queue()
    index_qs = [ctx.Queue() for _ in range(args.workers)]
    procs = [ctx.Process(target=worker, args=(ds, q, result_q, traced)) for q in index_qs]
    for p in procs:
        p.start()
    # Workers are up before the clock starts.
    time.sleep(0.2)
    t0 = time.perf_counter()
    sent = 0

    def send():
        nonlocal sent
        if sent < args.batches:
            idx = list(range(sent * args.batch_size, (sent + 1) * args.batch_size))
            index_qs[sent % args.workers].put((sent, idx))
            sent += 1

    for _ in range(2 * args.workers):
        send()
    buffered = {}
    for bid in range(args.batches):
        with wait(bid, ready=bid in buffered):
            while bid not in buffered:
                got, out = result_q.get()
                buffered[got] = out
        buffered.pop(bid)
        send()
        consume(bid)
    wall = time.perf_counter() - t0
    for q in index_qs:
        q.put(None)
    for p in procs:
        p.join()
    print(json.dumps({"wall_s": wall}))


def run_once(args, mode, out_dir):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--out", out_dir]
    for k in ("workers", "batches", "batch_size", "ops", "op_ms"):
        cmd += ["--" + k.replace("_", "-"), str(getattr(args, k))]
    env = dict(os.environ)
    env.pop("LOTUS_TRACE_DIR", None)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        sys.exit(f"{mode} run failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])["wall_s"]


def log_stats(out_dir):
    events = size = files = 0
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        files += 1
        size += os.path.getsize(path)
        with open(path, "rb") as f:
            events += sum(1 for line in f if line.startswith(b"S"))
    return files, events, size


def per_call_cost(reps=200_000):
    """ns added by tracing one op call (in-process, a no-op function), and
    the part of it that is the two reads of the thread's CPU clock (each
    span's `cpu=`): the same traced call with the clock replaced by a
    constant, in the same run."""
    sys.path.insert(0, HARNESS)
    import lotus_trace
    from lotus_trace import _core

    tmp = tempfile.mkdtemp(prefix="lotus-trace-bench-")
    clock = _core._cpu
    try:
        lotus_trace.enable(tmp)

        def noop(x):
            return x

        traced = lotus_trace.wrap(noop, "Noop")
        best = {}
        for label, fn, cpu in (("raw", noop, clock), ("traced", traced, clock), ("no clock", traced, lambda: 0)) * 3:
            _core._cpu = cpu
            t0 = time.perf_counter_ns()
            for i in range(reps):
                fn(i)
            dt = (time.perf_counter_ns() - t0) / reps
            best[label] = min(best.get(label, dt), dt)
        _core._cpu = clock
        lotus_trace.disable()
        return best["traced"] - best["raw"], best["traced"] - best["no clock"]
    finally:
        _core._cpu = clock
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=max(1, min(2, (os.cpu_count() or 2) - 1)))
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--ops", type=int, default=3)
    ap.add_argument("--op-ms", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--child", choices=["plain", "traced"])
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        return child(args)

    plain, traced = [], []
    files = events = size = 0
    for r in range(args.reps):
        # Alternate the order so that drift (other load, frequency) is shared.
        for mode in (("plain", "traced") if r % 2 == 0 else ("traced", "plain")):
            out = tempfile.mkdtemp(prefix="lotus-trace-bench-")
            try:
                wall = run_once(args, mode, out)
                if mode == "traced":
                    traced.append(wall)
                    files, events, size = log_stats(out)
                else:
                    plain.append(wall)
            finally:
                shutil.rmtree(out, ignore_errors=True)
    mp_, mt = statistics.median(plain), statistics.median(traced)
    # Each traced run against the plain run next to it in time.
    paired = statistics.median(t / p for t, p in zip(traced, plain))
    ops_per_run = args.batches * args.batch_size * args.ops
    print(
        f"pipeline: {args.workers} workers, {args.batches} batches x {args.batch_size} samples x "
        f"{args.ops} ops of {args.op_ms} ms ({ops_per_run} op calls per run), {args.reps} runs each"
    )
    print(f"plain   median {mp_ * 1000:8.1f} ms   runs: {', '.join(f'{w * 1000:.1f}' for w in plain)}")
    print(f"traced  median {mt * 1000:8.1f} ms   runs: {', '.join(f'{w * 1000:.1f}' for w in traced)}")
    print(
        f"overhead: {100 * (paired - 1):+.2f}% wall time (median of paired runs; median vs median "
        f"{100 * (mt / mp_ - 1):+.2f}%, best vs best {100 * (min(traced) / min(plain) - 1):+.2f}%)  target < 2%"
    )
    if events:
        print(f"log: {files} files, {events} events, {size} bytes, {size / events:.1f} bytes per event")
    cost, clock = per_call_cost()
    print(f"one traced op call costs {cost:.0f} ns more than the raw call ({100 * cost / (args.op_ms * 1e6):.3f}% of a {args.op_ms} ms op)")
    print(
        f"of which the span's two thread-CPU clock reads (cpu=): {clock:.0f} ns "
        f"({100 * clock / cost:.0f}% of the tracing cost, {100 * clock / (args.op_ms * 1e6):.3f}% of a {args.op_ms} ms op)"
    )


if __name__ == "__main__":
    main()
