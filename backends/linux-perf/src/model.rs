//! What the records say, replayed in time order: which executable mappings
//! each process had, and how many samples fell at each (module, file
//! offset) in each window.
//!
//! Processes are tracked from their first record to the end, so samples of
//! processes that already exited (DataLoader workers) resolve like any
//! other. A fork copies the parent's mappings, an exec drops them, a new
//! mapping replaces whatever it overlaps (as `perf report` does).

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use lotus_samples::CounterValues;

use crate::records::Record;
use lotus_symbols::{CodeMapping, FileId, Module, VDSO};

/// How many mappings of one module [`Module::mapped_at`] keeps.
const MAX_MAPPED_AT: usize = 8;

/// An index into [`Model::modules`].
pub(crate) type ModuleId = u32;

/// Where a sample fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Location {
    /// In a module: the file offset for files, 0 for pseudo-modules.
    Module {
        /// The module.
        module: ModuleId,
        /// Offset in the file.
        offset: u64,
    },
    /// In the kernel, at this address (named from kallsyms).
    Kernel {
        /// The instruction pointer.
        address: u64,
    },
    /// In no mapping lotus knows of.
    Unmapped,
    /// In code a JIT wrote into anonymous memory of process `pid` (or in
    /// no mapping lotus knows of), at this address: named from the
    /// process's perf map file where it writes one (CPython's perf
    /// trampolines, `py::` frames). Unwound frames only.
    Jit {
        /// The process.
        pid: u32,
        /// The address.
        address: u64,
    },
}

/// True for an address in the kernel's half of a 64-bit address space
/// (x86-64, arm64, riscv64 put the kernel at the top, user space below).
pub(crate) fn is_kernel_address(ip: u64) -> bool {
    cfg!(target_pointer_width = "64") && ip >> 63 == 1
}

/// One process's executable mappings ([`lotus_symbols::CodeSpace`]).
/// Shared (an [`Arc`]) between a process and its forked children until
/// one of them maps something. Samples carry no copy: the sample writer
/// replays the changes into mappings of its own (see
/// [`crate::stream::Change`]).
pub(crate) type AddressSpace = lotus_symbols::CodeSpace;

/// Where `ip`, a user address, falls in `space`, the offset kept in the
/// modules where `keeps_offsets` says.
pub(crate) fn locate_in(
    space: &AddressSpace,
    ip: u64,
    keeps_offsets: impl Fn(ModuleId) -> bool,
) -> Location {
    match space.find(ip) {
        Some((module, offset)) => Location::Module {
            module,
            offset: if keeps_offsets(module) { offset } else { 0 },
        },
        None => Location::Unmapped,
    }
}

/// Per-window totals the drain thread publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowCounts {
    /// Samples taken in the window.
    pub samples: u64,
    /// Samples the kernel dropped because the buffer was full.
    pub lost: u64,
    /// Times the kernel throttled the sampler.
    pub throttled: u64,
}

/// The replayed state.
#[derive(Debug, Default)]
pub(crate) struct Model {
    /// Every module seen, by [`ModuleId`].
    pub modules: Vec<Module>,
    by_name: HashMap<(Vec<u8>, Option<FileId>), ModuleId>,
    spaces: HashMap<u32, Arc<AddressSpace>>,
    /// Samples by (window, location).
    pub counts: HashMap<(usize, Location), u64>,
    /// Per-window totals.
    pub windows: Vec<WindowCounts>,
    /// Samples (and lost samples) stamped outside every window: dropped.
    pub outside: WindowCounts,
    /// Mappings forgotten because a process had more than the kernel lets
    /// it have at once (see [`AddressSpace::insert`]).
    pub forgotten: u64,
    /// Threads alive in each process whose start (its fork) was seen.
    threads: HashMap<u32, u32>,
    /// Processes whose last thread exited, and when.
    exited: Vec<(u64, u32)>,
}

/// A record with its module already interned: what the drain thread queues
/// until it is safe to replay in time order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// See [`Record::Sample`]; `stream` is the ring buffer it came from
    /// (one per CPU), set by the drain thread: a thread's counter totals
    /// are per sampler.
    Sample {
        pid: u32,
        tid: u32,
        ip: u64,
        kernel: bool,
        stream: u32,
        counters: CounterValues,
    },
    /// See [`Record::Exit`].
    Exit { pid: u32, tid: u32 },
    /// See [`Record::ThreadCpu`]; `stream` as for samples (the CPU's
    /// sampler the count is from).
    ThreadCpu {
        pid: u32,
        tid: u32,
        ns: u64,
        stream: u32,
    },
    /// See [`Record::Mmap`].
    Mmap {
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        module: ModuleId,
    },
    /// See [`Record::Fork`].
    Fork { pid: u32, ppid: u32, tid: u32 },
    /// See [`Record::Exec`].
    Exec { pid: u32 },
    /// See [`Record::Lost`].
    Lost { count: u64 },
    /// See [`Record::Throttle`].
    Throttle,
}

impl Event {
    /// A sample (or a thread's CPU count) marked as read from ring buffer
    /// `stream`; other events unchanged.
    pub(crate) fn on_stream(self, stream: u32) -> Event {
        match self {
            Event::Sample {
                pid,
                tid,
                ip,
                kernel,
                counters,
                ..
            } => Event::Sample {
                pid,
                tid,
                ip,
                kernel,
                stream,
                counters,
            },
            Event::ThreadCpu { pid, tid, ns, .. } => Event::ThreadCpu {
                pid,
                tid,
                ns,
                stream,
            },
            other => other,
        }
    }

    /// Side-band records sort before samples of the same instant, exits
    /// (and a thread's CPU count, written at its exit) after them.
    pub(crate) fn rank(&self) -> u8 {
        match self {
            Event::Fork { .. } | Event::Exec { .. } | Event::Mmap { .. } => 0,
            Event::ThreadCpu { .. } => 2,
            Event::Exit { .. } => 3,
            _ => 1,
        }
    }
}

impl Model {
    /// The module named `name`, interned.
    #[cfg(test)]
    pub(crate) fn module(&mut self, name: &[u8]) -> ModuleId {
        self.module_of(name, None)
    }

    /// The module of the file `name` with (device, inode) `file_id`,
    /// interned.
    pub(crate) fn module_of(&mut self, name: &[u8], file_id: Option<FileId>) -> ModuleId {
        let key = (name.to_vec(), file_id);
        if let Some(&id) = self.by_name.get(&key) {
            return id;
        }
        let id = self.modules.len() as ModuleId;
        let text = String::from_utf8_lossy(name).into_owned();
        // `//anon` is anonymous memory; `/memfd:x (deleted)` and other
        // deleted files cannot be opened by path any more.
        let is_file =
            text.starts_with('/') && !text.starts_with("//") && !text.ends_with(" (deleted)");
        self.modules.push(Module {
            name: text,
            is_file,
            file_id,
            mapped_at: Vec::new(),
            pinned: None,
        });
        self.by_name.insert(key, id);
        id
    }

    /// Turns a parsed record into a queued event (interning its module).
    pub(crate) fn event(&mut self, record: &Record<'_>) -> Option<(u64, Event)> {
        let time = record.time();
        let ev = match *record {
            Record::Sample {
                pid,
                tid,
                ip,
                kernel,
                counters,
                ..
            } => Event::Sample {
                pid,
                tid,
                ip,
                kernel: kernel || is_kernel_address(ip),
                stream: 0,
                counters,
            },
            Record::Exit { pid, tid, .. } => Event::Exit { pid, tid },
            Record::ThreadCpu { pid, tid, ns, .. } => Event::ThreadCpu {
                pid,
                tid,
                ns,
                stream: 0,
            },
            Record::Mmap {
                pid,
                start,
                len,
                pgoff,
                filename,
                file_id,
                ..
            } => {
                let module = self.module_of(filename, file_id);
                if let Some(m) = self.modules.get_mut(module as usize) {
                    if m.is_file {
                        if m.mapped_at.is_empty() {
                            m.pinned = lotus_symbols::pin_mapped(
                                pid,
                                start,
                                start.saturating_add(len),
                                file_id,
                            );
                        }
                        // The latest few: a process that mapped it last
                        // is the likeliest to be alive at the end.
                        if m.mapped_at.len() == MAX_MAPPED_AT {
                            m.mapped_at.remove(0);
                        }
                        m.mapped_at.push((pid, start, start.saturating_add(len)));
                    }
                }
                Event::Mmap {
                    pid,
                    start,
                    len,
                    pgoff,
                    module,
                }
            }
            Record::Fork { pid, ppid, tid, .. } => Event::Fork { pid, ppid, tid },
            Record::Exec { pid, .. } => Event::Exec { pid },
            Record::Lost { count, .. } => Event::Lost { count },
            Record::Throttle { .. } => Event::Throttle,
            Record::Other => return None,
        };
        Some((time, ev))
    }

    /// Replays one event that happened at `time`; `window` says which
    /// window a time belongs to, if any. Samples outside every window are
    /// only counted (in [`Model::outside`]).
    pub(crate) fn apply(&mut self, time: u64, ev: Event, window: impl Fn(u64) -> Option<usize>) {
        match ev {
            Event::Sample { .. } | Event::Lost { .. } | Event::Throttle
                if window(time).is_none() =>
            {
                match ev {
                    Event::Sample { .. } => self.outside.samples += 1,
                    Event::Lost { count } => self.outside.lost += count,
                    _ => self.outside.throttled += 1,
                }
            }
            Event::Sample {
                pid, ip, kernel, ..
            } => {
                let loc = self.locate(pid, ip, kernel);
                let w = window(time).unwrap_or(0);
                *self.counts.entry((w, loc)).or_insert(0) += 1;
                self.window_mut(w).samples += 1;
            }
            Event::Mmap {
                pid,
                start,
                len,
                pgoff,
                module,
            } => {
                let m = self.mapping(start, len, pgoff, module);
                self.forgotten += Arc::make_mut(self.spaces.entry(pid).or_default()).insert(m);
            }
            Event::Fork { pid, ppid, .. } if pid != ppid => {
                let space = self.spaces.get(&ppid).cloned().unwrap_or_default();
                self.spaces.insert(pid, space);
                self.threads.insert(pid, 1);
            }
            Event::Fork { pid, tid, .. } => {
                if let Some(n) = self.threads.get_mut(&pid).filter(|_| tid != pid) {
                    *n += 1;
                }
            }
            Event::Exec { pid } => {
                self.spaces.insert(pid, Arc::default());
            }
            // A process's mappings are dropped a while after its last
            // thread exited (see `drop_exited`); the drain thread drops
            // the thread's counter totals.
            Event::Exit { pid, .. } => {
                if let Some(n) = self.threads.get_mut(&pid) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.threads.remove(&pid);
                        self.exited.push((time, pid));
                    }
                }
            }
            // Counted by the drain thread's coverage (see `crate::coverage`).
            Event::ThreadCpu { .. } => {}
            Event::Lost { count } => self.window_mut(window(time).unwrap_or(0)).lost += count,
            Event::Throttle => self.window_mut(window(time).unwrap_or(0)).throttled += 1,
        }
    }

    /// Where a sample of `pid` at `ip` fell, with the mappings as they
    /// stand now.
    pub(crate) fn locate(&self, pid: u32, ip: u64, kernel: bool) -> Location {
        if kernel {
            return Location::Kernel { address: ip };
        }
        match self.spaces.get(&pid) {
            Some(space) => locate_in(space, ip, |m| self.keeps_offsets(m)),
            None => Location::Unmapped,
        }
    }

    /// Drops the mappings of the processes whose last thread exited
    /// before `before` (no record of them can come after), unless a new
    /// process took the pid since; returns their pids. Memory stays in
    /// proportion to the processes alive, not to all a job ever ran.
    pub(crate) fn drop_exited(&mut self, before: u64) -> Vec<u32> {
        let (gone, kept): (Vec<_>, Vec<_>) = self.exited.drain(..).partition(|e| e.0 < before);
        self.exited = kept;
        let gone = gone.into_iter().map(|(_, pid)| pid);
        let gone: Vec<u32> = gone.filter(|p| !self.threads.contains_key(p)).collect();
        for pid in &gone {
            self.spaces.remove(pid);
        }
        gone
    }

    /// The mapping an mmap record of `len` bytes at `start` from file
    /// offset `pgoff` of `module` makes.
    pub(crate) fn mapping(
        &self,
        start: u64,
        len: u64,
        pgoff: u64,
        module: ModuleId,
    ) -> CodeMapping {
        let end = start.saturating_add(len);
        // The kernel reports the vDSO's page offset like anonymous
        // memory's (its address); the image starts at the mapping.
        let is_vdso = self
            .modules
            .get(module as usize)
            .is_some_and(|m| m.name == VDSO);
        let pgoff = if is_vdso { 0 } else { pgoff };
        CodeMapping {
            start,
            end,
            pgoff,
            module,
        }
    }

    fn keeps_offsets(&self, module: ModuleId) -> bool {
        self.modules
            .get(module as usize)
            .is_some_and(Module::keeps_offsets)
    }

    fn window_mut(&mut self, w: usize) -> &mut WindowCounts {
        if self.windows.len() <= w {
            self.windows.resize(w + 1, WindowCounts::default());
        }
        &mut self.windows[w]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(m: &mut Model, time: u64, pid: u32, ip: u64) {
        let kernel = false;
        m.apply(
            time,
            Event::Sample {
                pid,
                tid: pid,
                ip,
                kernel,
                stream: 0,
                counters: CounterValues::default(),
            },
            |_| Some(0),
        );
    }

    fn only_location(m: &Model) -> Location {
        let locs: Vec<_> = m.counts.keys().map(|(_, l)| *l).collect();
        assert_eq!(locs.len(), 1, "{locs:?}");
        locs[0]
    }

    fn mmap(m: &mut Model, pid: u32, start: u64, len: u64, pgoff: u64, name: &str) -> ModuleId {
        let module = m.module(name.as_bytes());
        let ev = Event::Mmap {
            pid,
            start,
            len,
            pgoff,
            module,
        };
        m.apply(0, ev, |_| Some(0));
        module
    }

    #[test]
    fn sample_resolves_to_file_offset() {
        let mut m = Model::default();
        let lib = mmap(&mut m, 1, 0x7000, 0x1000, 0x3000, "/lib/liba.so");
        sample(&mut m, 1, 1, 0x7010);
        assert_eq!(
            only_location(&m),
            Location::Module {
                module: lib,
                offset: 0x3010
            }
        );
        assert_eq!(m.windows[0].samples, 1);
    }

    #[test]
    fn forked_child_inherits_and_keeps_mappings_after_exit() {
        let mut m = Model::default();
        let lib = mmap(&mut m, 1, 0x7000, 0x1000, 0, "/lib/liba.so");
        let fork = Event::Fork {
            pid: 2,
            ppid: 1,
            tid: 2,
        };
        m.apply(0, fork, |_| Some(0));
        sample(&mut m, 5, 2, 0x7004);
        assert_eq!(
            only_location(&m),
            Location::Module {
                module: lib,
                offset: 4
            }
        );
    }

    /// A forked process's mappings are dropped once its last thread exited
    /// (and a while has passed), not while a thread of it lives, and not
    /// where a new process took its pid.
    #[test]
    fn an_exited_process_mappings_are_dropped() {
        let mut m = Model::default();
        mmap(&mut m, 1, 0x7000, 0x1000, 0, "/lib/liba.so");
        let ev = |m: &mut Model, t, ev| m.apply(t, ev, |_| Some(0));
        let fork = |pid, ppid, tid| Event::Fork { pid, ppid, tid };
        ev(&mut m, 1, fork(2, 1, 2));
        ev(&mut m, 2, fork(2, 2, 3)); // a second thread
        ev(&mut m, 3, Event::Exit { pid: 2, tid: 2 });
        assert!(m.drop_exited(u64::MAX).is_empty());
        ev(&mut m, 4, Event::Exit { pid: 2, tid: 3 });
        assert!(m.drop_exited(4).is_empty(), "not before its exit");
        assert_eq!(m.drop_exited(5), [2]);
        assert!(!m.spaces.contains_key(&2) && m.spaces.contains_key(&1));
        // The pid taken again before the drop: kept.
        ev(&mut m, 6, fork(3, 1, 3));
        ev(&mut m, 7, Event::Exit { pid: 3, tid: 3 });
        ev(&mut m, 8, fork(3, 1, 3));
        assert!(m.drop_exited(u64::MAX).is_empty());
        assert!(m.spaces.contains_key(&3));
        // The first process (its fork never seen) is kept.
        ev(&mut m, 9, Event::Exit { pid: 1, tid: 1 });
        assert!(m.drop_exited(u64::MAX).is_empty());
        assert!(m.spaces.contains_key(&1));
    }

    #[test]
    fn exec_drops_old_mappings() {
        let mut m = Model::default();
        mmap(&mut m, 1, 0x7000, 0x1000, 0, "/lib/liba.so");
        m.apply(0, Event::Exec { pid: 1 }, |_| Some(0));
        sample(&mut m, 5, 1, 0x7004);
        assert_eq!(only_location(&m), Location::Unmapped);
    }

    #[test]
    fn new_mapping_splits_what_it_overlaps() {
        let mut m = Model::default();
        let a = mmap(&mut m, 1, 0x1000, 0x3000, 0x10000, "/a");
        let b = mmap(&mut m, 1, 0x2000, 0x1000, 0, "/b");
        let space = &m.spaces[&1];
        assert_eq!(space.find(0x1800), Some((a, 0x10800)));
        assert_eq!(space.find(0x2800), Some((b, 0x800)));
        assert_eq!(space.find(0x3800), Some((a, 0x12800)));
        assert_eq!(space.find(0x4000), None);
        assert_eq!(space.find(0x0fff), None);
    }

    #[test]
    fn pseudo_modules_group_at_offset_zero() {
        let mut m = Model::default();
        let anon = mmap(&mut m, 1, 0x1000, 0x1000, 0x99, "//anon");
        sample(&mut m, 1, 1, 0x1010);
        sample(&mut m, 2, 1, 0x1020);
        assert_eq!(
            only_location(&m),
            Location::Module {
                module: anon,
                offset: 0
            }
        );
        assert!(!m.modules[anon as usize].is_file);
    }

    #[test]
    fn vdso_offsets_count_from_the_mapping_start() {
        let mut m = Model::default();
        let vdso = mmap(&mut m, 1, 0x7fff_0000, 0x2000, 0x7fff_0000, VDSO);
        sample(&mut m, 1, 1, 0x7fff_0123);
        assert_eq!(
            only_location(&m),
            Location::Module {
                module: vdso,
                offset: 0x123
            }
        );
    }

    #[test]
    fn kernel_samples_keep_their_address_and_count_in_their_window() {
        let mut m = Model::default();
        // A user mapping that would (wrongly) cover the address if kernel
        // samples were looked up in the process's address space.
        mmap(&mut m, 1, 0x1000, 0x1000, 0, "/a");
        let window = |t: u64| (t < 100).then_some(0);
        let ip = 0xffff_ffff_8100_1234;
        m.apply(
            10,
            Event::Sample {
                pid: 1,
                tid: 1,
                ip,
                kernel: true,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        m.apply(
            20,
            Event::Sample {
                pid: 1,
                tid: 1,
                ip: 0x1010,
                kernel: true,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        m.apply(
            150,
            Event::Sample {
                pid: 1,
                tid: 1,
                ip,
                kernel: true,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        assert_eq!(m.counts[&(0, Location::Kernel { address: ip })], 1);
        assert_eq!(m.counts[&(0, Location::Kernel { address: 0x1010 })], 1);
        assert_eq!(m.windows[0].samples, 2);
        assert_eq!(m.outside.samples, 1);
        // A record without the kernel flag but with a kernel-half address.
        let rec = Record::Sample {
            pid: 1,
            tid: 1,
            ip,
            kernel: false,
            time: 5,
            counters: CounterValues::default(),
            chain: &[],
            user: None,
        };
        let (_, ev) = m.event(&rec).expect("event");
        assert_eq!(
            ev,
            Event::Sample {
                pid: 1,
                tid: 1,
                ip,
                kernel: true,
                stream: 0,
                counters: CounterValues::default(),
            }
        );
    }

    #[test]
    fn an_exit_sorts_after_the_samples_of_its_instant_and_samples_keep_their_stream() {
        let sample = Event::Sample {
            pid: 1,
            tid: 2,
            ip: 3,
            kernel: false,
            stream: 0,
            counters: CounterValues::new(&[5]).expect("one"),
        };
        let exit = Event::Exit { pid: 1, tid: 2 };
        assert!(exit.rank() > sample.rank());
        let cpu = Event::ThreadCpu {
            pid: 1,
            tid: 2,
            ns: 5,
            stream: 0,
        };
        assert!(exit.rank() > cpu.rank());
        let fork = Event::Fork {
            pid: 2,
            ppid: 1,
            tid: 2,
        };
        assert!(fork.rank() < sample.rank());
        assert!(matches!(
            sample.on_stream(7),
            Event::Sample { stream: 7, counters, .. } if counters.as_slice() == [5]
        ));
        assert_eq!(exit.on_stream(7), exit);
    }

    #[test]
    fn lost_and_samples_land_in_their_window() {
        let mut m = Model::default();
        // Windows [0, 100) and [120, 200).
        let window = |t: u64| match t {
            0..100 => Some(0),
            120..200 => Some(1),
            _ => None,
        };
        m.apply(
            50,
            Event::Sample {
                pid: 9,
                tid: 9,
                ip: 1,
                kernel: false,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        m.apply(
            110,
            Event::Sample {
                pid: 9,
                tid: 9,
                ip: 1,
                kernel: false,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        m.apply(150, Event::Lost { count: 3 }, window);
        m.apply(
            160,
            Event::Sample {
                pid: 9,
                tid: 9,
                ip: 1,
                kernel: false,
                stream: 0,
                counters: CounterValues::default(),
            },
            window,
        );
        m.apply(170, Event::Throttle, window);
        m.apply(250, Event::Lost { count: 2 }, window);
        assert_eq!(
            m.outside,
            WindowCounts {
                samples: 1,
                lost: 2,
                throttled: 0
            }
        );
        assert_eq!(
            m.windows,
            vec![
                WindowCounts {
                    samples: 1,
                    lost: 0,
                    throttled: 0
                },
                WindowCounts {
                    samples: 1,
                    lost: 3,
                    throttled: 1
                }
            ]
        );
    }
}
