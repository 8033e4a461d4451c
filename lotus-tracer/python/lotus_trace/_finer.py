"""Spans finer than a dataset's `__getitem__`, with no flag (every Python).

While a dataset's `__getitem__` (or `__getitems__`) runs as an op span, each
call its own code makes directly is a child span named after the callee
(`callable_name`: a function by its qualified name, a lambda by
`<lambda>@file.py:LINE`, a C function by its name, an object by its
class's): so `load_image`, `cv2.imread` or `self.augment(...)` called from
`__getitem__` are rows of their own, and only what `__getitem__` runs
itself between them stays its exclusive time.

What is shared by both ways of seeing the calls (below): the names, the
callables left alone, the threshold and the bounded tables. Callables lotus
traces already (its wrappers: torchvision's and albumentations'
transforms, `--op` functions, `lotus_trace.wrap`) are left to their own
spans. A callee's calls are written once two of them ran `MIN_NS` or more
of CPU (the first of those two is written then; smaller calls before it
are not, so a row's `calls` can miss a few): the many tiny calls of a
`__getitem__` (`len`, `isinstance`, a dict lookup) stay its exclusive time
instead of filling the log, and one slow call of a tiny callee (a garbage
collection falls in any call that allocates) does not make it a row; a
callee written once is written every time after; a torchvision transform
(`self.crop(img)`, v1's: v2's write their own spans wherever called) is
written from its first call, as a Compose's transforms are. A call that
raised is not written, as for any op that raised. Set `LOTUS_TRACE_FINER=0` to turn it
off. What it keeps per callee is bounded: its name (see
`_core.claim_name`: a class made per item is not kept alive, and past 32
callables of one qualified name they share one row) and tables of at most
`MAX_KEYS` entries, emptied when full.

Python 3.12+: `sys.monitoring` (PEP 669), with events local to the code
objects concerned, so that nothing else in the process pays for them:

- `CALL`, `C_RETURN` and `C_RAISE` on the dataset's `__getitem__` code: a
  call starts; a callee that is not a plain Python function (a C function,
  a class, an object with `__call__`, a bound method kept in a variable)
  ends at its `C_RETURN` at the call site (`C_RAISE`: it raised);
- `PY_RETURN` on each plain Python function so called: it ends when that
  code returns to the dataset's frame. A Python callee that raised gets no
  local event (`PY_UNWIND` is global only): its span is dropped at the next
  call of the frame or at the end of `__getitem__`.

Costs there: one Python callback per call made by a traced `__getitem__`
(about a microsecond, plus the clock reads of a span when one is written),
and a callback at each return of the Python functions it calls, wherever
they are called from.

Python 3.8 to 3.11: `sys.setprofile`, on the thread running the dataset's
op only and only while it runs (`enter` sets it, `leave` puts back what was
there: a profile function the job set is called from ours meanwhile; a
profiler set from C that `sys.getprofile()` cannot give back to us as a
function, cProfile's, leaves the dataset's op whole, said once in the
log; one set from C with no object, which `sys.getprofile()` does not
show at all (yappi sets its hook so), is displaced on that thread and not
put back). The profile function learns the dataset's frame at its `call`
event; then

- `call` of a frame whose caller is the dataset's frame starts a Python
  callee (not while a C callee runs: a Python function a C function calls,
  `sorted`'s key, is that C callee's) and its `return` ends it (a `return`
  by an exception, read off the frame's last instruction, drops it);
- `c_call` in the dataset's frame starts a C callee (the callable is the
  event's argument), `c_return` ends it and `c_exception` drops it.

What a Python callee is named after is read off its frame, once per code
object: a frame running `type(obj).__call__` (nn.Module's call, a
transform's) is the object's call, named as on 3.12 after the object (its
class); `__init__` (or `__new__`) of the class of its first argument is the
class's call, named after the class; any other is the function, by its
code's qualified name (3.11) or, before 3.11, by its name as found on its
first argument's class (a method) or as the code's name (a module's
function; a nested one without its `outer.<locals>.`). A function reached
through a decorator's wrapper is named after the wrapper, and functions
wrapped by one decorator share its row. Implicit calls are calls here: a
`with` block's `__enter__` / `__exit__`, a property, a Python `__getitem__`,
each step of a generator iterated by `for` (its own span per step, as
`--op` makes them). A C callable the interpreter does not report to a
profile function (a class, a NumPy ufunc, a C object with `__call__`) is
no span of its own here: its time stays the dataset's, unless it calls
back into Python functions (then those are the dataset's callees).

Costs there: the interpreter calls the profile function at every call and
return of every Python function and every call and return of a C function
that the thread makes while the dataset's op runs, however deep (each call
also copies the frame's locals into a dict and back,
`PyFrame_FastToLocals`). The function rejects a deeper frame at its first
test (two comparisons), yet a Python call below the dataset's own costs
about 0.25 us more on a VM (call and return), so `__getitem__` code that
makes many small Python calls deep down (a pure-Python image library, a
tokenizer) runs slower while traced, and that cost is part of the callee
spans and of the dataset's. With a profile function set the interpreter
also runs the thread's bytecode on its tracing path: unspecialized on 3.11
(a loop of arithmetic making no call ran 1.6-1.8 times as long), about 10%
slower on 3.10, the same on 3.8. So inside a callable lotus writes a span
of itself (its wrappers: `_core.pause_profile`) the profile function is
set aside: what runs there is deeper than the dataset's own calls. Code
that spends its time in C (NumPy, OpenCV, torch) barely notices; measured
figures are in docs/src/commands/trace.md. Per op, `enter` and `leave`
cost about 1.5 us; the profile functions are made once per thread, and
let go of the frames they saw at `leave`.
"""

import opcode
import os
import sys
import types

from . import _core

# A callee's calls are written once two of them ran this long (thread CPU,
# ns). Well above what a tiny call can be charged by others: a sample
# taken in it (15-20 us of the thread's CPU on a virtual machine, more with
# a stack copy of up to 64 KiB, `--stacks dwarf`) and a first call's set-up
# (on Python 3.12+ with Python frames on, CPython compiles the function's
# perf trampoline and writes its map line). At 20 us a tiny callee of a busy
# sampled run became a row once the two met in one worker.
MIN_NS = 100_000

_mon = getattr(sys, "monitoring", None)
# Before Python 3.12: profile functions (CPython's: the last instruction of
# a frame tells a return from an exception).
_profile = _mon is None and sys.implementation.name == "cpython" and hasattr(sys, "getprofile")
# This module's state: the tracer's (`_core._FinerState`: the tool id and
# the tables). The tables, only ever emptied in place, are also bound here
# by name: the callbacks run at every call a traced `__getitem__` makes.
_T = _core.TRACER
_S = _T.finer
_watched = _S.watched  # dataset code objects with local CALL events
_returns = _S.returns  # callee code objects with local PY_RETURN events
_written = _S.written  # callee names written once (then always)
_first = _S.first  # callee name -> its first call of MIN_NS CPU or more, until written
_callees = _S.callees  # callee key (`_key`) -> (name, Python code ending it), or None: traced already
_quiet = _S.quiet  # callee key -> its calls in a row under MIN_NS of CPU, while not written
# The tables above keyed by code objects, classes and C functions are
# emptied when they reach this many entries: a callee made per call (a
# class per item) is then neither kept alive by them nor grows them. They
# are caches: a callee keeps its name (`_core.claim_name`), its events
# stay set, and a quiet callee is timed afresh.
MAX_KEYS = 256
# After this many calls in a row under MIN_NS, a callee not written is
# timed by the wall clock alone until one call runs MIN_NS long.
QUIET_AFTER = 8
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_BuiltinType = types.BuiltinFunctionType
_builtin_key = _core._builtin_key
_now = _core._now
_cpu = _core._cpu
# Code of this package: its files' names start so (as Python gives them,
# from the folder it imported the package from).
_here_prefix = os.path.join(os.path.dirname(__file__), "")

# The dataset ops open on each thread (`_core._FinerThread`).
_state = _S.threads


def available():
    """Whether finer spans can be had here: Python 3.12+ (sys.monitoring) or
    CPython 3.8 to 3.11 (sys.setprofile), and not turned off
    (`LOTUS_TRACE_FINER=0`)."""
    return (_mon is not None or _profile) and os.environ.get("LOTUS_TRACE_FINER", "1") != "0"


def dataset_code(get):
    """The code object whose calls are to be seen of a dataset's bound
    `__getitem__` / `__getitems__`, or of an IterableDataset's iterator (a
    generator's code, or its class's `__next__`); None where that is not
    Python code, or is lotus's."""
    code = getattr(get, "gi_code", None)
    if code is None and not callable(get):
        get = getattr(type(get), "__next__", None)
    if code is None:
        fn = getattr(get, "__func__", get)
        code = getattr(fn, "__code__", None)
    if code is None or _is_ours(code):
        return None
    return code


def _is_ours(code):
    return code.co_filename.startswith(_here_prefix)


def enter(code):
    """A dataset op whose own calls (in `code`, None where `available()`
    said no) become spans is starting on this thread; returns a token for
    `leave`, or None."""
    if code is None or not _T.on:
        return None
    if _mon is not None:
        return _enter_monitoring(code)
    return _enter_profile(code)


def leave(entry):
    """The dataset op of `enter`'s token `entry` ended (a callee still open
    raised: its span is not written)."""
    if entry is None:
        return
    if _mon is not None:
        _leave_monitoring(entry)
    else:
        _leave_profile(entry)


# --- shared: what a callee is named, which are left alone, what is written --


def _key(callee):
    """What a callee's decisions are kept by: a function's code, a C
    function itself, an object's class (or a class itself)."""
    t = type(callee)
    if t is _FunctionType:
        return callee.__code__
    if t is _MethodType:
        return getattr(callee.__func__, "__code__", t)
    if t is _BuiltinType:
        # A method bound to an object (`array.astype`) is a new one per
        # object: kept by its class's method, not keeping the object.
        key = _builtin_key(callee)
        try:
            hash(key)
            return key
        except TypeError:
            return t
    if t is type or isinstance(callee, type):
        # A class (of any metaclass: ABCMeta's classes are not one callee).
        try:
            hash(callee)
            return callee
        except TypeError:
            return t
    return t


def _callee(callee, key):
    """A callee's (name, code of the plain Python function it is or binds,
    or None), or None when lotus traces it already: worked out once per
    key."""
    if _traced(callee):
        info = None
    else:
        fn = callee.__func__ if type(callee) is _MethodType else callee
        info = (_name(callee), fn.__code__ if type(fn) is _FunctionType else None)
        if _transform(callee):
            _written.add(info[0])
    return _keep(key, info)


def _transform(callee):
    """Whether a callee is a torchvision transform (an object of a class of
    `torchvision.transforms`; v2's write their own spans): its calls are all
    written, from the first, as a Compose's transforms are."""
    t = type(callee)
    if t is _FunctionType or t is _MethodType or t is _BuiltinType or isinstance(callee, type):
        return False
    return str(getattr(t, "__module__", "")).startswith("torchvision.transforms")


def _keep(key, info):
    if len(_callees) >= MAX_KEYS:
        _callees.clear()
    _callees[key] = info
    return info


def _traced(callee):
    """Whether lotus writes a span for this callable already (its wrapper
    is lotus's code), or it is lotus's own."""
    fn = getattr(callee, "__func__", callee)
    code = getattr(fn, "__code__", None)
    if code is None and not isinstance(callee, type):
        call = getattr(type(callee), "__call__", None)
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    if code is not None and _is_ours(code):
        return True
    return getattr(fn, "__module__", "") is not None and str(getattr(fn, "__module__", "")).startswith("lotus_trace")


def _name(callee):
    if type(callee) is _BuiltinType and str(getattr(callee, "__qualname__", "")).startswith("_"):
        # A C function held by a private class (torch's
        # `_VariableFunctionsClass.from_numpy`): its own name.
        return _core.claim_name(_builtin_key(callee), _core.clean_name(callee.__name__), _core.clean_name(f"{callee.__module__}.{callee.__name__}"))
    if isinstance(callee, type):
        return _core.claim_name(
            callee,
            _core.clean_name(callee.__qualname__),
            _core.clean_name(f"{callee.__module__}.{callee.__qualname__}"),
        )
    # An object's class is not kept by callable_name's cache: `_callees`
    # keeps it (MAX_KEYS), as it keeps the classes called.
    return _core.callable_name(callee, keep=False)


def _pending(name, key, end):
    """A callee's call starting now: [name, t0, c0, what ends it, key] for
    `_write` (c0 None: a quiet callee, timed by the wall clock alone)."""
    if _quiet.get(key, 0) >= QUIET_AFTER and name not in _written:
        # Many calls in a row under MIN_NS: its wall time alone is
        # watched (the thread's CPU clock costs a system call).
        return [name, _now(), None, end, key]
    return [name, _now(), _cpu(), end, key]


def _write(p):
    """A callee's call (`_pending`'s) ended, now: written, or kept for
    later, or not written (see the module's docstring)."""
    name, t0, c0, _, key = p
    t1 = _now()
    if c0 is None:
        # A quiet callee: measured afresh once one call ran MIN_NS long.
        if t1 - t0 >= MIN_NS:
            _quiet[key] = 0
        return
    cpu = _cpu() - c0
    c = _T.ctx
    if name not in _written:
        # Not written yet: only once two of its calls ran MIN_NS of CPU
        # each (one can, by a garbage collection or a first call's
        # set-up, in any tiny callee); the first is kept until then, and
        # written with the second.
        if cpu < MIN_NS:
            if len(_quiet) >= MAX_KEYS and key not in _quiet:
                _quiet.clear()
            _quiet[key] = _quiet.get(key, 0) + 1
            return
        first = _first.get(name)
        if first is None:
            _first[name] = (t0, t1, cpu, c.batch, c.sample)
            return
        del _first[name]
        _written.add(name)
        ft0, ft1, fcpu, fb, fs = first
        _T._op_line(name, ft0, ft1, f",cpu={fcpu}", fb, fs)
    _T._op_line(name, t0, t1, f",cpu={cpu}", c.batch, c.sample)


# --- Python 3.12+: sys.monitoring ---------------------------------------------


def _claim():
    """Our tool id: the profiler's if free, else a free unnamed one."""
    if _S.tool is not None or _S.failed:
        return _S.tool
    for tool in (_mon.PROFILER_ID, 3, 4):
        if _mon.get_tool(tool) is None:
            try:
                _mon.use_tool_id(tool, "lotus_trace")
            except ValueError:
                continue
            E = _mon.events
            _mon.register_callback(tool, E.CALL, _on_call)
            _mon.register_callback(tool, E.C_RETURN, _on_c_return)
            _mon.register_callback(tool, E.C_RAISE, _on_c_raise)
            _mon.register_callback(tool, E.PY_RETURN, _on_py_return)
            _S.tool = tool
            return tool
    _S.failed = True
    _core.note("finer spans: every sys.monitoring tool id is taken (a debugger, coverage or profiler); spans stop at each dataset's __getitem__")
    return None


def _enter_monitoring(code):
    tool = _S.tool
    if tool is None:
        tool = _claim()
    if tool is None:
        return None
    if code not in _watched:
        E = _mon.events
        try:
            _mon.set_local_events(tool, code, E.CALL | E.C_RETURN | E.C_RAISE)
        except (ValueError, TypeError):
            return None
        if len(_watched) >= MAX_KEYS:
            _watched.clear()
        _watched.add(code)
    st = _state.stack
    if st is None:
        st = _state.stack = []
    entry = [code, None, None]
    st.append(entry)
    return entry


def _leave_monitoring(entry):
    st = _state.stack
    while st:
        if st.pop() is entry:
            break


def _entry(code, frame):
    """The open dataset op this event of `code` in `frame` belongs to."""
    st = _state.stack
    if not st:
        return None
    e = st[-1]
    if e[0] is not code:
        return None
    if e[1] is None:
        e[1] = frame
    elif e[1] is not frame:
        return None  # another activation of the same code (recursion)
    return e


def _monitored_callee(callee, key):
    """`_callee`, with PY_RETURN events set on the plain Python function
    the callee is or binds (its return to the dataset's frame ends it)."""
    info = _callee(callee, key)
    fcode = info[1] if info is not None else None
    if fcode is not None and fcode not in _returns:
        _mon.set_local_events(_S.tool, fcode, _mon.events.PY_RETURN)
        if len(_returns) >= MAX_KEYS:
            _returns.clear()
        _returns.add(fcode)
    return info


def _on_call(code, offset, callee, arg0):
    e = _entry(code, sys._getframe(1))
    if e is None:
        return
    e[2] = None  # a Python callee before this one raised: not written
    try:
        key = _key(callee)
        info = _callees[key] if key in _callees else _monitored_callee(callee, key)
    except Exception:
        return
    if info is not None:
        e[2] = _pending(info[0], key, info[1])


def _on_c_return(code, offset, callee, arg0):
    e = _entry(code, sys._getframe(1))
    if e is not None and e[2] is not None and e[2][3] is None:
        p = e[2]
        e[2] = None
        _write(p)


def _on_c_raise(code, offset, callee, arg0):
    e = _entry(code, sys._getframe(1))
    if e is not None:
        e[2] = None


def _on_py_return(code, offset, retval):
    st = _state.stack
    if not st:
        return
    e = st[-1]
    p = e[2]
    if p is None or p[3] is not code or e[1] is not sys._getframe(2):
        return
    e[2] = None
    _write(p)


# --- Python 3.8 to 3.11: sys.setprofile -------------------------------------

_getprofile = sys.getprofile
_setprofile = sys.setprofile
# A frame's last instruction when it returns or yields (anything else: it
# is being left by an exception).
_LEFT_NORMALLY = frozenset(opcode.opmap[n] for n in ("RETURN_VALUE", "YIELD_VALUE", "YIELD_FROM") if n in opcode.opmap)
# What a Python callee's code is (`_code_info`), besides a plain function's
# (name, code): the call of its first argument (an object), or of its
# first argument's class (`__init__`) or first argument (`__new__`).
_BY_OBJECT = "object"
_BY_INSTANCE_CLASS = "instance class"
_BY_CLASS = "class"


def _enter_profile(code):
    prev = _getprofile()
    if prev is None:
        # The common case: this thread's functions, made once, armed for
        # this op.
        fns = _state.profile
        if fns is None:
            fns = _state.profile = _profile_functions(None, None)
    elif _is_ours_profile(prev):
        # A dataset op inside another's: functions of its own.
        fns = _profile_functions(None, None)
    elif callable(prev):
        fns = _profile_functions(None, prev)
    else:
        if not _S.busy_noted:
            _S.busy_noted = True
            _core.note(f"finer spans: a profiler set from C ({type(prev).__name__}) is on this thread; spans stop at each dataset's __getitem__ while it is")
        return None
    fns[2](code)
    _setprofile(fns[0])
    return (fns, prev)


def _leave_profile(entry):
    fns, prev = entry
    now = _getprofile()
    if now is fns[0] or now is fns[1]:
        _setprofile(prev)
    # The dataset's frame and a callee's are let go.
    fns[2](None)


def _profile_functions(code, chain):
    """The profile functions of a dataset op running `code`: `find`, until
    the dataset's frame starts, then `run` (see the module's docstring),
    and `arm(code)`, which makes them those of another op (or of none:
    `arm(None)` lets go of the frames they hold). `chain`: a profile
    function of the job's, called first."""
    D = None  # the dataset's frame
    p = None  # the callee running: `_pending`'s list, [3] its frame (None: a C callee)

    def run(frame, event, arg):
        nonlocal p
        if frame.f_back is not D:
            if frame is not D:
                return  # deeper
            # The dataset's frame itself.
            if event == "c_call":
                p = _c_pending(arg)
            elif event == "c_return":
                if p is not None and p[3] is None:
                    q = p
                    p = None
                    _write(q)
            else:
                # c_exception: the C callee raised; return: the dataset's
                # frame ends (or yields) with a callee open, which raised.
                p = None
        elif event == "call":
            if p is None:
                p = _py_pending(frame)
        elif event == "return" and p is not None and p[3] is frame:
            q = p
            p = None
            if arg is None and frame.f_code.co_code[frame.f_lasti] not in _LEFT_NORMALLY:
                return  # it raised
            _write(q)

    if chain is not None:
        inner = run

        def run(frame, event, arg):
            chain(frame, event, arg)
            inner(frame, event, arg)

    def find(frame, event, arg):
        nonlocal D
        if chain is not None:
            chain(frame, event, arg)
        if event == "call" and frame.f_code is code:
            D = frame
            _setprofile(run)

    def arm(c):
        nonlocal code, D, p
        code = c
        D = p = None

    return find, run, arm


# The code of the profile functions `_profile_functions` makes: `find`,
# `run` and `run` calling the job's own. `run` alone is set aside while a
# callable lotus writes a span of runs (`_core.pause_profile`): with the
# job's profile function called from it, the job's sees every call.
_FIND_CODE = _profile_functions(None, None)[0].__code__
_RUN_CODE = _profile_functions(None, None)[1].__code__
_CHAINED_CODE = _profile_functions(None, len)[1].__code__
_S.pausable = _RUN_CODE


def _is_ours_profile(fn):
    code = getattr(fn, "__code__", None)
    return code is _RUN_CODE or code is _FIND_CODE or code is _CHAINED_CODE


def _c_pending(callee):
    """A C callee of the dataset's frame starting: its `_pending` list, or
    None (lotus traces it already)."""
    try:
        key = _key(callee)
        info = _callees[key] if key in _callees else _callee(callee, key)
    except Exception:
        return None
    if info is None:
        return None
    return _pending(info[0], key, None)


def _py_pending(frame):
    """A Python callee of the dataset's frame starting in `frame`: its
    `_pending` list, or None (lotus's code, or traced already)."""
    try:
        code = frame.f_code
        info = _callees[code] if code in _callees else _code_info(frame, code)
        if info is None:
            return None
        if type(info) is str:
            # A call of an object or a class: named after it, as on 3.12.
            first = frame.f_locals[code.co_varnames[0]]
            callee = type(first) if info is _BY_INSTANCE_CLASS else first
            key = _key(callee)
            info = _callees[key] if key in _callees else _callee(callee, key)
            if info is None:
                return None
        else:
            key = code
    except Exception:
        return None
    return _pending(info[0], key, frame)


def _code_of(fn):
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _code_info(frame, code):
    """What the Python callee running `code` in `frame` is, worked out once
    per code: None (lotus's), a `_BY_*` marker (see there), or a plain
    function's (name, code)."""
    globs = frame.f_globals
    module = globs.get("__name__") or "?"
    if _is_ours(code) or str(module).startswith("lotus_trace"):
        return _keep(code, None)
    first = None
    if code.co_argcount:
        first = frame.f_locals.get(code.co_varnames[0])
        cls = type(first)
        name = code.co_name
        if name == "__init__" and _code_of(getattr(cls, "__init__", None)) is code:
            return _keep(code, _BY_INSTANCE_CLASS)
        if name == "__new__" and isinstance(first, type) and _code_of(getattr(first, "__new__", None)) is code:
            return _keep(code, _BY_CLASS)
        if _code_of(getattr(cls, "__call__", None)) is code:
            return _keep(code, _BY_OBJECT)
    qual = getattr(code, "co_qualname", None) or _method_qualname(first, code) or code.co_name
    return _keep(code, (_core.code_name(code, qual, module), code))


def _method_qualname(first, code):
    """Before 3.11 (no `co_qualname`): the qualified name of the method of
    `code` as found on its first argument's class (a class itself, for a
    classmethod), or None."""
    if first is None:
        return None
    cls = first if isinstance(first, type) else type(first)
    for k in getattr(cls, "__mro__", ()):
        v = k.__dict__.get(code.co_name)
        if v is not None and _code_of(v) is code:
            return getattr(getattr(v, "__func__", v), "__qualname__", None)
    return None


if hasattr(os, "register_at_fork"):
    # A first call kept in the parent is the parent's to write.
    os.register_at_fork(after_in_child=_first.clear)
