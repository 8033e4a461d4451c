# A stand-in for AMD uProf's AMDuProfCLI, written to a folder on PATH by the
# tests (with a "#!<python>" line before this text). It accepts exactly the
# flags lotus uses and fails on anything else:
#
#   AMDuProfCLI --version
#   AMDuProfCLI collect --config tbp --start-paused -o DIR PROGRAM [ARGS...]
#   AMDuProfCLI report -i SESSION --report-output FILE -f csv
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
import shutil
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


def collect(args):
    values, rest = options(args, {"--config": True, "--start-paused": False, "-o": True})
    if values["--config"] != "tbp":
        fail(f"this stand-in knows only --config tbp, not {values['--config']!r}")
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


def report(args):
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
    shutil.copyfile(fixture, values["--report-output"])
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
