//! What `lotus trace stats` writes of a configuration's figures
//! ([`TraceFigures`]): its JSON (`lotus.trace-stats/2`, and
//! `lotus.trace-stats-configs/1` for several configurations side by
//! side) and its CSV (one row per op, span kind and summary).

use std::cell::RefCell;

use lotus_trace::{ConfigComparison, OutlierRule, PerBatchRows, RankStats, Summary, TraceStats};
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
/// ([`TraceFigures::document`]).
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
            trace: self.dir.display().to_string(),
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
