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
  arrived out of order), with the batch id the workers saw; the span is
  the whole `__next__` call around it.
- `_BaseDataLoaderIter.__next__`: SConsume, when the loop gets the batch
  (and `$LOTUS_STOP_AFTER`'s stop: `_loader`).
- `DataLoader.__iter__` and `__init__`: the loader's settings at each
  `iter(loader)` (`kind=config`), and `$LOTUS_LOADER`'s (`_loader`).
- `_MultiProcessingDataLoaderIter.__init__` (`iter(loader)` starting the
  workers): SWorkersStart (`kind=start`); its `_shutdown_workers`, where
  it stops them (the last `next()` of an epoch, or the iterator dropped),
  SWorkersStop (`kind=stop`), except a persistent iterator's (its workers
  stop once, when the job drops it, after the loop).
- `_MapDatasetFetcher.fetch` also makes each `dataset[i]` (and a
  dataset's `__getitems__`) an op span named after the dataset's class
  (through Subset, the wrapped dataset's); `_IterableDatasetFetcher.fetch`
  each `next()` of the dataset's iterator (the last, which raises
  StopIteration, too), and writes no batch for a fetch that delivered
  nothing; `_worker_loop`'s `init_fn` (the
  worker_init_fn) is an op span named after it.
- `torchvision.transforms.Compose.__call__` and `transforms.v2.Compose.
  forward`: each transform, per sample, by its class name (a function by
  its qualname, a lambda by `<lambda>@file.py:LINE`); a Compose inside a
  Compose or a wrapper is a `Compose` span, parent of its transforms'.
- v1 `RandomApply.forward`, `RandomOrder.__call__`, `RandomChoice.__call__`
  and `autoaugment._apply_op`; v2 `Transform.__call__` (every v2 transform,
  wherever called: wrappers, MixUp / CutMix in a collate_fn) and
  `_AutoAugmentBase._apply_image_or_video_transform`: a wrapper's
  transforms (a policy's ops, by op name) are child spans of its span.
- kornia's augmentations (`_BasicAugmentationBase`, through nn.Module's
  `__call__`): each call a span named after its class.
- albumentations (`_albumentations`), Ray Data (`_ray`), Hugging Face datasets' transforms
  and timm's augmentations (`_libraries`), and `--op` (`_ops`).
- `torchvision.datasets.DatasetFolder.__getitem__` (ImageFolder too): the
  sample, `Loader` (the image load) and the transform.

Modules imported after `enable()` are patched as they are imported (a
`sys.meta_path` hook); modules already imported are patched at once.
"""

import functools
import sys

from . import _core, _finer, _loader, _ops

_now = _core._now
_pause_profile = _core.pause_profile
_T = _core.TRACER
_ctx = _T.ctx  # the tracer's per-thread context
# What this module patched: the tracer's (`_core._PatchState`: the Compose
# classes whose calls trace each transform themselves, the classes whose
# every call writes its own span, lotus_trace.wrap's class, the hooks added
# at install and the import hook).
_P = _T.patches


def _note(what, why):
    _core.note(f"not hooked: {what} ({why})")


def _mark(fn, orig):
    fn.__lotus_trace__ = True
    fn.__lotus_orig__ = orig
    return fn


def _patched(fn):
    return getattr(fn, "__lotus_trace__", False)


def _op_name(t):
    """The op name of a transform: its class's name; a function's
    qualified name (`_core.callable_name`)."""
    return _core.callable_name(t)



def _transform_op(t, *args):
    """`t(*args)` as an op span named after `t` (and an ITT task where one
    is wanted). The span ends while the caller still holds the input:
    freeing the op's input (a decoded image, a tensor: munmap, page work)
    is the pipeline's, not the op's, and an op mapped alone never pays it."""
    name = _op_name(t)
    t0 = _core.op_begin(name)
    paused = _pause_profile()
    try:
        out = t(*args)
    except BaseException:
        if paused is not None:
            _core.resume_profile(paused)
        _core.op_end_task()
        raise
    if paused is not None:
        _core.resume_profile(paused)
    _core.op_event(name, t0, _now())
    return out


def _self_tracing(t):
    """Callables that write their own span (no op around them). A Compose
    is not one: inside another Compose or a wrapper it is a parent span
    (`Compose`) of its transforms' spans."""
    p = _P
    if isinstance(t, p.op_class):
        return True
    spanning = p.self_spanning
    if not spanning or not isinstance(t, spanning):
        return False
    composes = p.traced_composes
    return not (composes and isinstance(t, composes))


def _apply(t, *args):
    """A transform inside a Compose or a wrapper: its own span (child of
    the wrapper's), unless it writes one itself."""
    if _self_tracing(t):
        return t(*args)
    return _transform_op(t, *args)


def _top_level(t, x):
    """The transform a dataset applies: a Compose (its transforms are the
    spans) or one transform."""
    composes = _P.traced_composes
    if _self_tracing(t) or (composes and isinstance(t, composes)):
        return t(x)
    return _transform_op(t, x)


# --- torchvision ------------------------------------------------------------


def _patch_compose(mod):
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
        if not _T.on:
            return orig(self, img)
        # Its transforms are spans: the finer spans' profile function has
        # nothing to see in it (`_core.pause_profile`).
        paused = _pause_profile()
        try:
            for t in self.transforms:
                img = _apply(t, img)
        finally:
            if paused is not None:
                _core.resume_profile(paused)
        return img

    functools.update_wrapper(__call__, orig)
    cls.__call__ = _mark(__call__, orig)
    _P.traced_composes = _P.traced_composes + (cls,)


def _patch_compose_v2(mod):
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
        if not _T.on:
            return orig(self, *inputs)
        needs_unpacking = len(inputs) > 1
        outputs = None
        for transform in self.transforms:
            outputs = _apply(transform, *inputs)
            inputs = outputs if needs_unpacking else (outputs,)
        return outputs

    functools.update_wrapper(forward, orig)
    cls.forward = _mark(forward, orig)
    _P.traced_composes = _P.traced_composes + (cls,)


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
            sample = _top_level(transform, sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __getitem__(self, index):
        if not _T.on:
            return orig(self, index)
        return _core.sample_call(functools.partial(item, self), index)

    functools.update_wrapper(__getitem__, orig)
    cls.__getitem__ = _mark(__getitem__, orig)


def _code_names(fn):
    code = getattr(fn, "__code__", None)
    return set(code.co_names) if code is not None else None


def _patch_v1_wrappers(mod):
    """torchvision.transforms (v1) RandomApply, RandomOrder, RandomChoice
    (torchvision 0.8 to 0.2x: the loops below are theirs): each transform
    they run is a child span of theirs (the wrapper's own span is the one
    its Compose writes)."""
    _patch_compose(mod)
    apply_cls = getattr(mod, "RandomApply", None)
    orig = getattr(apply_cls, "forward", None)
    names = _code_names(orig)
    if names is None or not {"p", "rand", "transforms"} <= names:
        _note("torchvision.transforms.RandomApply", "RandomApply.forward is not the expected loop")
    elif not _patched(orig):
        torch = sys.modules.get("torch")

        def forward(self, img):
            if not _T.on:
                return orig(self, img)
            if self.p < torch.rand(1):
                return img
            for t in self.transforms:
                img = _apply(t, img)
            return img

        functools.update_wrapper(forward, orig)
        apply_cls.forward = _mark(forward, orig)

    order_cls = getattr(mod, "RandomOrder", None)
    orig_order = getattr(order_cls, "__call__", None)
    names = _code_names(orig_order)
    if names is None or not {"shuffle", "transforms"} <= names:
        _note("torchvision.transforms.RandomOrder", "RandomOrder.__call__ is not the expected loop")
    elif not _patched(orig_order):
        import random

        def order_call(self, img):
            if not _T.on:
                return orig_order(self, img)
            order = list(range(len(self.transforms)))
            random.shuffle(order)
            for i in order:
                img = _apply(self.transforms[i], img)
            return img

        functools.update_wrapper(order_call, orig_order)
        order_cls.__call__ = _mark(order_call, orig_order)

    choice_cls = getattr(mod, "RandomChoice", None)
    orig_choice = getattr(choice_cls, "__call__", None)
    names = _code_names(orig_choice)
    if names is None or not {"choices", "transforms", "p"} <= names:
        _note("torchvision.transforms.RandomChoice", "RandomChoice.__call__ is not random.choices over self.transforms")
    elif not _patched(orig_choice):
        import random

        def choice_call(self, *args):
            if not _T.on:
                return orig_choice(self, *args)
            t = random.choices(self.transforms, weights=self.p)[0]
            return _apply(t, *args)

        functools.update_wrapper(choice_call, orig_choice)
        choice_cls.__call__ = _mark(choice_call, orig_choice)


def _policy_op_name(op_name):
    """An AutoAugment-style policy's op (`Rotate`, `ShearX`, ...): a child
    span of the policy's, named after the op."""
    return _core.claim_name(("policy-op", op_name), _core.clean_name(op_name), _core.clean_name(f"AutoAugment.{op_name}"))


def _patch_v1_autoaugment(mod):
    """torchvision.transforms.autoaugment (0.10 to 0.2x): AutoAugment,
    RandAugment, TrivialAugmentWide and AugMix apply each op through the
    module's `_apply_op(img, op_name, magnitude, ...)`: each application is
    a span named after the op, a child of the policy's."""
    orig = getattr(mod, "_apply_op", None)
    code = getattr(orig, "__code__", None)
    if code is None or code.co_varnames[:2] != ("img", "op_name"):
        return _note("torchvision.transforms.autoaugment", "no _apply_op(img, op_name, ...): the policies' ops are not spans")
    if _patched(orig):
        return

    def _apply_op(img, op_name, *args, **kwargs):
        if not _T.on:
            return orig(img, op_name, *args, **kwargs)
        return _core.call_op(_policy_op_name(op_name), orig, img, op_name, *args, **kwargs)

    functools.update_wrapper(_apply_op, orig)
    mod._apply_op = _mark(_apply_op, orig)


def _patch_v2_autoaugment(mod):
    """torchvision.transforms.v2._auto_augment (0.16 to 0.2x): each op a
    policy applies (`_apply_image_or_video_transform(image, transform_id,
    ...)`) is a span named after it, a child of the policy's."""
    cls = getattr(mod, "_AutoAugmentBase", None)
    orig = getattr(cls, "_apply_image_or_video_transform", None)
    code = getattr(orig, "__code__", None)
    if code is None or code.co_varnames[:3] != ("self", "image", "transform_id"):
        return _note("torchvision.transforms.v2 AutoAugment", "no _apply_image_or_video_transform(image, transform_id, ...): the policies' ops are not spans")
    if _patched(orig):
        return

    def apply(self, image, transform_id, *args, **kwargs):
        if not _T.on:
            return orig(self, image, transform_id, *args, **kwargs)
        return _core.call_op(_policy_op_name(transform_id), orig, self, image, transform_id, *args, **kwargs)

    functools.update_wrapper(apply, orig)
    cls._apply_image_or_video_transform = _mark(apply, orig)


def _patch_v2_transform(mod):
    """torchvision.transforms.v2.Transform (0.16 to 0.2x; nn.Module's
    `__call__`): every call of a v2 transform, wherever it is made (a
    Compose, a wrapper such as RandomApply or RandomChoice, a collate_fn
    applying MixUp or CutMix) is a span named after its class; what it
    calls inside are its children. A v2 Compose writes none of its own
    (its transforms are the spans), unless a Compose or a wrapper runs it."""
    cls = getattr(mod, "Transform", None)
    if cls is None:
        return _note("torchvision.transforms.v2.Transform", "no Transform class")
    if "__call__" in cls.__dict__:
        if _patched(cls.__dict__["__call__"]):
            return
        return _note("torchvision.transforms.v2.Transform", "Transform has a __call__ of its own (this torchvision is newer)")
    nn = sys.modules.get("torch.nn")
    base = getattr(getattr(nn, "Module", None), "__call__", None)
    if base is None or cls.__call__ is not base:
        return _note("torchvision.transforms.v2.Transform", "Transform is not called through nn.Module.__call__")

    def __call__(self, *args, **kwargs):
        if not _T.on or (bool(_P.traced_composes) and isinstance(self, _P.traced_composes)):
            return base(self, *args, **kwargs)
        return _core.call_op(_op_name(self), base, self, *args, **kwargs)

    cls.__call__ = _mark(__call__, base)
    _P.self_spanning = _P.self_spanning + (cls,)


def _patch_kornia(mod):
    """kornia.augmentation.base._BasicAugmentationBase (kornia 0.6 to 0.9,
    called through nn.Module's `__call__`): every augmentation's call, on
    its own or run by a container (AugmentationSequential, ImageSequential
    call each module), is a span named after its class. The containers are
    nn.Sequential and write no span (nested ones run their modules directly,
    which are the spans)."""
    cls = getattr(mod, "_BasicAugmentationBase", None)
    if cls is None:
        return _note("kornia augmentations", "no _BasicAugmentationBase in kornia.augmentation.base")
    if "__call__" in cls.__dict__:
        if _patched(cls.__dict__["__call__"]):
            return
        return _note("kornia augmentations", "_BasicAugmentationBase has a __call__ of its own (this kornia is newer)")
    nn = sys.modules.get("torch.nn")
    base = getattr(getattr(nn, "Module", None), "__call__", None)
    if base is None or cls.__call__ is not base:
        return _note("kornia augmentations", "_BasicAugmentationBase is not called through nn.Module.__call__")

    def __call__(self, *args, **kwargs):
        if not _T.on:
            return base(self, *args, **kwargs)
        return _core.call_op(_op_name(self), base, self, *args, **kwargs)

    cls.__call__ = _mark(__call__, base)
    _P.self_spanning = _P.self_spanning + (cls,)


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
        if not _T.on:
            return orig(*args, **kwargs)
        _core.set_role("worker")
        _ops.at_dataloader()
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
                bound.arguments["index_queue"] = _IndexQueue(bound.arguments["index_queue"])
                init_fn = bound.arguments.get("init_fn")
                if init_fn is not None and callable(init_fn):
                    bound.arguments["init_fn"] = _worker_init(init_fn)
                args, kwargs = bound.args, bound.kwargs
            except TypeError:
                pass
        try:
            return orig(*args, **kwargs)
        finally:
            _core.flush()

    mod._worker_loop = _mark(_worker_loop, orig)


def _worker_init(init_fn):
    """The DataLoader's worker_init_fn, as an op span named after it."""

    def init(*args, **kwargs):
        if not _T.on:
            return init_fn(*args, **kwargs)
        return _core.call_op(_op_name(init_fn), init_fn, *args, **kwargs)

    return init


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
    if _patched(orig):
        return
    names = _code_names(orig)
    if names is None or not {"ended", "auto_collation", "dataset_iter", "drop_last", "collate_fn"} <= names:
        _note("samples of iterable datasets", "_IterableDatasetFetcher.fetch is not the expected loop; batches traced as a whole")
        cls.fetch = _mark(_collate_swapping_fetch(orig), orig)
        return

    def fetch(self, possibly_batched_index):
        # torch 1.x to 2.x's loop, each next() of the dataset's iterator an
        # op span named after the dataset's class. A fetch that delivers
        # nothing (StopIteration) writes no batch (BatchSpan).
        if not _T.on:
            return orig(self, possibly_batched_index)
        with _core.BatchSpan(_ctx.batch) as span:
            if self.ended:
                raise StopIteration
            name = _dataset_name(self.dataset)
            it = self.dataset_iter
            step = _dataset_op(name, next, _finer_code(it))
            if self.auto_collation:
                data = []
                for _ in possibly_batched_index:
                    try:
                        data.append(step(it))
                    except StopIteration:
                        self.ended = True
                        break
                if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
                    raise StopIteration
            else:
                data = step(it)
            return span.run_collate(self.collate_fn, data)

    functools.update_wrapper(fetch, orig)
    cls.fetch = _mark(fetch, orig)


def _dataset_name(ds):
    """A dataset's op name: its class's; through Subset and TracedDataset,
    the wrapped dataset's (whose __getitem__ does the work)."""
    return _op_name(_inner_dataset(ds))


def _inner_dataset(ds):
    """The dataset whose own code does the work: through Subset and
    TracedDataset, the wrapped one."""
    for _ in range(8):
        inner = getattr(ds, "dataset", None) if type(ds).__name__ in ("Subset", "TracedDataset") else None
        if inner is None:
            break
        ds = inner
    return ds


def _dataset_op(name, get, code=None):
    """`get` (a dataset's __getitem__ or __getitems__, or next of an
    IterableDataset's iterator) as an op span `name`; the calls `code` (the
    dataset's own code, `_finer.dataset_code`) makes are its child spans."""

    def call(arg):
        t0 = _core.op_begin(name)
        fin = _finer.enter(code)
        try:
            out = get(arg)
        except StopIteration:
            # An IterableDataset's last next() in a worker: its work (the
            # generator's tail, closing its files) is the dataset's.
            _finer.leave(fin)
            _core.op_event(name, t0, _now())
            raise
        except BaseException:
            _finer.leave(fin)
            _core.op_end_task()
            raise
        _finer.leave(fin)
        _core.op_event(name, t0, _now())
        return out

    return call


def _getter_code(ds, attr):
    """The code of the inner dataset's `attr` (`__getitem__`,
    `__getitems__`) for finer spans, or None (where finer spans cannot be
    had, lotus is asked to say how to see inside a dataset's own code)."""
    return _finer_code(getattr(_inner_dataset(ds), attr, None))


def _finer_code(get):
    code = _finer.dataset_code(get)
    if code is not None and not _finer.available():
        _ops.note_finer()
        return None
    return code


def _collate_swapping_fetch(orig):
    """A fetch traced as a whole batch, its collate_fn timed by swapping it
    on the fetcher for the call."""

    @functools.wraps(orig)
    def fetch(self, possibly_batched_index):
        if not _T.on:
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
        if not _T.on:
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
                name = _dataset_name(ds)
                if getitems:
                    code = _getter_code(ds, "__getitems__")
                    data = _dataset_op(name, getitems, code)(possibly_batched_index)
                else:
                    get = _dataset_op(name, ds.__getitem__, _getter_code(ds, "__getitem__"))
                    data = [sample_call(get, idx) for idx in possibly_batched_index]
            else:
                get = _dataset_op(_dataset_name(ds), ds.__getitem__, _getter_code(ds, "__getitem__"))
                data = sample_call(get, possibly_batched_index)
            return span.run_collate(self.collate_fn, data)

    functools.update_wrapper(fetch, orig)
    cls.fetch = _mark(fetch, orig)


# --- torch.utils.data: the main process ----------------------------------------


def _patch_dataloader(mod):
    _loader.patch(mod)
    base = getattr(mod, "_BaseDataLoaderIter", None)
    single = getattr(mod, "_SingleProcessDataLoaderIter", None)
    multi = getattr(mod, "_MultiProcessingDataLoaderIter", None)

    orig_next = getattr(base, "__next__", None) if base is not None else None
    if orig_next is None:
        _note("SConsume", "no _BaseDataLoaderIter.__next__")
    elif not _patched(orig_next):

        @functools.wraps(orig_next)
        def __next__(self):
            if not _T.on:
                return orig_next(self)
            self._lotus_bid = None
            if not _T.ops.main_done:
                _ops.at_dataloader()
            # A worker's batch is waited for in all of `__next__`, not only
            # in `_next_data`: what runs around it (torch's record_function,
            # a collection set off there) keeps the loop waiting too.
            # The time first: reading the process's CPU is a system call,
            # where the kernel may take the CPU from a thread whose time
            # slice is spent; that wait is the job's, inside its `next()`.
            t0 = _now()
            self._lotus_next = (_core.usage_at(), t0)
            data = orig_next(self)
            self._lotus_next = None
            w = self.__dict__.pop("_lotus_wait", None)
            if w is not None:
                _core.wait_event(w[0], w[3], _now(), w[1], w[2])
            bid = self._lotus_bid
            if bid is not None:
                _core.consume_event(bid)
                _loader.consumed(self)
            return data

        base.__next__ = _mark(__next__, orig_next)

    orig_single = getattr(single, "_next_data", None) if single is not None else None
    if orig_single is None:
        _note("num_workers=0 batches", "no _SingleProcessDataLoaderIter._next_data")
    elif not _patched(orig_single):

        @functools.wraps(orig_single)
        def _next_data_single(self):
            if not _T.on:
                return orig_single(self)
            bid = getattr(self, "_num_yielded", None)
            if type(bid) is not int:
                return orig_single(self)
            t0 = _now()
            at = _core.usage_at()
            prev = _ctx.batch
            _ctx.batch = bid
            try:
                data = orig_single(self)
            finally:
                _ctx.batch = prev
            _core.wait_event(bid, t0, _now(), False, at)
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
            if _T.on:
                try:
                    self._lotus_got = r[0]
                except (TypeError, IndexError, KeyError):
                    pass
            return r

        multi._get_data = _mark(_get_data, orig_get)

    _patch_workers_start_stop(multi)

    @functools.wraps(orig_multi)
    def _next_data_multi(self):
        if not _T.on:
            return orig_multi(self)
        nx = getattr(self, "_lotus_next", None)
        if nx is not None:
            at, t0 = nx
        else:
            t0 = _now()
            at = _core.usage_at()
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
            if nx is not None:
                # Written by `__next__`, when it returns.
                self._lotus_wait = (bid, ready and bid == rid, at, t0)
            else:
                _core.wait_event(bid, t0, t1, ready and bid == rid, at)
            self._lotus_bid = bid
        return data

    multi._next_data = _mark(_next_data_multi, orig_multi)


def _patch_workers_start_stop(multi):
    """SWorkersStart around `_MultiProcessingDataLoaderIter.__init__` (the
    workers started, the first indices sent), SWorkersStop around the
    `_shutdown_workers` call that stops them (not a persistent iterator's:
    its workers stop once, when the job drops it)."""
    orig_init = multi.__dict__.get("__init__")
    if orig_init is None:
        _note("starting workers (SWorkersStart)", "no _MultiProcessingDataLoaderIter.__init__")
    elif not _patched(orig_init):

        @functools.wraps(orig_init)
        def __init__(self, *args, **kwargs):
            if not _T.on:
                return orig_init(self, *args, **kwargs)
            t0 = _now()
            u0 = _core.usage_start()
            orig_init(self, *args, **kwargs)
            _core.workers_event("start", t0, _now(), u0)

        multi.__init__ = _mark(__init__, orig_init)
    orig_stop = multi.__dict__.get("_shutdown_workers")
    if orig_stop is None:
        _note("stopping workers (SWorkersStop)", "no _MultiProcessingDataLoaderIter._shutdown_workers")
    elif not _patched(orig_stop):

        @functools.wraps(orig_stop)
        def _shutdown_workers(self):
            if not _T.on or getattr(self, "_shutdown", True) or getattr(self, "_persistent_workers", False):
                return orig_stop(self)
            t0 = _now()
            u0 = _core.usage_start()
            orig_stop(self)
            # A no-op at the interpreter's exit leaves `_shutdown` unset.
            if getattr(self, "_shutdown", False):
                _core.workers_event("stop", t0, _now(), u0)

        multi._shutdown_workers = _mark(_shutdown_workers, orig_stop)


# --- installing ------------------------------------------------------------------

_HOOKS = {
    "torch.utils.data._utils.worker": _patch_worker,
    "torch.utils.data._utils.fetch": _patch_fetch,
    "torch.utils.data.dataloader": _patch_dataloader,
    "torchvision.transforms.transforms": _patch_v1_wrappers,
    "torchvision.transforms.autoaugment": _patch_v1_autoaugment,
    "torchvision.transforms.v2._transform": _patch_v2_transform,
    "torchvision.transforms.v2._container": _patch_compose_v2,
    "torchvision.transforms.v2._auto_augment": _patch_v2_autoaugment,
    "torchvision.datasets.folder": _patch_folder,
    "kornia.augmentation.base": _patch_kornia,
}



def _run_hook(name, module):
    hooks = ([_HOOKS[name]] if name in _HOOKS else []) + _P.extra_hooks.get(name, [])
    for hook in hooks:
        try:
            hook(module)
        except Exception as e:  # a hook must never break the user's import
            _note(name, f"{type(e).__name__}: {e}")


def add_hook(name, hook):
    """Runs `hook(module)` on module `name`: now if it is imported, else
    right after its import (the meta_path finder)."""
    _P.extra_hooks.setdefault(name, []).append(hook)
    module = sys.modules.get(name)
    if module is not None:
        try:
            hook(module)
        except Exception as e:
            _note(name, f"{type(e).__name__}: {e}")
    elif _P.finder is not None:
        _P.finder.pending[name] = True


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



def install(torch=True):
    """Patches what is imported, and hooks the imports of the rest: torch,
    torchvision and albumentations (with `torch`), and the functions
    `lotus trace run --op` names ($LOTUS_TRACE_OPS, always)."""
    from . import _albumentations, _libraries, _Op, _ops, _ray

    p = _P
    p.op_class = _Op
    if p.finder is None:
        p.finder = _PostImportFinder({})
        sys.meta_path.insert(0, p.finder)
    if torch:
        more = {**_albumentations.HOOKS, **_libraries.HOOKS, **_ray.HOOKS}
        for name, hook in more.items():
            if hook not in p.extra_hooks.get(name, []):
                p.extra_hooks.setdefault(name, []).append(hook)
        pending = {}
        for name in list(_HOOKS) + list(more):
            module = sys.modules.get(name)
            if module is not None:
                _run_hook(name, module)
            else:
                pending[name] = True
        p.finder.pending.update(pending)
    _ops.install(add_hook)
