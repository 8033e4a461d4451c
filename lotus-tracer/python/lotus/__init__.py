"""lotus: open and close measurement windows from Python.

    import lotus

    lotus.resume("MyOp")     # the window is open when this returns
    for _ in range(n):
        my_op()
    lotus.pause()

The functions call the lotus control library (liblotus_control.so) through
ctypes. The lotus process names the library in LOTUS_CONTROL_LIB; without it
(the script runs standalone) every function is a no-op and active() is
False. A failed call raises RuntimeError with the library's message.

Importing this module binds the control channel to the importing process,
so a forked child (a DataLoader worker) that calls resume() gets an error
instead of corrupting the parent's channel.
"""

import ctypes
import os

__all__ = ["resume", "pause", "detach", "active", "backend"]

_ENV_LIB = "LOTUS_CONTROL_LIB"
_ENV_FDS = "LOTUS_CONTROL_FDS"


def _load(path):
    lib = ctypes.CDLL(path)
    for name in ("lotus_resume",):
        getattr(lib, name).argtypes = [ctypes.c_char_p]
        getattr(lib, name).restype = ctypes.c_int
    for name in ("lotus_pause", "lotus_detach", "lotus_active", "lotus_adopt"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_int
    for name in ("lotus_last_error", "lotus_backend"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_char_p
    return lib


def _error(lib):
    message = lib.lotus_last_error() or b"unknown error"
    return RuntimeError(message.decode("utf-8", "replace"))


_lib_path = os.environ.get(_ENV_LIB)
if _lib_path:
    try:
        _lib = _load(_lib_path)
    except OSError as e:
        raise ImportError(
            f"lotus: cannot load the control library {_lib_path} (from {_ENV_LIB}): {e}"
        ) from e
    # Binds the channel to this process (see the module doc).
    _active = bool(_lib.lotus_active())

    _c_resume = _lib.lotus_resume
    _c_pause = _lib.lotus_pause
    _c_detach = _lib.lotus_detach

    def resume(op=""):
        """Open a measurement window for the op named `op`."""
        if _c_resume(op.encode("utf-8") if op else None) != 0:
            raise _error(_lib)

    def pause():
        """Close the open measurement window."""
        if _c_pause() != 0:
            raise _error(_lib)

    def detach():
        """No window will open again in this process."""
        if _c_detach() != 0:
            raise _error(_lib)

    def active():
        """True when this process runs under lotus."""
        return _active

    def _adopt():
        """In a child forked on purpose (lotus's fork server): the channel
        becomes this process's; the parent leaves it alone meanwhile."""
        _lib.lotus_adopt()

    try:
        _c_sampling = _lib.lotus_sampling
    except AttributeError:
        _c_sampling = None

    def _sampling(on):
        """Stop (False) or restart (True) sampling this process outside
        windows; returns once lotus has (the harness's unsampled calls)."""
        if _c_sampling is None:
            raise RuntimeError(f"lotus: the control library {_lib_path} has no lotus_sampling")
        if _c_sampling(1 if on else 0) != 0:
            raise _error(_lib)

    def backend():
        """The active backend's name ("perf", "vtune", "uprof") or None."""
        name = _lib.lotus_backend()
        return name.decode("utf-8", "replace") if name is not None else None

elif os.environ.get(_ENV_FDS):
    # Under lotus but without the library: windows would silently never
    # open and the map would come out empty, so say so at the first call.
    def _missing(*_args, **_kwargs):
        raise RuntimeError(
            f"lotus: {_ENV_FDS} is set but {_ENV_LIB} is not: "
            "cannot reach the lotus process (was this started by lotus?)"
        )

    resume = pause = detach = _sampling = _missing

    def _adopt():
        """Nothing to adopt without the library."""

    def active():
        """True when this process runs under lotus."""
        return True

    def backend():
        """The active backend's name, or None."""
        return os.environ.get("LOTUS_BACKEND")

else:

    def resume(op=""):
        """Not under lotus: does nothing."""

    def pause():
        """Not under lotus: does nothing."""

    def detach():
        """Not under lotus: does nothing."""

    def _adopt():
        """Not under lotus: does nothing."""

    def _sampling(on):
        """Not under lotus: does nothing."""

    def active():
        """Not under lotus: False."""
        return False

    def backend():
        """Not under lotus: None."""
        return None
