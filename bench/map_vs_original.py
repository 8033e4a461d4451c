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

Then, each against its alternative in the same run (see bench/README.md):
- per op, `lotus map --runs 3 OP` (its floor included) against one
  `perf record` + `perf report` of a script looping the op for the same
  samples (bench/loop_op.py);
- a three-run torch op with its floor (fixtures/torch_ops), at the
  defaults and at the old ones (4 kHz, round trip, no fork server);
- a resume+pause pair from Python under perf: stamped edges (the
  default), the round trip (`--round-trip`), `perf record --control`;
- the total variation distance between the function shares of maps at
  the defaults and at the old ones, against two maps at the same settings
  (run-to-run noise).

usage: python3 bench/map_vs_original.py [--ops Flip,Crop,...] [--original-runs 20] [--lotus-runs 3]
                                        [--lotus PATH] [--skip original,perop,torch,roundtrip,tvd]
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


# The defaults before issue 14's Speed work: perf record's 4 kHz, each
# resume/pause waiting for lotus, one interpreter per run.
OLD_DEFAULTS = ["-F", "4000", "--round-trip", "--no-fork-server"]
LOTUS = os.path.join(ROOT, "target", "release", "lotus")


def run_lotus(ops, runs, out, extra=(), files=None):
    cmd = [LOTUS, "map", "--backend", "perf", "--runs", str(runs), "--python", python(), "--out", out]
    cmd += list(extra)
    cmd += files if files is not None else [os.path.join(OPS_DIR, f"{op}.py") for op in ops]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        m = json.load(f)
    found, samples = {}, {}
    for op in m["ops"]:
        found[op["name"]] = {(fn["function"], fn["module"]) for fn in op["functions"]}
        samples[op["name"]] = op["window"]["samples"] / max(op["runs"], 1)
    return wall, found, samples, m


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


def roundtrip_lotus(n, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rt.json")
        env = dict(os.environ, LOTUS_BENCH_OUT=out, LOTUS_BENCH_N=str(n))
        subprocess.run([LOTUS, "map", "--backend", "perf", "--no-baseline", "--runs", "1", "--python", python(),
                        *extra, "--out", os.path.join(tmp, "m.json"), os.path.join(ROOT, "bench", "roundtrip_op.py")],
                       check=True, env=env, stderr=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def perf_record_and_report(op_file, cpu_s, freq):
    """One `perf record` of bench/loop_op.py looping the op for `cpu_s` of
    CPU time, then `perf report`; returns (wall seconds, samples)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        t0 = time.perf_counter()
        subprocess.run(["perf", "record", "-q", "-F", str(freq), "-e", "cpu-clock", "-o", data, "--",
                        python(), os.path.join(ROOT, "bench", "loop_op.py"), op_file, str(cpu_s)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, total = perf_functions(data)
        return time.perf_counter() - t0, total


def shares(op):
    return {(f["function"], f["module"]): f["share"] for f in op["functions"]}


def tvd(a, b):
    """Total variation distance between two share distributions."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def op_by_name(m, name):
    return next(o for o in m["ops"] if o["name"] == name)


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
    global LOTUS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS))
    ap.add_argument("--original-runs", type=int, default=20)
    ap.add_argument("--original-frequency", type=int, default=1000, help="Hz; the original tool sampled at 1 kHz")
    ap.add_argument("--lotus-runs", type=int, default=3)
    ap.add_argument("--roundtrips", type=int, default=10000)
    ap.add_argument("--lotus", help="the lotus binary (default: the release build, target/release/lotus)")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: original,perop,torch,roundtrip,tvd")
    ap.add_argument("--torch-op", default="ToTensor")
    ap.add_argument("--tvd-ops", default="RandomHorizontalFlip,RandomResizedCrop")
    args = ap.parse_args()
    if args.lotus:
        LOTUS = os.path.abspath(args.lotus)
    skip = set(filter(None, args.skip.split(",")))
    ops = args.ops.split(",")

    with tempfile.TemporaryDirectory() as tmp:
        lotus_wall, lotus_found, lotus_samples, _ = run_lotus(ops, args.lotus_runs, os.path.join(tmp, "m.json"))
        old_wall = run_lotus(ops, args.lotus_runs, os.path.join(tmp, "old.json"), OLD_DEFAULTS)[0]

    have_perf = shutil.which("perf") is not None
    orig = {}
    orig_wall = None
    if have_perf and "original" not in skip:
        t0 = time.perf_counter()
        for op in ops:
            orig[op] = run_original(op, args.original_runs, args.original_frequency)
        orig_wall = time.perf_counter() - t0

    print(f"ops: {', '.join(ops)}")
    print(f"lotus map --backend perf, {args.lotus_runs} run(s)/op: {lotus_wall:.1f} s"
          f" (old defaults {' '.join(OLD_DEFAULTS)}: {old_wall:.1f} s, {old_wall / lotus_wall:.1f}x slower)")
    if orig_wall is None:
        print("original protocol: skipped")
    else:
        print(f"original protocol, {args.original_runs} run(s)/op, perf record --control: {orig_wall:.1f} s")
        print(f"speed-up: {orig_wall / lotus_wall:.1f}x (target: 100x or more)")
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


    if have_perf and "perop" not in skip:
        print()
        print("per op, 3 runs: lotus map (floor included) vs perf record + perf report of a loop, same samples")
        print(f"{'op':<22} {'lotus s':>8} {'perf s':>8} {'lotus samples':>14} {'perf samples':>13} {'perf/lotus':>11}")
        for op in ops:
            with tempfile.TemporaryDirectory() as tmp:
                wall, _, samples, m = run_lotus([op], 3, os.path.join(tmp, "m.json"))
            per_window = samples[op]
            hz = int(m["environment"]["frequency_hz"])
            # The same samples: three windows' worth, looped at the same rate.
            cpu_s = 3 * per_window / hz
            pwall, psamples = perf_record_and_report(os.path.join(OPS_DIR, f"{op}.py"), cpu_s, hz)
            print(f"{op:<22} {wall:>8.2f} {pwall:>8.2f} {3 * per_window:>14.0f} {psamples:>13} {pwall / wall:>10.2f}x")

    if "torch" not in skip:
        print()
        torch_file = os.path.join(ROOT, "fixtures", "torch_ops", f"{args.torch_op}.py")
        with tempfile.TemporaryDirectory() as tmp:
            new_s = run_lotus([], 3, os.path.join(tmp, "n.json"), files=[torch_file])[0]
            old_s = run_lotus([], 3, os.path.join(tmp, "o.json"), OLD_DEFAULTS, files=[torch_file])[0]
        print(f"torch op {args.torch_op}, 3 runs + floor: {new_s:.1f} s (target under 6 s);"
              f" old defaults {old_s:.1f} s ({old_s / new_s:.1f}x slower)")

    if "roundtrip" not in skip:
        print()
        rt = roundtrip_lotus(args.roundtrips)
        rr = roundtrip_lotus(args.roundtrips, ["--round-trip"])
        print(f"resume+pause pair from Python, lotus (perf, stamped edges): p50 {rt['p50_us']:.1f} us,"
              f" p99 {rt['p99_us']:.1f} us (target: p50 at most 10 us)")
        print(f"resume+pause pair from Python, lotus --round-trip: p50 {rr['p50_us']:.1f} us,"
              f" p99 {rr['p99_us']:.1f} us ({rr['p50_us'] / rt['p50_us']:.1f}x the stamped p50)")
        if have_perf:
            pr = roundtrip_perf(args.roundtrips)
            print(f"resume+pause pair from Python, perf record --control: p50 {pr['p50_us']:.1f} us, p99 {pr['p99_us']:.1f} us"
                  f"  ({pr['p50_us'] / rt['p50_us']:.1f}x the stamped p50)")

    if "tvd" not in skip:
        print()
        tvd_ops = args.tvd_ops.split(",")
        maps = {}
        with tempfile.TemporaryDirectory() as tmp:
            # Interleaved, so that the machine's load falls on both alike.
            for i in range(2):
                for kind, extra in (("new", []), ("old", OLD_DEFAULTS)):
                    out = os.path.join(tmp, f"{kind}{i}.json")
                    maps[kind, i] = run_lotus(tvd_ops, args.lotus_runs, out, extra + ["--no-baseline"])[3]
        print(f"function shares, total variation distance ({args.lotus_runs} runs per map):")
        print(f"{'op':<22} {'new vs old':>16} {'new vs new':>11} {'old vs old':>11}")
        for op in tvd_ops:
            s = {k: shares(op_by_name(m, op)) for k, m in maps.items()}
            cross = [tvd(s["new", i], s["old", j]) for i in range(2) for j in range(2)]
            print(f"{op:<22} {min(cross):>7.3f}-{max(cross):<8.3f} {tvd(s['new', 0], s['new', 1]):>11.3f}"
                  f" {tvd(s['old', 0], s['old', 1]):>11.3f}")


if __name__ == "__main__":
    sys.exit(main())
