#!/usr/bin/env python3
"""`lotus predict` against real runs (issue 35): for each pipeline of
fixtures/predict/, trace it once at its defaults, ask `lotus predict` what
each change gives (workers at 0, 1, half and twice the traced value;
persistent workers where it runs several epochs; without its heaviest op
by its own per-op truth; for `pooled`, traced sampled with its pools as
they come, one thread per pool; for `gc_heavy`, the look-alike of a job
nobody here wrote, gc.freeze(), and the changes lotus ranks first), run
each change for real (plain python,
no lotus) and compare: predicted, 90% interval, measured, error, covered,
and with `--repeat R` (R > 1) the real runs' own spread beside the error.

    python3 bench/predict.py [--lotus PATH] [--python PATH] [--repeat R]
                             [--pipelines a,b] [--batches B] [--threads N]
                             [--json OUT]
                             [--fake-predict]

`--fake-predict` is for testing this script only: it predicts the traced
loop for every change (a +-15% interval), and every figure it gives is
marked FAKE. The measured side (real runs, the table, the summary) is the
same either way.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures", "predict")

# name, script, the lotus trace flags its ops need (plain functions: --op).
PIPELINES = [
    ("vision_tv", "vision_tv.py", []),
    ("vision_albu", "vision_albu.py", []),
    ("audio", "audio.py", []),
    ("text", "text.py", ["--op", "__main__:clean_text", "--op", "__main__:word_dropout"]),
    (
        "custom",
        "custom.py",
        ["--op", "__main__:jitter", "--op", "__main__:window_stats", "--op", "__main__:encode_fields", "--op", "__main__:resample"],
    ),
    ("stream", "stream.py", []),
]

# The job nobody here wrote, as its look-alike (fixtures/pipelines/
# gc_heavy.py: a million annotation records in the main process's heap,
# which each forked worker's first collections walk): traced with the
# tracer's gc spans (LOTUS_TRACE_GC=1); its flags are its own
# (`--freeze` is gc.freeze() before the loop); no `--threads`.
JOBS = [
    ("gc_heavy", os.path.join("..", "pipelines", "gc_heavy.py"), []),
]
JOB_FLAGS = {"--gc-freeze": ["--freeze"], "--persistent-workers": ["--persistent"]}

# Pipelines traced with their pools as they come (`--threads 0`) and
# sampled, whose extra change is one thread per pool (`--threads 1`).
POOLED = [
    ("pooled", "pooled.py", ["--sample", "--op", "__main__:project", "--op", "__main__:augment"]),
]

# The issue's bar (issue 35, "What it must show").
MEDIAN_MAX = 10.0
WORST_MAX = 25.0
COVERAGE_MIN = 0.80


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why."""


class NoPredict(Exception):
    """The lotus binary has no `predict`: nothing to benchmark."""


def run_cmd(cmd, timeout, what, env=None):
    """Runs `cmd` (in `env`, or this one); its stdout. Raises BenchError
    naming `what` on failure."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: still running after {timeout} s (--timeout), stopped: {' '.join(cmd)}")
    except OSError as e:
        raise BenchError(f"{what}: cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise BenchError(f"{what}: exit {p.returncode}: {' '.join(cmd)}\n  " + "\n  ".join(tail))
    return p.stdout


def read_report(path, what):
    try:
        with open(path) as f:
            r = json.load(f)
        float(r["loop_s"])
        return r
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchError(f"{what}: no usable report in {path}: {e}")


def scenarios(traced, pooled=False, job=False):
    """The changes to check, from the traced run's own report: lotus's
    flags and the script's for each (the script's take the same values;
    a pooled pipeline's one thread per pool too; the job's gc.freeze())."""
    w = int(traced["workers"])
    out = [(["--threads", "1"], ["--threads", "1"])] if pooled else []
    if job:
        out.append((["--gc-freeze"], JOB_FLAGS["--gc-freeze"]))
    for n in sorted({0, 1, max(1, w // 2), 2 * w} - {w}):
        out.append((["--workers", str(n)], ["--workers", str(n)]))
    if int(traced["epochs"]) > 1 and w > 0 and not traced.get("persistent"):
        out.append((["--persistent-workers"], JOB_FLAGS["--persistent-workers"] if job else ["--persistent"]))
    op = heaviest_op(traced)
    if op is not None:
        out.append((["--without", op], ["--without", op]))
    return out


def heaviest_op(report):
    """The op `--without` can take with the most thread CPU in the
    script's own truth; None where it has none."""
    ops = report.get("ops", {})
    cands = [(ops[o]["cpu_s"], o) for o in report.get("removable", []) if o in ops]
    return max(cands)[1] if cands else None


class LotusPredictor:
    """`lotus predict DIR --format json FLAGS`: the scenario for FLAGS."""

    fake = False

    def __init__(self, lotus, timeout):
        self.lotus = lotus
        self.timeout = timeout

    def predict(self, trace_dir, flags, traced_loop_s):
        try:
            out = run_cmd([self.lotus, "predict", trace_dir, "--format", "json", *flags], self.timeout, f"lotus predict {' '.join(flags)}")
        except BenchError as e:
            if "unrecognized subcommand 'predict'" in str(e):
                raise NoPredict(f"{self.lotus} has no `predict` command: build lotus from a branch that has it, or pass --fake-predict (testing only) to check the rest")
            raise
        try:
            doc = json.loads(out)
            if doc.get("schema") != "lotus.predict/1":
                raise ValueError(f"schema {doc.get('schema')!r}, not lotus.predict/1")
            scen = doc["scenarios"]
            want = " ".join(flags)
            match = [s for s in scen if s.get("change") == want]
            if not match and len(scen) == 1:
                match = scen
            if not match:
                raise ValueError(f"no scenario for {want!r} among {[s.get('change') for s in scen]}")
            s = match[0]
            return {
                "loop_s": float(s["loop_s"]),
                "low_s": float(s["low_s"]),
                "high_s": float(s["high_s"]),
                "reason": s.get("reason", ""),
                "measured_loop_s": float(doc["measured"]["loop_s"]),
            }
        except (ValueError, KeyError, TypeError) as e:
            raise BenchError(f"lotus predict {' '.join(flags)}: unreadable output: {e}")


class FakePredictor:
    """TESTING ONLY: predicts the traced loop for every change. Not a
    model: it exists so that the rest of the benchmark can be run and
    checked before `lotus predict` exists."""

    fake = True

    def predict(self, trace_dir, flags, traced_loop_s):
        return {
            "loop_s": traced_loop_s,
            "low_s": traced_loop_s * 0.85,
            "high_s": traced_loop_s * 1.15,
            "reason": "FAKE (--fake-predict, testing only): the traced loop",
            "measured_loop_s": traced_loop_s,
        }


def ranked_changes(lotus, trace_dir, timeout):
    """`lotus predict DIR` with no flag: its changes, fastest first."""
    out = run_cmd([lotus, "predict", trace_dir, "--format", "json"], timeout, "lotus predict (ranked)")
    try:
        return [s["change"] for s in json.loads(out)["scenarios"]]
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError(f"lotus predict {trace_dir}: unreadable ranking: {e}")


def lotus_loop_s(lotus, trace_dir, timeout):
    """The loop lotus's verdict measured in the trace, s."""
    out = run_cmd([lotus, "trace", "stats", "-q", "--format", "json", trace_dir], timeout, "lotus trace stats")
    try:
        return json.loads(out)["verdict"]["loop_ns"] / 1e9
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError(f"lotus trace stats {trace_dir}: no verdict loop_ns: {e}")


def real_runs(py, script, args, repeat, tmp, timeout):
    """The script's own loop_s over `repeat` plain runs (no lotus)."""
    loops = []
    for i in range(repeat):
        rep = os.path.join(tmp, f"real-{len(os.listdir(tmp))}.json")
        run_cmd([py, script, *args, "--report", rep], timeout, f"{os.path.basename(script)} {' '.join(args)}")
        loops.append(read_report(rep, os.path.basename(script))["loop_s"])
    return loops


def summarize(rows):
    """Median and worst |error| (%), the interval's coverage, over rows
    with a prediction and a measurement; with repeated real runs, their
    median spread (%) and how many errors are within their row's spread."""
    errs = [abs(r["error_pct"]) for r in rows if r.get("error_pct") is not None]
    cov = [r["covered"] for r in rows if r.get("covered") is not None]
    spread = [r for r in rows if r.get("spread_pct") is not None and r.get("error_pct") is not None]
    return {
        "cases": len(errs),
        "median_abs_error_pct": statistics.median(errs) if errs else None,
        "worst_abs_error_pct": max(errs) if errs else None,
        "coverage": sum(cov) / len(cov) if cov else None,
        "median_spread_pct": statistics.median(r["spread_pct"] for r in spread) if spread else None,
        "within_spread": sum(abs(r["error_pct"]) <= r["spread_pct"] for r in spread),
        "with_spread": len(spread),
    }


def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def print_table(name, traced, rows, fake, out=sys.stdout):
    mark = " FAKE" if fake else ""
    print(f"\n{name}: traced at {traced['workers']} workers, {traced['epochs']} epoch(s), {traced['batches']} batches", file=out)
    print(
        f"  loop: script {traced['loop_s']:.3f} s, lotus {fmt(traced.get('lotus_loop_s'), '.3f')} s"
        f" ({fmt(traced.get('timer_diff_pct'), '+.1f')}%)",
        file=out,
    )
    if traced.get("ranked"):
        print(f"  lotus predict ranks first: {', '.join(traced['ranked'][:4])}", file=out)
    head = f"  {'change':<28} {'predicted':>10} {'interval':>17} {'measured':>9} {'error':>8} {'covered':>8} {'spread':>7}"
    print(head, file=out)
    for r in rows:
        p = r.get("predicted")
        if p is None:
            why = " | ".join(line.strip() for line in r.get("error", "no prediction").splitlines() if line.strip())
            print(f"  {r['change']:<28} {'n/a':>10} {'':>17} {fmt(r.get('measured_s'), '.3f'):>9}   ({why[:240]})", file=out)
            continue
        iv = f"{p['low_s']:.2f}-{p['high_s']:.2f}"
        cov = "-" if r["covered"] is None else ("yes" if r["covered"] else "no")
        apart = "  (outside the model: not in the bars)" if r.get("outside_model") else ""
        print(
            f"  {r['change']:<28} {p['loop_s']:>10.3f} {iv:>17} {fmt(r.get('measured_s'), '.3f'):>9}"
            f" {fmt(r.get('error_pct'), '+.1f'):>7}% {cov:>8} {fmt(r.get('spread_pct'), '.1f'):>6}%{mark}{apart}",
            file=out,
        )


def bench_pipeline(name, script_file, trace_flags, a, predictor, tmp):
    script = os.path.join(FIX, script_file)
    pooled = any(name == n for n, _, _ in POOLED)
    job = any(name == n for n, _, _ in JOBS)
    threads = 0 if pooled else a.threads
    extra = [] if job else ["--threads", str(threads)]
    extra += ["--batches", str(a.batches)] if a.batches else []
    env = dict(os.environ, LOTUS_TRACE_GC="1") if job else None
    tdir = os.path.join(tmp, f"trace-{name}")
    rep = os.path.join(tmp, f"traced-{name}.json")
    print(f"{name}: tracing", file=sys.stderr)
    run_cmd([a.lotus, "trace", "run", "--out", tdir, *trace_flags, "--", a.python, script, *extra, "--report", rep], a.timeout, f"lotus trace run {name}", env)
    traced = read_report(rep, f"{name} (traced)")
    traced["lotus_loop_s"] = lotus_loop_s(a.lotus, tdir, a.timeout)
    traced["timer_diff_pct"] = 100.0 * (traced["loop_s"] - traced["lotus_loop_s"]) / traced["lotus_loop_s"]
    rows = []
    if job:
        # The issue's bar for this job: gc.freeze() and persistent workers
        # first among the changes lotus ranks (a change of workers apart).
        traced["ranked"] = ranked_changes(a.lotus, tdir, a.timeout)
    for flags, sargs in scenarios(traced, pooled, job):
        change = " ".join(flags)
        # The scenario's flags last: they win over the pipeline's own.
        run_args = extra + sargs
        row = {"change": change, "script_args": run_args, "predicted": None, "measured_s": None, "error_pct": None, "covered": None}
        try:
            row["predicted"] = predictor.predict(tdir, flags, traced["lotus_loop_s"])
        except BenchError as e:
            row["error"] = str(e)
            print(f"{name}: {e}", file=sys.stderr)
        print(f"{name}: running {change} for real", file=sys.stderr)
        try:
            row["measured_runs_s"] = real_runs(a.python, script, run_args, a.repeat, tmp, a.timeout)
            row["measured_s"] = statistics.median(row["measured_runs_s"])
            runs = row["measured_runs_s"]
            if len(runs) > 1:
                # The job's own run-to-run spread: the prediction's error
                # is read against it.
                row["spread_pct"] = 100.0 * (max(runs) - min(runs)) / row["measured_s"]
        except BenchError as e:
            row["error"] = str(e)
            print(f"{name}: {e}", file=sys.stderr)
        p, m = row["predicted"], row["measured_s"]
        if p is not None and m:
            row["error_pct"] = 100.0 * (p["loop_s"] - m) / m
            row["covered"] = p["low_s"] <= m <= p["high_s"]
        # On a pipeline whose pools oversubscribe the CPUs as traced, only
        # one thread per pool is within the model (which keeps the pools'
        # spin as traced under every other change; docs: predict.md):
        # the others are shown, apart from the bars.
        row["outside_model"] = pooled and flags != ["--threads", "1"]
        rows.append(row)
    if not a.keep:
        shutil.rmtree(tdir, ignore_errors=True)
    return {"pipeline": name, "script": os.path.relpath(script, ROOT), "traced": traced, "rows": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lotus", default=os.path.join(ROOT, "target", "debug", "lotus"), help="the lotus binary (default target/debug/lotus)")
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    p.add_argument("--python", default=venv if os.path.exists(venv) else sys.executable, help="the Python that runs the pipelines (default .venv's)")
    p.add_argument("--repeat", type=int, default=1, help="real runs per setting; their median is measured (default 1)")
    p.add_argument("--pipelines", help=f"comma-separated, of: {', '.join(n for n, _, _ in PIPELINES + POOLED + JOBS)} (default all)")
    p.add_argument("--batches", type=int, help="batches per epoch for every pipeline (default: each script's own)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the pipelines' --threads (their pools' threads), in the traced and the real runs alike (default 1; 0: as they come); `pooled` is traced with 0",
    )
    p.add_argument("--timeout", type=int, default=300, help="seconds any one command may take (default 300)")
    p.add_argument("--json", metavar="OUT", help="write everything (traced runs, scenarios, predictions, real runs) here")
    p.add_argument("--keep", metavar="DIR", help="keep the traces and reports in DIR (a new folder)")
    p.add_argument("--fake-predict", action="store_true", help="TESTING ONLY: a stub predictor (the traced loop for every change); its figures say FAKE")
    a = p.parse_args(argv)
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.threads < 0:
        p.error("--threads must be at least 0")
    if a.batches is not None and a.batches < 1:
        p.error("--batches must be at least 1")
    names = [n for n, _, _ in PIPELINES + POOLED + JOBS]
    chosen = a.pipelines.split(",") if a.pipelines else names
    bad = [c for c in chosen if c not in names]
    if bad:
        p.error(f"--pipelines {bad[0]}: no such pipeline; the pipelines: {', '.join(names)}")
    if not os.access(a.lotus, os.X_OK):
        p.error(f"--lotus {a.lotus}: not an executable file (build it: cargo build -p lotus-cli)")
    predictor = FakePredictor() if a.fake_predict else LotusPredictor(a.lotus, a.timeout)
    if a.keep:
        os.makedirs(a.keep)  # a new folder: never one someone else made
        tmp = a.keep
    else:
        tmp = tempfile.mkdtemp(prefix="lotus-bench-predict-")
    results = []
    failed = False
    try:
        for name, script, flags in PIPELINES + POOLED + JOBS:
            if name not in chosen:
                continue
            try:
                res = bench_pipeline(name, script, flags, a, predictor, tmp)
            except NoPredict as e:
                print(f"bench/predict.py: {e}", file=sys.stderr)
                return 2
            except BenchError as e:
                print(f"{name}: {e}", file=sys.stderr)
                results.append({"pipeline": name, "error": str(e)})
                failed = True
                continue
            failed |= any("error" in r for r in res["rows"])
            results.append(res)
            print_table(name, res["traced"], res["rows"], predictor.fake)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    every = [r for res in results for r in res.get("rows", [])]
    rows = [r for r in every if not r.get("outside_model")]
    apart = summarize([r for r in every if r.get("outside_model")])
    s = summarize(rows)
    fake = " FAKE (--fake-predict: testing only, not lotus's predictions)" if predictor.fake else ""
    print(f"\nsummary{fake}: {s['cases']} case(s)")
    if s["cases"]:
        print(
            f"  median |error| {s['median_abs_error_pct']:.1f}% (bar {MEDIAN_MAX:.0f}%), worst {s['worst_abs_error_pct']:.1f}% (bar {WORST_MAX:.0f}%),"
            f" interval covered {100 * s['coverage']:.0f}% (bar {100 * COVERAGE_MIN:.0f}%)"
        )
    if s["with_spread"]:
        print(
            f"  the real runs' own spread (max - min over --repeat {a.repeat}, of their median): median {s['median_spread_pct']:.1f}%;"
            f" the error within its row's spread in {s['within_spread']} of {s['with_spread']} case(s)"
        )
    if apart["cases"]:
        print(
            f"  apart: {apart['cases']} case(s) outside the model (other changes on oversubscribed pools):"
            f" median |error| {apart['median_abs_error_pct']:.1f}%, worst {apart['worst_abs_error_pct']:.1f}%"
        )
    timers = [res["traced"]["timer_diff_pct"] for res in results if "traced" in res]
    if timers:
        print(f"  script loop timer against lotus's verdict loop: worst {max(map(abs, timers)):.2f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "lotus.bench-predict/1", "fake": predictor.fake, "repeat": a.repeat, "summary": s, "outside_model": apart, "pipelines": results}, f, indent=1)
    if failed:
        print("some steps failed (see above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
