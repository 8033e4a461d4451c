"""The DataLoader's settings: said at each `iter(loader)` (a `kind=config`
event), changed where `lotus tune` asks, and a run stopped after a number
of batches.

- `DataLoader.__iter__`: `SDataLoader,<t>,0,kind=config,workers=...` in the
  main process, before the iterator (and its workers) starts: each epoch,
  a persistent iterator's too.
- `$LOTUS_LOADER` (`workers=2,prefetch=4,persistent=1,pin=0`, any of
  them): `DataLoader.__init__`'s `num_workers`, `prefetch_factor`,
  `persistent_workers` and `pin_memory` are these, whatever the job
  passed; the config event says `overridden=1`. A malformed value is said
  on stderr and changes nothing.
- `$LOTUS_STOP_AFTER=N`: after the N-th batch the training loop takes
  (over all epochs), the iterator's workers are shut down, the log is
  ended and the process exits with status 0: a trial run is brief.
"""

import functools
import inspect
import os
import sys

from . import _core

# The settings `$LOTUS_LOADER` may give: its name -> the DataLoader's
# keyword argument, and how its value is read.
_KEYS = {
    "workers": ("num_workers", "count"),
    "prefetch": ("prefetch_factor", "count"),
    "persistent": ("persistent_workers", "flag"),
    "pin": ("pin_memory", "flag"),
}

# The DataLoader's arguments it refuses with num_workers=0.
_WORKERS_ONLY = ("prefetch_factor", "persistent_workers", "multiprocessing_context")

# This module's state: the tracer's (`_core._LoaderState`: the settings
# read at `patch`, and the batches the training loop took, in this process,
# over all epochs).
_S = _core.TRACER.loader
_T = _core.TRACER


def parse_settings(text):
    """`$LOTUS_LOADER`'s value as {keyword argument: value}; ValueError
    naming the bad part where it is malformed."""
    out = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in _KEYS:
            raise ValueError(f"'{part}' is not one of {', '.join(k + '=' for k in _KEYS)}")
        arg, how = _KEYS[key]
        if arg in out:
            raise ValueError(f"'{key}' is given twice")
        if how == "flag":
            if value not in ("0", "1"):
                raise ValueError(f"'{part}': {key} is 0 or 1")
            out[arg] = value == "1"
        else:
            if not value.isdigit() or len(value) > 4:
                raise ValueError(f"'{part}': {key} is a whole number (0 to 9999)")
            out[arg] = int(value)
    if out.get("prefetch_factor") == 0:
        raise ValueError("'prefetch=0': a prefetch factor is at least 1")
    return out


def _settings_from_env():
    """`$LOTUS_LOADER`'s settings, or None (unset, empty, or malformed:
    then said on stderr)."""
    text = os.environ.get("LOTUS_LOADER", "")
    if not text.strip():
        return None
    try:
        return parse_settings(text) or None
    except ValueError as e:
        sys.stderr.write(
            f"lotus_trace: LOTUS_LOADER={text!r} is not used: {e}"
            " (expected e.g. workers=2,prefetch=4,persistent=1,pin=0); the DataLoader keeps its own settings\n"
        )
        return None


def _stop_after_from_env():
    """`$LOTUS_STOP_AFTER`, a number of batches, or None (unset, or
    malformed: then said on stderr)."""
    text = os.environ.get("LOTUS_STOP_AFTER", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        sys.stderr.write(
            f"lotus_trace: LOTUS_STOP_AFTER={text!r} is not used: it is a number of batches, at least 1;"
            " the job runs to its end\n"
        )
        return None
    return int(text)



def _override(orig_init):
    """`DataLoader.__init__` with `$LOTUS_LOADER`'s settings in place of the job's."""
    sig = inspect.signature(orig_init)

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        settings = _S.settings
        if not _T.on or settings is None:
            return orig_init(self, *args, **kwargs)
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:  # the job's own mistake: torch says it
            return orig_init(self, *args, **kwargs)
        given = bound.arguments
        given.update(settings)
        workers = given.get("num_workers", 0)
        if workers == 0:
            dropped = [k for k in _WORKERS_ONLY if given.get(k)]
            for k in _WORKERS_ONLY:
                given.pop(k, None)
            if dropped:
                _core.note(
                    f"LOTUS_LOADER: {', '.join(dropped)} not passed: with num_workers=0 the DataLoader takes none of them"
                )
        orig_init(*bound.args, **bound.kwargs)
        self._lotus_overridden = True

    __init__.__lotus_trace__ = True
    __init__.__lotus_orig__ = orig_init
    return __init__


def _start_method(loader):
    """The workers' start method: the loader's multiprocessing context's,
    else multiprocessing's default (read without fixing it), or "-"."""
    ctx = getattr(loader, "multiprocessing_context", None)
    try:
        if ctx is not None:
            return ctx.get_start_method()
        import multiprocessing

        m = multiprocessing.get_start_method(allow_none=True)
        if m is None:
            default = getattr(getattr(multiprocessing.context, "_default_context", None), "_default_context", None)
            m = getattr(default, "_name", None)
        return m or "-"
    except Exception:
        return "-"


def config_fields(loader):
    """The config event's fields for `loader`."""
    workers = getattr(loader, "num_workers", 0) or 0
    prefetch = getattr(loader, "prefetch_factor", None)
    batch_size = getattr(loader, "batch_size", None)
    try:
        n = len(loader)
    except Exception:  # an iterable dataset with no length
        n = None

    def opt(v):
        return "-" if type(v) is not int or v < 0 else str(v)

    method = _start_method(loader)
    if not (isinstance(method, str) and method.replace("_", "").isalnum()):
        method = "-"
    return (
        f"workers={int(workers)},prefetch={opt(prefetch) if workers else '-'},"
        f"persistent={1 if getattr(loader, 'persistent_workers', False) else 0},"
        f"pin={1 if getattr(loader, 'pin_memory', False) else 0},batch_size={opt(batch_size)},"
        f"method={method},len={opt(n)},overridden={1 if getattr(loader, '_lotus_overridden', False) else 0}"
    )


def _config_at_iter(orig_iter):
    """`DataLoader.__iter__`, the loader's settings said first."""

    @functools.wraps(orig_iter)
    def __iter__(self):
        if _T.on and _T.role != "worker":
            try:
                _core.config_event(config_fields(self))
            except Exception as e:  # never break the job
                _core.note(f"the DataLoader's settings not said: {type(e).__name__}: {e}")
        return orig_iter(self)

    __iter__.__lotus_trace__ = True
    __iter__.__lotus_orig__ = orig_iter
    return __iter__


def consumed(it):
    """The training loop took a batch from iterator `it`: at the
    `$LOTUS_STOP_AFTER`-th, its workers are shut down, the log ended, and
    the process exits with status 0."""
    s = _S
    if s.stop_after is None:
        return
    s.consumed += 1
    if s.consumed < s.stop_after:
        return
    _core.note(f"stopped after {s.consumed} batches (LOTUS_STOP_AFTER)")
    sys.stderr.write(f"lotus_trace: stopped after {s.consumed} batches (LOTUS_STOP_AFTER)\n")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        # Persistent or not, the workers end here.
        try:
            it._persistent_workers = False
            shutdown()
        except Exception as e:
            _core.note(f"LOTUS_STOP_AFTER: the workers' shutdown failed: {type(e).__name__}: {e}")
    _T._exit_closing(0)


def patch(mod):
    """Patches `torch.utils.data.dataloader`'s DataLoader."""
    loader = getattr(mod, "DataLoader", None)
    if loader is None:
        _core.note("the DataLoader's settings (kind=config) not said: no torch.utils.data.DataLoader")
        return
    settings = _S.settings = _settings_from_env()
    _S.stop_after = _stop_after_from_env()
    orig_iter = loader.__dict__.get("__iter__")
    if orig_iter is not None and not getattr(orig_iter, "__lotus_trace__", False):
        loader.__iter__ = _config_at_iter(orig_iter)
    orig_init = loader.__dict__.get("__init__")
    if settings is not None and orig_init is not None and not getattr(orig_init, "__lotus_trace__", False):
        try:
            loader.__init__ = _override(orig_init)
        except (TypeError, ValueError) as e:
            _core.note(f"LOTUS_LOADER not applied: DataLoader.__init__ has no signature ({e})")
