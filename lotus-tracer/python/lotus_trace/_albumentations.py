"""Tracing albumentations, by patching it at import (the hooks of
`_torch`'s meta_path finder; albumentations need not be installed).

- `albumentations.core.transforms_interface.BasicTransform.__call__`
  (albumentations 1.0 to 2.0.x: `__call__(self, *args, force_apply=False,
  **kwargs)`): every transform's call, wherever it is made, is an op span
  named after its class.
- `albumentations.core.composition`: the `__call__` of each container
  class that defines its own (Compose, OneOf, SomeOf, RandomOrder through
  SomeOf, OneOrOther, Sequential, SelectiveChannelTransform, ReplayCompose;
  1.0 to 2.0.x): a container run inside another container is a span named
  after its class, the parent of its transforms' spans. The outermost
  container (the `A.Compose` a dataset calls) writes none: its transforms
  are the spans, as for torchvision's Compose.

Each hook checks the method it replaces takes `force_apply` and otherwise
leaves it alone and says so in a `#` line of the log.
"""

import functools
import inspect

from . import _core

_T = _core.TRACER
# The containers running on each thread, innermost last (the tracer's).
_running = _T.patches.running


def _note(what, why):
    _core.note(f"not hooked: {what} ({why})")


def _takes_force_apply(fn):
    try:
        return "force_apply" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _patch_transform(mod):
    from . import _torch

    cls = getattr(mod, "BasicTransform", None)
    orig = getattr(cls, "__call__", None) if cls is not None else None
    if orig is None:
        return _note("albumentations.BasicTransform", "no BasicTransform.__call__")
    if getattr(orig, "__lotus_trace__", False):
        return
    if not _takes_force_apply(orig):
        return _note("albumentations.BasicTransform", "__call__ takes no force_apply (this albumentations is older or newer)")

    def __call__(self, *args, **kwargs):
        if not _T.on:
            return orig(self, *args, **kwargs)
        return _core.call_op(_core.callable_name(self), orig, self, *args, **kwargs)

    functools.update_wrapper(__call__, orig)
    cls.__call__ = _torch._mark(__call__, orig)
    _T.patches.self_spanning = _T.patches.self_spanning + (cls,)


def _container_call(orig):
    def __call__(self, *args, **kwargs):
        if not _T.on:
            return orig(self, *args, **kwargs)
        stack = _running.items
        if stack and stack[-1] is self:
            # ReplayCompose.__call__ calling Compose.__call__ on itself.
            return orig(self, *args, **kwargs)
        stack.append(self)
        try:
            if len(stack) == 1:  # the outermost: its transforms are the spans
                return orig(self, *args, **kwargs)
            return _core.call_op(_core.callable_name(self), orig, self, *args, **kwargs)
        finally:
            stack.pop()

    functools.update_wrapper(__call__, orig)
    return __call__


def _patch_composition(mod):
    from . import _torch

    base = getattr(mod, "BaseCompose", None)
    if base is None:
        return _note("albumentations containers", "no BaseCompose in albumentations.core.composition")
    hooked = 0
    for name in dir(mod):
        cls = getattr(mod, name, None)
        if not (isinstance(cls, type) and issubclass(cls, base) and cls.__module__ == mod.__name__):
            continue
        orig = cls.__dict__.get("__call__")
        if orig is None or getattr(orig, "__lotus_trace__", False):
            continue
        if cls is not base and not _takes_force_apply(orig):
            _note(f"albumentations.{name}", "__call__ takes no force_apply (this albumentations is older or newer)")
            continue
        cls.__call__ = _torch._mark(_container_call(orig), orig)
        hooked += 1
    if not hooked:
        _note("albumentations containers", "no container defines __call__")


HOOKS = {
    "albumentations.core.transforms_interface": _patch_transform,
    "albumentations.core.composition": _patch_composition,
}
