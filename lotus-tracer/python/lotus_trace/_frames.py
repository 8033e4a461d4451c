"""Python frames in the native call stacks lotus samples: CPython 3.12+'s
perf trampolines.

With $LOTUS_PY_FRAMES=1 (lotus sets it when it records call stacks), each
traced process turns them on, `sys.activate_stack_trampoline("perf")`:
every Python function then runs through a small stub of machine code of
its own, and CPython appends a line naming each stub to
`/tmp/perf-<pid>.map` (`<hex start> <hex size> py::<qualname>:<file>`),
so that a sampled native stack shows the Python functions it runs in.

Forked children (DataLoader workers started by fork): CPython turns the
trampolines on again in the child, which writes its own
`/tmp/perf-<child pid>.map` and gives each function it calls a stub of its
own (seen on 3.12.1 and 3.13.0). The frames already running at the fork
(the callers of `os.fork`) keep the parent's stubs, named in the parent's
map only. Spawned children run the start-up hook, hence `enable()`, hence
`start()`, themselves.

Below Python 3.12 there are no trampolines: the job's first traced process
(no traced process above it: $LOTUS_TRACE_PARENT unset) notes once that
stacks show native frames only. A failure to turn them on is a note too,
never an error.
"""

import os
import sys

# `1`: turn the perf trampolines on.
ENV = "LOTUS_PY_FRAMES"


def wanted():
    """Whether lotus asked for Python frames."""
    return os.environ.get(ENV) == "1"


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
            note(f"Python frames need Python 3.12 or later (this is {version}): stacks show native frames only")
        return
    try:
        if not sys.is_stack_trampoline_active():
            sys.activate_stack_trampoline("perf")
    except Exception as e:  # a build without perf support, /tmp not writable
        note(
            f"Python frames: the perf trampolines could not be turned on in pid {os.getpid()}"
            f" ({type(e).__name__}: {e}): its stacks show native frames only"
        )
