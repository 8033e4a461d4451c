//! What views and statistics need from a whole trace, gathered in one pass
//! over its events: the processes, every batch, wait and consumption, the
//! count and total of every op name and kind, and, for statistics, every
//! event's duration (exact percentiles need them all, counted per distinct
//! value: see `durations`). Batches, waits, consumptions and durations go
//! through [`lotus_sort`]: in memory up to a [`Budget`], in unlinked
//! temporary files past it, so memory stays flat however long the trace.
//!
//! Batches are matched to their consumption within a *group*: the logs of
//! one run, which share a folder, a host and a rank (a process whose log
//! names neither host nor rank joins the one group of its folder that
//! does, where there is exactly one). Batch ids restart
//! every epoch (and each DataLoader has its own), so within a group the
//! k-th preprocessing of batch `b` (in order of its end) is matched with
//! the k-th consumption of `b` and the k-th wait for `b` (in time order).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::event::{BlockReader, Event, Kind, Process, Role};
use super::folder::{Handed, LogFile, TraceFolder};
use super::parse::BadLine;
use super::stats::WaitBucket;
use super::{TraceError, Warnings};
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Budget, Record, Sorter, SpillError, Spool};

mod block;
mod durations;
use block::BlockSummary;
pub(crate) use durations::{DurCount, Durations};

/// A process of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessEntry {
    /// Its pid, role, host and rank.
    pub process: Process,
    /// The folder of its logs, relative to the trace folder.
    pub folder: String,
    /// The pid it gets in a Chrome trace: its own, unless another process
    /// (another machine, another run) already has that pid; then its pid
    /// plus a multiple of [`PID_STRIDE`].
    pub out_pid: u64,
    /// Its log files.
    pub files: Vec<String>,
    /// How many events it logged.
    pub events: u64,
}

/// What is added to a pid that another process of the trace already has.
pub const PID_STRIDE: u64 = 100_000_000;

/// A batch's preprocessing in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BatchRec {
    /// The process (index into [`TraceIndex::processes`]).
    pub process: usize,
    /// The batch id.
    pub batch: Option<u64>,
    /// Start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// Its place among all events of the trace, in reading order (from 0).
    pub ordinal: u64,
}

impl Record for BatchRec {
    const SIZE: usize = 41;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.process as u64)
            .opt_u64(self.batch)
            .u64(self.start_ns)
            .u64(self.dur_ns)
            .u64(self.ordinal);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        BatchRec {
            process: g.u64() as usize,
            batch: g.opt_u64(),
            start_ns: g.u64(),
            dur_ns: g.u64(),
            ordinal: g.u64(),
        }
    }
}

/// A wait of the main process, or a consumption (duration 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MainRec {
    /// The process (index into [`TraceIndex::processes`]).
    pub process: usize,
    /// The batch id.
    pub batch: Option<u64>,
    /// Start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// For a wait: whether the batch was already there.
    pub ready: Option<bool>,
    /// Its place among all events of the trace, in reading order (from 0).
    pub ordinal: u64,
}

impl Record for MainRec {
    const SIZE: usize = 42;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.process as u64)
            .opt_u64(self.batch)
            .u64(self.start_ns)
            .u64(self.dur_ns)
            .opt_bool(self.ready)
            .u64(self.ordinal);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        MainRec {
            process: g.u64() as usize,
            batch: g.opt_u64(),
            start_ns: g.u64(),
            dur_ns: g.u64(),
            ready: g.opt_bool(),
            ordinal: g.u64(),
        }
    }
}

/// A batch keyed for matching: group, id, then order of end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct KeyedBatch {
    group: u32,
    id: u64,
    end: u64,
    rec: BatchRec,
}

impl Record for KeyedBatch {
    const SIZE: usize = 20 + BatchRec::SIZE;
    fn encode(&self, out: &mut [u8]) {
        Put::new(&mut out[..20])
            .u32(self.group)
            .u64(self.id)
            .u64(self.end);
        self.rec.encode(&mut out[20..]);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(&b[..20]);
        KeyedBatch {
            group: g.u32(),
            id: g.u64(),
            end: g.u64(),
            rec: BatchRec::decode(&b[20..]),
        }
    }
}

/// A wait or consumption keyed for matching: group, id, then time order
/// (the record starts with its start and duration after the process;
/// the key repeats them first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct KeyedMain {
    group: u32,
    id: u64,
    start: u64,
    dur: u64,
    rec: MainRec,
}

impl KeyedMain {
    fn key(&self) -> (u32, u64) {
        (self.group, self.id)
    }
}

impl Record for KeyedMain {
    const SIZE: usize = 28 + MainRec::SIZE;
    fn encode(&self, out: &mut [u8]) {
        Put::new(&mut out[..28])
            .u32(self.group)
            .u64(self.id)
            .u64(self.start)
            .u64(self.dur);
        self.rec.encode(&mut out[28..]);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(&b[..28]);
        KeyedMain {
            group: g.u32(),
            id: g.u64(),
            start: g.u64(),
            dur: g.u64(),
            rec: MainRec::decode(&b[28..]),
        }
    }
}

/// What durations are summed and summarized under: one op name, or one
/// kind other than op (all its names together).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurationKey {
    /// The kind.
    pub kind: Kind,
    /// The op name, for kind op; `None` for a whole kind.
    pub name: Option<String>,
    /// How many events.
    pub count: u64,
    /// Their total duration, ns.
    pub total_ns: i128,
    /// How many of them say their own thread's CPU time (`cpu=`).
    pub cpu_count: u64,
    /// That CPU time summed, ns.
    pub cpu_ns: u128,
}

/// The next record of a sorted stream, kept for a look before taking it.
struct Head<I: Iterator<Item = Result<KeyedMain, SpillError>>> {
    it: I,
    head: Option<KeyedMain>,
}

impl<I: Iterator<Item = Result<KeyedMain, SpillError>>> Head<I> {
    fn new(mut it: I) -> Result<Self, SpillError> {
        let head = it.next().transpose()?;
        Ok(Head { it, head })
    }

    /// The record with `key`, skipping those before it; `None` when the
    /// next one has a later key.
    fn take(&mut self, key: (u32, u64)) -> Result<Option<MainRec>, SpillError> {
        while let Some(h) = self.head {
            if h.key() < key {
                self.head = self.it.next().transpose()?;
            } else if h.key() == key {
                self.head = self.it.next().transpose()?;
                return Ok(Some(h.rec));
            } else {
                break;
            }
        }
        Ok(None)
    }
}

/// A batch with what happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchRow {
    /// Its preprocessing.
    pub preprocessing: BatchRec,
    /// Its consumption, where one matched.
    pub consume: Option<MainRec>,
    /// The main process's wait for it, where one matched.
    pub wait: Option<MainRec>,
}

impl BatchRow {
    /// When preprocessing ended, ns.
    pub(crate) fn end_ns(&self) -> u64 {
        self.preprocessing
            .start_ns
            .saturating_add(self.preprocessing.dur_ns)
    }

    /// From the end of preprocessing to the consumption, ns (negative
    /// where clocks disagree).
    pub(crate) fn delay_ns(&self) -> Option<i64> {
        self.consume
            .map(|c| (i128::from(c.start_ns) - i128::from(self.end_ns())) as i64)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProcKey {
    folder: String,
    host: Option<Arc<str>>,
    role: Role,
    pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct GroupKey {
    folder: String,
    host: Option<Arc<str>>,
    rank: Option<u32>,
}

/// The process of the events being added, kept while a file is read.
#[derive(Debug, Clone)]
struct Current {
    folder: String,
    file: String,
    last: Option<(Process, usize)>,
}

/// A whole trace, gathered.
#[derive(Debug)]
#[non_exhaustive]
pub struct TraceIndex {
    /// The processes, in the order they were met.
    pub processes: Vec<ProcessEntry>,
    proc_keys: HashMap<ProcKey, usize>,
    used_pids: HashSet<u64>,
    budget: Budget,
    batches: Spool<BatchRec>,
    waits: Spool<MainRec>,
    consumes: Spool<MainRec>,
    /// The main processes' spans starting workers, and stopping them.
    starts: Spool<MainRec>,
    stops: Spool<MainRec>,
    /// Events read.
    pub events: u64,
    /// Events per kind.
    pub per_kind: BTreeMap<Kind, u64>,
    /// The earliest start, ns.
    pub min_start_ns: Option<u64>,
    /// The latest end, ns.
    pub max_end_ns: Option<u64>,
    /// The duration keys: first one per kind, in [`Kind::ALL`]'s order
    /// (the op kind's stays unused), then one per op name, in the order
    /// met.
    pub keys: Vec<DurationKey>,
    op_keys: HashMap<String, u32>,
    durations: Option<Durations>,
    /// Waits per bucket ([`WaitBucket::ALL`]'s order): count and total, ns.
    pub wait_buckets: [(u64, u64); 4],
    /// The bad lines.
    pub warnings: Warnings,
    current: Option<Current>,
}

impl TraceIndex {
    /// An empty index; `collect_durations` keeps every event's duration
    /// (for statistics). Batches, waits, consumptions and durations are
    /// kept in memory up to `budget` each, then in temporary files.
    pub fn new(collect_durations: bool, budget: Budget) -> Self {
        TraceIndex {
            processes: Vec::new(),
            proc_keys: HashMap::new(),
            used_pids: HashSet::new(),
            budget,
            batches: Spool::new(budget),
            waits: Spool::new(budget),
            consumes: Spool::new(budget),
            starts: Spool::new(budget),
            stops: Spool::new(budget),
            events: 0,
            per_kind: BTreeMap::new(),
            min_start_ns: None,
            max_end_ns: None,
            keys: Kind::ALL
                .into_iter()
                .map(|kind| DurationKey {
                    kind,
                    name: None,
                    count: 0,
                    total_ns: 0,
                    cpu_count: 0,
                    cpu_ns: 0,
                })
                .collect(),
            op_keys: HashMap::new(),
            durations: collect_durations.then(|| Durations::new(budget)),
            wait_buckets: [(0, 0); 4],
            warnings: Warnings::default(),
            current: None,
        }
    }

    /// The memory budget of each sort and spool.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Reads every log of `folder`. `on_bad` sees each bad line as it is
    /// met (the index keeps the first [`Warnings::KEEP`] and the count).
    pub fn load(
        folder: &TraceFolder,
        collect_durations: bool,
        budget: Budget,
        on_bad: impl FnMut(&BadLine),
    ) -> Result<TraceIndex, TraceError> {
        TraceIndex::load_with(
            folder,
            collect_durations,
            budget,
            on_bad,
            |_| false,
            || (),
            |()| {},
        )
    }

    /// [`TraceIndex::load`], with a reader of the events of the kinds
    /// `want` takes (the predictions' model) fed by the index's own pass,
    /// not a second parse of the logs: each block's events go, in line
    /// order, to a reader `reader` makes for the block on its parsing
    /// thread (ops in brief, [`crate::OpSpan`]: most of a log's lines,
    /// and making each a whole [`Event`] was a fifth of `trace stats`);
    /// `each` then takes the blocks' readers in the order
    /// [`TraceFolder::read_all`] gives their lines.
    pub fn load_with<R: BlockReader>(
        folder: &TraceFolder,
        collect_durations: bool,
        budget: Budget,
        mut on_bad: impl FnMut(&BadLine),
        want: fn(Kind) -> bool,
        reader: impl Fn() -> R + Sync,
        mut each: impl FnMut(R),
    ) -> Result<TraceIndex, TraceError> {
        let mut index = TraceIndex::new(collect_durations, budget);
        // Each block is summed up on its parsing thread (see `block`).
        folder.read_blocks(
            |_| BlockSummary::wanting(collect_durations, want, reader()),
            |handed| -> Result<(), TraceError> {
                match handed {
                    Handed::File(log) => index.begin_file(log),
                    Handed::Block(summary) => {
                        let (part, summary) = summary.split();
                        each(part);
                        index.add_block(summary, &mut on_bad)?
                    }
                }
                Ok(())
            },
        )?;
        Ok(index)
    }

    /// Reads `folder` again, handing `f` each event with its process (as
    /// [`TraceIndex::resolve`] gives it: each log's file registered
    /// first); bad lines are skipped (this index counted them).
    pub fn each_event<E: From<TraceError>>(
        &mut self,
        folder: &TraceFolder,
        mut f: impl FnMut(usize, Event) -> Result<(), E>,
    ) -> Result<(), E> {
        folder.read_all(|item| -> Result<(), E> {
            match item {
                crate::Item::File(log) => self.begin_file(log),
                crate::Item::Entry(crate::Entry::Event(e)) => {
                    let p = self.resolve(&e);
                    return f(p, e);
                }
                crate::Item::Entry(crate::Entry::Bad(_)) => {}
            }
            Ok(())
        })
    }

    /// Sets the file whose events come next.
    pub fn begin_file(&mut self, log: &LogFile) {
        self.begin(&log.folder, &log.display);
    }

    /// Sets the folder (relative to the trace folder) and file whose
    /// events come next.
    pub fn begin(&mut self, folder: &str, file: &str) {
        self.current = Some(Current {
            folder: folder.to_string(),
            file: file.to_string(),
            last: None,
        });
    }

    /// The process of `e` (from the current file), registered if new.
    pub fn resolve(&mut self, e: &Event) -> usize {
        let cur = self.current.get_or_insert_with(|| Current {
            folder: String::new(),
            file: String::new(),
            last: None,
        });
        if let Some((p, idx)) = &cur.last {
            if p.pid == e.pid && p.role == e.role && p.host == e.host && p.rank == e.rank {
                return *idx;
            }
        }
        let key = ProcKey {
            folder: cur.folder.clone(),
            host: e.host.clone(),
            role: e.role,
            pid: e.pid,
        };
        let file = cur.file.clone();
        let idx = match self.proc_keys.get(&key) {
            Some(&i) => i,
            None => {
                let mut out_pid = u64::from(e.pid);
                while self.used_pids.contains(&out_pid) {
                    out_pid += PID_STRIDE;
                }
                self.used_pids.insert(out_pid);
                self.processes.push(ProcessEntry {
                    process: e.process(),
                    folder: key.folder.clone(),
                    out_pid,
                    files: Vec::new(),
                    events: 0,
                });
                self.proc_keys.insert(key, self.processes.len() - 1);
                self.processes.len() - 1
            }
        };
        let p = &mut self.processes[idx];
        if !file.is_empty() && p.files.last() != Some(&file) && !p.files.contains(&file) {
            p.files.push(file);
        }
        if let Some(cur) = &mut self.current {
            cur.last = Some((e.process(), idx));
        }
        idx
    }

    /// Keeps what the statistics need one by one: a batch, a wait (and its
    /// bucket), a consumption, at its place in reading order. Other kinds
    /// are summed, not kept.
    fn keep(&mut self, process: usize, e: &Event, ordinal: u64) -> Result<(), SpillError> {
        let main = MainRec {
            process,
            batch: e.batch,
            start_ns: e.start_ns,
            dur_ns: e.dur_ns,
            ready: e.ready,
            ordinal,
        };
        match e.kind {
            Kind::Batch => self.batches.push(BatchRec {
                process,
                batch: e.batch,
                start_ns: e.start_ns,
                dur_ns: e.dur_ns,
                ordinal,
            })?,
            Kind::Wait => {
                let b = WaitBucket::of(e.dur_ns, e.ready) as usize;
                self.wait_buckets[b].0 += 1;
                self.wait_buckets[b].1 = self.wait_buckets[b].1.saturating_add(e.dur_ns);
                self.waits.push(main)?;
            }
            Kind::Consume => self.consumes.push(main)?,
            Kind::Start => self.starts.push(main)?,
            Kind::Stop => self.stops.push(main)?,
            _ => {}
        }
        Ok(())
    }

    /// Adds one event; returns its process. An error only when a
    /// temporary file cannot be written.
    pub fn add(&mut self, e: &Event) -> Result<usize, SpillError> {
        let process = self.resolve(e);
        let ordinal = self.events;
        self.events += 1;
        self.processes[process].events += 1;
        *self.per_kind.entry(e.kind).or_insert(0) += 1;
        self.min_start_ns = Some(self.min_start_ns.map_or(e.start_ns, |m| m.min(e.start_ns)));
        self.max_end_ns = Some(self.max_end_ns.map_or(e.end_ns(), |m| m.max(e.end_ns())));
        self.keep(process, e, ordinal)?;
        if matches!(e.kind, Kind::Thread | Kind::Config) {
            // A thread's name or a DataLoader's settings, not a span: no
            // duration to summarise.
            return Ok(process);
        }
        let key = match e.kind {
            Kind::Op => match self.op_keys.get(&*e.name) {
                Some(&k) => k,
                None => {
                    let k = self.keys.len() as u32;
                    self.keys.push(DurationKey {
                        kind: Kind::Op,
                        name: Some(e.name.to_string()),
                        count: 0,
                        total_ns: 0,
                        cpu_count: 0,
                        cpu_ns: 0,
                    });
                    self.op_keys.insert(e.name.to_string(), k);
                    k
                }
            },
            kind => kind as u32,
        };
        let dur = i64::try_from(e.dur_ns).unwrap_or(i64::MAX);
        let k = &mut self.keys[key as usize];
        k.count += 1;
        k.total_ns += i128::from(dur);
        if let Some(c) = e.cpu_ns {
            k.cpu_count += 1;
            k.cpu_ns += u128::from(c);
        }
        if let Some(d) = &mut self.durations {
            d.add(key, &[dur])?;
        }
        Ok(process)
    }

    /// Every event's duration, counted per key and value; `None` when
    /// the index was gathered without durations, or they were taken
    /// already.
    pub(crate) fn take_durations(&mut self) -> Option<Durations> {
        self.durations.take()
    }

    /// Every batch, wait, consumption and workers' start and stop kept
    /// (in that order, each in reading order): `f` gets its kind, process
    /// (index into [`TraceIndex::processes`]), start and duration, ns. For
    /// the main loop's figures ([`super::stats::LoopFigures`]).
    pub(crate) fn each_kept(
        &mut self,
        mut f: impl FnMut(Kind, usize, u64, u64),
    ) -> Result<(), SpillError> {
        for b in self.batches.iter()? {
            let b = b?;
            f(Kind::Batch, b.process, b.start_ns, b.dur_ns);
        }
        for (kind, spool) in [
            (Kind::Wait, &mut self.waits),
            (Kind::Consume, &mut self.consumes),
            (Kind::Start, &mut self.starts),
            (Kind::Stop, &mut self.stops),
        ] {
            for r in spool.iter()? {
                let r = r?;
                f(kind, r.process, r.start_ns, r.dur_ns);
            }
        }
        Ok(())
    }

    /// Each process's group (see the module documentation).
    pub(crate) fn groups(&self) -> Vec<usize> {
        let key = |p: &ProcessEntry| GroupKey {
            folder: p.folder.clone(),
            host: p.process.host.clone(),
            rank: p.process.rank,
        };
        // The named groups of each folder.
        let mut named: BTreeMap<&str, Vec<GroupKey>> = BTreeMap::new();
        for p in &self.processes {
            if p.process.host.is_some() || p.process.rank.is_some() {
                let v = named.entry(p.folder.as_str()).or_default();
                let k = key(p);
                if !v.contains(&k) {
                    v.push(k);
                }
            }
        }
        let mut ids: BTreeMap<GroupKey, usize> = BTreeMap::new();
        self.processes
            .iter()
            .map(|p| {
                let mut k = key(p);
                if k.host.is_none() && k.rank.is_none() {
                    if let Some([only]) = named.get(p.folder.as_str()).map(Vec::as_slice) {
                        k = only.clone();
                    }
                }
                let n = ids.len();
                *ids.entry(k).or_insert(n)
            })
            .collect()
    }

    /// Matches batches with their consumptions and waits (see the module
    /// documentation): `on_row` sees every batch once, batches without an
    /// id first, then by group, id and order of end. Returns how many
    /// consumptions matched no batch. Memory stays within the index's
    /// budget per sort.
    pub(crate) fn join(
        &mut self,
        mut on_row: impl FnMut(BatchRow) -> Result<(), SpillError>,
    ) -> Result<u64, SpillError> {
        let groups = self.groups();
        let group = |p: usize| groups.get(p).copied().unwrap_or(0) as u32;
        let mut batches = Sorter::new(self.budget);
        for b in self.batches.iter()? {
            let b = b?;
            match b.batch {
                Some(id) => batches.push(KeyedBatch {
                    group: group(b.process),
                    id,
                    end: b.start_ns.saturating_add(b.dur_ns),
                    rec: b,
                })?,
                None => on_row(BatchRow {
                    preprocessing: b,
                    consume: None,
                    wait: None,
                })?,
            }
        }
        let budget = self.budget;
        let keyed = |spool: &mut Spool<MainRec>| -> Result<Sorter<KeyedMain>, SpillError> {
            let mut s = Sorter::new(budget);
            for r in spool.iter()? {
                let r = r?;
                if let Some(id) = r.batch {
                    s.push(KeyedMain {
                        group: group(r.process),
                        id,
                        start: r.start_ns,
                        dur: r.dur_ns,
                        rec: r,
                    })?;
                }
            }
            Ok(s)
        };
        let mut consumes = Head::new(keyed(&mut self.consumes)?.finish()?)?;
        let mut waits = Head::new(keyed(&mut self.waits)?.finish()?)?;
        let mut matched = 0u64;
        for b in batches.finish()? {
            let b = b?;
            let key = (b.group, b.id);
            let consume = consumes.take(key)?;
            matched += u64::from(consume.is_some());
            on_row(BatchRow {
                preprocessing: b.rec,
                consume,
                wait: waits.take(key)?,
            })?;
        }
        Ok(self.consumes.len() - matched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind, role: Role, pid: u32, batch: u64, start: u64, dur: u64) -> Event {
        Event {
            batch: Some(batch),
            ..Event::span(kind.as_str(), kind, pid, role, start, dur)
        }
    }

    fn joined(ix: &mut TraceIndex) -> (Vec<BatchRow>, u64) {
        let mut rows = Vec::new();
        let unmatched = ix
            .join(|r| {
                rows.push(r);
                Ok(())
            })
            .expect("join");
        rows.sort_by_key(|r| r.preprocessing.start_ns);
        (rows, unmatched)
    }

    #[test]
    fn batches_match_per_epoch_and_group() {
        for budget in [1usize, 1 << 20] {
            let mut ix = TraceIndex::new(false, Budget::new(budget));
            ix.begin("run", "w");
            // Epoch 1 and 2 of batch 0, in worker 2; consumed by main 1.
            ix.add(&ev(Kind::Batch, Role::Worker, 2, 0, 100, 50))
                .expect("add");
            ix.add(&ev(Kind::Batch, Role::Worker, 2, 0, 1000, 50))
                .expect("add");
            ix.begin("run", "m");
            ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 1200, 0))
                .expect("add");
            ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 200, 0))
                .expect("add");
            ix.add(&ev(Kind::Wait, Role::Main, 1, 0, 120, 80))
                .expect("add");
            // Another run (folder) with the same pids: its own processes.
            ix.begin("other", "m");
            ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 5000, 0))
                .expect("add");
            // Many batches past the budget: each matched with its own.
            ix.begin("many", "w");
            for b in 0..200u64 {
                ix.add(&ev(Kind::Batch, Role::Worker, 7, b, 10_000 + b, 5))
                    .expect("add");
            }
            ix.begin("many", "m");
            for b in (0..200u64).rev() {
                ix.add(&ev(Kind::Consume, Role::Main, 6, b, 20_000 + b * 2, 0))
                    .expect("add");
            }
            let (rows, unmatched) = joined(&mut ix);
            assert_eq!(rows.len(), 202);
            assert_eq!(rows[0].delay_ns(), Some(50));
            assert_eq!(rows[0].wait.map(|w| w.dur_ns), Some(80));
            assert_eq!(rows[1].delay_ns(), Some(150));
            assert_eq!(rows[1].wait, None);
            for (b, r) in rows[2..].iter().enumerate() {
                let b = b as u64;
                assert_eq!(r.preprocessing.batch, Some(b));
                assert_eq!(r.consume.map(|c| c.start_ns), Some(20_000 + b * 2));
            }
            assert_eq!(unmatched, 1);
            let pids: Vec<u64> = ix.processes.iter().map(|p| p.out_pid).collect();
            assert_eq!(pids, vec![2, 1, 1 + PID_STRIDE, 7, 6]);
            assert_eq!(ix.processes[0].files, vec!["w".to_string()]);
            // Ordinals count events in reading order.
            assert_eq!(rows[0].preprocessing.ordinal, 0);
            assert_eq!(rows[1].consume.map(|c| c.ordinal), Some(2));
        }
    }

    #[test]
    fn keys_follow_kinds_then_op_names() {
        for (i, k) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(k as usize, i);
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("Op"), None);
        for (i, b) in WaitBucket::ALL.into_iter().enumerate() {
            assert_eq!(b as usize, i);
        }
        let mut ix = TraceIndex::new(false, Budget::default());
        let mut e = ev(Kind::Op, Role::Worker, 2, 0, 0, 7);
        e.name = "Flip".into();
        ix.add(&e).expect("add");
        ix.add(&e).expect("add");
        ix.add(&ev(Kind::Sample, Role::Worker, 2, 0, 0, 3))
            .expect("add");
        let flip = &ix.keys[Kind::ALL.len()];
        assert_eq!(
            (flip.name.as_deref(), flip.count, flip.total_ns),
            (Some("Flip"), 2, 14)
        );
        assert_eq!(ix.keys[Kind::Sample as usize].total_ns, 3);
        assert!(ix.take_durations().is_none());
    }
}
