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

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

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

/// `__itt_domain` (ittnotify.h).
#[repr(C)]
struct IttDomain {
    flags: c_int,
    name_a: *const c_char,
    name_w: *mut c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut IttDomain,
}

/// `__itt_string_handle` (ittnotify.h).
#[repr(C)]
struct IttStringHandle {
    str_a: *const c_char,
    str_w: *mut c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut IttStringHandle,
}

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

/// `text` as it may stand in a log line: no commas, spaces or control
/// characters (each becomes `_`), `empty` when nothing is left (the
/// tracer's `clean_name`).
fn clean(text: &str, empty: &str) -> String {
    let out: String = text
        .chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let out = out.trim_matches('_');
    if out.is_empty() {
        empty.to_string()
    } else {
        out.to_string()
    }
}

// --- domains and names ------------------------------------------------------

/// An interned domain: the ITT struct first, so a pointer to the node is
/// a pointer to the struct the caller gets.
#[repr(C)]
struct DomainNode {
    itt: IttDomain,
    name: Box<CStr>,
    next: *mut DomainNode,
}

#[repr(C)]
struct HandleNode {
    itt: IttStringHandle,
    name: Box<CStr>,
    next: *mut HandleNode,
}

static DOMAINS: AtomicPtr<DomainNode> = AtomicPtr::new(ptr::null_mut());
static HANDLES: AtomicPtr<HandleNode> = AtomicPtr::new(ptr::null_mut());

/// A node of a lock-free, append-only list (ITT never frees domains or
/// string handles, so neither does this).
trait Interned: Sized {
    fn name(&self) -> &CStr;
    fn next(&self) -> *mut Self;
    fn set_next(&mut self, next: *mut Self);
    fn new(name: &CStr) -> Box<Self>;
}

impl Interned for DomainNode {
    fn name(&self) -> &CStr {
        &self.name
    }
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn new(name: &CStr) -> Box<Self> {
        let name: Box<CStr> = name.into();
        Box::new(DomainNode {
            itt: IttDomain {
                // Enabled: the static part skips task calls of a domain
                // whose flags are 0.
                flags: 1,
                name_a: name.as_ptr(),
                name_w: ptr::null_mut(),
                extra1: 0,
                extra2: ptr::null_mut(),
                next: ptr::null_mut(),
            },
            name,
            next: ptr::null_mut(),
        })
    }
}

impl Interned for HandleNode {
    fn name(&self) -> &CStr {
        &self.name
    }
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn new(name: &CStr) -> Box<Self> {
        let name: Box<CStr> = name.into();
        Box::new(HandleNode {
            itt: IttStringHandle {
                str_a: name.as_ptr(),
                str_w: ptr::null_mut(),
                extra1: 0,
                extra2: ptr::null_mut(),
                next: ptr::null_mut(),
            },
            name,
            next: ptr::null_mut(),
        })
    }
}

/// The node named `name` in `list`, added when missing: ITT hands out one
/// handle per name.
fn intern<T: Interned>(list: &AtomicPtr<T>, name: &CStr) -> *mut T {
    let find = |mut at: *mut T, until: *mut T| {
        while !at.is_null() && at != until {
            // SAFETY: nodes are leaked boxes, published fully built.
            let node = unsafe { &*at };
            if node.name() == name {
                return Some(at);
            }
            at = node.next();
        }
        None
    };
    let mut head = list.load(Ordering::Acquire);
    if let Some(found) = find(head, ptr::null_mut()) {
        return found;
    }
    let mut node = T::new(name);
    loop {
        node.set_next(head);
        let raw = Box::into_raw(node);
        match list.compare_exchange(head, raw, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return raw,
            Err(newer) => {
                // SAFETY: `raw` was not published; it is ours again.
                node = unsafe { Box::from_raw(raw) };
                // Only the nodes added since need a look.
                if let Some(found) = find(newer, head) {
                    return found;
                }
                head = newer;
            }
        }
    }
}

/// `__itt_domain_create`.
unsafe extern "C" fn domain_create(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: ITT passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    intern(&DOMAINS, name).cast()
}

/// `__itt_string_handle_create`.
unsafe extern "C" fn string_handle_create(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: ITT passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    intern(&HANDLES, name).cast()
}

// --- per-thread tasks -------------------------------------------------------

/// What names an open task.
#[derive(Clone, Copy)]
enum TaskName {
    Handle(*const IttStringHandle),
    Function(*const c_void),
}

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
        // SAFETY: plain system calls.
        let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
        self.tid = if tid == pid {
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

/// The task's name as it may stand in a line.
fn task_name(name: TaskName) -> String {
    match name {
        TaskName::Handle(h) if !h.is_null() => {
            // SAFETY: a string handle (ours or the static part's), whose
            // name is a NUL-terminated string that lives as long as it.
            let s = unsafe { (*h).str_a };
            if s.is_null() {
                return "task".into();
            }
            // SAFETY: as above.
            clean(&unsafe { CStr::from_ptr(s) }.to_string_lossy(), "task")
        }
        TaskName::Handle(_) => "task".into(),
        TaskName::Function(f) => function_name(f),
    }
}

/// The symbol at `f` (`__itt_task_begin_fn`), else its address.
fn function_name(f: *const c_void) -> String {
    // SAFETY: dladdr only reads the loader's tables; a zeroed Dl_info is a
    // valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(f, &mut info) } != 0 && !info.dli_sname.is_null() {
        // SAFETY: dladdr's symbol name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        return clean(&name, "task");
    }
    format!("fn_{:x}", f as usize)
}

fn domain_name(domain: *const IttDomain) -> String {
    if domain.is_null() {
        return "-".into();
    }
    // SAFETY: a domain (ours or the static part's) with a NUL-terminated
    // name that lives as long as it.
    let name = unsafe { (*domain).name_a };
    if name.is_null() {
        return "-".into();
    }
    // SAFETY: as above.
    clean(&unsafe { CStr::from_ptr(name) }.to_string_lossy(), "-")
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

// --- the process's log ------------------------------------------------------

/// The log: [`NOT_OPEN`], [`OPENING`], [`FAILED`] or its descriptor.
static LOG_FD: AtomicI32 = AtomicI32::new(NOT_OPEN);
const NOT_OPEN: i32 = -1;
const OPENING: i32 = -2;
const FAILED: i32 = -3;
/// Bumped in a forked child (see the module docs).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// `CLOCK_REALTIME` or `CLOCK_MONOTONIC` in ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock and out-parameter.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// (wall, monotonic) read back to back: the tightest of a few reads, the
/// monotonic time midway (the tracer's `clock_pair`).
fn clock_pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let m0 = clock_ns(libc::CLOCK_MONOTONIC);
        let w = wall_ns();
        let m1 = clock_ns(libc::CLOCK_MONOTONIC);
        let spread = m1.saturating_sub(m0);
        if spread < best.0 {
            best = (spread, w, m0 + spread / 2);
        }
    }
    (best.1, best.2)
}

fn clock_line() -> String {
    let (wall, mono) = clock_pair();
    format!("# lotus-trace: clock wall_ns={wall} monotonic_ns={mono}\n")
}

/// The tracer's header line, for this process.
fn header(rec: &Recording, role: &str, pid: i32) -> String {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| "-".into())
    };
    let mut host = [0u8; 256];
    // SAFETY: the buffer's length is passed.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|b| *b == 0).unwrap_or(host.len());
        clean(&String::from_utf8_lossy(&host[..end]), "-")
    } else {
        "-".into()
    };
    let (wall, mono) = clock_pair();
    format!(
        "#lotus-trace v1 role={role} pid={pid} host={host} rank={} local_rank={} world_size={} run={} wall_ns={wall} monotonic_ns={mono}\n# lotus-trace: ITT tasks received by lotus's collector\n",
        number("RANK"),
        number("LOCAL_RANK"),
        number("WORLD_SIZE"),
        rec.run
    )
}

/// Writes all of `data` to the O_APPEND log `fd`, or none of it: a write
/// cut short (a full file system, a file size limit) is taken back, so the
/// log only ever holds whole lines, which the reader then reads to the end.
fn write_whole(fd: i32, data: &[u8]) -> std::io::Result<()> {
    let mut written = 0;
    while written < data.len() {
        let rest = &data[written..];
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n >= 0 {
            written += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if written > 0 {
            // The offset is at the end of what this call wrote (O_APPEND);
            // once writes fail, no other thread's block can follow it.
            // SAFETY: plain system calls on our descriptor.
            unsafe {
                let end = libc::lseek(fd, 0, libc::SEEK_CUR);
                if end >= written as libc::off_t {
                    libc::ftruncate(fd, end - written as libc::off_t);
                }
            }
        }
        return Err(e);
    }
    Ok(())
}

/// Creates the log (O_EXCL|O_NOFOLLOW: never through a link, never onto a
/// file already there) and writes its header; returns its descriptor.
fn create_log(rec: &Recording) -> Result<i32, String> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: a plain system call.
    let pid = unsafe { libc::getpid() };
    let role = match std::env::var("LOTUS_TRACE_ROLE").as_deref() {
        Ok("worker") => "worker",
        _ => "main",
    };
    for n in 0..MAX_NAMES {
        let tag = if n == 0 {
            "itt".to_string()
        } else {
            format!("itt{n}")
        };
        let path = rec
            .dir
            .join(format!("{}.{tag}_{role}_pid_{pid}", rec.prefix));
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return Err(format!("{}: a NUL in the path", path.display()));
        };
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_APPEND
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EEXIST) | Some(libc::ELOOP) => continue,
                _ => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        if let Err(e) = write_whole(fd, header(rec, role, pid).as_bytes()) {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        return Ok(fd);
    }
    Err(format!(
        "{MAX_NAMES} names for the ITT task log of pid {pid} in {} are all taken",
        rec.dir.display()
    ))
}

/// Tells `lotus trace run` that this process's ITT tasks are incomplete
/// (the tracer's way: a file in its private status folder).
fn report_failure(rec: &Recording, message: &str) {
    let _ = writeln!(std::io::stderr(), "lotus ITT collector: {message}");
    let Some(status) = &rec.status else { return };
    // SAFETY: a plain system call.
    let pid = unsafe { libc::getpid() };
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(status.join(format!("failed_pid_{pid}.itt")))
        .and_then(|mut f| f.write_all(message.as_bytes()));
}

/// The log's descriptor, created at the first block; `None` once writing
/// failed in this process.
fn log_fd(rec: &Recording) -> Option<i32> {
    let started = wall_ns();
    loop {
        match LOG_FD.load(Ordering::Acquire) {
            FAILED => return None,
            NOT_OPEN => {
                if LOG_FD
                    .compare_exchange(NOT_OPEN, OPENING, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                return match create_log(rec) {
                    Ok(fd) => {
                        LOG_FD.store(fd, Ordering::Release);
                        Some(fd)
                    }
                    Err(message) => {
                        LOG_FD.store(FAILED, Ordering::Release);
                        report_failure(rec, &format!("{message}; ITT tasks are not traced"));
                        None
                    }
                };
            }
            OPENING => {
                if wall_ns().saturating_sub(started) > OPEN_WAIT_NS {
                    return None;
                }
                std::thread::yield_now();
            }
            fd => return Some(fd),
        }
    }
}

/// Writes one thread's block of lines, and a clock line after it.
fn write_block(lines: &[u8]) {
    let Some(rec) = recording() else { return };
    let Some(fd) = log_fd(rec) else { return };
    let mut block = Vec::with_capacity(lines.len() + 96);
    block.extend_from_slice(lines);
    block.extend_from_slice(clock_line().as_bytes());
    if let Err(e) = write_whole(fd, &block) {
        // The log's name, for the message: the descriptor's own link.
        let path =
            std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_else(|_| rec.dir.clone());
        if LOG_FD
            .compare_exchange(fd, FAILED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            report_failure(
                rec,
                &format!(
                    "cannot write the ITT task log {}: {e}; ITT tasks are traced no further in this process",
                    path.display()
                ),
            );
        }
    }
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

extern "C" fn forget_parent_log() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let fd = LOG_FD.swap(NOT_OPEN, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the parent's descriptor, copied into this child.
        unsafe { libc::close(fd) };
    }
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
    fn names_are_cleaned_like_the_tracers() {
        assert_eq!(clean("a,b c\td", "x"), "a_b_c_d");
        assert_eq!(clean(",,", "task"), "task");
        assert_eq!(clean("Résumé", "x"), "Résumé");
    }

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

    #[test]
    fn a_function_task_is_named_by_its_symbol() {
        assert_eq!(function_name(libc::getpid as *const c_void), "getpid");
        assert!(function_name(std::ptr::dangling::<c_void>()).starts_with("fn_"));
    }

    #[test]
    fn one_handle_per_name_from_many_threads() {
        let names: Vec<std::ffi::CString> = (0..20)
            .map(|i| std::ffi::CString::new(format!("name{i}")).unwrap())
            .collect();
        let got: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        names
                            .iter()
                            .map(|n| intern(&HANDLES, n) as usize)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.windows(2).all(|w| w[0] == w[1]));
        let mut distinct = got[0].clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len());
        // SAFETY: a node of the list.
        let node = unsafe { &*(got[0][3] as *const HandleNode) };
        assert_eq!(node.name(), names[3].as_c_str());
        // SAFETY: the ITT struct's name is the node's.
        assert_eq!(
            unsafe { CStr::from_ptr(node.itt.str_a) },
            names[3].as_c_str()
        );
    }
}
