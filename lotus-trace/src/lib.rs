//! Pipeline traces: when each op, sample and batch ran in every DataLoader
//! worker, and how long the main process waited for each batch.
//!
//! # The log format
//!
//! One file per process, `<prefix>_main_pid_<pid>` or
//! `<prefix>_worker_pid_<pid>` (any prefix; an optional `.log`, `.txt` or
//! `.csv` extension). One event per line:
//!
//! ```text
//! #lotus-trace v1 role=worker pid=4242 host=node1 rank=0 local_rank=0 world_size=2
//! SRandomResizedCrop,1700000000000000000,1250000,kind=op,batch=3,sample=97
//! SBatch,1700000000000000000,95000000,kind=batch,batch=3
//! ```
//!
//! - `S<Name>,<start_ns>,<duration_ns>` is the original LotusTrace line:
//!   wall-clock nanoseconds shared by all processes (Python's
//!   `time.time_ns()`), whole numbers.
//! - Optional `key=value` fields follow (lotus's extension): `kind=op|
//!   sample|fetch|batch|wait|consume`, `batch=<id>`, `sample=<index>`,
//!   `ready=0|1` (a wait for a batch that was already there), `tid=<native
//!   thread id>` (the thread that ran the span, written only where it is
//!   not the process's main thread). Unknown keys are ignored, so fields
//!   can be added.
//! - An optional first line `#lotus-trace v1 role=<main|worker> pid=<pid>
//!   host=<hostname> rank=<rank or ->` gives the process's host and rank
//!   (the tracer also writes `local_rank=` and `world_size=`, from the
//!   environment torchrun sets, for people reading the logs, and `run=`,
//!   the id of the `lotus trace run` that wrote it, so that a run counts
//!   only its own logs; the readers need only `rank`) (role and pid are always the file name's: the tracer renames a log
//!   when its process turns out to be a worker and keeps the first
//!   header). The header also carries `wall_ns=` and `monotonic_ns=`,
//!   the wall clock and `CLOCK_MONOTONIC` read back to back, repeated in
//!   `# lotus-trace: clock wall_ns=... monotonic_ns=...` lines with each
//!   block of events (`lotus_protocol::ClockMap`). Other `#` lines are comments.
//!
//! Lotus's tracer writes `S<Op>` per transform (`kind=op`), `SLoader`
//! (`kind=op`), `SSample` (`kind=sample`), per batch in a worker `SFetch`,
//! `SCollation` (`kind=op`) and `SBatch` (`kind=batch`), and in the main
//! process `SWait` (`kind=wait`, `ready=0|1`) and `SConsume` (duration 0,
//! `kind=consume`).
//!
//! ## The original fork's logs
//!
//! The original tool (a rebuilt PyTorch 2.0 / torchvision 0.15, repository
//! `rajveerb/lotus`) writes the same three fields with no `key=value`
//! fields; the parser gives its lines the same meaning through their names
//! (the table below):
//!
//! | original line | written by | read as |
//! |---|---|---|
//! | `S<Transform>,start,dur` | `Compose.__call__`, per transform and sample | `op` |
//! | `SCollation,start,dur` | `_MapDatasetFetcher.fetch`, per batch | `op` |
//! | `SBatchPreprocessed_<id>,start,dur` | worker loop, around `fetcher.fetch` | `batch`, batch `<id>` |
//! | `SBatchWait_<id>,start,dur` | main, `_next_data` | `wait`, batch `<id>`; a duration of exactly 1000 ns is its placeholder for a batch that arrived out of order, already there: `ready` |
//! | `SBatchConsumed_<id>,ts,1000` | main, when the batch is returned | `consume`, batch `<id>` |
//! | `SBatchQueued_<id>,ts,1000` | main, `_try_put_index` | `queue`, batch `<id>` |
//!
//! # Reading
//!
//! [`TraceReader`] reads one file, one line at a time from any
//! `BufRead` (memory does not grow with the file); a truncated or garbled
//! line is an [`Entry::Bad`] naming the file and line, and reading
//! goes on. [`TraceFolder`] finds the logs (and PyTorch profiler traces) under a
//! folder, recursively, so the logs of several processes, ranks or
//! machines merge into one timeline. [`TraceIndex`] gathers what
//! views and statistics need (sorting past memory through `lotus-sort`);
//! [`TraceStats`] holds the figures of `lotus trace stats` and
//! [`rank_stats`] those per rank; [`ChromeWriter`] writes the Chrome trace
//! event JSON of `lotus trace view`; [`scan_torch_trace`] and
//! [`for_each_torch_event_shifted`] stream a PyTorch profiler trace into it.
//!
//! ```
//! use lotus_trace::{Entry, Kind, Process, Role, TraceReader};
//!
//! let log = "#lotus-trace v1 role=worker pid=7\nSToTensor,1000,50,kind=op,batch=0,sample=3\nSBatch,900,400,kind=batch,batch=0\n";
//! let reader = TraceReader::new(log.as_bytes(), "run_worker_pid_7", Process::new(Role::Worker, 7));
//! let events: Vec<_> = reader
//!     .filter_map(|e| match e.unwrap() { Entry::Event(e) => Some(e), _ => None })
//!     .collect();
//! assert_eq!((&*events[0].name, events[0].kind, events[0].sample), ("ToTensor", Kind::Op, Some(3)));
//! assert_eq!((events[1].kind, events[1].dur_ns), (Kind::Batch, 400));
//! ```

mod chrome;
mod configurations;
mod event;
mod folder;
mod header;
mod index;
mod parse;
mod ranks;
mod stats;
mod straggler;
mod torch;

pub use chrome::{ChromeWriter, FlowAt, Flows};
pub use configurations::configurations_of;
pub use event::{BlockReader, Event, HandedBy, Kind, LoaderConfig, OpSpan, Process, Role, Usage};
pub use folder::{Item, LogFile, TraceFolder};
pub use header::{HostFolder, JobHosts, LogHeader, NotOneJob};
pub use index::{DurationKey, ProcessEntry, TraceIndex, PID_STRIDE};
/// The memory a sort of the index may hold ([`TraceIndex::load`]'s
/// budget), re-exported from `lotus-sort`.
pub use lotus_sort::Budget;
/// A trace folder as readers take it (a path, or a folder opened once
/// and shared by a report's readers), re-exported from `lotus-sys`.
pub use lotus_sys::input::{Dir, SharedFolder};
pub use parse::{
    parse_event_line, parse_file_name, BadLine, Entry, FileName, LineEvent, TraceReader,
    CPU_SLACK_NS, CUT_SHORT, HEADER_TAG, MAX_LINE_BYTES,
};
pub use ranks::{
    node_stats_with, process_ranks, rank_stats, rank_stats_with, NodeStats, RankStats,
};
pub use stats::{
    loop_figures, op_totals, percentile, BatchStats, BeforeRemoval, BucketRow, ConfigComparison,
    ConfigRow, DelayStats, KindSummary, LoopFigures, MainLoop, NamedSummary, Outlier, OutlierRule,
    PerBatch, PerBatchRows, ProcessRow, Summary, TraceStats, WaitBucket, WaitStats,
};
pub use straggler::{
    ops_by_node, ops_by_rank, straggler, OpOnRank, Straggler, StragglerOp, STRAGGLER_RATIO,
};
pub use torch::{for_each_torch_event_shifted, scan_torch_trace, Alignment, TorchScan};

/// A trace that cannot be read at all (a bad line is not one: it is
/// reported and skipped).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A file or folder could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The folder holds no trace logs.
    #[error("{path}: no trace logs in it (expected files named <prefix>_main_pid_<pid> or <prefix>_worker_pid_<pid>, as `lotus trace run --out DIR` writes)")]
    NoLogs {
        /// The folder.
        path: String,
    },
    /// A temporary file for sorting a long trace failed.
    #[error(transparent)]
    Spill(#[from] lotus_sort::SpillError),
    /// The configurations to compare cannot be listed, or a parent folder
    /// holds none (the text says which and why).
    #[error("{0}")]
    Configurations(String),
    /// A PyTorch profiler trace is not valid JSON or has no `traceEvents`.
    #[error("{path}: not a readable PyTorch profiler trace: {message}")]
    Torch {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl TraceError {
    /// An I/O error about `path`.
    pub fn io(path: impl std::fmt::Display, e: &std::io::Error) -> Self {
        TraceError::Io {
            path: path.to_string(),
            message: e.to_string(),
        }
    }
}

/// The bad lines met while reading: the first [`Warnings::KEEP`] in full,
/// and how many there were in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warnings {
    /// The first bad lines, in reading order.
    pub shown: Vec<BadLine>,
    /// How many bad lines there were.
    pub total: u64,
}

impl Warnings {
    /// How many bad lines are kept in full.
    pub const KEEP: usize = 50;

    /// Records one bad line.
    pub fn push(&mut self, bad: BadLine) {
        self.total += 1;
        if self.shown.len() < Self::KEEP {
            self.shown.push(bad);
        }
    }

    /// How many bad lines were counted but not kept.
    pub fn not_shown(&self) -> u64 {
        self.total - self.shown.len() as u64
    }
}

/// Internals that are not API: each block must fail to compile (E0603:
/// private). The trace index's spilled records:
///
/// ```compile_fail,E0603
/// use lotus_trace::index::BatchRec;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_trace::index::MainRec;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_trace::index::DurCount;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_trace::index::BatchRow;
/// ```
///
/// The old trace format's name rules:
///
/// ```compile_fail,E0603
/// use lotus_trace::parse::infer_kind;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;

/// Public enums are `#[non_exhaustive]`: other crates match them with a
/// wildcard arm, so adding a variant is not a breaking change.
///
/// ```compile_fail,E0004
/// fn name(k: lotus_trace::Kind) -> &'static str {
///     use lotus_trace::Kind::*;
///     match k {
///         Op => "op", Sample => "sample", Fetch => "fetch", Batch => "batch",
///         Wait => "wait", Consume => "consume", Queue => "queue",
///     }
/// }
/// ```
#[cfg(doctest)]
pub struct NonExhaustive;

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
