"""Spans finer than a dataset's `__getitem__`, with no flag (Python 3.12+).

While a dataset's `__getitem__` (or `__getitems__`) runs as an op span, each
call its own code makes directly is a child span named after the callee
(`callable_name`: a function by its qualified name, a lambda by
`<lambda>@file.py:LINE`, a C function by its name, an object by its
class's): so `load_image`, `cv2.imread` or `self.augment(...)` called from
`__getitem__` are rows of their own, and only what `__getitem__` runs
itself between them stays its exclusive time.

How: `sys.monitoring` (PEP 669), with events local to the code objects
concerned, so that nothing else in the process pays for them:

- `CALL`, `C_RETURN` and `C_RAISE` on the dataset's `__getitem__` code: a
  call starts; a callee that is not a plain Python function (a C function,
  a class, an object with `__call__`, a bound method kept in a variable)
  ends at its `C_RETURN` at the call site (`C_RAISE`: it raised, and its
  span is not written, as for any op that raised);
- `PY_RETURN` on each plain Python function so called: it ends when that
  code returns to the dataset's frame. A Python callee that raised gets no
  local event (`PY_UNWIND` is global only): its span is dropped at the next
  call of the frame or at the end of `__getitem__`.

Callables lotus traces already (its wrappers: torchvision's and
albumentations' transforms, `--op` functions, `lotus_trace.wrap`) are left
to their own spans. A callee's calls are written once two of them ran
`MIN_NS` or more of CPU (the first of those two is written then; smaller
calls before it are not, so a row's `calls` can miss a few): the many tiny calls of a `__getitem__` (`len`, `isinstance`, a dict
lookup) stay its exclusive time instead of filling the log, and one slow
call of a tiny callee (a garbage collection falls in any call that
allocates) does not make it a row; a callee written once is written
every time after. Set `LOTUS_TRACE_FINER=0` to turn it off.

Costs: one Python callback per call made by a traced `__getitem__` (about
a microsecond, plus the clock reads of a span when one is written), and a
callback at each return of the Python functions it calls, wherever they are
called from. What it keeps per callee is bounded: its name (see
`_core.claim_name`: a class made per item is not kept alive, and past 32
callables of one qualified name they share one row) and tables of at most
`MAX_KEYS` entries, emptied when full.
"""

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
# Code of this package: its files' names start so (as Python gives them,
# from the folder it imported the package from).
_here_prefix = os.path.join(os.path.dirname(__file__), "")

# The dataset ops open on each thread (`_core._FinerThread`).
_state = _S.threads


def available():
    """Whether finer spans can be had here: Python 3.12+ and not turned off
    (`LOTUS_TRACE_FINER=0`)."""
    return _mon is not None and os.environ.get("LOTUS_TRACE_FINER", "1") != "0"


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
    """A dataset op whose own calls (in `code`) become spans is starting on
    this thread; returns a token for `leave`, or None."""
    if code is None or not _T.on or not available():
        return None
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


def leave(entry):
    """The dataset op of `enter`'s token `entry` ended (a callee still open
    raised: its span is not written)."""
    if entry is None:
        return
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
    """A callee's (name, Python code that ends it or None), or None when
    lotus traces it already: worked out once per key."""
    fn = callee.__func__ if type(callee) is _MethodType else callee
    if _traced(callee):
        info = None
    else:
        # A plain Python function, or a bound method of one (a method kept
        # in a variable or an attribute): no C_RETURN, its PY_RETURN ends
        # it.
        fcode = fn.__code__ if type(fn) is _FunctionType else None
        if fcode is not None and fcode not in _returns:
            _mon.set_local_events(_S.tool, fcode, _mon.events.PY_RETURN)
            if len(_returns) >= MAX_KEYS:
                _returns.clear()
            _returns.add(fcode)
        info = (_name(callee), fcode)
    if len(_callees) >= MAX_KEYS:
        _callees.clear()
    _callees[key] = info
    return info


def _on_call(code, offset, callee, arg0):
    e = _entry(code, sys._getframe(1))
    if e is None:
        return
    e[2] = None  # a Python callee before this one raised: not written
    try:
        key = _key(callee)
        info = _callees[key] if key in _callees else _callee(callee, key)
    except Exception:
        return
    if info is None:
        return
    name, fcode = info
    if _quiet.get(key, 0) >= QUIET_AFTER and name not in _written:
        # Many calls in a row under MIN_NS: its wall time alone is
        # watched (the thread's CPU clock costs a system call).
        e[2] = [name, _core._now(), None, fcode, key]
    else:
        e[2] = [name, _core._now(), _core._cpu(), fcode, key]


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


def _write(p):
    name, t0, c0, _, key = p
    t1 = _core._now()
    if c0 is None:
        # A quiet callee: measured afresh once one call ran MIN_NS long.
        if t1 - t0 >= MIN_NS:
            _quiet[key] = 0
        return
    cpu = _core._cpu() - c0
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
    return _core.callable_name(callee)


if hasattr(os, "register_at_fork"):
    # A first call kept in the parent is the parent's to write.
    os.register_at_fork(after_in_child=_first.clear)
