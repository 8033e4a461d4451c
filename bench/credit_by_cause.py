"""Credit by cause against the earlier rule (by timing), per pipeline shape:
each op's error against the pipeline's own timers and its run-to-run
spread, both rules on the same traces.

Each shape runs --runs times (`lotus trace run --sample` at lotus's
defaults); each trace is attributed twice (`lotus attribute DIR --format
json`, then with `--helpers timing`), so the two rules differ by nothing but
the rule. Per op of at least 0.1 s: the median error against the truth,
the worst, and the spread (the largest distance of a run's figure from the
ops' median figure over the runs, percent of that median; the issue's bar:
within 5%).

Shapes (each op's truth written by the job itself, see fixtures/pipelines/README.md):
- `blas`: fixtures/pipelines/pool_ops.py blas: Mix on OpenBLAS's threads in
  two workers, then Jitter and Smooth (one thread each);
- `omp`: pool_ops.py omp: Mix on torch's OpenMP pool in a main process
  loading its own batches (num_workers=0);
- `nested`: fixtures/pipelines/nested_compose.py: torchvision v1 Composes
  inside Composes, torch on one thread (no pool: both rules must agree);
- `kernels`: fixtures/trace/kernel_pipeline.py: PoolBlur on a Python
  ThreadPoolExecutor (no runtime lotus knows: judged by timing in both),
  Dot on one thread, a background thread.

usage: python3 bench/credit_by_cause.py [--lotus target/release/lotus]
           [--python .venv/bin/python] [--runs 5] [--shapes blas,omp,nested,kernels]
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
PIPELINES = os.path.join(ROOT, "fixtures", "pipelines")


def truth_of(folder):
    """Each op's (ns, calls), summed over the job's truth files."""
    out = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        with open(path) as f:
            data = json.load(f)
        ops = data.get("ops", {})
        calls = data.get("calls", {})
        for name, v in ops.items():
            ns, n = (v["cpu_ns"], v["calls"]) if isinstance(v, dict) else (v, calls.get(name, 0))
            t = out.setdefault(name, [0, 0])
            t[0] += ns
            t[1] += n
    return out


def run_shape(lotus, python, shape, tmp):
    """One traced run of `shape`: its folder and the truth."""
    trace = os.path.join(tmp, "trace")
    truth = os.path.join(tmp, "truth")
    os.makedirs(truth)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=PIPELINES, TRUTH_DIR=truth)
    env.pop("LOTUS_TRACE_DIR", None)
    if shape in ("blas", "omp"):
        job = [python, os.path.join(PIPELINES, "pool_ops.py"), shape]
    elif shape == "nested":
        job = [python, os.path.join(PIPELINES, "nested_compose.py")]
    else:
        job = [
            python,
            os.path.join(ROOT, "fixtures", "trace", "kernel_pipeline.py"),
            "--report-dir",
            truth,
            "--workers",
            "2",
            "--background",
        ]
    subprocess.run([lotus, "trace", "run", "--sample", "--out", trace, "--", *job], env=env, check=True, capture_output=True)
    t = truth_of(truth)
    if shape in ("blas", "omp") and "Signals" in t:
        # The dataset's own figure: its thread's CPU less its children's.
        own = t["Signals"][0] - sum(t.get(n, [0, 0])[0] for n in ("Mix.thread", "Jitter", "Smooth"))
        t["Signals"][0] = max(own, 0)
    return trace, t


def figures(lotus, trace, rule, shape):
    """Each op's figure under `rule`, by the name the truth uses."""
    args = [lotus, "attribute", trace, "--format", "json", "--helpers", rule]
    a = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    out = {}
    for r in a["rows"]:
        if r["kind"] != "op":
            continue
        name = r["name"]
        # An op that hands work to a pool or runs ops inside: pool_ops'
        # ops are leaves (own figure); elsewhere the truth is inclusive.
        value = r["cpu_ns"] if shape in ("blas", "omp") else r["inclusive_cpu_ns"]
        # Rows of one name inside one another are counted once.
        if name in r["path"].split("/")[:-1]:
            continue
        out[name] = out.get(name, 0) + value
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lotus", default=os.path.join(ROOT, "target", "release", "lotus"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--shapes", default="blas,omp,nested,kernels")
    args = p.parse_args()
    skip = {"Mix.thread", "Collation"}  # helpers of the truth; Collation's truth excludes its dump
    print(f"{'shape':8} {'op':22} {'rule':7} {'truth ms':>9} {'median err':>10} {'worst err':>9} {'spread':>7} {'err spread':>10}")
    for shape in args.shapes.split(","):
        runs = []
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                trace, truth = run_shape(args.lotus, args.python, shape, tmp)
                runs.append(
                    (truth, {rule: figures(args.lotus, trace, rule, shape) for rule in ("cause", "timing")})
                )
            print(f"  {shape}: run {i + 1}/{args.runs} done", file=sys.stderr)
        names = sorted({n for truth, _ in runs for n in truth if n not in skip})
        for name in names:
            want = [t.get(name, [0, 0])[0] for t, _ in runs]
            if statistics.median(want) < 0.1e9:
                continue
            for rule in ("cause", "timing"):
                got = [f[rule].get(name, 0) for _, f in runs]
                errs = [(g - w) / w * 100 for g, w in zip(got, want)]
                med = statistics.median(got)
                spread = max(abs(g - med) for g in got) / med * 100 if med else float("inf")
                mid = statistics.median(errs)
                err_spread = max(abs(e - mid) for e in errs)
                print(
                    f"{shape:8} {name[:22]:22} {rule:7} {statistics.median(want) / 1e6:9.1f} "
                    f"{mid:+9.1f}% {max(errs, key=abs):+8.1f}% {spread:6.1f}% {err_spread:9.1f}pt"
                )


if __name__ == "__main__":
    main()
