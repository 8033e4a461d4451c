"""Tracing a plain torch / torchvision install, by patching it at import.

What is hooked (each hook checks that the code it replaces looks as
expected, and otherwise leaves it alone and says so in a `#` line of the
log):

- `torch.utils.data._utils.worker._worker_loop`: marks the process as a
  worker, and reads the batch id (the DataLoader's task index, `idx` of
  `(idx, index)` on the index queue) as each task arrives; writes the log
  when the worker ends.
- `_MapDatasetFetcher.fetch`: one batch: SBatch (the whole fetch), SFetch
  (the samples), SCollation (the collate_fn); each `dataset[i]` is an
  SSample, whatever the dataset. `_IterableDatasetFetcher.fetch`: the same
  without samples.
- `_SingleProcessDataLoaderIter._next_data` (num_workers=0): the batch in
  the main process (batch id: the iterator's count of batches) and the
  main process's wait for it.
- `_MultiProcessingDataLoaderIter._next_data` / `_get_data`: SWait, the
  main process waiting for the next batch (ready=1 when it had already
  arrived out of order), with the batch id the workers saw.
- `_BaseDataLoaderIter.__next__`: SConsume, when the loop gets the batch.
- `torchvision.transforms.Compose.__call__` and `transforms.v2.Compose.
  forward`: each transform, per sample, by its class name.
- `torchvision.datasets.DatasetFolder.__getitem__` (ImageFolder too): the
  sample, `Loader` (the image load) and the transform.

Modules imported after `enable()` are patched as they are imported (a
`sys.meta_path` hook); modules already imported are patched at once.
"""

import functools
import sys
import types

from . import _core

_now = _core._now
_ctx = _core._ctx

# Compose classes whose calls trace each transform themselves.
_traced_composes = ()
_names = {}


def _note(what, why):
    _core.note(f"not hooked: {what} ({why})")


def _mark(fn, orig):
    fn.__lotus_trace__ = True
    fn.__lotus_orig__ = orig
    return fn


def _patched(fn):
    return getattr(fn, "__lotus_trace__", False)


def _op_name(t):
    """The op name of a transform: its class's name; a function's own name."""
    k = type(t)
    if k in (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial):
        try:
            n = _names.get(t)
        except TypeError:
            n = None
        if n is None:
            n = _core.clean_name(getattr(t, "__name__", None) or getattr(getattr(t, "func", None), "__name__", None) or k.__name__)
            try:
                _names[t] = n
            except TypeError:
                pass
        return n
    n = _names.get(k)
    if n is None:
        n = _names[k] = _core.clean_name(k.__name__)
    return n


_OpClass = ()  # lotus_trace.wrap's class, set by install()


def _transform_op(t, x):
    """`t(x)` as an op span named after `t` (and an ITT task where one is
    wanted). The span ends while the caller still holds `x`: freeing the
    op's input (a decoded image, a tensor: munmap, page work) is the
    pipeline's, not the op's, and an op mapped alone never pays it."""
    name = _op_name(t)
    t0 = _core.op_begin(name)
    try:
        out = t(x)
    except BaseException:
        _core.op_end_task()
        raise
    _core.op_event(name, t0, _now())
    return out


def _self_tracing(t):
    """Callables that write their own events (no op around them)."""
    return isinstance(t, _OpClass) or (bool(_traced_composes) and isinstance(t, _traced_composes))


# --- torchvision ------------------------------------------------------------


def _patch_compose(mod):
    global _traced_composes
    cls = getattr(mod, "Compose", None)
    orig = getattr(cls, "__call__", None) if cls is not None else None
    if orig is None:
        return _note("torchvision.transforms.Compose", "no Compose.__call__")
    if _patched(orig):
        return
    code = getattr(orig, "__code__", None)
    if code is None or code.co_argcount != 2 or "transforms" not in code.co_names:
        return _note("torchvision.transforms.Compose", "Compose.__call__ is not the expected loop over self.transforms")

    def __call__(self, img):
        if not _core._on:
            return orig(self, img)
        for t in self.transforms:
            if _self_tracing(t):
                img = t(img)
                continue
            img = _transform_op(t, img)
        return img

    functools.update_wrapper(__call__, orig)
    cls.__call__ = _mark(__call__, orig)
    _traced_composes = _traced_composes + (cls,)


def _patch_compose_v2(mod):
    global _traced_composes
    cls = getattr(mod, "Compose", None)
    orig = getattr(cls, "forward", None) if cls is not None else None
    if orig is None:
        return _note("torchvision.transforms.v2.Compose", "no Compose.forward")
    if _patched(orig):
        return
    code = getattr(orig, "__code__", None)
    if code is None or "needs_unpacking" not in code.co_varnames or "transforms" not in code.co_names:
        return _note("torchvision.transforms.v2.Compose", "Compose.forward is not the expected loop (this torchvision is older or newer)")

    def forward(self, *inputs):
        if not _core._on:
            return orig(self, *inputs)
        needs_unpacking = len(inputs) > 1
        outputs = None
        for transform in self.transforms:
            if _self_tracing(transform):
                outputs = transform(*inputs)
            else:
                name = _op_name(transform)
                t0 = _core.op_begin(name)
                try:
                    outputs = transform(*inputs)
                except BaseException:
                    _core.op_end_task()
                    raise
                _core.op_event(name, t0, _now())
            inputs = outputs if needs_unpacking else (outputs,)
        return outputs

    functools.update_wrapper(forward, orig)
    cls.forward = _mark(forward, orig)
    _traced_composes = _traced_composes + (cls,)


def _patch_folder(mod):
    cls = getattr(mod, "DatasetFolder", None)
    orig = getattr(cls, "__getitem__", None) if cls is not None else None
    if orig is None:
        return _note("torchvision.datasets.DatasetFolder", "no DatasetFolder.__getitem__")
    if _patched(orig):
        return
    code = getattr(orig, "__code__", None)
    names = set(code.co_names) if code is not None else set()
    if code is None or code.co_argcount != 2 or not {"samples", "loader", "transform", "target_transform"} <= names:
        return _note("torchvision.datasets.DatasetFolder", "__getitem__ is not the expected loader + transform")

    def item(self, index):
        path, target = self.samples[index]
        t0 = _core.op_begin("Loader")
        try:
            sample = self.loader(path)
        except BaseException:
            _core.op_end_task()
            raise
        _core.op_event("Loader", t0, _now())
        transform = self.transform
        if transform is not None:
            if _self_tracing(transform):
                sample = transform(sample)
            else:
                sample = _transform_op(transform, sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __getitem__(self, index):
        if not _core._on:
            return orig(self, index)
        return _core.sample_call(functools.partial(item, self), index)

    functools.update_wrapper(__getitem__, orig)
    cls.__getitem__ = _mark(__getitem__, orig)


# --- torch.utils.data: workers and fetchers -----------------------------------


class _IndexQueue:
    """The worker's index queue, reading the batch id off each task."""

    def __init__(self, q):
        self._q = q

    def get(self, *args, **kwargs):
        r = self._q.get(*args, **kwargs)
        if type(r) is tuple and len(r) == 2 and type(r[0]) is int:
            _ctx.batch = r[0]
        else:
            _ctx.batch = None
        return r

    def __getattr__(self, name):
        if name == "_q":
            raise AttributeError(name)
        return getattr(self._q, name)


def _patch_worker(mod):
    orig = getattr(mod, "_worker_loop", None)
    if orig is None:
        return _note("DataLoader workers", "torch.utils.data._utils.worker has no _worker_loop")
    if _patched(orig):
        return
    import inspect

    try:
        sig = inspect.signature(orig)
    except (TypeError, ValueError):
        sig = None
    if sig is None or "index_queue" not in sig.parameters:
        _note("batch ids in DataLoader workers", "_worker_loop has no index_queue argument")
        sig = None

    @functools.wraps(orig)
    def _worker_loop(*args, **kwargs):
        # functools.wraps keeps the original's module and name: a spawned
        # worker unpickles the target by name and gets its own (patched, if
        # it traces) function.
        if not _core._on:
            return orig(*args, **kwargs)
        _core.set_role("worker")
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
                bound.arguments["index_queue"] = _IndexQueue(bound.arguments["index_queue"])
                args, kwargs = bound.args, bound.kwargs
            except TypeError:
                pass
        try:
            return orig(*args, **kwargs)
        finally:
            _core.flush()

    mod._worker_loop = _mark(_worker_loop, orig)


def _subset_getitems():
    m = sys.modules.get("torch.utils.data.dataset")
    sub = getattr(m, "Subset", None) if m is not None else None
    return getattr(sub, "__getitems__", None)


def _patch_fetch(mod):
    _patch_map_fetch(mod)
    cls = getattr(mod, "_IterableDatasetFetcher", None)
    orig = getattr(cls, "fetch", None) if cls is not None else None
    if orig is None:
        return _note("batches of iterable datasets", "no _IterableDatasetFetcher.fetch")
    if not _patched(orig):
        cls.fetch = _mark(_collate_swapping_fetch(orig), orig)


def _collate_swapping_fetch(orig):
    """A fetch traced as a whole batch, its collate_fn timed by swapping it
    on the fetcher for the call."""

    @functools.wraps(orig)
    def fetch(self, possibly_batched_index):
        if not _core._on:
            return orig(self, possibly_batched_index)
        span = _core.BatchSpan(_ctx.batch)
        with span:
            if not span._active or "collate_fn" not in self.__dict__:
                return orig(self, possibly_batched_index)
            cf = self.collate_fn
            self.collate_fn = functools.partial(span.run_collate, cf)
            try:
                return orig(self, possibly_batched_index)
            finally:
                self.collate_fn = cf

    return fetch


def _patch_map_fetch(mod):
    cls = getattr(mod, "_MapDatasetFetcher", None)
    orig = getattr(cls, "fetch", None) if cls is not None else None
    if orig is None:
        return _note("batches of map-style datasets", "no _MapDatasetFetcher.fetch")
    if _patched(orig):
        return
    code = getattr(orig, "__code__", None)
    names = set(code.co_names) if code is not None else set()
    if not {"auto_collation", "dataset", "collate_fn"} <= names:
        _note("samples of map-style datasets", "_MapDatasetFetcher.fetch is not the expected loop; batches traced as a whole")
        cls.fetch = _mark(_collate_swapping_fetch(orig), orig)
        return
    subset_getitems = _subset_getitems()

    def fetch(self, possibly_batched_index):
        if not _core._on:
            return orig(self, possibly_batched_index)
        ds = self.dataset
        sample_call = _core.sample_call
        with _core.BatchSpan(_ctx.batch) as span:
            if self.auto_collation:
                getitems = getattr(ds, "__getitems__", None)
                if getitems and subset_getitems is not None and getattr(getitems, "__func__", None) is subset_getitems:
                    # A Subset of a dataset without __getitems__: the same
                    # calls one by one, so that each is a sample.
                    inner = getattr(ds.dataset, "__getitems__", None)
                    if not callable(inner):
                        getitems = None
                if getitems:
                    data = getitems(possibly_batched_index)
                else:
                    get = ds.__getitem__
                    data = [sample_call(get, idx) for idx in possibly_batched_index]
            else:
                data = sample_call(ds.__getitem__, possibly_batched_index)
            return span.run_collate(self.collate_fn, data)

    functools.update_wrapper(fetch, orig)
    cls.fetch = _mark(fetch, orig)


# --- torch.utils.data: the main process ----------------------------------------


def _patch_dataloader(mod):
    base = getattr(mod, "_BaseDataLoaderIter", None)
    single = getattr(mod, "_SingleProcessDataLoaderIter", None)
    multi = getattr(mod, "_MultiProcessingDataLoaderIter", None)

    orig_next = getattr(base, "__next__", None) if base is not None else None
    if orig_next is None:
        _note("SConsume", "no _BaseDataLoaderIter.__next__")
    elif not _patched(orig_next):

        @functools.wraps(orig_next)
        def __next__(self):
            if not _core._on:
                return orig_next(self)
            self._lotus_bid = None
            data = orig_next(self)
            bid = self._lotus_bid
            if bid is not None:
                _core.consume_event(bid)
            return data

        base.__next__ = _mark(__next__, orig_next)

    orig_single = getattr(single, "_next_data", None) if single is not None else None
    if orig_single is None:
        _note("num_workers=0 batches", "no _SingleProcessDataLoaderIter._next_data")
    elif not _patched(orig_single):

        @functools.wraps(orig_single)
        def _next_data_single(self):
            if not _core._on:
                return orig_single(self)
            bid = getattr(self, "_num_yielded", None)
            if type(bid) is not int:
                return orig_single(self)
            t0 = _now()
            prev = _ctx.batch
            _ctx.batch = bid
            try:
                data = orig_single(self)
            finally:
                _ctx.batch = prev
            _core.wait_event(bid, t0, _now(), False)
            self._lotus_bid = bid
            return data

        single._next_data = _mark(_next_data_single, orig_single)

    orig_multi = getattr(multi, "_next_data", None) if multi is not None else None
    orig_get = getattr(multi, "_get_data", None) if multi is not None else None
    if orig_multi is None:
        return _note("the main process's wait (SWait)", "no _MultiProcessingDataLoaderIter._next_data")
    if _patched(orig_multi):
        return
    if orig_get is not None and not _patched(orig_get):

        @functools.wraps(orig_get)
        def _get_data(self):
            r = orig_get(self)
            if _core._on:
                try:
                    self._lotus_got = r[0]
                except (TypeError, IndexError, KeyError):
                    pass
            return r

        multi._get_data = _mark(_get_data, orig_get)

    @functools.wraps(orig_multi)
    def _next_data_multi(self):
        if not _core._on:
            return orig_multi(self)
        t0 = _now()
        self._lotus_got = None
        rid = getattr(self, "_rcvd_idx", None)
        ready = False
        try:
            info = self._task_info.get(rid)
            ready = info is not None and len(info) == 2
        except (AttributeError, TypeError):
            pass
        data = orig_multi(self)
        t1 = _now()
        rcvd = getattr(self, "_rcvd_idx", None)
        if getattr(self, "_in_order", True):
            bid = rcvd - 1 if type(rcvd) is int else None
        else:
            # Out of order (in_order=False): the batch is the one just received.
            got = self._lotus_got
            bid = got if type(got) is int else (rcvd - 1 if type(rcvd) is int else None)
        if bid is not None and bid >= 0:
            _core.wait_event(bid, t0, t1, ready and bid == rid)
            self._lotus_bid = bid
        return data

    multi._next_data = _mark(_next_data_multi, orig_multi)


# --- installing ------------------------------------------------------------------

_HOOKS = {
    "torch.utils.data._utils.worker": _patch_worker,
    "torch.utils.data._utils.fetch": _patch_fetch,
    "torch.utils.data.dataloader": _patch_dataloader,
    "torchvision.transforms.transforms": _patch_compose,
    "torchvision.transforms.v2._container": _patch_compose_v2,
    "torchvision.datasets.folder": _patch_folder,
}


def _run_hook(name, module):
    try:
        _HOOKS[name](module)
    except Exception as e:  # a hook must never break the user's import
        _note(name, f"{type(e).__name__}: {e}")


class _PostImportFinder:
    """Patches the modules in _HOOKS right after they are executed."""

    def __init__(self, pending):
        self.pending = pending

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        loader = spec.loader
        from importlib.machinery import SourceFileLoader, SourcelessFileLoader

        if not isinstance(loader, (SourceFileLoader, SourcelessFileLoader)):
            # Only per-module loader objects get a per-module hook.
            return spec
        orig_exec = loader.exec_module
        pending = self.pending

        def exec_module(module):
            try:
                orig_exec(module)
            finally:
                try:
                    del loader.exec_module
                except AttributeError:
                    pass
            if pending.pop(name, None) is not None:
                _run_hook(name, module)

        loader.exec_module = exec_module
        return spec


_finder = None


def install():
    """Patches what is imported, and hooks the imports of the rest."""
    global _finder, _OpClass
    from . import _Op

    _OpClass = _Op
    pending = {}
    for name in _HOOKS:
        module = sys.modules.get(name)
        if module is not None:
            _run_hook(name, module)
        else:
            pending[name] = True
    if _finder is None:
        _finder = _PostImportFinder(pending)
        sys.meta_path.insert(0, _finder)
    else:
        _finder.pending.update(pending)
