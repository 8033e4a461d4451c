"""lotus_trace: a timeline of every op, sample and batch of a data pipeline,
in every DataLoader worker, and of the main process waiting for batches.

One call switches it on (or run the job under `lotus trace run --out DIR --
python train.py`, which needs no change to the code):

    import lotus_trace
    lotus_trace.enable("trace/")          # before the DataLoader starts

With torch and torchvision importable, the DataLoader (workers and main
process), every dataset's `__getitem__` / `__getitems__` (an op named after
the dataset's class), each item an IterableDataset yields, the
worker_init_fn, `transforms.Compose` (v1 and v2), the wrappers (RandomApply,
RandomChoice, RandomOrder, the AutoAugment-style policies' ops: children of
the wrapper's span), every v2 transform wherever it is called (MixUp and
CutMix in a collate_fn), albumentations' transforms and containers, and
`DatasetFolder` / `ImageFolder` are traced with no other change; each call
a dataset's own `__getitem__` makes is a child span (`_finer`: through
`sys.monitoring` on Python 3.12+, `sys.setprofile` before); `lotus trace
run --op MODULE:QUALNAME` names functions of your own. Anything else is
traced by marking it:

    crop = lotus_trace.wrap(my_crop, "Crop")      # an op, per call
    ds = lotus_trace.TracedDataset(my_dataset)    # SSample per __getitem__
    with lotus_trace.span("Decode"):               # a block, as an op
        img = decode(raw)

A pipeline of its own (no torch) marks its batches:

    # in a worker process
    with lotus_trace.worker_batch(batch_id) as b:
        samples = [ds[i] for i in indices]
        with b.collate():
            batch = collate(samples)
    # in the main process
    with lotus_trace.main_wait(batch_id, ready=batch_id in buffer):
        ...                                        # get the batch
    lotus_trace.main_consume(batch_id)

Each process writes `<DIR>/<prefix>_main_pid_<pid>` or
`<DIR>/<prefix>_worker_pid_<pid>` (`<prefix>.<n>_...` when a file or link is
already at that name: a log is always a new file of its own): lines `S<Name>,<start_ns>,<duration_ns>`
(the original Lotus fork's format) with `,kind=...,batch=...,sample=...`
fields, wall-clock nanoseconds (`time.time_ns()`), and `,cpu=` on op spans
(the CPU time their thread ran). When tracing is off every function here is
a cheap pass-through: `import lotus_trace` works in any Python with this
package's folder on sys.path, and marked code runs unchanged outside a
lotus run.
"""

import functools as _functools

from . import _core
from ._core import BatchSpan, disable, enable, enabled, flush, set_role, trace_dir

__all__ = [
    "enable",
    "disable",
    "enabled",
    "flush",
    "trace_dir",
    "wrap",
    "span",
    "TracedDataset",
    "batch",
    "worker_batch",
    "main_wait",
    "main_consume",
    "set_role",
    "now_ns",
    "BatchSpan",
]

now_ns = _core._now
# The process's tracer (`_core.Tracer`): its switch `on` is read per call.
_T = _core.TRACER


class _Op:
    """A callable timed as an op named `name` on every call."""

    def __init__(self, fn, name):
        self.fn = fn
        self.name = _core.clean_name(name)
        self.__wrapped__ = fn
        try:
            _functools.update_wrapper(self, fn, assigned=("__doc__", "__module__", "__qualname__"), updated=())
        except (AttributeError, TypeError):
            pass

    def __call__(self, *args, **kwargs):
        if not _T.on:
            return self.fn(*args, **kwargs)
        t0 = _core.op_begin(self.name)
        paused = _core.pause_profile()
        try:
            return self.fn(*args, **kwargs)
        finally:
            if paused is not None:
                _core.resume_profile(paused)
            _core.op_event(self.name, t0, _core._now())

    def __get__(self, obj, objtype=None):
        # A wrapped function used as a method binds like one.
        if obj is None:
            return self
        return _functools.partial(self, obj)

    def __getstate__(self):
        return {"fn": self.fn, "name": self.name}

    def __setstate__(self, state):
        self.fn = state["fn"]
        self.name = state["name"]
        self.__wrapped__ = self.fn

    def __repr__(self):
        return f"lotus_trace.wrap({self.fn!r}, {self.name!r})"


def _default_name(fn):
    # A function by its qualified name, a lambda by `<lambda>@file.py:LINE`,
    # any other callable by its class's name (as lotus names ops itself).
    return _core.callable_name(fn)


def wrap(fn=None, name=None):
    """`fn`, timed as the op `name` (default: its name, or its class's)
    on every call, inside the current batch and sample. Also a decorator:
    `@lotus_trace.wrap` or `@lotus_trace.wrap(name="Crop")`. The result
    pickles when `fn` does (spawned workers)."""
    if isinstance(fn, str) and name is None:
        fn, name = None, fn
    if fn is None:
        return lambda f: wrap(f, name)
    if isinstance(fn, _Op) and name is None:
        return fn
    return _Op(fn, name if name is not None else _default_name(fn))


class span:
    """Times a block of code as the op `name`:

        with lotus_trace.span("Decode"):
            img = decode(raw)

    Under `lotus trace run` (or after `enable()`) the block is one op span
    in the log, in the current batch and sample, with the CPU time its
    thread ran (`cpu=`); a span inside another op's span (a transform's,
    the dataset's `__getitem__`) is its child, so its time is its own row
    and no longer the parent's. Outside a lotus run it does nothing: the
    block runs unchanged, so the mark can stay in the code. Not
    re-entrant: use a new `span(...)` for each block."""

    __slots__ = ("name", "t0")

    def __init__(self, name):
        self.name = _core.clean_name(name)
        self.t0 = None

    def __enter__(self):
        if _T.on:
            self.t0 = _core.op_begin(self.name)
        return self

    def __exit__(self, *exc):
        if self.t0 is not None:
            if _T.on:
                _core.op_event(self.name, self.t0, _core._now())
            else:  # tracing stopped inside the block: still end its task
                _core.op_end_task()
        self.t0 = None
        return False


class TracedDataset:
    """A map-style dataset whose every item is one `SSample` event (kind
    sample, with its batch and index), the ops inside it tagged with both.
    Everything else is the wrapped dataset's (`len`, attributes)."""

    def __init__(self, dataset, name="Sample"):
        self.dataset = dataset
        self.name = _core.clean_name(name)

    def __getitem__(self, index):
        return _core.sample_call(self.dataset.__getitem__, index, self.name)

    def __len__(self):
        return len(self.dataset)

    def __getattr__(self, attr):
        # Not for dunders (pickling, copying, and torch's `__getitems__`,
        # which would hide the samples) nor before __init__ ran.
        if attr.startswith("__") or attr in ("dataset", "name"):
            raise AttributeError(attr)
        return getattr(self.dataset, attr)

    def __repr__(self):
        return f"TracedDataset({self.dataset!r})"


def batch(batch_id):
    """A context manager around the fetch and collation of batch
    `batch_id` (see BatchSpan); `with b.collate():` marks the collation."""
    return BatchSpan(batch_id)


def worker_batch(batch_id):
    """`batch(batch_id)` in a worker process: also marks this process as a
    worker (its log is `<prefix>_worker_pid_<pid>`)."""
    if _T.role != "worker":
        _core.set_role("worker")
    return BatchSpan(batch_id)


class main_wait:
    """`with lotus_trace.main_wait(batch_id, ready=...) as w:` around the
    main process getting batch `batch_id`; `w.ready = True` inside the block
    when it turns out the batch was already there. Writes SWait."""

    __slots__ = ("batch", "ready", "t0")

    def __init__(self, batch_id, ready=False):
        self.batch = int(batch_id)
        self.ready = ready
        self.t0 = None

    def __enter__(self):
        if _T.on:
            self.t0 = _core._now()
        return self

    def __exit__(self, *exc):
        if self.t0 is not None and _T.on:
            _core.wait_event(self.batch, self.t0, _core._now(), self.ready)
        self.t0 = None
        return False


def main_consume(batch_id):
    """The main process's training loop got batch `batch_id` now: SConsume."""
    if _T.on:
        _core.consume_event(batch_id)
