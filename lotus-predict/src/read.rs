//! Reading a trace folder into [`Observed`]: the events the model needs,
//! per process, matched batch by batch to the main process's loop.

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};
use std::path::Path;

use lotus_trace::{BlockReader, Dir, Entry, Event, Item, Kind, LoaderConfig, Role, TraceFolder};

use crate::model::{Batch, Epoch, Inputs, Setting, Work};
use crate::observe::Observed;
use crate::PredictError;

/// Reads `dir` (see [`crate::observe`]): its events read by block parts
/// of [`PART_EVENTS`] each, joined in turn.
pub(crate) fn read(dir: Dir<'_>, cpus: f64) -> Result<Observed, PredictError> {
    let folder = TraceFolder::scan(dir)?;
    let mut r = Observer::default();
    let mut part = BlockPart::default();
    let mut taken = 0usize;
    folder.read_all(|item| -> Result<(), PredictError> {
        if let Item::Entry(Entry::Event(e)) = item {
            if Observer::reads(e.kind) {
                part.take(e);
                taken += 1;
                if taken.is_multiple_of(PART_EVENTS) {
                    r.join(std::mem::take(&mut part));
                }
            }
        }
        Ok(())
    })?;
    r.join(part);
    r.finish(dir.path(), cpus)
}

/// The events [`read`] gives one part: its ops are held until the part
/// is joined.
const PART_EVENTS: usize = 1 << 16;

/// A traced run read for the model, where another pass over the logs
/// hands it their events (`lotus_trace::TraceIndex::load_with` for `lotus
/// trace stats` and `lotus report`, whose statistics and predictions then
/// come from one parse); [`crate::observe`] reads a folder with one of its
/// own.
///
/// Each block of a log is read on its parsing thread (a `BlockPart`): its
/// batches' ops summed as if no op came before the block. The blocks are
/// then joined in order (`Observer::join`): ops an earlier block left
/// waiting for their batch are summed again into the batch they fall in,
/// with that batch's own ops, which reads each batch exactly as one pass
/// over the lines in order would.
#[derive(Debug, Default)]
pub struct Observer {
    reader: Reader,
}

impl Observer {
    /// Whether the model reads events of `kind` (ops, batches, and the
    /// main process's waits, consumptions, workers' starts and stops and
    /// the DataLoader's settings): the others need not be handed over.
    pub fn reads(kind: Kind) -> bool {
        matches!(
            kind,
            Kind::Op
                | Kind::Batch
                | Kind::Wait
                | Kind::Consume
                | Kind::Start
                | Kind::Stop
                | Kind::Config
        )
    }

    /// [`lotus_trace::TraceIndex::load`] of `folder` (`durations`: each
    /// event's kept, for statistics), this observer fed the events it
    /// reads in the same pass. Its errors are the index's.
    pub fn load_index(
        &mut self,
        folder: &TraceFolder,
        durations: bool,
        budget: lotus_trace::Budget,
    ) -> Result<lotus_trace::TraceIndex, lotus_trace::TraceError> {
        lotus_trace::TraceIndex::load_with(
            folder,
            durations,
            budget,
            |_| {},
            Observer::reads,
            BlockPart::default,
            |part| self.join(part),
        )
    }

    /// Adds the next block's part: its names, its batches (each summed
    /// again where ops left waiting by earlier blocks fall in it), its
    /// ops still waiting, its main process's events.
    fn join(&mut self, part: BlockPart) {
        let r = &mut self.reader;
        let ids: Vec<usize> = part.names.iter().map(|n| r.name(n)).collect();
        let global = |o: &OpSpan| OpSpan {
            name: ids[o.name],
            ..*o
        };
        r.holders.extend(part.holders.iter().map(|&h| ids[h]));
        // The ops earlier blocks left waiting, per process of this one.
        let mut carried: Vec<Vec<OpSpan>> = part
            .procs
            .iter()
            .map(|p| r.pending.remove(&p.pid).unwrap_or_default())
            .collect();
        for b in part.batches {
            let mut span = b.span;
            for op in &mut span.ops {
                op.0 = ids[op.0];
            }
            let waiting = &mut carried[b.proc];
            if !waiting.is_empty() {
                let (theirs, rest) = in_batch(std::mem::take(waiting), &b.line);
                *waiting = rest;
                if !theirs.is_empty() {
                    // The earlier ops first, as in one pass over the lines.
                    let mut all = theirs;
                    all.extend(b.mine.iter().map(global));
                    (span.ops, span.gc) = outermost(&all, &mut r.holders);
                }
            }
            r.batches.push(span);
        }
        for (p, mut waiting) in part.procs.into_iter().zip(carried) {
            r.roles.insert(p.pid, p.role);
            waiting.extend(p.pending.iter().map(global));
            if !waiting.is_empty() {
                r.pending.insert(p.pid, waiting);
            }
        }
        for (pid, m) in part.mains {
            r.mains.entry(pid).or_default().push(m);
        }
    }

    /// The run, on `cpus` CPUs, as the events taken say it (`dir`: the
    /// trace folder they came from, named in errors).
    pub fn finish(self, dir: &Path, cpus: f64) -> Result<Observed, PredictError> {
        assemble(self.reader, cpus, dir)
    }
}

/// An op span waiting for its batch's span (its name an id: the block's
/// in a [`BlockPart`], the run's in the [`Reader`]).
#[derive(Debug, Clone, Copy)]
struct OpSpan {
    batch: Option<u64>,
    name: usize,
    start: u64,
    end: u64,
    cpu: Option<u64>,
    gc: Option<u8>,
    tid: Option<u32>,
}

/// An op's outermost spans in a batch: its name, wall and CPU, ns.
type OpSum = (usize, u64, u64);

/// A batch span, with its ops summed.
#[derive(Debug, Clone)]
struct BatchSpan {
    pid: u32,
    id: u64,
    start: u64,
    end: u64,
    pcpu: Option<u64>,
    delay: Option<u64>,
    pcpu_at: Option<u64>,
    delay_at: Option<u64>,
    psys: Option<u64>,
    /// Per op name: its outermost spans' wall and CPU.
    ops: Vec<OpSum>,
    gc: (u64, u64),
    used: bool,
}

/// Which ops a batch span takes: its own (by id, or any of no id, the
/// original fork's format) that lie inside it.
#[derive(Debug, Clone, Copy)]
struct BatchLine {
    batch: Option<u64>,
    start: u64,
    end: u64,
}

/// `ops` split into those of the batch `b` and those left waiting: the
/// others that end after it starts (ops of a batch still open on another
/// thread), in their order.
fn in_batch(ops: Vec<OpSpan>, b: &BatchLine) -> (Vec<OpSpan>, Vec<OpSpan>) {
    let (mine, mut rest): (Vec<OpSpan>, Vec<OpSpan>) = ops.into_iter().partition(|o| {
        (o.batch == b.batch || o.batch.is_none()) && o.end <= b.end && o.start >= b.start
    });
    rest.retain(|o| o.end > b.start);
    (mine, rest)
}

/// A main-process event kept for the loop.
#[derive(Debug, Clone)]
struct MainEvent {
    kind: Kind,
    batch: Option<u64>,
    start: u64,
    dur: u64,
    ready: bool,
    pcpu: Option<u64>,
    delay: Option<u64>,
    pcpu_at: Option<u64>,
    delay_at: Option<u64>,
    config: Option<LoaderConfig>,
}

impl MainEvent {
    fn of(e: &Event) -> MainEvent {
        let usage = e.usage.as_deref();
        MainEvent {
            kind: e.kind,
            batch: e.batch,
            start: e.start_ns,
            dur: e.dur_ns,
            ready: e.ready.unwrap_or(false),
            pcpu: usage.and_then(|u| u.pcpu_ns),
            delay: usage.and_then(|u| u.delay_ns),
            pcpu_at: usage.and_then(|u| u.pcpu_at_ns),
            delay_at: usage.and_then(|u| u.delay_at_ns),
            config: e.config.as_deref().cloned(),
        }
    }
}

/// The run as read so far: the blocks joined.
#[derive(Debug, Default)]
struct Reader {
    names: Vec<String>,
    // Fx maps: keyed by names and pids from the logs; no order is read
    // from them.
    name_ids: FxHashMap<String, usize>,
    /// Per process, the ops still waiting for their batch.
    pending: FxHashMap<u32, Vec<OpSpan>>,
    batches: Vec<BatchSpan>,
    mains: FxHashMap<u32, Vec<MainEvent>>,
    roles: FxHashMap<u32, Role>,
    /// Ops whose spans hold other ops' (a dataset's `__getitem__`).
    holders: FxHashSet<usize>,
}

impl Reader {
    fn name(&mut self, n: &str) -> usize {
        if let Some(&i) = self.name_ids.get(n) {
            return i;
        }
        self.names.push(n.to_string());
        self.name_ids.insert(n.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

/// One block's events, read on its parsing thread as if no op came
/// before the block (see [`Observer`]).
#[derive(Debug, Default)]
struct BlockPart {
    /// Its op names, in the order met: their ids are its own.
    names: Vec<String>,
    name_ids: FxHashMap<String, usize>,
    /// The last names met, most recent last: a log's lines cycle through
    /// a few names, found here by comparing a few bytes instead of
    /// hashing each line's.
    recent: Vec<usize>,
    /// Its processes, in the order met.
    procs: Vec<ProcPart>,
    /// The process of the last event (a block has one, mostly).
    last: usize,
    /// Its batches, in line order.
    batches: Vec<PartBatch>,
    /// Its main processes' events, in line order.
    mains: Vec<(u32, MainEvent)>,
    /// Ops whose spans hold other ops'.
    holders: FxHashSet<usize>,
}

/// A process's ops in a [`BlockPart`].
#[derive(Debug)]
struct ProcPart {
    pid: u32,
    /// Its role in its last event.
    role: Role,
    /// Its ops still waiting for their batch.
    pending: Vec<OpSpan>,
}

/// A batch of a [`BlockPart`].
#[derive(Debug)]
struct PartBatch {
    /// Its process, in [`BlockPart::procs`].
    proc: usize,
    line: BatchLine,
    /// Its ops summed: the block's only.
    span: BatchSpan,
    /// Those ops, for the join to sum again where earlier blocks' ops
    /// fall in the batch too.
    mine: Vec<OpSpan>,
}

/// How many names [`BlockPart::recent`] keeps.
const RECENT_NAMES: usize = 16;

impl BlockPart {
    fn name(&mut self, n: &str) -> usize {
        if let Some(&i) = self.recent.iter().rev().find(|&&i| self.names[i] == n) {
            return i;
        }
        let id = match self.name_ids.get(n) {
            Some(&i) => i,
            None => {
                self.names.push(n.to_string());
                self.name_ids.insert(n.to_string(), self.names.len() - 1);
                self.names.len() - 1
            }
        };
        if self.recent.len() == RECENT_NAMES {
            self.recent.remove(0);
        }
        self.recent.push(id);
        id
    }

    /// The process `pid` (its role now `role`), added where new.
    fn proc(&mut self, pid: u32, role: Role) -> usize {
        if self.procs.get(self.last).is_none_or(|p| p.pid != pid) {
            self.last = match self.procs.iter().position(|p| p.pid == pid) {
                Some(i) => i,
                None => {
                    self.procs.push(ProcPart {
                        pid,
                        role,
                        pending: Vec::new(),
                    });
                    self.procs.len() - 1
                }
            };
        }
        self.procs[self.last].role = role;
        self.last
    }

    fn batch(&mut self, e: &Event) {
        let proc = self.proc(e.pid, e.role);
        let usage = e.usage.as_deref();
        let line = BatchLine {
            batch: e.batch,
            start: e.start_ns,
            end: e.start_ns.saturating_add(e.dur_ns),
        };
        let waiting = std::mem::take(&mut self.procs[proc].pending);
        let (mine, rest) = in_batch(waiting, &line);
        self.procs[proc].pending = rest;
        let (ops, gc) = outermost(&mine, &mut self.holders);
        self.batches.push(PartBatch {
            proc,
            line,
            span: BatchSpan {
                pid: e.pid,
                id: e.batch.unwrap_or(u64::MAX),
                start: line.start,
                end: line.end,
                pcpu: usage.and_then(|u| u.pcpu_ns),
                delay: usage.and_then(|u| u.delay_ns),
                pcpu_at: usage.and_then(|u| u.pcpu_at_ns),
                delay_at: usage.and_then(|u| u.delay_at_ns),
                psys: usage.and_then(|u| u.psys_ns),
                ops,
                gc,
                used: false,
            },
            mine,
        });
    }
}

impl BlockReader for BlockPart {
    fn op(&mut self, e: &lotus_trace::OpSpan<'_>) {
        let proc = self.proc(e.pid, e.role);
        let name = self.name(e.name);
        self.procs[proc].pending.push(OpSpan {
            batch: e.batch,
            name,
            start: e.start_ns,
            end: e.start_ns.saturating_add(e.dur_ns),
            cpu: e.cpu_ns,
            gc: e.gc,
            tid: e.tid,
        });
    }

    fn event(&mut self, e: Event) {
        match (e.role, e.kind) {
            (_, Kind::Batch) => {
                self.batch(&e);
                if e.role == Role::Main {
                    self.mains.push((e.pid, MainEvent::of(&e)));
                }
            }
            (Role::Main, Kind::Wait | Kind::Consume | Kind::Start | Kind::Stop | Kind::Config) => {
                self.proc(e.pid, e.role);
                self.mains.push((e.pid, MainEvent::of(&e)));
            }
            _ => {
                self.proc(e.pid, e.role);
            }
        }
    }
}

/// Per op name, the wall and CPU of its outermost spans on each thread
/// (a span inside another of the same name is in it already); and the
/// oldest generation's garbage collections, apart. The names of spans
/// that hold another op's span on their thread go into `holders`.
fn outermost(ops: &[OpSpan], holders: &mut FxHashSet<usize>) -> (Vec<OpSum>, (u64, u64)) {
    let mut sorted: Vec<&OpSpan> = ops.iter().collect();
    sorted.sort_by_key(|o| (o.tid, o.start, std::cmp::Reverse(o.end)));
    find_holders(&sorted, holders);
    let mut out: Vec<OpSum> = Vec::new();
    let mut gc = (0u64, 0u64);
    // Per name, where its last outermost span ended on the thread being
    // swept (sorted by thread: cleared at each; a batch has a few names,
    // so a list, where a hashed map per batch was a tenth of the reading).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut thread = sorted.first().map(|o| o.tid);
    for o in sorted {
        if Some(o.tid) != thread {
            open.clear();
            thread = Some(o.tid);
        }
        let wall = o.end - o.start;
        let cpu = o.cpu.unwrap_or(wall);
        // Every collection the tracer recorded: the oldest generation's,
        // and the young ones that took 1 ms or more (an inherited heap's).
        if o.gc.is_some() {
            gc.0 += wall;
            gc.1 += cpu;
        }
        match open.iter_mut().find(|(n, _)| *n == o.name) {
            Some((_, end)) if o.start < *end => continue,
            Some((_, end)) => *end = o.end,
            None => open.push((o.name, o.end)),
        }
        match out.iter_mut().find(|(n, _, _)| *n == o.name) {
            Some(x) => {
                x.1 += wall;
                x.2 += cpu;
            }
            None => out.push((o.name, wall, cpu)),
        }
    }
    (out, gc)
}

/// Adds to `holders` the name of each span of `sorted` (by thread, start,
/// then longest first) that holds a span of another name on its thread
/// (starts no earlier and ends no later). Each span looks only at those
/// that start before it ends, and at its equals before it: a batch's
/// spans are mostly side by side, so this is about linear where testing
/// every pair was a tenth of `trace stats` on a long trace.
fn find_holders(sorted: &[&OpSpan], holders: &mut FxHashSet<usize>) {
    for (i, o) in sorted.iter().enumerate() {
        if holders.contains(&o.name) {
            continue;
        }
        let later = sorted[i + 1..]
            .iter()
            .take_while(|p| p.tid == o.tid && p.start <= o.end);
        let equal_before = sorted[..i]
            .iter()
            .rev()
            .take_while(|p| p.tid == o.tid && p.start == o.start && p.end == o.end);
        if later
            .chain(equal_before)
            .any(|p| p.name != o.name && p.end <= o.end)
        {
            holders.insert(o.name);
        }
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn assemble(mut r: Reader, cpus: f64, dir: &Path) -> Result<Observed, PredictError> {
    let mut notes = Vec::new();
    // The main process modelled: the one that took most batches.
    let consumes = |evs: &Vec<MainEvent>| evs.iter().filter(|e| e.kind == Kind::Consume).count();
    let Some((&main_pid, _)) = r
        .mains
        .iter()
        .filter(|(_, evs)| consumes(evs) > 0)
        .max_by_key(|(pid, evs)| (consumes(evs), std::cmp::Reverse(**pid)))
    else {
        return Err(PredictError::NoLoop {
            path: dir.display().to_string(),
        });
    };
    let others = r
        .mains
        .iter()
        .filter(|(pid, evs)| **pid != main_pid && consumes(evs) > 0)
        .count();
    if others > 0 {
        notes.push(format!(
            "{others} other main process(es) took batches too (ranks); the model is of pid {main_pid}'s loop only"
        ));
    }
    let mut evs = r.mains.remove(&main_pid).unwrap_or_default();
    evs.sort_by_key(|e| (e.start, e.kind));
    let config = evs.iter().rev().find_map(|e| e.config.clone());
    // Epoch boundaries: each iter(loader) (a config event), else each
    // start of workers, else one epoch.
    let mut bounds: Vec<u64> = evs
        .iter()
        .filter(|e| e.kind == Kind::Config)
        .map(|e| e.start)
        .collect();
    if bounds.is_empty() {
        bounds = evs
            .iter()
            .filter(|e| e.kind == Kind::Start)
            .map(|e| e.start)
            .collect();
    }
    if bounds.is_empty() {
        bounds.push(0);
    }
    bounds[0] = 0;
    let epoch_of = |t: u64| bounds.partition_point(|&b| b <= t).saturating_sub(1);
    let in_main = evs.iter().any(|e| e.kind == Kind::Batch);
    // The worker batches, for matching: by id, then latest end first.
    let mut by_id: HashMap<u64, Vec<usize>> = HashMap::new();
    for (k, b) in r.batches.iter().enumerate() {
        if r.roles.get(&b.pid) == Some(&Role::Worker) || (in_main && b.pid == main_pid) {
            by_id.entry(b.id).or_default().push(k);
        }
    }
    let has_delay = !r.batches.is_empty() && r.batches.iter().all(|b| b.delay.is_some());
    let has_cpu = !r.batches.is_empty() && r.batches.iter().all(|b| b.pcpu.is_some());
    if !has_cpu {
        notes.push("the trace's batches do not say their process's CPU (a tracer before lotus.predict/1): each batch is taken to use one CPU throughout".into());
    }
    if !has_delay {
        notes.push("the trace's batches do not say how long they waited for a CPU (no /proc/thread-self/schedstat): their time alone is taken as their wall time".into());
    }
    let n_epochs = bounds.len();
    let mut epochs: Vec<Epoch> = vec![Epoch::default(); n_epochs];
    let mut handovers = Vec::new();
    let mut readies = Vec::new();
    let mut starts: Vec<Work> = Vec::new();
    let mut stops: Vec<Work> = Vec::new();
    let mut start_at: Vec<Option<u64>> = vec![None; n_epochs];
    let mut wait_ns = 0.0;
    let phase = |e: &MainEvent| {
        let wall = e.dur.saturating_sub(e.delay.unwrap_or(0)) as f64;
        Work::new(wall, e.pcpu.map_or(wall, |c| c as f64))
    };
    // The loop's window, as the verdict measures it.
    let first = evs
        .iter()
        .filter(|e| matches!(e.kind, Kind::Wait | Kind::Batch | Kind::Start))
        .map(|e| e.start)
        .min();
    let last = evs
        .iter()
        .filter_map(|e| match e.kind {
            Kind::Consume => Some(e.start),
            Kind::Stop => Some(e.start + e.dur),
            _ => None,
        })
        .max();
    let (Some(first), Some(last)) = (first, last) else {
        return Err(PredictError::NoLoop {
            path: dir.display().to_string(),
        });
    };
    // Each worker's first batch: it pays what a fresh process pays once
    // (lazy imports, caches, the first collections of an inherited heap).
    let mut first_of: HashMap<u32, usize> = HashMap::new();
    for (k, b) in r.batches.iter().enumerate() {
        if b.pid == main_pid {
            continue;
        }
        let f = first_of.entry(b.pid).or_insert(k);
        if b.start < r.batches[*f].start {
            *f = k;
        }
    }
    let mut cold: Vec<(usize, usize, u32)> = Vec::new();
    // Walk the main process's events in time order.
    let mut epoch_end: Vec<Option<u64>> = vec![None; n_epochs];
    for (k, e) in evs.iter().enumerate() {
        let ep = epoch_of(e.start);
        match e.kind {
            Kind::Start => {
                starts.push(phase(e));
                start_at[ep].get_or_insert(e.start);
            }
            Kind::Stop => {
                stops.push(phase(e));
                epoch_end[ep] = Some(e.start + e.dur);
            }
            Kind::Wait if !in_main => {
                wait_ns += e.dur as f64;
                if e.ready {
                    readies.push(e.dur as f64);
                }
            }
            Kind::Consume => {
                let Some(id) = e.batch else { continue };
                // The batch: its span of that id that ended last before
                // (else, clocks apart, the first to end after).
                let k_batch = by_id.get(&id).and_then(|ks| {
                    let free = || ks.iter().copied().filter(|&k| !r.batches[k].used);
                    free()
                        .filter(|&k| r.batches[k].end <= e.start + 1_000_000)
                        .max_by_key(|&k| r.batches[k].end)
                        .or_else(|| free().min_by_key(|&k| r.batches[k].end))
                });
                let Some(kb) = k_batch else {
                    continue;
                };
                r.batches[kb].used = true;
                let b = &r.batches[kb];
                // Did the main process wait for it?
                let waited = evs[..k]
                    .iter()
                    .rev()
                    .find(|w| w.kind == Kind::Wait && w.batch == Some(id));
                if let Some(w) = waited {
                    if !w.ready && b.end >= w.start {
                        handovers.push(e.start.saturating_sub(b.end) as f64);
                    }
                }
                let wall = (b.end - b.start).saturating_sub(b.delay.unwrap_or(0)) as f64;
                let cpu = b.pcpu.map_or(wall, |c| c as f64);
                let ops = b
                    .ops
                    .iter()
                    .map(|&(n, w, c)| {
                        // The op's time alone: its share of the batch's.
                        let share = w as f64 / (b.end - b.start).max(1) as f64;
                        (n, Work::new(wall * share, c as f64))
                    })
                    .collect();
                let gc_share = b.gc.0 as f64 / (b.end - b.start).max(1) as f64;
                // The step: from taking it to the main process's next
                // request (or its stopping the workers, or the next
                // epoch).
                let next = evs[k + 1..].iter().find(|n| {
                    matches!(
                        n.kind,
                        Kind::Wait | Kind::Batch | Kind::Stop | Kind::Config | Kind::Start
                    )
                });
                let step = match next {
                    Some(n) if epoch_of(n.start) == ep || n.kind == Kind::Stop => {
                        let wall = n.start.saturating_sub(e.start);
                        let delay = match (n.delay_at, e.delay_at) {
                            (Some(a), Some(b)) => a.saturating_sub(b),
                            _ => 0,
                        };
                        let wall = wall.saturating_sub(delay) as f64;
                        let cpu = match (n.pcpu_at, e.pcpu_at) {
                            (Some(a), Some(b)) => a.saturating_sub(b) as f64,
                            _ => wall,
                        };
                        Work::new(wall, cpu)
                    }
                    _ => {
                        epoch_end[ep].get_or_insert(e.start);
                        Work::default()
                    }
                };
                if step.wall_ns > 0.0 && epoch_end[ep].is_none_or(|t| t < e.start) {
                    epoch_end[ep] = Some(e.start + step.wall_ns as u64);
                }
                if first_of.get(&b.pid) == Some(&kb) {
                    cold.push((ep, epochs[ep].batches.len(), b.pid));
                }
                epochs[ep].batches.push(Batch {
                    work: Work::new(wall, cpu),
                    ops,
                    gc: Work::new(wall * gc_share, b.gc.1 as f64),
                    kernel: b
                        .psys
                        .map_or_else(Work::default, |k| Work::new((k as f64).min(wall), k as f64)),
                    step,
                });
            }
            _ => {}
        }
    }
    // A first batch's cost past the median batch's is its worker's
    // start-up, paid once per worker: with persistent workers, once.
    let mut warm_wall: Vec<f64> = Vec::new();
    let mut warm_cpu: Vec<f64> = Vec::new();
    for (ep, e) in epochs.iter().enumerate() {
        for (i, b) in e.batches.iter().enumerate() {
            if !cold.iter().any(|&(ce, ci, _)| ce == ep && ci == i) {
                warm_wall.push(b.work.wall_ns);
                warm_cpu.push(b.work.cpu_ns);
            }
        }
    }
    let mut extra: HashMap<u32, (Work, Work)> = HashMap::new();
    if let (Some(mw), Some(mc)) = (median(warm_wall), median(warm_cpu)) {
        for &(ep, i, pid) in &cold {
            let b = &mut epochs[ep].batches[i];
            let excess = Work::new(b.work.wall_ns - mw, b.work.cpu_ns - mc);
            let gc = Work::new(
                b.gc.wall_ns.min(excess.wall_ns),
                b.gc.cpu_ns.min(excess.cpu_ns),
            );
            b.work = b.work.less(excess);
            b.gc = b.gc.less(gc);
            extra.insert(pid, (excess, gc));
        }
    }
    // The gaps between epochs.
    for ep in 1..n_epochs {
        let begin = start_at[ep].unwrap_or(bounds[ep]);
        if let Some(prev_end) = epoch_end[ep - 1] {
            let gap = begin.saturating_sub(prev_end) as f64;
            epochs[ep].before = Work::new(gap, gap);
        }
    }
    let batches: usize = epochs.iter().map(|e| e.batches.len()).sum();
    if batches == 0 {
        return Err(PredictError::NoLoop {
            path: dir.display().to_string(),
        });
    }
    epochs.retain(|e| !e.batches.is_empty());
    // Each worker's start-up: its process's CPU from birth to its first
    // batch (with no such figure, the time from when the main process
    // started it to its first batch, less its run-queue delay). The main
    // process starts its workers one after another over its `start` span
    // (with spawn, each waits for the one before to import the script):
    // the k-th of n to reach its first batch is taken as started k/n of
    // the way through.
    let first_batch: HashMap<u32, &BatchSpan> = first_of
        .iter()
        .map(|(&pid, &k)| (pid, &r.batches[k]))
        .collect();
    let mut by_start: Vec<(&MainEvent, Vec<&BatchSpan>)> = evs
        .iter()
        .filter(|e| e.kind == Kind::Start)
        .map(|e| (e, Vec::new()))
        .collect();
    for b in first_batch.values() {
        if let Some(g) = by_start.iter_mut().rev().find(|(e, _)| e.start <= b.start) {
            g.1.push(b);
        }
    }
    let mut startup = Vec::new();
    for (e, mut firsts) in by_start {
        firsts.sort_by_key(|b| (b.start, b.pid));
        let n = firsts.len().max(1) as u64;
        for (k, b) in firsts.into_iter().enumerate() {
            let begun = e.start + e.dur * k as u64 / n;
            let wall = b
                .start
                .saturating_sub(begun)
                .saturating_sub(b.delay_at.unwrap_or(0)) as f64;
            // Its time alone is its CPU where the trace says it: up to its
            // first batch a worker also waits for its first index, which
            // comes only once the main process has started every worker
            // (with spawn, seconds later).
            let (wall, cpu) = match b.pcpu_at {
                Some(c) => (c as f64, c as f64),
                None => (wall, wall),
            };
            let (excess, gc) = extra.get(&b.pid).copied().unwrap_or_default();
            startup.push((Work::new(wall, cpu).plus(excess), gc));
        }
    }
    let (startup, startup_gc): (Vec<Work>, Vec<Work>) = startup.into_iter().unzip();
    // The settings as traced.
    let workers_seen = {
        let mut per_epoch: Vec<std::collections::BTreeSet<u32>> =
            vec![Default::default(); n_epochs];
        for b in r.batches.iter().filter(|b| b.used && b.pid != main_pid) {
            per_epoch[epoch_of(b.start)].insert(b.pid);
        }
        per_epoch.iter().map(|s| s.len()).max().unwrap_or(0) as u32
    };
    let traced = Setting {
        workers: config.as_ref().map_or(workers_seen, |c| c.workers),
        prefetch: config.as_ref().and_then(|c| c.prefetch).unwrap_or(2),
        persistent: config
            .as_ref()
            .map_or(starts.len() <= 1 && n_epochs > 1, |c| c.persistent),
        cpus,
        without: Vec::new(),
        no_gc: false,
        one_thread: false,
    };
    if config.is_none() {
        notes.push(format!(
            "the trace does not say the DataLoader's settings (a tracer before lotus.predict/1): {} workers (as seen), prefetch_factor 2 and persistent_workers={} are assumed",
            traced.workers,
            if traced.persistent { "True" } else { "False" }
        ));
    }
    let inputs = Inputs {
        epochs,
        holds_ops: (0..r.names.len()).map(|i| r.holders.contains(&i)).collect(),
        ops: r.names,
        start: median_work(&starts),
        stop: median_work(&stops),
        startup,
        startup_gc,
        handover_ns: median(handovers).unwrap_or(0.0),
        ready_ns: median(readies).unwrap_or(50_000.0),
        traced,
        pools: None,
    };
    Ok(Observed {
        inputs,
        loop_ns: last.saturating_sub(first) as f64,
        wait_ns,
        main_pid,
        config,
        batches,
        notes,
        has_delay,
        has_cpu,
    })
}

fn median_work(v: &[Work]) -> Option<Work> {
    let wall = median(v.iter().map(|w| w.wall_ns).collect())?;
    let cpu = median(v.iter().map(|w| w.cpu_ns).collect())?;
    Some(Work::new(wall, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The holders found by the sweep over sorted spans are those found
    /// by testing every pair, on random batches of nested, side-by-side,
    /// overlapping, equal and empty spans on three threads.
    #[test]
    fn the_holders_sweep_finds_what_testing_every_pair_does() {
        let mut rng = fastrand::Rng::with_seed(11);
        for round in 0..2000 {
            let ops: Vec<OpSpan> = (0..rng.usize(1..12))
                .map(|_| {
                    let start = rng.u64(0..20);
                    OpSpan {
                        batch: None,
                        name: rng.usize(0..4),
                        start,
                        end: start + rng.u64(0..8),
                        cpu: None,
                        gc: None,
                        tid: [None, Some(7), Some(9)][rng.usize(0..3)],
                    }
                })
                .collect();
            let mut every_pair = FxHashSet::default();
            for o in &ops {
                if ops.iter().any(|p| {
                    p.name != o.name && p.tid == o.tid && p.start >= o.start && p.end <= o.end
                }) {
                    every_pair.insert(o.name);
                }
            }
            let mut swept = FxHashSet::default();
            outermost(&ops, &mut swept);
            assert_eq!(swept, every_pair, "round {round}: {ops:?}");
        }
    }

    /// A random stream of a worker's events: batches whose ops run on
    /// two threads (some of the next batch's already running when one
    /// ends), ops of no batch id, nested spans of one name, collections.
    fn random_stream(rng: &mut fastrand::Rng) -> Vec<Event> {
        let event = |pid: u32, name: &str, kind: Kind, span: (u64, u64), batch, tid| Event {
            batch,
            tid: Some(tid),
            ..Event::span(name, kind, pid, Role::Worker, span.0, span.1)
        };
        let op = |pid, name, start, dur, batch, tid| {
            event(pid, name, Kind::Op, (start, dur), batch, tid)
        };
        let mut out = Vec::new();
        let mut t = 1_000u64;
        for b in 0..rng.u64(1..12) {
            let pid = 7 + rng.u32(0..2);
            let start = t;
            for _ in 0..rng.usize(0..6) {
                let s = t + rng.u64(0..5);
                let d = rng.u64(0..6);
                let name = ["A", "B", "C"][rng.usize(0..3)];
                let id = [Some(b), Some(b + 1), None][rng.usize(0..3)];
                out.push(op(pid, name, s, d, id, 1 + rng.u32(0..2)));
                if rng.bool() {
                    // A span holding the last one, of its name or another.
                    let name = ["A", "D"][rng.usize(0..2)];
                    out.push(op(pid, name, s.saturating_sub(1), d + 2, id, 1));
                }
                t = s + d;
            }
            t += rng.u64(0..4);
            out.push(event(
                pid,
                "Batch",
                Kind::Batch,
                (start, t - start),
                Some(b),
                1,
            ));
        }
        out
    }

    /// The run read in parts cut anywhere, then joined, is the run read
    /// in one part (one pass over the lines in order): its batches' ops
    /// and collections, holders, names, roles and the ops left waiting.
    #[test]
    fn blocks_joined_read_as_one_pass_over_the_lines() {
        let mut rng = fastrand::Rng::with_seed(3);
        let state = |o: Observer| {
            let r = o.reader;
            let mut pending: Vec<_> = r.pending.into_iter().collect();
            pending.sort_by_key(|p| p.0);
            let mut holders: Vec<_> = r.holders.into_iter().collect();
            holders.sort();
            let mut roles: Vec<_> = r.roles.into_iter().collect();
            roles.sort_by_key(|p| p.0);
            format!(
                "{:?}\n{pending:?}\n{holders:?}\n{:?}\n{roles:?}",
                r.batches, r.names
            )
        };
        let mut joins = 0;
        for round in 0..3000 {
            let events = random_stream(&mut rng);
            let mut whole = BlockPart::default();
            for e in events.clone() {
                whole.take(e);
            }
            let mut one = Observer::default();
            one.join(whole);
            let mut cut = Observer::default();
            let mut part = BlockPart::default();
            for e in events.clone() {
                if rng.usize(0..4) == 0 {
                    cut.join(std::mem::take(&mut part));
                    joins += 1;
                }
                part.take(e);
            }
            cut.join(part);
            assert_eq!(state(cut), state(one), "round {round}: {events:?}");
        }
        assert!(joins > 1000);
    }

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_700_000_000_000_000_000;

    /// A run of one epoch: the main process starts two fork workers
    /// (a 20 ms start), takes 6 batches (each worker's first costs 30 ms
    /// more, 10 ms of it a collection), steps of 5 ms of CPU.
    fn run(dir: &Path) {
        let mut main = String::from("#lotus-trace v1 role=main pid=1\n");
        main += &format!("SDataLoader,{T0},0,kind=config,workers=2,prefetch=2,persistent=0,pin=0,batch_size=4,method=fork,len=6,overridden=0\n");
        main += &format!(
            "SWorkersStart,{T0},{},kind=start,pcpu={},delay=0\n",
            20 * MS,
            20 * MS
        );
        let mut worker = [String::new(), String::new()];
        let mut t = T0 + 20 * MS;
        let mut free = [t + 15 * MS, t + 15 * MS];
        let mut cpu = 0u64;
        for b in 0..6u64 {
            let w = (b % 2) as usize;
            let cost = if b < 2 { 70 } else { 40 } * MS;
            let start = free[w];
            let end = start + cost;
            free[w] = end;
            if b < 2 {
                worker[w] += &format!(
                    "Sgc,{},{},kind=op,gen=2,batch={b},cpu={}\n",
                    start,
                    10 * MS,
                    10 * MS
                );
            }
            worker[w] += &format!(
                "SBatch,{start},{cost},kind=batch,batch={b},pcpu={cost},delay=0,psys={},pcpu_at={},delay_at=0\n",
                4 * MS,
                if b < 2 { 15 * MS } else { 55 * MS }
            );
            let wait_start = t;
            let taken = end.max(t) + MS;
            main += &format!(
                "SWait,{wait_start},{},kind=wait,batch={b},ready=0,pcpu_at={cpu},delay_at=0\n",
                taken - wait_start
            );
            main +=
                &format!("SConsume,{taken},0,kind=consume,batch={b},pcpu_at={cpu},delay_at=0\n");
            cpu += 5 * MS;
            t = taken + 5 * MS;
        }
        main += &format!("SWorkersStop,{t},{},kind=stop,pcpu=0,delay=0\n", 3 * MS);
        std::fs::write(dir.join("lotus_main_pid_1"), main).unwrap();
        for (w, log) in worker.iter().enumerate() {
            let pid = w + 2;
            std::fs::write(
                dir.join(format!("lotus_worker_pid_{pid}")),
                format!("#lotus-trace v1 role=worker pid={pid}\n{log}"),
            )
            .unwrap();
        }
    }

    #[test]
    fn a_run_is_read_as_its_batches_steps_and_start_ups() {
        let tmp = tempfile::tempdir().unwrap();
        run(tmp.path());
        let o = read(tmp.path().into(), 2.0).unwrap();
        let i = &o.inputs;
        assert_eq!((o.batches, i.epochs.len()), (6, 1));
        assert_eq!(
            (i.traced.workers, i.traced.prefetch, i.traced.persistent),
            (2, 2, false)
        );
        assert!(
            o.has_cpu && o.has_delay && o.notes.is_empty(),
            "{:?}",
            o.notes
        );
        // Each worker's first batch: 30 ms past the median (40 ms) moved to
        // its start-up (15 ms of CPU from birth), the collection with it.
        let b = &i.epochs[0].batches;
        for x in b {
            assert!((x.work.wall_ns - 40e6).abs() < 1.0, "{x:?}");
            assert_eq!(x.kernel, Work::new(4e6, 4e6));
        }
        assert_eq!(i.startup.len(), 2);
        for (s, gc) in i.startup.iter().zip(&i.startup_gc) {
            assert!((s.cpu_ns - 45e6).abs() < 1.0, "{s:?}");
            assert!((gc.cpu_ns - 10e6).abs() < 1.0, "{gc:?}");
        }
        // The steps: 5 ms of CPU from each consume to the next request,
        // the last one's up to the stop.
        assert!(
            b[..5].iter().all(|x| (x.step.cpu_ns - 5e6).abs() < 1.0),
            "{b:?}"
        );
        assert_eq!(i.start, Some(Work::new(20e6, 20e6)));
        assert!((i.handover_ns - 1e6).abs() < 1.0, "{}", i.handover_ns);
        // The loop: from the workers' start to the stop's end, each
        // worker's three batches (150 ms) in it.
        assert!(o.loop_ns > 150e6 && o.wait_ns > 0.0, "{}", o.loop_ns);
    }

    #[test]
    fn a_folder_without_a_loop_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("lotus_worker_pid_7"),
            "SLoader,1000,50,kind=op\nSBatch,900,400,kind=batch,batch=0\n",
        )
        .unwrap();
        let e = read(tmp.path().into(), 2.0).unwrap_err().to_string();
        assert!(e.contains("no training loop"), "{e}");
    }
}
