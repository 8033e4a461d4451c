//! The figures of `lotus trace stats`, from a [`TraceIndex`] gathered with
//! durations. Every figure is computed from sorted streams (see
//! [`lotus_sort`]), exactly as over the whole list in memory, with memory
//! that stays flat however long the trace.
//!
//! - **Percentiles** (p50, p95, p99, and Q1/Q3 of the IQR rule) use linear
//!   interpolation between closest ranks, numpy's default
//!   (`numpy.percentile(..., method="linear")`, also pandas'
//!   `quantile`): for `n` values sorted ascending `x[0..n)`, the p-th
//!   percentile sits at rank `h = (n - 1) * p / 100` and is
//!   `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.
//! - **Standard deviation** is the population one (divided by `n`,
//!   numpy's default `ddof=0`).
//! - **Outliers** among batch preprocessing times, by the [`OutlierRule`]
//!   asked for: [`OutlierRule::Flag`] (the default) flags those below
//!   `Q1 - 1.5 IQR` or above `Q3 + 1.5 IQR`, `IQR = Q3 - Q1`, and keeps
//!   them in every figure; [`OutlierRule::Study`] is the original LotusTrace
//!   study's `--remove_outliers`: batches below `Q1 - 2 IQR` are removed
//!   and every batch figure is recomputed without them.
//! - **Wait buckets**: `none` (the batch was already there, `ready=1`, or
//!   the wait lasted 0 ns), `under_1ms` (more than 0, under 1 ms),
//!   `1ms_to_500ms` (1 ms to 500 ms, both included; `over_1ms` before
//!   schema 2), `over_500ms`.
//! - **Delay**: from the end of a batch's preprocessing in its worker to
//!   its consumption in the main process (batches matched as
//!   [`crate::index`] matches them), with the study's two shares:
//!   delays under 250 ms and over 500 ms (both strict).
//!
//! All times are whole ns; means, percentiles and deviations are `f64` ns.

use serde::Serialize;

use super::event::{Kind, Role};
use super::index::{BatchRow, DurCount, Durations, TraceIndex};
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Record, Sorted, Sorter, SpillError};

mod main_loop;
pub use main_loop::{loop_figures, LoopFigures, MainLoop};

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
#[non_exhaustive]
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
        let total: i128 = values.iter().map(|&v| i128::from(v)).sum();
        let mut s = Streaming::new(values.len() as u64, total, &[]);
        for &v in values.iter() {
            s.push(v);
        }
        Some(s.finish().0)
    }
}

/// One percentile being picked from a stream: rank `h`, and the values at
/// `floor(h)` and the rank after.
#[derive(Debug, Clone)]
struct Rank {
    h: f64,
    lo: u64,
    hi: u64,
    x_lo: f64,
    x_hi: f64,
}

/// The figures of `n` values summing to `total`, fed ascending one by one:
/// the same arithmetic, in the same order, as over a sorted list.
#[derive(Debug, Clone)]
struct Streaming {
    n: u64,
    total: i128,
    mean: f64,
    seen: u64,
    squares: f64,
    min: i64,
    max: i64,
    /// p50, p95, p99, then the extra percentiles asked for.
    ranks: Vec<Rank>,
}

impl Streaming {
    fn new(n: u64, total: i128, extra: &[f64]) -> Self {
        let ranks = [50.0, 95.0, 99.0]
            .iter()
            .chain(extra)
            .map(|&p| {
                let h = n.saturating_sub(1) as f64 * (p / 100.0);
                let lo = (h.floor() as u64).min(n.saturating_sub(1));
                Rank {
                    h,
                    lo,
                    hi: (lo + 1).min(n.saturating_sub(1)),
                    x_lo: f64::NAN,
                    x_hi: f64::NAN,
                }
            })
            .collect();
        Streaming {
            n,
            total,
            mean: total as f64 / n.max(1) as f64,
            seen: 0,
            squares: 0.0,
            min: 0,
            max: 0,
            ranks,
        }
    }

    fn push(&mut self, v: i64) {
        self.push_n(v, 1);
    }

    /// `v`, `n` times: what `n` calls of [`Streaming::push`] do (the
    /// squares added one by one, in the same order, so the deviation is
    /// the same to the last bit).
    fn push_n(&mut self, v: i64, n: u64) {
        if n == 0 {
            return;
        }
        let x = v as f64;
        if self.seen == 0 {
            self.min = v;
        }
        self.max = v;
        let square = (x - self.mean) * (x - self.mean);
        for _ in 0..n {
            self.squares += square;
        }
        let at = self.seen..self.seen + n;
        for r in &mut self.ranks {
            if at.contains(&r.lo) {
                r.x_lo = x;
            }
            if at.contains(&r.hi) {
                r.x_hi = x;
            }
        }
        self.seen += n;
    }

    /// The summary and the extra percentiles.
    fn finish(self) -> (Summary, Vec<f64>) {
        let at = |r: &Rank| r.x_lo + (r.h - r.lo as f64) * (r.x_hi - r.x_lo);
        let p: Vec<f64> = self.ranks.iter().map(at).collect();
        let n = self.n.max(1);
        (
            Summary {
                count: self.n,
                total_ns: self.total.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
                mean_ns: self.mean,
                p50_ns: p[0],
                p95_ns: p[1],
                p99_ns: p[2],
                std_ns: (self.squares / n as f64).sqrt(),
                min_ns: self.min,
                max_ns: self.max,
            },
            p[3..].to_vec(),
        )
    }
}

/// A summary and the extra percentiles asked for.
type Figures = (Summary, Vec<f64>);

/// The summaries of a stream of counted values sorted by key then value;
/// `keys[key]` is each key's count and sum, known beforehand. Each
/// summary comes with the `extra` percentiles.
fn summaries_by_key(
    sorted: impl Iterator<Item = Result<DurCount, SpillError>>,
    keys: &[(u64, i128)],
    extra: &[f64],
) -> Result<Vec<Option<Figures>>, SpillError> {
    let mut out = vec![None; keys.len()];
    let mut cur: Option<(u32, Streaming)> = None;
    for r in sorted {
        let r = r?;
        match &mut cur {
            Some((k, s)) if *k == r.key => s.push_n(r.dur, r.count),
            _ => {
                if let Some((k, s)) = cur.take() {
                    out[k as usize] = Some(s.finish());
                }
                let (n, total) = keys.get(r.key as usize).copied().unwrap_or((0, 0));
                let mut s = Streaming::new(n, total, extra);
                s.push_n(r.dur, r.count);
                cur = Some((r.key, s));
            }
        }
    }
    if let Some((k, s)) = cur {
        out[k as usize] = Some(s.finish());
    }
    Ok(out)
}

/// The summary of the events of one name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct NamedSummary {
    /// The event name (without the `S`).
    pub name: String,
    /// The figures.
    #[serde(flatten)]
    pub summary: Summary,
    /// For an op whose every span says its own thread's CPU time
    /// (`cpu=`): that time summed, ns (a span's includes the ops run
    /// inside it). Absent for older logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// `cpu_ns` per span, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_per_call_ns: Option<u64>,
}

/// The summary of the events of one kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct KindSummary {
    /// The kind.
    pub kind: Kind,
    /// The figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// A process, as the statistics list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
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

/// Which batches are outliers, and what is done with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub enum OutlierRule {
    /// Below `Q1 - 1.5 IQR` or above `Q3 + 1.5 IQR`: flagged, kept in every
    /// figure.
    #[default]
    #[serde(rename = "flag-1.5iqr")]
    Flag,
    /// The original study's `--remove_outliers`: below `Q1 - 2 IQR` only
    /// (strictly), removed, and every batch figure recomputed over the
    /// batches kept.
    ///
    /// From the study's own scripts (rajveerb/lotus,
    /// `code/image_classification/analysis/LotusTrace_imagenet_vary_batch_and_gpu/`
    /// `preprocessing_time_stats.py` and
    /// `iqr_and_stddev_preprocessing_time_stats.py`, `remove_wild_outliers`):
    /// `q1 = df["duration"].quantile(0.25)`, `q3 = ...quantile(0.75)`
    /// (pandas' linear interpolation, the same as [`percentile`]),
    /// `iqr = (q3 - q1) * 2`, and rows with `duration < q1 - iqr` dropped;
    /// then sum, mean, `np.std` (ddof=0), min, max, `np.median` and
    /// `np.percentile` 25 and 75 over what is left. Its comment gives the
    /// reason: the last batch of an epoch is smaller than the others.
    #[serde(rename = "study-remove-below-q1-2iqr")]
    Study,
}

impl OutlierRule {
    /// The name in JSON and on the command line's output.
    pub fn as_str(self) -> &'static str {
        match self {
            OutlierRule::Flag => "flag-1.5iqr",
            OutlierRule::Study => "study-remove-below-q1-2iqr",
        }
    }

    /// What it does, for tables.
    pub fn describe(self) -> &'static str {
        match self {
            OutlierRule::Flag => {
                "flagged below Q1 - 1.5 IQR or above Q3 + 1.5 IQR, kept in every figure"
            }
            OutlierRule::Study => {
                "the study's --remove_outliers: removed below Q1 - 2 IQR, figures recomputed without them"
            }
        }
    }
}

/// The batch figures before the study's rule removed any: what its fence
/// was computed from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BeforeRemoval {
    /// Every batch's figures.
    pub summary: Summary,
    /// First quartile of every batch, ns.
    pub q1_ns: f64,
    /// Third quartile of every batch, ns.
    pub q3_ns: f64,
    /// `q3_ns - q1_ns`.
    pub iqr_ns: f64,
}

/// A batch whose preprocessing time is an outlier.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Outlier {
    /// Its id, where known.
    pub batch: Option<u64>,
    /// The worker that preprocessed it.
    pub pid: u32,
    /// When preprocessing started, ns.
    pub start_ns: u64,
    /// Its preprocessing time, ns.
    pub dur_ns: u64,
    /// `low` (below the low fence) or `high` (above the high fence).
    pub side: &'static str,
    /// Whether it was left out of the figures (the study's rule).
    pub removed: bool,
}

/// Per-batch preprocessing time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BatchStats {
    /// The outlier rule these figures follow.
    pub outlier_rule: OutlierRule,
    /// The figures of the batches' preprocessing time (under the study's
    /// rule, of the batches kept).
    pub summary: Option<Summary>,
    /// First quartile, ns (of the batches kept).
    pub q1_ns: Option<f64>,
    /// Third quartile, ns (of the batches kept).
    pub q3_ns: Option<f64>,
    /// Q3 - Q1, ns (of the batches kept).
    pub iqr_ns: Option<f64>,
    /// The low fence, ns: Q1 - 1.5 IQR, or the study's Q1 - 2 IQR (of
    /// every batch).
    pub low_fence_ns: Option<f64>,
    /// Q3 + 1.5 IQR, ns (none under the study's rule, which removes low
    /// ones only).
    pub high_fence_ns: Option<f64>,
    /// Every batch's figures, under the study's rule (what its fence came
    /// from); `None` under the flagging rule, where `summary` is those.
    pub before_removal: Option<BeforeRemoval>,
    /// The batches outside the fences, in order of start.
    pub outliers: Vec<Outlier>,
}

/// Where a wait falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum WaitBucket {
    /// The batch was already there (`ready=1`), or 0 ns.
    #[serde(rename = "none")]
    None,
    /// More than 0, under 1 ms.
    #[serde(rename = "under_1ms")]
    Under1ms,
    /// 1 ms to 500 ms (named `over_1ms` before `lotus.trace-stats/2`).
    #[serde(rename = "1ms_to_500ms")]
    From1msTo500ms,
    /// Over 500 ms.
    #[serde(rename = "over_500ms")]
    Over500ms,
}

impl WaitBucket {
    /// All buckets, in order.
    pub const ALL: [WaitBucket; 4] = [
        WaitBucket::None,
        WaitBucket::Under1ms,
        WaitBucket::From1msTo500ms,
        WaitBucket::Over500ms,
    ];

    /// The bucket of a wait of `dur_ns` (`ready`: the batch was there).
    pub fn of(dur_ns: u64, ready: Option<bool>) -> WaitBucket {
        if ready == Some(true) || dur_ns == 0 {
            WaitBucket::None
        } else if dur_ns < 1_000_000 {
            WaitBucket::Under1ms
        } else if dur_ns <= 500_000_000 {
            WaitBucket::From1msTo500ms
        } else {
            WaitBucket::Over500ms
        }
    }

    /// The name in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitBucket::None => "none",
            WaitBucket::Under1ms => "under_1ms",
            WaitBucket::From1msTo500ms => "1ms_to_500ms",
            WaitBucket::Over500ms => "over_500ms",
        }
    }

    /// What it means, for tables.
    pub fn label(self) -> &'static str {
        match self {
            WaitBucket::None => "none (batch ready)",
            WaitBucket::Under1ms => "< 1 ms",
            WaitBucket::From1msTo500ms => "1 ms - 500 ms",
            WaitBucket::Over500ms => "> 500 ms",
        }
    }
}

/// The waits of one bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct WaitStats {
    /// The figures of every wait.
    pub summary: Option<Summary>,
    /// Waits per bucket.
    pub buckets: Vec<BucketRow>,
}

/// From the end of preprocessing to consumption.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DelayStats {
    /// The figures of every consumed batch's delay.
    pub summary: Option<Summary>,
    /// Batches preprocessed but never consumed.
    pub unconsumed: u64,
    /// Consumptions with no preprocessed batch to match.
    pub consumed_without_batch: u64,
    /// Delays under 250 ms (strictly), the study's first share.
    pub under_250ms: u64,
    /// Their share of the delays (0 to 1; `None` with no delay).
    pub under_250ms_share: Option<f64>,
    /// Delays over 500 ms (strictly), the study's second share.
    pub over_500ms: u64,
    /// Their share of the delays (0 to 1; `None` with no delay).
    pub over_500ms_share: Option<f64>,
}

/// One batch, as the statistics list it ([`PerBatchRows`] gives them in
/// order of start).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
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
#[non_exhaustive]
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
}

/// A batch as sorted for [`PerBatchRows`]: by start, then the process's
/// pid in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RowRec {
    start: u64,
    out_pid: u64,
    dur: u64,
    batch: Option<u64>,
    pid: u32,
    consumed: Option<u64>,
    main_pid: Option<u64>,
    wait: Option<u64>,
    ready: Option<bool>,
}

impl Record for RowRec {
    const SIZE: usize = 65;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.start)
            .u64(self.out_pid)
            .u64(self.dur)
            .opt_u64(self.batch)
            .u32(self.pid)
            .opt_u64(self.consumed)
            .opt_u64(self.main_pid)
            .opt_u64(self.wait)
            .opt_bool(self.ready);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        RowRec {
            start: g.u64(),
            out_pid: g.u64(),
            dur: g.u64(),
            batch: g.opt_u64(),
            pid: g.u32(),
            consumed: g.opt_u64(),
            main_pid: g.opt_u64(),
            wait: g.opt_u64(),
            ready: g.opt_bool(),
        }
    }
}

/// Every batch with what happened to it, in order of start (then of the
/// process's pid), read from a sorted stream (an item is an error only when
/// a temporary file cannot be read back).
#[derive(Debug)]
pub struct PerBatchRows {
    sorted: Sorted<RowRec>,
}

impl PerBatchRows {
    /// How many batches.
    pub fn len(&self) -> u64 {
        self.sorted.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

impl Iterator for PerBatchRows {
    type Item = Result<PerBatch, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.sorted.next()?.map(|r| {
            let end_ns = r.start.saturating_add(r.dur);
            PerBatch {
                batch: r.batch,
                pid: r.pid,
                start_ns: r.start,
                dur_ns: r.dur,
                end_ns,
                consumed_ns: r.consumed,
                main_pid: r.main_pid.map(|p| p as u32),
                delay_ns: r
                    .consumed
                    .map(|c| (i128::from(c) - i128::from(end_ns)) as i64),
                wait_ns: r.wait,
                wait_bucket: r.wait.map(|w| WaitBucket::of(w, r.ready)),
            }
        }))
    }
}

/// Total time per op name (events of kind `op`), ns, by name.
pub fn op_totals(index: &TraceIndex) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = index
        .keys
        .iter()
        .filter(|k| k.kind == Kind::Op)
        .filter_map(|k| {
            let total = k.total_ns.clamp(0, i128::from(u64::MAX)) as u64;
            Some((k.name.clone()?, total))
        })
        .collect();
    v.sort();
    v
}

impl TraceStats {
    /// The statistics of `index` (gathered with durations; without them,
    /// the duration figures (`ops`, `kinds`, the batch and wait summaries,
    /// the outliers) are empty), and every batch in order of start. Takes
    /// the index's durations; memory stays within its budget per sort. An
    /// error only when a temporary file cannot be written or read.
    pub fn compute(index: &mut TraceIndex) -> Result<(TraceStats, PerBatchRows), SpillError> {
        Self::compute_with(index, OutlierRule::Flag)
    }

    /// [`TraceStats::compute`] with the outlier rule `rule`.
    pub fn compute_with(
        index: &mut TraceIndex,
        rule: OutlierRule,
    ) -> Result<(TraceStats, PerBatchRows), SpillError> {
        let budget = index.budget();
        let counts: Vec<(u64, i128)> = index.keys.iter().map(|k| (k.count, k.total_ns)).collect();
        let mut by_key = match index.take_durations() {
            Some(d) => summaries_by_key(d.finish()?, &counts, &[25.0, 75.0])?,
            None => vec![None; counts.len()],
        };
        let mut ops = Vec::new();
        let mut kinds = Vec::new();
        for (k, figures) in index.keys.iter().zip(&by_key) {
            let Some((summary, _)) = figures else {
                continue;
            };
            match (&k.name, k.kind) {
                (Some(name), Kind::Op) => {
                    // CPU only where every span says it: a sum over some
                    // would pass for the op's whole.
                    let cpu_ns = (k.count > 0 && k.cpu_count == k.count)
                        .then(|| u64::try_from(k.cpu_ns).unwrap_or(u64::MAX));
                    ops.push(NamedSummary {
                        name: name.clone(),
                        summary: summary.clone(),
                        cpu_ns,
                        cpu_per_call_ns: cpu_ns.map(|c| c / k.count),
                    })
                }
                (None, kind) if kind != Kind::Op => kinds.push(KindSummary {
                    kind,
                    summary: summary.clone(),
                }),
                _ => {}
            }
        }
        ops.sort_by(|a, b| {
            b.summary
                .total_ns
                .cmp(&a.summary.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });

        let mut batches = match by_key[Kind::Batch as usize].take() {
            Some((summary, q)) => {
                let (q1, q3) = (q[0], q[1]);
                let iqr = q3 - q1;
                let (low, high, before) = match rule {
                    OutlierRule::Flag => (q1 - 1.5 * iqr, Some(q3 + 1.5 * iqr), None),
                    OutlierRule::Study => (
                        q1 - 2.0 * iqr,
                        None,
                        Some(BeforeRemoval {
                            summary: summary.clone(),
                            q1_ns: q1,
                            q3_ns: q3,
                            iqr_ns: iqr,
                        }),
                    ),
                };
                BatchStats {
                    outlier_rule: rule,
                    summary: Some(summary),
                    q1_ns: Some(q1),
                    q3_ns: Some(q3),
                    iqr_ns: Some(iqr),
                    low_fence_ns: Some(low),
                    high_fence_ns: high,
                    before_removal: before,
                    outliers: Vec::new(),
                }
            }
            None => BatchStats {
                outlier_rule: rule,
                summary: None,
                q1_ns: None,
                q3_ns: None,
                iqr_ns: None,
                low_fence_ns: None,
                high_fence_ns: None,
                before_removal: None,
                outliers: Vec::new(),
            },
        };
        let waits: u64 = index.wait_buckets.iter().map(|(count, _)| count).sum();
        let wait = WaitStats {
            summary: by_key[Kind::Wait as usize].take().map(|(s, _)| s),
            buckets: WaitBucket::ALL
                .into_iter()
                .zip(index.wait_buckets)
                .map(|(bucket, (count, total_ns))| BucketRow {
                    bucket,
                    count,
                    share: if waits == 0 {
                        0.0
                    } else {
                        count as f64 / waits as f64
                    },
                    total_ns,
                })
                .collect(),
        };

        // Every batch with its consumption and wait: sorted by start for
        // the listing, its delay sorted for the figures, outliers kept.
        let pids: Vec<(u32, u64)> = index
            .processes
            .iter()
            .map(|p| (p.process.pid, p.out_pid))
            .collect();
        let pid = |p: usize| pids.get(p).copied().unwrap_or((0, 0));
        let (low_fence, high_fence) = (batches.low_fence_ns, batches.high_fence_ns);
        let removing = rule == OutlierRule::Study && low_fence.is_some();
        let mut rows = Sorter::new(budget);
        let mut delays = Durations::new(budget);
        // The batches the study's rule keeps, for its figures recomputed.
        let mut kept = Durations::new(budget);
        let (mut kept_count, mut kept_total) = (0u64, 0i128);
        let (mut delay_total, mut unconsumed) = (0i128, 0u64);
        let (mut under_250ms, mut over_500ms) = (0u64, 0u64);
        let mut outliers: Vec<(u64, u64, Outlier)> = Vec::new();
        let consumed_without_batch = index.join(|r: BatchRow| {
            let (p, out_pid) = pid(r.preprocessing.process);
            match r.delay_ns() {
                Some(d) => {
                    delay_total += i128::from(d);
                    under_250ms += u64::from(d < 250_000_000);
                    over_500ms += u64::from(d > 500_000_000);
                    delays.add(0, &[d])?;
                }
                None => unconsumed += 1,
            }
            let dur = r.preprocessing.dur_ns;
            let d = dur as f64;
            let side = if low_fence.is_some_and(|low| d < low) {
                Some("low")
            } else if high_fence.is_some_and(|high| d > high) {
                Some("high")
            } else {
                None
            };
            if removing && side.is_none() {
                let dur = dur.min(i64::MAX as u64) as i64;
                kept_count += 1;
                kept_total += i128::from(dur);
                kept.add(0, &[dur])?;
            }
            if let Some(side) = side {
                outliers.push((
                    r.preprocessing.start_ns,
                    out_pid,
                    Outlier {
                        batch: r.preprocessing.batch,
                        pid: p,
                        start_ns: r.preprocessing.start_ns,
                        dur_ns: r.preprocessing.dur_ns,
                        side,
                        removed: removing,
                    },
                ));
            }
            rows.push(RowRec {
                start: r.preprocessing.start_ns,
                out_pid,
                dur: r.preprocessing.dur_ns,
                batch: r.preprocessing.batch,
                pid: p,
                consumed: r.consume.map(|c| c.start_ns),
                main_pid: r.consume.map(|c| u64::from(pid(c.process).0)),
                wait: r.wait.map(|w| w.dur_ns),
                ready: r.wait.and_then(|w| w.ready),
            })
        })?;
        outliers.sort_by_key(|o| (o.0, o.1, o.2.dur_ns));
        batches.outliers = outliers.into_iter().map(|(_, _, o)| o).collect();
        if removing {
            // Every batch figure again, over the batches kept (none kept:
            // no figures).
            let again =
                summaries_by_key(kept.finish()?, &[(kept_count, kept_total)], &[25.0, 75.0])?
                    .pop()
                    .flatten();
            let (q1, q3) = match &again {
                Some((_, q)) => (Some(q[0]), Some(q[1])),
                None => (None, None),
            };
            batches.summary = again.map(|(s, _)| s);
            batches.q1_ns = q1;
            batches.q3_ns = q3;
            batches.iqr_ns = q1.zip(q3).map(|(a, b)| b - a);
        }
        let delay_count = delays.len();
        let delay_summary = summaries_by_key(delays.finish()?, &[(delay_count, delay_total)], &[])?
            .pop()
            .flatten()
            .map(|(s, _)| s);
        let stats = TraceStats {
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
            delay: DelayStats {
                summary: delay_summary,
                unconsumed,
                consumed_without_batch,
                under_250ms,
                under_250ms_share: share(under_250ms, delay_count),
                over_500ms,
                over_500ms_share: share(over_500ms, delay_count),
            },
        };
        Ok((
            stats,
            PerBatchRows {
                sorted: rows.finish()?,
            },
        ))
    }
}

/// `part / whole`, `None` when `whole` is 0.
fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// One configuration in [`ConfigComparison`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ConfigRow {
    /// The configuration's name (its folder's).
    pub label: String,
    /// Its batches (kept, under the study's rule).
    pub batches: u64,
    /// Median batch preprocessing time, ns.
    pub p50_ns: Option<f64>,
    /// Q3 - Q1 of batch preprocessing time, ns.
    pub iqr_ns: Option<f64>,
    /// Population standard deviation of it, ns.
    pub std_ns: Option<f64>,
    /// `iqr_ns` over the smallest configuration's (`None` where that is 0).
    pub iqr_normalized: Option<f64>,
    /// `std_ns` over the smallest configuration's (`None` where that is 0).
    pub std_normalized: Option<f64>,
}

/// The study's comparison of configurations (its
/// `iqr_and_stddev_preprocessing_time_stats.py`): each configuration's IQR
/// and standard deviation of batch preprocessing time divided by the
/// smallest among the configurations, and the largest of those ratios
/// ("Maximum normalized IQR/standard deviation for preprocessing time
/// across configs"). Configurations without batches take no part.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ConfigComparison {
    /// Each configuration, in the order given.
    pub configurations: Vec<ConfigRow>,
    /// The largest `iqr_normalized`.
    pub max_normalized_iqr: Option<f64>,
    /// The largest `std_normalized`.
    pub max_normalized_std: Option<f64>,
}

impl ConfigComparison {
    /// The comparison of `configs` (name, batch figures).
    pub fn of(configs: &[(&str, &BatchStats)]) -> ConfigComparison {
        let std = |b: &BatchStats| b.summary.as_ref().map(|s| s.std_ns);
        let smallest = |f: &dyn Fn(&BatchStats) -> Option<f64>| {
            configs
                .iter()
                .filter_map(|(_, b)| f(b))
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        };
        let min_iqr = smallest(&|b| b.iqr_ns);
        let min_std = smallest(&std);
        let ratio = |v: Option<f64>, min: Option<f64>| match (v, min) {
            (Some(v), Some(m)) if m > 0.0 => Some(v / m),
            _ => None,
        };
        let rows: Vec<ConfigRow> = configs
            .iter()
            .map(|(label, b)| ConfigRow {
                label: label.to_string(),
                batches: b.summary.as_ref().map_or(0, |s| s.count),
                p50_ns: b.summary.as_ref().map(|s| s.p50_ns),
                iqr_ns: b.iqr_ns,
                std_ns: std(b),
                iqr_normalized: ratio(b.iqr_ns, min_iqr),
                std_normalized: ratio(std(b), min_std),
            })
            .collect();
        let max = |f: fn(&ConfigRow) -> Option<f64>| {
            rows.iter()
                .filter_map(f)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        };
        ConfigComparison {
            max_normalized_iqr: max(|r| r.iqr_normalized),
            max_normalized_std: max(|r| r.std_normalized),
            configurations: rows,
        }
    }
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
        assert_eq!(WaitBucket::of(1_000_000, None), WaitBucket::From1msTo500ms);
        assert_eq!(
            WaitBucket::of(500_000_000, None),
            WaitBucket::From1msTo500ms
        );
        assert_eq!(WaitBucket::of(500_000_001, None), WaitBucket::Over500ms);
        for b in WaitBucket::ALL {
            assert_eq!(serde_json::to_value(b).expect("json"), b.as_str());
        }
    }

    #[test]
    fn streamed_figures_equal_the_sorted_list() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [1usize, 2, 3, 10, 101, 1000] {
            let mut v: Vec<i64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 10_000) as i64
                })
                .collect();
            v.sort_unstable();
            let total: i128 = v.iter().map(|&a| i128::from(a)).sum();
            let mut st = Streaming::new(n as u64, total, &[25.0, 75.0, 0.0, 100.0]);
            for &a in &v {
                st.push(a);
            }
            let (sum, extra) = st.finish();
            let f: Vec<f64> = v.iter().map(|&a| a as f64).collect();
            assert_eq!(sum.p50_ns, percentile(&f, 50.0), "n={n}");
            assert_eq!(sum.p95_ns, percentile(&f, 95.0), "n={n}");
            assert_eq!(sum.p99_ns, percentile(&f, 99.0), "n={n}");
            assert_eq!(
                extra,
                vec![percentile(&f, 25.0), percentile(&f, 75.0), f[0], f[n - 1]]
            );
            assert_eq!((sum.min_ns, sum.max_ns), (v[0], v[n - 1]));
            let mean = total as f64 / n as f64;
            let var = f.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n as f64;
            assert_eq!(sum.std_ns, var.sqrt());
        }
    }

    /// Values counted (each distinct value once, with how many) give the
    /// figures of the values pushed one by one, to the last bit: ranks
    /// inside a run of equal values, the deviation's order of additions.
    #[test]
    fn counted_values_give_what_each_value_gives() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (n, spread) in [
            (1usize, 5u64),
            (7, 2),
            (100, 3),
            (1000, 40),
            (5000, 100_000),
        ] {
            let mut v: Vec<i64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % spread) as i64
                })
                .collect();
            v.sort_unstable();
            let total: i128 = v.iter().map(|&a| i128::from(a)).sum();
            let extra = [25.0, 75.0, 0.0, 100.0];
            let mut one_by_one = Streaming::new(n as u64, total, &extra);
            for &a in &v {
                one_by_one.push(a);
            }
            let mut counted = Streaming::new(n as u64, total, &extra);
            for run in v.chunk_by(|a, b| a == b) {
                counted.push_n(run[0], run.len() as u64);
            }
            assert_eq!(counted.finish(), one_by_one.finish(), "n={n}");
        }
    }

    /// An op's CPU (`cpu=`) is summed where every span of it says it;
    /// an op with a span that does not has none (older logs, mixed).
    #[test]
    fn op_cpu_is_summed_where_every_span_says_it() {
        use crate::{Event, Role};
        let ev = |name: &str, start, cpu: Option<u64>| Event {
            batch: Some(0),
            cpu_ns: cpu,
            ..Event::span(name, Kind::Op, 3, Role::Worker, start, 100)
        };
        let mut ix = TraceIndex::new(true, lotus_sort::Budget::new(64));
        ix.begin("", "w");
        for (i, (name, cpu)) in [
            ("Blur", Some(60)),
            ("Blur", Some(80)),
            ("Crop", Some(50)),
            ("Crop", None),
            ("Old", None),
        ]
        .into_iter()
        .enumerate()
        {
            ix.add(&ev(name, 1000 * i as u64, cpu)).expect("add");
        }
        let (stats, _) = TraceStats::compute(&mut ix).expect("stats");
        let op = |n: &str| stats.ops.iter().find(|o| o.name == n).expect(n);
        assert_eq!(op("Blur").cpu_ns, Some(140));
        assert_eq!(op("Blur").cpu_per_call_ns, Some(70));
        assert_eq!(op("Crop").cpu_ns, None);
        assert_eq!(op("Old").cpu_ns, None);
        let json = serde_json::to_value(op("Blur")).expect("json");
        assert_eq!(json["cpu_ns"], 140);
        assert!(serde_json::to_value(op("Old"))
            .expect("json")
            .get("cpu_ns")
            .is_none());
    }

    /// A pipeline's events: 2 workers, 3 ops per sample, 4 samples per
    /// batch, waits and consumptions in the main process (some batches
    /// never consumed, one consumption of a batch nobody made).
    fn pipeline(ix: &mut TraceIndex) {
        use crate::{Event, Role};
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let ev = |name: &str, kind, role, pid, start, dur, batch: Option<u64>| Event {
            batch,
            ready: (kind == Kind::Wait).then_some(dur == 0),
            ..Event::span(name, kind, pid, role, start, dur)
        };
        for w in 0..2u32 {
            ix.begin("", &format!("w{w}"));
            for b in (w as u64..60).step_by(2) {
                let start = 1_000_000 * b + rnd(1000);
                for k in 0..4u64 {
                    for (i, op) in ["Loader", "Flip", "Normalize"].iter().enumerate() {
                        let s = start + k * 100 + i as u64 * 10;
                        ix.add(&ev(
                            op,
                            Kind::Op,
                            Role::Worker,
                            10 + w,
                            s,
                            rnd(5000),
                            Some(b),
                        ))
                        .expect("add");
                    }
                }
                let dur = if b == 7 {
                    900_000
                } else {
                    400_000 + rnd(50_000)
                };
                ix.add(&ev(
                    "Batch",
                    Kind::Batch,
                    Role::Worker,
                    10 + w,
                    start,
                    dur,
                    Some(b),
                ))
                .expect("add");
            }
        }
        ix.begin("", "main");
        for b in 0..57u64 {
            let t = 1_000_000 * b + 600_000;
            let wait = if b % 3 == 0 { 0 } else { rnd(2_000_000) };
            ix.add(&ev("Wait", Kind::Wait, Role::Main, 1, t, wait, Some(b)))
                .expect("add");
            ix.add(&ev(
                "Consume",
                Kind::Consume,
                Role::Main,
                1,
                t + wait,
                0,
                Some(b),
            ))
            .expect("add");
        }
        ix.add(&ev(
            "Consume",
            Kind::Consume,
            Role::Main,
            1,
            99,
            0,
            Some(999),
        ))
        .expect("add");
    }

    #[test]
    fn spilled_statistics_equal_in_memory_ones() {
        let run = |bytes: usize| {
            let mut ix = TraceIndex::new(true, lotus_sort::Budget::new(bytes));
            pipeline(&mut ix);
            let (stats, rows) = TraceStats::compute(&mut ix).expect("stats");
            let rows: Vec<PerBatch> = rows.collect::<Result<_, _>>().expect("rows");
            (stats, rows)
        };
        let (mem, mem_rows) = run(1 << 30);
        let (disk, disk_rows) = run(1);
        assert_eq!(mem, disk);
        assert_eq!(mem_rows, disk_rows);
        // The figures themselves, from the events as a plain list.
        assert_eq!(mem.ops.len(), 3);
        assert_eq!(
            mem.ops.iter().map(|o| o.summary.count).sum::<u64>(),
            60 * 4 * 3
        );
        let batch = mem.batches.summary.as_ref().expect("batches");
        assert_eq!(batch.count, 60);
        assert_eq!(batch.max_ns, 900_000);
        assert!(mem
            .batches
            .outliers
            .iter()
            .any(|o| o.batch == Some(7) && o.side == "high"));
        assert_eq!(mem.delay.summary.as_ref().map(|s| s.count), Some(57));
        assert_eq!(
            (mem.delay.unconsumed, mem.delay.consumed_without_batch),
            (3, 1)
        );
        assert_eq!(mem.wait.buckets[0].count, 19);
        assert_eq!(mem_rows.len(), 60);
        assert!(mem_rows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        for r in &mem_rows {
            let b = r.batch.expect("id");
            assert_eq!(r.consumed_ns.is_some(), b < 57, "batch {b}");
            assert_eq!(r.pid, 10 + (b % 2) as u32);
        }
        assert_eq!(
            op_totals(&TraceIndex::new(false, lotus_sort::Budget::default())),
            vec![]
        );
    }
}
