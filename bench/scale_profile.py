#!/usr/bin/env python3
"""Benchmark: reading and attributing a large VTune hotspots profile, lotus
against pandas, measured in the same run.

A VTune-style hotspots CSV (`vtune -report hotspots -format csv`, the
columns of fixtures/reports/vtune/hotspots) is generated at each size
(default 100,000 and 1,000,000 rows, ~11 and ~110 MB) over 5,000 distinct
functions in 40 modules: a function appears on many rows, as in a report
grouped by function and thread (one row per distinct function would mean a
million distinct native functions, which no real profile has). A mapping in
the original tool's schema gives 6 ops 300 functions each, some shared.

Measured, each in its own process (wall time from the outside, peak
resident memory from wait4's ru_maxrss):
- lotus reader, streaming: `scale_read FILE stream` (bench/scale_read.rs):
  HotspotRows, CPU time summed per (function, module) as rows come;
- lotus reader, collect: `scale_read FILE collect`: read_hotspots, every row
  kept (how `lotus attribute` reads a profile today), then the same sums;
- lotus attribute: `lotus attribute --mapping M --profile P --format json`;
- pandas: the original tool's way, `pd.read_csv`, then
  `groupby(["Function", "Module"])["CPU Time"].sum()`, then the same
  attribution (each function's time to the ops that map it, split equally;
  the rest unexplained).

Printed: rows/s, MB/s and peak memory of each at each size, the ratios
against pandas, and how peak memory grows from the smallest to the largest
size (1.0 = flat).

usage: python3 bench/scale_profile.py [--rows 100000,1000000] [--keep DIR]
Run from the repository root. Builds the release binaries; installs pandas
into .venv when it is missing (the bench is not part of CI).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
LOTUS = os.path.join(ROOT, "target", "release", "lotus")
SCALE_READ = os.path.join(ROOT, "target", "release", "examples", "scale_read")

FUNCTIONS = 5000
MODULES = 40
OPS = ["Loader", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize", "Collation"]
FUNCS_PER_OP = 300

HEADER = ("Function,CPU Time,CPU Time:Effective Time,CPU Time:Spin Time,"
          "CPU Time:Overhead Time,Module,Function (Full),Source File,Start Address\n")


def function(i):
    """(function, module, full name) of distinct function i."""
    module = f"lib{['jpeg', 'imaging', 'torch_cpu', 'c10', 'python3.10', 'c', 'm', 'gomp'][i % 8]}{i % MODULES}.so"
    if i % 10 == 0:
        # C++ names with commas in the full signature: quoted fields.
        name = f"at::native::kernel_{i}"
        full = f"\"at::native::kernel_{i}(at::TensorIterator&, c10::Scalar const&)\""
    else:
        name = f"func_{i}_decode_mcu"
        full = name
    return name, module, full


def generate(path, rows):
    """Writes a hotspots CSV of `rows` rows; returns its size in bytes."""
    tails = []
    for i in range(FUNCTIONS):
        name, module, full = function(i)
        tails.append((name, f"0.0,0.0,{module},{full},[Unknown],0x{0x1000 + 64 * i:x}\n"))
    with open(path, "w", buffering=1 << 20) as f:
        f.write(HEADER)
        for r in range(rows):
            name, tail = tails[(r * 7919) % FUNCTIONS]
            t = ((r * 2654435761) % 1000003) / 1e6
            f.write(f"{name},{t:.6f},{t:.6f},{tail}")
    return os.path.getsize(path)


def mapping(path):
    """Op -> 300 `function|module` keys; every 4th block is shared with the
    next op."""
    op_to_func = {}
    for k, op in enumerate(OPS):
        keys = []
        for j in range(FUNCS_PER_OP):
            i = (k * (FUNCS_PER_OP - 60) + j) % FUNCTIONS
            name, module, _ = function(i)
            keys.append(f"{name}|{module}")
        op_to_func[op] = keys
    with open(path, "w") as f:
        json.dump({"op_to_func": op_to_func, "common_funcs_to_op": {}}, f)


PANDAS_REFERENCE = r"""
import json, sys
import pandas as pd
profile, mapping = sys.argv[1], sys.argv[2]
df = pd.read_csv(profile)
per_function = df.groupby(["Function", "Module"])["CPU Time"].sum()
with open(mapping) as f:
    op_to_func = json.load(f)["op_to_func"]
ops_of = {}
for op, keys in op_to_func.items():
    for key in keys:
        ops_of.setdefault(key, []).append(op)
op_time = {op: 0.0 for op in op_to_func}
unexplained = 0.0
for (function, module), t in per_function.items():
    ops = ops_of.get(f"{function}|{module}")
    if not ops:
        unexplained += t
        continue
    for op in ops:
        op_time[op] += t / len(ops)
print(json.dumps({"rows": len(df), "functions": len(per_function),
                  "total_cpu_s": float(per_function.sum()), "unexplained_s": unexplained}))
"""


GNU_TIME = "/usr/bin/time"


def measure(cmd):
    """Runs `cmd`; returns (wall seconds, peak RSS in MiB, stdout).

    Peak RSS comes from GNU time's %M where it is installed: a child forked
    from this (large) Python process inherits its high-water mark across
    exec, so wait4's ru_maxrss of a direct child is at least this process's
    size. Without GNU time, ru_maxrss is used and the floor is said."""
    rss_file = None
    if os.access(GNU_TIME, os.X_OK):
        fd, rss_file = tempfile.mkstemp(prefix="lotus-scale-rss-")
        os.close(fd)
        cmd = [GNU_TIME, "-f", "%M", "-o", rss_file] + cmd
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err.decode(errors='replace')}")
    if rss_file:
        with open(rss_file) as f:
            rss_kib = int(f.read().split()[-1])
        os.remove(rss_file)
    else:
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, rss_kib / 1024.0, out.decode()


def ensure_pandas():
    try:
        subprocess.run([VENV_PY, "-c", "import pandas"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("installing pandas into .venv ...", file=sys.stderr)
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "pip"), "install", "-q", "pandas"], check=True)


def build():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "lotus-cli"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "lotus-backend-vtune",
                    "--example", "scale_read"], cwd=ROOT, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="100000,1000000", help="profile sizes, comma-separated")
    ap.add_argument("--keep", help="write the generated files here and keep them")
    args = ap.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]

    ensure_pandas()
    build()
    pandas_version = subprocess.run([VENV_PY, "-c", "import pandas; print(pandas.__version__)"],
                                    capture_output=True, text=True).stdout.strip()

    work = args.keep or tempfile.mkdtemp(prefix="lotus-scale-")
    os.makedirs(work, exist_ok=True)
    mapping_path = os.path.join(work, "mapping_funcs.json")
    mapping(mapping_path)

    methods = ["lotus reader (stream)", "lotus reader (collect)", "lotus attribute", "pandas"]
    results = {}  # (method, rows) -> (wall, rss, bytes)
    for rows in sizes:
        profile = os.path.join(work, f"hotspots_{rows}.csv")
        size = generate(profile, rows)
        print(f"{rows:,} rows, {size / 1e6:.1f} MB: {profile}", file=sys.stderr)
        out_json = os.path.join(work, f"attribution_{rows}.json")
        cmds = {
            "lotus reader (stream)": [SCALE_READ, profile, "stream"],
            "lotus reader (collect)": [SCALE_READ, profile, "collect"],
            "lotus attribute": [LOTUS, "attribute", "--mapping", mapping_path, "--profile", profile,
                                "--format", "json", "--out", out_json],
            "pandas": [VENV_PY, "-c", PANDAS_REFERENCE, profile, mapping_path],
        }
        totals = {}
        for m in methods:
            wall, rss, out = measure(cmds[m])
            results[(m, rows)] = (wall, rss, size)
            if out.strip().startswith("{"):
                totals[m] = json.loads(out)["total_cpu_s"]
        # The methods agree on what they read.
        with open(out_json) as f:
            totals["lotus attribute"] = json.load(f)["profiles"][0]["total_cpu_time_s"]
        spread = max(totals.values()) - min(totals.values())
        assert spread <= 1e-6 * max(totals.values()), f"totals differ: {totals}"
        if not args.keep:
            os.remove(profile)

    rss_how = ("GNU time %M" if os.access(GNU_TIME, os.X_OK)
               else "getrusage(RUSAGE_CHILDREN): the largest child so far, floored at this script's size")
    print(f"\nprofile: VTune hotspots CSV, {FUNCTIONS} distinct functions; pandas {pandas_version}; "
          f"peak RSS by {rss_how}\n")
    print("| method | rows | wall s | rows/s | MB/s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for m in methods:
        for rows in sizes:
            wall, rss, size = results[(m, rows)]
            print(f"| {m} | {rows:,} | {wall:.2f} | {rows / wall / 1e6:.2f} M | {size / wall / 1e6:.0f} | {rss:.0f} |")
    big, small = max(sizes), min(sizes)
    print(f"\n| method | time vs pandas ({big:,} rows) | peak RSS vs pandas | peak RSS {big:,} / {small:,} rows |")
    print("|---|---:|---:|---:|")
    pw, pr, _ = results[("pandas", big)]
    for m in methods:
        wall, rss, _ = results[(m, big)]
        growth = rss / results[(m, small)][1]
        speed = f"{pw / wall:.1f}x faster" if m != "pandas" else "1"
        mem = f"{pr / rss:.1f}x less" if m != "pandas" else "1"
        print(f"| {m} | {speed} | {mem} | {growth:.2f} |")
    if not args.keep:
        os.remove(mapping_path)
        for rows in sizes:
            p = os.path.join(work, f"attribution_{rows}.json")
            if os.path.exists(p):
                os.remove(p)
        os.rmdir(work)


if __name__ == "__main__":
    main()
