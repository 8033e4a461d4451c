"""`lotus trace run --op MODULE:QUALNAME`: the user's own functions and
methods as op spans, with no change to their code.

$LOTUS_TRACE_OPS holds the specs, one a line (lotus checked their form).
In every traced process each spec's module is hooked as it is imported
(`_torch`'s meta_path finder; at once when it already is): each function
of the module, and each function, staticmethod and classmethod of its
classes (nested ones too), whose `__qualname__` matches QUALNAME (a glob
as `fnmatch.fnmatchcase` reads it: `*`, `?`, `[...]`, `[!...]`,
case-sensitive, `*` matches dots too; matched by `glob_match`, not by
fnmatch: see there), and that the module
itself defines, is replaced by a wrapper that writes one op span per call,
named after its qualname (`module.qualname` where another callable has that
name). A generator function's span is each step of it (`next`), not its
creation. `__main__` is the script: it runs before anything could be hooked
after it, so its functions are wrapped when a DataLoader worker starts and
at the main process's first batch.

A match writes `# lotus-trace: op-matched MODULE:QUALNAME` in the log and,
under `lotus trace run`, a file `op_matched_<n>` (n: the spec's line) in
its private status folder; the first traced call of what it wrapped writes
`# lotus-trace: op-ran MODULE:QUALNAME` and a file `op_ran_<n>`: at the end
lotus warns of each spec no process matched, and of each whose functions
never ran as ops in any process.

A module-level function is rebound both in its module and in the dict its
code looks names up in (`__globals__`): they differ in a spawned or
forkserver worker, whose `__mp_main__` module holds a copy of the globals
the script ran in (multiprocessing's `_fixup_main_from_path` runs it through
`runpy.run_path`, which returns a copy), so the script's own calls would
otherwise reach the original function.
"""

import fnmatch
import functools
import inspect
import os
import re
import sys
import types

from . import _core

ENV = "LOTUS_TRACE_OPS"

# This module's state: the tracer's (`_core._OpsState`: the specs, which
# matched and ran).
_S = _core.TRACER.ops
_T = _core.TRACER


# --- QUALNAME globs ---------------------------------------------------------
#
# Hand-written, not fnmatch: fnmatch turns a whole glob into one regular
# expression, and on Python before 3.9 (the wheel supports 3.8) that
# expression backtracks exponentially: `*a*a*a*a*a*a*a*a*b` against one long
# function name stalled a job's imports 15-21 s. `glob_match` means what
# `fnmatch.fnmatchcase` means on the Python it runs on (case-sensitive; `/`
# and `.` are characters like any other; `*` any run of characters, `?` any
# one; a `[` with no closing `]` a plain `[`) in at most len(name) x
# len(pattern) steps: two pointers, and a mismatch only ever resumes from
# the last `*`, one character further. A `[...]` class matches one
# character through fnmatch's own translation of that class alone (its
# `[!...]`, ranges and their quirks are fnmatch's: a one-character regular
# expression cannot backtrack).

_STAR = object()
_ANY = object()


def _glob_tokens(pattern):
    """A glob as tokens: `_STAR`, `_ANY`, a character, or a class (the
    compiled regular expression of that one `[...]`)."""
    tokens = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
        elif c == "?":
            tokens.append(_ANY)
        elif c == "[":
            # Where fnmatch.translate ends a class.
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                tokens.append("[")
                continue
            tokens.append(re.compile(fnmatch.translate(pattern[i - 1 : j + 1])).match)
            i = j + 1
        else:
            tokens.append(c)
    return tokens


def glob_match(name, pattern):
    """Whether `name` matches the glob `pattern`, as
    `fnmatch.fnmatchcase(name, pattern)` says, in at most len(name) x
    len(pattern) steps on every Python."""
    globs = _S.globs
    tokens = globs.get(pattern)
    if tokens is None:
        tokens = globs[pattern] = _glob_tokens(pattern)
    p = s = 0
    np_, ns = len(tokens), len(name)
    star = -1  # the last `*`'s token index
    resume = 0  # where the name resumes after it
    while s < ns:
        if p < np_:
            token = tokens[p]
            if token is _STAR:
                star, resume = p, s
                p += 1
                continue
            if token is _ANY or (token == name[s] if type(token) is str else token(name[s]) is not None):
                p += 1
                s += 1
                continue
        if star < 0:
            return False
        resume += 1
        p, s = star + 1, resume
    while p < np_ and tokens[p] is _STAR:
        p += 1
    return p == np_


def _parse(text):
    specs = []
    for n, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if not line:
            continue
        module, sep, qual = line.partition(":")
        if not sep or not module or not qual:
            _core.note(f"--op {line!r} ignored: not MODULE:QUALNAME")
            continue
        specs.append((n, module, qual, line))
    return specs


def _status_mark(name):
    """An empty file `name` in lotus's private status folder (once: one
    already there says the same)."""
    status = _T.status_dir
    if not status:
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        os.close(os.open(os.path.join(status, name), flags, 0o600))
    except OSError:
        pass


def _record(spec):
    n, _module, _qual, text = spec
    if n in _S.matched:
        return
    _S.matched.add(n)
    _core.note(f"op-matched {text}")
    _status_mark(f"op_matched_{n}")


def _record_ran(pending):
    """The specs (line numbers) in `pending` wrapped something that now
    ran as an op: said once per process (and once in the status folder);
    `pending` is emptied, so a wrapper asks only at its first call."""
    ran = _S.ran
    for n in pending:
        if n in ran:
            continue
        ran.add(n)
        text = next((s[3] for s in _S.specs if s[0] == n), str(n))
        _core.note(f"op-ran {text}")
        _status_mark(f"op_ran_{n}")
    pending.clear()


def _wrap(fn, name, specs=()):
    """`fn` writing one op span `name` per call (per step for a generator);
    its first traced call records the specs (line numbers) that matched it
    as run (`_record_ran`)."""
    pending = [n for n in specs if n not in _S.ran]
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args, **kwargs):
            it = fn(*args, **kwargs)
            if not _T.on:
                return (yield from it)
            if pending:
                _record_ran(pending)
            while True:
                token = _core.op_begin(name)
                paused = _core.pause_profile()
                try:
                    value = next(it)
                except StopIteration as stop:
                    if paused is not None:
                        _core.resume_profile(paused)
                    _core.op_event(name, token, _core._now())
                    return stop.value
                except BaseException:
                    if paused is not None:
                        _core.resume_profile(paused)
                    _core.op_end_task()
                    raise
                if paused is not None:
                    _core.resume_profile(paused)
                _core.op_event(name, token, _core._now())
                yield value

        wrapper = gen
    else:

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if not _T.on:
                return fn(*args, **kwargs)
            if pending:
                _record_ran(pending)
            return _core.call_op(name, fn, *args, **kwargs)

        wrapper = call
    wrapper.__lotus_op__ = True
    return wrapper


def _name_of(fn, module_name):
    qual = fn.__qualname__
    code = getattr(fn, "__code__", fn)
    return _core.claim_name(code, _core.clean_name(qual), _core.clean_name(f"{module_name}.{qual}"))


def _candidates(owner, module_name, depth=0):
    """(holder, attribute, function, kind) for what `owner` (a module or a
    class) defines: functions, and a class's static and class methods."""
    for attr, value in list(vars(owner).items()):
        kind = None
        fn = value
        if isinstance(value, staticmethod):
            kind, fn = staticmethod, value.__func__
        elif isinstance(value, classmethod):
            kind, fn = classmethod, value.__func__
        if inspect.isfunction(fn):
            if getattr(fn, "__module__", None) == module_name and not getattr(fn, "__lotus_op__", False):
                yield owner, attr, fn, kind
        elif isinstance(value, type) and value.__module__ == module_name and depth < 4:
            if owner is value:
                continue
            yield from _candidates(value, module_name, depth + 1)


def _hook_module(module, names):
    """Wraps what the specs for module names `names` match in `module`."""
    specs = [s for s in _S.specs if s[1] in names]
    if not specs:
        return
    module_name = getattr(module, "__name__", None)
    for holder, attr, fn, kind in list(_candidates(module, module_name)):
        qual = getattr(fn, "__qualname__", attr)
        hits = [s for s in specs if glob_match(qual, s[2])]
        if not hits:
            continue
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            _core.note(f"--op: {module_name}:{qual} not wrapped (a coroutine function: its span would end before it runs)")
            continue
        wrapped = _wrap(fn, _name_of(fn, module_name), [s[0] for s in hits])
        original = vars(holder).get(attr)
        new = kind(wrapped) if kind is not None else wrapped
        try:
            setattr(holder, attr, new)
        except (AttributeError, TypeError) as e:
            _core.note(f"--op: {module_name}:{qual} not wrapped ({type(e).__name__}: {e})")
            continue
        # The names the module's own code looks up (see the module doc).
        code_globals = getattr(fn, "__globals__", None)
        if isinstance(holder, types.ModuleType) and type(code_globals) is dict and code_globals is not vars(holder):
            if code_globals.get(attr) is original:
                code_globals[attr] = new
        for s in hits:
            _record(s)


def at_dataloader():
    """At a worker's start and the main process's first batch: wraps the
    script's functions the specs name."""
    if _S.main_done:
        return
    wrap_main()
    _S.main_done = True



def note_finer():
    """A dataset's own code (not torchvision's DatasetFolder, whose loader
    and transforms are spans already) ran as one span where spans finer
    than it cannot be had (LOTUS_TRACE_FINER=0, or not CPython):
    with no --op, lotus says once per run how to see inside it (a file
    `note_finer_spans` in its status folder)."""
    if _S.finer_noted or _S.specs:
        return
    _S.finer_noted = True
    _status_mark("note_finer_spans")


def wrap_main():
    """Wraps what the `__main__` specs match in the script (a spawned
    worker's copy of it is `__mp_main__`): once per process, when its
    functions are all defined (a worker's start, the first batch)."""
    if _S.main_done or not _S.specs:
        return
    _S.main_done = True
    for name in ("__main__", "__mp_main__"):
        module = sys.modules.get(name)
        if module is not None:
            try:
                _hook_module(module, ("__main__", name))
            except Exception as e:  # never break the job
                _core.note(f"--op in {name}: {type(e).__name__}: {e}")


def install(add_hook):
    """Hooks the modules $LOTUS_TRACE_OPS names."""
    text = os.environ.get(ENV, "")
    if not text.strip():
        return
    specs = _S.specs = _parse(text)
    for module in sorted({s[1] for s in specs}):
        if module in ("__main__", "__mp_main__"):
            continue
        add_hook(module, functools.partial(_hook_module, names=(module,)))


def specs():
    """Whether any --op was given."""
    return bool(_S.specs)
