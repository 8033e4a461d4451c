//! Python frames in the call stacks of sampled processes, read from the
//! interpreter's own frame state: of Pythons without perf trampolines
//! (CPython 3.8 to 3.11) in `lotus trace run --sample`, and of every
//! Python where the process did not turn trampolines on (a job lotus
//! attached to, `lotus map --stacks`, `lotus profile --stacks`).
//!
//! Its own crate (it was a module of `lotus-runner` until 2026-11-29) so
//! that every sampler of Python can use it: the trace runner, and the
//! mapping engine (`lotus-map`), which may not depend on the runner.
//!
//! On 3.12+ the tracer turns on CPython's perf trampolines, and each
//! Python frame is a native frame named through the process's perf map
//! (`py::qualname`): the better source, exact at each sample. Older
//! Pythons have none, and their samples show the interpreter's eval loop
//! only. For them a thread beside the sampler ([`PyFrames`]) reads each
//! busy Python process's thread states and frame chains with py-spy's
//! reader (the `py-spy` crate as a library, its command line left out):
//! it knows the layout of every CPython from 2.7 to 3.15, reads without
//! stopping the process (`process_vm_readv`, no ptrace stop), and is kept
//! up to date for new versions by its project, which a hand-written
//! reader of those private structures would not be. A sample's Python
//! frames are those of the snapshot of its thread nearest in time (within
//! [`MATCH_WINDOW_NS`], or of the same shape within [`WIDE_WINDOW_NS`]),
//! before or after it: the sink holds each block of samples back until a
//! round of snapshots began after it (`HOLD_NS` at most), as the nearest
//! snapshot is often the next one. Read within a few ms of the sample,
//! not at it (perf_event cannot run code at a sample; eBPF profilers can),
//! which is close enough for spans of a millisecond and more, not for a
//! leaf function that runs for less. The job's first process is read from
//! its start when its program is named `python...`: its first op's
//! samples have their frames too.
//!
//! The frames are spliced into the native stack where the interpreter ran
//! them, as the trampolines would have put them: each group of Python
//! frames one C-level eval call runs (py-spy marks the first of each:
//! `is_entry`) goes just before that call's `_PyEval_EvalFrameDefault`
//! frame, innermost group with innermost eval frame; named `py::qualname`
//! (3.11) or `py::name` (3.8 to 3.10, which have no qualified names) with
//! the file as module, so that everything that reads stacks reads them as
//! the trampolines' ([`PySink`]).
//!
//! Costs: one snapshot of a process is some hundred microseconds of this
//! thread's CPU (a read per frame and per name), so only processes known
//! to run Python (their samples showed the eval loop, or they are forks of
//! one) are read, while they run, at most [`MAX_POLL_HZ`] times a second
//! each: 9% of the job's CPU on the README's torchvision example (at 200
//! a second it was 30%).

//!
//! ```no_run
//! use lotus_pyframes::PyFrames;
//! use lotus_samples::NoSink;
//!
//! // Every Python read (3.12+ too), at most 50 snapshots a second a process.
//! let frames = PyFrames::start(1000, true)?;
//! // The sampler writes to this sink; its samples of Python processes
//! // reach `NoSink` with their Python frames spliced into their stacks.
//! let _sink = frames.sink(NoSink);
//! let report = frames.finish();
//! println!("{} samples given Python frames", report.given);
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(missing_docs)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use lotus_samples::{Sample, SampleSink, StackNode, Symbol};

/// How often a busy Python process is read, at most.
pub const MAX_POLL_HZ: u64 = 50;

/// How far in time a thread's snapshot may be from a sample to give it its
/// Python frames.
pub const MATCH_WINDOW_NS: u64 = 60_000_000;

/// How long snapshots are kept per thread before the oldest sample the
/// sink still holds (a sample not yet read from the kernel's buffers may
/// be a little older than those read).
const KEEP_NS: u64 = 400_000_000;

/// How many snapshots a thread keeps at most (30 s at [`MAX_POLL_HZ`]):
/// memory stays bounded where the sink falls that far behind.
const MAX_KEPT: usize = 1_500;

/// A process is read while a sample showed it running Python this
/// recently.
const BUSY_NS: u64 = 200_000_000;

/// How many times (one per poll) a process whose interpreter cannot be
/// found yet (still starting) is tried before it is given up.
const TRIES: u32 = 100;

/// How often the job's processes are looked for (a forked DataLoader
/// worker runs its first op at once).
const SCAN_NS: u64 = 10_000_000;

/// How many times a snapshot is tried at once before that poll gives it up.
const READ_TRIES: u32 = 4;

/// How long the sink holds a block of samples back at most, waiting for
/// a snapshot taken after it (the reading thread was kept off a busy CPU).
const HOLD_NS: u64 = 1_000_000_000;

/// `pid` and its descendants, each with its parent (0 for `pid`), from
/// the kernel's children lists (`/proc/PID/task/TID/children`); none for 0.
fn descendants(pid: u32) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut todo = vec![(pid, 0)];
    while let Some((p, parent)) = todo.pop() {
        if p == 0 || out.iter().any(|&(q, _)| q == p) || out.len() >= 4096 {
            continue;
        }
        out.push((p, parent));
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                todo.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok())
                        .map(|c| (c, p)),
                );
            }
        }
    }
    out
}

/// The program `pid` runs (`/proc/PID/exe`).
fn program(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Whether `pid`'s program is named `python...` (`python3.11`, say).
fn runs_python(pid: u32) -> bool {
    program(pid)
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("python"))
        })
        .unwrap_or(false)
}

/// Where glibc keeps the kernel's thread id in its thread descriptor (what
/// a `pthread_t` points at on Linux), found once in this process: the
/// offset, in a new thread's descriptor, of the first 32-bit word equal to
/// its thread id. Hand-written: py-spy finds the native id of a thread of
/// Python 3.8 to 3.10 only with libunwind (its `unwind` feature, which
/// lotus does not build); the job's processes run on this machine's glibc.
fn pthread_tid_offset() -> Option<usize> {
    static OFFSET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::thread::spawn(|| {
            // SAFETY: plain calls; the reads stay within this thread's own
            // descriptor (some 2 KiB from its start), which is mapped.
            unsafe {
                let me = libc::pthread_self() as *const u8;
                let tid = libc::syscall(libc::SYS_gettid) as i32;
                (0..1024)
                    .step_by(4)
                    .find(|&off| std::ptr::read_unaligned(me.add(off).cast::<i32>()) == tid)
            }
        })
        .join()
        .ok()
        .flatten()
    })
}

/// The kernel's id of the thread of process `pid` whose `pthread_t` is
/// `thread`, read from the process's memory.
fn native_tid(pid: u32, thread: u64) -> Option<u32> {
    let off = pthread_tid_offset()?;
    let mut tid: i32 = 0;
    let local = libc::iovec {
        iov_base: (&mut tid as *mut i32).cast(),
        iov_len: 4,
    };
    let remote = libc::iovec {
        iov_base: (thread as usize).checked_add(off)? as *mut libc::c_void,
        iov_len: 4,
    };
    // SAFETY: reads 4 bytes of another process into `tid`.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == 4 && tid > 0).then_some(tid as u32)
}

/// `frames` (outermost first) in groups, one per C-level eval call: each
/// starts at an entry frame (every frame, before 3.11).
fn groups(frames: &[PyFrame]) -> Vec<&[PyFrame]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..frames.len() {
        if frames[i].entry {
            out.push(&frames[start..i]);
            start = i;
        }
    }
    if start < frames.len() {
        out.push(&frames[start..]);
    }
    out
}

/// How far a snapshot of the same shape may be from a sample (see
/// `PySink::python_frames`).
pub const WIDE_WINDOW_NS: u64 = 120_000_000;

/// The interpreter's eval loop, the native frame that runs Python frames.
const EVAL_FRAME: &str = "_PyEval_EvalFrameDefault";

/// One Python frame: its name (`py::...`), its file, and whether it is
/// the first its C-level eval call runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PyFrame {
    name: Arc<str>,
    file: Arc<str>,
    entry: bool,
}

/// A thread's Python frames at a time, outermost first.
#[derive(Debug, Clone)]
struct Snapshot {
    time_ns: u64,
    /// Its number, one for each snapshot taken: the sink's splices are
    /// kept by it.
    serial: u64,
    frames: Arc<[PyFrame]>,
}

/// What the reading thread and the sink share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// The job's first process (0: not started yet): it and its
    /// descendants are read.
    root: std::sync::atomic::AtomicU32,
    /// Processes whose samples show Python running: the last such time.
    busy: Mutex<HashMap<u32, u64>>,
    /// Each thread's recent snapshots, oldest first.
    snapshots: Mutex<HashMap<u32, VecDeque<Snapshot>>>,
    /// Processes read, and why others could not be: for the notes.
    read: Mutex<HashSet<u32>>,
    refused: Mutex<HashMap<u32, String>>,
    /// Samples given Python frames.
    given: AtomicU64,
    /// Samples that ran the eval loop and got no Python frames (no
    /// snapshot of their thread near them).
    missed: AtomicU64,
    /// When the last whole round of snapshots began: every sample taken
    /// before it has a snapshot of its process's threads after it.
    round: AtomicU64,
    /// The time of the oldest sample the sink still holds, or of the
    /// newest it passed on when it holds none (0: none yet): snapshots
    /// more than [`KEEP_NS`] before it are dropped. Not the newest
    /// snapshot's time: under load the sink reads samples up to a second
    /// late, and their snapshots must still be there.
    needed: AtomicU64,
    /// Snapshots taken, and the reading thread's CPU time for them (ns).
    reads: AtomicU64,
    read_cpu_ns: AtomicU64,
    /// Reads that failed (the frames caught mid-change, or gone).
    failed: AtomicU64,
}

/// The thread that reads busy Python processes' frames while a sampled
/// job runs; ends with [`PyFrames::finish`] (or when dropped).
pub struct PyFrames {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What [`PyFrames::finish`] says for `<prefix>.sampling` and the user.
#[derive(Debug, Default)]
pub struct PyFramesReport {
    /// Samples given Python frames.
    pub given: u64,
    /// Samples that ran the eval loop and got none.
    pub missed: u64,
    /// Snapshots taken, and the reading thread's CPU time for them (ns).
    pub reads: u64,
    /// See [`PyFramesReport::reads`].
    pub read_cpu_ns: u64,
    /// Reads that failed (see [`PyFramesReport::reads`]).
    pub failed: u64,
    /// Processes whose frames were read.
    pub processes: usize,
    /// The first process that could not be read and why, and how many.
    pub refused: Option<(String, usize)>,
}

impl PyFramesReport {
    /// What the user is told: the processes whose frames could not be
    /// read, and samples that ran Python but got none where they are more
    /// than one in twenty.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some((first, n)) = &self.refused {
            notes.push(format!(
                "the Python frames of {n} process(es) could not be read ({first}): their samples show native frames only"
            ));
        }
        let ran = self.given + self.missed;
        if self.given > 0 && self.missed * 20 > ran {
            notes.push(format!(
                "{} of the {ran} samples that ran Python have no Python frames (no snapshot of their thread within {} ms: the frames' reader was kept off a busy CPU); they show the interpreter's own frames",
                self.missed,
                WIDE_WINDOW_NS / 1_000_000
            ));
        }
        notes
    }
}

impl PyFrames {
    /// Starts the reading thread, at most `frequency_hz` reads a second a
    /// process ([`MAX_POLL_HZ`] at most).
    /// With `every_version`, Pythons with trampolines (3.12+) are read
    /// too: a job lotus attached to, started without them on.
    pub fn start(frequency_hz: u64, every_version: bool) -> io::Result<PyFrames> {
        let shared = Arc::new(Shared::default());
        let hz = frequency_hz.clamp(1, MAX_POLL_HZ);
        let period = Duration::from_nanos(1_000_000_000 / hz);
        let reader = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("lotus-pyframes".into())
            .spawn(move || read_loop(&reader, period, every_version))?;
        Ok(PyFrames {
            shared,
            thread: Some(thread),
        })
    }

    /// The sink that gives `inner`'s samples their Python frames.
    pub fn sink<S: SampleSink>(&self, inner: S) -> PySink<S> {
        sink_of(&self.shared, inner)
    }

    /// What makes [`PyFrames::sink`]s of this reading thread, for a
    /// sampler that makes its sink itself (`lotus_core::StackLayer`: the
    /// mapping engine's folded stacks); it may outlive this handle, not
    /// the reading.
    pub fn layer(
        &self,
    ) -> impl Fn(Box<dyn SampleSink>) -> Box<dyn SampleSink> + Send + Sync + 'static {
        let shared = Arc::clone(&self.shared);
        move |inner| Box::new(sink_of(&shared, inner))
    }

    /// Reads the Python processes of the job whose first process is `pid`
    /// (it and all its descendants, those started later included).
    pub fn watch(&self, pid: u32) {
        self.shared.root.store(pid, Ordering::SeqCst);
    }

    /// Stops the reading thread; what it did.
    pub fn finish(mut self) -> PyFramesReport {
        self.stop();
        let lock = |m: &Mutex<HashMap<u32, String>>| {
            let m = m.lock().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<(u32, String)> = m.iter().map(|(k, v)| (*k, v.clone())).collect();
            v.sort();
            v
        };
        let refused = lock(&self.shared.refused);
        PyFramesReport {
            given: self.shared.given.load(Ordering::Relaxed),
            missed: self.shared.missed.load(Ordering::Relaxed),
            reads: self.shared.reads.load(Ordering::Relaxed),
            read_cpu_ns: self.shared.read_cpu_ns.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
            processes: self
                .shared
                .read
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
            refused: refused
                .first()
                .map(|(pid, why)| (format!("process {pid}: {why}"), refused.len())),
        }
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A [`PySink`] of `inner` for the reading thread that shares `shared`.
fn sink_of<S: SampleSink>(shared: &Arc<Shared>, inner: S) -> PySink<S> {
    PySink {
        inner,
        shared: Arc::clone(shared),
        eval_symbols: HashSet::new(),
        python_symbols: HashSet::new(),
        nodes: HashMap::new(),
        symbol_ids: HashMap::new(),
        stack_ids: HashMap::new(),
        py_symbols: HashMap::new(),
        spliced: HashMap::new(),
        next_symbol: 1,
        next_stack: 1,
        new_symbols: Vec::new(),
        new_stacks: Vec::new(),
        pending: VecDeque::new(),
        released_ns: 0,
        evals_of: HashMap::new(),
        splices: HashMap::new(),
    }
}

impl Drop for PyFrames {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A process as the reading thread knows it.
enum Reader {
    /// Its interpreter found: py-spy's reader.
    Reading(Box<py_spy::PythonSpy>),
    /// Not found yet (the process is starting): tries so far.
    Trying(u32),
    /// Not to be read: a Python with trampolines, no Python, gone.
    Done,
}

/// A frame py-spy read: its qualified name, file and first line.
type FrameKey = (String, String, i32);

/// The reading thread: every `period`, a snapshot of each busy Python
/// process's threads.
fn read_loop(shared: &Shared, period: Duration, every_version: bool) {
    // Ahead of ordinary threads, as the sampler's drain: a snapshot taken
    // late is one no sample is near.
    lotus_sys::process::raise_thread_priority();
    let mut config = py_spy::Config::default();
    config.blocking = py_spy::config::LockingStrategy::NonBlocking;
    config.collect_thread_names = false;
    config.include_idle = true;
    // The line each function begins on (its `def`): one name a function,
    // whatever line of it ran (`LineNo::LastInstruction` would make a
    // frame of each line, and split each function's samples).
    config.lineno = py_spy::config::LineNo::First;
    let mut readers: HashMap<u32, Reader> = HashMap::new();
    // By (qualname, file, first line): each frame's name and module.
    let mut names: HashMap<FrameKey, (Arc<str>, Arc<str>)> = HashMap::new();
    // Each process of the job: its CPU ticks when last looked at, and
    // when they last moved.
    let mut activity: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut python: HashSet<u32> = HashSet::new();
    let mut last_scan = 0;
    let mut serial = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let started = std::time::Instant::now();
        let now = lotus_sys::clock_ns(libc::CLOCK_MONOTONIC);
        if now.saturating_sub(last_scan) >= SCAN_NS {
            last_scan = now;
            for (pid, parent) in descendants(shared.root.load(Ordering::SeqCst)) {
                activity.entry(pid).or_insert((u64::MAX, now));
                // The job's first process, when it runs a program named
                // python: read from its start, before its samples say so.
                if parent == 0 && !python.contains(&pid) && runs_python(pid) {
                    python.insert(pid);
                }
                // A Python process's fork runs Python at once: it is read
                // before its own samples say so.
                if !python.contains(&pid)
                    && python.contains(&parent)
                    && program(pid).is_some_and(|p| program(parent) == Some(p))
                {
                    python.insert(pid);
                }
            }
        }
        // A process is read while it runs (its CPU time moves), and while
        // its samples show Python running.
        let sampled = shared
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Only processes known to run Python are read (trying py-spy's
        // reader on another program costs milliseconds a try): those whose
        // samples showed the interpreter's eval loop, and their forks.
        python.extend(sampled.keys().copied());
        let mut busy = Vec::new();
        activity.retain(|&pid, (cpu, active)| {
            let Some(now_cpu) = lotus_sys::process::cpu_ticks(pid) else {
                return false;
            };
            if now_cpu != *cpu {
                *cpu = now_cpu;
                *active = now;
            }
            let recent = sampled
                .get(&pid)
                .is_some_and(|&t| now.saturating_sub(t) < BUSY_NS);
            if python.contains(&pid) && (recent || now.saturating_sub(*active) < BUSY_NS) {
                busy.push(pid);
            }
            true
        });
        for pid in busy {
            let reader = readers.entry(pid).or_insert(Reader::Trying(0));
            if let Reader::Trying(n) = reader {
                *reader = match py_spy::PythonSpy::new(pid as py_spy::Pid, &config) {
                    Ok(spy)
                        if !every_version && spy.version.major == 3 && spy.version.minor >= 12 =>
                    {
                        Reader::Done
                    }
                    Ok(spy) => {
                        shared
                            .read
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(pid);
                        Reader::Reading(Box::new(spy))
                    }
                    Err(e) if *n + 1 >= TRIES => {
                        shared
                            .refused
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(pid, format!("{e:#}"));
                        Reader::Done
                    }
                    Err(_) => Reader::Trying(*n + 1),
                };
            }
            let Reader::Reading(spy) = reader else {
                continue;
            };
            // A read that caught the frames mid-change fails; it is tried
            // again at once (a few times): skipping it would leave the
            // samples of quickly changing code (a transform's calls) to
            // snapshots of the steadier code around them.
            let mut tries = 0;
            let (before, traces) = loop {
                let before = lotus_sys::clock_ns(libc::CLOCK_MONOTONIC);
                let cpu = lotus_sys::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
                let traces = spy.get_stack_traces();
                shared.reads.fetch_add(1, Ordering::Relaxed);
                shared.read_cpu_ns.fetch_add(
                    lotus_sys::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu),
                    Ordering::Relaxed,
                );
                tries += 1;
                if traces.is_ok() || tries >= READ_TRIES {
                    break (before, traces);
                }
                shared.failed.fetch_add(1, Ordering::Relaxed);
            };
            let Ok(traces) = traces else {
                shared.failed.fetch_add(1, Ordering::Relaxed);
                // Gone, or caught mid-change: the next poll says.
                if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                    *reader = Reader::Done;
                }
                continue;
            };
            let time_ns = before;
            let mut snapshots = shared.snapshots.lock().unwrap_or_else(|e| e.into_inner());
            for t in traces {
                // py-spy names the thread on 3.11+; before, from the
                // thread's `pthread_t` (see `native_tid`).
                let tid = t
                    .os_thread_id
                    .and_then(|t| u32::try_from(t).ok())
                    .or_else(|| native_tid(pid, t.thread_id));
                let Some(tid) = tid else {
                    continue;
                };
                // py-spy gives the innermost first.
                let frames: Arc<[PyFrame]> = t
                    .frames
                    .iter()
                    .rev()
                    .map(|f| {
                        let (name, file) = names
                            .entry((f.name.clone(), f.filename.clone(), f.line))
                            .or_insert_with(|| {
                                // `file:line` where py-spy read the line
                                // (`Symbol::py_file_line` splits it).
                                let file = match f.line {
                                    line if line > 0 => format!("{}:{line}", f.filename),
                                    _ => f.filename.clone(),
                                };
                                (format!("py::{}", f.name).into(), file.into())
                            })
                            .clone();
                        PyFrame {
                            name,
                            file,
                            entry: f.is_entry,
                        }
                    })
                    .collect();
                let kept = snapshots.entry(tid).or_default();
                keep(kept, shared.needed.load(Ordering::SeqCst));
                serial += 1;
                kept.push_back(Snapshot {
                    time_ns,
                    serial,
                    frames,
                });
            }
        }
        shared.round.store(now, Ordering::SeqCst);
        // The names cache is bounded: emptied when large.
        if names.len() > 65_536 {
            names.clear();
        }
        if let Some(rest) = period.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

/// Drops a thread's snapshots that no sample still to come can take:
/// those [`KEEP_NS`] before `needed` (see [`Shared::needed`]), and the
/// oldest past [`MAX_KEPT`], leaving room for one more.
fn keep(kept: &mut VecDeque<Snapshot>, needed: u64) {
    while kept
        .front()
        .is_some_and(|s| needed.saturating_sub(s.time_ns) > KEEP_NS || kept.len() >= MAX_KEPT)
    {
        kept.pop_front();
    }
}

/// A sample sink that gives each sample of a Python thread its Python
/// frames (see the module documentation) and passes everything on to
/// `inner`, renumbered: the symbols and stacks of the sampler and this
/// sink's own share one count of ids from 1 (readers hold ids to what
/// the file's size allows).
pub struct PySink<S> {
    inner: S,
    shared: Arc<Shared>,
    /// The sampler's symbols of the eval loop, and of Python frames (a
    /// stack that holds one has its Python frames already).
    eval_symbols: HashSet<u32>,
    python_symbols: HashSet<u32>,
    /// The sampler's stacks: id -> (parent, symbol), in its ids.
    nodes: HashMap<u32, (u32, u32)>,
    /// The sampler's symbol and stack ids -> the ones written.
    symbol_ids: HashMap<u32, u32>,
    stack_ids: HashMap<u32, u32>,
    /// This sink's symbols of Python frames (ids written).
    py_symbols: HashMap<(Arc<str>, Arc<str>), u32>,
    /// The stacks written: (parent, symbol) -> id, in ids written.
    spliced: HashMap<(u32, u32), u32>,
    next_symbol: u32,
    next_stack: u32,
    new_symbols: Vec<(u32, Symbol)>,
    new_stacks: Vec<StackNode>,
    /// Blocks of samples (with their stacks) held back until a snapshot
    /// after them is taken, oldest first (see [`PySink::release`]).
    pending: VecDeque<(Vec<Sample>, Vec<u32>)>,
    /// The newest sample passed on.
    released_ns: u64,
    /// By sampler stack: its eval frames (0: passed on as it is).
    evals_of: HashMap<u32, usize>,
    /// By sampler stack and snapshot: the stack written.
    splices: HashMap<(u32, u64), u32>,
}

impl<S: SampleSink> PySink<S> {
    /// `stack`'s frames, outermost first (symbol ids).
    /// `None` where a stack of the chain has not come yet (the sampler
    /// may send a block of samples before the stacks they use).
    fn frames(&self, mut stack: u32) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        while stack != 0 && out.len() < 4096 {
            let &(parent, symbol) = self.nodes.get(&stack)?;
            out.push(symbol);
            stack = parent;
        }
        out.reverse();
        Some(out)
    }

    /// The id written for the sampler's stack `id`, given on first sight
    /// (its line is written when its node comes); 0 for 0.
    fn stack_id(&mut self, id: u32) -> u32 {
        if id == 0 {
            return 0;
        }
        if let Some(&out) = self.stack_ids.get(&id) {
            return out;
        }
        let out = self.next_stack;
        self.next_stack += 1;
        self.stack_ids.insert(id, out);
        out
    }

    /// The stack `symbol` called from stack `parent` (ids written).
    fn node(&mut self, parent: u32, symbol: u32) -> u32 {
        if let Some(&id) = self.spliced.get(&(parent, symbol)) {
            return id;
        }
        let id = self.next_stack;
        self.next_stack += 1;
        self.spliced.insert((parent, symbol), id);
        self.new_stacks.push(StackNode::new(id, parent, symbol));
        id
    }

    /// The id written for the sampler's symbol `id`.
    fn symbol_id(&mut self, id: u32) -> u32 {
        if id == 0 {
            return 0;
        }
        if let Some(&out) = self.symbol_ids.get(&id) {
            return out;
        }
        let out = self.next_symbol;
        self.next_symbol += 1;
        self.symbol_ids.insert(id, out);
        out
    }

    /// The stack of `frames` (outermost first, ids written).
    fn intern(&mut self, frames: &[u32]) -> u32 {
        frames
            .iter()
            .fold(0, |parent, &symbol| self.node(parent, symbol))
    }

    fn py_symbol(&mut self, f: &PyFrame) -> u32 {
        if let Some(&id) = self.py_symbols.get(&(f.name.clone(), f.file.clone())) {
            return id;
        }
        let id = self.next_symbol;
        self.next_symbol += 1;
        self.py_symbols.insert((f.name.clone(), f.file.clone()), id);
        self.new_symbols.push((id, Symbol::new(&f.name, &f.file)));
        id
    }

    /// The Python frames of `tid` nearest `time_ns`, within the window.
    /// Past [`MATCH_WINDOW_NS`] (the reading thread was kept off a busy
    /// CPU), up to [`WIDE_WINDOW_NS`], the nearest whose calls from C
    /// (its groups) are as many as the sample's eval frames (`evals`):
    /// the same shape of call, most likely the same calls.
    fn python_frames(&self, tid: u32, time_ns: u64, evals: usize) -> Option<(u64, Arc<[PyFrame]>)> {
        let snapshots = self
            .shared
            .snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A thread's snapshots are in time order: those in the window are
        // found by bisection (a thread keeps up to `MAX_KEPT`).
        let kept = snapshots.get(&tid)?;
        let from = kept.partition_point(|s| s.time_ns < time_ns.saturating_sub(WIDE_WINDOW_NS));
        let mut near: Vec<&Snapshot> = kept
            .range(from..)
            .take_while(|s| s.time_ns <= time_ns.saturating_add(WIDE_WINDOW_NS))
            .filter(|s| !s.frames.is_empty())
            .collect();
        near.sort_by_key(|s| s.time_ns.abs_diff(time_ns));
        near.into_iter()
            .find(|s| {
                s.time_ns.abs_diff(time_ns) <= MATCH_WINDOW_NS || groups(&s.frames).len() == evals
            })
            .map(|s| (s.serial, Arc::clone(&s.frames)))
    }

    /// `stack` with the Python frames of `sample`'s thread spliced in;
    /// `stack` itself where it has no eval frame, has Python frames
    /// already, or no snapshot is near.
    fn spliced_stack(&mut self, sample: &Sample, stack: u32) -> u32 {
        let as_is = self.stack_id(stack);
        // The sink runs on the sampler's drain thread, which must keep up
        // with the kernel's buffers: what a stack needs and each splice
        // made are kept (a hot loop's samples share both), not made again
        // for every sample.
        let evals = match self.evals_of.get(&stack) {
            Some(&n) => n,
            None => {
                let n = self.frames(stack).map_or(0, |frames| {
                    if frames.iter().any(|s| self.python_symbols.contains(s)) {
                        0
                    } else {
                        frames
                            .iter()
                            .filter(|s| self.eval_symbols.contains(s))
                            .count()
                    }
                });
                if self.nodes.contains_key(&stack) {
                    self.evals_of.insert(stack, n);
                }
                n
            }
        };
        if evals == 0 {
            return as_is;
        }
        let Some((serial, py)) = self.python_frames(sample.tid, sample.time_ns, evals) else {
            self.shared.missed.fetch_add(1, Ordering::Relaxed);
            return as_is;
        };
        self.shared.given.fetch_add(1, Ordering::Relaxed);
        if let Some(&id) = self.splices.get(&(stack, serial)) {
            return id;
        }
        // Bounded: emptied when large.
        if self.splices.len() > 65_536 {
            self.splices.clear();
        }
        let Some(frames) = self.frames(stack) else {
            return as_is;
        };
        let evals: Vec<usize> = (0..frames.len())
            .filter(|&i| self.eval_symbols.contains(&frames[i]))
            .collect();
        let groups = groups(&py);
        // Innermost group with innermost eval frame; extra groups before
        // the outermost eval frame.
        let mut before: HashMap<usize, Vec<PyFrame>> = HashMap::new();
        let pairs = groups.len().min(evals.len());
        for k in 0..pairs {
            let g = groups[groups.len() - 1 - k];
            before.insert(evals[evals.len() - 1 - k], g.to_vec());
        }
        let extra: Vec<PyFrame> = groups[..groups.len() - pairs]
            .iter()
            .flat_map(|g| g.iter().cloned())
            .collect();
        let outermost = evals[evals.len() - pairs.max(1)];
        before.entry(outermost).or_default().splice(0..0, extra);
        let mut out = Vec::with_capacity(frames.len() + py.len());
        for (i, &symbol) in frames.iter().enumerate() {
            if let Some(group) = before.get(&i) {
                for f in group {
                    let id = self.py_symbol(f);
                    out.push(id);
                }
            }
            let id = self.symbol_id(symbol);
            out.push(id);
        }
        // At most what a stored stack holds: its innermost frames.
        let cut = out.len().saturating_sub(lotus_samples::MAX_STACK_DEPTH);
        let id = self.intern(&out[cut..]);
        self.splices.insert((stack, serial), id);
        id
    }

    /// Marks the processes of `block` whose samples ran Python as busy,
    /// for the reading thread.
    fn mark_busy(&self, block: &[Sample], stacks: &[u32]) {
        let mut busy = self.shared.busy.lock().unwrap_or_else(|e| e.into_inner());
        // The latest sample of each process that ran Python is what
        // counts: newest first, each process's stacks walked until one is
        // found (the splice walks every stack again when the block goes).
        let mut found = HashSet::new();
        for (s, &stack) in block.iter().zip(stacks).rev() {
            if found.contains(&s.pid) || busy.get(&s.pid).is_some_and(|&t| t >= s.time_ns) {
                continue;
            }
            let python = self.frames(stack).is_some_and(|frames| {
                frames.iter().any(|f| self.eval_symbols.contains(f))
                    && !frames.iter().any(|f| self.python_symbols.contains(f))
            });
            if python {
                busy.insert(s.pid, s.time_ns);
                found.insert(s.pid);
            }
        }
    }

    /// Passes on the held-back blocks that a snapshot was taken after
    /// (or that waited [`HOLD_NS`]; all of them with `all`): a sample's
    /// nearest snapshot may be one taken after it, and is not known
    /// before.
    fn release(&mut self, all: bool) -> io::Result<()> {
        let round = self.shared.round.load(Ordering::SeqCst);
        let now = lotus_sys::clock_ns(libc::CLOCK_MONOTONIC);
        while let Some((block, _)) = self.pending.front() {
            let last = block.last().map_or(0, |s| s.time_ns);
            if !all && last >= round && now.saturating_sub(last) < HOLD_NS {
                break;
            }
            let Some((block, stacks)) = self.pending.pop_front() else {
                break;
            };
            let out: Vec<u32> = block
                .iter()
                .zip(&stacks)
                .map(|(s, &stack)| {
                    if stack == 0 {
                        0
                    } else {
                        self.spliced_stack(s, stack)
                    }
                })
                .collect();
            let block = self.renumbered(&block);
            self.released_ns = block
                .iter()
                .map(|s| s.time_ns)
                .max()
                .map_or(self.released_ns, |t| t.max(self.released_ns));
            // New symbols and stacks before the samples that use them.
            self.flush_new()?;
            self.inner.samples_with_stacks(&block, &out)?;
        }
        // What the reading thread keeps: from the oldest sample held (the
        // blocks come about in time order), else the newest passed on.
        let held = self
            .pending
            .front()
            .and_then(|(block, _)| block.iter().map(|s| s.time_ns).filter(|&t| t > 0).min());
        self.shared
            .needed
            .store(held.unwrap_or(self.released_ns), Ordering::SeqCst);
        Ok(())
    }

    /// `block` with its symbols' ids as written.
    fn renumbered(&mut self, block: &[Sample]) -> Vec<Sample> {
        block
            .iter()
            .map(|s| Sample {
                symbol: self.symbol_id(s.symbol),
                ..*s
            })
            .collect()
    }

    fn flush_new(&mut self) -> io::Result<()> {
        if !self.new_symbols.is_empty() {
            let new = std::mem::take(&mut self.new_symbols);
            self.inner.symbols(&new)?;
        }
        if !self.new_stacks.is_empty() {
            let new = std::mem::take(&mut self.new_stacks);
            self.inner.stacks(&new)?;
        }
        Ok(())
    }
}

impl<S: SampleSink> SampleSink for PySink<S> {
    fn counters(&mut self, count: usize) -> io::Result<()> {
        self.inner.counters(count)
    }

    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
        let mut out = Vec::with_capacity(new.len());
        for (id, s) in new {
            if s.function == EVAL_FRAME {
                self.eval_symbols.insert(*id);
            } else if s.function.starts_with("py::") {
                self.python_symbols.insert(*id);
            }
            out.push((self.symbol_id(*id), s.clone()));
        }
        self.inner.symbols(&out)
    }

    fn samples(&mut self, block: &[Sample]) -> io::Result<()> {
        let block = self.renumbered(block);
        self.inner.samples(&block)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.release(true)?;
        self.flush_new()?;
        self.inner.finish()
    }

    fn with_stacks(&mut self) -> io::Result<()> {
        self.inner.with_stacks()
    }

    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        for n in new {
            self.nodes.insert(n.id, (n.parent, n.symbol));
            let (id, parent) = (self.stack_id(n.id), self.stack_id(n.parent));
            let symbol = self.symbol_id(n.symbol);
            // Spliced stacks share it where they run through it.
            self.spliced.entry((parent, symbol)).or_insert(id);
            self.new_stacks.push(StackNode::new(id, parent, symbol));
        }
        self.flush_new()
    }

    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        self.mark_busy(block, stacks);
        self.pending.push_back((block.to_vec(), stacks.to_vec()));
        self.release(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the sink passed on, in the ids it wrote.
    #[derive(Default)]
    struct Recorded {
        symbols: HashMap<u32, String>,
        stacks: HashMap<u32, (u32, u32)>,
        samples: Vec<(u32, u32)>,
    }

    impl SampleSink for Recorded {
        fn counters(&mut self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
            for (id, s) in new {
                self.symbols.insert(*id, s.function.clone());
            }
            Ok(())
        }
        fn samples(&mut self, _: &[Sample]) -> io::Result<()> {
            Ok(())
        }
        fn finish(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
            for n in new {
                self.stacks.insert(n.id, (n.parent, n.symbol));
            }
            Ok(())
        }
        fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
            self.samples
                .extend(block.iter().zip(stacks).map(|(s, &k)| (s.symbol, k)));
            Ok(())
        }
    }

    /// A block of samples may come before the stacks it uses: each sample
    /// keeps its own stack, named as the sampler named it, once the
    /// stacks come.
    #[test]
    fn samples_before_their_stacks_keep_them() {
        let frames = PyFrames::start(1, false).expect("reader");
        let mut sink = frames.sink(Recorded::default());
        sink.symbols(&[
            (3, Symbol::new("outer", "lib")),
            (4, Symbol::new("inner", "lib")),
        ])
        .expect("symbols");
        let sample = Sample {
            time_ns: 1,
            pid: 1,
            tid: 1,
            symbol: 4,
            kernel: false,
            counters: Default::default(),
        };
        sink.samples_with_stacks(&[sample], &[8]).expect("samples");
        sink.stacks(&[StackNode::new(7, 0, 3), StackNode::new(8, 7, 4)])
            .expect("stacks");
        // Held back until a snapshot after it, or the end.
        sink.finish().expect("finish");
        let out = &sink.inner;
        let (leaf, stack) = out.samples[0];
        assert_eq!(out.symbols[&leaf], "inner");
        let (parent, symbol) = out.stacks[&stack];
        assert_eq!(out.symbols[&symbol], "inner");
        let (root, outer) = out.stacks[&parent];
        assert_eq!((root, out.symbols[&outer].as_str()), (0, "outer"));
        frames.finish();
    }

    /// Snapshots are kept from the oldest sample the sink holds, however
    /// far the newest snapshot ran ahead of it (under load, a second),
    /// and no more than [`MAX_KEPT`] a thread.
    #[test]
    fn snapshots_are_kept_for_the_samples_the_sink_still_holds() {
        let frames: Arc<[PyFrame]> = Arc::from(Vec::new());
        let ms = 1_000_000;
        let mut kept = VecDeque::new();
        for t in 0..100u64 {
            keep(&mut kept, 1_000 * ms);
            kept.push_back(Snapshot {
                time_ns: t * 20 * ms,
                serial: t,
                frames: Arc::clone(&frames),
            });
        }
        // 2 s of snapshots; the sink still needs those from 1 s - KEEP_NS.
        let oldest = kept.front().map(|s| s.time_ns).expect("kept");
        assert_eq!(oldest, 1_000 * ms - KEEP_NS, "{} kept", kept.len());
        // Nothing needed yet: kept up to the cap, the oldest dropped.
        let mut kept = VecDeque::new();
        for t in 0..(MAX_KEPT as u64 + 10) {
            keep(&mut kept, 0);
            kept.push_back(Snapshot {
                time_ns: t,
                serial: t,
                frames: Arc::clone(&frames),
            });
        }
        assert_eq!(kept.len(), MAX_KEPT);
        assert_eq!(kept.front().map(|s| s.time_ns), Some(10));

        // The sink says what it holds.
        let reader = PyFrames::start(1, false).expect("reader");
        let mut sink = reader.sink(Recorded::default());
        // Samples "from the future": held whenever the reader's rounds run.
        let now = lotus_sys::clock_ns(libc::CLOCK_MONOTONIC) + 60_000 * ms;
        let sample = |time_ns| Sample {
            time_ns,
            pid: 1,
            tid: 1,
            symbol: 4,
            kernel: false,
            counters: Default::default(),
        };
        sink.samples_with_stacks(&[sample(now + 5 * ms), sample(now)], &[0, 0])
            .expect("samples");
        assert_eq!(reader.shared.needed.load(Ordering::SeqCst), now);
        sink.finish().expect("finish");
        assert_eq!(
            reader.shared.needed.load(Ordering::SeqCst),
            now + 5 * ms,
            "the newest passed on once none is held"
        );
        reader.finish();
    }
}
