"""Each op as an ITT task, for a collector that is not lotus's own (VTune's):
so that VTune's own task views group the time by op.

When the job runs under such a collector ($LOTUS_TRACE_ITT=tasks, which
`lotus trace run` sets when it finds $INTEL_LIBITTNOTIFY64 already set;
outside `lotus trace run`, $INTEL_LIBITTNOTIFY64 naming a library other than
lotus's), each op span is also an ITT task in domain `lotus` named after
the op: begun at the span's start and ended at its end, on the thread that
runs it, through the `ittapi` module. Without `ittapi`, one line on stderr
says so and the job runs on untouched. Not under a collector, this module
is never imported.

Under lotus's own collector ($LOTUS_TRACE_ITT=collect) the tracer marks
nothing: the collector writes the tasks of the job's libraries into the
trace itself, and op tasks would only repeat the tracer's spans.
"""

import os
import sys

DOMAIN = "lotus"
# Set once the missing module was reported, so that the processes the job
# starts (which inherit the environment) do not say it again.
_NOTED = "LOTUS_TRACE_ITT_NOTED"


def wanted():
    """Whether the ops are to be marked as ITT tasks in this process."""
    mode = os.environ.get("LOTUS_TRACE_ITT")
    if mode is not None:
        return mode == "tasks"
    lib = os.environ.get("INTEL_LIBITTNOTIFY64")
    return bool(lib) and os.path.basename(lib) != "liblotus_control.so"


class Tasks:
    """Begins and ends the ITT tasks of ops (one string handle per name)."""

    __slots__ = ("_begin", "_end", "_domain", "_handle", "_handles")

    def __init__(self, native):
        self._begin = native.task_begin
        self._end = native.task_end
        self._handle = native.StringHandle
        self._domain = native.Domain(DOMAIN)
        self._handles = {}

    def begin(self, name):
        h = self._handles.get(name)
        if h is None:
            h = self._handles[name] = self._handle(name)
        self._begin(self._domain, h, None, None)

    def end(self):
        self._end(self._domain)


def load():
    """The task marker, or None (said once on stderr) when `ittapi` is not
    importable or does not work."""
    try:
        from ittapi import native

        return Tasks(native)
    except Exception as e:  # never fail the job over this
        if not os.environ.get(_NOTED):
            os.environ[_NOTED] = "1"
            collector = os.environ.get("INTEL_LIBITTNOTIFY64") or "the ITT collector"
            sys.stderr.write(
                f"lotus_trace: ops are not marked as ITT tasks for {collector}: the ittapi module "
                f"is not usable ({type(e).__name__}: {e}); `pip install ittapi` in the job's Python "
                "to have them\n"
            )
        return None
