#!/usr/bin/env python3
"""Benchmark: `lotus map --backend perf` against the original Lotus protocol.

Measured in the same run, on the same op files:
- lotus: `lotus map --backend perf OPS --runs R` (one process per op and run,
  the op looped inside a window of thousands of samples, no sleeps);
- original: for each op, 20 runs of one process making five op calls after a
  one-second sleep each, with the window around the last call only, through
  `perf record --control` (needs the `perf` binary; skipped without it).

Printed: wall time of each and their ratio, samples per window, and how many
of each op's known kernels each method found (union over its runs).

usage: python3 bench/map_vs_original.py [--ops Flip,Crop,...] [--original-runs 20] [--lotus-runs 3]
Run from the repository root after `bash scripts/setup.sh`.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS_DIR = os.path.join(ROOT, "fixtures", "ops")

# The native kernels each fixture op is known to run (what a mapping must
# find); a method "finds" a kernel when any of its runs sampled it.
KERNELS = {
    "RandomHorizontalFlip": ["ImagingFlipLeftRight"],
    "RandomResizedCrop": ["ImagingResampleHorizontal_8bpc", "ImagingResampleVertical_8bpc"],
    "CKernels": ["lotus_fixture_dot", "lotus_fixture_blur"],
    # Pillow's wheels bundle a stripped libjpeg-turbo: its decoder functions
    # have no names, so the kernel is "any function of the libjpeg module".
    "Loader": ["module:libjpeg", "ImagingUnpackRGB"],
    "ToTensor": [],
    "Normalize": [],
    "Collation": [],
}
DEFAULT_OPS = ["RandomHorizontalFlip", "RandomResizedCrop", "CKernels", "Loader"]


def found_count(kernels, functions):
    """How many kernels appear among (function, module) pairs: by name
    (Pillow 10+ adds a leading underscore), or `module:PREFIX` for any
    function of a module whose name starts with PREFIX."""
    names = {f.lstrip("_") for f, _ in functions}
    modules = {m for _, m in functions}
    n = 0
    for k in kernels:
        if k.startswith("module:"):
            n += any(m.startswith(k[len("module:"):]) for m in modules)
        else:
            n += k.lstrip("_") in names
    return n


def python():
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return os.environ.get("LOTUS_PYTHON") or (venv if os.path.exists(venv) else "python3")


def run_lotus(ops, runs, out):
    lotus = os.path.join(ROOT, "target", "release", "lotus")
    cmd = [lotus, "map", "--backend", "perf", "--runs", str(runs), "--python", python(), "--out", out]
    cmd += [os.path.join(OPS_DIR, f"{op}.py") for op in ops]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        m = json.load(f)
    found, samples = {}, {}
    for op in m["ops"]:
        found[op["name"]] = {(fn["function"], fn["module"]) for fn in op["functions"]}
        samples[op["name"]] = op["window"]["samples"] / max(op["runs"], 1)
    return wall, found, samples


def perf_functions(data):
    """Functions in a perf.data file, via `perf report`."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym", "-F", "sample,dso,sym", "--no-children"],
        capture_output=True, text=True,
    ).stdout
    funcs, total = set(), 0
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0].isdigit():
            total += int(parts[0])
            module = parts[1]
            name = parts[2].split("] ", 1)[-1].strip()
            funcs.add((name, module))
    return funcs, total


def run_original(op, runs, freq):
    found, per_window = set(), []
    tmp = tempfile.mkdtemp(prefix="lotus-bench-")
    try:
        ctl, ack = os.path.join(tmp, "ctl"), os.path.join(tmp, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        for r in range(runs):
            data = os.path.join(tmp, f"{r}.data")
            cmd = ["perf", "record", "-q", "-F", str(freq), "-e", "cpu-clock", "-D", "-1",
                   "--control", f"fifo:{ctl},{ack}", "-o", data, "--",
                   python(), os.path.join(ROOT, "bench", "original_protocol_op.py"),
                   os.path.join(OPS_DIR, f"{op}.py"), ctl, ack]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            funcs, n = perf_functions(data)
            found |= funcs
            per_window.append(n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return found, statistics.mean(per_window) if per_window else 0


def roundtrip_lotus(n):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rt.json")
        env = dict(os.environ, LOTUS_BENCH_OUT=out, LOTUS_BENCH_N=str(n))
        lotus = os.path.join(ROOT, "target", "release", "lotus")
        subprocess.run([lotus, "map", "--backend", "perf", "--no-baseline", "--runs", "1", "--python", python(),
                        "--out", os.path.join(tmp, "m.json"), os.path.join(ROOT, "bench", "roundtrip_op.py")],
                       check=True, env=env, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def roundtrip_perf(n):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rt.json")
        ctl, ack = os.path.join(tmp, "ctl"), os.path.join(tmp, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        env = dict(os.environ, LOTUS_BENCH_OUT=out, LOTUS_BENCH_N=str(n), LOTUS_BENCH_PERF_FIFOS=f"{ctl},{ack}")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
                        "-o", os.path.join(tmp, "p.data"), "--", python(), os.path.join(ROOT, "bench", "roundtrip_op.py")],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS))
    ap.add_argument("--original-runs", type=int, default=20)
    ap.add_argument("--original-frequency", type=int, default=1000, help="Hz; the original tool sampled at 1 kHz")
    ap.add_argument("--lotus-runs", type=int, default=3)
    ap.add_argument("--roundtrips", type=int, default=10000)
    args = ap.parse_args()
    ops = args.ops.split(",")

    with tempfile.TemporaryDirectory() as tmp:
        lotus_wall, lotus_found, lotus_samples = run_lotus(ops, args.lotus_runs, os.path.join(tmp, "m.json"))

    have_perf = shutil.which("perf") is not None
    orig = {}
    orig_wall = None
    if have_perf:
        t0 = time.perf_counter()
        for op in ops:
            orig[op] = run_original(op, args.original_runs, args.original_frequency)
        orig_wall = time.perf_counter() - t0

    print(f"ops: {', '.join(ops)}")
    print(f"lotus map --backend perf, {args.lotus_runs} run(s)/op: {lotus_wall:.1f} s")
    if orig_wall is None:
        print("original protocol: skipped (no perf binary)")
    else:
        print(f"original protocol, {args.original_runs} run(s)/op, perf record --control: {orig_wall:.1f} s")
        print(f"speed-up: {orig_wall / lotus_wall:.1f}x (target: 20x or more)")
    print()
    print(f"{'op':<22} {'lotus samples/window':>21} {'orig samples/window':>20} {'kernels found lotus':>20} {'orig':>6}")
    for op in ops:
        want = KERNELS.get(op, [])
        lf = found_count(want, lotus_found.get(op, set()))
        if op in orig:
            of = found_count(want, orig[op][0])
            osamp = f"{orig[op][1]:.1f}"
        else:
            of, osamp = "-", "-"
        print(f"{op:<22} {lotus_samples.get(op, 0):>21.0f} {osamp:>20} {f'{lf}/{len(want)}':>20} {f'{of}/{len(want)}':>6}")


    print()
    rt = roundtrip_lotus(args.roundtrips)
    line = f"resume+pause round trip from Python, lotus (perf): p50 {rt['p50_us']:.1f} us, p99 {rt['p99_us']:.1f} us (target: p50 under 50 us)"
    print(line)
    if have_perf:
        pr = roundtrip_perf(args.roundtrips)
        print(f"resume+pause round trip from Python, perf record --control: p50 {pr['p50_us']:.1f} us, p99 {pr['p99_us']:.1f} us"
              f"  (lotus p50 is {pr['p50_us'] / rt['p50_us']:.1f}x faster)")


if __name__ == "__main__":
    sys.exit(main())
