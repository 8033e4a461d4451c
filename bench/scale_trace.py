#!/usr/bin/env python3
"""Benchmark: reading a large pipeline trace, lotus against pandas, measured
in the same run.

A trace folder in lotus's log format is generated at each size (default
1,000,000, 10,000,000 and 30,000,000 events): 8 worker logs and one main log, the way
`lotus trace run` writes them: per batch of 32 samples, each sample with 4
transform ops, then SSample, SFetch, SCollation and SBatch in the worker, and
SWait / SConsume in the main process.

Measured, each in its own process (wall time, peak resident memory through
GNU time's %M):
- `lotus trace stats DIR --json` (per-op count/total/mean/p50/p95/p99/std,
  batch outliers, wait buckets, delays: exact percentiles);
- `lotus trace view DIR --out FILE` (Chrome trace JSON, streamed);
- the minimal byte-level pass (`bench/minimal_pass.rs`: split lines, parse
  the duration, count and sum per name, one thread per CPU), the floor;
- pandas, the original tool's way: `pd.read_csv` of every log (name, start,
  duration, extra fields), concatenated, then per name count/sum/mean/
  quantiles(0.5, 0.95, 0.99)/std.

Printed: wall time and peak memory of each at each size, ratios against
pandas, and how peak memory grows from one size to the next. lotus keeps at
most LOTUS_SORT_BUFFER bytes (16 MiB by default) per sort in memory and the rest
in unlinked temporary files, so its memory stops growing once those buffers
are full (durations are counted per distinct value, so they fill them only
when a trace has millions of distinct durations); pandas holds every event.

stats, the minimal pass and pandas run interleaved, --runs times each, and
must give the same count and total duration per name; printed also: stats
against pandas and against the minimal pass (medians).

usage: python3 bench/scale_trace.py [--events 1000000,10000000,30000000] [--keep DIR]
                                    [--runs 3] [--no-view]
Run from the repository root after `bash scripts/setup.sh` (installs pandas
into .venv when missing; not part of CI).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOTUS = os.path.join(ROOT, "target", "release", "lotus")
MINIMAL = os.path.join(ROOT, "target", "release", "examples", "minimal_pass")
PY = os.path.join(ROOT, ".venv", "bin", "python")
GNU_TIME = "/usr/bin/time"
OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]
WORKERS = 8
BATCH = 32
# Events per batch: per sample 4 ops + 1 SSample, then SFetch, SCollation,
# SBatch in the worker, SWait and SConsume in main.
PER_BATCH = BATCH * (len(OPS) + 1) + 3 + 2

PANDAS_REFERENCE = r"""
import glob, json, sys
import pandas as pd
frames = []
for path in glob.glob(sys.argv[1] + "/lotus_*_pid_*"):
    frames.append(pd.read_csv(path, header=None, comment="#", usecols=[0, 1, 2],
                              names=["name", "start", "dur"], dtype={"name": str}))
df = pd.concat(frames, ignore_index=True)
g = df.groupby("name")["dur"]
stats = g.agg(["count", "sum", "mean", "std"])
q = g.quantile([0.5, 0.95, 0.99]).unstack()
print(len(df), len(stats), float(q.values.sum()))
# The per-name count and sum, for the check that every method saw the same.
print(json.dumps({n[1:]: [int(r["count"]), int(r["sum"])] for n, r in stats.iterrows()}))
"""


def generate(folder, events):
    batches = max(1, events // PER_BATCH)
    t = 1_700_000_000_000_000_000
    files = [open(os.path.join(folder, f"lotus_worker_pid_{1000 + w}"), "w") for w in range(WORKERS)]
    main = open(os.path.join(folder, "lotus_main_pid_999"), "w")
    for f in files:
        f.write("#lotus-trace v1 role=worker pid=0 host=bench rank=-\n")
    main.write("#lotus-trace v1 role=main pid=999 host=bench rank=-\n")
    n = 0
    for b in range(batches):
        f = files[b % WORKERS]
        start = t + b * 5_000_000
        lines = []
        s = start
        for i in range(BATCH):
            sample_start = s
            for k, op in enumerate(OPS):
                d = 20_000 + (b * 7919 + i * 104_729 + k * 1_299_709) % 50_000
                lines.append(f"S{op},{s},{d},kind=op,batch={b},sample={b * BATCH + i}\n")
                s += d
            lines.append(f"SSample,{sample_start},{s - sample_start},kind=sample,batch={b},sample={b * BATCH + i}\n")
        fetch_end = s
        lines.append(f"SFetch,{start},{fetch_end - start},kind=fetch,batch={b}\n")
        lines.append(f"SCollation,{fetch_end},300000,kind=op,batch={b}\n")
        lines.append(f"SBatch,{start},{fetch_end + 300_000 - start},kind=batch,batch={b}\n")
        f.write("".join(lines))
        end = fetch_end + 300_000
        wait = (b * 31) % 3_000_000
        main.write(f"SWait,{end - wait},{wait},kind=wait,batch={b},ready={1 if wait == 0 else 0}\n")
        main.write(f"SConsume,{end + 1000},0,kind=consume,batch={b}\n")
        n += len(lines) + 2
    for f in files + [main]:
        f.close()
    return n


def measure(cmd, out=None):
    fd, rss_file = tempfile.mkstemp(prefix="lotus-scale-rss-")
    os.close(fd)
    full = [GNU_TIME, "-f", "%M", "-o", rss_file] + cmd
    t0 = time.perf_counter()
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.decode(errors='replace')[-2000:]}")
    with open(rss_file) as f:
        rss = int(f.read().split()[-1]) / 1024.0
    os.remove(rss_file)
    if out is not None:
        out.append(p.stdout.decode())
    return wall, rss


def median_of(runs, cmd, outs=None):
    """Wall time and peak memory, the median of `runs` runs (the machine is
    shared: single runs vary by tens of percent)."""
    got = sorted(measure(cmd, outs) for _ in range(runs))
    return got[len(got) // 2]


def sums_of_lotus(stats_json):
    """Per name (count, total ns) from `trace stats --json`: ops by name,
    the other kinds by their names in the logs."""
    d = json.loads(stats_json)
    sums = {o["name"]: [o["count"], o["total_ns"]] for o in d["ops"]}
    for k in d["kinds"]:
        if k["kind"] != "op":
            sums[k["kind"].capitalize()] = [k["count"], k["total_ns"]]
    return sums


def check_same(events, lotus_out, minimal_out, pandas_out):
    """Every method counted the same events with the same sums per name."""
    minimal = json.loads(minimal_out)["per_name"]
    pandas = json.loads(pandas_out.strip().splitlines()[-1])
    lotus = sums_of_lotus(lotus_out)
    if not (minimal == pandas == lotus):
        sys.exit(f"figures differ:\n minimal {minimal}\n pandas  {pandas}\n lotus   {lotus}")
    if sum(c for c, _ in minimal.values()) != events:
        sys.exit(f"the minimal pass counted {sum(c for c, _ in minimal.values())} events, not {events}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="1000000,10000000,30000000")
    ap.add_argument("--keep", default=None)
    ap.add_argument("--runs", type=int, default=3, help="runs of each method per size (medians printed)")
    ap.add_argument("--no-view", action="store_true", help="leave out `lotus trace view`")
    args = ap.parse_args()
    if not os.access(GNU_TIME, os.X_OK):
        sys.exit("needs GNU time (/usr/bin/time) for peak memory: apt-get install time")
    if subprocess.run([PY, "-c", "import pandas"], capture_output=True).returncode != 0:
        subprocess.run([PY, "-m", "pip", "install", "-q", "pandas"], check=True)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "lotus-trace", "--example", "minimal_pass"],
                   cwd=ROOT, check=True)
    work = args.keep or tempfile.mkdtemp(prefix="lotus-scale-trace-")
    results = []
    try:
        for target in [int(x) for x in args.events.split(",")]:
            folder = os.path.join(work, f"trace-{target}")
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            events = generate(folder, target)
            size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
            outs = {"stats": [], "minimal": [], "pandas": []}
            ref = os.path.join(work, "ref.py")
            with open(ref, "w") as f:
                f.write(PANDAS_REFERENCE)
            # Interleaved, so that a change in the machine's load falls on
            # every method alike.
            runs = {"stats": [], "minimal": [], "pandas": []}
            for _ in range(args.runs):
                runs["stats"].append(measure([LOTUS, "trace", "stats", folder, "--json"], outs["stats"]))
                runs["minimal"].append(measure([MINIMAL, folder], outs["minimal"]))
                runs["pandas"].append(measure([PY, ref, folder], outs["pandas"]))
            stats, minimal, pandas = (sorted(runs[k])[len(runs[k]) // 2] for k in ("stats", "minimal", "pandas"))
            check_same(events, outs["stats"][0], outs["minimal"][0], outs["pandas"][0])
            if args.no_view:
                view = (float("nan"), float("nan"))
            else:
                view = measure([LOTUS, "trace", "view", folder, "--out", os.path.join(work, "view.json")])
                os.remove(os.path.join(work, "view.json"))
            results.append((events, size, stats, view, pandas, minimal))
            shutil.rmtree(folder)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'events':>10} {'MB':>7} | {'lotus stats s':>13} {'MiB':>6} | {'lotus view s':>12} {'MiB':>6} | {'pandas s':>9} {'MiB':>7} | stats vs pandas")
    for events, size, (sw, sr), (vw, vr), (pw, pr), _ in results:
        print(f"{events:>10} {size / 1e6:>7.0f} | {sw:>13.2f} {sr:>6.0f} | {vw:>12.2f} {vr:>6.0f} | {pw:>9.2f} {pr:>7.0f} | "
              f"{pw / sw:.1f}x faster, {pr / sr:.1f}x less memory")
    print("throughput, million events/s (MB of log/s):")
    for events, size, (sw, _), (vw, _), (pw, _), _ in results:
        print(f"{events:>10} | stats {events / sw / 1e6:.2f} ({size / 1e6 / sw:.0f}) | "
              f"view {events / vw / 1e6:.2f} ({size / 1e6 / vw:.0f}) | pandas {events / pw / 1e6:.2f} ({size / 1e6 / pw:.0f})")
    print(f"same figures (per name count and sum of durations) from lotus stats, the minimal pass and pandas; "
          f"medians of {args.runs} runs:")
    print(f"{'events':>10} | {'stats s':>8} {'minimal s':>9} {'pandas s':>8} | stats vs pandas | stats vs minimal pass")
    for events, _, (sw, _), _, (pw, _), (mw, _) in results:
        print(f"{events:>10} | {sw:>8.2f} {mw:>9.2f} {pw:>8.2f} | {pw / sw:>8.2f}x faster | {sw / mw:>8.2f}x slower")
    for a, b in zip(results, results[1:]):
        print(f"{a[0]:,} -> {b[0]:,} events ({b[0] / a[0]:.0f}x): peak memory {b[2][1] / a[2][1]:.2f}x (stats), "
              f"{b[3][1] / a[3][1]:.2f}x (view), {b[4][1] / a[4][1]:.2f}x (pandas); "
              f"time {b[2][0] / a[2][0]:.1f}x (stats), {b[3][0] / a[3][0]:.1f}x (view), {b[4][0] / a[4][0]:.1f}x (pandas)")

if __name__ == "__main__":
    main()
