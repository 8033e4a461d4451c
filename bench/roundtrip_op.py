"""Script-mode op for the benchmark: times resume+pause round trips.

Under `lotus map` it goes through the real path: ctypes -> control library
-> pipe -> lotus process -> backend window switch -> reply. With
LOTUS_BENCH_PERF_FIFOS="CTL,ACK" it instead switches `perf record
--control` through its fifos (the alternative lotus replaces). Each
window holds a 0.1 ms busy "op" (real windows hold an op, not nothing);
what is timed is the resume call plus the pause call. Writes {"n",
"p50_us", "p99_us"} to $LOTUS_BENCH_OUT.
"""

import json
import os
import time

N = int(os.environ.get("LOTUS_BENCH_N", "10000"))


def lotus_pair():
    import lotus

    return (lambda: lotus.resume("roundtrip")), lotus.pause


def perf_pair(ctl_path, ack_path):
    ctl = open(ctl_path, "w")
    ack = open(ack_path, "r")

    def send(word):
        ctl.write(word + "\n")
        ctl.flush()
        ack.readline()

    return (lambda: send("enable")), (lambda: send("disable"))


fifos = os.environ.get("LOTUS_BENCH_PERF_FIFOS")
resume, pause = perf_pair(*fifos.split(",")) if fifos else lotus_pair()
GAP_NS = 100_000  # a 0.1 ms "op" inside each window, not timed


def busy():
    end = time.perf_counter_ns() + GAP_NS
    while time.perf_counter_ns() < end:
        pass


for _ in range(200):  # warm-up
    resume()
    busy()
    pause()
times = []
for _ in range(N):
    t0 = time.perf_counter_ns()
    resume()
    t1 = time.perf_counter_ns()
    busy()
    t2 = time.perf_counter_ns()
    pause()
    t3 = time.perf_counter_ns()
    times.append((t1 - t0) + (t3 - t2))
times.sort()
with open(os.environ["LOTUS_BENCH_OUT"], "w") as f:
    json.dump({"n": N, "p50_us": times[N // 2] / 1e3, "p99_us": times[int(N * 0.99)] / 1e3}, f)
