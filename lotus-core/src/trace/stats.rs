//! The figures of `lotus trace stats`, from a [`TraceIndex`] gathered with
//! durations.
//!
//! - **Percentiles** (p50, p95, p99, and Q1/Q3 of the IQR rule) use linear
//!   interpolation between closest ranks, numpy's default
//!   (`numpy.percentile(..., method="linear")`, also pandas'
//!   `quantile`): for `n` values sorted ascending `x[0..n)`, the p-th
//!   percentile sits at rank `h = (n - 1) * p / 100` and is
//!   `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.
//! - **Standard deviation** is the population one (divided by `n`,
//!   numpy's default `ddof=0`).
//! - **Outliers** among batch preprocessing times: below `Q1 - 1.5 IQR` or
//!   above `Q3 + 1.5 IQR`, `IQR = Q3 - Q1`.
//! - **Wait buckets**: `none` (the batch was already there, `ready=1`, or
//!   the wait lasted 0 ns), `under_1ms` (more than 0, under 1 ms),
//!   `over_1ms` (1 ms to 500 ms, both included), `over_500ms`.
//! - **Delay**: from the end of a batch's preprocessing in its worker to
//!   its consumption in the main process (batches matched as
//!   [`TraceIndex::joined`] says).
//!
//! All times are whole ns; means, percentiles and deviations are `f64` ns.

use serde::Serialize;

use super::event::Kind;
use super::index::{BatchRow, MainRec, TraceIndex};

/// The p-th percentile (0 to 100) of `sorted` (ascending, not empty), by
/// linear interpolation between closest ranks.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = (n - 1) as f64 * (p / 100.0);
    let lo = (h.floor() as usize).min(n - 1);
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Count, total, mean, percentiles, deviation and range of some durations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// How many.
    pub count: u64,
    /// Their sum, ns.
    pub total_ns: i64,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Median, ns.
    pub p50_ns: f64,
    /// 95th percentile, ns.
    pub p95_ns: f64,
    /// 99th percentile, ns.
    pub p99_ns: f64,
    /// Population standard deviation, ns.
    pub std_ns: f64,
    /// Smallest, ns.
    pub min_ns: i64,
    /// Largest, ns.
    pub max_ns: i64,
}

impl Summary {
    /// The summary of `values` (sorted in place); `None` when empty.
    pub fn of(values: &mut [i64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let n = values.len();
        let total: i128 = values.iter().map(|&v| i128::from(v)).sum();
        let mean = total as f64 / n as f64;
        let sorted: Vec<f64> = values.iter().map(|&v| v as f64).collect();
        let var = sorted.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        Some(Summary {
            count: n as u64,
            total_ns: total.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            mean_ns: mean,
            p50_ns: percentile(&sorted, 50.0),
            p95_ns: percentile(&sorted, 95.0),
            p99_ns: percentile(&sorted, 99.0),
            std_ns: var.sqrt(),
            min_ns: values[0],
            max_ns: values[n - 1],
        })
    }
}

/// The summary of the events of one name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedSummary {
    /// The event name (without the `S`).
    pub name: String,
    /// The figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The summary of the events of one kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindSummary {
    /// The kind.
    pub kind: Kind,
    /// The figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// A process, as the statistics list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    /// Its pid.
    pub pid: u32,
    /// `main` or `worker`.
    pub role: String,
    /// Its host, where known.
    pub host: Option<String>,
    /// Its rank, where known.
    pub rank: Option<u32>,
    /// The folder of its logs, relative to the trace folder.
    pub folder: String,
    /// Events it logged.
    pub events: u64,
}

/// A batch whose preprocessing time is an outlier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outlier {
    /// Its id, where known.
    pub batch: Option<u64>,
    /// The worker that preprocessed it.
    pub pid: u32,
    /// When preprocessing started, ns.
    pub start_ns: u64,
    /// Its preprocessing time, ns.
    pub dur_ns: u64,
    /// `low` (below Q1 - 1.5 IQR) or `high` (above Q3 + 1.5 IQR).
    pub side: &'static str,
}

/// Per-batch preprocessing time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchStats {
    /// The figures of every batch's preprocessing time.
    pub summary: Option<Summary>,
    /// First quartile, ns.
    pub q1_ns: Option<f64>,
    /// Third quartile, ns.
    pub q3_ns: Option<f64>,
    /// Q3 - Q1, ns.
    pub iqr_ns: Option<f64>,
    /// Q1 - 1.5 IQR, ns.
    pub low_fence_ns: Option<f64>,
    /// Q3 + 1.5 IQR, ns.
    pub high_fence_ns: Option<f64>,
    /// The batches outside the fences, in order of start.
    pub outliers: Vec<Outlier>,
}

/// Where a wait falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WaitBucket {
    /// The batch was already there (`ready=1`), or 0 ns.
    #[serde(rename = "none")]
    None,
    /// More than 0, under 1 ms.
    #[serde(rename = "under_1ms")]
    Under1ms,
    /// 1 ms to 500 ms.
    #[serde(rename = "over_1ms")]
    Over1ms,
    /// Over 500 ms.
    #[serde(rename = "over_500ms")]
    Over500ms,
}

impl WaitBucket {
    /// All buckets, in order.
    pub const ALL: [WaitBucket; 4] = [
        WaitBucket::None,
        WaitBucket::Under1ms,
        WaitBucket::Over1ms,
        WaitBucket::Over500ms,
    ];

    /// The bucket of a wait of `dur_ns` (`ready`: the batch was there).
    pub fn of(dur_ns: u64, ready: Option<bool>) -> WaitBucket {
        if ready == Some(true) || dur_ns == 0 {
            WaitBucket::None
        } else if dur_ns < 1_000_000 {
            WaitBucket::Under1ms
        } else if dur_ns <= 500_000_000 {
            WaitBucket::Over1ms
        } else {
            WaitBucket::Over500ms
        }
    }

    /// The name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitBucket::None => "none",
            WaitBucket::Under1ms => "under_1ms",
            WaitBucket::Over1ms => "over_1ms",
            WaitBucket::Over500ms => "over_500ms",
        }
    }

    /// What it means, for tables.
    pub fn label(self) -> &'static str {
        match self {
            WaitBucket::None => "none (batch ready)",
            WaitBucket::Under1ms => "< 1 ms",
            WaitBucket::Over1ms => "1 ms - 500 ms",
            WaitBucket::Over500ms => "> 500 ms",
        }
    }
}

/// The waits of one bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketRow {
    /// The bucket.
    pub bucket: WaitBucket,
    /// How many waits.
    pub count: u64,
    /// Their share of all waits (0 to 1).
    pub share: f64,
    /// Their total, ns.
    pub total_ns: u64,
}

/// The main process's waits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitStats {
    /// The figures of every wait.
    pub summary: Option<Summary>,
    /// Waits per bucket.
    pub buckets: Vec<BucketRow>,
}

/// From the end of preprocessing to consumption.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelayStats {
    /// The figures of every consumed batch's delay.
    pub summary: Option<Summary>,
    /// Batches preprocessed but never consumed.
    pub unconsumed: u64,
    /// Consumptions with no preprocessed batch to match.
    pub consumed_without_batch: u64,
}

/// One batch, as the statistics list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerBatch {
    /// Its id, where known.
    pub batch: Option<u64>,
    /// The worker that preprocessed it.
    pub pid: u32,
    /// Preprocessing start, ns.
    pub start_ns: u64,
    /// Preprocessing time, ns.
    pub dur_ns: u64,
    /// Preprocessing end, ns.
    pub end_ns: u64,
    /// When the main process consumed it, ns.
    pub consumed_ns: Option<u64>,
    /// The consuming process.
    pub main_pid: Option<u32>,
    /// `consumed_ns - end_ns`.
    pub delay_ns: Option<i64>,
    /// The main process's wait for it, ns.
    pub wait_ns: Option<u64>,
    /// The bucket of that wait.
    pub wait_bucket: Option<WaitBucket>,
}

/// Everything `lotus trace stats` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceStats {
    /// Events read.
    pub events: u64,
    /// Lines skipped as unreadable.
    pub bad_lines: u64,
    /// The processes.
    pub processes: Vec<ProcessRow>,
    /// Per op name (events of kind `op`), by total time, largest first.
    pub ops: Vec<NamedSummary>,
    /// Per kind other than `op`, all names together.
    pub kinds: Vec<KindSummary>,
    /// Per-batch preprocessing time and its outliers.
    pub batches: BatchStats,
    /// The main process's waits.
    pub wait: WaitStats,
    /// From end of preprocessing to consumption.
    pub delay: DelayStats,
    /// Every batch, in order of start.
    pub per_batch: Vec<PerBatch>,
}

/// Total time per op name (events of kind `op`), ns, by name.
pub fn op_totals(index: &TraceIndex) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = index
        .durations
        .as_ref()
        .and_then(|d| d.get(&Kind::Op))
        .map(|names| {
            names
                .iter()
                .map(|(n, d)| (n.clone(), d.iter().map(|&x| x.max(0) as u64).sum()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

impl TraceStats {
    /// The statistics of `index` (gathered with durations; without them,
    /// `ops` and `kinds` are empty).
    pub fn compute(index: &TraceIndex) -> TraceStats {
        let pid = |p: usize| index.processes[p].process.pid;
        let mut ops = Vec::new();
        let mut kinds = Vec::new();
        if let Some(d) = &index.durations {
            if let Some(names) = d.get(&Kind::Op) {
                for (name, values) in names {
                    if let Some(summary) = Summary::of(&mut values.clone()) {
                        ops.push(NamedSummary {
                            name: name.clone(),
                            summary,
                        });
                    }
                }
            }
            for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Op) {
                let mut all: Vec<i64> = d
                    .get(&kind)
                    .map(|names| names.values().flatten().copied().collect())
                    .unwrap_or_default();
                if let Some(summary) = Summary::of(&mut all) {
                    kinds.push(KindSummary { kind, summary });
                }
            }
        }
        ops.sort_by(|a, b| {
            b.summary
                .total_ns
                .cmp(&a.summary.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });

        let joined = index.joined();
        let batches = batch_stats(&joined.rows, &pid);
        let wait = wait_stats(&index.waits);
        let mut delays: Vec<i64> = joined.rows.iter().filter_map(BatchRow::delay_ns).collect();
        let delay = DelayStats {
            summary: Summary::of(&mut delays),
            unconsumed: joined.rows.iter().filter(|r| r.consume.is_none()).count() as u64,
            consumed_without_batch: joined.consumed_without_batch,
        };
        let per_batch = joined
            .rows
            .iter()
            .map(|r| PerBatch {
                batch: r.preprocessing.batch,
                pid: pid(r.preprocessing.process),
                start_ns: r.preprocessing.start_ns,
                dur_ns: r.preprocessing.dur_ns,
                end_ns: r.end_ns(),
                consumed_ns: r.consume.map(|c| c.start_ns),
                main_pid: r.consume.map(|c| pid(c.process)),
                delay_ns: r.delay_ns(),
                wait_ns: r.wait.map(|w| w.dur_ns),
                wait_bucket: r.wait.map(|w| WaitBucket::of(w.dur_ns, w.ready)),
            })
            .collect();
        TraceStats {
            events: index.events,
            bad_lines: index.warnings.total,
            processes: index
                .processes
                .iter()
                .map(|p| ProcessRow {
                    pid: p.process.pid,
                    role: p.process.role.to_string(),
                    host: p.process.host.as_deref().map(str::to_string),
                    rank: p.process.rank,
                    folder: p.folder.clone(),
                    events: p.events,
                })
                .collect(),
            ops,
            kinds,
            batches,
            wait,
            delay,
            per_batch,
        }
    }
}

fn batch_stats(rows: &[BatchRow], pid: &dyn Fn(usize) -> u32) -> BatchStats {
    let mut durs: Vec<i64> = rows
        .iter()
        .map(|r| i64::try_from(r.preprocessing.dur_ns).unwrap_or(i64::MAX))
        .collect();
    let summary = Summary::of(&mut durs);
    if summary.is_none() {
        return BatchStats {
            summary,
            q1_ns: None,
            q3_ns: None,
            iqr_ns: None,
            low_fence_ns: None,
            high_fence_ns: None,
            outliers: Vec::new(),
        };
    }
    let sorted: Vec<f64> = durs.iter().map(|&v| v as f64).collect();
    let q1 = percentile(&sorted, 25.0);
    let q3 = percentile(&sorted, 75.0);
    let iqr = q3 - q1;
    let (low, high) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    let outliers = rows
        .iter()
        .filter_map(|r| {
            let d = r.preprocessing.dur_ns as f64;
            let side = if d < low {
                "low"
            } else if d > high {
                "high"
            } else {
                return None;
            };
            Some(Outlier {
                batch: r.preprocessing.batch,
                pid: pid(r.preprocessing.process),
                start_ns: r.preprocessing.start_ns,
                dur_ns: r.preprocessing.dur_ns,
                side,
            })
        })
        .collect();
    BatchStats {
        summary,
        q1_ns: Some(q1),
        q3_ns: Some(q3),
        iqr_ns: Some(iqr),
        low_fence_ns: Some(low),
        high_fence_ns: Some(high),
        outliers,
    }
}

fn wait_stats(waits: &[MainRec]) -> WaitStats {
    let mut durs: Vec<i64> = waits
        .iter()
        .map(|w| i64::try_from(w.dur_ns).unwrap_or(i64::MAX))
        .collect();
    let summary = Summary::of(&mut durs);
    let n = waits.len() as u64;
    let buckets = WaitBucket::ALL
        .into_iter()
        .map(|bucket| {
            let (count, total_ns) = waits
                .iter()
                .filter(|w| WaitBucket::of(w.dur_ns, w.ready) == bucket)
                .fold((0u64, 0u64), |(c, t), w| {
                    (c + 1, t.saturating_add(w.dur_ns))
                });
            BucketRow {
                bucket,
                count,
                share: if n == 0 { 0.0 } else { count as f64 / n as f64 },
                total_ns,
            }
        })
        .collect();
    WaitStats { summary, buckets }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile([1, 2, 3, 4], [50, 95, 25, 75]) == [2.5, 3.85, 1.75, 3.25]
        let x = [1.0, 2.0, 3.0, 4.0];
        for (p, want) in [
            (50.0, 2.5),
            (95.0, 3.85),
            (25.0, 1.75),
            (75.0, 3.25),
            (0.0, 1.0),
            (100.0, 4.0),
        ] {
            assert!((percentile(&x, p) - want).abs() < 1e-12, "p{p}");
        }
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn summary_figures() {
        let s = Summary::of(&mut [4, 1, 3, 2]).expect("values");
        assert_eq!((s.count, s.total_ns, s.min_ns, s.max_ns), (4, 10, 1, 4));
        assert_eq!(s.mean_ns, 2.5);
        // Population deviation of 1..4: sqrt(1.25).
        assert!((s.std_ns - 1.25f64.sqrt()).abs() < 1e-12);
        assert!(Summary::of(&mut []).is_none());
    }

    #[test]
    fn wait_buckets_edges() {
        assert_eq!(WaitBucket::of(5_000_000, Some(true)), WaitBucket::None);
        assert_eq!(WaitBucket::of(0, None), WaitBucket::None);
        assert_eq!(WaitBucket::of(999_999, Some(false)), WaitBucket::Under1ms);
        assert_eq!(WaitBucket::of(1_000_000, None), WaitBucket::Over1ms);
        assert_eq!(WaitBucket::of(500_000_000, None), WaitBucket::Over1ms);
        assert_eq!(WaitBucket::of(500_000_001, None), WaitBucket::Over500ms);
        for b in WaitBucket::ALL {
            assert_eq!(serde_json::to_value(b).expect("json"), b.as_str());
        }
    }
}
