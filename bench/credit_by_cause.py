"""Credit by cause against the earlier rule (by timing), per pipeline shape:
each op's error against the pipeline's own timers and its run-to-run
spread, both rules on the same traces, and the workers' CPU outside every
op.

Each shape runs --runs times (`lotus trace run --sample` at lotus's
defaults); each trace is attributed twice (`lotus attribute DIR --format
json`, then with `--helpers timing`), so the two rules differ by nothing but
the rule. Per op of at least 0.1 s (parents included: their figure is
inclusive, as their timers are): the median error against the truth, the
worst, the spread of lotus's figure (the largest distance of a run's figure
from the median, percent of the median), the spread of the truth itself
(the job's own CPU moves between runs: a pool spins more on a busier
machine) and the spread of the error (what lotus adds to the job's own
variation: the issue's bar, within 5%). Per shape: the workers' CPU outside
every op (`outside any op (worker)`), percent of the workers' CPU.

Shapes (each op's truth written by the job itself, see
fixtures/pipelines/README.md), the issue's seven shapes written again:
- `blas`: pool_ops.py blas: Mix on OpenBLAS's threads in two workers (an
  audio-feature-like matrix op), then Jitter and Smooth (one thread each);
- `omp`: pool_ops.py omp: Mix on torch's OpenMP pool in a main process
  loading its own batches (num_workers=0);
- `hf-timm`: hf_timm.py: a Hugging Face `datasets` Dataset with
  `set_transform` running timm's RandAugment, timm's Mixup on the batch;
- `tv2-mixup`: tv2_mixup.py: torchvision v2 with RandAugment, MixUp/CutMix
  in the collate_fn;
- `tokenize`: tokenize_collate.py spawn: Hugging Face tokenizers (rayon) in
  the collate_fn of two spawn workers;
- `executor`: executor_ops.py: Prefetch hands NumPy work to a
  ThreadPoolExecutor and returns; Blend runs while it computes;
- `iterable`: plain_functions.py iterable (+ --op): an IterableDataset
  of plain functions, split between workers (a webdataset-like stream);
- `spawn`, `forkserver`, `fork`: main_ops.py METHOD (+ --op): the script's
  own functions in workers of each start method;
- `albu`: albu_cv2.py: albumentations on cv2-decoded JPEGs;
- `kornia`: kornia_batch.py: kornia on each batch in the collate_fn;
- `nested`: nested_compose.py: torchvision v1 Composes inside Composes;
- `kernels`: fixtures/trace/kernel_pipeline.py: PoolBlur on a Python
  ThreadPoolExecutor (no runtime lotus knows: judged by timing in both),
  Dot on one thread, a background thread;
- `py312`: getitem_calls.py map on Python 3.12 (--python312), no flags:
  the dataset's direct calls are spans of their own.

usage: python3 bench/credit_by_cause.py [--lotus target/release/lotus]
           [--python .venv/bin/python] [--python312 .venv312/bin/python]
           [--runs 5] [--shapes blas,omp,...]
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


PLAIN_OPS = ["--op", "plain_ops:decode", "--op", "plain_ops:augment", "--op", "plain_ops:Normalizer.norm*", "--op", "plain_ops:tiles", "--op", "__main__:sample"]
MAIN_OPS = ["--op", "__main__:heavy", "--op", "__main__:Scale.__call__"]

# shape: (script under fixtures/pipelines, its arguments, lotus's flags)
SHAPES = {
    "blas": ("pool_ops.py", ["blas"], []),
    "omp": ("pool_ops.py", ["omp"], []),
    "hf-timm": ("hf_timm.py", [], []),
    "tv2-mixup": ("tv2_mixup.py", [], []),
    "tokenize": ("tokenize_collate.py", ["spawn"], []),
    "executor": ("executor_ops.py", [], []),
    "iterable": ("plain_functions.py", ["iterable"], PLAIN_OPS),
    "spawn": ("main_ops.py", ["spawn"], MAIN_OPS),
    "forkserver": ("main_ops.py", ["forkserver"], MAIN_OPS),
    "fork": ("main_ops.py", ["fork"], MAIN_OPS),
    "albu": ("albu_cv2.py", [], []),
    "kornia": ("kornia_batch.py", [], []),
    "nested": ("nested_compose.py", [], []),
    "kernels": (None, [], []),
    "py312": ("getitem_calls.py", ["map"], []),
}


def run_shape(lotus, python, shape, tmp):
    """One traced run of `shape`: its folder and the truth."""
    trace = os.path.join(tmp, "trace")
    truth = os.path.join(tmp, "truth")
    os.makedirs(truth)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=PIPELINES, TRUTH_DIR=truth)
    env.pop("LOTUS_TRACE_DIR", None)
    env.pop("LOTUS_TRACE_OPS", None)
    script, argv, flags = SHAPES[shape]
    if script is None:
        job = [
            python,
            os.path.join(ROOT, "fixtures", "trace", "kernel_pipeline.py"),
            "--report-dir",
            truth,
            "--workers",
            "2",
            "--background",
        ]
    else:
        job = [python, os.path.join(PIPELINES, script), *argv]
    r = subprocess.run([lotus, "trace", "run", "--sample", "--out", trace, *flags, "--", *job], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{shape}: lotus trace run exited {r.returncode}: {r.stderr[-2000:]}")
    t = truth_of(truth)
    if shape in ("blas", "omp") and "Signals" in t:
        # The dataset's own figure: its thread's CPU less its children's.
        own = t["Signals"][0] - sum(t.get(n, [0, 0])[0] for n in ("Mix.thread", "Jitter", "Smooth"))
        t["Signals"][0] = max(own, 0)
    return trace, t


# Shapes whose op hands work to a pool: their ops are compared by their own
# figure (their thread's and their pool's CPU over their calls, as the
# truth), not the inclusive one (which adds the pool's spin after them).
POOL_SHAPES = ("blas", "omp", "tokenize")
# The row a truth name is lotus's row of, where they differ: the
# tokenizer's timer is inside the DataLoader's collate_fn, lotus's row.
ROW_OF = {"tokenize": {"Tokenize": "Collation"}}


def figures(lotus, trace, rule, shape):
    """Each op's figure under `rule`, by the name the truth uses, and the
    workers' CPU outside every op, percent of the workers' CPU."""
    args = [lotus, "attribute", trace, "--format", "json", "--helpers", rule]
    a = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    out = {}
    # The workers' CPU: their rows and the ops' (as tests/trace_startup.rs
    # counts it; a job with workers runs its ops there).
    worker_cpu = outside = 0
    has_workers = False
    for r in a["rows"]:
        if r["kind"] == "op" or r["name"].endswith("(worker)"):
            worker_cpu += r["cpu_ns"]
        has_workers |= r["name"].endswith("(worker)")
        if r["name"] == "outside any op (worker)":
            outside += r["cpu_ns"]
        if r["kind"] != "op":
            continue
        name = r["name"]
        # An op that hands work to a pool or runs ops inside: pool_ops'
        # ops are leaves (own figure); elsewhere the truth is inclusive.
        value = r["cpu_ns"] if shape in POOL_SHAPES else r["inclusive_cpu_ns"]
        # Rows of one name inside one another are counted once.
        if name in r["path"].split("/")[:-1]:
            continue
        out[name] = out.get(name, 0) + value
    return out, (outside / worker_cpu * 100 if has_workers and worker_cpu else None)


def spread(values):
    """The largest distance of a value from their median, percent of it."""
    med = statistics.median(values)
    return max(abs(v - med) for v in values) / med * 100 if med else float("inf")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lotus", default=os.path.join(ROOT, "target", "release", "lotus"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--python312", default=os.path.join(ROOT, ".venv312", "bin", "python"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--shapes", default=",".join(SHAPES))
    args = p.parse_args()
    skip = {"Mix.thread", "Collation", "Tokenize.thread"}  # helpers of the truth; Collation's truth excludes its dump
    print(
        f"{'shape':10} {'op':24} {'rule':7} {'truth ms':>9} {'median err':>10} {'worst err':>9} "
        f"{'spread':>7} {'truth spread':>12} {'err spread':>10}"
    )
    outside_rows = []
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            sys.exit(f"credit_by_cause.py: no shape {shape!r}; the shapes: {', '.join(SHAPES)}")
        python = args.python312 if shape == "py312" else args.python
        runs = []
        try:
            for i in range(args.runs):
                with tempfile.TemporaryDirectory() as tmp:
                    trace, truth = run_shape(args.lotus, python, shape, tmp)
                    runs.append((truth, {rule: figures(args.lotus, trace, rule, shape) for rule in ("cause", "timing")}))
                print(f"  {shape}: run {i + 1}/{args.runs} done", file=sys.stderr)
        except RuntimeError as e:
            # A shape whose packages are missing here: said, the others go on.
            print(f"  {shape}: skipped: {e}", file=sys.stderr)
            continue
        outside = [f["cause"][1] for _, f in runs if f["cause"][1] is not None]
        if outside:
            outside_rows.append((shape, statistics.median(outside), max(outside)))
        names = sorted({n for truth, _ in runs for n in truth if n not in skip})
        for name in names:
            want = [t.get(name, [0, 0])[0] for t, _ in runs]
            if statistics.median(want) < 0.1e9:
                continue
            for rule in ("cause", "timing"):
                row = ROW_OF.get(shape, {}).get(name, name)
                got = [f[rule][0].get(row, 0) for _, f in runs]
                errs = [(g - w) / w * 100 for g, w in zip(got, want)]
                mid = statistics.median(errs)
                err_spread = max(abs(e - mid) for e in errs)
                print(
                    f"{shape:10} {name[:24]:24} {rule:7} {statistics.median(want) / 1e6:9.1f} "
                    f"{mid:+9.1f}% {max(errs, key=abs):+8.1f}% {spread(got):6.1f}% {spread(want):11.1f}% {err_spread:9.1f}pt"
                )
    print()
    print(f"{'shape':10} {'workers outside every op, % of their CPU: median':>50} {'worst':>7}")
    for shape, med, worst in outside_rows:
        print(f"{shape:10} {med:50.1f} {worst:7.1f}")


if __name__ == "__main__":
    main()
