"""Tracing Hugging Face datasets' transforms and timm's augmentations, by
patching them at import (the hooks of `_torch`'s meta_path finder; neither
need be installed).

- `datasets.formatting.formatting.CustomFormatter.format_batch`
  (datasets 2.x to 5.x: `format_batch(self, pa_table)` ending in
  `self.transform(batch)`): the function given to `Dataset.set_transform`
  / `with_transform` (or `set_format(transform=...)`) is an op span named
  after it (`_core.callable_name`: a function by its qualified name, an
  object by its class's), inside the dataset's `__getitem__` span. What
  datasets does around it (Arrow to Python, decoding the features) stays
  the dataset's own time.
- `timm.data.auto_augment.AugmentOp.__call__` (timm 0.4 to 1.0.x:
  `__call__(self, img)`, the op's name in `self.name`): each op of timm's
  RandAugment, AutoAugment and AugMix is a child span of its policy's,
  named after the op (`Rotate`, `ShearX`, ... as torchvision's policies'
  ops). timm's other transforms (`create_transform`'s
  RandomResizedCropAndInterpolation, RandomErasing, ...) run in a
  torchvision Compose and are spans already.
- `timm.data.mixup.Mixup.__call__` and `FastCollateMixup.__call__`: a
  span named after the class where they run (the training loop, or a
  collate_fn: a child of Collation).
- `concurrent.futures.ThreadPoolExecutor.submit` (and `map`, which calls
  it): each callable handed to the pool runs as a `kind=task` span on the
  pool's thread, saying which thread handed it over and when
  (`_core.task_of`): the attribution credits its CPU to the op open on
  that thread then.

Each hook checks the method it replaces has the expected shape, and
otherwise leaves it alone and says so in a `#` line of the log.
"""

import functools

from . import _core

_T = _core.TRACER


def _note(what, why):
    _core.note(f"not hooked: {what} ({why})")


def _names(fn):
    code = getattr(fn, "__code__", None)
    return (set(code.co_names), code.co_varnames[: code.co_argcount]) if code is not None else (set(), ())


def _patch_datasets_formatting(mod):
    from . import _torch

    cls = getattr(mod, "CustomFormatter", None)
    orig = getattr(cls, "format_batch", None) if cls is not None else None
    if orig is None:
        return _note("datasets' set_transform", "no CustomFormatter.format_batch")
    if _torch._patched(orig):
        return
    names, args = _names(orig)
    if "transform" not in names or len(args) != 2:
        return _note("datasets' set_transform", "CustomFormatter.format_batch is not the expected `self.transform(batch)` (this datasets is older or newer)")

    def format_batch(self, pa_table):
        transform = getattr(self, "transform", None)
        if not _T.on or not callable(transform) or _torch._patched(transform) or isinstance(transform, _T.patches.op_class or ()):
            return orig(self, pa_table)
        name = _core.callable_name(transform)

        def traced(batch):
            return _core.call_op(name, transform, batch)

        traced.__lotus_trace__ = True
        self.transform = traced
        try:
            return orig(self, pa_table)
        finally:
            self.transform = transform

    functools.update_wrapper(format_batch, orig)
    cls.format_batch = _torch._mark(format_batch, orig)


def _patch_timm_auto_augment(mod):
    from . import _torch

    cls = getattr(mod, "AugmentOp", None)
    orig = getattr(cls, "__call__", None) if cls is not None else None
    if orig is None:
        return _note("timm's AugmentOp", "no AugmentOp.__call__")
    if _torch._patched(orig):
        return
    _, args = _names(orig)
    if len(args) != 2:
        return _note("timm's AugmentOp", "__call__ is not (self, img) (this timm is older or newer)")

    def __call__(self, img):
        if not _T.on:
            return orig(self, img)
        op = getattr(self, "name", None)
        name = _torch._policy_op_name(str(op)) if op else _core.callable_name(self)
        return _core.call_op(name, orig, self, img)

    functools.update_wrapper(__call__, orig)
    cls.__call__ = _torch._mark(__call__, orig)


def _patch_timm_mixup(mod):
    from . import _torch

    hooked = 0
    for cls_name in ("Mixup", "FastCollateMixup"):
        cls = getattr(mod, cls_name, None)
        orig = cls.__dict__.get("__call__") if isinstance(cls, type) else None
        if orig is None or _torch._patched(orig):
            continue
        cls.__call__ = _torch._mark(_spanning_call(orig), orig)
        hooked += 1
    if not hooked and getattr(mod, "Mixup", None) is None:
        _note("timm's Mixup", "no Mixup class in timm.data.mixup")


def _spanning_call(orig):
    def __call__(self, *args, **kwargs):
        if not _T.on:
            return orig(self, *args, **kwargs)
        return _core.call_op(_core.callable_name(self), orig, self, *args, **kwargs)

    functools.update_wrapper(__call__, orig)
    return __call__


def _patch_thread_pool(mod):
    from . import _torch

    cls = getattr(mod, "ThreadPoolExecutor", None)
    orig = cls.__dict__.get("submit") if isinstance(cls, type) else None
    if orig is None:
        return _note("ThreadPoolExecutor", "no ThreadPoolExecutor.submit")
    if _torch._patched(orig):
        return

    def submit(self, fn, /, *args, **kwargs):
        if not _T.on:
            return orig(self, fn, *args, **kwargs)
        return orig(self, _core.task_of(fn), *args, **kwargs)

    functools.update_wrapper(submit, orig)
    cls.submit = _torch._mark(submit, orig)


HOOKS = {
    "concurrent.futures.thread": _patch_thread_pool,
    "datasets.formatting.formatting": _patch_datasets_formatting,
    "timm.data.auto_augment": _patch_timm_auto_augment,
    "timm.data.mixup": _patch_timm_mixup,
}
