"""The lotus op harness: runs one op file in this process, in a window.

    python3 lotus_harness.py --op-file OPS/RandomResizedCrop.py --warmup 3 \
        --window-ms 2000 --min-iterations 10 --result RESULT.json [--threads 1] [--cwd DIR]

An op file that defines `op` at top level runs in op mode: `setup()` (if
defined) makes the input, `op(input)` runs --warmup times outside any
window, then in a loop inside one window (lotus.resume(name) ...
lotus.pause()) until the process has used --window-ms of CPU time (or
three times that in wall time not spent waiting for a CPU, for ops that
mostly wait) and at least --min-iterations calls were made. With --threads N, an op that imports
torch (at import or in setup()) runs with torch.set_num_threads(N), as in
a DataLoader worker (lotus sets OMP_NUM_THREADS and its kind in the
environment). A file without `op` runs as a script
(`runpy`, as __main__) that opens and closes its own windows through the
`lotus` module. A native program (an ELF file, or an executable not
named .py) runs as a script-mode op of its own, opening its windows
through liblotus_control.so. --empty measures the harness itself: the same loop around
an op that does nothing, named "(empty)".

With --runs N (lotus map under perf) the harness is a fork server: it
imports the op file once, then forks one child per run before the op's
first call; setup(), the warm-up and the window happen in the child, which
writes RESULT.K (K = 1..N) and leaves. The server stops at the first run
that fails, writing RESULT.K itself when the child could not (how it
ended: child_exit, child_signal, or child_timeout after --run-timeout),
then writes its own RESULT: {"server": true, "runs_made"}. Children
and server leave with os._exit once their result is written. A script or
program declines ({"server": false}): lotus then starts one process per
run.

The result is written to --result as JSON (atomically):
  op mode:     {"name", "mode": "op", "iterations", "window_ns",
                "window_cpu_ns", "warmup",
                "unsampled": {"calls", "wall_ns", "cpu_ns"} (with --unsampled-ms),
                "unsampled_error" (lotus could not stop sampling: no reference),
                "setup_ns", "pid", "op_file", "torch_threads" (when torch is loaded)}
  script mode: {"name", "mode": "script", "pid", "op_file", "program" (a native program),
                "windows": [[name given to lotus.resume, windows], ...],
                "window_ns": time between lotus.resume and lotus.pause, summed}
  failure:     {"name", "mode" (when known), "pid", "op_file",
                "error": <message or traceback>, "stage": <stage>}

Exit codes: 0 ok; 2 the op file cannot be read or does not parse ("read",
"parse"); 3 the op file raised ("import", "setup", "warmup", "window",
"script"); 4 the control library failed ("control"); 1 the harness itself
failed.
"""

import argparse
import ast
import importlib.util
import json
import os
import runpy
import sys
import tempfile
import time
import traceback

EXIT_OK = 0
EXIT_HARNESS = 1
EXIT_BAD_FILE = 2
EXIT_OP_RAISED = 3
EXIT_CONTROL = 4


class Failure(Exception):
    """A failure to report in the result and by exit code."""

    def __init__(self, stage, message, code):
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.code = code


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lotus_harness.py", description=__doc__.split("\n")[0])
    p.add_argument("--op-file", required=True, help="the op file (a Python module or script)")
    p.add_argument("--warmup", type=int, default=3, help="op calls before the window")
    p.add_argument("--window-ms", type=float, default=1000.0, help="least time in the window")
    p.add_argument("--min-iterations", type=int, default=1, help="least op calls in the window")
    p.add_argument("--result", required=True, help="where to write the result JSON")
    p.add_argument("--empty", action="store_true", help="measure an op that does nothing")
    p.add_argument("--name", help="the op's name (default: NAME in the file, or its stem)")
    p.add_argument(
        "--threads",
        type=int,
        help="torch.set_num_threads(N) for an op that imports torch, as a DataLoader worker does",
    )
    p.add_argument(
        "--cwd",
        help="the folder the op runs in (default: the op file's); the op's folder stays on sys.path",
    )
    p.add_argument(
        "--runs",
        type=int,
        help="fork server: import the op once and make N runs, each in a child forked before "
        "the op's first call (run K's result goes to RESULT.K)",
    )
    p.add_argument(
        "--run-timeout", type=float, help="fork server: seconds one run may take before it is stopped"
    )
    p.add_argument(
        "--unsampled-ms",
        type=float,
        default=0.0,
        help="op mode: after the window, call the op with sampling stopped (lotus._sampling) "
        "until the process has used this much CPU time, timing the calls: the reference for "
        "what sampling costs each call (0: none)",
    )
    p.add_argument(
        "--start-gate",
        help="fork server: after the import, wait until this file exists before the first run "
        "(lotus runs the harness floor meanwhile, so that the two never overlap)",
    )
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be at least 1")
    if args.warmup < 0 or args.min_iterations < 0 or args.window_ms < 0:
        p.error("--warmup, --window-ms and --min-iterations must not be negative")
    return args


def write_result(path, result):
    """Writes `result` to `path` atomically (temp file in the same folder, rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".lotus-result-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def defines_op(tree):
    """Whether the module binds `op` at top level (not inside a def or class)."""

    def binds(target):
        if isinstance(target, ast.Name):
            return target.id == "op"
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(binds(t) for t in target.elts)
        if isinstance(target, ast.Starred):
            return binds(target.value)
        return False

    def scan(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name == "op":
                    return True
            elif isinstance(node, ast.Assign):
                if any(binds(t) for t in node.targets):
                    return True
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                if binds(node.target):
                    return True
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    if bound == "op":
                        return True
            elif isinstance(node, ast.If):
                if scan(node.body) or scan(node.orelse):
                    return True
            elif isinstance(node, (ast.For, ast.While)):
                if scan(node.body) or scan(node.orelse):
                    return True
            elif isinstance(node, (ast.With,)):
                if scan(node.body):
                    return True
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                if (
                    scan(node.body)
                    or scan(node.orelse)
                    or scan(node.finalbody)
                    or any(scan(h.body) for h in node.handlers)
                ):
                    return True
        return False

    return scan(tree.body)


def parse_op_file(path):
    """Reads and parses the op file; returns its AST or raises Failure."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise Failure("read", f"cannot read the op file {path}: {e.strerror}", EXIT_BAD_FILE)
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as e:
        if b"\0" in source:
            # Python names no line for these (it reports line None).
            line = source.count(b"\n", 0, source.index(b"\0")) + 1
            raise Failure(
                "parse",
                f"cannot parse the op file {path}: it contains null bytes (the first on "
                f"line {line}); it is not Python source text: check the file, or its "
                "encoding (UTF-16 files hold null bytes; save it as UTF-8)",
                EXIT_BAD_FILE,
            )
        if e.lineno is None:
            raise Failure("parse", f"cannot parse the op file {path}: {e.msg}", EXIT_BAD_FILE)
        where = f"{e.filename or path}:{e.lineno}" + (f":{e.offset}" if e.offset else "")
        message = f"syntax error in the op file {where}: {e.msg}"
        if e.text:
            line = e.text.rstrip("\n")
            message += f"\n    {line}"
            if e.offset:
                message += "\n    " + " " * (e.offset - 1) + "^"
        raise Failure("parse", message, EXIT_BAD_FILE)
    except ValueError as e:  # source with NUL bytes (Python before 3.12)
        raise Failure(
            "parse",
            f"cannot parse the op file {path}: {e}: it is not Python source text: check "
            "the file, or its encoding (UTF-16 files hold null bytes; save it as UTF-8)",
            EXIT_BAD_FILE,
        )


def _machinery(filename):
    """Whether a frame is the harness's or import/runpy machinery, not the user's."""
    return (
        filename == _HARNESS_CODE_FILE
        or filename == runpy.__file__
        or filename.startswith("<frozen importlib")
        or filename.startswith("<frozen runpy")
    )


def raised(stage):
    """A Failure for the exception being handled, with its traceback from
    the first frame of the op file on (the harness's own frames are noise)."""
    etype, value, tb = sys.exc_info()
    if isinstance(value, SystemExit):
        # Not an error the op raised: it tried to end the process.
        where = {"import": "at import", "setup": "in setup()"}.get(stage, "in op()")
        return Failure(
            stage,
            f"the op called sys.exit({value.code!r}) {where}: an op file must return, "
            "not end the process (remove the exit call)",
            EXIT_OP_RAISED,
        )
    while tb is not None and _machinery(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(etype, value, tb))
    return Failure(stage, text, EXIT_OP_RAISED)


def control_failed(what):
    return Failure("control", f"lotus.{what}() failed: {sys.exc_info()[1]}", EXIT_CONTROL)


_HARNESS_CODE_FILE = raised.__code__.co_filename


def import_op_module(path):
    """Imports the op file as a module named after its stem (when free)."""
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else "__lotus_op__"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Failure("import", f"cannot import the op file {path}", EXIT_BAD_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            raise
        raise raised("import")
    return module


def limit_torch_threads(threads, result):
    """Gives torch `threads` intra-op threads when the op has imported it
    (a DataLoader worker calls torch.set_num_threads(1)); torch is never
    imported here for an op that does not use it. Called after the import
    and again after setup(), which may import torch lazily. Records torch's
    thread count in the result."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        return
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    result["torch_threads"] = torch.get_num_threads()


# A window ends after this many times --window-ms of wall time even when
# the op has not used --window-ms of CPU time (it mostly waits). Time spent
# waiting for a CPU (runnable, while other processes had the CPUs) does not
# count: that op does not wait, the machine is busy, and cutting its window
# would only cost samples.
WALL_CAP = 3

# How often, past the wall cap, the time spent waiting for a CPU is read
# again (it is a file read: not once per op call).
WALL_CHECK_NS = 20_000_000


def run_delay_ns():
    """The time this thread has spent runnable but waiting for a CPU, from
    /proc/thread-self/schedstat (its second field), or None where the kernel
    does not keep it."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def run_op(args, lotus, result):
    name, setup, op = load_op(args, result)
    measure_op(args, lotus, result, name, setup, op)


def load_op(args, result):
    """Imports the op file (or makes the empty op); returns its name, its
    setup function (or None) and the op."""
    if args.empty:
        name, setup, op = "(empty)", None, (lambda x: None)
        result["name"] = args.name or name
    else:
        module = import_op_module(args.op_file)
        op = getattr(module, "op", None)
        if not callable(op):
            raise Failure(
                "import",
                f"the op file {args.op_file} sets `op` to {type(op).__name__}, which is not callable",
                EXIT_OP_RAISED,
            )
        result["name"] = args.name or str(getattr(module, "NAME", "") or result["name"])
        setup = getattr(module, "setup", None)
    limit_torch_threads(args.threads, result)
    return result["name"], setup, op


def measure_op(args, lotus, result, name, setup, op):
    """setup(), the warm-up calls, and the window around the op's loop."""
    t0 = time.perf_counter_ns()
    try:
        x = setup() if setup is not None else None
    except (Exception, SystemExit):
        raise raised("setup")
    result["setup_ns"] = time.perf_counter_ns() - t0
    limit_torch_threads(args.threads, result)

    try:
        for _ in range(args.warmup):
            op(x)
    except (Exception, SystemExit):
        raise raised("warmup")
    result["warmup"] = args.warmup

    # The window's length is counted in this process's CPU time (all its
    # threads), not wall time: samples come from CPU time, so a window that
    # shares the machine with other work still holds the samples asked for.
    try:
        lotus.resume(name)
    except RuntimeError:
        raise control_failed("resume")
    try:
        iterations, wall_ns, cpu_ns = loop_op(
            op, x, int(args.window_ms * 1_000_000), args.min_iterations
        )
    except (Exception, SystemExit):
        failure = raised("window")
        try:
            lotus.pause()
        except RuntimeError:
            pass
        raise failure
    try:
        lotus.pause()
    except RuntimeError:
        raise control_failed("pause")
    result["iterations"] = iterations
    result["window_ns"] = wall_ns
    result["window_cpu_ns"] = cpu_ns
    if args.unsampled_ms > 0:
        measure_unsampled(args, lotus, result, op, x)


def loop_op(op, x, budget_ns, min_calls):
    """Calls op(x) until the process has used budget_ns of CPU time and
    made min_calls calls (at least one), reading the clock and the CPU
    timer after each call; returns (calls, wall ns, CPU ns). Ops that
    mostly wait (on I/O, or on worker processes whose CPU time is not this
    process's) stop at WALL_CAP times the budget in wall time, less the
    time spent waiting for a CPU on a busy machine. The window and the
    unsampled calls after it are timed by this one loop."""
    wall_cap_ns = WALL_CAP * budget_ns
    next_wall_check = wall_cap_ns
    clock = time.perf_counter_ns
    cpu = time.process_time_ns
    calls = 0
    start = clock()
    cpu_start = cpu()
    delay_start = run_delay_ns()
    while True:
        op(x)
        calls += 1
        now = clock()
        if calls < min_calls:
            continue
        used = cpu() - cpu_start
        if used >= budget_ns:
            break
        if now - start >= next_wall_check:
            delay = run_delay_ns()
            waited = delay - delay_start if delay is not None and delay_start is not None else 0
            if now - start - waited >= wall_cap_ns:
                break
            next_wall_check = now - start + WALL_CHECK_NS
    return calls, now - start, used


def measure_unsampled(args, lotus, result, op, x):
    """Right after the window, with sampling stopped: op calls until the
    process has used --unsampled-ms of CPU time (at least one call), timed
    by the window's own loop (loop_op), in the same warm state. Their CPU
    time per call against the window's says what sampling costs the op.
    Where lotus cannot stop sampling, the reason is recorded and the run
    goes on without one."""
    try:
        lotus._sampling(False)
    except RuntimeError as e:
        result["unsampled_error"] = str(e)
        return
    try:
        calls, wall_ns, cpu_ns = loop_op(op, x, int(args.unsampled_ms * 1_000_000), 1)
    except (Exception, SystemExit):
        failure = raised("window")
        try:
            lotus._sampling(True)
        except RuntimeError:
            pass
        raise failure
    try:
        lotus._sampling(True)
    except RuntimeError:
        raise control_failed("_sampling")
    result["unsampled"] = {"calls": calls, "wall_ns": wall_ns, "cpu_ns": cpu_ns}


# Script mode: lotus measures one op name per run when a script opens
# windows under several names (the variable names the one to measure).
ENV_ONLY_OP = "LOTUS_HARNESS_ONLY_OP"


def watch_windows(lotus, result, only):
    """Wraps lotus.resume/pause (before the script imports them) to record
    the names the script opens windows under, in first-seen order with a
    count each (result["windows"]), and, with `only`, to open only that
    name's windows: the others' resume and their pause do nothing."""
    windows = []
    index = {}
    # "opened": when the open window opened (perf_counter_ns), else None.
    state = {"skipped": False, "opened": None}
    result["window_ns"] = 0
    real_resume, real_pause = lotus.resume, lotus.pause
    clock = time.perf_counter_ns

    def note(name):
        if name not in index:
            index[name] = len(windows)
            windows.append([name, 0])
        windows[index[name]][1] += 1

    def resume(op=""):
        name = op if isinstance(op, str) else str(op)
        if only is not None and name != only:
            note(name)
            state["skipped"] = True
            return
        state["skipped"] = False
        real_resume(op)
        # Only a window that opened counts (a refused name does not).
        note(name)
        if state["opened"] is None:
            state["opened"] = clock()

    def pause():
        if state["skipped"]:
            state["skipped"] = False
            return
        real_pause()
        if state["opened"] is not None:
            result["window_ns"] += clock() - state["opened"]
            state["opened"] = None

    resume.__doc__ = real_resume.__doc__
    pause.__doc__ = real_pause.__doc__
    lotus.resume = resume
    lotus.pause = pause
    result["windows"] = windows


def _itt_stand_in(lotus):
    """A stand-in for itt-python (`import itt`, NERSC's binding that the
    original Lotus op scripts use): resume/pause/detach open and close
    lotus's windows; its task and region calls are accepted and do nothing
    (lotus maps windows, not tasks)."""
    import types

    itt = types.ModuleType("itt", "lotus's stand-in for itt-python: windows are lotus's")
    state = {"open": False}

    def resume():
        lotus.resume()
        state["open"] = True

    def pause():
        lotus.pause()
        state["open"] = False

    def detach():
        # VTune stops collecting at a detach: close the window first.
        if state["open"]:
            pause()
        lotus.detach()

    def _nothing(*_args, **_kwargs):
        return None

    itt.resume, itt.pause, itt.detach = resume, pause, detach
    itt.domain_create = lambda name=None, *_a, **_k: types.SimpleNamespace(name=name)
    itt.task_begin = itt.task_end = _nothing
    itt.pt_region_create = lambda name=None, *_a, **_k: name
    itt.pt_region_begin = itt.pt_region_end = _nothing
    itt.__lotus_stand_in__ = True
    return itt


# AMD_PROFILE_ERROR_INTERNAL: what amdGetLastProfileError() says after a
# failed call.
_AMD_ERROR_INTERNAL = -1


def _amd_stand_in(lotus):
    """A stand-in for `amdprofilecontrol` (the Python binding of uProf's
    profile-control library the original Lotus AMD scripts use):
    resume(reserved=1) / pause(reserved=1) open and close lotus's windows
    and return True, or False after printing why, as the binding returns
    False on failure; get_last_profile_error() gives 0 or -1."""
    import types

    amd = types.ModuleType(
        "amdprofilecontrol", "lotus's stand-in for amdprofilecontrol: windows are lotus's"
    )
    state = {"error": 0}

    def switch(call, what):
        try:
            call()
        except RuntimeError as e:
            sys.stderr.write(f"lotus: amdprofilecontrol.{what}: {e}\n")
            state["error"] = _AMD_ERROR_INTERNAL
            return False
        state["error"] = 0
        return True

    def resume(reserved=1):
        return switch(lambda: lotus.resume(), "resume")  # noqa: PLW0108 (looked up at the call: the op may rebind lotus.resume)

    def pause(reserved=1):
        return switch(lambda: lotus.pause(), "pause")  # noqa: PLW0108 (as resume)

    amd.resume, amd.pause = resume, pause
    amd.get_last_profile_error = lambda: state["error"]
    amd.__lotus_stand_in__ = True
    return amd


def install_stand_ins(lotus):
    """Makes the original Lotus op scripts' control modules importable
    where their real ones cannot reach the backend's windows.

    `itt` (itt-python): the real module is kept where it is importable and
    its ITT calls reach a collector (VTune's under VTune; lotus's own where
    lotus switches the windows), else the stand-in (always under uProf,
    where no ITT collector runs). `amdprofilecontrol`:
    the real module only under uProf (it talks to uProf's driver alone);
    under any other backend, or where it is missing, the stand-in. The
    stand-ins call the `lotus` module, so under VTune and uProf their
    windows still become the vendor's (through the control library)."""
    import importlib.util

    def importable(name):
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    if lotus.backend() == "uprof" or not importable("itt"):
        sys.modules["itt"] = _itt_stand_in(lotus)
    if lotus.backend() != "uprof" or not importable("amdprofilecontrol"):
        sys.modules["amdprofilecontrol"] = _amd_stand_in(lotus)


def channel_fds():
    """The control channel's descriptors (LOTUS_CONTROL_FDS), where open."""
    fds = []
    for part in os.environ.get("LOTUS_CONTROL_FDS", "").split(","):
        try:
            fd = int(part)
            os.fstat(fd)
        except (ValueError, OSError):
            continue
        fds.append(fd)
    return fds


def pass_channel_to_programs():
    """Makes programs the op starts with `subprocess` inherit the control
    channel, so that a native program linked to liblotus_control.so opens
    lotus's windows (subprocess closes every descriptor but the standard
    three and `pass_fds`; os.system, os.exec* and os.posix_spawn keep
    them as they are). The channel is the harness's: the op must wait for
    the program before it calls lotus again (see lotus.h)."""
    fds = channel_fds()
    if not fds:
        return
    import subprocess

    real_init = subprocess.Popen.__init__

    # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn,
    # close_fds, ...): close_fds is the eighth positional parameter.
    close_fds_at = 7

    def __init__(self, *args, pass_fds=(), **kwargs):
        close_fds = args[close_fds_at] if len(args) > close_fds_at else kwargs.get("close_fds", True)
        if close_fds:
            # (With close_fds=False every descriptor is inherited already;
            # pass_fds would force it to True.)
            pass_fds = tuple(pass_fds) + tuple(fd for fd in fds if fd not in tuple(pass_fds))
        real_init(self, *args, pass_fds=pass_fds, **kwargs)

    __init__.__doc__ = real_init.__doc__
    subprocess.Popen.__init__ = __init__


def is_program(path):
    """Whether the op file is a native program to run rather than Python:
    an ELF file, or an executable whose name does not end in .py."""
    try:
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                return True
    except OSError:
        return False
    return not path.endswith(".py") and os.access(path, os.X_OK)


def run_program(args, result):
    """Runs a native program as a script-mode op: its windows (through
    liblotus_control.so) reach lotus; it must exit with status 0."""
    import subprocess

    if args.name:
        result["name"] = args.name
    result["program"] = True
    try:
        status = subprocess.run([args.op_file], check=False).returncode
    except OSError as e:
        raise Failure("script", f"cannot run the program {args.op_file}: {e}", EXIT_OP_RAISED)
    if status < 0:
        raise Failure(
            "script", f"the program {args.op_file} was killed by signal {-status}", EXIT_OP_RAISED
        )
    if status != 0:
        raise Failure(
            "script", f"the program {args.op_file} exited with status {status}", EXIT_OP_RAISED
        )


def run_script(args, lotus, result):
    if args.name:
        result["name"] = args.name
    watch_windows(lotus, result, os.environ.pop(ENV_ONLY_OP, None))
    install_stand_ins(lotus)
    sys.argv = [args.op_file]
    try:
        runpy.run_path(args.op_file, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            how = f"with status {e.code}" if isinstance(e.code, int) else f"saying: {e.code}"
            raise Failure("script", f"the script {args.op_file} exited {how}", EXIT_OP_RAISED)
    except Exception:
        raise raised("script")


# The fork server (--runs N): the op module is imported once, and each run
# is a child forked from this process before the op's first call; setup(),
# the warm-up and the window happen in the child, so runs stay independent
# processes without paying the imports again. Run K's result goes to
# RESULT.K; the server's own result (RESULT) says how many runs it made.

# How long a child that wrote its result may take to exit before it is
# stopped (lotus gives a whole process as long).
CHILD_GRACE_S = 2.0

# Signal names for a child's death, in lotus's words.
_SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def wait_child(pid, result_path, timeout_s):
    """Waits for the child `pid`: until it exits, for at most `timeout_s`
    (then it is killed: "timeout"), or CHILD_GRACE_S after its result is
    written (then it is stopped: it lingers, but its run is done). Returns
    (how, value): ("exit", code), ("signal", number), ("timeout", None)
    or ("lingered", None). Waits on a pidfd, so it neither polls nor
    sleeps past the child's end."""
    import select

    start = time.monotonic()
    written_at = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                if os.WIFSIGNALED(status):
                    return "signal", os.WTERMSIG(status)
                # Not os.waitstatus_to_exitcode: Python 3.9+ only, and the
                # harness runs on 3.8 too.
                return "exit", os.WEXITSTATUS(status)
            now = time.monotonic()
            if written_at is None and os.path.exists(result_path):
                written_at = now
            if written_at is not None and now - written_at >= CHILD_GRACE_S:
                how = "lingered"
            elif now - start >= timeout_s:
                how = "timeout"
            else:
                how = None
            if how is not None:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                return how, None
            # Wake at the child's end, or to look for its result.
            wait = 0.05 if pidfd is not None else 0.005
            if pidfd is not None:
                select.select([pidfd], [], [], wait)
            else:
                time.sleep(wait)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def child_run(args, lotus, result, loaded, k):
    """In the forked child: the run itself; writes RESULT.K and leaves."""
    code = EXIT_OK
    result = dict(result, pid=os.getpid(), run=k)
    try:
        lotus._adopt()
        watch_parent(clean=False)
        measure_op(args, lotus, result, *loaded)
    except Failure as f:
        code = report_failure(f, result, args.op_file)
    except KeyboardInterrupt:
        code = 130
        result["error"] = "interrupted"
        result["stage"] = "interrupted"
    except BaseException:
        traceback.print_exc()
        code = EXIT_HARNESS
    try:
        sys.stderr.flush()
        write_result(f"{args.result}.{k}", result)
    finally:
        # As multiprocessing's forked workers do: the interpreter's exit
        # hooks and the libraries' destructors belong to the server, which
        # imported them (torch's take half a second per process).
        _flush()
        os._exit(code)


def wait_for_gate(path, timeout_s):
    """Waits until lotus creates `path` (the floor it ran beside this
    import is done), or `timeout_s` (one run's limit) passes: then the runs
    go on, as lotus would stop a floor that took that long."""
    deadline = time.monotonic() + min(timeout_s, 3600.0)
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)


def serve_runs(args, lotus, result):
    """The fork server: imports the op once, then forks one child per run.
    Stops at the first run that fails (its RESULT.K says how, written here
    when the child could not). Returns the exit code."""
    loaded = load_op(args, result)
    result["server"] = True
    timeout_s = args.run_timeout if args.run_timeout else float("inf")
    if args.start_gate:
        wait_for_gate(args.start_gate, timeout_s)
    made = 0
    for k in range(1, args.runs + 1):
        path = f"{args.result}.{k}"
        _flush()
        pid = os.fork()
        if pid == 0:
            child_run(args, lotus, result, loaded, k)
        made = k
        how, value = wait_child(pid, path, timeout_s)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                ok = "error" not in json.load(f)
            if ok:
                continue
            break
        ended = dict(result, pid=pid, run=k)
        if how == "exit":
            ended["child_exit"] = value
        elif how == "signal":
            ended["child_signal"] = value
        else:
            ended["child_timeout"] = True
        ended["error"] = child_end_words(how, value)
        ended["stage"] = "child"
        write_result(path, ended)
        break
    result["runs_made"] = made
    return EXIT_OK


def child_end_words(how, value):
    if how == "signal":
        return f"the run's process was killed by signal {value} ({_SIGNAL_NAMES.get(value, 'signal')})"
    if how == "exit":
        return f"the run's process exited with status {value} without writing its result"
    return f"the run's process was still running after {how}"


def report_failure(f, result, op_file):
    """Records a Failure in `result` and says it on stderr; returns the
    exit code."""
    result["error"] = f.message
    result["stage"] = f.stage
    what = _STAGE_WORDS.get(f.stage)
    if what:
        sys.stderr.write(f"lotus harness: {result['name']} ({op_file}): {what}:\n")
        sys.stderr.write(f.message)
    else:
        sys.stderr.write(f"lotus harness: {f.message}")
    if not f.message.endswith("\n"):
        sys.stderr.write("\n")
    return f.code


_STAGE_WORDS = {
    "import": "importing the op file raised",
    "setup": "setup() raised",
    "warmup": "the op raised during warm-up",
    "window": "the op raised inside the measurement window",
    "script": "the script failed",
}


def watch_parent(clean=True):
    """Exits when the process that started this one is gone (lotus killed
    with SIGKILL cannot stop its children): an orphaned harness would run
    its op until the machine stops. With `clean`, also removes the
    harness's own temporary folder, which lotus would have removed (a fork
    server's child leaves that to the server)."""
    import shutil
    import threading

    parent = os.getppid()
    here = os.path.dirname(os.path.abspath(__file__))

    def watch():
        while True:
            time.sleep(0.25)
            if os.getppid() != parent:
                if clean and os.path.basename(here).startswith("lotus-harness-"):
                    shutil.rmtree(here, ignore_errors=True)
                os._exit(137)

    threading.Thread(target=watch, name="lotus-parent-watch", daemon=True).start()


def main(argv):
    args = parse_args(argv)
    watch_parent()
    # Importing the op file must not leave __pycache__ in the user's folder.
    sys.dont_write_bytecode = True
    # Both paths are used after the chdir into the op's folder (or --cwd).
    op_file = args.op_file = os.path.abspath(args.op_file)
    args.result = os.path.abspath(args.result)
    stem = os.path.splitext(os.path.basename(op_file))[0]
    result = {"name": args.name or stem, "pid": os.getpid(), "op_file": op_file}
    code = EXIT_OK
    try:
        # The lotus module lives beside this file; import it before the
        # op's folder goes on sys.path (it cannot shadow it then), and so
        # that it binds the control channel to this process now.
        try:
            import lotus
        except ImportError as e:
            raise Failure("control", str(e), EXIT_CONTROL)
        program = not args.empty and is_program(op_file)
        if args.empty:
            result["mode"] = "op"
        elif program:
            result["mode"] = "script"
        else:
            tree = parse_op_file(op_file)
            result["mode"] = "op" if defines_op(tree) else "script"
        if not args.empty:
            folder = os.path.dirname(op_file)
            # The op's folder is importable as a script's is; it runs in
            # --cwd where given (the study ran its scripts from its
            # repository root, opening files by paths relative to it).
            try:
                os.chdir(args.cwd or folder)
            except OSError as e:
                raise Failure(
                    "chdir", f"cannot run the op in {args.cwd or folder}: {e.strerror}", EXIT_HARNESS
                )
            sys.path.insert(0, folder)

        if result["mode"] == "op" and args.runs is not None and not args.empty:
            code = serve_runs(args, lotus, result)
        elif args.runs is not None:
            # Scripts and programs run whole, once per process: lotus
            # starts one per run instead.
            result["server"] = False
        elif result["mode"] == "op":
            run_op(args, lotus, result)
        else:
            pass_channel_to_programs()
            if program:
                run_program(args, result)
            else:
                run_script(args, lotus, result)
    except Failure as f:
        code = report_failure(f, result, op_file)
    except KeyboardInterrupt:
        code = 130
        result["error"] = "interrupted"
        result["stage"] = "interrupted"
    sys.stderr.flush()
    write_result(args.result, result)
    if result.get("server"):
        # The runs ran (and ended) in the children; the imports' exit
        # hooks and destructors would only delay lotus (torch's: half a
        # second or more).
        _flush()
        os._exit(code)
    return code


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def leave(code):
    """Ends the process once the result is written, without waiting for the
    non-daemon threads the op left running (a normal interpreter exit joins
    them, turning a finished measurement into a hang until --timeout).

    What the op printed is flushed, its atexit hooks run, and the C library's
    exit() runs the native libraries' destructors and exit hooks (a C op may
    write its files there); only the interpreter's own shutdown, which joins
    threads, is skipped. Should a hook hang, lotus stops the process: the
    written result already ends the run. os._exit is the fallback."""
    _flush()
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush()
    try:
        import ctypes

        # CDLL releases the GIL during the call: threads left running do
        # not block exit(), which does not return.
        ctypes.CDLL(None).exit(code)
    except BaseException:
        pass
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        code = EXIT_HARNESS
    leave(code)
