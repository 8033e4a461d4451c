"""The tracer's core: the per-process log writer, the per-thread context
(which batch and sample the running code belongs to) and the events.

Every event is one line, `S<Name>,<start_ns>,<duration_ns>` (the original
fork's format) followed by `,key=value` fields (`kind=`, `batch=`,
`sample=`, `ready=`, and `tid=`, the native id of the thread that ran the
span, where it is not the process's main thread; and, on op spans, `cpu=`,
the CPU time that thread ran during the span, `time.thread_time_ns()` read
at its start and end). Op spans nest: on one thread, an op span inside
another is its child. Times are
`time.time_ns()`, the wall clock every process of every machine shares.
Where that clock stands against CLOCK_MONOTONIC (the clock perf stamps its
samples with) is measured, not assumed: the header's `wall_ns=` and
`monotonic_ns=`, read back to back, and again at each write of the log as
a `# lotus-trace: clock wall_ns=... monotonic_ns=...` line (so drift
shows): at each `flush()` (the end of each batch in a worker, every 2 s
of a main process's consumption) and each time the log grows.

Lines are copied, as they are recorded, into a shared mapping of the log
file itself (`mmap`, MAP_SHARED): once copied a line is in the kernel's
page cache, and stays there whatever becomes of the process (SIGKILL, the
OOM killer, a crash): nothing recorded is lost, and no system call is made
per line. The file grows by `_CHUNK` bytes at a time (blocks allocated
first, so that a full disk is an error here, never a SIGBUS later), one
NUL byte at least always past the last line; a clean end (exit, atexit,
multiprocessing's exit hook, `os._exit`, SIGTERM, SIGINT and SIGHUP before the
program's own action for them: see `_on_end_signal`) cuts the file to its
lines. A log whose process was killed outright ends in NUL bytes, the end
of a log cut short: its readers stop there, and `lotus trace run` cuts it
to its lines once the job ended and says which process died and how.
A parent notes in its own log each multiprocessing child (a DataLoader
worker) it found ended by a signal: `# lotus-trace: child pid=<pid>
ended by signal=<n> (<name>)`. Where the file system cannot map the file,
lines are written in blocks of `_FLUSH_EVERY` lines instead (a line in
the log says so): a process killed outright then loses its last block.
The file, `<dir>/<prefix>_<role>_pid_<pid>`, is created at the first write:
a process that traces nothing leaves no file.

Files are created with O_EXCL|O_NOFOLLOW and never opened by name again:
a link or a file already at a log's name (another user's, or a log of an
earlier process with the same pid) is never written through or appended
to; the log takes the next free name, `<prefix>.<n>_<role>_pid_<pid>`. A
log that changes role is renamed by link and unlink, which never replaces
what is at the new name.

When the trace cannot be written (a full file system, a folder that went
away), tracing stops in that process, a line on stderr says why, and, under
`lotus trace run`, a file `failed_pid_<pid>` in the private folder
$LOTUS_TRACE_STATUS tells lotus, which reports the loss and exits non-zero.
$LOTUS_TRACE_RUN, the run's id, goes into each log's header (`run=`), so
lotus counts only its own run's logs in a shared folder.

With $LOTUS_TRACE_FORMAT=original (`lotus trace run --format original`)
the lines are the original fork's three columns and nothing else, for the
study's own scripts (pandas `read_csv(header=None)`): no header, no `#`
lines, no `key=value` fields; batches, waits and consumptions are named
`SBatchPreprocessed_<id>`, `SBatchWait_<id>` (1000 ns when the batch was
ready, the fork's placeholder) and `SBatchConsumed_<id>`.
"""

import atexit
import errno
import operator
import os
import sys
import threading
import time
import types
import weakref

_now = time.time_ns
# This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), read at each op span's
# start and end for its `cpu=` field.
_cpu = time.thread_time_ns
# Where the log cannot be mapped: lines buffered before a write.
_FLUSH_EVERY = 512
# The log grows by this much at a time (a clock line is written at each).
_CHUNK = 1024 * 1024
# The main process writes a clock line at least this often (ns) when it
# consumes batches (and its buffered lines, where the log is written in
# blocks).
_MAIN_FLUSH_NS = 2_000_000_000

# Names tried for a log before giving up (a name is taken when a file or
# link is already there).
_MAX_NAMES = 100
_CREATE_FLAGS = (
    os.O_RDWR  # a shared writable mapping needs read and write
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class _Ctx(threading.local):
    """What the running code belongs to, per thread."""

    batch = None  # batch id
    sample = None  # dataset index of the sample being loaded
    in_sample = False
    tid = None  # ",tid=<native id>" or "" (main thread), once known
    sched = None  # this thread's open schedstat (`_Schedstat`), once asked


# Reads of the clocks kept for one (wall, monotonic) pair: the pair whose
# monotonic reads around the wall read are closest wins.
_CLOCK_READS = 5


def clock_pair():
    """(wall_ns, monotonic_ns) read back to back: the tightest of a few
    reads, the monotonic time taken midway between its two reads."""
    mono = time.monotonic_ns
    best = None
    for _ in range(_CLOCK_READS):
        m0 = mono()
        w = _now()
        m1 = mono()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, w, m0 + (m1 - m0) // 2)
    return best[1], best[2]



def _unfit(ch):
    return ch == "," or ch.isspace() or not ch.isprintable()


def clean_name(name):
    """A name that fits in a log line: no commas, spaces or control
    characters. Those at either end are dropped, those inside become `_`;
    the name's own underscores stay (`Cls.__call__` is `Cls.__call__`)."""
    text = str(name)
    start, end = 0, len(text)
    while start < end and _unfit(text[start]):
        start += 1
    while end > start and _unfit(text[end - 1]):
        end -= 1
    return "".join("_" if _unfit(ch) else ch for ch in text[start:end]) or "op"


def job_fields(env):
    """The process's place in a distributed job, from its launcher's
    environment, as the header writes it (`-` where the launcher does not
    say): `rank` (RANK; under `srun` alone, SLURM_PROCID), `local_rank`
    (LOCAL_RANK, else SLURM_LOCALID), `world_size` (WORLD_SIZE, else
    SLURM_NTASKS), `node` (the node's index: torchrun's GROUP_RANK, else
    SLURM_NODEID), and `job`, the job every host's logs share, so that
    lotus merges the folders of one job's hosts and refuses another's:
    `torchrun:<TORCHELASTIC_RUN_ID>@<MASTER_ADDR>:<MASTER_PORT>` (the run
    id alone is `none` unless `--rdzv-id` is given; the rendezvous store's
    address and port, chosen for each launch, tell two launches apart),
    else `slurm:<SLURM_JOB_ID>.<SLURM_STEP_ID>`, else `ray:<RAY_JOB_ID>`."""

    def number(*names):
        for name in names:
            value = env.get(name) or ""
            if value.isdigit():
                return value
        return "-"

    def word(name):
        value = env.get(name) or ""
        return clean_name(value) if value.strip() else ""

    rank = number("RANK")
    job = "-"
    if word("TORCHELASTIC_RUN_ID"):
        job = f"torchrun:{word('TORCHELASTIC_RUN_ID')}@{word('MASTER_ADDR') or '-'}:{word('MASTER_PORT') or '-'}"
    elif word("SLURM_JOB_ID"):
        job = f"slurm:{word('SLURM_JOB_ID')}.{word('SLURM_STEP_ID') or '-'}"
    elif word("RAY_JOB_ID"):
        job = f"ray:{word('RAY_JOB_ID')}"
    slurm_alone = job.startswith("slurm:") and rank == "-"
    return {
        "rank": number("SLURM_PROCID") if slurm_alone else rank,
        "local_rank": number("LOCAL_RANK", "SLURM_LOCALID") if slurm_alone else number("LOCAL_RANK"),
        "world_size": number("SLURM_NTASKS") if slurm_alone else number("WORLD_SIZE"),
        "node": number("GROUP_RANK", "SLURM_NODEID"),
        "job": job,
    }


def sample_id(index):
    """The index as a whole number for `sample=`, or None (a key that is
    not a non-negative integer is not logged)."""
    if type(index) is int:
        return index if index >= 0 else None
    try:
        i = operator.index(index)
    except TypeError:
        return None
    return i if i >= 0 else None


class _Context:
    """`Tracer`'s switch and per-thread context readers. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _tid(self):
        """`,tid=<native thread id>` for a thread other than the process's main
        one (whose id is the pid), else "": asked once per thread."""
        c = self.ctx
        t = c.tid
        if t is None:
            native = threading.get_native_id()
            t = c.tid = "" if native == os.getpid() else f",tid={native}"
        return t

    def enabled(self):
        """Whether this process traces."""
        return self.on

    def trace_dir(self):
        """The trace folder, or None when tracing is off."""
        return self.dir if self.on else None


# --- writing ----------------------------------------------------------------




def _clock_line():
    wall, mono = clock_pair()
    return f"# lotus-trace: clock wall_ns={wall} monotonic_ns={mono}\n"


def _report_pipe(message):
    """Writes `<pid>\t<message>` to lotus's report pipe, $LOTUS_TRACE_REPORT_FD
    (`<fd>:<inode>`), when this process holds that very pipe (inherited:
    a forked child, an exec'd program; the inode tells it from another
    file that took the number). One write of at most PIPE_BUF bytes: whole,
    never mixed with another process's. Works after the process dropped its
    privileges. Whether it was written."""
    spec = os.environ.get("LOTUS_TRACE_REPORT_FD", "")
    fd, _, inode = spec.partition(":")
    if not (fd.isdigit() and inode.isdigit()):
        return False
    try:
        import stat

        st = os.fstat(int(fd))
        if not stat.S_ISFIFO(st.st_mode) or st.st_ino != int(inode):
            return False
        line = f"{os.getpid()}\t{' '.join(message.split())}"
        data = line.encode("utf-8", "replace")[:4000] + b"\n"
        return os.write(int(fd), data) == len(data)
    except OSError:
        return False


# Errors of a log that cannot grow (no space, a quota, a file too large, a
# failing disk): tracing stops. Any other error mapping the log (a file
# system that cannot map files) has it written in blocks instead.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _no_mapping(data):
    """`Tracer.write` while the log has no mapping."""
    raise ValueError("no mapping")


# Free-threaded CPython (3.13t): no GIL makes `Tracer.write` whole; lines
# take the lock there.
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()


# The real `os._exit` (`Tracer._install_process_hooks` replaces it).
_os_exit = os._exit


def _exit_closing_of(tracer):
    """`os._exit` as `tracer` replaces it (`Tracer._exit_closing`): a
    function with the original's documentation and `__wrapped__`."""

    def _exit_closing(status):
        tracer._exit_closing(status)

    _exit_closing.__wrapped__ = _os_exit
    _exit_closing.__doc__ = _os_exit.__doc__
    return _exit_closing


def _as_original(line):
    """A line in the original fork's three columns (`Tracer.original`)."""
    head, _, fields = line.rstrip("\n").partition(",kind=")
    name, t0, dur = head.rsplit(",", 2)
    f = dict(kv.split("=", 1) for kv in ("kind=" + fields).split(",")) if fields else {}
    kind, b = f.get("kind"), f.get("batch")
    if kind == "batch" and b is not None:
        name = f"SBatchPreprocessed_{b}"
    elif kind == "wait" and b is not None:
        name = f"SBatchWait_{b}"
        # The fork's placeholder for a ready batch; a real 1000 ns wait
        # must not read as one.
        dur = "1000" if f.get("ready") == "1" else ("1001" if dur == "1000" else dur)
    elif kind == "consume" and b is not None:
        name = f"SBatchConsumed_{b}"
    return f"{name.replace(',', ';')},{t0},{dur}\n"


class _Log:
    """`Tracer`'s log: the file, its mapping, blocks, failures, notes, roles. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _header(self):
        """The log's first line: role, pid, host, and the distributed job's
        place of the process as torchrun (and torch.distributed launchers)
        sets it in the environment: RANK, LOCAL_RANK, WORLD_SIZE (`-` when
        unset; DataLoader workers inherit their rank's), the job and the
        node it runs on (`job_fields`), and the id of the
        `lotus trace run` that started it (`run=`, to tell runs into one folder
        apart), and its parent's pid (`ppid=`: lotus tells its own child, the
        job's main process, whose end it saw, by it)."""
        import socket

        host = clean_name(socket.gethostname() or "-")
        run = f" run={self.run_id}" if self.run_id else ""
        wall, mono = clock_pair()
        e = job_fields(os.environ)
        from . import _ray  # a Ray worker's job and node: from Ray itself

        ray = _ray.ray_place()
        if ray is not None:
            e["job"] = ray[0]
        job = f" job={e['job']}" if e["job"] != "-" else ""
        job += f" ray_node={ray[1]}" if ray is not None else ""
        # The host's clock as lotus read it when the run began.
        clock = (os.environ.get("LOTUS_TRACE_CLOCK") or "").strip()
        job += f" clock={clean_name(clock)}" if clock else ""
        return (
            f"#lotus-trace v1 role={self.role or 'main'} pid={self.pid} host={host} rank={e['rank']}"
            f" local_rank={e['local_rank']} world_size={e['world_size']} node={e['node']}{job}{run}"
            f" ppid={os.getppid()} wall_ns={wall} monotonic_ns={mono}\n"
        )

    def _file_path(self, role, n=0):
        """The log's name: `<prefix>_<role>_pid_<pid>`, or, when that is taken,
        the n-th other one, `<prefix>.<n>_<role>_pid_<pid>`."""
        prefix = self.prefix if n == 0 else f"{self.prefix}.{n}"
        return os.path.join(self.dir, f"{prefix}_{role or 'main'}_pid_{self.pid}")

    def _open(self):
        os.makedirs(self.dir, exist_ok=True)
        for n in range(_MAX_NAMES):
            path = self._file_path(self.role, n)
            try:
                self.fd = os.open(path, _CREATE_FLAGS, 0o644)
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno == errno.ELOOP:  # a link at the name (no O_EXCL on some systems)
                    continue
                raise
            self.path = path
            self.end = 0
            self.clock_at = -1
            return "" if self.original else self._header()
        raise OSError(errno.EEXIST, f"{_MAX_NAMES} log names for this pid are all taken (files or links already there)")

    def _report_failure(self, message):
        """Tells `lotus trace run` that this process's trace is incomplete:
        through its report pipe (see `_report_pipe`), else a file in its
        private status folder (creating an empty file needs no free space on
        most file systems; the folder is lotus's, not the trace's)."""
        if _report_pipe(message):
            return
        # One already there says the same.
        self.status_file(f"failed_pid_{self.pid}", message.encode("utf-8", "replace")[:4096])

    def status_file(self, name, data):
        """Creates `name` in lotus's private status folder ($LOTUS_TRACE_STATUS)
        holding `data` (bytes): `O_EXCL|O_NOFOLLOW`, mode 0600, never over a
        file already there. Whether it was created (False where there is no
        such folder, or the process can no longer write there)."""
        if not self.status_dir:
            return False
        try:
            fd = os.open(os.path.join(self.status_dir, name), _CREATE_FLAGS, 0o600)
        except OSError:
            return False
        try:
            os.write(fd, data)
        except OSError:
            pass
        finally:
            os.close(fd)
        return True

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def _log_end(self):
        """Where the log's lines end now (lock held; lines that do not take
        it may come after)."""
        mm = self.mm
        return self.mm_off + mm.tell() if mm is not None else self.end

    def _let_go_locked(self):
        """Lets the mapping go; `end` is then where its lines end. Writers do
        not take the lock (`_emit_to_log`): one that read `write` before it changed
        either copied its line before `read()`, which moves the mapping's
        position to its end in one call (the line is counted), or finds no
        room, then no mapping, and takes the lock (lock held)."""
        mm = self.mm
        if mm is None:
            return
        self.write = _no_mapping
        rest = len(mm.read())
        self.end = self.mm_off + len(mm) - rest
        mm.close()
        self.mm = None

    def _map_locked(self, end, need):
        """Maps the log afresh from `end`, the end of its lines, with room for
        `need` more bytes and one NUL byte past the mapping: the file's blocks
        are allocated first (posix_fallocate), so that a full disk is an
        OSError here and never a SIGBUS at a later copy (lock held; no
        mapping)."""
        import mmap

        off = end - end % mmap.ALLOCATIONGRANULARITY
        size = ((end - off + need) // _CHUNK + 1) * _CHUNK
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is None:
            raise OSError(errno.EOPNOTSUPP, "no posix_fallocate here")
        fallocate(self.fd, off, size + 1)
        mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=off)
        mm.seek(end - off)
        self.mm, self.mm_off, self.write = mm, off, mm.write

    def _unmap_locked(self):
        """Ends the mapping and cuts the file to its lines (lock held)."""
        self._let_go_locked()
        if self.fd is not None:
            os.ftruncate(self.fd, self.end)

    def _to_blocks_locked(self, error, data):
        """The log cannot be mapped: from here on its lines (`data` first) are
        written in blocks (lock held)."""
        self._unmap_locked()
        os.lseek(self.fd, self.end, os.SEEK_SET)
        self.blocks = True
        self.buf.append(data)
        if not self.original:
            self.buf.append(
                (
                    f"# lotus-trace: the log cannot be mapped ({error}): lines are written every {_FLUSH_EVERY};"
                    " a process killed outright loses its last ones\n"
                ).encode()
            )

    def _write_blocks_locked(self):
        """Block mode: writes the buffered lines, and a clock line (lock held)."""
        if not self.buf:
            return
        lines, self.buf = self.buf, []
        # The clock line is a comment: none in the original format.
        data = b"".join(lines) + (b"" if self.original else _clock_line().encode())
        self._write_all(data)
        self.end += len(data)

    def _fail_locked(self, e):
        """The log cannot be written: tracing stops in this process, the file
        is cut to the lines it holds, and lotus is told (lock held)."""
        self.failed = True
        self.buf = []
        try:
            self._unmap_locked()
        except (OSError, ValueError):
            pass
        message = f"cannot write the trace of pid {self.pid} to {self.path or self.dir}: {e}; tracing stops here"
        sys.stderr.write(f"lotus_trace: {message}\n")
        self._report_failure(message)

    def _append_locked(self, data):
        """Puts `data` (whole lines) at the log's end where the mapping has no
        room for it, or there is none yet: the log is created at its first
        line, and grows by `_CHUNK`, a clock line first (lock held)."""
        if self.failed or self.dir is None:
            return
        try:
            if self.fd is None:
                # The collections held back so far (the imports', before any
                # event) go right after the header, not at the next batch or
                # flush: a child forked before that would inherit them.
                data = self._open().encode("utf-8", "replace") + self._gc_held_locked() + data
            if self.blocks:
                self.buf.append(data)
                if len(self.buf) >= _FLUSH_EVERY:
                    self._write_blocks_locked()
                return
            self._let_go_locked()
            end = self.end
            if self.exiting:
                # After the clean end at exit (a finalizer's late line): written
                # as it comes, so that the log still ends clean.
                os.pwrite(self.fd, data, end)
                self.end = end + len(data)
                return
            if end and not self.original:
                data = _clock_line().encode() + data
            try:
                self._map_locked(end, len(data))
            except (OSError, ValueError) as e:
                if isinstance(e, OSError) and e.errno in _NO_ROOM:
                    raise
                self._to_blocks_locked(e, data)
                return
            self.mm.write(data)
            if end and not self.original:
                self.clock_at = self._log_end()
        except OSError as e:
            self._fail_locked(e)

    def _put_locked(self, data):
        """Copies `data` (whole lines) to the log (lock held)."""
        try:
            self.write(data)
        except ValueError:  # no room left in the mapping, or none
            self._append_locked(data)

    def _flush_collector(self):
        """Has lotus's ITT collector write this thread's ended ITT tasks, when
        it is loaded in this process (`lotus_itt_flush`): a worker leaves
        through os._exit, which runs no exit handler of the collector's."""
        f = self.collector_flush
        if f is None:
            try:
                import ctypes

                # RTLD_NOLOAD: only a library already loaded (by the ITT static
                # part, from the path lotus set); nothing is ever loaded here.
                lib = ctypes.CDLL(os.environ["INTEL_LIBITTNOTIFY64"], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                f = self.collector_flush = lib.lotus_itt_flush
            except (OSError, AttributeError, KeyError, ImportError):
                return  # not loaded (yet): no ITT call in this process
        f()

    def flush(self):
        """Writes a clock line to this process's log where lines came since
        the last one (and the buffered lines where the log is written in
        blocks; and, under lotus's ITT collector, this thread's ended ITT
        tasks to theirs). The lines themselves are in the file already."""
        self._flush()

    def _flush(self, timeout=-1, close=False):
        """`flush()`, giving up after `timeout` seconds waiting for the lock
        (a signal handler or the watch thread must not wait forever on a
        thread, possibly the one it interrupted, that holds it). With `close`,
        the clean end of the log: the mapping is let go and the file cut to
        its lines (a line after it maps the log again)."""
        if self.itt_collect:
            self._flush_collector()
        if not self.lock.acquire(timeout=timeout):
            return
        try:
            if self.failed or self.dir is None or self.fd is None:
                return
            try:
                held = self._gc_held_locked()
                if held:
                    self._put_locked(held)
                if self.blocks:
                    self._write_blocks_locked()
                elif not self.original and self._log_end() != self.clock_at:
                    self._put_locked(_clock_line().encode())
                    self.clock_at = self._log_end()
                if close and not self.blocks:
                    self._unmap_locked()
                self.last_flush = _now()
            except OSError as e:
                self._fail_locked(e)
        finally:
            self.lock.release()

    def _close(self):
        """The clean end of this process's log (see `_flush`)."""
        self._flush(close=True)

    def _close_at_exit(self):
        """The log's clean end at exit: lines that still come (a later exit
        handler's) are written one by one, past it."""
        self.exiting = True
        self._close()

    def _exit_closing(self, status):
        """`os._exit`, the log ended cleanly first: a forked child (a
        multiprocessing worker, a program's own `os.fork()`) leaves through
        it, which runs no exit handler."""
        try:
            self.exiting = True
            self._flush(timeout=1.0, close=True)
        except BaseException:
            pass
        _os_exit(status)

    def _emit_to_log(self, line):
        if self.child_setup:
            self._setup_child()
        if self.original:
            line = _as_original(line)
        try:
            data = line.encode()
        except UnicodeEncodeError:  # a lone surrogate in a name
            data = line.encode("utf-8", "replace")
        if _GIL:
            # The common case, without the lock: one C call copies the line
            # (see `_let_go_locked` for a racing growth).
            try:
                self.write(data)
                return
            except ValueError:  # no room left in the mapping, or none
                pass
        with self.lock:
            self._put_locked(data)

    def note(self, text):
        """A `#` comment line in this process's log (once per text)."""
        if text in self.notes_seen:
            return
        self.notes_seen.add(text)
        if self.original:  # no comment lines in the original format
            sys.stderr.write("lotus_trace: " + " ".join(str(text).split()) + "\n")
            return
        data = ("# lotus-trace: " + " ".join(str(text).split()) + "\n").encode("utf-8", "replace")
        with self.lock:
            self._put_locked(data)

    def set_role(self, role):
        """Marks this process as the main process or a worker; the log file's
        name says which. A file already written under the other role is renamed."""
        if role not in ("main", "worker"):
            raise ValueError(f"role must be 'main' or 'worker', not {role!r}")
        if self.child_setup:
            self._setup_child()
        with self.lock:
            if (self.role or "main") == role:
                self.role = role
                return
            self.role = role
            if self.itt_collect:
                # lotus's ITT collector names its log of this process by it.
                os.environ["LOTUS_TRACE_ROLE"] = role
            if self.fd is not None and self.path is not None:
                self._rename(role)

    def _rename(self, role):
        """Gives the open log its name for `role`: a hard link under the first
        free name, then the old name removed. Unlike rename(2), link(2) never
        replaces a file or link already at the new name. Where links are not
        possible the log keeps its name (and the reader takes it as its old
        role)."""
        for n in range(_MAX_NAMES):
            new = self._file_path(role, n)
            try:
                os.link(self.path, new, follow_symlinks=False)
            except FileExistsError:
                continue
            except OSError:
                return
            try:
                os.unlink(self.path)
            except OSError:
                # Two names for one log would count it twice.
                try:
                    os.unlink(new)
                except OSError:
                    pass
                return
            self.path = new
            if not self.original:
                self._put_locked(f"# lotus-trace: role={role} from here on (the header says otherwise)\n".encode())
            return


# --- events -----------------------------------------------------------------

_getprofile = sys.getprofile
_setprofile = sys.setprofile


def pause_profile():
    """Before Python 3.12, spans finer than a dataset's come from a profile
    function set on its thread while it runs (`_finer`). Inside a span
    lotus writes around a callable it has nothing to see (what the callable
    runs is deeper than the dataset's own calls), yet with it set the
    interpreter calls it at every call and return and runs all the
    thread's code on its tracing path (on 3.11: unspecialized, up to 1.8
    times as long). So a wrapper sets it aside for the call: returns it
    (None where none of ours is set), for `resume_profile` after."""
    p = _getprofile()
    if p is not None and getattr(p, "__code__", None) is TRACER.finer.pausable:
        _setprofile(None)
        return p
    return None


def resume_profile(p):
    """Sets back what `pause_profile` set aside (unless the call set a
    profile function of its own)."""
    if _getprofile() is None:
        _setprofile(p)


def _call_op_of(tracer):
    """`tracer.call_op`: a function made per tracer, not a method (a bound
    method called with `*args` copies them into a new tuple, per call of
    every hooked transform), its methods bound once here."""
    op_begin, op_event, op_end_task = tracer.op_begin, tracer.op_event, tracer.op_end_task

    def call_op(name, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` as an op span named `name` (a span of an op
        that raised is not written)."""
        h0 = _now()
        token = op_begin(name)
        paused = pause_profile()
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            if paused is not None:
                resume_profile(paused)
            op_end_task()
            raise
        if paused is not None:
            resume_profile(paused)
        op_event(name, token, _now(), h0)
        return out

    return call_op


def _task_line(name, t0, t1, tid, by, at):
    """A task's line (`task_of`'s): thread `tid` ran it from t0 to t1, for
    thread `by`, which handed it over at `at`."""
    return f"S{name},{t0},{t1 - t0},kind=task,tid={tid},by={by},at={at}\n"


class _Events:
    """`Tracer`'s op spans and tasks (the hot path: `op_begin`, `op_event`). Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def op_begin(self, name):
        """The start of op `name`'s span, now: returns its token, (start time,
        this thread's CPU time), for `op_event`. Under a foreign ITT collector
        the op's ITT task begins too; `op_event` (or `op_end_task`, when the op
        raised) ends it."""
        itt = self.itt
        if itt is not None:
            itt.begin(name)
        return (_now(), _cpu())

    def op_end_task(self):
        """Ends the ITT task of the op begun last on this thread without
        writing its span (the op raised, or its span is written later)."""
        if self.itt is not None:
            self.itt.end()

    def op_event(self, name, token, t1, h0=None):
        """An op (a transform, the loader, any wrapped callable) that ran from
        the start `token` (`op_begin`'s) to t1, in the current batch and sample.
        `,cpu=` is the CPU time this thread ran from `op_begin` to now (a bare
        start time for a token writes no `cpu=`), and `,hook=` what the call's
        wrapper cost the thread outside the span (`calibrate_hooks`; `h0`: the
        wall time the wrapper began, `call_op`'s). Spans nest: a span inside
        another on the same thread is its child (no field says so)."""
        hook_on = self.hook_on
        if type(token) is tuple:
            t0, c0 = token
            if hook_on:
                pre = self.hook_pre if h0 is None else t0 - h0
                if not 0 <= pre <= self.hook_pre_cap:  # the thread was off CPU
                    pre = self.hook_pre
                cpu = f",cpu={_cpu() - c0},hook={pre + self.hook_post_last + self.hook_frames}{self.hook_in}"
            else:
                cpu = f",cpu={_cpu() - c0}"
        else:
            t0 = token
            cpu = ""
        itt = self.itt
        if itt is not None:
            itt.end()
        c = self.ctx
        self._op_line(name, t0, t1, cpu, c.batch, c.sample)
        if hook_on and cpu:
            post = _now() - t1
            self.hook_post_last = post if 0 <= post <= self.hook_post_cap else self.hook_post

    def _op_line(self, name, t0, t1, cpu, b, s):
        """An op span's line (`op_event`'s), `cpu` its `,cpu=` field or ""."""
        tid = self.ctx.tid  # one read: a thread-local's attributes are slow ones
        if tid is None:
            tid = self._tid()
        if b is None:
            if s is None:
                self.emit(f"S{name},{t0},{t1 - t0},kind=op{tid}{cpu}\n")
            else:
                self.emit(f"S{name},{t0},{t1 - t0},kind=op,sample={s}{tid}{cpu}\n")
        elif s is None:
            self.emit(f"S{name},{t0},{t1 - t0},kind=op,batch={b}{tid}{cpu}\n")
        else:
            self.emit(f"S{name},{t0},{t1 - t0},kind=op,batch={b},sample={s}{tid}{cpu}\n")

    def task_of(self, fn):
        """`fn` as work handed now, by this thread, to a thread pool: where it
        runs on another thread, its run is a `kind=task` span there, `by=` this
        thread and `at=` now (the attribution credits the task's CPU to the op
        this thread had open then: its cause, not whatever ran meanwhile). `fn`
        itself where the log is the original format, which has no kinds."""
        if self.original:
            return fn
        by = threading.get_native_id()
        at = _now()
        name = self.callable_name(fn)

        def task(*args, **kwargs):
            t0 = _now()
            try:
                return fn(*args, **kwargs)
            finally:
                tid = threading.get_native_id()
                if tid != by and self.on:
                    self.emit(_task_line(name, t0, _now(), tid, by, at))

        return task


# --- lotus's own cost per wrapped call -------------------------------------------

# Calls per round and rounds of `calibrate_hooks` (the least of the rounds
# is kept: a round that an interrupt or a sample landed in reads high).
_CALIBRATION_CALLS = 200
_CALIBRATION_ROUNDS = 5
# A part of a span's hook cost read on the wall clock past 4 times its mean
# and this (ns) counts as its mean: the thread was off CPU (a sample's
# interrupt, 12-20 us, is on it and counts).
_OFF_CPU_NS = 50_000


def _calibration_noop():
    return None


class _Calibration:
    """`Tracer`'s measure of its own cost per wrapped call (`,hook=`). Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def calibrate_hooks(self):
        """Sets up `,hook=`: what a wrapped call costs its thread outside the
        op's span, the CPU its parent span would otherwise carry.

        Per span, two parts are read on the wall clock (a vDSO read, about
        0.1 us; the thread CPU clock is a system call, 0.6 us here): from
        `call_op`'s start to the span's start (`op_begin`), and from the span's
        end to the line written (formatting and writing it; known once written,
        so the next span of the process uses the last one measured). A part
        past 4 times its mean plus `_OFF_CPU_NS` (the thread was off CPU)
        counts as its mean. What no read brackets (the wrapper's own call and return, the
        frames around the reads) is measured here once per process, on the
        thread CPU clock: `_CALIBRATION_CALLS` calls of a no-op wrapped as
        `_ops` and the transform hooks wrap it (`call_op`, its line formatted
        and copied to a scratch mapping, not to the log), less as many bare
        calls, less the spans' own `cpu=` (inside the span: the child's), less
        the two parts read; the least of `_CALIBRATION_ROUNDS` rounds. About
        1 ms per round here. The parts' means are measured alongside. The same
        calls give what a wrapped call costs inside its span (its `cpu=` less
        the bare call's), written `,hook_in=` (no clock read brackets it)."""
        if self.original:
            return
        import mmap

        cpu, now = _cpu, _now
        noop = _calibration_noop
        spans = []
        scratch = mmap.mmap(-1, 1 << 20)

        def sink(line):  # as `_emit_to_log`'s: checks, encode, one C call to a mapping
            if self.child_setup:
                pass
            if self.original:
                pass
            data = line.encode()
            if scratch.tell() > (1 << 19):
                scratch.seek(0)
            scratch.write(data)
            spans.append(line)

        def wrapped(*args, **kwargs):  # as `_ops._wrap`'s
            if self.on is None:
                return noop()
            return self.call_op("lotus.calibration", noop, *args, **kwargs)

        # The parts' means first, bounds wide open (no pre part: its mean).
        n = _CALIBRATION_CALLS
        pres = []
        for _ in range(n):
            h0 = now()
            token = self.op_begin("lotus.calibration")
            pres.append(token[0] - h0)
        pres.sort()
        saved = self.emit
        best = best_in = None
        try:
            self.emit = sink
            self.hook_pre, self.hook_post, self.hook_frames = pres[n // 2], 0, 0
            self.hook_pre_cap = self.hook_post_cap = 1 << 62
            self.hook_post_last = 0
            self.hook_on = True
            posts = []
            for _ in range(n):
                wrapped()
                posts.append(self.hook_post_last)
            posts.sort()
            self.hook_post = self.hook_post_last = posts[n // 2]
            self.hook_pre_cap = 4 * self.hook_pre + _OFF_CPU_NS
            self.hook_post_cap = 4 * self.hook_post + _OFF_CPU_NS
            for _ in range(_CALIBRATION_ROUNDS):
                c0 = cpu()
                for _ in range(n):
                    noop()
                c1 = cpu()
                del spans[:]
                for _ in range(n):
                    wrapped()
                c2 = cpu()
                inside = read = 0
                for line in spans:
                    fields = dict(f.split("=", 1) for f in line.strip().split(",")[3:] if "=" in f)
                    inside += int(fields.get("cpu", 0))
                    read += int(fields.get("hook", 0))
                frames = ((c2 - c1) - (c1 - c0) - inside - read) // n
                best = frames if best is None else min(best, frames)
                # Inside the span: its `cpu=` less the no-op's own call.
                within = (inside - (c1 - c0)) // n
                best_in = within if best_in is None else min(best_in, within)
        except BaseException:
            self.hook_on = False
            raise
        finally:
            self.emit = saved
            scratch.close()
        self.hook_frames = max(best or 0, 0)
        self.hook_post_last = self.hook_post
        self.hook_in = f",hook_in={best_in}" if best_in and best_in > 0 else ""


# --- op names -----------------------------------------------------------------

# Every op name given out in this process, and what it names (a class, a
# code object, a builtin): two different callables never share a name.
# Claims are O(1) (a counter per qualified name, not a walk over `#2, #3,
# ...`) and hold their callables by weak reference where they take one: a
# class made per item (`type(...)` or a class statement in `__getitem__`)
# is neither kept alive nor makes later claims slower.
#
# Distinct callables of one qualified name with rows of their own
# (`qualified#2`, ...): past it they share the row `qualified#more`, said
# once in the log.
MAX_PER_NAME = 32
# Names given out in all: past it, callables not named yet share the row
# `MORE_NAMES`, said once in the log.
MAX_NAMES = 10_000
MORE_NAMES = "lotus.more_callables"
# Entries of `callable_name`'s cache before it is emptied (names stay the
# same: `claim_name` gives a callable its name again).
_CACHE_MAX = 1024
_BuiltinType = types.BuiltinFunctionType


def _builtin_key(fn):
    """What names a C function: itself, or for a method bound to an object
    (`array.astype`, `tensor.float`: a new one per object) its class's
    method, so that neither the object is kept nor each object's method is
    a callable of its own."""
    owner = getattr(fn, "__self__", None)
    if owner is None or type(owner) is types.ModuleType or isinstance(owner, type):
        return fn
    cls = type(owner)
    method = getattr(cls, getattr(fn, "__name__", ""), None)
    try:
        hash(method)
    except TypeError:
        method = None
    return method if method is not None else (cls, getattr(fn, "__name__", "?"))


def _function_name(fn):
    """A function's op name: its `__qualname__`; a lambda's
    `<lambda>@file.py:LINE`."""
    code = getattr(fn, "__code__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    module = getattr(fn, "__module__", None) or "?"
    if code is not None:
        return _code_parts(code, qual, module)
    key = _builtin_key(fn) if type(fn) is _BuiltinType else fn
    return key, clean_name(qual), clean_name(f"{module}.{qual}")


def _code_parts(code, qual, module):
    """`claim_name`'s arguments for the Python function of `code`, whose
    qualified name is `qual` in `module`: the code is its key; a lambda is
    `<lambda>@file.py:LINE`."""
    if "<lambda>" in qual:
        short = f"<lambda>@{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
        # Lambdas on one line: told apart by the column they start at.
        col = None
        positions = getattr(code, "co_positions", None)
        if positions is not None:
            col = min((p[2] for p in positions() if p[2] and p[0] == code.co_firstlineno), default=None)
        qualified = f"{short}:{col}" if col is not None else f"<lambda>@{code.co_filename}:{code.co_firstlineno}"
        return code, clean_name(short), clean_name(qualified)
    return code, clean_name(qual), clean_name(f"{module}.{qual}")


class BatchSpan:
    """One batch: `with batch(id) as b:` fetch the samples, then
    `with b.collate():` collate them. Writes SCollation (the collate
    block), SFetch (from the start to the collate block, or to the end when
    there is none) and SBatch (the whole block), all with `batch=<id>`.
    In a worker the log is written at the end of each batch. `tracer`: the
    `Tracer` that writes it (default: the process's, `TRACER`)."""

    __slots__ = ("batch", "t0", "c0", "c1", "cpu", "u0", "_prev", "_active", "tracer")

    def __init__(self, batch_id, tracer=None):
        self.tracer = TRACER if tracer is None else tracer
        self.batch = int(batch_id) if batch_id is not None else None
        self.t0 = self.c0 = self.c1 = self.cpu = self.u0 = None
        self._prev = None
        self._active = False

    def __enter__(self):
        tr = self.tracer
        if tr.on and self.batch is not None:
            self._active = True
            ctx = tr.ctx
            self._prev = ctx.batch
            ctx.batch = self.batch
            self.t0 = _now()
            self.u0 = tr.usage_start()
        return self

    def collate(self):
        """A context manager around the collation of this batch."""
        return _Collate(self)

    def run_collate(self, fn, data):
        """`fn(data)` timed as this batch's collation."""
        with _Collate(self):
            return fn(data)

    def __exit__(self, exc_type, *exc):
        if not self._active:
            return False
        self._active = False
        t1 = _now()
        tr = self.tracer
        used = tr.usage_over(self.u0)
        tr.ctx.batch = self._prev
        if exc_type is not None and issubclass(exc_type, StopIteration):
            # A fetch that delivered nothing (an IterableDataset's end in a
            # worker): no batch, so none in the batch statistics.
            return False
        b = self.batch
        t0 = self.t0
        tid = tr._tid()
        emit = tr.emit
        # Collections held back during the batch go before its line: a
        # reader gives the batch the op spans written before it.
        if tr.gc_pending:
            tr._emit_gc_pending()
        if self.c0 is not None and self.c1 is not None:
            cpu = f",cpu={self.cpu}" if self.cpu is not None else ""
            emit(f"SCollation,{self.c0},{self.c1 - self.c0},kind=op,batch={b}{tid}{cpu}\n")
            fetch_end = self.c0
        else:
            fetch_end = t1
        emit(f"SFetch,{t0},{fetch_end - t0},kind=fetch,batch={b}{tid}\n")
        at = f",pcpu_at={self.u0[0]}" if self.u0[1] is None else f",pcpu_at={self.u0[0]},delay_at={self.u0[1]}"
        emit(f"SBatch,{t0},{t1 - t0},kind=batch,batch={b}{tid}{used}{at}\n")
        if tr.role == "worker":
            tr.name_threads()
            tr.flush()
        return False


class _Collate:
    __slots__ = ("span",)

    def __init__(self, span):
        self.span = span

    def __enter__(self):
        if self.span._active:
            self.span.c0, self.span.cpu = self.span.tracer.op_begin("Collation")
        return self

    def __exit__(self, *exc):
        if self.span._active:
            self.span.cpu = _cpu() - self.span.cpu
            self.span.c1 = _now()
            self.span.tracer.op_end_task()  # the span is written with the batch's
        return False


class _Names:
    """`Tracer`'s op names, and the sample, wait and loader events. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _owner_name(self, key):
        try:
            return self.owned.get(key)
        except TypeError:
            try:
                return self.owned_strong.get(key)
            except TypeError:
                return None

    def _take(self, name, key):
        """Whether `name` is `key`'s: free (then it is now) or its already."""
        owner = self.claimed.get(name)
        if owner is None:
            if len(self.claimed) >= MAX_NAMES:
                return False
            try:
                self.claimed[name] = weakref.ref(key)
            except TypeError:
                self.claimed[name] = key
            try:
                self.owned[key] = name
            except TypeError:
                try:
                    self.owned_strong[key] = name
                except TypeError:
                    pass
            return True
        if type(owner) is weakref.ref:
            owner = owner()
            if owner is None:  # gone: its name stays its own
                return False
        try:
            return owner is key or bool(owner == key)
        except Exception:
            return False

    def claim_name(self, key, short, qualified):
        """`short` as the op name of `key`, or, when another callable already
        has it, `qualified` (`module.qualname`), then `qualified#2`, ... (at
        most `MAX_PER_NAME` of them, then `qualified#more` for the rest; past
        `MAX_NAMES` names, `MORE_NAMES`). O(1); `key` is held by weak
        reference where it takes one."""
        name = self._owner_name(key)
        if name is not None:
            return name
        for name in (short, qualified):
            if self._take(name, key):
                return name
        if len(self.claimed) >= MAX_NAMES:
            self.note(f"more than {MAX_NAMES} op names in this process: callables named after that share the row {MORE_NAMES}")
            return MORE_NAMES
        while True:
            n = self.next_n.get(qualified, 2)
            if n > MAX_PER_NAME:
                self.note(f"more than {MAX_PER_NAME} different callables are named {qualified} (a class or function made per call?): those after share the row {qualified}#more")
                return f"{qualified}#more"
            self.next_n[qualified] = n + 1
            name = f"{qualified}#{n}"
            if self._take(name, key):
                return name

    def _cache(self, key, name):
        if len(self.callable_names) >= _CACHE_MAX:
            self.callable_names.clear()
        try:
            self.callable_names[key] = name
        except TypeError:
            pass
        return name

    def code_name(self, code, qual, module):
        """The op name of the Python function of `code`, whose qualified
        name is `qual` in `module` (`callable_name`'s for that function)."""
        name = self.callable_names.get(code)
        if name is None:
            name = self._cache(code, self.claim_name(*_code_parts(code, qual, module)))
        return name

    def callable_name(self, obj, keep=True):
        """The op name of a callable: a function or method by its
        `__qualname__` (a lambda by `<lambda>@file.py:LINE`), a partial by its
        function's, torchvision's `Lambda(f)` by `f`'s, any other object by its
        class's name; `module.qualname` where two callables would share one.
        Names are kept per class and per code object (not per object: a
        callable made per call is not kept alive), in a bounded cache over
        `claim_name`, which holds them by weak reference. `keep=False`: an
        object's class is not put in that cache (for a caller with a smaller
        cache of its own, `_finer`, where classes made per item would keep
        up to `_CACHE_MAX` of them alive)."""
        k = type(obj)
        name = self.callable_names.get(k)
        if name is not None:
            return name
        code = getattr(obj, "__code__", None) if k.__name__ in ("function", "method") else None
        if code is not None:
            name = self.callable_names.get(code)
            if name is None:
                fn = getattr(obj, "__func__", obj)
                qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or k.__name__
                name = self.code_name(code, qual, getattr(fn, "__module__", None) or "?")
            return name
        if k.__name__ == "method":
            return self.callable_name(obj.__func__)
        if k is _BuiltinType:
            key, short, qualified = _function_name(obj)
            try:
                name = self.callable_names.get(key)
            except TypeError:
                name = None
            if name is None:
                name = self._cache(key, self.claim_name(key, short, qualified))
            return name
        if k.__name__ == "partial" and callable(getattr(obj, "func", None)):
            return self.callable_name(obj.func)
        if k.__name__ == "Lambda":
            lambd = getattr(obj, "lambd", None)
            if callable(lambd):
                return self.callable_name(lambd)
        name = self.claim_name(k, clean_name(k.__name__), clean_name(f"{k.__module__}.{k.__qualname__}"))
        return self._cache(k, name) if keep else name

    def sample_call(self, get, index, name="Sample"):
        """`get(index)` as one sample: an `S<name>` event of kind sample, with
        the ops inside it tagged with the sample's index. Inside another sample
        (a traced dataset wrapping a traced dataset) it only calls `get`."""
        c = self.ctx
        if not self.on or c.in_sample:
            return get(index)
        prev = c.sample
        sid = sample_id(index)
        c.sample = sid
        c.in_sample = True
        t0 = _now()
        try:
            return get(index)
        finally:
            t1 = _now()
            c.in_sample = False
            c.sample = prev
            b = c.batch
            tail = "" if b is None else f",batch={b}"
            if sid is not None:
                tail += f",sample={sid}"
            self.emit(f"S{name},{t0},{t1 - t0},kind=sample{tail}{self._tid()}\n")

    def wait_event(self, batch_id, t0, t1, ready, at=""):
        """The main process waited from t0 to t1 for batch `batch_id`
        (`ready`: it was already there); `at`: `usage_at()` at t0."""
        self.emit(f"SWait,{t0},{t1 - t0},kind=wait,batch={int(batch_id)},ready={1 if ready else 0}{self._tid()}{at}\n")

    def workers_event(self, kind, t0, t1, u0=None):
        """The main process started (`kind` "start": building a multiprocessing
        DataLoader iterator, `iter(loader)`) or stopped ("stop": its
        `_shutdown_workers`) its DataLoader's workers from t0 to t1 (`u0`:
        `usage_start()` at t0). Not in the original format, which has no
        kinds."""
        if self.original:
            return
        name = "WorkersStart" if kind == "start" else "WorkersStop"
        used = self.usage_over(u0) if u0 is not None else ""
        self.emit(f"S{name},{t0},{t1 - t0},kind={kind}{self._tid()}{used}\n")

    def config_event(self, fields):
        """A DataLoader's settings at an `iter(loader)`, now: `fields` is the
        line's `workers=...,prefetch=...` part. Not in the original format."""
        if self.original:
            return
        self.emit(f"SDataLoader,{_now()},0,kind=config,{fields}{self._tid()}\n")


# --- what the process and its threads use ---------------------------------------

# The whole process's CPU time (all its threads), ns: a forked or spawned
# child's starts at 0.
_pcpu = time.process_time_ns
try:
    from resource import RUSAGE_SELF as _RUSAGE_SELF
    from resource import getrusage as _getrusage
except ImportError:  # not on Linux
    _RUSAGE_SELF, _getrusage = 0, None
# A thread's scheduler statistics: its CPU time, its run-queue delay (the
# time it was ready but waited for a CPU) and its time slices, in ns.
_SCHEDSTAT = "/proc/thread-self/schedstat"


class _Schedstat:
    """This thread's schedstat, kept open (one `pread` a reading), closed
    with the thread's `ctx` (or at a fork, in the child)."""

    __slots__ = ("fd",)

    def __init__(self):
        self.fd = -1
        try:
            fd = os.open(_SCHEDSTAT, os.O_RDONLY)
        except OSError:
            return
        self.fd = fd
        # Read twice: where a kernel cannot read it again at offset 0 there
        # is no field (never a wrong one).
        a, b = self.delay(), self.delay()
        if a is None or b is None or b < a:
            self.close()

    def delay(self):
        """The thread's run-queue delay so far, ns, or None."""
        try:
            return int(os.pread(self.fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self):
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except Exception:  # closed already; or `os` gone at shutdown
                pass

    def __del__(self):
        self.close()


def _psys():
    """The process's CPU time in the kernel so far (page faults, system
    calls), ns, or None."""
    try:
        return int(_getrusage(_RUSAGE_SELF).ru_stime * 1e9)
    except Exception:
        return None


class _Usage:
    """`Tracer`'s reads of what the process and this thread used. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _delay(self):
        """This thread's run-queue delay so far, ns, or None where its
        schedstat cannot be read."""
        c = self.ctx
        s = c.sched
        if s is None:
            s = c.sched = _Schedstat()
        if s.fd < 0:
            return None
        d = s.delay()
        if d is None:
            s.close()
        return d

    def usage_at(self):
        """`,pcpu_at=<process CPU>,delay_at=<thread run-queue delay>` now
        (absolute, ns; no `delay_at` where it cannot be read)."""
        d = self._delay()
        return f",pcpu_at={_pcpu()}" if d is None else f",pcpu_at={_pcpu()},delay_at={d}"

    def usage_start(self):
        """(process CPU, thread delay, process kernel CPU) now, for
        `usage_over`."""
        return _pcpu(), self._delay(), _psys()

    def usage_over(self, u0):
        """`,pcpu=<process CPU>,delay=<thread delay>,psys=<process kernel
        CPU>` since `usage_start()`'s `u0`, ns (no `delay` or `psys` where it
        cannot be read)."""
        p0, d0, s0 = u0
        p = _pcpu() - p0
        d = self._delay() if d0 is not None else None
        k = _psys() if s0 is not None else None
        out = f",pcpu={p}" if d is None else f",pcpu={p},delay={d - d0}"
        if k is not None:
            out += f",psys={max(0, k - s0)}"
        return out


# --- garbage collection as a span -------------------------------------------------

# A collection of generation 0 or 1 is a span when it lasts this long (ns);
# each of generation 2 is.
_GC_MIN_NS = 1_000_000
_GC_PENDING_MAX = 64


class _GcSpans:
    """`Tracer`'s garbage collections as op spans, and the consume event. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _gc_callback(self, phase, info):
        """`gc.callbacks`: a collection of generation 2, or of another lasting
        `_GC_MIN_NS`, is an op span `gc` (`gen=`, `cpu=`) on the thread that ran
        it: inside an op it is that op's child. Two clock reads at its start;
        written at its end only where it qualifies."""
        if phase == "start":
            if self.on:
                self.gc_t0 = _now()
                self.gc_c0 = _cpu()
            return
        t0 = self.gc_t0
        if not t0:
            return
        self.gc_t0 = 0
        try:
            t1 = _now()
            g = info["generation"]
            if g != 2 and t1 - t0 < _GC_MIN_NS or self.original or not self.on:
                return
            pid = os.getpid()
            if pid != self.pid:
                # A forked child before `_after_fork_child` (a collection set
                # off in an at-fork handler that runs first, threading's):
                # the log, its mapping, the spans held back and the thread's
                # context are still the parent's. Held for this process's
                # own log; its only thread is its main one now.
                self._hold_child_gc(pid, f"Sgc,{t0},{t1 - t0},kind=op,gen={g},cpu={_cpu() - self.gc_c0}\n".encode())
                return
            c = self.ctx
            tid = c.tid if c.tid is not None else self._tid()
            b = "" if c.batch is None else f",batch={c.batch}"
            s = "" if c.sample is None else f",sample={c.sample}"
            line = f"Sgc,{t0},{t1 - t0},kind=op,gen={g}{b}{s}{tid},cpu={_cpu() - self.gc_c0}\n"
            self._emit_from_gc(line.encode())
        except Exception:  # never break the job's collection
            pass

    def _emit_from_gc(self, data):
        """`emit` from inside a collection, which may have started anywhere
        (this thread holding the log's lock, importlib holding its own): one C
        call copies the line into the log's mapping where the log has its
        header already, else it is held back (`gc_pending`). Never a lock, a
        file created or a module imported here."""
        mm = self.mm
        try:
            if _GIL and mm is not None and (self.mm_off or mm.tell()):
                self.write(data)
                return
        except (ValueError, OSError):
            pass
        self._hold_gc(data)

    def _hold_gc(self, data):
        """Holds a `gc` span back for the log (`gc_pending`), at most
        `_GC_PENDING_MAX` of them; the others are counted (`gc_dropped`)."""
        if len(self.gc_pending) < _GC_PENDING_MAX:
            self.gc_pending.append(data)
        else:
            self.gc_dropped += 1

    def _hold_child_gc(self, pid, data):
        """A forked child's `gc` span from before `_after_fork_child`: never
        in the parent's log (its mapping is shared: the line would land over
        the parent's next ones), held for the child's own. The spans the
        parent held back are the parent's, which writes them: dropped here."""
        if self.gc_pending_pid != pid:
            self.gc_pending.clear()
            self.gc_dropped = 0
            self.gc_pending_pid = pid
        self._hold_gc(data)

    def _gc_held_locked(self):
        """The `gc` spans held back, as one block to write, and a note where
        some could not be held (lock held; the list is taken one span at a
        time: a collection may add to it meanwhile)."""
        pending = self.gc_pending
        out = []
        while pending:
            out.append(pending.pop(0))
        if self.gc_dropped:
            out.append(
                (
                    f"# lotus-trace: {self.gc_dropped} gc spans not written: more than {_GC_PENDING_MAX}"
                    " came while the log could not take them\n"
                ).encode()
            )
            self.gc_dropped = 0
        return b"".join(out)

    def _emit_gc_pending(self):
        """Writes the `gc` spans held back by `_emit_from_gc` (not before the
        process's log exists: its own events create it, under its role, and
        it writes them after its header)."""
        if self.fd is None:
            return
        with self.lock:
            held = self._gc_held_locked()
            if held:
                self._put_locked(held)

    def _install_gc_spans(self):
        """Adds `_gc_callback` to `gc.callbacks` (once; forked children keep
        it, spawned ones add it at their `enable`)."""
        import gc

        if not self.gc_spans:  # opt-in ($LOTUS_TRACE_GC, `read_env`)
            return
        if self._gc_callback not in gc.callbacks:
            gc.callbacks.append(self._gc_callback)

    def consume_event(self, batch_id, t=None):
        """The main process's training loop got batch `batch_id` at t (now),
        with what the process and thread had used then (`usage_at`)."""
        if t is None:
            t = _now()
        self.emit(f"SConsume,{t},0,kind=consume,batch={int(batch_id)}{self._tid()}{self.usage_at()}\n")
        if self.gc_pending:
            self._emit_gc_pending()
        if t - self.last_flush > _MAIN_FLUSH_NS:
            self.name_threads()
            self.flush()


# --- threads ----------------------------------------------------------------


def _machinery_name(t, sharer):
    """The name of thread `t` as DataLoader machinery, or None: a
    multiprocessing queue's feeder thread (it pickles and sends each batch,
    and collects garbage when its allocations cross the threshold), the
    resource sharer's (file descriptors of shared tensors), torch's
    pin-memory thread, and lotus_trace's own watch thread."""
    name = t.name
    if name == "QueueFeederThread" or name == "lotus_trace-watch":
        return name
    if sharer is not None and t is sharer:
        return "ResourceSharer"
    target = getattr(getattr(t, "_target", None), "__name__", "")
    if target == "_pin_memory_loop":
        return "PinMemory"
    return None


class _Threads:
    """`Tracer`'s lines naming the DataLoader's own threads. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def name_threads(self):
        """Writes a `kind=thread` line for each thread of this process that is
        the DataLoader's own machinery (see `_machinery_name`), once each:
        lotus never takes them for an op's thread pool, however their work
        falls in time. Called at the end of each batch in a worker and at a
        flush of the main process (never from a signal handler: it takes
        threading's lock). Not in the original format, which has no kinds."""
        if self.original:
            return
        rs = sys.modules.get("multiprocessing.resource_sharer")
        sharer = getattr(getattr(rs, "_resource_sharer", None), "_thread", None)
        main = threading.main_thread()
        for t in threading.enumerate():
            if t is main:
                continue
            nid = getattr(t, "native_id", None)
            if nid is None or nid in self.named_threads or nid == os.getpid():
                continue
            name = _machinery_name(t, sharer)
            if name is not None:
                self.named_threads.add(nid)
                self.emit(f"S{name},{_now()},0,kind=thread,tid={nid}\n")


# --- processes --------------------------------------------------------------

# The signals that end a job (`kill`, a batch system, Ctrl-C, a closed
# terminal): the buffered events are written before the action the program
# had for them (its handler, KeyboardInterrupt, or the default: death).
_END_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


class _Processes:
    """`Tracer`'s fork handlers, exit hooks and end-signal flush. Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _before_fork(self):
        self.lock.acquire()

    def _after_fork_parent(self):
        self.lock.release()

    def _after_fork_child(self):
        # The parent's unwritten lines are the parent's: the child starts
        # empty. Its held-back gc spans first: a collection from here on is
        # this process's (`_hold_child_gc` until `pid` is this one's), and
        # any this process made before (`_hold_child_gc`) are kept.
        pid = os.getpid()
        if self.gc_pending_pid != pid:
            self.gc_pending.clear()
            self.gc_dropped = 0
            self.gc_pending_pid = pid
        self.lock = threading.Lock()
        self.buf = []
        # The parent's mapping is the parent's log, shared with it: let go
        # here (unmapped in this process only), never written.
        if self.mm is not None:
            try:
                self.mm.close()
            except (OSError, ValueError, BufferError):
                pass
        self.mm = None
        self.write = _no_mapping
        self.mm_off = self.end = 0
        self.clock_at = -1
        self.blocks = self.exiting = False
        self.noted_children.clear()
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None
        self.path = None
        self.pid = pid
        self.role = None
        self.last_flush = 0
        self.notes_seen.clear()
        self.named_threads.clear()
        self.ctx.batch = None
        self.ctx.sample = None
        self.ctx.in_sample = False
        # The forking thread is the child's main thread now.
        self.ctx.tid = None
        # Its schedstat was the parent thread's.
        if self.ctx.sched is not None:
            self.ctx.sched.close()
        self.ctx.sched = None
        self.child_setup = True
        # Threads do not survive a fork: the child watches lotus on its own.
        if self.lotus is not None or os.environ.get("LOTUS_TRACE_LOTUS"):
            try:
                self._start_lotus_watch(forked=True)
            except Exception:
                pass

    def _setup_child(self):
        """In a forked child, at its first event: multiprocessing children end
        with os._exit, which skips atexit but runs multiprocessing's finalizers
        (registered after the fork, so here)."""
        self.child_setup = False
        self._hook_multiprocessing_exit()

    def _hook_multiprocessing_exit(self):
        # Only where multiprocessing is in use (importing it costs start-up
        # time): a multiprocessing child's parent had imported it.
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            try:
                util.Finalize(None, self._close_at_exit, exitpriority=-1000)
            except Exception:
                pass

    def _child_ended(self, pid, signum):
        """Notes in this process's log that its child `pid` ended by signal
        `signum` (once per child): its own log, if any, was cut short there,
        and lotus says which process died and how."""
        if pid in self.noted_children or not self.on:
            return
        self.noted_children.add(pid)
        import signal

        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "?"
        self.note(f"child pid={pid} ended by signal={signum} ({name})")

    def _hook_popen(self, module):
        """Wraps `poll` of multiprocessing's `Popen` in `module` (popen_fork,
        whose class spawned children share, and popen_forkserver): a child it
        finds ended by a signal (a DataLoader worker the OOM killer took) is
        noted (`_child_ended`)."""
        cls = getattr(module, "Popen", None)
        poll = getattr(cls, "__dict__", {}).get("poll")
        if poll is None or getattr(poll, "_lotus_trace", False):
            return

        child_ended = self._child_ended

        def poll_noting(popen, *args, **kwargs):
            rc = poll(popen, *args, **kwargs)
            if type(rc) is int and rc < 0:
                try:
                    child_ended(popen.pid, -rc)
                except Exception:
                    pass  # a note must never break the program's wait
            return rc

        poll_noting._lotus_trace = True
        poll_noting.__wrapped__ = poll
        poll_noting.__name__ = poll.__name__
        poll_noting.__qualname__ = getattr(poll, "__qualname__", poll.__name__)
        poll_noting.__doc__ = poll.__doc__
        cls.poll = poll_noting

    def _on_end_signal(self, signum, frame):
        """Ends the log cleanly (writes what is buffered), then does what was
        to be done for `signum` before lotus_trace: the program's handler,
        Python's KeyboardInterrupt for SIGINT, or the default action (the
        process dies by the signal). A program that runs on maps its log
        again at its next line."""
        self._flush(timeout=0.5, close=True)
        import signal

        prev = self.prev_handlers.get(signum, signal.SIG_DFL)
        if callable(prev):
            return prev(signum, frame)
        # SIG_DFL: die by the signal, as without lotus_trace (a parent sees
        # the same status).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _install_signal_flush(self):
        """Flushes on SIGTERM, SIGINT and SIGHUP (see `_on_end_signal`): without
        it a job ended by one of them loses every buffered event, atexit not
        running for a death by signal. A signal the process ignores stays
        ignored (nohup); one handled in C (not by Python) is left alone; a
        handler the program sets later replaces this one (its exit, if any,
        runs atexit, which flushes). Only from the main thread, where Python
        allows handlers."""
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            import signal
        except ImportError:
            return
        for name in _END_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                prev = signal.getsignal(signum)
                # `==`: each read of a method is a new bound method, equal to the last.
                if prev is None or prev is signal.SIG_IGN or prev == self._on_end_signal:
                    continue
                self.prev_handlers[signum] = prev
                signal.signal(signum, self._on_end_signal)
            except (ValueError, OSError, RuntimeError):
                continue


# --- lotus's death ------------------------------------------------------------

# How long a process has, once lotus is gone and it was sent SIGTERM, to
# end by itself (its own handler may run) before it leaves with os._exit.
_LOTUS_GONE_GRACE = 3.0
# Where pidfd_open is missing (Python < 3.9, Linux < 5.3): how often the
# watch thread looks at /proc.
_LOTUS_POLL = 1.0


def _start_time(pid):
    """Field 22 of /proc/<pid>/stat (start time, clock ticks), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return int(text[text.rindex(b")") + 1 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _has_parent_death_signal():
    """Whether the kernel signals this process when its parent dies
    (prctl PR_GET_PDEATHSIG): what lotus sets on a plain job's main
    process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        sig = ctypes.c_int(0)
        return libc.prctl(2, ctypes.byref(sig), 0, 0, 0) == 0 and sig.value != 0
    except Exception:
        return False


def _propagate(out_dir, prefix, torch):
    """Sets the environment so that child processes (spawned DataLoader
    workers, launched ranks) trace into the same folder: the variables the
    auto-activation reads, this package and its start-up hook on
    PYTHONPATH, and $LOTUS_TRACE_PARENT, this process's pid (a process
    that finds it set at `enable()` is not the job's first traced one)."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    boot = os.path.join(pkg, "_boot")
    parent = os.path.dirname(pkg)
    os.environ["LOTUS_TRACE_DIR"] = out_dir
    os.environ["LOTUS_TRACE_PREFIX"] = prefix
    os.environ["LOTUS_TRACE_TORCH"] = "1" if torch else "0"
    # Children know a traced process is above them (the first one notes
    # for the whole job: _frames).
    os.environ["LOTUS_TRACE_PARENT"] = str(os.getpid())
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    want = [p for p in (boot, parent) if os.path.isdir(p)]
    if parts[: len(want)] != want:
        parts = want + [p for p in parts if p not in want]
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)


class _LotusWatch:
    """`Tracer`'s watch of `lotus trace run` (its death ends the process). Methods only: the state is `Tracer.__init__`'s."""

    __slots__ = ()

    def _lotus_alive(self):
        pid, started = self.lotus
        return _start_time(pid) == started

    def _watch_lotus(self):
        """The watch thread: waits until lotus is gone, then ends this process.
        Blocks in poll(2) on a pidfd of lotus (readable once it exits); where
        there is none, looks at /proc every `_LOTUS_POLL` seconds."""
        fd = self.lotus_fd
        try:
            if fd is not None:
                import select

                p = select.poll()
                p.register(fd, select.POLLIN)
                while not p.poll():
                    pass
            else:
                while self._lotus_alive():
                    time.sleep(_LOTUS_POLL)
        except Exception:
            # Cannot watch (an interpreter shutting down): only the /proc look.
            while self._lotus_alive():
                time.sleep(_LOTUS_POLL)
        self._lotus_gone()

    def _lotus_gone(self):
        """lotus was killed before it could end the job: write what is
        buffered, then end the process as lotus would have (SIGTERM; the
        whole process group when this process leads one of its own, as a
        sampled job's main process does, so that the programs it started end
        too), and leave with os._exit if it is still here after a grace."""
        self._flush(timeout=1.0, close=True)
        sys.stderr.write(f"lotus_trace: lotus (pid {self.lotus[0]}) is gone: ending pid {os.getpid()}\n")
        import signal

        try:
            if os.getpgrp() == os.getpid():
                os.killpg(os.getpid(), signal.SIGTERM)
            else:
                os.kill(os.getpid(), signal.SIGTERM)
        except OSError:
            pass
        time.sleep(_LOTUS_GONE_GRACE)
        self._flush(timeout=0.5, close=True)
        os._exit(128 + signal.SIGTERM)

    def _start_lotus_watch(self, forked=False):
        """Starts the watch thread when `lotus trace run` named itself in
        $LOTUS_TRACE_LOTUS (`<pid>:<start time>`). A process started after
        lotus died (its pid gone or reused: the start time differs) ends at
        once. Not in a process lotus itself started with a parent-death signal
        (a plain job's main process: the kernel ends it with lotus, and its
        SIGTERM handler writes its events): a thread there would have Python
        3.12+ warn at each os.fork() of the program's own code (a
        DeprecationWarning). Forked children lose that signal: they watch."""
        if self.lotus is None:
            spec = os.environ.get("LOTUS_TRACE_LOTUS", "")
            pid, _, started = spec.partition(":")
            if not (pid.isdigit() and started.isdigit()):
                return
            self.lotus = (int(pid), int(started))
            try:
                self.lotus_fd = os.pidfd_open(self.lotus[0])
            except (AttributeError, OSError):
                self.lotus_fd = None
            # Checked after the pidfd is open: it then names this very process.
            if not self._lotus_alive():
                if self.lotus_fd is not None:
                    os.close(self.lotus_fd)
                    self.lotus_fd = None
            elif not forked and os.getppid() == self.lotus[0] and _has_parent_death_signal():
                return
        t = threading.Thread(target=self._watch_lotus, name="lotus_trace-watch", daemon=True)
        t.start()



# --- the other modules' state ---------------------------------------------------
#
# Kept by the tracer (`Tracer.frames`, `.ops`, ...), read and changed by the
# module named: one object holds all of a process's state.


class _FramesState:
    """`_frames`': the perf trampolines in this process."""

    __slots__ = ("enabled", "ours", "note", "hooks", "saved_eval", "api")

    def __init__(self):
        # The tracer manages the trampolines in this process (and its forked
        # children, which try again with their own map whatever the parent got).
        self.enabled = False
        # The trampolines are on in this process because the tracer turned them on.
        self.ours = False
        self.note = None  # `start`'s note(text)
        self.hooks = False  # the fork hooks are registered
        # The interpreter's frame evaluator set aside across a fork (ctypes),
        # or None where the trampolines were turned off through `sys` instead.
        self.saved_eval = None
        self.api = None  # `_capi()`'s answer once asked (False: none)


class _OpsState:
    """`_ops`': the `--op` specs and what became of them."""

    __slots__ = ("specs", "matched", "ran", "main_done", "finer_noted", "globs")

    def __init__(self):
        self.specs = []  # (line number, module, qualname glob, spec text)
        self.matched = set()  # line numbers of the specs that matched (said once)
        self.ran = set()  # line numbers of the specs whose functions ran (said once)
        self.main_done = False  # the script's functions were wrapped
        self.finer_noted = False  # `note_finer` said its note
        self.globs = {}  # pattern -> tokens (the specs' patterns: a few)


class _LoaderState:
    """`_loader`'s: `$LOTUS_LOADER`, `$LOTUS_STOP_AFTER` and the batches taken."""

    __slots__ = ("settings", "stop_after", "consumed")

    def __init__(self):
        self.settings = None  # DataLoader keyword arguments, or None
        self.stop_after = None  # a number of batches, or None
        self.consumed = 0  # batches the training loop took, over all epochs


class _FinerThread(threading.local):
    # The dataset ops open on this thread (sys.monitoring's): [code, frame,
    # pending], where pending is `_finer._pending`'s list.
    stack = None
    # This thread's profile functions (before 3.12): `_finer._profile_functions`'.
    profile = None


class _FinerState:
    """`_finer`'s: its sys.monitoring tool and its tables (see there)."""

    __slots__ = ("tool", "failed", "busy_noted", "pausable", "watched", "returns", "written", "first", "callees", "quiet", "threads")

    def __init__(self):
        self.tool = None  # our sys.monitoring tool id, once claimed
        self.failed = False  # no tool id could be had
        self.busy_noted = False  # a profiler set from C was said to keep us out (before 3.12)
        # The code of the profile function `pause_profile` sets aside
        # (before 3.12; `_finer` sets it).
        self.pausable = False
        self.watched = set()  # dataset code objects with local CALL events
        self.returns = set()  # callee code objects with local PY_RETURN events
        self.written = set()  # callee names written once (then always)
        self.first = {}  # callee name -> its first call of MIN_NS CPU or more, until written
        self.callees = {}  # callee key (`_key`) -> (name, Python code ending it), or None: traced already
        self.quiet = {}  # callee key -> its calls in a row under MIN_NS of CPU, while not written
        self.threads = _FinerThread()


class _Running(threading.local):
    """albumentations' containers running on this thread, innermost last."""

    def __init__(self):
        self.items = []


class _PatchState:
    """What `_torch` (and `_albumentations`) patched in the libraries."""

    __slots__ = ("traced_composes", "self_spanning", "op_class", "extra_hooks", "finder", "running")

    def __init__(self):
        self.traced_composes = ()  # Compose classes whose calls trace each transform themselves
        # Classes whose every call writes its own op span (torchvision v2's
        # Transform, albumentations' transforms), set as their modules are hooked.
        self.self_spanning = ()
        self.op_class = ()  # lotus_trace.wrap's class, set by `_torch.install`
        self.extra_hooks = {}  # hooks added at install: module name -> [hook] (albumentations, --op)
        self.finder = None  # the meta_path finder that hooks modules as they are imported
        self.running = _Running()


# --- the tracer -------------------------------------------------------------


class Tracer(_Context, _Log, _Events, _Calibration, _Names, _Usage, _GcSpans, _Threads, _Processes, _LotusWatch):
    """A process's tracer: all it keeps between calls (the log and its
    writer, the switches read from the environment, the per-thread context,
    the op names given out, the process hooks installed). The process has
    one, `TRACER`, made once at import; the package's functions are its
    methods (`op_begin`, `note`, ...). Another instance is independent of it
    (tests): `emit`, where its lines go, is the log by default, or any
    callable given (`Tracer(emit=lines.append)`). Only `enable` and
    `_install_process_hooks` touch the process itself (exit, signals,
    forks, the environment children inherit): for `TRACER` only.

    The methods are grouped by what they do (`_Log`, `_Events`, ...: the
    sections of this module); the state is all set here. Slots, not a
    dict: reading one is the quickest attribute read there is (the hot
    paths, `op_begin`, `op_event` and `_emit_to_log`, read several per
    span), and a name mistyped is an error, not a new attribute."""

    __slots__ = (
        "on", "dir", "prefix", "first", "status_dir", "run_id", "original", "itt_collect",
        "gc_spans", "itt", "collector_flush", "hook_on", "hook_frames", "hook_pre", "hook_post",
        "hook_pre_cap", "hook_post_cap", "hook_post_last", "hook_in", "role", "pid", "buf", "lock", "fd",
        "path", "mm", "mm_off", "write", "clock_at", "blocks", "end", "exiting", "last_flush", "child_setup",
        "failed", "notes_seen", "emit", "call_op", "ctx", "claimed", "owned", "owned_strong", "next_n",
        "callable_names", "gc_t0", "gc_c0", "gc_pending", "gc_pending_pid", "gc_dropped", "named_threads", "noted_children",
        "hooks_installed", "prev_handlers", "lotus", "lotus_fd", "frames", "ops", "loader", "finer",
        "patches",
    )

    def __init__(self, emit=None):
        # --- switches: `enable`'s arguments and the environment (`read_env`)
        self.on = False  # tracing is enabled in this process
        self.dir = None  # the trace folder
        self.prefix = "lotus"
        self.first = True  # the job's first traced process ($LOTUS_TRACE_PARENT unset)
        self.status_dir = None  # lotus's private folder for failure reports
        self.run_id = None  # the `lotus trace run` this process belongs to
        self.original = False  # write the original fork's three columns only
        self.itt_collect = False  # lotus's ITT collector writes the job's ITT tasks
        self.gc_spans = False  # collections as `gc` op spans ($LOTUS_TRACE_GC=1)
        self.itt = None  # marks ops as ITT tasks for a foreign collector (_itt.Tasks)
        self.collector_flush = None  # the ITT collector's lotus_itt_flush, once found loaded
        # --- `,hook=<ns>` on each op span (`op_event`): what the call's
        # wrapper cost its thread outside the span (see `calibrate_hooks`).
        # Off until measured.
        self.hook_on = False
        # Calibrated per process: the wrapper's frames, ns (the part no
        # clock read brackets), and the means (and bounds) of the two parts
        # read per span.
        self.hook_frames = 0
        self.hook_pre = 0
        self.hook_post = 0
        self.hook_pre_cap = 0
        self.hook_post_cap = 0
        # The last span's part after its end, measured (the next span's estimate).
        self.hook_post_last = 0
        # `,hook_in=<ns>`: the wrapper's cost inside the span (in its
        # `cpu=`), calibrated per process; "" until measured.
        self.hook_in = ""
        # --- the log (`_Log`)
        self.role = None  # "main" or "worker"; None means main
        self.pid = os.getpid()  # the process the log is for (a forked child reopens its own)
        self.buf = []  # lines not written yet, where the log is written in blocks
        self.lock = threading.Lock()
        self.fd = None
        self.path = None
        self.mm = None  # the mapping lines are copied into (None: none now)
        self.mm_off = 0  # where it starts in the file
        # Copies bytes into the log's mapping (its `write`: ValueError when
        # they do not fit, or once it is closed), or raises ValueError where
        # there is none. One C call, whole under the GIL: no lock needed
        # (`_emit_to_log`).
        self.write = _no_mapping
        self.clock_at = -1  # where the log ended after its last clock line
        self.blocks = False  # the log cannot be mapped: written in blocks from `buf`
        self.end = 0  # where the log's lines end, while it is not mapped
        self.exiting = False  # the log had its clean end at exit
        self.last_flush = 0
        self.child_setup = False  # a forked child that has not yet hooked its exit
        self.failed = False
        self.notes_seen = set()
        # Where the lines go: the log, or what a test gives.
        self.emit = self._emit_to_log if emit is None else emit
        self.call_op = _call_op_of(self)
        # --- per thread: what the running code belongs to
        self.ctx = _Ctx()
        # --- op names (`_Names`): every op name given out in this process
        # and what it names.
        self.claimed = {}  # name -> its owner (a weak reference where it takes one)
        self.owned = weakref.WeakKeyDictionary()  # owner -> its name, owners with weak references
        self.owned_strong = {}  # owner -> its name, owners without (tuples, method descriptors)
        self.next_n = {}  # qualified name -> n of its next `qualified#n`
        self.callable_names = {}  # cache: class, code object or builtin -> its name
        # --- garbage collection as a span (`_GcSpans`): the running
        # collection's start, (wall time, thread CPU time); 0: none.
        self.gc_t0 = 0
        self.gc_c0 = 0
        # Spans of collections that could not be copied to the log's
        # mapping at once (`_emit_from_gc`): written when the log is
        # created, at the next batch or consume event, or at a flush.
        self.gc_pending = []
        self.gc_pending_pid = self.pid  # the process they are of (`_hold_child_gc`)
        self.gc_dropped = 0  # spans past `_GC_PENDING_MAX`, said in a note with the others
        # --- threads and child processes
        self.named_threads = set()  # native ids of the threads named already (`name_threads`)
        self.noted_children = set()  # pids of children noted as ended by a signal
        # --- the process hooks (`_install_process_hooks`)
        self.hooks_installed = False
        self.prev_handlers = {}  # signal -> the program's handler before `_on_end_signal`
        self.lotus = None  # (pid, start time) of `lotus trace run`, from $LOTUS_TRACE_LOTUS
        self.lotus_fd = None  # a pidfd of lotus, kept across fork
        # --- the other modules' state, kept here so that one object holds
        # all of it (see each class)
        self.frames = _FramesState()
        self.ops = _OpsState()
        self.loader = _LoaderState()
        self.finer = _FinerState()
        self.patches = _PatchState()

    def read_env(self):
        """Reads the switches lotus sets in the environment (their names and
        meanings: `TRACER_ENV` in lotus-tracer/src/lib.rs) into this tracer."""
        # The job's first traced process has no traced process above it
        # (see _propagate): read before _propagate names this one for its
        # children.
        self.first = not os.environ.get("LOTUS_TRACE_PARENT")
        self.status_dir = os.environ.get("LOTUS_TRACE_STATUS") or None
        self.run_id = clean_name(os.environ["LOTUS_TRACE_RUN"]) if os.environ.get("LOTUS_TRACE_RUN") else None
        self.original = os.environ.get("LOTUS_TRACE_FORMAT") == "original"
        self.itt_collect = os.environ.get("LOTUS_TRACE_ITT") == "collect"
        # Opt-in: a job's collections are its own business, and on a forked
        # torch job the callback made the workers' batches slower (the loop of
        # fixtures/trace/torch_pipeline.py 1.2 s without it, 1.6 s with it).
        self.gc_spans = os.environ.get("LOTUS_TRACE_GC") == "1"

    def _install_process_hooks(self):
        if self.hooks_installed:
            return
        self.hooks_installed = True
        atexit.register(self._close_at_exit)
        os._exit = _exit_closing_of(self)
        self._install_signal_flush()
        self._start_lotus_watch()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(
                before=self._before_fork,
                after_in_parent=self._after_fork_parent,
                after_in_child=self._after_fork_child,
            )
        # A spawned child ends through sys.exit (atexit runs); a forked one
        # through os._exit, handled by _setup_child.
        self._hook_multiprocessing_exit()

    def enable(self, out_dir=None, prefix=None, torch=None):
        """Starts tracing this process (and the processes it starts) into
        `out_dir`: one file per process, `<prefix>_main_pid_<pid>` or
        `<prefix>_worker_pid_<pid>`. Defaults: $LOTUS_TRACE_DIR,
        $LOTUS_TRACE_PREFIX or "lotus", and the torch / torchvision hooks
        unless $LOTUS_TRACE_TORCH is 0. Returns the trace folder. A second call
        keeps the first call's folder."""
        if out_dir is None:
            out_dir = os.environ.get("LOTUS_TRACE_DIR")
            if not out_dir:
                raise ValueError("lotus_trace.enable: give the trace folder (or set LOTUS_TRACE_DIR)")
        if prefix is None:
            prefix = os.environ.get("LOTUS_TRACE_PREFIX") or "lotus"
        if torch is None:
            torch = os.environ.get("LOTUS_TRACE_TORCH", "1") != "0"
        out_dir = os.path.abspath(os.fspath(out_dir))
        if self.on:
            if out_dir != self.dir:
                sys.stderr.write(f"lotus_trace: already tracing into {self.dir}; enable({out_dir!r}) ignored\n")
            return self.dir
        prefix = clean_name(prefix)
        os.makedirs(out_dir, exist_ok=True)
        self.dir = out_dir
        self.prefix = prefix
        self.pid = self.gc_pending_pid = os.getpid()
        self.read_env()
        self._install_process_hooks()
        _propagate(out_dir, prefix, torch)
        from . import _itt as itt

        # Before the ITT collector is loaded: its tasks would see the calls.
        try:
            self.calibrate_hooks()
        except Exception as e:  # never break the job
            self.note(f"lotus's cost per wrapped call not measured: {type(e).__name__}: {e}")
        if itt.wanted():
            self.itt = itt.load()
            if self.itt is not None:
                # A foreign collector's task calls cost more than measured.
                self.hook_on = False
                self.hook_in = ""
        self._install_gc_spans()
        self.on = True
        from . import _frames

        _frames.start(self.note, self.first)
        from . import _torch

        _torch.install(torch)
        for name in ("multiprocessing.popen_fork", "multiprocessing.popen_forkserver"):
            _torch.add_hook(name, self._hook_popen)
        return self.dir

    def disable(self):
        """Stops tracing in this process and ends its log cleanly."""
        self._close()
        self.on = False


# The process's tracer, made once: `_after_fork_child` resets it in a forked
# child, which then writes its own log.
TRACER = Tracer()

# The package's functions: the process tracer's methods, bound once here.
enabled = TRACER.enabled
trace_dir = TRACER.trace_dir
enable = TRACER.enable
disable = TRACER.disable
flush = TRACER.flush
set_role = TRACER.set_role
note = TRACER.note
status_file = TRACER.status_file
op_begin = TRACER.op_begin
op_end_task = TRACER.op_end_task
op_event = TRACER.op_event
call_op = TRACER.call_op
task_of = TRACER.task_of
calibrate_hooks = TRACER.calibrate_hooks
claim_name = TRACER.claim_name
callable_name = TRACER.callable_name
code_name = TRACER.code_name
sample_call = TRACER.sample_call
wait_event = TRACER.wait_event
workers_event = TRACER.workers_event
config_event = TRACER.config_event
consume_event = TRACER.consume_event
usage_at = TRACER.usage_at
usage_start = TRACER.usage_start
usage_over = TRACER.usage_over
name_threads = TRACER.name_threads
