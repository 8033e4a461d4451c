//! ITT tasks as trace spans: under `lotus trace run`, the collector
//! ([`super::itt_collector`]) also takes `__itt_domain_create`,
//! `__itt_string_handle_create`, `__itt_task_begin`, `__itt_task_begin_fn`
//! and `__itt_task_end`, so the tasks any instrumented library in the job
//! begins and ends (oneDNN, OpenVINO, a script's `ittapi.task`) become op
//! spans in the trace folder.
//!
//! # When
//!
//! Only when `lotus trace run` asked for it: `LOTUS_TRACE_ITT=collect`,
//! with `LOTUS_TRACE_DIR` and `LOTUS_TRACE_RUN` set (and not
//! `LOTUS_TRACE_FORMAT=original`, whose readers take no header). Otherwise
//! the collector leaves these entries alone and the static part's stubs
//! keep every task call a no-op: nothing is written.
//!
//! # The log
//!
//! One per process, `<DIR>/<prefix>.itt_<role>_pid_<pid>` (the role is the
//! tracer's, `LOTUS_TRACE_ROLE`, as it stands when the log is created),
//! created O_EXCL|O_NOFOLLOW like the tracer's logs (a name already taken,
//! by a file or a link, gives `<prefix>.itt<n>_...`), with the tracer's
//! header (role, pid, host, ranks, run id, a wall/monotonic clock pair) and
//! a clock line after each block, so the reader puts its spans on the same
//! time base. Each ended task is one line,
//! `S<name>,<start_ns>,<duration_ns>,kind=op,domain=<domain>[,tid=<tid>]`:
//! wall-clock ns like the tracer's, `tid=` where the thread is not the
//! process's main one. Nesting is in the times: a task ends the innermost
//! task open on its thread (ITT's rule for `__itt_task_end`), so an inner
//! span lies within its outer one.
//!
//! # Memory and writes
//!
//! Each thread keeps its open tasks (at most [`MAX_DEPTH`] deep; deeper
//! begins are counted and their ends matched, not recorded) and its ended
//! tasks' lines, written as one block (one `write(2)` to the O_APPEND file,
//! so blocks of threads never interleave) when [`BLOCK_BYTES`] are
//! buffered, when [`FLUSH_EVERY_NS`] passed since the thread's last write,
//! when the thread ends, for the thread that calls `exit` at exit, and
//! when the tracer writes its own log from the thread ([`lotus_itt_flush`]:
//! at the end of each batch in a DataLoader worker, and at a worker's
//! `_exit`, which runs no exit handler).
//! A process killed outright loses at most its last [`FLUSH_EVERY_NS`] of
//! ended tasks per thread; tasks still open are never written (they have
//! no end).
//!
//! # Fork
//!
//! A forked child (a DataLoader worker) starts with no log: an atfork
//! handler closes the parent's file in the child and bumps a generation
//! number, which makes the forking thread drop the parent's buffered lines
//! and open tasks at its next call. No lock is held across calls, so a fork
//! at any moment leaves the child nothing to wait for (domain and name
//! interning is lock-free).

mod log;
mod names;

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use log::{forget_parent_log, wall_ns, write_block, GENERATION};
use names::{
    clean, domain_create, domain_name, string_handle_create, task_name, IttDomain, TaskName,
};

/// Lines buffered per thread before they are written.
const BLOCK_BYTES: usize = 64 * 1024;
/// A thread writes its ended tasks at least this often (ns) while it ends
/// tasks, so a killed job leaves most of them.
const FLUSH_EVERY_NS: u64 = 100_000_000;
/// Open tasks kept per thread.
const MAX_DEPTH: usize = 256;
/// Log names tried before giving up (a name is taken by a file or a link).
const MAX_NAMES: u32 = 100;
/// How long a thread waits for another to finish creating the log (the
/// creation is a few system calls; this bounds a wait that should not
/// happen).
const OPEN_WAIT_NS: u64 = 2_000_000_000;

/// The environment `lotus trace run` sets for the collector.
pub(crate) const ENV_TRACE_ITT: &str = "LOTUS_TRACE_ITT";

/// `__itt_id`, passed by value (ignored: nesting is by thread).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IttId {
    d1: u64,
    d2: u64,
    d3: u64,
}

/// Where this process writes its tasks.
struct Recording {
    dir: std::path::PathBuf,
    prefix: String,
    run: String,
    status: Option<std::path::PathBuf>,
}

static RECORDING: OnceLock<Option<Recording>> = OnceLock::new();

/// The recording `lotus trace run` asked for, read once.
fn recording() -> Option<&'static Recording> {
    RECORDING
        .get_or_init(|| {
            let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
            if var(ENV_TRACE_ITT).as_deref() != Some("collect")
                || var("LOTUS_TRACE_FORMAT").as_deref() == Some("original")
            {
                return None;
            }
            Some(Recording {
                dir: var("LOTUS_TRACE_DIR")?.into(),
                prefix: clean(
                    var("LOTUS_TRACE_PREFIX").as_deref().unwrap_or("lotus"),
                    "lotus",
                ),
                run: clean(&var("LOTUS_TRACE_RUN")?, "-"),
                status: var("LOTUS_TRACE_STATUS").map(Into::into),
            })
        })
        .as_ref()
}

/// Whether this process records ITT tasks (the collector then provides
/// the task functions).
pub(crate) fn recording_tasks() -> bool {
    let on = recording().is_some();
    if on {
        install_process_hooks();
    }
    on
}

// --- per-thread tasks -------------------------------------------------------

struct Open {
    domain: *const IttDomain,
    name: TaskName,
    start_ns: u64,
}

/// One thread's open tasks and unwritten lines.
struct ThreadTasks {
    /// The process generation these belong to (see the module docs).
    generation: u64,
    /// `,tid=<id>`, or empty on the process's main thread.
    tid: String,
    open: Vec<Open>,
    /// Begins past [`MAX_DEPTH`] still to be ended.
    too_deep: usize,
    lines: Vec<u8>,
    last_write_ns: u64,
}

impl ThreadTasks {
    fn new() -> Self {
        ThreadTasks {
            generation: u64::MAX,
            tid: String::new(),
            open: Vec::new(),
            too_deep: 0,
            lines: Vec::new(),
            last_write_ns: 0,
        }
    }

    /// Resets what a fork left from the parent.
    fn for_this_process(&mut self) {
        let generation = GENERATION.load(Ordering::Acquire);
        if self.generation == generation {
            return;
        }
        self.generation = generation;
        self.open.clear();
        self.too_deep = 0;
        self.lines.clear();
        self.last_write_ns = 0;
        // SAFETY: plain system calls (gettid's, not glibc's wrapper of
        // 2.30: the library runs in jobs on glibc 2.17).
        let (tid, pid) = unsafe { (libc::syscall(libc::SYS_gettid), libc::getpid()) };
        self.tid = if tid == i64::from(pid) {
            String::new()
        } else {
            format!(",tid={tid}")
        };
    }

    fn begin(&mut self, domain: *const IttDomain, name: TaskName) {
        self.for_this_process();
        if self.open.len() >= MAX_DEPTH {
            self.too_deep += 1;
            return;
        }
        self.open.push(Open {
            domain,
            name,
            start_ns: wall_ns(),
        });
    }

    fn end(&mut self) {
        self.for_this_process();
        if self.too_deep > 0 {
            self.too_deep -= 1;
            return;
        }
        // An end with nothing open (a library's own imbalance) is ignored.
        let Some(task) = self.open.pop() else { return };
        let now = wall_ns();
        let _ = writeln!(
            self.lines,
            "S{},{},{},kind=op,domain={}{}",
            task_name(task.name),
            task.start_ns,
            now.saturating_sub(task.start_ns),
            domain_name(task.domain),
            self.tid
        );
        if self.lines.len() >= BLOCK_BYTES
            || now.saturating_sub(self.last_write_ns) >= FLUSH_EVERY_NS
        {
            self.write_out(now);
        }
    }

    fn write_out(&mut self, now: u64) {
        if self.lines.is_empty() || self.generation != GENERATION.load(Ordering::Acquire) {
            self.lines.clear();
            return;
        }
        write_block(&self.lines);
        self.lines.clear();
        self.last_write_ns = now;
    }
}

impl Drop for ThreadTasks {
    fn drop(&mut self) {
        self.write_out(wall_ns());
    }
}

thread_local! {
    static TASKS: RefCell<ThreadTasks> = RefCell::new(ThreadTasks::new());
}

/// Runs `f` on this thread's tasks (nothing during the thread's teardown,
/// or when called back from inside `f`).
fn with_tasks(f: impl FnOnce(&mut ThreadTasks)) {
    let _ = TASKS.try_with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            f(&mut t);
        }
    });
}

/// `__itt_task_begin`.
extern "C" fn task_begin(domain: *const c_void, _id: IttId, _parent: IttId, name: *const c_void) {
    with_tasks(|t| t.begin(domain.cast(), TaskName::Handle(name.cast())));
}

/// `__itt_task_begin_fn`.
extern "C" fn task_begin_fn(domain: *const c_void, _id: IttId, _parent: IttId, f: *const c_void) {
    with_tasks(|t| t.begin(domain.cast(), TaskName::Function(f)));
}

/// `__itt_task_end`.
extern "C" fn task_end(_domain: *const c_void) {
    with_tasks(ThreadTasks::end);
}

/// The function this module provides for an ITT API name.
pub(crate) fn provided(name: &[u8]) -> Option<*mut c_void> {
    type Create = unsafe extern "C" fn(*const c_char) -> *mut c_void;
    type Begin = extern "C" fn(*const c_void, IttId, IttId, *const c_void);
    let f: *mut c_void = match name {
        b"__itt_domain_create" => domain_create as Create as *mut c_void,
        b"__itt_string_handle_create" => string_handle_create as Create as *mut c_void,
        b"__itt_task_begin" => task_begin as Begin as *mut c_void,
        b"__itt_task_begin_fn" => task_begin_fn as Begin as *mut c_void,
        b"__itt_task_end" => task_end as extern "C" fn(*const c_void) as *mut c_void,
        _ => return None,
    };
    Some(f)
}

/// Writes the calling thread's ended tasks now ([`lotus_itt_flush`], and
/// at exit).
fn flush_this_thread() {
    with_tasks(|t| t.write_out(wall_ns()));
}

/// `lotus_itt_flush` (include/lotus.h): the tracer calls it whenever it
/// writes its own log, so a process that leaves through `_exit` (a
/// DataLoader worker) keeps its last ended tasks.
#[no_mangle]
pub extern "C" fn lotus_itt_flush() {
    let _ = std::panic::catch_unwind(flush_this_thread);
}

extern "C" fn flush_at_exit() {
    flush_this_thread();
}

/// The fork and exit hooks, once per process.
fn install_process_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: both handlers only touch atomics, close(2) and this
        // thread's own buffer.
        unsafe {
            libc::pthread_atfork(None, None, Some(forget_parent_log));
            libc::atexit(flush_at_exit);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_nest_by_thread_and_past_the_depth_limit_only_match() {
        let mut t = ThreadTasks::new();
        t.for_this_process();
        // Nothing is written while the test looks at the lines.
        t.last_write_ns = u64::MAX;
        // SAFETY: NUL-terminated names.
        let (d, h) = unsafe {
            (
                domain_create(c"my dom".as_ptr()),
                string_handle_create(c"a,b".as_ptr()),
            )
        };
        let deep = MAX_DEPTH + 3;
        for _ in 0..deep {
            t.begin(d.cast(), TaskName::Handle(h.cast()));
        }
        for _ in 0..deep {
            t.end();
        }
        t.end(); // an end with nothing open is ignored
        let text = String::from_utf8(std::mem::take(&mut t.lines)).unwrap();
        let spans: Vec<(u64, u64)> = text
            .lines()
            .map(|l| {
                assert!(l.starts_with("Sa_b,"), "{l}");
                assert!(l.contains(",kind=op,domain=my_dom"), "{l}");
                let f: Vec<&str> = l.split(',').collect();
                let start: u64 = f[1].parse().unwrap();
                (start, start + f[2].parse::<u64>().unwrap())
            })
            .collect();
        assert_eq!(spans.len(), MAX_DEPTH);
        // Innermost first: each later span holds the one before.
        assert!(spans
            .windows(2)
            .all(|w| w[1].0 <= w[0].0 && w[1].1 >= w[0].1));
        assert!(t.open.is_empty() && t.too_deep == 0);
    }
}
