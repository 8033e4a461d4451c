"""Python frames in the native call stacks lotus samples: CPython 3.12+'s
perf trampolines.

With $LOTUS_PY_FRAMES=1 (lotus sets it when it records call stacks), each
traced process turns them on, `sys.activate_stack_trampoline("perf")`:
every Python function then runs through a small stub of machine code of
its own, and CPython appends a line naming each stub to
`/tmp/perf-<pid>.map` (`<hex start> <hex size> py::<qualname>:<file>`),
so that a sampled native stack shows the Python functions it runs in.

The map's path is predictable and in a folder every user can write, and
CPython opens it with `O_WRONLY|O_CREAT|O_APPEND|O_NOFOLLOW` (no
`O_EXCL`): another user could put a FIFO there (the job would block in
`open` for ever, and its map could be read), or a file of theirs (the job
would append its map to it). So CPython never creates it here: the tracer
does, with `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, owned by the job's user,
in a /tmp whose sticky bit keeps other users from removing or replacing it,
and only then turns the trampolines on. Where that fails (a file of someone
else's at that path, a /tmp without the sticky bit) the trampolines stay
off in that process and its log notes why, naming the path.

Forked children: CPython turns the trampolines on again in a child as it
forks, and the child's map would be opened by CPython before any Python
code of the child runs. So the trampolines are off across each fork: set
off just before it (the interpreter's frame evaluator set aside, the
parent's stubs and map kept), back on in the parent just after, and turned
on in the child only once the tracer made the child's own map. The frames
running at the fork (the callers of `os.fork`) keep the parent's stubs,
named in the parent's map only. Spawned children run the start-up hook,
hence `enable()`, hence `start()`, themselves.

Each map the tracer made is listed for lotus (a file `perfmap_pid_<pid>`
holding the map's device and inode, in lotus's private status folder,
$LOTUS_TRACE_STATUS), and lotus removes those very files once the run's
samples are named.

CPython 3.12 counts each Python call made through a trampoline twice
against its C recursion limit (1500): a job recursing 748 deep fails with
RecursionError, whatever `sys.setrecursionlimit` says, where it runs alone.
On 3.12 the tracer gives each thread's C recursion budget twice the Python
recursion limit more (never past 10,000, 3.13's own limit), so that a job
runs under lotus as it runs alone; where this build's thread state does not
read as 3.12's, the trampolines stay off, with a note.

Below Python 3.12 there are no trampolines: the job's first traced process
(no traced process above it: $LOTUS_TRACE_PARENT unset) notes once that
stacks show native frames only. A failure to turn them on is a note too,
never an error.
"""

import os
import stat
import sys

from . import _core

# `1`: turn the perf trampolines on.
ENV = "LOTUS_PY_FRAMES"

_MAP_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NONBLOCK", 0)
)

# This module's state: the tracer's (`_core._FramesState`).
_S = _core.TRACER.frames
# 3.12's C recursion budget: the most it is raised to.
_C_BUDGET_MAX = 10_000


def wanted():
    """Whether lotus asked for Python frames."""
    return os.environ.get(ENV) == "1"


def map_path(pid):
    """The perf map CPython writes for the process `pid`."""
    return f"/tmp/perf-{pid}.map"


def _tmp_problem():
    """Why /tmp cannot hold a map that no other user can remove or replace
    (None where it can)."""
    try:
        st = os.lstat("/tmp")
    except OSError as e:
        return f"/tmp cannot be read ({e})"
    if not stat.S_ISDIR(st.st_mode):
        return "/tmp is not a folder (a link?)"
    if st.st_uid not in (0, os.geteuid()):
        return f"/tmp is owned by uid {st.st_uid}"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return "/tmp is writable by others without the sticky bit"
    return None


def _describe(st):
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(st.st_mode)
        else "a link"
        if stat.S_ISLNK(st.st_mode)
        else "a file"
        if stat.S_ISREG(st.st_mode)
        else "not a regular file"
    )
    return f"{kind} owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}, {st.st_nlink} link(s)"


def _list_for_lotus(pid, st):
    """Tells lotus this process's map is the tracer's: `perfmap_pid_<pid>`
    in lotus's status folder, `<dev> <ino>`. Nothing where there is no such
    folder (or the process can no longer write there)."""
    _core.status_file(f"perfmap_pid_{pid}", f"{st.st_dev} {st.st_ino}\n".encode())


def make_map(pid=None):
    """Creates this process's perf map, empty, 0600, owned by its user,
    before CPython opens it. Returns None, or why it could not (the
    trampolines must then stay off). A map already there that is this
    user's own regular file with one link (a stale one of an earlier
    process that had this pid) is replaced; anything else is left alone."""
    pid = os.getpid() if pid is None else pid
    problem = _tmp_problem()
    if problem:
        return problem
    path = map_path(pid)
    for attempt in range(2):
        try:
            fd = os.open(path, _MAP_FLAGS, 0o600)
        except FileExistsError:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # gone since: try again
            except OSError as e:
                return f"{path} is already there and cannot be read ({e})"
            stale = (
                attempt == 0
                and stat.S_ISREG(st.st_mode)
                and st.st_uid == os.geteuid()
                and st.st_nlink == 1
                and not st.st_mode & 0o022
            )
            if not stale:
                return f"{path} is already there ({_describe(st)}), not made by lotus"
            try:
                os.unlink(path)
            except OSError as e:
                return f"{path} (a stale map) cannot be removed ({e})"
            continue
        except OSError as e:
            return f"{path} cannot be created ({e})"
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        _list_for_lotus(pid, st)
        return None
    return f"{path} keeps being put back by another process"


def _capi():
    """ctypes' view of the interpreter's frame-evaluator functions and the
    thread state, or None where ctypes or the functions are missing."""
    if _S.api is not None:
        return _S.api or None
    try:
        import ctypes

        api = ctypes.pythonapi
        api.PyInterpreterState_Get.restype = ctypes.c_void_p
        api.PyInterpreterState_Get.argtypes = []
        api._PyInterpreterState_GetEvalFrameFunc.restype = ctypes.c_void_p
        api._PyInterpreterState_GetEvalFrameFunc.argtypes = [ctypes.c_void_p]
        api._PyInterpreterState_SetEvalFrameFunc.restype = None
        api._PyInterpreterState_SetEvalFrameFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        api.PyThreadState_Get.restype = ctypes.c_void_p
        api.PyThreadState_Get.argtypes = []
        _S.api = (ctypes, api)
    except (ImportError, AttributeError, OSError):
        _S.api = False
        return None
    return _S.api


# CPython 3.12's PyThreadState: `_status` (4 bytes) after three pointers,
# then py_recursion_remaining, py_recursion_limit, c_recursion_remaining
# (Include/cpython/pystate.h, the same in every 3.12 release). Checked at
# run time against sys.getrecursionlimit() before anything is written.
_PY_LIMIT_AT = 32
_C_REMAINING_AT = 36


def _c_budget_fix():
    """On 3.12, a function that raises the calling thread's C recursion
    budget by twice the Python recursion limit (capped at _C_BUDGET_MAX),
    or None where no fix is needed; raises RuntimeError where the thread
    state cannot be read safely."""
    if sys.version_info[:2] != (3, 12) or sys.implementation.name != "cpython":
        return None
    api = _capi()
    if api is None:
        raise RuntimeError("ctypes cannot reach the interpreter's thread state")
    ctypes, capi = api

    def fields():
        ts = capi.PyThreadState_Get()
        return (
            ctypes.c_int.from_address(ts + _PY_LIMIT_AT),
            ctypes.c_int.from_address(ts + _C_REMAINING_AT),
        )

    limit = sys.getrecursionlimit()
    py_limit, c_left = fields()
    if py_limit.value != limit or not 0 < c_left.value <= 1500:
        raise RuntimeError(
            f"this build's thread state does not read as CPython 3.12's"
            f" (recursion limit {py_limit.value} against {limit}, C budget {c_left.value})"
        )

    def fix():
        py_limit, c_left = fields()
        want = min(_C_BUDGET_MAX, c_left.value + 2 * max(py_limit.value, 0))
        if c_left.value < want:
            c_left.value = want

    return fix


def _install_c_budget(fix):
    """Raises the C recursion budget now, in every thread started from now
    on, and again whenever the job raises its recursion limit."""
    import threading

    fix()
    inner = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self):
        try:
            fix()
        except Exception:
            pass
        return inner(self)

    threading.Thread._bootstrap_inner = _bootstrap_inner
    set_limit = sys.setrecursionlimit

    def setrecursionlimit(limit):
        set_limit(limit)
        fix()

    setrecursionlimit.__doc__ = set_limit.__doc__
    sys.setrecursionlimit = setrecursionlimit


def _activate():
    """Turns the trampolines on; None, or why not."""
    try:
        sys.activate_stack_trampoline("perf")
    except Exception as e:  # a build without perf support
        return f"{type(e).__name__}: {e}"
    return None


def _before_fork():
    if not _S.ours or not sys.is_stack_trampoline_active():
        return
    api = _capi()
    if api is not None:
        # The frame evaluator set aside, not the trampolines turned off:
        # the parent keeps its stubs, its map and its code-extra slot.
        _, capi = api
        interp = capi.PyInterpreterState_Get()
        _S.saved_eval = capi._PyInterpreterState_GetEvalFrameFunc(interp)
        capi._PyInterpreterState_SetEvalFrameFunc(interp, None)
    else:
        _S.saved_eval = None
        sys.deactivate_stack_trampoline()


def _after_fork_parent():
    if not _S.ours:
        return
    if _S.saved_eval is not None:
        _, capi = _capi()
        capi._PyInterpreterState_SetEvalFrameFunc(capi.PyInterpreterState_Get(), _S.saved_eval)
        _S.saved_eval = None
    elif not sys.is_stack_trampoline_active():
        why = _activate()
        if why:
            _S.ours = False
            _S.note(f"Python frames: the perf trampolines could not be turned on again after a fork in pid {os.getpid()} ({why}): its stacks show native frames only from now on")


def _after_fork_child():
    _S.saved_eval = None
    _S.ours = False
    if not _S.enabled:
        return
    why = make_map()
    if why is None:
        why = _activate()
    if why:
        _S.note(f"Python frames: the perf trampolines stay off in pid {os.getpid()}: {why}; its stacks show native frames only")
        return
    _S.ours = True


def start(note, first):
    """Turns the perf trampolines on in this process when lotus asked for
    Python frames (once: a process where they are on already is left as it
    is). `note(text)` reports what the user should know; `first` says this
    is the job's first traced process, the one that notes an old Python."""
    if not wanted():
        return
    if sys.version_info < (3, 12):
        if first:
            version = f"{sys.version_info[0]}.{sys.version_info[1]}"
            note(
                f"no perf trampolines on Python {version} (3.12+ has them): lotus reads "
                "the samples' Python frames from the interpreter's own state instead"
            )
        return
    if sys.is_stack_trampoline_active():
        return  # the job's own (-X perf): its map is CPython's, not ours
    _S.note = note
    pid = os.getpid()
    try:
        fix = _c_budget_fix()
    except RuntimeError as e:
        note(
            f"Python frames: the perf trampolines stay off in pid {pid}: {e}, and with them a job"
            " recursing deeper than about 740 Python calls would fail; its stacks show native frames only"
        )
        return
    _S.enabled = True
    if fix is not None:
        _install_c_budget(fix)
    if not _S.hooks and hasattr(os, "register_at_fork"):
        _S.hooks = True
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)
    why = make_map()
    if why is None:
        why = _activate()
    if why:
        note(
            f"Python frames: the perf trampolines could not be turned on in pid {pid}"
            f" ({why}): its stacks show native frames only"
        )
        return
    _S.ours = True
