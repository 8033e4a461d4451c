//! What `lotus trace stats` writes of a configuration's figures
//! ([`TraceFigures`]): its JSON (`lotus.trace-stats/2`, and
//! `lotus.trace-stats-configs/1` for several configurations side by
//! side) and its CSV (one row per op, span kind and summary).

use std::cell::RefCell;

use lotus_trace::{ConfigComparison, JobHosts, OpOnRank, OutlierRule, PerBatchRows, RankStats};
use lotus_trace::{NodeStats, Straggler, Summary, TraceStats};
use serde::Serialize;

use crate::{Error, TraceFigures, Verdict};

/// The schema tag of `lotus trace stats --json`.
pub const STATS_SCHEMA: &str = "lotus.trace-stats/2";

/// The schema tag of `lotus trace stats --json` over several
/// configurations.
pub const CONFIGS_SCHEMA: &str = "lotus.trace-stats-configs/1";

/// How percentiles are computed, as the JSON says it.
pub const PERCENTILE_METHOD: &str = "linear interpolation between closest ranks (numpy.percentile's default): rank h = (n-1)*p/100 over the values sorted ascending, x[floor(h)] + (h-floor(h))*(x[floor(h)+1]-x[floor(h)])";

/// One configuration's `lotus.trace-stats/2` document
/// ([`TraceFigures::document`]), as `lotus trace stats --format json`
/// prints it.
///
/// It holds per-op figures, per-batch preprocessing time with IQR
/// outliers, the main process's waits in buckets and the delay from
/// preprocessing to consumption ([`lotus_trace`] defines them), and each
/// rank's full figures under `ranks` (empty when no log names a rank).
/// `--outliers study` applies the original study's `--remove_outliers`
/// (batches below Q1 - 2 IQR removed, batch figures recomputed;
/// `batches.outlier_rule` names the rule, `batches.before_removal` keeps
/// every batch's figures). Schema 2 renamed the wait bucket `over_1ms` to
/// `1ms_to_500ms` (what it holds) and added the delay shares.
///
/// Several DIRs, or `--configs PARENT` (each sub-folder of logs one
/// configuration, as the study lays them out), give one block per
/// configuration, each equal to that folder's statistics alone, then the
/// study's comparison (IQR and std of batch preprocessing time over the
/// smallest configuration's, and their maxima); `--format json` prints
/// `lotus.trace-stats-configs/1`: `{"schema", "outliers", "configurations":
/// [{"label", ...one trace-stats/2 object...}], "comparison":
/// {"configurations": [...], "max_normalized_iqr", "max_normalized_std"}}`.
///
/// ```json
/// {"schema": "lotus.trace-stats/2", "trace": "DIR",
///  "percentiles": "...", "std": "population (ddof=0)",
///  "events": 1200, "bad_lines": 0, "warnings": [],
///  "processes": [{"pid": 41, "role": "main", "host": null, "rank": null, "folder": "", "events": 40}],
///  "ops": [{"name": "Loader", "count": 512, "total_ns": 1, "mean_ns": 1.0, "p50_ns": 1.0,
///           "p95_ns": 1.0, "p99_ns": 1.0, "std_ns": 0.0, "min_ns": 1, "max_ns": 1}],
///  "kinds": [{"kind": "batch", "count": 16, ...}],
///  "batches": {"outlier_rule": "flag-1.5iqr", "summary": {...}, "q1_ns": 1.0, "q3_ns": 1.0,
///              "iqr_ns": 0.0, "low_fence_ns": 1.0, "high_fence_ns": 1.0, "before_removal": null,
///              "outliers": [{"batch": 3, "pid": 42, "start_ns": 1, "dur_ns": 9, "side": "high", "removed": false}]},
///  "wait": {"summary": {...}, "buckets": [{"bucket": "none", "count": 4, "share": 0.25, "total_ns": 0}, ...]},
///  "delay": {"summary": {...}, "unconsumed": 0, "consumed_without_batch": 0,
///            "under_250ms": 12, "under_250ms_share": 0.75, "over_500ms": 1, "over_500ms_share": 0.0625},
///  "ranks": [{"rank": 0, "hosts": ["node1"], "files": ["DIR/lotus_main_pid_41"],
///             "events": 600, "processes": [...], "ops": [...], ...}],
///  "per_batch": [{"batch": 0, "pid": 42, "start_ns": 1, "dur_ns": 9, "end_ns": 10,
///                 "consumed_ns": 12, "main_pid": 41, "delay_ns": 2, "wait_ns": 3, "wait_bucket": "under_1ms"}]}
/// ```
#[derive(Serialize)]
pub struct StatsDocument<'a> {
    schema: &'static str,
    trace: String,
    percentiles: &'static str,
    std: &'static str,
    warnings: Vec<String>,
    #[serde(flatten)]
    stats: &'a TraceStats,
    /// Each rank's statistics (empty when no log names a rank).
    ranks: &'a [RankStats],
    /// The job and its hosts' folders, where several hosts' were merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<&'a JobHosts>,
    /// The rank whose batches take longest and the op that makes it so.
    #[serde(skip_serializing_if = "Option::is_none")]
    straggler: Option<&'a Straggler>,
    /// Each op on each rank, a `rank` field on every row (`--by rank`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ops_by_rank: Vec<OpOnRank>,
    /// Each node's statistics, where the logs name two nodes or more.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    nodes: &'a [NodeStats],
    /// Each op on each node, a `node` field on every row (`--by node`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ops_by_node: Vec<OpOnRank>,
    /// Whether training waited for data, and what would help.
    verdict: &'a Verdict,
    per_batch: StreamedRows,
}

/// Several configurations' `lotus.trace-stats-configs/1` document: each
/// as it would be alone, then the study's comparison.
#[derive(Serialize)]
pub struct ConfigsDocument<'a> {
    schema: &'static str,
    outliers: OutlierRule,
    configurations: Vec<LabelledDocument<'a>>,
    comparison: ConfigComparison,
}

#[derive(Serialize)]
struct LabelledDocument<'a> {
    label: &'a str,
    #[serde(flatten)]
    stats: StatsDocument<'a>,
}

/// Every batch, written to the JSON as it is read back from its sort.
struct StreamedRows(RefCell<Option<PerBatchRows>>);

impl Serialize for StreamedRows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = s.serialize_seq(None)?;
        if let Some(rows) = self.0.borrow_mut().take() {
            for row in rows {
                seq.serialize_element(&row.map_err(S::Error::custom)?)?;
            }
        }
        seq.end()
    }
}

impl TraceFigures {
    /// Its JSON document, its batches read from `rows` as it is written.
    pub fn document(&self, rows: Option<PerBatchRows>) -> StatsDocument<'_> {
        StatsDocument {
            schema: STATS_SCHEMA,
            trace: match &self.job {
                Some(_) => self.label.clone(),
                None => self.dir.display().to_string(),
            },
            percentiles: PERCENTILE_METHOD,
            std: "population (divided by n; numpy's ddof=0)",
            warnings: self
                .index
                .warnings
                .shown
                .iter()
                .map(|b| b.to_string())
                .collect(),
            stats: &self.stats,
            ranks: &self.ranks,
            job: self.job.as_ref(),
            straggler: self.straggler.as_ref(),
            ops_by_rank: if self.by_rank {
                lotus_trace::ops_by_rank(&self.ranks)
            } else {
                Vec::new()
            },
            nodes: &self.nodes,
            ops_by_node: if self.by_node {
                lotus_trace::ops_by_node(&self.nodes)
            } else {
                Vec::new()
            },
            verdict: &self.verdict,
            per_batch: StreamedRows(RefCell::new(rows)),
        }
    }
}

impl<'a> ConfigsDocument<'a> {
    /// The document of `configs` (each with the batches its rows give)
    /// under `outliers`, with their `comparison`.
    pub fn new(
        outliers: OutlierRule,
        configs: impl IntoIterator<Item = (&'a TraceFigures, Option<PerBatchRows>)>,
        comparison: ConfigComparison,
    ) -> ConfigsDocument<'a> {
        let configurations = configs
            .into_iter()
            .map(|(c, rows)| LabelledDocument {
                label: &c.label,
                stats: c.document(rows),
            })
            .collect();
        ConfigsDocument {
            schema: CONFIGS_SCHEMA,
            outliers,
            configurations,
            comparison,
        }
    }
}

/// `lotus trace stats --format csv`: one row per op, span kind, and the
/// batch preprocessing, main-process wait and delay summaries, per
/// configuration; times in ms.
pub fn trace_stats_csv(figures: &[&TraceFigures]) -> Result<String, Error> {
    let csv_error = |e: csv::Error| Error::Io(format!("writing CSV: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(lotus_sys::text::csv_record([
        "configuration",
        "section",
        "name",
        "count",
        "total_ms",
        "mean_ms",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "std_ms",
        "min_ms",
        "max_ms",
        "cpu_ms",
        "cpu_mean_ms",
    ]))
    .map_err(csv_error)?;
    let ms = |v: f64| format!("{:.6}", v / 1e6);
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| ms(v as f64));
    for c in figures {
        let s = &c.stats;
        let mut row = |section: &str, name: &str, sum: &Summary, cpu: [String; 2]| {
            let mut rec = vec![
                c.label.clone(),
                section.to_string(),
                name.to_string(),
                sum.count.to_string(),
                ms(sum.total_ns as f64),
                ms(sum.mean_ns),
                ms(sum.p50_ns),
                ms(sum.p95_ns),
                ms(sum.p99_ns),
                ms(sum.std_ns),
                ms(sum.min_ns as f64),
                ms(sum.max_ns as f64),
            ];
            rec.extend(cpu);
            w.write_record(lotus_sys::text::csv_record(&rec))
                .map_err(csv_error)
        };
        for o in &s.ops {
            row(
                "op",
                &o.name,
                &o.summary,
                [opt(o.cpu_ns), opt(o.cpu_per_call_ns)],
            )?;
        }
        for k in &s.kinds {
            row("kind", &k.kind.to_string(), &k.summary, Default::default())?;
        }
        if let Some(sum) = &s.batches.summary {
            row("batches", "preprocessing", sum, Default::default())?;
        }
        if let Some(sum) = &s.wait.summary {
            row("wait", "main process", sum, Default::default())?;
        }
        if let Some(sum) = &s.delay.summary {
            row(
                "delay",
                "preprocessing to consumption",
                sum,
                Default::default(),
            )?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Error::Io(format!("writing CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Io(format!("writing CSV: {e}")))
}
