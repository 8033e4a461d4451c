# A stand-in for AMD uProf's AMDuProfCLI, written to a folder on PATH by the
# tests (with a "#!<python>" line before this text). It accepts exactly the
# flags lotus uses and fails on anything else:
#
#   AMDuProfCLI --version
#   AMDuProfCLI collect --config tbp --start-paused -o DIR PROGRAM [ARGS...]
#   AMDuProfCLI collect -e event=timer,interval=MS --start-paused -o DIR PROGRAM [ARGS...]
#   AMDuProfCLI report -i SESSION --report-output FILE -f csv [--cutoff N]
#
# -e takes comma-separated key=value pairs as AMD's user guide documents
# them (event=timer, interval in milliseconds, a positive number); the
# interval in force (1 ms with --config tbp) goes to SESSION/interval.txt.
#
# report lists at most --cutoff N functions (default 10, as AMDuProfCLI
# does): the fixture's section header says "N HOTTEST FUNCTIONS" and its
# rows past the N-th are dropped, so a report asked for without a cutoff
# high enough is cut short the way the real tool cuts it.
#
# collect creates the session folder DIR/AMDuProf-<program>-TBP_<date>/ the
# way AMDuProfCLI does, and runs the program with LOTUS_UPROF_CONTROL_LIB set
# to the stand-in profile-control library named by UPROF_STANDIN_CONTROL_LIB
# (whose calls go to SESSION/control.log). It records the program's command
# line, folder and LOTUS_* variables in SESSION/target.json and the op (the
# --op-file stem; "(empty)" with --empty) in SESSION/op.txt.
#
# report refuses a session whose control.log does not show a resume followed
# by a pause (no samples), and otherwise writes the report of that op taken
# from UPROF_STANDIN_FIXTURES/<op>/1.csv (real AMDuProfCLI output).
#
# UPROF_STANDIN_CALLS, when set, names a file each invocation appends its
# arguments to (one JSON list per line); collect keeps the name in
# SESSION/calls.txt, for the report command on that session.

import datetime
import json
import os
import subprocess
import sys


def fail(message, code=2):
    sys.stderr.write(f"AMDuProfCLI (stand-in): {message}\n")
    sys.exit(code)


def options(args, spec):
    """Parses `args` strictly: `spec` maps each flag to True (takes a value)
    or False; every flag is required, in any order; parsing stops at the
    first argument that is not a flag. Returns (values, the rest)."""
    values = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        flag = args[i]
        if flag not in spec:
            fail(f"unknown option {flag!r}")
        if flag in values:
            fail(f"option {flag!r} given twice")
        if spec[flag]:
            if i + 1 >= len(args):
                fail(f"option {flag!r} needs a value")
            values[flag] = args[i + 1]
            i += 2
        else:
            values[flag] = True
            i += 1
    missing = [f for f in spec if f not in values]
    if missing:
        fail(f"missing option(s) {', '.join(missing)}")
    return values, args[i:]


def op_name(argv):
    if "--empty" in argv:
        return "(empty)"
    if "--op-file" in argv:
        i = argv.index("--op-file")
        if i + 1 < len(argv):
            return os.path.splitext(os.path.basename(argv[i + 1]))[0]
    return os.path.basename(argv[0])


def timer_event(spec):
    """The interval (ms) of `-e event=timer,interval=MS`, checked."""
    pairs = {}
    for item in spec.split(","):
        key, eq, value = item.partition("=")
        if not eq or not value:
            fail(f"-e {spec!r}: {item!r} is not key=value")
        if key in pairs:
            fail(f"-e {spec!r}: {key} given twice")
        pairs[key] = value
    if pairs.get("event") != "timer":
        fail(f"-e {spec!r}: this stand-in knows only event=timer")
    unknown = set(pairs) - {"event", "interval"}
    if unknown:
        fail(f"-e {spec!r}: unknown key(s) {sorted(unknown)}")
    try:
        interval = float(pairs.get("interval", "1"))
    except ValueError:
        fail(f"-e {spec!r}: interval must be a number of milliseconds")
    if not interval > 0:
        fail(f"-e {spec!r}: interval must be positive")
    return interval


def collect(args):
    if args[:1] == ["-e"]:
        if len(args) < 2:
            fail("option '-e' needs a value")
        interval = timer_event(args[1])
        values, rest = options(args[2:], {"--start-paused": False, "-o": True})
    else:
        values, rest = options(args, {"--config": True, "--start-paused": False, "-o": True})
        if values["--config"] != "tbp":
            fail(f"this stand-in knows only --config tbp, not {values['--config']!r}")
        interval = 1.0
    if not rest:
        fail("collect: no program to profile")
    out = values["-o"]
    if not os.path.isdir(out):
        fail(f"-o {out}: no such folder")
    stamp = datetime.datetime.now().strftime("%b-%d-%Y_%H-%M-%S")
    session = os.path.join(out, f"AMDuProf-{os.path.basename(rest[0])}-TBP_{stamp}")
    os.mkdir(session)
    lib = os.environ.get("UPROF_STANDIN_CONTROL_LIB")
    if not lib:
        fail("UPROF_STANDIN_CONTROL_LIB is not set (the test names the stand-in library)")
    env = dict(os.environ)
    env["LOTUS_UPROF_CONTROL_LIB"] = lib
    env["UPROF_STANDIN_LOG"] = os.path.join(session, "control.log")
    with open(os.path.join(session, "target.json"), "w") as f:
        json.dump(
            {
                "argv": rest,
                "cwd": os.getcwd(),
                "env": {k: v for k, v in os.environ.items() if k.startswith("LOTUS_")},
            },
            f,
        )
    with open(os.path.join(session, "op.txt"), "w") as f:
        f.write(op_name(rest))
    with open(os.path.join(session, "interval.txt"), "w") as f:
        f.write(repr(interval))
    if os.environ.get("UPROF_STANDIN_CALLS"):
        with open(os.path.join(session, "calls.txt"), "w") as f:
            f.write(os.environ["UPROF_STANDIN_CALLS"])
    print("Profiling started", flush=True)
    try:
        code = subprocess.call(rest, env=env)
    except OSError as e:
        fail(f"cannot run {rest[0]}: {e}", 1)
    print("Profiling (data collection) completed")
    print(f"Generated data files path: {session}")
    sys.exit(code if code >= 0 else 128 - code)


def cut(text, cutoff):
    """The report `text` as AMDuProfCLI writes it with --cutoff `cutoff`:
    the function section holds at most `cutoff` rows."""
    out = []
    in_functions = False
    rows = 0
    for line in text.splitlines(keepends=True):
        header = line.strip().strip('"')
        if "HOTTEST FUNCTIONS" in header:
            in_functions = True
            rows = -1  # the column header line comes next
            out.append('"' + f"{cutoff} HOTTEST FUNCTIONS" + header.split("HOTTEST FUNCTIONS", 1)[1] + '"\n')
            continue
        if in_functions:
            if not line.strip():
                in_functions = False
            elif rows >= cutoff:
                continue
            rows += 1
        out.append(line)
    return "".join(out)


def fixture_cutoff(text):
    """The N of the fixture's "N HOTTEST FUNCTIONS" header."""
    for line in text.splitlines():
        header = line.strip().strip('"')
        if "HOTTEST FUNCTIONS" in header:
            try:
                return int(header.split()[0])
            except ValueError:
                break
    fail("the fixture report has no 'N HOTTEST FUNCTIONS' header", 1)


def report(args):
    if "--cutoff" in args:
        i = args.index("--cutoff")
        if i + 1 >= len(args):
            fail("option '--cutoff' needs a value")
        try:
            cutoff = int(args[i + 1])
        except ValueError:
            fail(f"--cutoff {args[i + 1]!r}: not a number")
        if cutoff < 0:
            fail(f"--cutoff {cutoff}: negative")
        args = args[:i] + args[i + 2 :]
    else:
        cutoff = 10
    values, rest = options(args, {"-i": True, "--report-output": True, "-f": True})
    if rest:
        fail(f"report: unexpected argument(s) {rest}")
    if values["-f"] != "csv":
        fail(f"-f {values['-f']!r}: this stand-in writes only csv")
    session = values["-i"]
    if not os.path.basename(session.rstrip("/")).startswith("AMDuProf-"):
        fail(f"-i {session}: not a session folder")
    try:
        with open(os.path.join(session, "control.log")) as f:
            calls = f.read().split()
    except OSError:
        calls = []
    resumes = [i for i, c in enumerate(calls) if c.startswith("amdProfileResume")]
    pauses = [i for i, c in enumerate(calls) if c.startswith("amdProfilePause")]
    if not resumes or not any(p > resumes[0] for p in pauses):
        fail(f"no samples in {session}: the profile was never resumed then paused (calls: {calls})", 1)
    with open(os.path.join(session, "op.txt")) as f:
        op = f.read()
    fixture = os.path.join(os.environ.get("UPROF_STANDIN_FIXTURES", ""), op, "1.csv")
    if not os.path.isfile(fixture):
        fail(f"no fixture report for op {op!r} ({fixture})", 1)
    print("Translation started")
    with open(fixture, encoding="utf-8", newline="") as f:
        text = f.read()
    with open(values["--report-output"], "w", encoding="utf-8", newline="") as f:
        # The fixtures were made with --cutoff 100 and hold all their
        # functions: a cutoff at least that high (or 0: everything, uProf
        # 5.1's user guide) gives them as they are.
        f.write(text if cutoff == 0 or cutoff >= fixture_cutoff(text) else cut(text, cutoff))
    print("Report generation completed...")
    print(f"Generated report file: {values['--report-output']}")


def record(argv):
    calls = os.environ.get("UPROF_STANDIN_CALLS")
    if not calls and argv[:1] == ["report"] and "-i" in argv[:-1]:
        try:
            with open(os.path.join(argv[argv.index("-i") + 1], "calls.txt")) as f:
                calls = f.read()
        except OSError:
            pass
    if calls:
        with open(calls, "a") as f:
            f.write(json.dumps(argv) + "\n")


def main(argv):
    record(argv)
    if argv == ["--version"]:
        print("AMDuProfCLI Version 5.1.701.0 (lotus test stand-in)")
        return
    if not argv:
        fail("no command")
    if argv[0] == "collect":
        collect(argv[1:])
    elif argv[0] == "report":
        report(argv[1:])
    else:
        fail(f"unknown command {argv[0]!r}")


main(sys.argv[1:])
