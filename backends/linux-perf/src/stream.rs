//! Every sample as it comes, to a [`SampleSink`] (`lotus trace run
//! --sample`): the drain thread hands each round's samples, already placed
//! in their module, to a writer thread that names the new locations, gives
//! each (function, module) an id and, with call stacks, each distinct
//! stack an id (a prefix tree of (caller stack, function) pairs), and
//! writes symbols, then stacks, then samples.
//!
//! A thread of its own because naming code (reading ELF symbol tables) is
//! slow next to draining ring buffers: the drain thread must not fall
//! behind. The queue between them is bounded by samples, so memory is
//! too: if the writer falls more than [`QUEUED_SAMPLES`] samples behind
//! (a call stack's frames counted as the part of a sample their memory is),
//! the drain thread waits, and the kernel counts what it could not buffer
//! as lost samples. The bound is in samples, not rounds, because the
//! writer's stalls are long and rare: the first sample in a large library
//! (torch's is hundreds of MB) makes it read that library's symbol table,
//! which takes seconds, while rounds come every few ms; a bound of a few
//! dozen rounds made the drain thread wait, and the kernel drop samples,
//! on every torch job.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use lotus_core::Error as CoreError;
use lotus_samples::{CounterValues, Sample, SampleSink, StackNode, Symbol, MAX_NATIVE_DEPTH};

use crate::model::{locate_in, AddressSpace, Location, ModuleId};
use crate::symbolize::LocationNamer;
use lotus_samples::SharedFolds;
use lotus_symbols::{CodeMapping, Module, UserStack};

/// Samples queued between the drain thread and the writer, at most: about
/// 40 MiB, two minutes of a busy two-CPU job at 4 kHz. The frames of a
/// queued call stack count as the share of a sample their memory is
/// ([`queued_weight`]), so stacks do not raise the bound's memory.
pub(crate) const QUEUED_SAMPLES: usize = 1 << 20;

/// What a round holds against [`QUEUED_SAMPLES`]: a sample each, and its
/// frames as many samples as their bytes make.
fn queued_weight(round: &[Placed]) -> usize {
    let per_sample = std::mem::size_of::<Placed>() / std::mem::size_of::<Location>();
    let frames: usize = round.iter().map(|p| p.frames.len()).sum();
    let stacks: usize = round
        .iter()
        .filter_map(|p| p.user.as_ref())
        .map(|u| u.stack.len())
        .sum();
    round.len() + frames / per_sample.max(1) + stacks / std::mem::size_of::<Placed>()
}

/// One sample placed in its module.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub time: u64,
    /// Its window's index (0 where the windows are summed).
    pub window: usize,
    pub pid: u32,
    pub tid: u32,
    pub loc: Location,
    pub kernel: bool,
    /// The counters' deltas since the thread's previous sample.
    pub counters: CounterValues,
    /// Its call chain, innermost first (empty: none): with user stacks,
    /// the kernel's frames only, until the writer unwinds `user`'s.
    pub frames: Vec<Location>,
    /// Its user registers and stack copy, to unwind (`--stacks dwarf`)
    /// with its process's mappings as the writer has replayed them up to
    /// this sample (see [`Change`]).
    pub user: Option<Box<UserCopy>>,
}

/// A sample's user registers and a copy of its user stack.
#[derive(Debug, Clone)]
pub(crate) struct UserCopy {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// From `sp` up.
    pub stack: Vec<u8>,
}

/// A change to a process's mappings, sent to the writer in time order
/// with the samples, which replays them into mappings of its own to unwind
/// user stacks with: a sample carries no copy of its process's mappings
/// (a copy per sample, of a process with tens of thousands of mappings
/// that maps and unmaps in a loop, made lotus hold gigabytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// `pid` mapped `mapping` (replacing what it overlaps).
    Map { pid: u32, mapping: CodeMapping },
    /// `pid` was forked from `ppid`: it has its parent's mappings.
    Fork { pid: u32, ppid: u32 },
    /// `pid` ran a new program: no mappings.
    Exec { pid: u32 },
    /// `pid` ended a while ago: its mappings are dropped.
    Gone { pid: u32 },
}

enum Message {
    /// Modules first seen since the last message, in id order.
    Modules(Vec<Module>),
    /// One round's samples, in time order, and the mapping changes among
    /// them, each with the index of the first sample after it.
    Samples(Vec<Placed>, Vec<(usize, Change)>),
}

/// What the writer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamSummary {
    /// Samples written.
    pub samples: u64,
    /// Distinct (function, module) symbols written.
    pub symbols: u64,
    /// Distinct call stacks written (0 without stacks).
    pub stacks: u64,
    /// Samples written with a stack of two frames or more.
    pub deep_samples: u64,
    /// The first write error, after which nothing more was written.
    pub error: Option<String>,
    /// Why kernel functions are unnamed, where they are.
    pub kernel_note: Option<String>,
    /// Samples that could not be named, with how many and why (a module
    /// that could not be read; kernel functions, `kernel_note` with the
    /// figure): what to show, `kernel_note` included.
    pub notes: Vec<String>,
}

/// The drain thread's end of the stream.
pub(crate) struct Stream {
    tx: Sender<Message>,
    queue: Arc<Queue>,
    modules_sent: usize,
    round: Vec<Placed>,
    changes: Vec<(usize, Change)>,
}

impl Stream {
    /// Starts the writer thread, which owns `sink`; every sample carries
    /// `counters` counter values, and a stack where `stacks`.
    pub(crate) fn start(
        mut sink: Box<dyn SampleSink>,
        counters: usize,
        stacks: bool,
        folds: Option<SharedFolds>,
        symbols: Arc<lotus_symbols::SymbolCache>,
    ) -> Result<(Stream, JoinHandle<StreamSummary>), CoreError> {
        sink.counters(counters).map_err(|source| CoreError::Io {
            context: "preparing the samples file for counters".into(),
            source,
        })?;
        if stacks {
            sink.with_stacks().map_err(|source| CoreError::Io {
                context: "preparing the samples file for call stacks".into(),
                source,
            })?;
        }
        let (tx, rx) = channel();
        let queue = Arc::new(Queue::default());
        let writer_queue = Arc::clone(&queue);
        let handle = std::thread::Builder::new()
            .name("lotus-perf-samples".into())
            .spawn(move || {
                let _gone = Gone(Arc::clone(&writer_queue));
                write(rx, sink, &writer_queue, stacks, folds, symbols)
            })
            .map_err(|source| CoreError::Io {
                context: "starting the sample writer thread".into(),
                source,
            })?;
        Ok((
            Stream {
                tx,
                queue,
                modules_sent: 0,
                round: Vec::new(),
                changes: Vec::new(),
            },
            handle,
        ))
    }

    /// Queues one sample of this round.
    pub(crate) fn push(&mut self, sample: Placed) {
        self.round.push(sample);
    }

    /// Queues a change of the mappings, after the samples pushed so far
    /// (a fork also tells the namer: a forked worker's frames from before
    /// the fork are named from its parent's perf map).
    pub(crate) fn change(&mut self, change: Change) {
        self.changes.push((self.round.len(), change));
    }

    /// Sends the round's samples and changes (and the modules they may
    /// need).
    pub(crate) fn end_round(&mut self, modules: &[Module]) {
        if self.round.is_empty() && self.changes.is_empty() {
            return;
        }
        if modules.len() > self.modules_sent {
            let new = modules[self.modules_sent..].to_vec();
            self.modules_sent = modules.len();
            // A writer that is gone has reported why in its summary.
            let _ = self.tx.send(Message::Modules(new));
        }
        let round = std::mem::take(&mut self.round);
        let changes = std::mem::take(&mut self.changes);
        let weight = queued_weight(&round) + changes.len();
        self.queue.wait_for_room(weight);
        self.queue.samples.fetch_add(weight, Ordering::AcqRel);
        let _ = self.tx.send(Message::Samples(round, changes));
    }
}

/// What the two threads share about the queue.
#[derive(Default)]
struct Queue {
    /// Samples sent and not yet written.
    samples: AtomicUsize,
    /// The writer has returned (or panicked): nothing will drain the queue.
    gone: AtomicBool,
}

impl Queue {
    /// Waits while adding `n` samples would pass the bound, unless the
    /// writer is gone (then nothing is waited for: its summary says why).
    fn wait_for_room(&self, n: usize) {
        while self.samples.load(Ordering::Acquire) + n > QUEUED_SAMPLES
            && self.samples.load(Ordering::Acquire) > 0
            && !self.gone.load(Ordering::Acquire)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Marks the queue's writer gone when the writer thread ends, however.
struct Gone(Arc<Queue>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.gone.store(true, Ordering::Release);
    }
}

fn write(
    rx: Receiver<Message>,
    mut sink: Box<dyn SampleSink>,
    queue: &Queue,
    with_stacks: bool,
    folds: Option<SharedFolds>,
    symbols: Arc<lotus_symbols::SymbolCache>,
) -> StreamSummary {
    let mut summary = StreamSummary::default();
    let mut modules: Vec<Module> = Vec::new();
    let mut ids: HashMap<Location, u32> = HashMap::default();
    let mut by_symbol: HashMap<Symbol, u32> = HashMap::default();
    let mut namer = LocationNamer::new(Arc::clone(&symbols));
    let mut block: Vec<Sample> = Vec::new();
    let mut stacks = Stacks::default();
    let mut stack_ids: Vec<u32> = Vec::new();
    let mut last = LastStacks::default();
    let mut shared: Vec<usize> = Vec::new();
    let mut unwinders = Unwinders::new(symbols);
    // Keeps receiving after an error, so the drain thread never waits.
    for message in rx {
        let round = match message {
            Message::Modules(new) => {
                modules.extend(new);
                continue;
            }
            Message::Samples(round, changes) => (round, changes),
        };
        let (mut round, changes) = round;
        // Counted off before the work: the bound is on samples held here
        // and in the channel, and this round is held until the loop ends.
        queue
            .samples
            .fetch_sub(queued_weight(&round) + changes.len(), Ordering::AcqRel);
        let mut changes = changes.into_iter().peekable();
        for (i, p) in round.iter_mut().enumerate() {
            while let Some((_, change)) = changes.next_if(|(at, _)| *at <= i) {
                unwinders.change(change, &mut namer);
            }
            if let Some(user) = p.user.take() {
                if summary.error.is_none() {
                    unwinders.unwind(&modules, p.pid, &user, &mut p.frames);
                }
            }
        }
        for (_, change) in changes {
            unwinders.change(change, &mut namer);
        }
        if summary.error.is_some() {
            continue;
        }
        // The outer frames each sample shares with its thread's previous
        // one are named and interned already: only the rest are looked up.
        shared.clear();
        if with_stacks {
            shared.extend(round.iter().map(|p| last.share(p.tid, &p.frames)));
        } else {
            shared.resize(round.len(), 0);
        }
        let mut new_locs: Vec<Location> = round
            .iter()
            .zip(&shared)
            .flat_map(|(p, &n)| std::iter::once(&p.loc).chain(LastStacks::unshared(&p.frames, n)))
            .copied()
            .filter(|l| !ids.contains_key(l))
            .collect();
        new_locs.sort_unstable();
        new_locs.dedup();
        let mut new_symbols = Vec::new();
        for (loc, (function, module)) in new_locs.iter().zip(namer.name(&modules, &new_locs)) {
            let symbol = Symbol::new(&function, &module);
            let next = by_symbol.len() as u32;
            let id = *by_symbol.entry(symbol.clone()).or_insert_with(|| {
                new_symbols.push((next, symbol));
                next
            });
            ids.insert(*loc, id);
        }
        namer.count(round.iter().map(|p| p.loc));
        block.clear();
        block.extend(round.iter().map(|p| Sample {
            time_ns: p.time,
            pid: p.pid,
            tid: p.tid,
            symbol: ids[&p.loc],
            kernel: p.kernel,
            counters: p.counters,
        }));
        let mut new_stacks = Vec::new();
        if with_stacks {
            stack_ids.clear();
            for (p, &n) in round.iter().zip(&shared) {
                let id = last.intern(p.tid, &p.frames, n, &mut stacks, &mut new_stacks, &ids);
                summary.deep_samples += u64::from(p.frames.len() >= 2);
                stack_ids.push(id);
            }
        }
        if let Some(folds) = &folds {
            let mut f = folds.lock().unwrap_or_else(|p| p.into_inner());
            f.learn(&new_symbols, &new_stacks);
            for (i, p) in round.iter().enumerate() {
                let stack = if with_stacks {
                    stack_ids.get(i).copied().unwrap_or(0)
                } else {
                    0
                };
                f.count_sample(p.window, ids[&p.loc], stack);
            }
        }
        let written = sink.symbols(&new_symbols).and_then(|()| {
            if with_stacks {
                sink.stacks(&new_stacks)?;
                sink.samples_with_stacks(&block, &stack_ids)
            } else {
                sink.samples(&block)
            }
        });
        match written {
            Ok(()) => {
                summary.samples += block.len() as u64;
                summary.symbols += new_symbols.len() as u64;
                summary.stacks += new_stacks.len() as u64;
            }
            Err(e) => summary.error = Some(e.to_string()),
        }
    }
    if summary.error.is_none() {
        if let Err(e) = sink.finish() {
            summary.error = Some(e.to_string());
        }
    }
    summary.notes = namer.notes();
    summary.kernel_note = namer.kernel_note.take();
    summary
}

/// The processes' mappings as the writer replays them ([`Change`]), and
/// their unwinders ([`lotus_symbols::Unwinders`]), told of each change.
struct Unwinders {
    /// Each process's mappings (shared with a forked child until one of
    /// them changes).
    spaces: HashMap<u32, Arc<AddressSpace>>,
    unwinders: lotus_symbols::Unwinders,
    /// The address list of the walk in progress.
    addresses: Vec<u64>,
}

/// The kernel's name for anonymous memory in a mapping record.
const ANON: &str = "//anon";

impl Unwinders {
    /// No mappings yet; tables read through `symbols`.
    fn new(symbols: Arc<lotus_symbols::SymbolCache>) -> Unwinders {
        Unwinders {
            spaces: HashMap::default(),
            unwinders: lotus_symbols::Unwinders::new(symbols),
            addresses: Vec::new(),
        }
    }

    /// Replays a change of the mappings.
    fn change(&mut self, change: Change, namer: &mut LocationNamer) {
        match change {
            Change::Map { pid, mapping } => {
                // Forgotten mappings are counted by the drain thread's
                // model, which replays the same changes.
                let _ = Arc::make_mut(self.spaces.entry(pid).or_default()).insert(mapping);
                self.unwinders.changed(pid, mapping.start, mapping.end);
            }
            Change::Fork { pid, ppid } => {
                namer.forked(pid, ppid);
                if pid != ppid {
                    let space = self.spaces.get(&ppid).cloned().unwrap_or_default();
                    self.spaces.insert(pid, space);
                    self.unwinders.forget(pid);
                }
            }
            Change::Exec { pid } => {
                self.spaces.insert(pid, Arc::default());
                self.unwinders.forget(pid);
            }
            Change::Gone { pid } => {
                self.spaces.remove(&pid);
                self.unwinders.forget(pid);
            }
        }
    }

    /// Appends to `frames` the user frames of `user`'s stack, innermost
    /// first, placed in their mappings, so that `frames` holds at most
    /// [`MAX_NATIVE_DEPTH`].
    fn unwind(
        &mut self,
        modules: &[Module],
        pid: u32,
        user: &UserCopy,
        frames: &mut Vec<Location>,
    ) {
        let max = MAX_NATIVE_DEPTH.saturating_sub(frames.len());
        if max == 0 {
            return;
        }
        let space = self.spaces.get(&pid).cloned().unwrap_or_default();
        let stack = UserStack {
            ip: user.ip,
            sp: user.sp,
            bp: user.bp,
            stack: &user.stack,
        };
        self.addresses.clear();
        let mappings = |lo, hi| space.overlapping(lo, hi);
        (self.unwinders).unwind(modules, pid, &stack, max, &mut self.addresses, mappings);
        let keeps = |m: ModuleId| modules.get(m as usize).is_some_and(Module::keeps_offsets);
        // Code outside every file (a JIT's, CPython's trampolines) keeps
        // its address, for the process's perf map to name.
        let jit = |m: ModuleId| modules.get(m as usize).is_some_and(|m| m.name == ANON);
        frames.extend(self.addresses.iter().map(|&address| {
            match locate_in(&space, address, keeps) {
                Location::Unmapped => Location::Jit { pid, address },
                Location::Module { module, .. } if jit(module) => Location::Jit { pid, address },
                other => other,
            }
        }));
    }
}

/// Each thread's last stack, outermost frame first, with the stack id at
/// each depth. Consecutive samples of one thread share most of their
/// outer frames (a Python job's stacks were 84 frames deep on average,
/// and only the innermost few change between two samples), so the frames
/// of that shared prefix need no lookup of their symbol and no walk of
/// the prefix tree: [`Stacks::intern`] by itself hashed every frame of
/// every sample, a quarter of the writer's CPU at the defaults.
#[derive(Default)]
struct LastStacks {
    by_tid: HashMap<u32, LastStack>,
}

/// One thread's last stack: its kept frames, outermost first, and the
/// stack id of each prefix (`ids[k]`: the frames `0..=k`), filled when it
/// is interned.
#[derive(Default)]
struct LastStack {
    frames: Vec<Location>,
    ids: Vec<u32>,
}

/// Threads remembered at most: past it the memory is given back and the
/// next sample of each thread starts afresh (only speed is lost).
const LAST_STACK_THREADS: usize = 4096;

impl LastStacks {
    /// The frames of `frames` (innermost first, as unwound) that a stack
    /// keeps: the innermost [`MAX_NATIVE_DEPTH`], outermost first.
    fn kept(frames: &[Location]) -> impl Iterator<Item = &Location> {
        frames[..frames.len().min(MAX_NATIVE_DEPTH)].iter().rev()
    }

    /// How many outer frames the sample of `tid` with `frames` shares with
    /// that thread's previous sample, which it then becomes.
    fn share(&mut self, tid: u32, frames: &[Location]) -> usize {
        if self.by_tid.len() >= LAST_STACK_THREADS && !self.by_tid.contains_key(&tid) {
            self.by_tid.clear();
        }
        let last = self.by_tid.entry(tid).or_default();
        let n = Self::kept(frames)
            .zip(&last.frames)
            .take_while(|(a, b)| a == b)
            .count();
        last.frames.truncate(n);
        last.frames.extend(Self::kept(frames).skip(n).copied());
        // Ids are told by `intern` in the same order; until then those
        // past the shared prefix are stale.
        last.ids.truncate(n);
        n
    }

    /// The frames of a sample not in its `shared` outer prefix.
    fn unshared(frames: &[Location], shared: usize) -> impl Iterator<Item = &Location> {
        let kept = frames.len().min(MAX_NATIVE_DEPTH);
        frames[..kept - shared].iter().chain(&frames[kept..])
    }

    /// The stack id of a sample of `tid` whose `shared` outer frames are
    /// its thread's previous sample's: that prefix's id, extended by the
    /// rest through `stacks`. Called for the samples in the order
    /// [`Self::share`] saw them.
    fn intern(
        &mut self,
        tid: u32,
        frames: &[Location],
        shared: usize,
        stacks: &mut Stacks,
        new: &mut Vec<StackNode>,
        ids: &HashMap<Location, u32>,
    ) -> u32 {
        let last = self.by_tid.entry(tid).or_default();
        // A thread forgotten between `share` and here has no ids: walk it
        // all.
        let shared = shared.min(last.ids.len());
        last.ids.truncate(shared);
        let mut parent = last.ids.last().copied().unwrap_or(0);
        for l in Self::kept(frames).skip(shared) {
            parent = stacks.child(parent, ids[l], new);
            last.ids.push(parent);
        }
        parent
    }
}

/// The stacks written so far, as a prefix tree: each (parent stack,
/// innermost symbol) has one id, from 1 (0: no stack). Memory grows with
/// distinct stacks, not samples.
#[derive(Default)]
struct Stacks {
    ids: HashMap<(u32, u32), u32>,
}

impl Stacks {
    /// The walk of every frame from the root, which [`LastStacks::intern`]
    /// shortens: what the tests compare it with.
    #[cfg(test)]
    /// The id of the stack of `frames` (symbol ids, outermost first, the
    /// innermost [`MAX_NATIVE_DEPTH`] kept), adding to `new` the stacks not
    /// seen before, each after its parent; 0 for no frames.
    fn intern(
        &mut self,
        frames: impl ExactSizeIterator<Item = u32>,
        new: &mut Vec<StackNode>,
    ) -> u32 {
        let skip = frames.len().saturating_sub(MAX_NATIVE_DEPTH);
        let mut parent = 0;
        for symbol in frames.skip(skip) {
            parent = self.child(parent, symbol, new);
        }
        parent
    }

    /// The id of the stack `parent` then `symbol`, added to `new` if it
    /// is new.
    fn child(&mut self, parent: u32, symbol: u32, new: &mut Vec<StackNode>) -> u32 {
        let next = self.ids.len() as u32 + 1;
        *self.ids.entry((parent, symbol)).or_insert_with(|| {
            new.push(StackNode::new(next, parent, symbol));
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A sink that takes its time over the first symbols, as naming a
    /// large library's first sample does.
    struct SlowFirst {
        delay: Option<Duration>,
        samples: u64,
    }

    impl SampleSink for SlowFirst {
        fn counters(&mut self, _count: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn symbols(&mut self, _new: &[(u32, Symbol)]) -> std::io::Result<()> {
            if let Some(d) = self.delay.take() {
                std::thread::sleep(d);
            }
            Ok(())
        }
        fn samples(&mut self, block: &[Sample]) -> std::io::Result<()> {
            self.samples += block.len() as u64;
            Ok(())
        }
        fn finish(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn placed(time: u64) -> Placed {
        Placed {
            time,
            window: 0,
            pid: 1,
            tid: 1,
            loc: Location::Unmapped,
            kernel: false,
            counters: CounterValues::default(),
            frames: Vec::new(),
            user: None,
        }
    }

    /// A queued stack counts by its memory: 127 frames weigh several
    /// samples, no frames none more than the sample.
    #[test]
    fn queued_stacks_count_against_the_bound_by_their_memory() {
        let bare = vec![placed(1); 10];
        assert_eq!(queued_weight(&bare), 10);
        let mut deep = placed(1);
        deep.frames = vec![Location::Unmapped; 127];
        let per = std::mem::size_of::<Placed>() / std::mem::size_of::<Location>();
        assert_eq!(queued_weight(&[deep]), 1 + 127 / per);
        assert!(queued_weight(&[placed(2)]) == 1 && per >= 2, "{per}");
        // A stack copy weighs its bytes: many samples' worth.
        let bytes = crate::records::USER_STACK_BYTES as usize;
        let mut copied = placed(3);
        copied.user = Some(Box::new(UserCopy {
            ip: 0,
            sp: 0,
            bp: 0,
            stack: vec![0; bytes],
        }));
        assert_eq!(
            queued_weight(&[copied]),
            1 + bytes / std::mem::size_of::<Placed>()
        );
    }

    /// Stacks are a prefix tree: a shared caller chain is stored once,
    /// each stack after its parent, and deeper chains keep their
    /// innermost frames.
    #[test]
    fn stacks_are_interned_as_a_prefix_tree() {
        let mut stacks = Stacks::default();
        let mut new = Vec::new();
        assert_eq!(stacks.intern([].into_iter(), &mut new), 0);
        let a = stacks.intern([7, 8, 9].into_iter(), &mut new);
        assert_eq!(
            new,
            vec![
                StackNode::new(1, 0, 7),
                StackNode::new(2, 1, 8),
                StackNode::new(3, 2, 9)
            ]
        );
        assert_eq!(a, 3);
        new.clear();
        assert_eq!(stacks.intern([7, 8, 9].into_iter(), &mut new), 3);
        assert!(new.is_empty());
        assert_eq!(stacks.intern([7, 8, 5].into_iter(), &mut new), 4);
        assert_eq!(new, vec![StackNode::new(4, 2, 5)]);
        new.clear();
        let deep: Vec<u32> = (0..MAX_NATIVE_DEPTH as u32 + 10).collect();
        stacks.intern(deep.into_iter(), &mut new);
        assert_eq!(new.len(), MAX_NATIVE_DEPTH);
        assert_eq!((new[0].parent, new[0].symbol), (0, 10));
    }

    /// Walking only past each thread's shared prefix gives every sample
    /// the stack id, and `new` the nodes in the order, that walking all its
    /// frames from the root gives: rounds of samples of a few threads whose
    /// stacks grow, shrink and change at random depths, the same thread
    /// more than once in a round, stacks deeper than the kept depth, and
    /// more threads than are remembered.
    #[test]
    fn sharing_the_previous_stack_gives_the_ids_of_a_walk_from_the_root() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let loc = |address: u64| Location::Kernel { address };
        let ids: HashMap<Location, u32> = (0..40u64).map(|a| (loc(a), a as u32)).collect();
        let (mut reference, mut walked) = (Stacks::default(), Vec::new());
        let (mut stacks, mut new, mut last) =
            (Stacks::default(), Vec::new(), LastStacks::default());
        // Each thread's current stack, outermost first.
        let mut current: HashMap<u32, Vec<u64>> = HashMap::default();
        for round in 0..400 {
            let threads = if round % 50 == 49 {
                LAST_STACK_THREADS as u32 + 3
            } else {
                4
            };
            let samples: Vec<(u32, Vec<Location>)> = (0..1 + next(12))
                .map(|_| {
                    let tid = next(u64::from(threads)) as u32;
                    let stack = current.entry(tid).or_default();
                    let keep = next(stack.len() as u64 + 1) as usize;
                    stack.truncate(keep);
                    let deep = if next(30) == 0 {
                        MAX_NATIVE_DEPTH + 5
                    } else {
                        90
                    };
                    for _ in 0..next(6) {
                        if stack.len() < deep {
                            stack.push(next(40));
                        }
                    }
                    // Innermost first, as unwound.
                    (tid, stack.iter().rev().map(|&a| loc(a)).collect())
                })
                .collect();
            let shared: Vec<usize> = samples.iter().map(|(t, f)| last.share(*t, f)).collect();
            for ((tid, frames), n) in samples.iter().zip(shared) {
                let unshared: Vec<Location> = LastStacks::unshared(frames, n).copied().collect();
                let kept = frames.len().min(MAX_NATIVE_DEPTH);
                assert_eq!(unshared.len(), frames.len() - n, "{kept} kept, {n} shared");
                let want = reference.intern(frames.iter().rev().map(|l| ids[l]), &mut walked);
                let got = last.intern(*tid, frames, n, &mut stacks, &mut new, &ids);
                assert_eq!(got, want, "round {round}, thread {tid}, {n} shared");
                assert_eq!(new, walked, "round {round}");
            }
        }
        assert!(
            walked.len() > 1000,
            "{} stacks: the walk was too tame",
            walked.len()
        );
    }

    /// Rounds keep coming while the writer is stuck on its first names:
    /// the drain side does not wait for it (it used to after 64 rounds),
    /// and every sample is written in the end.
    #[test]
    fn a_stalled_writer_does_not_hold_up_the_drain_thread() {
        let sink = SlowFirst {
            delay: Some(Duration::from_millis(500)),
            samples: 0,
        };
        let (mut stream, writer) =
            Stream::start(Box::new(sink), 0, false, None, Arc::default()).expect("start");
        let started = Instant::now();
        for round in 0..1000u64 {
            for i in 0..10 {
                stream.push(placed(round * 10 + i));
            }
            stream.end_round(&[]);
        }
        let queued = started.elapsed();
        drop(stream);
        let summary = writer.join().expect("writer");
        assert_eq!(summary.samples, 10_000);
        assert!(
            queued < Duration::from_millis(400),
            "the drain side waited {queued:?} for the writer"
        );
    }

    /// Past the bound the drain side waits, and stops waiting once the
    /// writer is gone.
    #[test]
    fn the_queue_bound_is_in_samples_and_a_gone_writer_frees_it() {
        let q = Queue::default();
        q.samples.store(QUEUED_SAMPLES, Ordering::Release);
        q.gone.store(true, Ordering::Release);
        q.wait_for_room(1); // returns: nobody will drain it
        let q = Arc::new(Queue::default());
        q.samples.store(QUEUED_SAMPLES, Ordering::Release);
        let drainer = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                q.samples.store(0, Ordering::Release);
            })
        };
        let started = Instant::now();
        q.wait_for_room(1);
        assert!(started.elapsed() >= Duration::from_millis(40));
        drainer.join().expect("drainer");
    }
}
