"""Tracing Ray Data pipelines, by patching Ray Data at import (the hooks of
`_torch`'s meta_path finder; Ray need not be installed).

- `ray.data.dataset.Dataset.map`, `map_batches`, `flat_map` and `filter`
  (in the driver, when the pipeline is built): the UDF is wrapped so that
  each call is an op span named as Ray names the operator (`Map(parse)`,
  `MapBatches(resize)`, `FlatMap(explode)`, `Filter(keep)`: what
  `Dataset.stats()` and Ray's dashboard call it), in whichever Ray worker
  process on whichever node runs it (the wrapper is pickled with the
  UDF; the tracer is loaded in every process of a `lotus trace run`,
  Ray's workers included). A function stays a function (of the same
  name, so Ray names the operator as before), a generator function a
  generator function (each step of it a span), and a callable class (an
  actor pool's UDF) a subclass of itself whose `__call__` is the span.
  The process that runs a UDF is marked a worker (its log
  `<prefix>_worker_pid_<pid>`).
- `ray.data.datasource.datasource.ReadTask.__call__` (in each worker, as
  it reads): each read task is an op span `Read<Datasource>` (`ReadRange`,
  `ReadParquet`...), its blocks' making included.
- `ray.data.iterator.DataIterator._iter_batches` (the driver's
  `iter_batches`, `iter_rows`, `iter_torch_batches`, and a Ray Train
  worker's shard): each batch the loop waits for is a wait span
  (`SWait`, numbered from 0 per iteration), its handing over a
  consumption (`SConsume`), as the DataLoader's are: the verdict's waits.

- `ray.data.datasource.datasink.Datasink.write`, and each subclass's own
  `write` (those defined at the hook, and those defined later, a user's
  sink unpickled in a worker, through `__init_subclass__`): each write
  task's writing is an op span `Write<name>` (`WriteJSON`, `WriteParquet`:
  the sink's `get_name()`, as Ray names the write tasks).

Each hook checks the method it replaces has the expected
shape, and otherwise leaves it alone and says so in a `#` line of the log.
"""

import functools
import inspect
import os
import sys

from . import _core

_T = _core.TRACER

# The operator names of the patched Dataset methods (Ray's own).
_KINDS = {"map": "Map", "map_batches": "MapBatches", "flat_map": "FlatMap", "filter": "Filter"}


def _note(what, why):
    _core.note(f"not hooked: {what} ({why})")


def _in_worker():
    """Marks a process that runs a UDF as a worker, once."""
    if _T.on and _T.role != "worker":
        _core.set_role("worker")


def _timed_call(name, fn, args, kwargs):
    if not _T.on:
        return fn(*args, **kwargs)
    _in_worker()
    return _core.call_op(name, fn, *args, **kwargs)


def _traced_udf(fn, name):
    """`fn` (a function, generator function or callable class) with each
    call (each step, for a generator) an op span `name`."""
    if getattr(fn, "_lotus_ray_op", None) is not None:
        return fn
    if inspect.isclass(fn):
        orig = fn.__call__

        def __call__(self, *args, **kwargs):
            return _timed_call(name, orig, (self, *args), kwargs)

        __call__.__qualname__ = f"{getattr(fn, '__qualname__', fn.__name__)}.__call__"

        # A subclass of the same name: Ray names the operator by it and
        # builds the actor pool from it as from the user's class.
        sub = type(fn.__name__, (fn,), {"__call__": __call__, "_lotus_ray_op": name})
        sub.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        sub.__module__ = fn.__module__
        return sub
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def steps(*args, **kwargs):
            it = fn(*args, **kwargs)
            while True:
                try:
                    item = _timed_call(name, next, (it,), {})
                except StopIteration:
                    return
                yield item

        steps._lotus_ray_op = name
        return steps
    if not callable(fn):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return _timed_call(name, fn, args, kwargs)

    call._lotus_ray_op = name
    return call


def _udf_name(fn):
    """The UDF's part of Ray's operator name (`parse`, `<lambda>`, a
    class's name)."""
    if inspect.isclass(fn) or inspect.isfunction(fn):
        return fn.__name__
    if isinstance(fn, functools.partial):
        return getattr(fn.func, "__name__", type(fn.func).__name__)
    if inspect.ismethod(fn):
        return f"{type(fn.__self__).__name__}.{fn.__name__}"
    return type(fn).__name__


def _patch_dataset(mod):
    cls = getattr(mod, "Dataset", None)
    if cls is None:
        return _note("Ray Data's UDFs", "no ray.data.dataset.Dataset")
    for method, kind in _KINDS.items():
        orig = getattr(cls, method, None)
        params = list(inspect.signature(orig).parameters) if orig is not None else []
        if orig is None or params[:2] != ["self", "fn"]:
            _note(f"Ray Data's Dataset.{method}", "not `(self, fn, ...)` (this Ray is older or newer)")
            continue
        if getattr(orig, "_lotus_patched", False):
            continue

        def patched(self, fn, *args, _orig=orig, _kind=kind, **kwargs):
            if _T.on and fn is not None and not isinstance(fn, str):
                fn = _traced_udf(fn, _core.clean_name(f"{_kind}({_udf_name(fn)})"))
            return _orig(self, fn, *args, **kwargs)

        functools.update_wrapper(patched, orig)
        patched._lotus_patched = True
        setattr(cls, method, patched)


def _patch_read_task(mod):
    cls = getattr(mod, "ReadTask", None)
    orig = getattr(cls, "__call__", None) if cls is not None else None
    if orig is None:
        return _note("Ray Data's read tasks", "no ReadTask.__call__")
    if getattr(orig, "_lotus_patched", False):
        return None
    if not inspect.isgeneratorfunction(orig):
        return _note("Ray Data's read tasks", "ReadTask.__call__ is not a generator (this Ray is older or newer)")

    def __call__(self):
        if not _T.on:
            yield from orig(self)
            return
        _in_worker()
        name = _core.clean_name(_read_name(self))
        it = _core.call_op(name, orig, self)
        while True:
            try:
                block = _core.call_op(name, next, it)
            except StopIteration:
                return
            yield block

    functools.update_wrapper(__call__, orig)
    __call__._lotus_patched = True
    cls.__call__ = __call__


def _read_name(task):
    """The read operator's name as Ray gives it (`ReadRange`,
    `ReadParquet`: the first part of the task's name,
    `ReadRange->Map(decode)`), else `Read`."""
    try:
        import ray

        first = (ray.get_runtime_context().get_task_name() or "").split("->")[0]
    except Exception:
        first = ""
    return first if first.startswith("Read") else "Read"


def _traced_write(write):
    """A datasink's `write`, each call an op span `Write<name>` (the
    sink's `get_name()`, as Ray names the write tasks: `WriteJSON`)."""
    if getattr(write, "_lotus_patched", False):
        return write

    @functools.wraps(write)
    def traced(self, *args, **kwargs):
        if not _T.on:
            return write(self, *args, **kwargs)
        _in_worker()
        try:
            name = _core.clean_name("Write" + self.get_name())
        except Exception:
            name = "Write"
        return _core.call_op(name, write, self, *args, **kwargs)

    traced._lotus_patched = True
    return traced


def _patch_datasink(mod):
    base = getattr(mod, "Datasink", None)
    if base is None or not callable(getattr(base, "write", None)):
        return _note("Ray Data's writes", "no Datasink.write")
    if getattr(base, "_lotus_patched", False):
        return None

    def wrap(cls):
        if "write" in cls.__dict__ and callable(cls.__dict__["write"]):
            cls.write = _traced_write(cls.__dict__["write"])

    # Each sink's own `write` (a subclass defines its own, not calling the
    # base's): those defined now, and those defined later (a user's sink,
    # unpickled in a worker) as they are made.
    todo = [base]
    while todo:
        cls = todo.pop()
        wrap(cls)
        todo.extend(cls.__subclasses__())
    orig = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if orig is not None:
            orig.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        wrap(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)
    base._lotus_patched = True


def _patch_iterator(mod):
    cls = getattr(mod, "DataIterator", None)
    orig = getattr(cls, "_iter_batches", None) if cls is not None else None
    if orig is None:
        return _note("Ray Data's iterators", "no DataIterator._iter_batches")
    if getattr(orig, "_lotus_patched", False):
        return None

    @functools.wraps(orig)
    def _iter_batches(self, *args, **kwargs):
        batches = orig(self, *args, **kwargs)
        return _Waited(batches) if _T.on else batches

    _iter_batches._lotus_patched = True
    cls._iter_batches = _iter_batches


class _Waited:
    """An iterable of batches whose every `next` is a wait for a batch."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        it = iter(self.batches)
        n = 0
        while True:
            t0 = _core._now()
            try:
                batch = next(it)
            except StopIteration:
                return
            if _T.on:
                _core.wait_event(n, t0, _core._now(), False)
                _core.consume_event(n)
            n += 1
            yield batch


HOOKS = {
    "ray.data.dataset": _patch_dataset,
    "ray.data.datasource.datasink": _patch_datasink,
    "ray.data.datasource.datasource": _patch_read_task,
    "ray.data.iterator": _patch_iterator,
}


def ray_place():
    """This process's Ray job and node (the node id's first 12 hex
    digits), as its header names them, where it is a worker of a Ray
    cluster (started by a raylet), else None: the job from Ray's own
    context, as an actor's environment may name none (`ffffffff`)."""
    if "ray" not in sys.modules or not os.environ.get("RAY_RAYLET_PID"):
        return None
    try:
        import ray

        ctx = ray.get_runtime_context()
        return _core.clean_name(f"ray:{ctx.get_job_id()}"), _core.clean_name(ctx.get_node_id()[:12])
    except Exception:
        return None
