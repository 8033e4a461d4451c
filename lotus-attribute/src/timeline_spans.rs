//! The spans of one trace that `lotus report` draws on its timeline, read
//! again from its logs after its statistics (which give the counts that
//! bound them): a lane per process, its batches or waits on one row and
//! its ops below. Past a bound, every n-th span of a kind is kept, and
//! what was left out is said. The same pass sums each op's CPU from its
//! spans' thread CPU clock (`cpu=`). Drawing them (colours, rows, the
//! SVG) is the binary's.

use std::collections::{BTreeMap, BTreeSet};

use lotus_trace::{Event, Kind};

use crate::{Error, TraceFigures};

/// Each op's CPU from its spans' thread CPU clock: (sum ns, spans with
/// it, spans), by name.
pub type OpCpu = BTreeMap<String, (u64, u64, u64)>;

/// One trace's spans for a timeline (see the module above).
#[derive(Debug, Default)]
pub struct TimelineSpans {
    /// Per process (its index in the trace's index): the spans of its
    /// first row (batches, waits) and its op spans, in the logs' order.
    pub lanes: BTreeMap<usize, (Vec<Event>, Vec<Event>)>,
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
        let other_quota = n_other.clamp(1, most / 2);
        let op_quota = (most - other_quota.min(n_other)).max(1);
        let other_every = n_other.div_ceil(other_quota).max(1);
        let op_every = n_op.div_ceil(op_quota).max(1);
        let mut t = TimelineSpans {
            total: n_op + n_other,
            ..TimelineSpans::default()
        };
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
                    seen_op += 1;
                    (seen_op - 1) % op_every == 0
                }
                Kind::Batch | Kind::Wait => {
                    seen_other += 1;
                    (seen_other - 1) % other_every == 0
                }
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
