"""lotus's per-op CPU, with its defaults, against a pipeline's own timers,
over repeated runs (issue 24's figure: no row of 0.1 s or more off by more
than 10% in 10 runs of the recipe).

Each run: `lotus trace run --sample` (no -F: lotus's default frequency) of
a pipeline under fixtures/pipelines/ (default: tv2_mixup.py, the
torchvision v2 recipe with RandomApply, RandomChoice, RandAugment and
MixUp/CutMix in the collate_fn), then `lotus attribute DIR --format json`.
The truth is the pipeline's own thread-CPU timers (fixtures/pipelines/
truth.py), read in the same run. Per op (by name; rows of one name
summed, inclusive), the error of lotus's CPU against the timer; printed:
each run's worst error among ops of 0.1 s or more, and each op's worst over
the runs.

usage: python3 bench/pipeline_repeat.py [--lotus target/release/lotus]
           [--python .venv/bin/python] [--runs 10] [--script tv2_mixup.py]
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
PIPELINES = os.path.join(ROOT, "fixtures", "pipelines")


def truth(folder):
    ops = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        with open(path) as f:
            for name, t in json.load(f)["ops"].items():
                ops[name] = ops.get(name, 0) + t["cpu_ns"]
    return ops


def lotus_ops(attribution):
    ops = {}
    for r in attribution["rows"]:
        if r["kind"] != "op":
            continue
        name = r["name"]
        # A row inside a row of the same name is in that row's figure.
        if name in r["path"].split("/")[:-1]:
            continue
        ops[name] = ops.get(name, 0) + r["inclusive_cpu_ns"]
    return ops


def one_run(args):
    with tempfile.TemporaryDirectory(prefix="lotus-bench-") as tmp:
        trace = os.path.join(tmp, "trace")
        truth_dir = os.path.join(tmp, "truth")
        os.mkdir(truth_dir)
        env = dict(os.environ, TRUTH_DIR=truth_dir, PYTHONPATH=PIPELINES, PYTHONDONTWRITEBYTECODE="1")
        subprocess.run(
            [args.lotus, "trace", "run", "--sample", "--out", trace, "--", args.python, os.path.join(PIPELINES, args.script)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out = subprocess.run([args.lotus, "attribute", trace, "--format", "json"], check=True, capture_output=True)
        a = json.loads(out.stdout)
        return a["frequency_hz"], lotus_ops(a), truth(truth_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lotus", default=os.path.join(ROOT, "target", "release", "lotus"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--script", default="tv2_mixup.py")
    args = ap.parse_args()
    worst = {}
    for i in range(args.runs):
        hz, got, want = one_run(args)
        errors = {
            name: (got.get(name, 0) - ns) / ns for name, ns in want.items() if ns >= 100_000_000
        }
        for name, e in errors.items():
            if abs(e) > abs(worst.get(name, 0.0)):
                worst[name] = e
        name, e = max(errors.items(), key=lambda kv: abs(kv[1]))
        print(f"run {i + 1:2}: {hz} Hz, worst op of 0.1 s or more: {name} {100 * e:+.1f}% ({len(errors)} such ops)")
        sys.stdout.flush()
    print("each op's worst error over the runs (lotus against the pipeline's own timer):")
    for name, e in sorted(worst.items(), key=lambda kv: -abs(kv[1])):
        print(f"  {name:20} {100 * e:+.1f}%")
    off = [n for n, e in worst.items() if abs(e) > 0.10]
    print(f"ops off by more than 10% in any run: {len(off)}" + (f" ({', '.join(off)})" if off else ""))


if __name__ == "__main__":
    main()
