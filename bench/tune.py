#!/usr/bin/env python3
"""`lotus tune` against the grid it searches (issue 35): for each
pipeline, every setting of the grid (num_workers 0, 1, 2, 4 x
prefetch_factor 2, 4 x persistent_workers off, on; no prefetch or
persistence without workers) is run for real (plain python, the script's
own loop timer); then `lotus tune --trials 3` runs from the script's
defaults, and its best setting is run again for real. Printed per
pipeline: the grid's best and worst, the setting as written, tune's
trials (predicted against measured), and tune's best as a share of the
grid's best loop (the issue asks at least 90%: best_grid / tune_best >=
0.9), and whether tune ever returned a setting slower than the start.

    python3 bench/tune.py [--lotus PATH] [--python PATH] [--pipelines a,b]
                          [--repeat R] [--json OUT]

The pipelines are the six of fixtures/predict/ that bench/predict.py
checks (vision_tv, vision_albu, audio, text, custom, stream; each with
`--threads 1`, as there), fixtures/pipelines/sleepy_loader.py (waits,
not CPU) and fixtures/pipelines/gc_heavy.py (fork, a young inherited
heap). One thread per pool as a tune trial (fixtures/predict/pooled.py)
is checked by tests/predict.rs, not here: its grid would double.
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PIPELINES = {
    "vision_tv": ("fixtures/predict/vision_tv.py", ["--threads", "1"]),
    "vision_albu": ("fixtures/predict/vision_albu.py", ["--threads", "1"]),
    "audio": ("fixtures/predict/audio.py", ["--threads", "1"]),
    "text": ("fixtures/predict/text.py", ["--threads", "1"]),
    "custom": ("fixtures/predict/custom.py", ["--threads", "1"]),
    "stream": ("fixtures/predict/stream.py", ["--threads", "1"]),
    "sleepy": ("fixtures/pipelines/sleepy_loader.py", []),
    "gc_heavy": ("fixtures/pipelines/gc_heavy.py", []),
}


def run(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = "\n  ".join((p.stderr or p.stdout).strip().splitlines()[-5:])
        sys.exit(f"bench/tune.py: exit {p.returncode}: {' '.join(cmd)}\n  {tail}")
    return p.stdout


def real(py, script, base, flags, repeat, tmp):
    """The script's own loop, median of `repeat` plain runs, s."""
    loops = []
    for i in range(repeat):
        rep = os.path.join(tmp, f"r{len(os.listdir(tmp))}.json")
        run([py, script, *base, *flags, "--report", rep])
        with open(rep) as f:
            loops.append(json.load(f)["loop_s"])
    return statistics.median(loops)


def flags_of(workers, prefetch, persistent):
    out = ["--workers", str(workers)]
    if workers:
        out += ["--prefetch", str(prefetch)]
        if persistent:
            out.append("--persistent")
    return out


def grid():
    seen = []
    for w, k, p in itertools.product([0, 1, 2, 4], [2, 4], [False, True]):
        key = (w, k if w else 2, p if w else False)
        if key not in seen:
            seen.append(key)
    return seen


def loader_flags(loader):
    """The script's flags for a LOTUS_LOADER value ("" = as written)."""
    kv = dict(x.split("=") for x in loader.split(",") if x)
    if not kv:
        return []
    w = int(kv.get("workers", 2))
    return flags_of(w, int(kv.get("prefetch", 2)), kv.get("persistent") == "1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lotus", default=os.path.join(ROOT, "target", "debug", "lotus"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    results = []
    for name in a.pipelines.split(","):
        if name not in PIPELINES:
            sys.exit(f"bench/tune.py: --pipelines: unknown {name!r} (of {', '.join(PIPELINES)})")
        rel, base = PIPELINES[name]
        script = os.path.join(ROOT, rel)
        with tempfile.TemporaryDirectory() as tmp:
            runs = os.path.join(tmp, "runs")
            os.mkdir(runs)
            measured = {}
            for w, k, p in grid():
                measured[(w, k, p)] = real(a.python, script, base, flags_of(w, k, p), a.repeat, runs)
            as_written = real(a.python, script, base, [], a.repeat, runs)
            out = run([a.lotus, "tune", "--trials", "3", "--format", "json", "--out", os.path.join(tmp, "tune"),
                       "--", a.python, script, *base])
            t = json.loads(out)
            best = t["trials"][t["best"]]
            tuned = real(a.python, script, base, loader_flags(best["loader"]), a.repeat, runs)
        best_key = min(measured, key=measured.get)
        grid_best = measured[best_key]
        share = grid_best / tuned
        r = {
            "pipeline": name,
            "grid": {f"w{w}_k{k}_p{int(p)}": v for (w, k, p), v in measured.items()},
            "grid_best": grid_best,
            "grid_best_setting": best_key,
            "grid_worst": max(measured.values()),
            "as_written": as_written,
            "trials": t["trials"],
            "stopped": t["stopped"],
            "tuned_setting": best["setting"],
            "tuned_real": tuned,
            "share_of_grid_best": share,
            "slower_than_start": tuned > as_written * 1.05 and t["best"] != 0,
        }
        results.append(r)
        print(f"== {name}: grid best {grid_best:.2f} s (workers {best_key[0]}, prefetch {best_key[1]}, persistent {best_key[2]}), worst {r['grid_worst']:.2f} s, as written {as_written:.2f} s")
        for tr in t["trials"]:
            pred = "" if tr["predicted_s"] is None else f", predicted {tr['predicted_s']:.2f} s ({tr['low_s']:.2f}-{tr['high_s']:.2f})"
            print(f"   trial {tr['n']} ({tr['setting']}): measured {tr['measured_s']:.2f} s{pred}")
        print(f"   stopped: {t['stopped']}")
        print(f"   tune's best ({best['setting']}) run again: {tuned:.2f} s = {share * 100:.0f}% of the grid's best; {len(t['trials'])} trials")
    ok = all(r["share_of_grid_best"] >= 0.9 and len(r["trials"]) <= 3 for r in results)
    print(f"\nsummary: tune within 90% of the grid's best in {sum(r['share_of_grid_best'] >= 0.9 for r in results)} of {len(results)} pipelines, never slower than the start: {not any(r['slower_than_start'] for r in results)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
