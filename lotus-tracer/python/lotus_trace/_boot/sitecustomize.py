"""lotus_trace's start-up hook: with this folder first on PYTHONPATH (what
`lotus trace run` and `lotus_trace.enable()` set), every Python process,
the DataLoader's spawned workers included, starts tracing into
$LOTUS_TRACE_DIR. Any other sitecustomize on the path (a distribution's, a
virtual environment's) still runs: it is found after this one and executed
first. A failure here never stops the program: it is one line on stderr.
"""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _chain():
    """Runs the sitecustomize this file hides, if any."""
    import importlib.machinery
    import importlib.util

    def other(p):
        try:
            return os.path.abspath(p or os.curdir) != _here
        except (TypeError, ValueError):
            return False

    paths = [p for p in sys.path if isinstance(p, str) and other(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # as site.py does: report and go on
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


def _start():
    out = os.environ.get("LOTUS_TRACE_DIR")
    if not out:
        return
    package_parent = os.path.dirname(os.path.dirname(_here))
    if package_parent not in sys.path:
        sys.path.insert(0, package_parent)
    import lotus_trace

    lotus_trace.enable(out)


try:
    _chain()
except Exception as e:
    sys.stderr.write(f"lotus_trace: could not run the other sitecustomize: {type(e).__name__}: {e}\n")
def _report(message):
    """Tells `lotus trace run` (through its private status folder) that
    this process is not traced. Written here, not through lotus_trace: the
    failure may be that lotus_trace cannot be imported."""
    # The report pipe first (it works after a privilege drop): see
    # lotus_trace._core._report_pipe, not importable here.
    fd, _, inode = os.environ.get("LOTUS_TRACE_REPORT_FD", "").partition(":")
    if fd.isdigit() and inode.isdigit():
        try:
            import stat

            st = os.fstat(int(fd))
            if stat.S_ISFIFO(st.st_mode) and st.st_ino == int(inode):
                data = f"{os.getpid()}\t{' '.join(message.split())}".encode("utf-8", "replace")[:4000] + b"\n"
                if os.write(int(fd), data) == len(data):
                    return
        except OSError:
            pass
    status = os.environ.get("LOTUS_TRACE_STATUS")
    if not status:
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.path.join(status, f"failed_pid_{os.getpid()}"), flags, 0o600)
    except OSError:
        return
    try:
        os.write(fd, message.encode("utf-8", "replace")[:4096])
    except OSError:
        pass
    finally:
        os.close(fd)


try:
    _start()
except Exception as e:
    _message = f"tracing not started in pid {os.getpid()}: {type(e).__name__}: {e}"
    sys.stderr.write(f"lotus_trace: {_message}\n")
    _report(_message)
