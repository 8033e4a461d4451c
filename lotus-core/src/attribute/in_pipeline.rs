//! In-pipeline attribution (`lotus attribute DIR`): the samples of a
//! sampled trace (`lotus trace run --sample`) credited to the op spans that
//! were open when they were taken, with no mapping and no splitting rule.
//!
//! The rule:
//!
//! 1. a sample is credited to the innermost op span open on its own thread
//!    at its time (spans carry their thread, `tid=`; times are put on the
//!    samples' clock with the clock pairs each log measured);
//! 2. a helper thread of a process (a thread with no op spans of its own)
//!    is that process's intra-op pool when it runs with the ops: its
//!    sampling rate while the process's main thread is outside every op
//!    is under a fifth of its rate while it is inside one, both measured
//!    between the thread's own first and last sample (a thread started
//!    late is not judged by the process's start-up). Its samples
//!    taken while the main thread is inside an op are credited to the
//!    innermost op open there; the others go to "outside any op";
//! 3. any other helper thread runs independently of the ops: its samples
//!    go to "independent threads" (per process role), never to an op.
//!
//! Everything else is an explicit row: "outside any op" per role (main,
//! worker: DataLoader machinery between ops, the training step, start-up),
//! and "untraced processes" (processes of the job that wrote no log). The
//! rows add up to every sample read.
//!
//! Counters read with each sample (samples file version 2; see
//! [`crate::trace::samples`]) follow their sample: each sample's deltas,
//! which cover its thread's interval since its previous sample, are added
//! to the row the sample is credited to. So the rows' counters add up to
//! the job's counts, and an op's `task-clock` is its CPU time measured
//! rather than estimated from sample counts. CPI (cycles per instruction)
//! is given per row where both `cycles` and `instructions` are read.
//! Counters the kernel refused are said once, in a note and in
//! [`InPipelineAttribution::counters_unsupported`], never as zeros.
//!
//! Memory: the samples are streamed (twice: once to tell pools from
//! independent threads, once to credit); the op spans are sorted by start
//! through [`crate::spill`] (in memory up to its budget, past that in a
//! temporary file) and swept alongside; only the spans open at a time and
//! per-thread, per-op and per-symbol counts are held.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufReader;
use std::path::Path;

use serde::Serialize;

use crate::spill::bytes::{Get, Put};
use crate::spill::{Budget, Record, Sorter, SpillError, Spool};
use crate::trace::clock::{clock_pair_of_line, ClockMap};
use crate::trace::folder::{Item, LogFile};
use crate::trace::samples::{Sample, SampleFiles, SymbolTable};
use crate::trace::{Entry, Kind, Role, TraceFolder};

/// The slowdown by sampling (percent) above which `attribute DIR` says so.
const SLOWDOWN_NOTE_PCT: f64 = 5.0;

/// How many top functions each row lists by default.
pub const TOP_FUNCTIONS: usize = 5;
/// A helper thread is an intra-op pool when its sampling rate outside the
/// main thread's ops is under this fraction of its rate inside them.
pub const POOL_RATE_RATIO: f64 = 0.2;

/// Why a folder cannot be attributed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InPipelineError {
    /// A file could not be read.
    #[error("{0}")]
    Io(String),
    /// The trace logs could not be read.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// Sorting the spans failed.
    #[error(transparent)]
    Spill(#[from] SpillError),
    /// The folder has no samples.
    #[error("{0}")]
    NoSamples(String),
    /// A log has no clock pairs (written by an older lotus).
    #[error("{path}: no clock pairs (wall_ns= / monotonic_ns=): the trace was written by an older lotus; trace again with `lotus trace run --sample`")]
    NoClock {
        /// The log.
        path: String,
    },
    /// A log in the original format (`lotus trace run --format original`,
    /// or the original PyTorch fork): no header, no clock pairs.
    #[error("{path}: a log in the original format (`lotus trace run --format original`, or the original PyTorch fork): it has no header and no clock pairs, so its spans cannot be put on the samples' clock; `lotus attribute` needs a trace taken with `lotus trace run --sample` without `--format original` (`lotus trace view` and `lotus trace stats` read this one as it is)")]
    OriginalFormat {
        /// The log.
        path: String,
    },
    /// A figure of a trace file past what lotus can count.
    #[error("{path}: {field}: {message}")]
    Overflow {
        /// The file.
        path: String,
        /// The field (`interval_ns=...`).
        field: String,
        /// What overflows.
        message: String,
    },
}

/// What a row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RowKind {
    /// An op: its spans' samples (and its pools').
    Op,
    /// Traced threads outside every op span.
    Outside,
    /// Helper threads that run independently of the ops.
    Independent,
    /// Processes of the job that wrote no trace log.
    Untraced,
}

/// One function's samples in a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TopFunction {
    /// The function.
    pub function: String,
    /// Its module.
    pub module: String,
    /// Samples.
    pub samples: u64,
    /// Share of the row's samples (0..1).
    pub share: f64,
}

/// One row of the attribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AttributedRow {
    /// The op's name, or the row's (`outside any op (worker)`).
    pub name: String,
    /// What it stands for.
    pub kind: RowKind,
    /// Samples credited.
    pub samples: u64,
    /// CPU time: samples times the sampling interval, ns.
    pub cpu_ns: u64,
    /// Share of all samples (0..1).
    pub share: f64,
    /// Op spans of this name (ops only).
    pub calls: Option<u64>,
    /// CPU time per call, ns (ops only).
    pub cpu_per_call_ns: Option<u64>,
    /// The functions with the most samples, most first.
    pub top_functions: Vec<TopFunction>,
    /// The counters read with each sample, summed over the row's samples
    /// (empty when the samples carry none).
    pub counters: BTreeMap<String, u64>,
    /// Cycles per instruction, where both are read and instructions are
    /// not 0.
    pub cpi: Option<f64>,
}

/// Counters that were asked for but could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CountersUnsupported {
    /// The counters asked for.
    pub counters: Vec<String>,
    /// The kernel's reason.
    pub reason: String,
}

/// The attribution of a sampled trace folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InPipelineAttribution {
    /// Sampling frequency, Hz.
    pub frequency_hz: u64,
    /// Sampling interval, ns.
    pub interval_ns: u64,
    /// Every sample read.
    pub total_samples: u64,
    /// Samples lost by the kernel (not in any row).
    pub lost_samples: u64,
    /// Whether the collection did not end normally (lotus stopped while the
    /// job ran, or a cut file): what was written is analysed.
    pub partial: bool,
    /// Ops first (most samples first), then the other rows.
    pub rows: Vec<AttributedRow>,
    /// The counters read with each sample, in the samples file's order.
    pub counters: Vec<String>,
    /// Each counter summed over every sample (the rows add up to it).
    pub counter_totals: BTreeMap<String, u64>,
    /// Counters asked for that the kernel refused, and why.
    pub counters_unsupported: Option<CountersUnsupported>,
    /// Helper threads found to be intra-op pools, as `pid/tid`.
    pub pool_threads: Vec<String>,
    /// Helper threads found independent of the ops, as `pid/tid`.
    pub independent_threads: Vec<String>,
    /// Things worth telling the user.
    pub notes: Vec<String>,
}

/// One op span on the samples' clock. `id` is the span's place in
/// reading order among every event of the folder (the count
/// [`crate::trace::TraceFolder::read_all`] gives, the key `lotus trace
/// view` finds its events by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SpanRec {
    start: u64,
    end: u64,
    pid: u32,
    tid: u32,
    op: u32,
    id: u64,
}

impl Record for SpanRec {
    const SIZE: usize = 36;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.start)
            .u64(self.end)
            .u32(self.pid)
            .u32(self.tid)
            .u32(self.op)
            .u64(self.id);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        SpanRec {
            start: g.u64(),
            end: g.u64(),
            pid: g.u32(),
            tid: g.u32(),
            op: g.u32(),
            id: g.u64(),
        }
    }
}

/// The op spans open at the time of the last sample, per thread.
struct Sweep<I: Iterator<Item = Result<SpanRec, SpillError>>> {
    spans: std::iter::Peekable<I>,
    open: HashMap<(u32, u32), Vec<SpanRec>>,
    pushed: u64,
}

impl<I: Iterator<Item = Result<SpanRec, SpillError>>> Sweep<I> {
    fn new(spans: I) -> Self {
        Sweep {
            spans: spans.peekable(),
            open: HashMap::new(),
            pushed: 0,
        }
    }

    /// Takes in every span that starts at or before `t`.
    fn advance(&mut self, t: u64) -> Result<(), SpillError> {
        while let Some(next) = self.spans.peek() {
            match next {
                Ok(s) if s.start > t => break,
                _ => {}
            }
            let s = self.spans.next().expect("peeked")?;
            self.open.entry((s.pid, s.tid)).or_default().push(s);
            self.pushed += 1;
            if self.pushed.is_multiple_of(4096) {
                self.open.retain(|_, v| {
                    v.retain(|s| s.end > t);
                    !v.is_empty()
                });
            }
        }
        Ok(())
    }

    /// The innermost span open on thread (pid, tid) at `t`.
    fn innermost(&mut self, pid: u32, tid: u32, t: u64) -> Option<SpanRec> {
        let list = self.open.get_mut(&(pid, tid))?;
        list.retain(|s| s.end > t);
        list.iter()
            .filter(|s| s.start <= t)
            .max_by_key(|s| (s.start, Reverse(s.end)))
            .copied()
    }
}

/// What the logs hold: processes, op names and calls, spans sorted.
struct Logs {
    roles: HashMap<u32, Role>,
    ops: Vec<String>,
    calls: Vec<u64>,
    /// Threads with op spans of their own.
    traced_threads: HashSet<(u32, u32)>,
    spans: Spool<SpanRec>,
    bad_lines: u64,
    /// Logs skipped (empty: the process wrote nothing), each with why.
    skipped_logs: Vec<String>,
}

/// The clock pairs of `log` (its `#` lines): a span's time needs those
/// on both sides of it, so they are read before its events. `Ok(Err(why))`
/// for a log with nothing in it (no complete line: the process wrote
/// nothing, or was killed, or the disk was full); an error for a log whose events
/// have no clock pairs, saying why (an older lotus's header, or the
/// original format).
fn clock_of(log: &LogFile) -> Result<Result<ClockMap, String>, InPipelineError> {
    let io = |e: std::io::Error| InPipelineError::Io(format!("{}: {e}", log.display));
    let file = log.open_file().map_err(io)?;
    let size = file.size();
    let mut pairs = Vec::new();
    let (mut header, mut content) = (false, false);
    crate::input::for_each_line(
        BufReader::new(file),
        crate::trace::parse::MAX_LINE_BYTES,
        |line| -> std::io::Result<()> {
            if !line.ended || line.bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            content = true;
            if line.bytes.first() == Some(&b'#') {
                header |= line
                    .bytes
                    .starts_with(crate::trace::parse::HEADER_TAG.as_bytes());
                if let Some(p) = std::str::from_utf8(line.bytes)
                    .ok()
                    .and_then(clock_pair_of_line)
                {
                    pairs.push(p);
                }
            }
            Ok(())
        },
    )
    .map_err(io)?;
    let clock = ClockMap::new(pairs);
    if !clock.is_empty() {
        return Ok(Ok(clock));
    }
    if !content {
        return Ok(Err(if size == 0 {
            "empty: the process wrote nothing (disk full, or killed before it wrote?)".into()
        } else {
            "no complete line: the process was stopped while writing its first line (disk full, or killed?)".into()
        }));
    }
    let path = log.display.clone();
    Err(if header {
        InPipelineError::NoClock { path }
    } else {
        InPipelineError::OriginalFormat { path }
    })
}

/// Reads the op spans of every log, through the reader `lotus trace view`
/// reads them with, so that a span's id (its place in reading order) is
/// the same in both.
fn read_logs(dir: &Path, budget: Budget) -> Result<Logs, InPipelineError> {
    let folder = TraceFolder::scan(dir)?;
    let mut roles = HashMap::new();
    let mut ops: Vec<String> = Vec::new();
    let mut op_ids: HashMap<String, u32> = HashMap::new();
    let mut calls: Vec<u64> = Vec::new();
    let mut traced_threads = HashSet::new();
    let mut sorter: Sorter<SpanRec> = Sorter::new(budget);
    let mut bad_lines = 0u64;
    let mut clock = ClockMap::new(Vec::new());
    let mut next_id = 0u64;
    let mut skipped_logs = Vec::new();
    folder.read_all(|item| -> Result<(), InPipelineError> {
        let e = match item {
            Item::File(log) => {
                roles.insert(log.name.pid, log.name.role);
                clock = match clock_of(log)? {
                    Ok(clock) => clock,
                    Err(why) => {
                        skipped_logs.push(format!(
                            "{}: {why}; skipped, the other logs are analysed",
                            crate::input::escaped(&log.display)
                        ));
                        ClockMap::new(Vec::new())
                    }
                };
                return Ok(());
            }
            Item::Entry(Entry::Bad(_)) => {
                bad_lines += 1;
                return Ok(());
            }
            Item::Entry(Entry::Event(e)) => e,
        };
        let id = next_id;
        next_id += 1;
        if e.kind != Kind::Op {
            return Ok(());
        }
        let (Some(start), Some(end)) = (
            clock.to_monotonic(e.start_ns),
            clock.to_monotonic(e.end_ns()),
        ) else {
            bad_lines += 1;
            return Ok(());
        };
        let op = match op_ids.get(&*e.name) {
            Some(&op) => op,
            None => {
                let op = ops.len() as u32;
                ops.push(e.name.to_string());
                calls.push(0);
                op_ids.insert(e.name.to_string(), op);
                op
            }
        };
        calls[op as usize] += 1;
        let pid = e.pid;
        let tid = e.tid.unwrap_or(pid);
        if tid != pid {
            traced_threads.insert((pid, tid));
        }
        sorter.push(SpanRec {
            start,
            end,
            pid,
            tid,
            op,
            id,
        })?;
        Ok(())
    })?;
    let mut spans = Spool::new(budget);
    for s in sorter.finish()? {
        spans.push(s?)?;
    }
    Ok(Logs {
        roles,
        ops,
        calls,
        traced_threads,
        spans,
        bad_lines,
        skipped_logs,
    })
}

/// Per helper thread: samples inside / outside the main thread's ops, its
/// first and last sample, and the main thread's op time in between.
#[derive(Debug, Clone, Copy)]
struct HelperCounts {
    inside: u64,
    outside: u64,
    first: u64,
    last: u64,
    covered_ns: u64,
}

/// Adds to each helper thread the time its process's main thread spent
/// in ops (the union of its op spans) within the thread's first and last
/// sample: one pass over the spans, in start order.
fn main_op_time_in_windows(
    spans: &mut Spool<SpanRec>,
    helpers: &mut HashMap<(u32, u32), HelperCounts>,
) -> Result<(), SpillError> {
    let mut by_pid: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    for key in helpers.keys() {
        by_pid.entry(key.0).or_default().push(*key);
    }
    let add = |pid: u32, a: u64, b: u64, helpers: &mut HashMap<(u32, u32), HelperCounts>| {
        for key in by_pid.get(&pid).into_iter().flatten() {
            let h = helpers.get_mut(key).expect("helper");
            let (lo, hi) = (a.max(h.first), b.min(h.last));
            h.covered_ns += hi.saturating_sub(lo);
        }
    };
    // Per process: the union interval being built.
    let mut open: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in spans.iter()? {
        let s = s?;
        if s.tid != s.pid {
            continue;
        }
        match open.get_mut(&s.pid) {
            Some(cur) if s.start <= cur.1 => cur.1 = cur.1.max(s.end),
            Some(cur) => {
                let done = std::mem::replace(cur, (s.start, s.end));
                add(s.pid, done.0, done.1, helpers);
            }
            None => {
                open.insert(s.pid, (s.start, s.end));
            }
        }
    }
    for (pid, (a, b)) in open {
        add(pid, a, b, helpers);
    }
    Ok(())
}

/// Where the rule credits a sample: a row of the attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// The op of this id (its place in [`SampledTrace::ops`]).
    Op(u32),
    Outside(Role),
    Independent(Role),
    Untraced,
}

/// One sample as the rule credits it: its row and, for an op, the span
/// (its id: its place in reading order among the folder's events).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credit<'a> {
    pub(crate) sample: &'a Sample,
    pub(crate) target: Target,
    pub(crate) span: Option<u64>,
}

fn samples_of(
    files: &SampleFiles,
) -> Result<crate::trace::samples::SampleReader<BufReader<crate::input::SizedFile>>, InPipelineError>
{
    files
        .samples()
        .map_err(|e| InPipelineError::Io(e.to_string()))
}

/// A sampled trace folder read and ready to credit: its sampling
/// description and symbols, its op spans sorted, its helper threads told
/// apart (pools or independent). [`SampledTrace::credit`] is the one place
/// the rule is applied: `lotus attribute DIR` sums what it credits per
/// row, `lotus trace view` per span.
pub(crate) struct SampledTrace {
    files: SampleFiles,
    meta: HashMap<String, String>,
    pub(crate) symbols: SymbolTable,
    pub(crate) frequency_hz: u64,
    pub(crate) interval_ns: u64,
    /// The counters each sample carries, in record order.
    pub(crate) counters: Vec<String>,
    /// Counters asked for and refused by the kernel, with its reason.
    pub(crate) counters_unsupported: Option<CountersUnsupported>,
    logs: Logs,
    pools: HashSet<(u32, u32)>,
    pool_threads: Vec<String>,
    independent_threads: Vec<String>,
    notes: Vec<String>,
    /// Bytes of a cut last record, once the samples are read.
    cut_bytes: usize,
}

impl SampledTrace {
    /// Reads the sampled trace folder `dir` (logs of prefix-independent
    /// names, samples of `prefix`): an error when it has no samples or its
    /// logs no clock pairs. Streams the samples once, to tell pools from
    /// independent threads.
    pub(crate) fn open(
        dir: &Path,
        prefix: &str,
        budget: Budget,
    ) -> Result<SampledTrace, InPipelineError> {
        let files = SampleFiles::of(dir, prefix);
        let mut meta: HashMap<String, String> = HashMap::new();
        for (k, v) in files
            .read_sampling()
            .map_err(|e| InPipelineError::Io(e.to_string()))?
        {
            if k == "note" {
                continue;
            }
            if meta.contains_key(&k) {
                return Err(InPipelineError::Io(format!(
                    "{}: `{}=` is given twice: the file is damaged or was not written by lotus; trace again",
                    files.sampling.display(),
                    crate::input::escaped(&k)
                )));
            }
            meta.insert(k, v);
        }
        if meta.get("status").map(String::as_str) == Some("unavailable") {
            return Err(InPipelineError::NoSamples(format!(
                "{}: the trace was taken without samples: {}",
                dir.display(),
                crate::input::escaped(
                    meta.get("reason")
                        .map_or("perf could not run", String::as_str)
                )
            )));
        }
        let files = SampleFiles::open(dir, prefix).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                InPipelineError::NoSamples(e.to_string())
            } else {
                InPipelineError::Io(e.to_string())
            }
        })?;
        let symbols: SymbolTable = files
            .read_symbols()
            .map_err(|e| InPipelineError::Io(e.to_string()))?;
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        let frequency_hz = num("frequency_hz").unwrap_or(1000).max(1);
        let interval_ns = num("interval_ns").unwrap_or(1_000_000_000 / frequency_hz);
        let counters = counter_names(&meta, &files)?;
        // Every CPU time is samples times the interval: one that cannot
        // hold the samples the file can hold is refused here, by name,
        // rather than wrapped later.
        let most_samples = samples_of(&files)?.most_records();
        if most_samples.checked_mul(interval_ns).is_none() {
            return Err(InPipelineError::Overflow {
                path: files.sampling.display().to_string(),
                field: format!("interval_ns={interval_ns}"),
                message: format!(
                    "the samples file holds up to {most_samples} samples, and that many times this interval is past what lotus can count in ns: the file is damaged or was not written by lotus; trace again"
                ),
            });
        }
        let counters_unsupported =
            meta.get("counters_unsupported")
                .map(|names| CountersUnsupported {
                    counters: names.split(',').map(str::to_string).collect(),
                    reason: meta.get("counters_reason").cloned().unwrap_or_default(),
                });
        let logs = read_logs(dir, budget)?;
        let mut notes = logs.skipped_logs.clone();
        notes.extend(symbols.skipped_note(&files.symbols));
        if let Some(u) = &counters_unsupported {
            let hardware = meta.get("counters_kind").map(String::as_str) == Some("hardware");
            notes.push(crate::trace::samples::unsupported_note(
                hardware,
                &crate::input::escaped(&u.reason),
            ));
        }
        // Sampling slows the sampled threads; where it did so noticeably
        // (an expensive timer interrupt, as in some virtual machines), the
        // CPU times include that and the shares of interrupt-sensitive code
        // shift: say so, with the figure the collection measured.
        if let Some(pct) = meta
            .get("sampling_slowdown_pct")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&p| p >= SLOWDOWN_NOTE_PCT)
        {
            notes.push(format!(
                "sampling at {frequency_hz} Hz slowed the job's threads by about {pct:.0}% here ({} us a sample): CPU times include it; a lower --frequency disturbs less",
                crate::input::escaped(meta.get("sampling_cost_us").map_or("?", String::as_str))
            ));
        }
        if logs.bad_lines > 0 {
            notes.push(format!(
                "{} log lines could not be read and were skipped",
                logs.bad_lines
            ));
        }
        let mut trace = SampledTrace {
            files,
            meta,
            symbols,
            frequency_hz,
            interval_ns,
            counters,
            counters_unsupported,
            logs,
            pools: HashSet::new(),
            pool_threads: Vec::new(),
            independent_threads: Vec::new(),
            notes,
            cut_bytes: 0,
        };
        trace.find_pools()?;
        Ok(trace)
    }

    /// Pass 1: each helper thread's samples inside and outside its main
    /// thread's ops, its first and last sample; the pools are the threads
    /// that run (much) more while the main thread is in an op.
    fn find_pools(&mut self) -> Result<(), InPipelineError> {
        let logs = &mut self.logs;
        let mut helpers: HashMap<(u32, u32), HelperCounts> = HashMap::new();
        {
            let mut sweep = Sweep::new(logs.spans.iter()?);
            for s in samples_of(&self.files)? {
                let s = s.map_err(|e| InPipelineError::Io(e.to_string()))?;
                sweep.advance(s.time_ns)?;
                if s.tid == s.pid
                    || !logs.roles.contains_key(&s.pid)
                    || logs.traced_threads.contains(&(s.pid, s.tid))
                {
                    continue;
                }
                let inside = sweep.innermost(s.pid, s.pid, s.time_ns).is_some();
                let h = helpers.entry((s.pid, s.tid)).or_insert(HelperCounts {
                    inside: 0,
                    outside: 0,
                    first: s.time_ns,
                    last: s.time_ns,
                    covered_ns: 0,
                });
                h.first = h.first.min(s.time_ns);
                h.last = h.last.max(s.time_ns);
                if inside {
                    h.inside += 1;
                } else {
                    h.outside += 1;
                }
            }
        }
        main_op_time_in_windows(&mut logs.spans, &mut helpers)?;
        let mut helper_keys: Vec<_> = helpers.keys().copied().collect();
        helper_keys.sort_unstable();
        for key in helper_keys {
            let h = helpers[&key];
            let inside_ns = h.covered_ns;
            let outside_ns = (h.last - h.first).saturating_sub(inside_ns).max(1);
            let rate_in = if inside_ns > 0 {
                h.inside as f64 / inside_ns as f64
            } else {
                0.0
            };
            let rate_out = h.outside as f64 / outside_ns as f64;
            // A thread seen only inside ops (its window all op time) is a pool.
            if h.inside > 0 && (h.outside == 0 || rate_out < POOL_RATE_RATIO * rate_in) {
                self.pools.insert(key);
                self.pool_threads.push(format!("{}/{}", key.0, key.1));
            } else {
                self.independent_threads
                    .push(format!("{}/{}", key.0, key.1));
            }
        }
        Ok(())
    }

    /// Pass 2, the rule: hands every sample, in time order, to `f` with
    /// the row (and for an op, the span) it is credited to. Returns how
    /// many samples were read; the notes then say whether the run was
    /// partial.
    pub(crate) fn credit(
        &mut self,
        mut f: impl FnMut(Credit<'_>) -> Result<(), InPipelineError>,
    ) -> Result<u64, InPipelineError> {
        let logs = &mut self.logs;
        let mut total = 0u64;
        let mut reader = samples_of(&self.files)?;
        {
            let mut sweep = Sweep::new(logs.spans.iter()?);
            for s in reader.by_ref() {
                let s: Sample = s.map_err(|e| InPipelineError::Io(e.to_string()))?;
                sweep.advance(s.time_ns)?;
                total += 1;
                let (target, span) = match logs.roles.get(&s.pid) {
                    None => (Target::Untraced, None),
                    Some(&role) => {
                        let own = sweep.innermost(s.pid, s.tid, s.time_ns);
                        if let Some(span) = own {
                            (Target::Op(span.op), Some(span.id))
                        } else if s.tid == s.pid || logs.traced_threads.contains(&(s.pid, s.tid)) {
                            (Target::Outside(role), None)
                        } else if self.pools.contains(&(s.pid, s.tid)) {
                            match sweep.innermost(s.pid, s.pid, s.time_ns) {
                                Some(span) => (Target::Op(span.op), Some(span.id)),
                                None => (Target::Outside(role), None),
                            }
                        } else {
                            (Target::Independent(role), None)
                        }
                    }
                };
                f(Credit {
                    sample: &s,
                    target,
                    span,
                })?;
            }
        }
        self.cut_bytes = reader.cut_bytes();
        self.note_how_it_ended();
        Ok(total)
    }

    /// Adds the notes on a cut samples file, a run that did not end
    /// normally and samples the kernel lost.
    fn note_how_it_ended(&mut self) {
        let cut_bytes = self.cut_bytes;
        if cut_bytes > 0 {
            self.notes.push(format!(
                "the samples file ends in a cut record ({cut_bytes} bytes dropped): the run was stopped while writing"
            ));
        }
        if self.meta.get("status").map(String::as_str) != Some("complete") {
            self.notes.push(how_it_ended(&self.meta));
        }
        let lost = self.lost_samples();
        if lost > 0 {
            self.notes.push(format!(
                "{lost} samples were lost by the kernel (ring buffer full): not in any row"
            ));
        }
    }

    /// Whether the samples are those of a run cut short: the sampling
    /// did not end normally, or the file ends in a cut record.
    pub(crate) fn partial(&self) -> bool {
        self.cut_bytes > 0 || self.meta.get("status").map(String::as_str) != Some("complete")
    }

    fn lost_samples(&self) -> u64 {
        self.meta
            .get("lost")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// What is worth telling the user (after [`SampledTrace::credit`]).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// Attributes the samples of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`) to its ops, listing the
/// `top` functions of each row.
pub fn attribute_folder(
    dir: &Path,
    prefix: &str,
    budget: Budget,
    top: usize,
) -> Result<InPipelineAttribution, InPipelineError> {
    let mut trace = SampledTrace::open(dir, prefix, budget)?;
    let mut counts: HashMap<Target, u64> = HashMap::new();
    let mut functions: HashMap<(Target, u32), u64> = HashMap::new();
    let mut sums: HashMap<Target, Vec<u64>> = HashMap::new();
    // Counters whose sum went past what a u64 holds (saturated, said).
    let mut saturated: Vec<bool> = Vec::new();
    let total = trace.credit(|c| {
        *counts.entry(c.target).or_default() += 1;
        *functions.entry((c.target, c.sample.symbol)).or_default() += 1;
        if !c.sample.counters.is_empty() {
            let sum = sums
                .entry(c.target)
                .or_insert_with(|| vec![0; c.sample.counters.len()]);
            for (i, (acc, v)) in sum.iter_mut().zip(c.sample.counters.as_slice()).enumerate() {
                *acc = acc.checked_add(*v).unwrap_or_else(|| {
                    saturated.resize(saturated.len().max(i + 1), false);
                    saturated[i] = true;
                    u64::MAX
                });
            }
        }
        Ok(())
    })?;
    let counters = trace.counters.clone();
    let partial = trace.partial();
    let interval_ns = trace.interval_ns;
    let logs = &trace.logs;

    let mut tops: HashMap<Target, Vec<(u32, u64)>> = HashMap::new();
    for ((target, symbol), n) in functions {
        tops.entry(target).or_default().push((symbol, n));
    }
    let mut rows = Vec::new();
    let mut targets: Vec<(Target, u64)> = counts.into_iter().collect();
    targets.sort_by_key(|(t, n)| {
        (
            !matches!(t, Target::Op(_)),
            Reverse(*n),
            row_name(t, &logs.ops),
        )
    });
    for (target, n) in targets {
        let mut functions = tops.remove(&target).unwrap_or_default();
        functions.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        let top_functions = functions
            .into_iter()
            .take(top)
            .map(|(sym, k)| {
                let s = trace.symbols.get(sym);
                TopFunction {
                    function: s.function.clone(),
                    module: s.module.clone(),
                    samples: k,
                    share: k as f64 / n as f64,
                }
            })
            .collect();
        let cpu_ns = n
            .checked_mul(interval_ns)
            .ok_or_else(|| InPipelineError::Overflow {
                path: trace.files.sampling.display().to_string(),
                field: format!("interval_ns={interval_ns}"),
                message: format!("{n} samples times this interval is past what lotus can count in ns: the file is damaged or was not written by lotus"),
            })?;
        let row_counters: BTreeMap<String, u64> = match sums.get(&target) {
            Some(sum) => counters.iter().cloned().zip(sum.iter().copied()).collect(),
            None => counters.iter().map(|c| (c.clone(), 0)).collect(),
        };
        let calls = match target {
            Target::Op(op) => Some(logs.calls[op as usize]),
            _ => None,
        };
        rows.push(AttributedRow {
            name: row_name(&target, &logs.ops),
            kind: match target {
                Target::Op(_) => RowKind::Op,
                Target::Outside(_) => RowKind::Outside,
                Target::Independent(_) => RowKind::Independent,
                Target::Untraced => RowKind::Untraced,
            },
            samples: n,
            cpu_ns,
            share: if total > 0 {
                n as f64 / total as f64
            } else {
                0.0
            },
            calls,
            cpu_per_call_ns: calls.filter(|&c| c > 0).map(|c| cpu_ns / c),
            top_functions,
            cpi: cpi_of(&row_counters),
            counters: row_counters,
        });
    }
    // Ops that ran but got no samples still show, with their calls.
    for (op, name) in logs.ops.iter().enumerate() {
        if !rows
            .iter()
            .any(|r| r.kind == RowKind::Op && &r.name == name)
        {
            rows.push(AttributedRow {
                name: name.clone(),
                kind: RowKind::Op,
                samples: 0,
                cpu_ns: 0,
                share: 0.0,
                calls: Some(logs.calls[op]),
                cpu_per_call_ns: Some(0),
                top_functions: Vec::new(),
                counters: counters.iter().map(|c| (c.clone(), 0)).collect(),
                cpi: None,
            });
        }
    }
    rows.sort_by_key(|r| r.kind != RowKind::Op);
    let mut counter_totals: BTreeMap<String, u64> =
        counters.iter().map(|c| (c.clone(), 0)).collect();
    for sum in sums.values() {
        for (i, (name, v)) in counters.iter().zip(sum).enumerate() {
            let t = counter_totals.entry(name.clone()).or_default();
            *t = t.checked_add(*v).unwrap_or_else(|| {
                saturated.resize(saturated.len().max(i + 1), false);
                saturated[i] = true;
                u64::MAX
            });
        }
    }
    for (name, _) in counters.iter().zip(&saturated).filter(|(_, s)| **s) {
        trace.notes.push(format!(
            "{}: counter '{}': its deltas add up past what lotus can count ({}): shown as that maximum; the file is damaged or was not written by lotus",
            trace.files.samples.display(),
            crate::input::escaped(name),
            u64::MAX
        ));
    }
    Ok(InPipelineAttribution {
        frequency_hz: trace.frequency_hz,
        interval_ns,
        total_samples: total,
        lost_samples: trace.lost_samples(),
        partial,
        rows,
        counters,
        counter_totals,
        counters_unsupported: trace.counters_unsupported.clone(),
        pool_threads: trace.pool_threads,
        independent_threads: trace.independent_threads,
        notes: trace.notes,
    })
}

/// The names of the counters the samples carry: `counters=` of the
/// sampling description, which must name as many as the records hold.
fn counter_names(
    meta: &HashMap<String, String>,
    files: &SampleFiles,
) -> Result<Vec<String>, InPipelineError> {
    let carried = samples_of(files)?.counters();
    let named: Vec<String> = meta
        .get("counters")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    // Each counter is a column of its own: one named twice would merge
    // two columns into one in silence.
    for (i, name) in named.iter().enumerate() {
        if named[..i].contains(name) {
            return Err(InPipelineError::Io(format!(
                "{}: counter '{}' is named twice in `counters=`: the file is damaged or was not written by lotus; trace again",
                files.sampling.display(),
                crate::input::escaped(name)
            )));
        }
    }
    if named.len() != carried {
        return Err(InPipelineError::Io(format!(
            "{}: its records carry {carried} counter values, but {} names {} (`counters=`): the two files are not of the same run; trace again",
            files.samples.display(),
            files.sampling.display(),
            named.len()
        )));
    }
    Ok(named)
}

/// Cycles per instruction of a row's counters, where both are read.
fn cpi_of(counters: &BTreeMap<String, u64>) -> Option<f64> {
    let cycles = *counters.get("cycles")?;
    let instructions = *counters.get("instructions")?;
    (instructions > 0).then(|| cycles as f64 / instructions as f64)
}

fn row_name(target: &Target, ops: &[String]) -> String {
    match target {
        Target::Op(op) => ops[*op as usize].clone(),
        Target::Outside(role) => format!("outside any op ({role})"),
        Target::Independent(role) => format!("independent threads ({role})"),
        Target::Untraced => "untraced processes".to_string(),
    }
}

/// The note on a sampling that did not end `complete`: it failed (and
/// why), or its status still says `running` and lotus, named by
/// `lotus_pid=` and `lotus_start=` (its start time, so a reused pid is not
/// taken for it), is gone (killed outright) or still running.
fn how_it_ended(meta: &HashMap<String, String>) -> String {
    const TAIL: &str = "what was written is analysed";
    match meta.get("status").map(String::as_str) {
        Some("failed") => format!(
            "partial: the sampling failed ({}); {TAIL}",
            meta.get("reason").map_or("no reason given", String::as_str)
        ),
        Some("running") => {
            let pid = meta.get("lotus_pid").and_then(|p| p.parse::<u32>().ok());
            let start = meta.get("lotus_start").and_then(|t| t.parse::<u64>().ok());
            match (pid, start) {
                (Some(pid), Some(start)) if process_start(pid) == Some(start) => format!(
                    "partial: lotus (pid {pid}) is still sampling this run; {TAIL} so far"
                ),
                (Some(pid), Some(_)) => format!(
                    "partial: lotus (pid {pid}) was killed while the job ran (its status still says running); {TAIL}"
                ),
                _ => format!(
                    "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
                ),
            }
        }
        _ => format!(
            "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
        ),
    }
}

/// Field 22 of `/proc/<pid>/stat` (the process's start time), or None when
/// there is no such process.
fn process_start(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::samples::{SampleSink, SamplesWriter, Symbol};

    /// A sampled trace folder: the log `lotus_worker_pid_10` holding
    /// `log`, the samples (in time order) with their symbols, a complete
    /// sampling at `interval_ns`.
    pub(crate) fn sampled_folder(
        log: &str,
        symbols: &[(u32, Symbol)],
        samples: &[Sample],
        interval_ns: u64,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_worker_pid_10"), log).expect("log");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.symbols(symbols).expect("s");
        w.samples(samples).expect("samples");
        w.finish().expect("finish");
        crate::trace::samples::write_sampling(
            &SampleFiles::of(dir.path(), "lotus").sampling,
            &[
                ("status", "complete".into()),
                ("frequency_hz", (1_000_000_000 / interval_ns).to_string()),
                ("interval_ns", interval_ns.to_string()),
            ],
        )
        .expect("sampling");
        dir
    }

    /// A folder: one worker (pid 10) whose main thread runs op A over
    /// [1000, 2000) and B over [3000, 4000) (monotonic), a pool thread 11
    /// busy only during them, an independent thread 12 busy throughout, and
    /// an untraced process 99.
    pub(crate) fn folder() -> tempfile::TempDir {
        // wall = monotonic + 1_000_000.
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={} monotonic_ns=0\n\
             SA,{},1000,kind=op\nSB,{},1000,kind=op\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            off,
            1000 + off,
            3000 + off,
            5000 + off
        );
        let symbols = [
            (0, Symbol::new("ka", "/k.so")),
            (1, Symbol::new("kb", "/k.so")),
            (2, Symbol::new("spin", "/bg.so")),
            (3, Symbol::new("loop", "/py")),
        ];
        let mut samples = Vec::new();
        for t in (0..5000).step_by(100) {
            let in_a = (1000..2000).contains(&t);
            let in_b = (3000..4000).contains(&t);
            let sym = if in_a {
                0
            } else if in_b {
                1
            } else {
                3
            };
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: sym,
                kernel: false,
                counters: Default::default(),
            });
            if in_a || in_b {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 10,
                    tid: 11,
                    symbol: sym,
                    kernel: false,
                    counters: Default::default(),
                });
            }
            samples.push(Sample {
                time_ns: t + 2,
                pid: 10,
                tid: 12,
                symbol: 2,
                kernel: false,
                counters: Default::default(),
            });
            samples.push(Sample {
                time_ns: t + 3,
                pid: 99,
                tid: 99,
                symbol: 3,
                kernel: false,
                counters: Default::default(),
            });
        }
        sampled_folder(&log, &symbols, &samples, 100)
    }

    #[test]
    fn empty_logs_are_skipped_and_unusable_logs_say_why() {
        let dir = folder();
        let budget = Budget::default();
        std::fs::write(dir.path().join("lotus_main_pid_5"), "").expect("empty");
        // Only a cut line: nothing complete was written either.
        std::fs::write(dir.path().join("lotus_worker_pid_6"), "#lotus-tr").expect("cut");
        let a = attribute_folder(dir.path(), "lotus", budget, 5).expect("attributed");
        for (log, why) in [
            ("lotus_main_pid_5", "empty: the process wrote nothing"),
            ("lotus_worker_pid_6", "no complete line"),
        ] {
            assert!(
                a.notes.iter().any(|n| n.contains(log) && n.contains(why)),
                "{:?}",
                a.notes
            );
        }
        assert!(a.rows.iter().any(|r| r.name == "A" && r.samples > 0));
        std::fs::write(dir.path().join("lotus_main_pid_5"), "SBatchWait_0,5,1000\n").expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("original");
        assert!(matches!(e, InPipelineError::OriginalFormat { .. }), "{e}");
        assert!(e.to_string().contains("without `--format original`"), "{e}");
        std::fs::write(
            dir.path().join("lotus_main_pid_5"),
            "#lotus-trace v1 role=main pid=5\nSWait,5,1000,kind=wait\n",
        )
        .expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("old");
        assert!(matches!(e, InPipelineError::NoClock { .. }), "{e}");
    }

    #[test]
    fn counter_sums_past_u64_saturate_and_say_so() {
        use crate::trace::samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let samples: Vec<Sample> = (0..3u64)
            .map(|i| Sample {
                time_ns: 1000 + i,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: CounterValues::new(&[u64::MAX / 2, 7]).expect("2"),
            })
            .collect();
        w.samples(&samples).expect("samples");
        w.finish().expect("finish");
        crate::trace::samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), 5).expect("attributed");
        assert_eq!(a.counter_totals["cycles"], u64::MAX);
        assert_eq!(a.counter_totals["instructions"], 21);
        let said: Vec<&String> = a
            .notes
            .iter()
            .filter(|n| n.contains("add up past"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", a.notes);
        assert!(said[0].contains("counter 'cycles'"), "{}", said[0]);
    }

    #[test]
    fn sampling_figures_that_cannot_be_trusted_are_refused_by_name() {
        let dir = folder();
        let budget = Budget::default();
        let sampling = SampleFiles::of(dir.path(), "lotus").sampling;
        let write = |pairs: &[(&str, String)]| {
            crate::trace::samples::write_sampling(&sampling, pairs).expect("sampling")
        };
        write(&[
            ("status", "complete".into()),
            ("interval_ns", u64::MAX.to_string()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("overflow");
        assert!(matches!(e, InPipelineError::Overflow { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("interval_ns={}", u64::MAX)),
            "{e}"
        );
        // The largest interval the file's samples can be multiplied by
        // still reads.
        let records = samples_of(&SampleFiles::of(dir.path(), "lotus"))
            .expect("samples")
            .most_records();
        write(&[
            ("status", "complete".into()),
            ("interval_ns", (u64::MAX / records).to_string()),
        ]);
        attribute_folder(dir.path(), "lotus", budget, 5).expect("largest interval");
        write(&[("status", "complete".into()), ("status", "running".into())]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("twice");
        assert!(e.to_string().contains("`status=` is given twice"), "{e}");
        write(&[
            ("status", "complete".into()),
            ("counters", "\u{1b}x,\u{1b}x".into()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("counter twice");
        assert!(
            e.to_string().contains("counter '\\u{1b}x' is named twice"),
            "{e}"
        );
    }

    #[test]
    fn the_rule_on_a_small_folder() {
        let dir = folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        // 10 samples of each op on the main thread, 10 of its pool thread.
        assert_eq!(row("A").samples, 20);
        assert_eq!(row("B").samples, 20);
        assert_eq!(row("A").top_functions[0].function, "ka");
        assert_eq!(row("A").calls, Some(1));
        assert_eq!(row("A").cpu_ns, 2000);
        assert_eq!(row("outside any op (worker)").samples, 30);
        assert_eq!(row("independent threads (worker)").samples, 50);
        assert_eq!(row("untraced processes").samples, 50);
        assert_eq!(a.pool_threads, vec!["10/11"]);
        assert_eq!(a.independent_threads, vec!["10/12"]);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        assert_eq!(a.total_samples, 170);
        assert!(!a.partial);
    }

    /// [`folder`] with its samples rewritten to carry cycles and
    /// instructions: 300 and 100 for a sample in an op's kernel (symbols 0
    /// and 1), 10 and 10 otherwise.
    fn folder_with_counters() -> tempfile::TempDir {
        use crate::trace::samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        let samples: Vec<Sample> = files.samples().expect("r").map(Result::unwrap).collect();
        let symbols = std::fs::read_to_string(&files.symbols).expect("symbols");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let with: Vec<Sample> = samples
            .into_iter()
            .map(|s| Sample {
                counters: CounterValues::new(if s.symbol <= 1 {
                    &[300, 100]
                } else {
                    &[10, 10]
                })
                .expect("2"),
                ..s
            })
            .collect();
        w.samples(&with).expect("samples");
        w.finish().expect("finish");
        std::fs::write(&files.symbols, symbols).expect("symbols");
        crate::trace::samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        dir
    }

    #[test]
    fn counters_follow_their_samples_and_add_up() {
        let dir = folder_with_counters();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert_eq!(a.counters, vec!["cycles", "instructions"]);
        let row = |name: &str| a.rows.iter().find(|r| r.name == name).expect(name);
        // A's 20 samples (main thread and pool) are all in its kernel.
        assert_eq!(row("A").counters["cycles"], 20 * 300);
        assert_eq!(row("A").counters["instructions"], 20 * 100);
        assert_eq!(row("A").cpi, Some(3.0));
        assert_eq!(row("untraced processes").counters["cycles"], 50 * 10);
        assert_eq!(row("untraced processes").cpi, Some(1.0));
        for c in ["cycles", "instructions"] {
            let sum: u64 = a.rows.iter().map(|r| r.counters[c]).sum();
            assert_eq!(sum, a.counter_totals[c], "{c}");
        }
        assert_eq!(a.counter_totals["cycles"], 40 * 300 + 130 * 10);
        assert!(a.counters_unsupported.is_none());

        // A description that does not name what the records carry.
        let files = SampleFiles::of(dir.path(), "lotus");
        crate::trace::samples::write_sampling(&files.sampling, &[("status", "complete".into())])
            .expect("sampling");
        let err = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect_err("mismatch")
            .to_string();
        assert!(
            err.contains("lotus.samples") && err.contains("carry 2 counter values"),
            "{err}"
        );
    }

    #[test]
    fn refused_counters_are_said_once_never_as_zeros() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        crate::trace::samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters_unsupported", "cycles,instructions".into()),
                ("counters_reason", "cycles: no PMU".into()),
                ("counters_kind", "hardware".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.counters.is_empty() && a.counter_totals.is_empty());
        assert!(a
            .rows
            .iter()
            .all(|r| r.counters.is_empty() && r.cpi.is_none()));
        let u = a.counters_unsupported.expect("unsupported");
        assert_eq!(u.counters, vec!["cycles", "instructions"]);
        assert_eq!(u.reason, "cycles: no PMU");
        let said: Vec<_> = a
            .notes
            .iter()
            .filter(|n| n.contains("not supported here"))
            .collect();
        assert_eq!(
            said,
            vec!["hardware counters: not supported here (cycles: no PMU)"]
        );
    }

    #[test]
    fn a_sampling_that_did_not_complete_says_how_it_ended() {
        let meta = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let failed = how_it_ended(&meta(&[("status", "failed"), ("reason", "disk full: x")]));
        assert!(
            failed.contains("the sampling failed (disk full: x)"),
            "{failed}"
        );
        let me = std::process::id();
        let start = process_start(me).expect("our start time").to_string();
        let mine = me.to_string();
        let running = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &start),
        ]));
        assert!(running.contains("is still sampling"), "{running}");
        let other_start = (process_start(me).expect("start") + 1).to_string();
        let killed = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &other_start),
        ]));
        assert!(
            killed.contains(&format!("lotus (pid {me}) was killed")),
            "{killed}"
        );
        let old = how_it_ended(&meta(&[("status", "running")]));
        assert!(old.contains("did not end normally"), "{old}");
    }

    #[test]
    fn a_noticeable_slowdown_by_sampling_is_said_with_its_figure() {
        for (pct, said) in [("12.5", true), ("1.9", false)] {
            let dir = folder();
            let files = SampleFiles::of(dir.path(), "lotus");
            crate::trace::samples::write_sampling(
                &files.sampling,
                &[
                    ("status", "complete".into()),
                    ("frequency_hz", "5000".into()),
                    ("sampling_cost_us", "25.00".into()),
                    ("sampling_slowdown_pct", pct.into()),
                ],
            )
            .expect("sampling");
            let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
                .expect("attribute");
            let notes = a.notes.join("\n");
            assert_eq!(
                notes.contains("slowed the job's threads by about 12%"),
                said,
                "{notes}"
            );
            assert_eq!(notes.contains("25.00 us a sample"), said, "{notes}");
        }
    }

    #[test]
    fn a_run_stopped_while_writing_is_analysed_and_marked_partial() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        crate::trace::samples::write_sampling(
            &files.sampling,
            &[("status", "running".into()), ("interval_ns", "100".into())],
        )
        .expect("sampling");
        let len = std::fs::metadata(&files.samples).expect("m").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&files.samples)
            .expect("open")
            .set_len(len - 30)
            .expect("cut");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.partial);
        // The last record whole and 6 bytes of the one before it: 2 gone.
        assert_eq!(a.total_samples, 168);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("cut record") && notes.contains("partial"),
            "{notes}"
        );
    }

    #[test]
    fn folders_without_samples_or_clock() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_main_pid_1"), "SA,1,2,kind=op\n").expect("w");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no samples");
        assert!(err.to_string().contains("--sample"), "{err}");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.finish().expect("f");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no clock");
        assert!(err.to_string().contains("no clock pairs"), "{err}");
    }
}
