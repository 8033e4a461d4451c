//! The event model: what one trace line says, and the process it came from.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// What an event measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Kind {
    /// One preprocessing op on one sample (a transform, `Loader`), or a
    /// per-batch op (`Collation`).
    Op,
    /// One dataset item: loading and transforming sample `sample`.
    Sample,
    /// A worker fetching the samples of a batch.
    Fetch,
    /// A worker's whole preprocessing of batch `batch` (fetch and
    /// collation).
    Batch,
    /// The main process waiting for batch `batch`.
    Wait,
    /// The main process taking batch `batch` (a point in time).
    Consume,
    /// The main process handing batch `batch`'s indices to a worker (the
    /// original fork's `SBatchQueued_<id>`).
    Queue,
    /// A thread of the process named by the tracer (a point in time: its
    /// name is the thread's, `tid=` the thread): the DataLoader's own
    /// machinery (a multiprocessing queue's feeder thread, the resource
    /// sharer, lotus's watch thread), never an op's thread pool.
    Thread,
    /// The main process starting its DataLoader's workers (`iter(loader)`
    /// building a multiprocessing iterator: `SWorkersStart`).
    Start,
    /// The main process stopping its DataLoader's workers (the last
    /// `next()` of an epoch, or the iterator dropped: `SWorkersStop`; not
    /// a persistent iterator's).
    Stop,
    /// The DataLoader's settings at an `iter(loader)` (a point in time, in
    /// the main process, before the workers start): see
    /// [`Event::config`].
    Config,
    /// Work a helper thread (`tid=`) ran for another thread of its process:
    /// a callable submitted to a Python thread pool
    /// (`concurrent.futures.ThreadPoolExecutor`), its run; see
    /// [`Event::task`] for who handed it over and when.
    Task,
}

impl Kind {
    /// Every kind, in display order.
    pub const ALL: [Kind; 12] = [
        Kind::Op,
        Kind::Sample,
        Kind::Fetch,
        Kind::Batch,
        Kind::Wait,
        Kind::Consume,
        Kind::Queue,
        Kind::Thread,
        Kind::Start,
        Kind::Stop,
        Kind::Config,
        Kind::Task,
    ];

    /// The kind's name in logs (`kind=...`) and outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Op => "op",
            Kind::Sample => "sample",
            Kind::Fetch => "fetch",
            Kind::Batch => "batch",
            Kind::Wait => "wait",
            Kind::Consume => "consume",
            Kind::Queue => "queue",
            Kind::Thread => "thread",
            Kind::Start => "start",
            Kind::Stop => "stop",
            Kind::Config => "config",
            Kind::Task => "task",
        }
    }

    /// The kind named `text` (as in `kind=...`).
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::parse_bytes(text.as_bytes())
    }

    /// [`Kind::parse`] of bytes (a trace line's value, read in place).
    pub(crate) fn parse_bytes(text: &[u8]) -> Option<Kind> {
        // A match on the literals (not a search through `ALL`): compared
        // inline, once per event line.
        Some(match text {
            b"op" => Kind::Op,
            b"sample" => Kind::Sample,
            b"fetch" => Kind::Fetch,
            b"batch" => Kind::Batch,
            b"wait" => Kind::Wait,
            b"consume" => Kind::Consume,
            b"queue" => Kind::Queue,
            b"thread" => Kind::Thread,
            b"start" => Kind::Start,
            b"stop" => Kind::Stop,
            b"config" => Kind::Config,
            b"task" => Kind::Task,
            _ => return None,
        })
    }

    /// Whether `lotus trace view --coarse` keeps events of this kind:
    /// batches, waits, consumptions and the workers' start and stop.
    pub fn is_coarse(self) -> bool {
        matches!(
            self,
            Kind::Batch | Kind::Wait | Kind::Consume | Kind::Start | Kind::Stop
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which DataLoader process wrote a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The training process, which consumes batches.
    Main,
    /// A DataLoader worker, which preprocesses them.
    Worker,
}

impl Role {
    /// `main` or `worker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Main => "main",
            Role::Worker => "worker",
        }
    }

    /// The role named `text`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "main" => Some(Role::Main),
            "worker" => Some(Role::Worker),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process a log file belongs to: from its name, and its
/// `#lotus-trace` header where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Process {
    /// The process id.
    pub pid: u32,
    /// Main process or worker.
    pub role: Role,
    /// The machine, where the header names it.
    pub host: Option<Arc<str>>,
    /// The distributed rank, where the header names one.
    pub rank: Option<u32>,
}

impl Process {
    /// A process known only by its role and pid.
    pub fn new(role: Role, pid: u32) -> Self {
        Process {
            pid,
            role,
            host: None,
            rank: None,
        }
    }

    /// `worker 4242 (host node1, rank 0)`: a name for a timeline track.
    pub fn label(&self) -> String {
        let mut s = format!("{} {}", self.role, self.pid);
        let mut extra = Vec::new();
        if let Some(h) = &self.host {
            extra.push(format!("host {h}"));
        }
        if let Some(r) = self.rank {
            extra.push(format!("rank {r}"));
        }
        if !extra.is_empty() {
            s += &format!(" ({})", extra.join(", "));
        }
        s
    }
}

/// What a span's process and thread used (the tracer's `pcpu=`, `delay=`,
/// `pcpu_at=` and `delay_at=` fields, ns): on batch, wait, consume, start
/// and stop events. Each is `None` where the log does not say.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct Usage {
    /// The CPU time of the whole process (all its threads) during the span
    /// (`pcpu=`: batch, start and stop spans).
    pub pcpu_ns: Option<u64>,
    /// The span's thread's run-queue delay during it: time it was ready to
    /// run but waited for a CPU (`delay=`, from
    /// `/proc/thread-self/schedstat`; batch, start and stop spans).
    pub delay_ns: Option<u64>,
    /// The process's CPU time so far at the span's start (`pcpu_at=`,
    /// absolute: batch and wait spans, consume points). In a worker, its
    /// CPU since it started.
    pub pcpu_at_ns: Option<u64>,
    /// The thread's run-queue delay so far at the span's start
    /// (`delay_at=`, absolute: wait spans and consume points).
    pub delay_at_ns: Option<u64>,
    /// The process's CPU time in the kernel during the span (`psys=`:
    /// page faults, system calls; batch, start and stop spans): what a
    /// fresh worker pays that a warm main process mostly does not.
    pub psys_ns: Option<u64>,
}

impl Usage {
    /// Whether no field is given.
    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// A DataLoader's settings, as the tracer saw them at an `iter(loader)`
/// (a [`Kind::Config`] event).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct LoaderConfig {
    /// `num_workers` (`workers=`; 0: batches are made in the main
    /// process).
    pub workers: u32,
    /// `prefetch_factor` (`prefetch=`; `None`: `-`, as with no workers).
    pub prefetch: Option<u32>,
    /// `persistent_workers` (`persistent=0|1`).
    pub persistent: bool,
    /// `pin_memory` (`pin=0|1`).
    pub pin: bool,
    /// `batch_size` (`batch_size=`; `None`: `-`, no automatic batching).
    pub batch_size: Option<u64>,
    /// The workers' start method (`method=`: `fork`, `spawn`,
    /// `forkserver`; `None`: `-`).
    pub method: Option<String>,
    /// `len(loader)`, batches an epoch (`len=`; `None`: `-`, an iterable
    /// dataset with no length).
    pub len: Option<u64>,
    /// Whether lotus changed these settings (`overridden=1`: the
    /// `LOTUS_LOADER` environment variable, as `lotus tune` sets it).
    pub overridden: bool,
}

/// One event: a span (or, for [`Kind::Consume`], a point) in one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The name without the log's leading `S` (and without the original
    /// fork's `_<id>` suffix): `RandomResizedCrop`, `Loader`, `Batch`,
    /// `BatchPreprocessed`...
    pub name: Arc<str>,
    /// What it measures.
    pub kind: Kind,
    /// The process id.
    pub pid: u32,
    /// Main process or worker.
    pub role: Role,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_ns: u64,
    /// Duration in ns.
    pub dur_ns: u64,
    /// The batch id, where known.
    pub batch: Option<u64>,
    /// The sample (dataset index), where known.
    pub sample: Option<u64>,
    /// For a wait: whether the batch was already there.
    pub ready: Option<bool>,
    /// The machine, where known.
    pub host: Option<Arc<str>>,
    /// The distributed rank, where known.
    pub rank: Option<u32>,
    /// The native id of the thread that ran it, where the log says
    /// (`tid=`; `None`: the process's main thread).
    pub tid: Option<u32>,
    /// For an op: the CPU time its own thread ran during it, ns, where the
    /// log says (`cpu=`, read from the thread's CPU clock at the span's
    /// start and end; `None` in logs written before it was).
    pub cpu_ns: Option<u64>,
    /// For an op span lotus's wrapper wrote: the CPU time the wrapped
    /// call cost its thread outside the span, ns (`hook=`, the tracer's
    /// per-process measure of its wrapper; `None` where the log does not
    /// say). It ran inside the parent span, if any: it is in the parent's
    /// `cpu=`, not in this span's.
    pub hook_ns: Option<u64>,
    /// What lotus's wrapper cost the thread inside this span, ns
    /// (`hook_in=`, a per-process calibration: in this span's `cpu=`;
    /// `None` where the log does not say).
    pub hook_in_ns: Option<u64>,
    /// What the span's process and thread used, where the log says
    /// (`pcpu=`, `delay=`, `pcpu_at=`, `delay_at=`: batch, wait, consume,
    /// start and stop events); `None` in older logs.
    pub usage: Option<Box<Usage>>,
    /// The DataLoader's settings, on a `kind=config` event.
    pub config: Option<Box<LoaderConfig>>,
    /// On the tracer's `gc` op span: the generation collected (`gen=`).
    pub gc: Option<u8>,
    /// On a [`Kind::Task`] span: who handed the work over, and when.
    pub task: Option<HandedBy>,
}

/// An op's span in the fields a model of the run reads: what
/// [`crate::TraceIndex::load_with`] hands its [`BlockReader`] for each op
/// line (most of a log's lines), made without the rest of an [`Event`]
/// and with its name borrowed from the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSpan<'a> {
    /// The op's name, as [`Event::name`].
    pub name: &'a str,
    /// The process id.
    pub pid: u32,
    /// Main process or worker.
    pub role: Role,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_ns: u64,
    /// Duration in ns.
    pub dur_ns: u64,
    /// The batch id, where known.
    pub batch: Option<u64>,
    /// The thread, as [`Event::tid`].
    pub tid: Option<u32>,
    /// Its own thread's CPU during it, as [`Event::cpu_ns`].
    pub cpu_ns: Option<u64>,
    /// On the tracer's `gc` span: the generation collected.
    pub gc: Option<u8>,
}

impl<'a> OpSpan<'a> {
    /// The op event `e` in brief.
    pub fn of(e: &'a Event) -> OpSpan<'a> {
        OpSpan {
            name: &e.name,
            pid: e.pid,
            role: e.role,
            start_ns: e.start_ns,
            dur_ns: e.dur_ns,
            batch: e.batch,
            tid: e.tid,
            cpu_ns: e.cpu_ns,
            gc: e.gc,
        }
    }
}

/// A reader of the events of one block of a log, of the kinds it wants,
/// fed in line order on the thread that parses the block
/// ([`crate::TraceIndex::load_with`]): its work per event runs on the
/// parsing threads, in parallel, and the caller then takes the readers
/// of the blocks in order, to join what each read. (The predictions'
/// model sums each batch's ops there: on the one thread that gathers the
/// blocks it was a sixth of `trace stats`.)
pub trait BlockReader: Send {
    /// An op line, in brief.
    fn op(&mut self, op: &OpSpan<'_>);
    /// Any other event of a wanted kind.
    fn event(&mut self, e: Event);
    /// Any event of a wanted kind: an op's handed over in brief.
    fn take(&mut self, e: Event) {
        if e.kind == Kind::Op {
            self.op(&OpSpan::of(&e));
        } else {
            self.event(e);
        }
    }
}

/// No reader: [`crate::TraceIndex::load`]'s.
impl BlockReader for () {
    fn op(&mut self, _: &OpSpan<'_>) {}
    fn event(&mut self, _: Event) {}
}

/// Who handed a [`Kind::Task`]'s work over: the thread (`by=`, its native
/// id; the pid for the process's main thread) and when (`at=`, ns on the
/// log's clock, at or before the task's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandedBy {
    /// The native id of the thread that handed the work over.
    pub by: u32,
    /// When it did, ns since the Unix epoch (the log's clock).
    pub at_ns: u64,
}

impl Event {
    /// A span `name` of `kind` in process `pid` (`role`), from `start_ns`
    /// for `dur_ns`, with none of the optional fields: what a reader of
    /// events builds to hand over events of its own (and tests theirs),
    /// setting the fields it has after.
    pub fn span(name: &str, kind: Kind, pid: u32, role: Role, start_ns: u64, dur_ns: u64) -> Event {
        Event {
            name: name.into(),
            kind,
            pid,
            role,
            start_ns,
            dur_ns,
            batch: None,
            sample: None,
            ready: None,
            host: None,
            rank: None,
            tid: None,
            cpu_ns: None,
            hook_ns: None,
            hook_in_ns: None,
            usage: None,
            config: None,
            gc: None,
            task: None,
        }
    }

    /// When it ended, ns since the Unix epoch (the reader checks that this
    /// does not overflow).
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }

    /// The process it came from.
    pub fn process(&self) -> Process {
        Process {
            pid: self.pid,
            role: self.role,
            host: self.host.clone(),
            rank: self.rank,
        }
    }
}
