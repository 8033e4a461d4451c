"""The cost of spans finer than a dataset's __getitem__ (Python 3.12+,
lotus_trace._finer: sys.monitoring callbacks on the dataset's own calls).

In one process, tracing on into a temporary folder, a dataset's
`__getitem__` that makes `--calls` calls (half to a tiny Python function,
half to a C function, `len`) is run as a dataset op `--items` times
without finer spans and with them, alternately, `--reps` times each; and
once more with one call of 1 ms among them, to show the share on an item
of realistic size. Printed: the median cost per call the dataset makes
(ns), and the slowdown of each item, against the same item without finer
spans measured in the same run.

usage: .venv312/bin/python bench/finer_spans.py [--calls 20] [--items 2000] [--reps 7]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "lotus-tracer", "python")))

import lotus_trace  # noqa: E402
from lotus_trace import _core, _finer  # noqa: E402


def tiny(x):
    return x + 1


def busy(ms):
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


class Items:
    def __init__(self, calls, heavy_ms):
        self.calls = calls
        self.heavy_ms = heavy_ms
        self.xs = [1, 2, 3]

    def __getitem__(self, i):
        acc = 0
        for _ in range(self.calls // 2):
            acc = tiny(acc)
            acc += len(self.xs)
        if self.heavy_ms:
            busy(self.heavy_ms)
        return acc


def run(ds, items, finer):
    code = _finer.dataset_code(ds.__getitem__) if finer else None
    t0 = time.perf_counter_ns()
    for i in range(items):
        tok = _core.op_begin("Items")
        fin = _finer.enter(code)
        try:
            ds[i]
        finally:
            _finer.leave(fin)
        _core.op_event("Items", tok, _core._now())
    return time.perf_counter_ns() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--items", type=int, default=2000)
    p.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    if not _finer.available():
        print(f"finer spans need Python 3.12+ (this is {sys.version.split()[0]})")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        lotus_trace.enable(tmp)
        for heavy_ms, items in ((0, a.items), (1.0, max(a.items // 20, 50))):
            ds = Items(a.calls, heavy_ms)
            run(ds, 50, True)  # warm-up: the monitored code objects, names
            off, on = [], []
            for _ in range(a.reps):
                off.append(run(ds, items, False))
                on.append(run(ds, items, True))
                lotus_trace.flush()
            m_off, m_on = statistics.median(off), statistics.median(on)
            per_call = (m_on - m_off) / (items * a.calls)
            print(
                f"item of {a.calls} calls{f' + {heavy_ms:g} ms' if heavy_ms else ''}: "
                f"{m_off / items / 1000:.2f} us without finer spans, {m_on / items / 1000:.2f} us with "
                f"(x{m_on / m_off:.2f}); {per_call:.0f} ns per call the dataset makes"
            )
        lotus_trace.disable()
    return 0


if __name__ == "__main__":
    sys.exit(main())
