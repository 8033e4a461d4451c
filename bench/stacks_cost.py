"""Call stacks (`lotus trace run --sample --stacks fp|dwarf`): what they
cost the job, against perf's own call graphs at the same frequency, and
what they cost the folder.

The job is a C program built here with frame pointers (`-O0
-fno-omit-frame-pointer`, so leaf functions keep theirs too): it recurses
--depth calls deep, then spins a fixed amount of work, and prints the CPU
time its process ran (CLOCK_PROCESS_CPUTIME_ID) at its end. That figure
is what the sampling costs it: the kernel walks each sample's chain in the
interrupted thread, so the walk's time is the job's; lotus's own threads
(draining, naming, writing) are not counted in it. Each rep runs, in turn:

- bare: the program alone;
- none: `lotus trace run --sample --counters none --stacks none`;
- fp: the same with `--stacks fp`;
- dwarf: the same with `--stacks dwarf` (user stack copies of up to
  64 KiB, unwound by lotus's writer thread through the unwind tables);
- dwarf before: the same with the lotus --before names (another build, to
  compare two in one run: e.g. one that copied 8 KiB);
- perf: `perf record -F <Hz>` (no call graph), where `perf` exists;
- perf -g: `perf record -g` (frame pointers);
- perf dwarf: `perf record --call-graph dwarf` (8 KiB stack copies);
- perf dwarf 64K: `perf record --call-graph dwarf,65528` (lotus's size).

--frame-bytes gives each of the program's frames that many bytes of
locals (0: none), so that its stack is as deep in bytes as a Python
job's under native code (the kernel copies the stack up to its top or the
copy's size, whichever is nearer).

It prints each one's median CPU (ms) over --reps and its slowdown against
bare; the CPU the profiler itself ran beside the job (lotus's or perf's
process: all children's CPU less the job's), which on a busy machine
competes with the job; and for `fp` and `dwarf` the folder's bytes per
sample (samples, stacks and symbols files together) and the share of
samples with a chain of two frames or more (`deep_samples=`), beside
perf.data's bytes per sample (perf unwinds nothing while recording: its
`perf report` does, later). On a
shared machine the medians swing by a few percent with the neighbours'
load: compare the rows of one run.

usage: python3 bench/stacks_cost.py [--lotus target/debug/lotus]
           [--before OTHER_LOTUS] [--reps 5] [--frequency 4000]
           [--depth 40] [--frame-bytes 0]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

PROGRAM = r"""
#include <stdio.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) void spin(void) {
    for (unsigned long i = 0; i < 600000000UL; i++) sink += i;
}
__attribute__((noinline)) int rec(int d) {
#if FRAME > 0
    volatile char pad[FRAME];
    pad[0] = (char)d;
#endif
    if (d == 0) { spin(); return 0; }
    return rec(d - 1) + 1;
}
int main(int argc, char **argv) {
    struct timespec t;
    int depth = argc > 1 ? atoi(argv[1]) : 40;
    sink += rec(depth);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    fprintf(stderr, "cpu_ms=%.3f\n", t.tv_sec * 1e3 + t.tv_nsec / 1e6);
    return 0;
}
"""


def cpu_ms(stderr):
    for line in stderr.splitlines():
        if line.startswith("cpu_ms="):
            return float(line.split("=", 1)[1])
    raise SystemExit(f"the program did not report its CPU time:\n{stderr}")


def sampling(folder):
    pairs = {}
    with open(os.path.join(folder, "lotus.sampling")) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                pairs[k] = v
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lotus", default="target/debug/lotus")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--frequency", type=int, default=4000)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--frame-bytes", type=int, default=0)
    ap.add_argument("--before", help="another lotus, run as `dwarf before`")
    args = ap.parse_args()
    lotus = os.path.abspath(args.lotus)
    hz = str(args.frequency)
    perf = shutil.which("perf")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "deep.c")
        exe = os.path.join(tmp, "deep")
        with open(src, "w") as f:
            f.write("#include <stdlib.h>\n" + PROGRAM)
        subprocess.run(
            ["gcc", "-O0", "-fno-omit-frame-pointer",
             f"-DFRAME={args.frame_bytes}", "-o", exe, src], check=True
        )
        job = [exe, str(args.depth)]
        modes = {
            "bare": lambda out: job,
            "none": lambda out: [lotus, "trace", "run", "--sample", "-F", hz,
                                 "--counters", "none", "--stacks", "none",
                                 "-o", out, "--"] + job,
            "fp": lambda out: [lotus, "trace", "run", "--sample", "-F", hz,
                               "--counters", "none", "--stacks", "fp",
                               "-o", out, "--"] + job,
            "dwarf": lambda out: [lotus, "trace", "run", "--sample", "-F", hz,
                                  "--counters", "none", "--stacks", "dwarf",
                                  "-o", out, "--"] + job,
        }
        if args.before:
            other = os.path.abspath(args.before)
            modes["dwarf before"] = lambda out: [other] + modes["dwarf"](out)[1:]
        if perf:
            data = lambda out: os.path.join(out + ".perf.data")
            modes["perf"] = lambda out: [perf, "record", "-q", "-F", hz,
                                         "-o", data(out), "--"] + job
            modes["perf -g"] = lambda out: [perf, "record", "-q", "-F", hz, "-g",
                                            "-o", data(out), "--"] + job
            modes["perf dwarf"] = lambda out: [perf, "record", "-q", "-F", hz,
                                               "--call-graph", "dwarf",
                                               "-o", data(out), "--"] + job
            modes["perf dwarf 64K"] = lambda out: [perf, "record", "-q", "-F", hz,
                                                   "--call-graph", "dwarf,65528",
                                                   "-o", data(out), "--"] + job
        cpu = {m: [] for m in modes}
        own = {m: [] for m in modes}
        folder_bytes, deep, perf_bytes = {}, {}, {}
        for rep in range(args.reps):
            for mode, cmd in modes.items():
                out = os.path.join(tmp, f"{mode.replace(' ', '_')}_{rep}")
                before = os.times()
                r = subprocess.run(cmd(out), capture_output=True, text=True)
                after = os.times()
                if r.returncode != 0:
                    raise SystemExit(f"{mode}: exit {r.returncode}\n{r.stderr}")
                cpu[mode].append(cpu_ms(r.stderr))
                children = (after.children_user + after.children_system
                            - before.children_user - before.children_system) * 1e3
                own[mode].append(max(children - cpu[mode][-1], 0.0))
                if mode in ("fp", "dwarf", "dwarf before"):
                    meta = sampling(out)
                    n = int(meta["samples"])
                    size = sum(
                        os.path.getsize(os.path.join(out, f"lotus.{x}"))
                        for x in ("samples", "stacks", "symbols")
                    )
                    folder_bytes.setdefault(mode, []).append(size / max(n, 1))
                    deep.setdefault(mode, []).append(int(meta["deep_samples"]) / max(n, 1))
                if mode.startswith("perf"):
                    d = out + ".perf.data"
                    # perf's own count of samples is not read here: the
                    # job ran the same CPU, so the same frequency gives
                    # about as many samples as lotus's `fp` run.
                    perf_bytes.setdefault(mode, []).append(os.path.getsize(d))
                    os.remove(d)
                shutil.rmtree(out, ignore_errors=True)
        bare = statistics.median(cpu["bare"])
        print(f"job: {args.depth} frames deep ({args.frame_bytes} bytes of "
              f"locals each), {args.reps} reps, {hz} Hz; "
              f"CPU the job's process ran (median ms), its slowdown against "
              f"bare, and the profiler's own CPU (median ms)")
        for mode, values in cpu.items():
            m = statistics.median(values)
            print(f"  {mode:14s} {m:9.1f} ms  {100 * (m / bare - 1):+6.1f}%  "
                  f"profiler {statistics.median(own[mode]):8.1f} ms")
        for mode, sizes in folder_bytes.items():
            print(f"{mode} folder: {statistics.median(sizes):.1f} bytes per sample "
                  f"(samples + stacks + symbols), "
                  f"{100 * statistics.median(deep[mode]):.0f}% of samples "
                  f"with two frames or more")
        fp_samples = bare / 1e3 * args.frequency
        for mode, sizes in perf_bytes.items():
            print(f"{mode} perf.data: about {statistics.median(sizes) / fp_samples:.0f} "
                  f"bytes per sample ({statistics.median(sizes)} bytes, "
                  f"~{fp_samples:.0f} samples)")


if __name__ == "__main__":
    sys.exit(main())
