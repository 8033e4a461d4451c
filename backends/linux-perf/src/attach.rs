//! Attaching to a process that is already running
//! ([`LinuxPerf::attach_streaming`]): every thread of it and of its
//! descendants, those running now and those they start later, sampled as
//! a job lotus starts is.
//!
//! A sampler opened on a task with `inherit` covers that task and what it
//! starts from then on, not the threads that are already there. So each
//! thread of the tree (from `/proc/PID/task/` and, recursively, each
//! thread's `children`) gets its own sampler and side-band event per CPU,
//! redirected (`PERF_EVENT_IOC_SET_OUTPUT`) into the ring buffers of the
//! first thread's, one of each per CPU as for a started job: the drain and
//! everything after it are the same. The tree is walked again after each
//! round of opening until no thread is left unattached: a thread started
//! meanwhile by a thread already attached carries copies of its events
//! (its fork record says so, and it is left alone: opening its own would
//! count it twice), one started by a thread not yet attached gets its
//! own. The samplers are opened disabled and enabled together at the end,
//! when the window opens.
//!
//! The kernel records mappings as they are made, not those already there:
//! the tree's executable mappings are read from `/proc/PID/maps` and
//! replayed before every record as if the side band had written them
//! (stamped when the attach began), with each process's start and its
//! threads, so that samples of code loaded before the attach are named
//! and their stacks unwound, and processes are forgotten after they exit
//! as started ones are.
//!
//! A thread started while its creator's events were being opened may
//! carry copies of some of them only (the CPUs opened by then), and one
//! started by an attached thread that stays in the kernel between making
//! the thread visible and writing its fork record for longer than
//! [`SETTLE`] is attached twice: both are windows of microseconds.
//!
//! The process is not lotus's child: its end is watched through a pidfd
//! (`pidfd_open`, Linux 5.3; else by polling `/proc/PID`), never waited
//! for, and it is never signalled ([`Collection::kill`] stops sampling).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use lotus_core::{CallStacks, CollectOptions, Collection, Error as CoreError};
use lotus_samples::SampleSink;
use lotus_symbols::FileId;

use crate::collection::{Job, PerfCollection};
use crate::counting::{CounterKind, Counters};
use crate::drain::Prelude;
use crate::error::{is_permission, open_error};
use crate::events::{self, monotonic_ns};
use crate::records::{self, Record};
use crate::{KernelSampling, LinuxPerf, PerfOptions, ThreadTimers, WindowSwitch, BACKEND};

/// Walks of the tree after the first, at most: a tree that starts threads
/// faster than they can be attached stops there, with a note.
const MAX_WALKS: usize = 32;
/// How long a thread found in `/proc` is given for its fork record to
/// come: the kernel makes a thread visible a moment before it writes the
/// record that says it carries its creator's events.
const SETTLE: Duration = Duration::from_millis(2);
/// Descriptors per thread besides its events on each CPU: the window
/// counters (two group leaders and five counters at most).
const PER_THREAD: u64 = 7;
/// Descriptors left to the caller and the symbol tables.
const SPARE: u64 = 256;
/// The most descriptors an attach opens, whatever the limit allows: each
/// event holds about a kilobyte of kernel memory.
const MAX_DESCRIPTORS: u64 = 1 << 18;

/// The process an attached collection watches: whether it has ended, without
/// waiting and without a status to read (it is not this process's child).
#[derive(Debug)]
pub(crate) struct Watched {
    pid: u32,
    /// Readable once the process has ended (`pidfd_open`); `None` where
    /// the kernel has none: `/proc/PID` is polled.
    pidfd: Option<OwnedFd>,
    /// Its start time, telling it from a later process given its pid.
    started: Option<u64>,
    ended: bool,
    stopped: bool,
}

impl Watched {
    fn new(pid: u32) -> Watched {
        let raw = libc::pid_t::try_from(pid).unwrap_or(-1);
        // SAFETY: pidfd_open takes a pid and flags; it returns a fresh
        // descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        let pidfd = libc::c_int::try_from(fd)
            .ok()
            .filter(|&fd| fd >= 0)
            // SAFETY: a descriptor pidfd_open just returned, owned by none.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        Watched {
            pid,
            pidfd,
            started: lotus_sys::process::start_time(pid),
            ended: false,
            stopped: false,
        }
    }

    /// The process's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it has ended (status 0: there is none to read), at once.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        if !self.ended {
            self.ended = match &self.pidfd {
                Some(fd) => {
                    let mut pfd = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd; a timeout of 0 never waits.
                    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                    n > 0 && pfd.revents != 0
                }
                None => {
                    !(lotus_sys::process::is_running(self.pid)
                        && lotus_sys::process::start_time(self.pid) == self.started)
                }
            };
        }
        self.ended.then(|| ExitStatus::from_raw(0))
    }

    /// Sampling stops: true the first time.
    pub(crate) fn stop(&mut self) -> bool {
        !std::mem::replace(&mut self.stopped, true)
    }
}

/// A record an attached collection replays before those it reads
/// ([`Prelude`]): one the side band wrote while the tree was attached, or
/// one made from `/proc` for what was there before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Known {
    /// A side-band record as the kernel wrote it (its body).
    Raw {
        /// The record type.
        ty: u32,
        /// Its `misc` bits.
        misc: u16,
        /// Its body, after the header.
        bytes: Vec<u8>,
    },
    /// Process `pid` (child of `ppid`) or, where they are equal, thread
    /// `tid` of it, there at the attach.
    Fork {
        /// Process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// Thread id.
        tid: u32,
        /// When the attach began.
        time: u64,
    },
    /// An executable mapping of `pid` there at the attach.
    Mmap {
        /// Process id.
        pid: u32,
        /// First address.
        start: u64,
        /// Length in bytes.
        len: u64,
        /// Offset in the file of `start`.
        pgoff: u64,
        /// The path, or the kernel's pseudo-name (`//anon`, `[vdso]`).
        name: Vec<u8>,
        /// (device, inode) of the file, as the side band gives them.
        file_id: Option<FileId>,
        /// When the attach began.
        time: u64,
    },
}

impl Known {
    /// The record, as the drain replays it; `None` for a raw record that
    /// cannot be read.
    pub(crate) fn record(&self) -> Option<Record<'_>> {
        match self {
            Known::Raw { ty, misc, bytes } => records::parse_with(*ty, *misc, bytes, None, false),
            &Known::Fork {
                pid,
                ppid,
                tid,
                time,
            } => Some(Record::Fork {
                pid,
                ppid,
                tid,
                time,
            }),
            Known::Mmap {
                pid,
                start,
                len,
                pgoff,
                name,
                file_id,
                time,
            } => Some(Record::Mmap {
                pid: *pid,
                start: *start,
                len: *len,
                pgoff: *pgoff,
                filename: name,
                file_id: *file_id,
                time: *time,
            }),
        }
    }
}

/// One walk of the tree: its processes, parents first, each with its
/// parent and threads.
#[derive(Debug, Default)]
struct Tree {
    processes: Vec<(u32, u32, Vec<u32>)>,
}

impl Tree {
    fn tasks(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.processes
            .iter()
            .flat_map(|(pid, _, tids)| tids.iter().map(move |&t| (*pid, t)))
    }

    fn parent(&self, pid: u32) -> u32 {
        self.processes
            .iter()
            .find(|p| p.0 == pid)
            .map_or(0, |p| p.1)
    }
}

/// The numbers in the names of the entries of `dir`.
fn numbered(dir: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// The parent and whether it has ended (a zombie, or dead) of the process
/// or thread whose `stat` file is at `path` (`/proc/PID/stat`).
fn stat_at(path: &str) -> Option<(u32, bool)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut fields = text.get(text.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, matches!(state, "Z" | "X" | "x")))
}

/// [`stat_at`] of process `pid`.
fn stat(pid: u32) -> Option<(u32, bool)> {
    stat_at(&format!("/proc/{pid}/stat"))
}

/// The tree of processes from `root`, `skip` (this process) and what is
/// under it left out: through each thread's `children` where the kernel
/// lists them, else from every process's parent in `/proc`.
fn walk(root: u32, skip: u32) -> Tree {
    let me = std::process::id();
    let lists_children = std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists();
    let mut parents: HashMap<u32, Vec<u32>> = HashMap::new();
    if !lists_children {
        for pid in numbered("/proc") {
            if let Some((ppid, _)) = stat(pid) {
                parents.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut tree = Tree::default();
    let mut seen = HashSet::from([root]);
    let root_parent = stat(root).map_or(0, |s| s.0);
    let mut queue = VecDeque::from([(root, root_parent)]);
    while let Some((pid, ppid)) = queue.pop_front() {
        if pid == skip {
            continue;
        }
        let tids = numbered(&format!("/proc/{pid}/task"));
        let mut children = Vec::new();
        if lists_children {
            for tid in &tids {
                let list = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
                    .unwrap_or_default();
                children.extend(
                    list.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        } else {
            children = parents.get(&pid).cloned().unwrap_or_default();
        }
        for child in children {
            if seen.insert(child) {
                queue.push_back((child, pid));
            }
        }
        if !tids.is_empty() {
            tree.processes.push((pid, ppid, tids));
        }
    }
    tree
}

/// The executable mappings of `pid` from `/proc/PID/maps`, as the side
/// band would have recorded them at `time`.
fn mappings(pid: u32, time: u64) -> io::Result<Vec<Known>> {
    let text = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(text
        .split(|&b| b == b'\n')
        .filter_map(|line| parse_maps_line(pid, line, time))
        .collect())
}

/// One line of `/proc/PID/maps` (`start-end perms offset maj:min inode
/// path`), where it is executable code the side band records.
fn parse_maps_line(pid: u32, line: &[u8], time: u64) -> Option<Known> {
    let mut rest = line;
    let mut field = || {
        let start = rest.iter().position(|b| *b != b' ')?;
        let field = &rest[start..];
        let end = field.iter().position(|b| *b == b' ').unwrap_or(field.len());
        rest = &field[end..];
        std::str::from_utf8(&field[..end]).ok()
    };
    let (range, perms, offset, dev, inode) = (field()?, field()?, field()?, field()?, field()?);
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let (start, end) = range.split_once('-')?;
    let (start, end) = (hex(start)?, hex(end)?);
    if perms.as_bytes().get(2) != Some(&b'x') || end <= start {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    let (major, minor) = (
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let path = match rest.iter().position(|b| *b != b' ') {
        Some(at) => &rest[at..],
        None => &[][..],
    };
    let name = match path {
        // Anonymous memory, as the kernel names it in a mapping record.
        [] => b"//anon".to_vec(),
        // Not a mapping of the process (the kernel's page at a fixed
        // address): never in a record.
        b"[vsyscall]" => return None,
        p => p.to_vec(),
    };
    Some(Known::Mmap {
        pid,
        start,
        len: end - start,
        pgoff: hex(offset)?,
        name,
        file_id: Some((libc::makedev(major, minor), inode.parse().ok()?)),
        time,
    })
}

/// The open-file limits (soft, hard).
fn open_file_limits() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (0, 0);
    }
    let n = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    (n(lim.rlim_cur), n(lim.rlim_max))
}

/// A permission refusal of `pid`'s events, said for an attach: whose the
/// process is, and what lets lotus attach.
fn refused(pid: u32, e: CoreError) -> CoreError {
    let CoreError::Permission { message, .. } = e else {
        return e;
    };
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid());
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let whose = match owner {
        Ok(uid) if uid != me => format!(" (a process of user {uid}; lotus runs as user {me})"),
        _ => String::new(),
    };
    CoreError::Permission {
        backend: BACKEND.into(),
        message: format!("attaching to pid {pid}{whose} was refused: {message}"),
        fix: format!(
            "run lotus as root (or with CAP_PERFMON and CAP_SYS_PTRACE), or as the user pid \
             {pid} runs as with kernel.perf_event_paranoid at 2 or lower (`sudo sysctl \
             kernel.perf_event_paranoid=2`)"
        ),
    }
}

/// Checks that `pid` is a process lotus can attach to.
fn check_target(pid: u32) -> Result<(), CoreError> {
    let other = |message: String| CoreError::Other {
        backend: BACKEND.into(),
        message,
    };
    if pid == 0 || libc::pid_t::try_from(pid).is_err() {
        return Err(other(format!("{pid} is not a process id to attach to")));
    }
    if pid == std::process::id() {
        return Err(other(format!(
            "pid {pid} is lotus itself: attach to another process"
        )));
    }
    let status = match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(other(format!(
                "no process {pid} to attach to: /proc/{pid} does not exist (it has exited, \
                 or the pid is wrong)"
            )));
        }
        Err(e) => {
            return Err(CoreError::Io {
                context: format!("reading /proc/{pid}/status to attach to pid {pid}"),
                source: e,
            })
        }
    };
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok());
    if let Some(tgid) = tgid.filter(|&t| t != pid) {
        return Err(other(format!(
            "pid {pid} is a thread of process {tgid}: attach to the process ({tgid})"
        )));
    }
    if stat(pid).is_none_or(|(_, ended)| ended) {
        return Err(other(format!(
            "process {pid} has already exited (a zombie its parent has not reaped)"
        )));
    }
    Ok(())
}

/// The attach in progress: the first thread's events (whose ring buffers
/// the others write into), and what has been opened since.
struct Attaching {
    root: u32,
    cpus: Vec<usize>,
    running: bool,
    streams: events::Streams,
    counters: Counters,
    /// The threads with events of their own.
    opened: HashSet<u32>,
    /// Threads the side band saw start: they carry copies of their
    /// creator's events.
    forked: HashSet<u32>,
    /// Threads that had ended (a zombie's) when their events were opened.
    gone: HashSet<u32>,
    /// The processes with events of their own, in the order they were
    /// first attached: (pid, parent, threads).
    processes: Vec<(u32, u32, Vec<u32>)>,
    /// Processes refused, with why.
    refused: Vec<(u32, String)>,
    /// The side band's records read while attaching.
    raw: Vec<(usize, Known)>,
}

/// Raises the open-file limit for an attach of `pid` to `threads` threads
/// on `cpus` CPUs reading `counters` counters with each sample; an error
/// naming the figures where the limit, or lotus's bound, is too low.
fn make_room(pid: u32, threads: u64, cpus: usize, counters: usize) -> Result<(), CoreError> {
    let cpus = cpus as u64;
    let per_cpu = 2 + counters as u64;
    let needed = threads
        .saturating_mul(cpus.saturating_mul(per_cpu).saturating_add(PER_THREAD))
        .saturating_add(cpus.saturating_mul(4))
        .saturating_add(SPARE);
    events::ensure_open_files(needed);
    let (soft, hard) = open_file_limits();
    if needed <= soft && needed <= MAX_DESCRIPTORS {
        return Ok(());
    }
    let limit = if needed > MAX_DESCRIPTORS {
        format!("lotus's bound of {MAX_DESCRIPTORS} for an attach")
    } else {
        format!("the open-file limit of {soft} (hard limit {hard}; raise it with `ulimit -n`)")
    };
    Err(CoreError::Other {
        backend: BACKEND.into(),
        message: format!(
            "attaching to pid {pid}: its tree has {threads} threads, which on {cpus} CPUs need \
             about {needed} file descriptors (a sampler and a side-band event per thread and \
             CPU), above {limit}; attach to a smaller part of the tree"
        ),
    })
}

impl Attaching {
    /// [`make_room`] for `threads` threads of this tree.
    fn make_room(&self, threads: u64) -> Result<(), CoreError> {
        let counters = self.streams.counters.read.len();
        make_room(self.root, threads, self.cpus.len(), counters)
    }

    /// Opens thread `tid` of `pid`'s events on every CPU, redirected into
    /// the first thread's ring buffers. `Ok(false)` where it had exited
    /// before any opened; one that exits midway keeps those opened.
    fn open_thread(&mut self, pid: u32, tid: u32) -> io::Result<bool> {
        let kinds: Vec<CounterKind> = self.streams.counters.read.clone();
        for (i, &cpu) in self.cpus.iter().enumerate() {
            let (sampler, members, sideband) =
                match events::open_more(tid, cpu, &self.streams.attrs, &kinds) {
                    Ok(events) => events,
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(i > 0),
                    Err(e) => return Err(e),
                };
            events::redirect(&sampler, &self.streams.samplers[i])?;
            events::redirect(&sideband, &self.streams.sideband[i])?;
            // SAFETY: the descriptor is the sampler's, given up by it.
            let fd = unsafe { OwnedFd::from_raw_fd(sampler.into_raw_fd()) };
            self.streams.switch.add(fd, pid, i as u32);
            self.streams.members.extend(members);
            self.streams.members.push(sideband);
        }
        Ok(true)
    }

    /// Attaches thread `tid` of `pid` (child of `ppid`), or refuses its
    /// process where the kernel does.
    fn attach(&mut self, pid: u32, ppid: u32, tid: u32) -> Result<(), CoreError> {
        let what = || format!("sampling thread {tid} of pid {pid}");
        match self.open_thread(pid, tid) {
            Ok(true) => {}
            Ok(false) => {
                self.gone.insert(tid);
                return Ok(());
            }
            Err(e) if is_permission(&e) => {
                self.refused.push((pid, e.to_string()));
                return Ok(());
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                let (soft, _) = open_file_limits();
                return Err(CoreError::Io {
                    context: format!(
                        "{}: out of file descriptors with {} threads of pid {} attached (the \
                         open-file limit is {soft}): raise it, e.g. `ulimit -n 65536`",
                        what(),
                        self.opened.len(),
                        self.root
                    ),
                    source: e,
                });
            }
            Err(e) => return Err(open_error(&what(), e)),
        }
        self.opened.insert(tid);
        self.counters.add_task(tid, self.running)?;
        match self.processes.iter_mut().find(|p| p.0 == pid) {
            Some(p) => p.2.push(tid),
            None => self.processes.push((pid, ppid, vec![tid])),
        }
        Ok(())
    }

    /// Reads what the side band wrote so far (kept for the drain), noting
    /// the threads it saw start.
    fn read_sideband(&mut self) {
        let first = self.streams.samplers.len();
        for (i, buffer) in self.streams.sideband.iter_mut().enumerate() {
            while let Some(rec) = buffer.next_record() {
                let (ty, misc) = (rec.ty(), rec.misc());
                let bytes = rec.to_contiguous().into_owned();
                if let Some(Record::Fork { tid, .. }) =
                    records::parse_with(ty, misc, &bytes, None, false)
                {
                    self.forked.insert(tid);
                }
                self.raw.push((first + i, Known::Raw { ty, misc, bytes }));
            }
        }
    }

    /// The threads of `tree` to attach: neither attached, nor started by
    /// an attached thread, nor ended, nor of a refused process.
    fn unattached(&self, tree: &Tree) -> Vec<(u32, u32)> {
        tree.tasks()
            .filter(|(pid, tid)| {
                !self.opened.contains(tid)
                    && !self.forked.contains(tid)
                    && !self.gone.contains(tid)
                    && !self.refused.iter().any(|r| r.0 == *pid)
            })
            .collect()
    }

    /// Attaches every thread of the tree, walking it again until none is
    /// left; notes what could not be.
    fn attach_tree(&mut self, mut tree: Tree, notes: &mut Vec<String>) -> Result<(), CoreError> {
        let me = std::process::id();
        for walk_no in 0..=MAX_WALKS {
            let mut todo = self.unattached(&tree);
            if walk_no > 0 && !todo.is_empty() {
                std::thread::sleep(SETTLE);
                self.read_sideband();
                todo.retain(|(_, tid)| !self.forked.contains(tid));
            }
            if todo.is_empty() {
                return Ok(());
            }
            if walk_no == MAX_WALKS {
                notes.push(format!(
                    "attach: {} threads of the tree were still unattached after {MAX_WALKS} \
                     walks of it (it starts threads faster than lotus attaches them): they and \
                     what they start are not sampled",
                    todo.len()
                ));
                return Ok(());
            }
            self.make_room((self.opened.len() + todo.len()) as u64)?;
            for (pid, tid) in todo {
                self.attach(pid, tree.parent(pid), tid)?;
            }
            self.read_sideband();
            tree = walk(self.root, me);
        }
        Ok(())
    }

    /// The records of the tree as it stood at `since`: each attached
    /// process's start, executable mappings and threads, parents first;
    /// then the side band's records read while attaching.
    fn prelude(&mut self, since: u64, notes: &mut Vec<String>) -> Prelude {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        let sideband = self.streams.samplers.len();
        for (pid, ppid, tids) in &self.processes {
            let (pid, ppid) = (*pid, *ppid);
            let mut threads = tids.iter();
            if let Some(&first) = threads.next() {
                records.push(Known::Fork {
                    pid,
                    ppid,
                    tid: first,
                    time: since,
                });
            }
            match mappings(pid, since) {
                Ok(maps) => records.extend(maps),
                Err(e) if e.kind() != io::ErrorKind::NotFound => unreadable.push((pid, e)),
                // Ended since: its code is named as far as its records go.
                Err(_) => {}
            }
            for &tid in threads.filter(|&&t| t != pid) {
                records.push(Known::Fork {
                    pid,
                    ppid: pid,
                    tid,
                    time: since,
                });
            }
        }
        if let Some((pid, e)) = unreadable.first() {
            notes.push(format!(
                "attach: the mappings of {} processes could not be read (/proc/{pid}/maps: {e}): \
                 their samples in code loaded before the attach are [unknown]",
                unreadable.len()
            ));
        }
        let mut records: Vec<(usize, Known)> = records.into_iter().map(|k| (sideband, k)).collect();
        records.append(&mut self.raw);
        Prelude {
            since,
            roots: self.processes.iter().map(|p| p.0).collect(),
            records,
        }
    }
}

impl LinuxPerf {
    /// Samples the process `pid` that is already running (not started by
    /// lotus), every thread of it and of its descendants, those running
    /// now and those started later, as [`Self::start_streaming`] samples a
    /// job it starts: one window from now to the end (open already; close
    /// it with [`Collection::pause`]), every sample to `sink`, code loaded
    /// before the attach named and its stacks unwound like the rest.
    ///
    /// The collection ends when `pid` exits or is finished;
    /// [`Collection::try_wait`] says `pid` ended with status 0 (it is not
    /// this process's child: there is no status to read), and
    /// [`Collection::kill`] stops sampling and never signals it. Windows
    /// are lotus's own ([`CollectOptions::window_stamps`] is not taken).
    /// Threads of the tree are attached one by one (a sampler and a
    /// side-band event per thread and CPU): a tree too large for the
    /// open-file limit is refused with the figures. The soft
    /// `RLIMIT_NOFILE` may be raised as for [`Self::start`]; this process
    /// does not become a child subreaper.
    pub fn attach_streaming(
        &self,
        pid: u32,
        options: &CollectOptions,
        perf: &PerfOptions,
        sink: Box<dyn SampleSink>,
    ) -> Result<PerfCollection, CoreError> {
        check_target(pid)?;
        let watched = Watched::new(pid);
        let running = perf.window_switch == WindowSwitch::Timestamps;
        let mut notes = Vec::new();
        let folds = (options.stacks != CallStacks::None).then(lotus_samples::SharedFolds::default);
        let frequency_hz = crate::frequency_for(options, &mut notes);
        let cpus = events::online_cpus();
        let want_kernel = perf.kernel == KernelSampling::Auto;
        let me = std::process::id();
        let since = monotonic_ns();
        let tree = walk(pid, me);
        let threads = tree.tasks().count() as u64;
        // The first live thread of the process holds the ring buffers
        // (its main thread where it is alive).
        let mut candidates: Vec<u32> = tree
            .processes
            .first()
            .map(|p| p.2.clone())
            .unwrap_or_default();
        candidates.sort_by_key(|&t| t != pid);
        let extra = events::Extra {
            separate: perf.thread_timers == ThreadTimers::Separate,
            chains: perf.stacks != CallStacks::None,
            user_stacks: perf.stacks == CallStacks::Dwarf,
        };
        make_room(pid, threads, cpus.len(), perf.sample_counters.len())?;
        let mut first = None;
        for &tid in &candidates {
            let opened = events::open(
                tid,
                &cpus,
                frequency_hz,
                false,
                want_kernel,
                &perf.sample_counters,
                extra,
            )
            .and_then(|streams| Ok((streams, Counters::open(tid, running)?)));
            match opened {
                Ok(x) => {
                    first = Some((tid, x));
                    break;
                }
                // A thread that ended meanwhile: the next one.
                Err(_)
                    if stat_at(&format!("/proc/{pid}/task/{tid}/stat"))
                        .is_none_or(|(_, ended)| ended) => {}
                Err(e) => return Err(refused(pid, e)),
            }
        }
        let Some((tid, (mut streams, counters))) = first else {
            return Err(CoreError::Other {
                backend: BACKEND.into(),
                message: format!("process {pid} exited before lotus could attach to it"),
            });
        };
        crate::sampler_notes(&streams, want_kernel, &mut notes);
        streams.switch.adopt(pid);
        let mut attaching = Attaching {
            root: pid,
            cpus,
            running,
            streams,
            counters,
            opened: HashSet::from([tid]),
            forked: HashSet::new(),
            gone: HashSet::new(),
            processes: vec![(pid, tree.parent(pid), vec![tid])],
            refused: Vec::new(),
            raw: Vec::new(),
        };
        attaching.attach_tree(tree, &mut notes)?;
        if let Some((first, why)) = attaching.refused.first() {
            notes.push(format!(
                "attach: {} processes of the tree refused sampling (pid {first}: {why}; \
                 another user's, run lotus as root): their samples are missing",
                attaching.refused.len()
            ));
        }
        let prelude = attaching.prelude(since, &mut notes);
        let Attaching {
            streams, counters, ..
        } = attaching;
        let (drain, switch, sampling) = self.drain_over(
            streams,
            Some(sink),
            frequency_hz,
            false,
            true,
            folds,
            None,
            Some(prelude),
        )?;
        if running {
            switch.enable()?;
        }
        let mut collection = PerfCollection::new(
            perf.window_switch,
            Job::Attached(watched),
            switch,
            counters,
            drain,
            sampling,
            notes,
        );
        collection.resume()?;
        Ok(collection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_lines_of_maps_become_mapping_records() {
        let line = b"7f1c2a000000-7f1c2a200000 r-xp 00021000 fd:01 1234567    /usr/lib/lib a.so";
        let Some(Known::Mmap {
            pid,
            start,
            len,
            pgoff,
            name,
            file_id,
            time,
        }) = parse_maps_line(7, line, 99)
        else {
            panic!("not a mapping");
        };
        assert_eq!(
            (pid, start, len, pgoff, time),
            (7, 0x7f1c2a000000, 0x200000, 0x21000, 99)
        );
        assert_eq!(name, b"/usr/lib/lib a.so");
        assert_eq!(file_id, Some((libc::makedev(0xfd, 1), 1234567)));
        // Anonymous code, as the kernel names it; the vDSO as it is.
        let anon = parse_maps_line(7, b"1000-2000 rwxp 00000000 00:00 0 ", 1);
        assert!(matches!(anon, Some(Known::Mmap { name, .. }) if name == b"//anon"));
        let vdso = parse_maps_line(7, b"1000-3000 r-xp 00000000 00:00 0   [vdso]", 1);
        assert!(matches!(vdso, Some(Known::Mmap { name, .. }) if name == b"[vdso]"));
        // Not code, the vsyscall page, nonsense: nothing.
        for line in [
            &b"1000-2000 r--p 00000000 fd:01 5 /usr/lib/lib.so"[..],
            b"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]",
            b"2000-1000 r-xp 00000000 fd:01 5 /x",
            b"garbage",
            b"",
        ] {
            assert_eq!(parse_maps_line(7, line, 1), None, "{line:?}");
        }
    }

    #[test]
    fn known_records_read_as_the_side_band_writes_them() {
        let fork = Known::Fork {
            pid: 5,
            ppid: 1,
            tid: 5,
            time: 10,
        };
        assert_eq!(
            fork.record(),
            Some(Record::Fork {
                pid: 5,
                ppid: 1,
                tid: 5,
                time: 10
            })
        );
        let raw = Known::Raw {
            ty: 7,
            misc: 0,
            bytes: vec![1],
        };
        assert_eq!(raw.record(), None, "a cut record is not read");
    }

    #[test]
    fn a_missing_pid_or_a_thread_is_refused_with_its_number() {
        let err = check_target(0).expect_err("0").to_string();
        assert!(err.contains("not a process id"), "{err}");
        let me = std::process::id();
        let err = check_target(me).expect_err("self").to_string();
        assert!(err.contains("lotus itself"), "{err}");
        // A pid beyond pid_max names nothing.
        let none = 4_194_304 + 17;
        let err = check_target(none).expect_err("none").to_string();
        assert!(err.contains(&format!("no process {none}")), "{err}");
        // A thread of this process.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
            tx.send(tid).expect("send");
            let _ = done_rx.recv();
        });
        let tid = rx.recv().expect("tid");
        let err = check_target(tid).expect_err("thread").to_string();
        assert!(err.contains(&format!("thread of process {me}")), "{err}");
        drop(done_tx);
        t.join().expect("join");
    }

    #[test]
    fn a_refusal_names_the_pid_and_what_lets_lotus_attach() {
        let e = refused(
            42,
            CoreError::Permission {
                backend: BACKEND.into(),
                message: "perf_event_open refused sampling".into(),
                fix: "x".into(),
            },
        );
        let text = e.to_string();
        assert!(text.contains("attaching to pid 42"), "{text}");
        assert!(text.contains("run lotus as root"), "{text}");
        assert!(text.contains("kernel.perf_event_paranoid"), "{text}");
        // Anything else passes as it is.
        let other = refused(
            42,
            CoreError::Other {
                backend: BACKEND.into(),
                message: "m".into(),
            },
        );
        assert!(matches!(other, CoreError::Other { .. }));
    }

    #[test]
    fn this_process_and_its_threads_are_walked_unless_skipped() {
        let me = std::process::id();
        let tree = walk(me, 0);
        assert_eq!(tree.processes.first().map(|p| p.0), Some(me));
        assert!(tree.tasks().any(|(p, t)| p == me && t == me));
        assert!(walk(me, me).processes.is_empty());
    }

    #[test]
    fn a_process_ends_for_the_watcher_without_being_waited_for() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let mut w = Watched::new(child.id());
        assert_eq!(w.try_wait(), None);
        child.kill().expect("kill");
        child.wait().expect("wait");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while w.try_wait().is_none() {
            assert!(std::time::Instant::now() < deadline, "never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.try_wait().map(|s| s.code()), Some(Some(0)));
        assert!(w.stop() && !w.stop());
    }
}
