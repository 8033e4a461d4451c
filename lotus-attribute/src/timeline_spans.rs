//! The spans of one trace that `lotus report` draws on its timeline, read
//! again from its logs after its statistics (which give the counts that
//! bound them): a lane per process, its batches or waits on one row and
//! its ops below. Past a bound, every n-th span of a kind is kept, and
//! what was left out is said. The same pass sums each op's CPU from its
//! spans' thread CPU clock (`cpu=`). A folder of samples alone (`lotus
//! trace attach`) gives its slices estimated from the samples' Python
//! frames the same shape ([`FrameSpans::timeline`]). Drawing them
//! (colours, rows, the SVG) is the binary's.

use std::collections::{BTreeMap, BTreeSet};

use lotus_trace::{Event, Kind, Role, TraceIndex};

use crate::{Error, FrameSpans, TraceFigures, NEXT_SLICE};

/// Each op's CPU from its spans' thread CPU clock: (sum ns, spans with
/// it, spans), by name.
pub type OpCpu = BTreeMap<String, (u64, u64, u64)>;

/// One trace's spans for a timeline (see the module above).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct TimelineSpans {
    /// Per lane (a process): the spans of its first row (batches, waits)
    /// and its op spans, in the logs' order.
    pub lanes: BTreeMap<usize, (Vec<Event>, Vec<Event>)>,
    /// Each lane's key in [`TimelineSpans::lanes`] and its name (`main
    /// 100`, `worker 101 (host a)`), in drawing order: main processes
    /// first, then workers, by rank and pid.
    pub names: Vec<(usize, String)>,
    /// The trace's first start, ns: the timeline's zero.
    pub start_ns: u64,
    /// How long the trace spans, ms.
    pub span_ms: f64,
    /// How the spans were estimated, where they were not measured (a
    /// folder of samples alone): for the page.
    pub estimated: Option<String>,
    /// Each op's CPU, from every span (kept or not).
    pub op_cpu: OpCpu,
    /// The names of the op spans kept.
    pub ops: BTreeSet<String>,
    /// Spans kept.
    pub shown: u64,
    /// Spans of the kinds drawn in the trace.
    pub total: u64,
    /// What was left out, when something was: for the page.
    pub decimated: Option<String>,
}

impl TraceFigures {
    /// Its spans for a timeline of at most about `most` spans (see the
    /// module above), read again from its logs.
    pub fn timeline_spans(&mut self, most: u64) -> Result<TimelineSpans, Error> {
        let index = &mut self.index;
        let count = |k: Kind| index.per_kind.get(&k).copied().unwrap_or(0);
        let (n_op, n_other) = (count(Kind::Op), count(Kind::Batch) + count(Kind::Wait));
        let (op_every, other_every) = strides(n_op, n_other, most);
        let mut t = TimelineSpans {
            total: n_op + n_other,
            names: lane_names(index),
            start_ns: index.min_start_ns.unwrap_or(0),
            span_ms: self.span_ms(),
            ..TimelineSpans::default()
        };
        let index = &mut self.index;
        let (mut seen_op, mut seen_other) = (0u64, 0u64);
        index.each_event(&self.folder, |p, e| -> Result<(), Error> {
            let keep = match e.kind {
                Kind::Op => {
                    let c = t.op_cpu.entry(e.name.to_string()).or_insert((0, 0, 0));
                    if let Some(ns) = e.cpu_ns {
                        c.0 += ns;
                        c.1 += 1;
                    }
                    c.2 += 1;
                    kept(&mut seen_op, op_every)
                }
                Kind::Batch | Kind::Wait => kept(&mut seen_other, other_every),
                _ => false,
            };
            if !keep {
                return Ok(());
            }
            t.shown += 1;
            let lane = t.lanes.entry(p).or_default();
            if e.kind == Kind::Op {
                t.ops.insert(e.name.to_string());
                lane.1.push(e);
            } else {
                lane.0.push(e);
            }
            Ok(())
        })?;
        t.decimated = decimation_note(t.shown, t.total, op_every, other_every);
        Ok(t)
    }
}

impl FrameSpans {
    /// Its slices for a timeline of at most about `most` spans (every
    /// n-th of a kind kept past it, and said).
    pub fn timeline(&self, most: u64) -> TimelineSpans {
        let is_next = |op: u32| self.ops[op as usize].name == NEXT_SLICE;
        let all = self.threads.iter().flat_map(|t| t.slices.iter());
        let n_other = all.clone().filter(|s| is_next(s.op)).count() as u64;
        let n_op = all.count() as u64 - n_other;
        let (op_every, other_every) = strides(n_op, n_other, most);
        // Lanes: the main process first, then the workers, then processes
        // whose frames do not tell, each by pid.
        let rank = |p: &u32| match self.roles.get(p) {
            Some(Role::Main) => 0,
            Some(Role::Worker) => 1,
            None => 2,
        };
        let mut pids: Vec<u32> = self.threads.iter().map(|t| t.pid).collect();
        pids.sort_by_key(|p| (rank(p), *p));
        pids.dedup();
        let lane_of: BTreeMap<u32, usize> =
            (pids.iter().enumerate()).map(|(i, p)| (*p, i)).collect();
        let names = (pids.iter().enumerate())
            .map(|(i, p)| match self.roles.get(p) {
                Some(r) => (i, format!("{r} {p}")),
                None => (i, format!("process {p}")),
            })
            .collect();
        let mut t = TimelineSpans {
            total: n_op + n_other,
            names,
            ..TimelineSpans::default()
        };
        let (mut seen_op, mut seen_other) = (0u64, 0u64);
        let (mut start_ns, mut end_ns) = (u64::MAX, 0);
        for thread in &self.threads {
            let lane = lane_of[&thread.pid];
            let role = self.roles.get(&thread.pid).copied().unwrap_or(Role::Worker);
            for s in &thread.slices {
                start_ns = start_ns.min(s.start_ns);
                end_ns = end_ns.max(s.end_ns);
                let next = is_next(s.op);
                let (seen, every) = if next {
                    (&mut seen_other, other_every)
                } else {
                    (&mut seen_op, op_every)
                };
                if !kept(seen, every) {
                    continue;
                }
                t.shown += 1;
                let name = &self.ops[s.op as usize].name;
                let kind = if next { Kind::Wait } else { Kind::Op };
                let dur_ns = s.end_ns.saturating_sub(s.start_ns);
                let mut e = Event::span(name, kind, thread.pid, role, s.start_ns, dur_ns);
                // Its CPU as the attribution estimates it: a sampling
                // interval a sample.
                e.cpu_ns = Some(s.samples.saturating_mul(self.interval_ns));
                let spans = t.lanes.entry(lane).or_default();
                if next {
                    spans.0.push(e);
                } else {
                    t.ops.insert(name.clone());
                    spans.1.push(e);
                }
            }
        }
        t.decimated = decimation_note(t.shown, t.total, op_every, other_every);
        t.start_ns = start_ns.min(end_ns);
        t.span_ms = end_ns.saturating_sub(t.start_ns).max(1) as f64 / 1e6;
        t.estimated = Some(format!(
            "Estimated from the samples' Python frames (the job was sampled without the tracer): a slice runs from an op's first sample on a thread to its last plus one sampling interval ({:.3} ms), so a call shorter than an interval may not show and calls with no sample between them are one slice; red: the main process in next(loader). {} of the {} samples are in a slice",
            self.interval_ns as f64 / 1e6,
            self.in_slices,
            self.total_samples
        ));
        t
    }
}

/// The lanes of `index`'s processes, main processes first, then workers,
/// by rank and pid (the host in a lane's name only where the trace has
/// several).
fn lane_names(index: &TraceIndex) -> Vec<(usize, String)> {
    let mut order: Vec<usize> = (0..index.processes.len()).collect();
    order.sort_by_key(|&i| {
        let p = &index.processes[i].process;
        (p.rank, matches!(p.role, Role::Worker), p.pid)
    });
    let hosts: BTreeSet<Option<&str>> = (index.processes.iter())
        .map(|p| p.process.host.as_deref())
        .collect();
    let name = |p: &lotus_trace::Process| {
        let mut p = p.clone();
        if hosts.len() < 2 {
            p.host = None;
        }
        p.label()
    };
    (order.into_iter())
        .map(|i| (i, name(&index.processes[i].process)))
        .collect()
}

/// Every how many op spans, and every how many batches and waits, one is
/// kept for a timeline of at most about `most` spans: the batches and
/// waits up to half of it, the ops the rest.
fn strides(n_op: u64, n_other: u64, most: u64) -> (u64, u64) {
    let other_quota = n_other.clamp(1, most / 2);
    let op_quota = (most - other_quota.min(n_other)).max(1);
    (
        n_op.div_ceil(op_quota).max(1),
        n_other.div_ceil(other_quota).max(1),
    )
}

/// Whether the next span of a kind (its `seen` so far counted here) is
/// kept, one in `every`.
fn kept(seen: &mut u64, every: u64) -> bool {
    *seen += 1;
    (*seen - 1).is_multiple_of(every)
}

/// What the page says when spans were left out (every n-th kept).
fn decimation_note(shown: u64, total: u64, op_every: u64, other_every: u64) -> Option<String> {
    (shown < total).then(|| {
        format!(
            "{shown} of {total} spans drawn (every {} op span{}): the Perfetto file below has them all",
            ordinal(op_every),
            if other_every > 1 {
                format!(", every {} batch and wait", ordinal(other_every))
            } else {
                String::new()
            }
        )
    })
}

fn ordinal(n: u64) -> String {
    match n {
        1 => "".to_string(),
        2 => "2nd".to_string(),
        3 => "3rd".to_string(),
        n => format!("{n}th"),
    }
}
