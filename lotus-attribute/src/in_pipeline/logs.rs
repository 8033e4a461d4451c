//! The trace's logs as the rule reads them: processes and their roles,
//! op spans on the samples' clock (each log's clock pairs), the threads
//! the tracer named, and the timing rule's test of a helper thread.

use super::*;
use lotus_sys::input::Dir;

/// What the logs hold: processes, op names, spans sorted.
pub(super) struct Logs {
    pub(super) roles: HashMap<u32, Role>,
    pub(super) ops: Vec<String>,
    /// Threads with op spans of their own.
    pub(super) traced_threads: HashSet<(u32, u32)>,
    /// Threads the tracer named as the DataLoader's own machinery
    /// (`kind=thread`: a queue's feeder thread, the resource sharer,
    /// lotus's watch): never an op's pool, whatever their rates.
    pub(super) machinery_threads: HashSet<(u32, u32)>,
    /// The main processes' batch spans (the DataLoader at work in the
    /// main process: `num_workers=0`), per thread, sorted by start.
    pub(super) loader_spans: HashMap<(u32, u32), Vec<(u64, u64)>>,
    /// The workers' batch spans, per thread, sorted by start: their CPU
    /// outside every op is judged within them (a worker's start-up, its
    /// wait for the next index and its exit are no op's).
    pub(super) worker_batches: HashMap<(u32, u32), Vec<(u64, u64)>>,
    pub(super) spans: Spool<SpanRec>,
    /// Per process, the bounds of its phases (on the samples' clock),
    /// which split its samples outside every op (`phases`).
    pub(super) phases: Phases,
    pub(super) bad_lines: u64,
    /// Logs that end in NUL bytes (see `ClockedSummary::cut_logs`).
    pub(super) cut_logs: u64,
    /// Logs skipped (empty: the process wrote nothing), each with why.
    pub(super) skipped_logs: Vec<String>,
    /// Work handed to a pool thread (`kind=task`), sorted by when it was
    /// handed over; the threads that ran them are credited by them, never
    /// by timing.
    pub(super) tasks: Vec<TaskRec>,
}

/// A task (work a thread handed to a pool thread) on the samples' clock:
/// the pool thread `tid` ran it over [`start`, `end`), for what thread `by`
/// of `pid` had open at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TaskRec {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) by: u32,
    pub(super) at: u64,
}

/// The clock pairs of `log` (its `#` lines): a span's time needs those
/// on both sides of it, so they are read before its events. `Ok(Err(why))`
/// for a log with nothing in it (no complete line: the process wrote
/// nothing, or was killed, or the disk was full); an error for a log whose events
/// have no clock pairs, saying why (an older lotus's header, or the
/// original format).
pub(super) fn clock_of(log: &LogFile) -> Result<Result<ClockMap, String>, Error> {
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", log.display));
    let file = log.open_file().map_err(io)?;
    let size = file.size();
    let mut pairs = Vec::new();
    let (mut header, mut content) = (false, false);
    lotus_sys::input::for_each_line(
        BufReader::new(file),
        lotus_trace::MAX_LINE_BYTES,
        |line| -> std::io::Result<()> {
            if !line.ended || line.bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            content = true;
            if line.bytes.first() == Some(&b'#') {
                header |= line.bytes.starts_with(lotus_trace::HEADER_TAG.as_bytes());
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
        Error::NoClock { path }
    } else {
        Error::OriginalFormat { path }
    })
}

/// Reads the op spans of every log, through the reader `lotus trace view`
/// reads them with, so that a span's id (its place in reading order) is
/// the same in both.
pub(super) fn read_logs<'a>(dir: impl Into<Dir<'a>>, budget: Budget) -> Result<Logs, Error> {
    let dir: Dir<'_> = dir.into();
    let mut roles = HashMap::new();
    let mut ops: Vec<String> = Vec::new();
    let mut op_ids: HashMap<String, u32> = HashMap::new();
    let mut traced_threads = HashSet::new();
    let mut machinery_threads = HashSet::new();
    let mut loader_spans: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
    let mut worker_batches: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
    let mut phases = Phases::default();
    let mut sorter: Sorter<SpanRec> = Sorter::new(budget);
    let mut bad_lines = 0u64;
    let mut tasks = Vec::new();
    // Each log's times are put on the samples' clock by the one walker
    // `lotus trace view --format firefox` draws its markers with.
    let summary = timeline::for_each_clocked_event(dir, |item| -> Result<(), Error> {
        let (e, start, end, id) = match item {
            ClockedItem::Log(log) => {
                roles.insert(log.name.pid, log.name.role);
                return Ok(());
            }
            ClockedItem::Event {
                event,
                start_ns,
                end_ns,
                id,
            } => (event, start_ns, end_ns, id),
        };
        phases.see(e, start, end);
        if e.kind == Kind::Batch {
            if let (Some(start), Some(end)) = (start, end) {
                let spans = match e.role {
                    Role::Main => &mut loader_spans,
                    Role::Worker => &mut worker_batches,
                };
                spans
                    .entry((e.pid, e.tid.unwrap_or(e.pid)))
                    .or_default()
                    .push((start, end));
            }
            return Ok(());
        }
        if e.kind == Kind::Thread {
            if let Some(tid) = e.tid {
                machinery_threads.insert((e.pid, tid));
            }
            return Ok(());
        }
        if let (Kind::Task, Some(h), Some(tid), Some(start), Some(end)) =
            (e.kind, e.task, e.tid, start, end)
        {
            // The hand-over is on the log's clock, a little before the
            // task's start: it keeps its distance on the samples' clock.
            let at = start.saturating_sub(e.start_ns.saturating_sub(h.at_ns));
            tasks.push(TaskRec {
                pid: e.pid,
                tid,
                start,
                end,
                by: h.by,
                at,
            });
            return Ok(());
        }
        if e.kind != Kind::Op {
            return Ok(());
        }
        let (Some(start), Some(end)) = (start, end) else {
            bad_lines += 1;
            return Ok(());
        };
        let op = match op_ids.get(&*e.name) {
            Some(&op) => op,
            None => {
                let op = ops.len() as u32;
                ops.push(e.name.to_string());
                op_ids.insert(e.name.to_string(), op);
                op
            }
        };
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
            cpu: e.cpu_ns.unwrap_or(NO_CPU),
            hook: e.hook_ns.unwrap_or(0),
            hook_in: e.hook_in_ns.unwrap_or(0),
        })?;
        Ok(())
    })?;
    bad_lines += summary.bad_lines;
    let cut_logs = summary.cut_logs;
    let skipped_logs = summary.skipped_logs;
    let mut spans = Spool::new(budget);
    for s in sorter.finish()? {
        spans.push(s?)?;
    }
    Ok(Logs {
        roles,
        ops,
        traced_threads,
        machinery_threads,
        loader_spans: {
            for v in loader_spans.values_mut() {
                v.sort_unstable();
            }
            loader_spans
        },
        worker_batches: {
            for v in worker_batches.values_mut() {
                v.sort_unstable();
            }
            worker_batches
        },
        spans,
        phases,
        bad_lines,
        cut_logs,
        skipped_logs,
        tasks: {
            tasks.sort_unstable_by_key(|t| (t.at, t.pid, t.tid, t.start));
            tasks
        },
    })
}

/// Per helper thread: samples inside / outside the main thread's ops, its
/// first and last sample, and the main thread's op time in between.
#[derive(Debug, Clone, Copy)]
pub(super) struct HelperCounts {
    pub(super) inside: u64,
    pub(super) outside: u64,
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) covered_ns: u64,
}

/// Whether a helper thread with these counts is an intra-op pool: it runs
/// (much) more while its main thread is in an op than while it is not.
///
/// Two tests, either enough:
/// - its sampling rate outside the main thread's ops is under
///   [`POOL_RATE_RATIO`] of its rate inside them;
/// - its share of samples inside ops is at least [`POOL_MIN_INSIDE`] and
///   stands [`POOL_MIN_Z`] standard errors above the share of its window
///   the ops cover (what a thread that runs regardless of the ops would
///   show). A pool's work ends a little after its op on a busy machine
///   (its last sample's CPU period straddles the op's end, it waits for a
///   CPU and the GIL to go back to its queue): 6% of a pool thread's
///   samples fell after its ops, in a worker whose ops covered 85% of the
///   window, and the rate test alone took it for an independent thread
///   (PoolBlur -24% to -49% in busy test runs). The share test does not
///   depend on how short the time outside ops is.
pub(super) fn is_pool(h: &HelperCounts) -> bool {
    if h.inside == 0 {
        return false;
    }
    let window_ns = h.last.saturating_sub(h.first);
    let inside_ns = h.covered_ns;
    let outside_ns = window_ns.saturating_sub(inside_ns).max(1);
    let rate_in = if inside_ns > 0 {
        h.inside as f64 / inside_ns as f64
    } else {
        0.0
    };
    let rate_out = h.outside as f64 / outside_ns as f64;
    if h.outside == 0 || rate_out < POOL_RATE_RATIO * rate_in {
        return true;
    }
    let n = (h.inside + h.outside) as f64;
    let share = h.inside as f64 / n;
    let covered = (inside_ns as f64 / window_ns.max(1) as f64).clamp(0.0, 1.0);
    if share < POOL_MIN_INSIDE || covered >= 1.0 {
        return false;
    }
    let se = (covered * (1.0 - covered) / n).sqrt();
    se > 0.0 && (share - covered) / se >= POOL_MIN_Z
}

/// Adds to each helper thread the time its process's main thread spent
/// in ops (the union of its op spans) within the thread's first and last
/// sample: one pass over the spans, in start order.
pub(super) fn main_op_time_in_windows(
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
