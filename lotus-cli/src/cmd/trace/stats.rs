//! `lotus trace stats`: per-op figures, batches, waits and delays of one
//! trace or of several configurations, as tables, JSON, CSV or Markdown
//! (see the [module above](super) for the JSON).

use std::cell::RefCell;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_attribute::Verdict;
use lotus_sys::text::{csv_cell, one_line, printable};
use lotus_trace::{op_totals, ConfigComparison, OutlierRule, PerBatchRows, Summary, TraceStats};
use lotus_trace::{RankStats, TraceIndex};
use serde::Serialize;

use lotus_sys::write_file;

use super::tables::{fit_lines, mode_of, render, render_comparison, render_ranks};
use crate::traces::{configurations_of, sampled_attribution, OutliersArg};
use lotus_attribute::TraceFigures;

/// The schema tag of `lotus trace stats --json`.
pub const STATS_SCHEMA: &str = "lotus.trace-stats/2";

/// The schema tag of `lotus trace stats --json` over several
/// configurations.
pub const CONFIGS_SCHEMA: &str = "lotus.trace-stats-configs/1";

/// How percentiles are computed, as the JSON says it.
pub(super) const PERCENTILE_METHOD: &str = "linear interpolation between closest ranks (numpy.percentile's default): rank h = (n-1)*p/100 over the values sorted ascending, x[floor(h)] + (h-floor(h))*(x[floor(h)+1]-x[floor(h)])";

/// `lotus trace stats`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The trace: a folder of logs (searched recursively) or one log file.
    /// Several: one configuration each, reported side by side.
    #[arg(value_name = "DIR", required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Each DIR is a parent folder: each of its sub-folders holding logs is
    /// one configuration (the study's layout, e.g. b128_gpu4/, b256_gpu4/).
    #[arg(long)]
    pub configs: bool,
    /// What to do with outlying batch preprocessing times: `flag` (below
    /// Q1 - 1.5 IQR or above Q3 + 1.5 IQR, listed, kept in the figures) or
    /// `study` (the original study's --remove_outliers: below Q1 - 2 IQR
    /// removed, every batch figure recomputed).
    #[arg(long, value_enum, default_value = "flag")]
    pub outliers: OutliersArg,
    /// Output format: tables (fitted to the width), lotus.trace-stats/2
    /// JSON (lotus.trace-stats-configs/1 for several configurations), CSV
    /// (one row per op, span kind, and the batch, wait and delay
    /// summaries) or Markdown.
    #[arg(long, value_enum, default_value = "table")]
    pub format: StatsFormat,
    /// The same as --format json (kept for scripts).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Also write each op's total time as op,seconds (for `lotus
    /// attribute --op-times`).
    #[arg(long, value_name = "FILE")]
    pub op_times: Option<PathBuf>,
}

/// `lotus trace stats --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    /// Tables fitted to the terminal's width.
    Table,
    /// `lotus.trace-stats/2` JSON.
    Json,
    /// One row per op, span kind and summary.
    Csv,
    /// Markdown tables.
    Md,
}

/// The verdict's lines, wrapped to the terminal's width.
pub(super) fn verdict_text(v: &Verdict) -> String {
    printable(&crate::render::verdict::text(
        v,
        Some(crate::render::table::width()),
    ))
    .into_owned()
}

#[derive(Serialize)]
pub(super) struct StatsJson<'a> {
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

/// Several configurations, each as it would be alone, then the study's
/// comparison.
#[derive(Serialize)]
pub(super) struct ConfigsJson<'a> {
    schema: &'static str,
    outliers: OutlierRule,
    configurations: Vec<LabelledJson<'a>>,
    comparison: ConfigComparison,
}

#[derive(Serialize)]
pub(super) struct LabelledJson<'a> {
    label: &'a str,
    #[serde(flatten)]
    stats: StatsJson<'a>,
}

/// Every batch, written to the JSON as it is read back from its sort.
pub(super) struct StreamedRows(RefCell<Option<PerBatchRows>>);

impl Serialize for StreamedRows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
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

/// The configurations `args` names: each DIR, or with `--configs` each
/// sub-folder of each DIR that holds logs.
pub(super) fn configurations(args: &StatsArgs) -> Result<Vec<(String, PathBuf)>> {
    configurations_of(&args.dirs, args.configs)
}

/// The JSON of one configuration, its batches read from `rows`.
pub(super) fn stats_json(c: &TraceFigures, rows: Option<PerBatchRows>) -> StatsJson<'_> {
    StatsJson {
        schema: STATS_SCHEMA,
        trace: c.dir.display().to_string(),
        percentiles: PERCENTILE_METHOD,
        std: "population (divided by n; numpy's ddof=0)",
        warnings: c
            .index
            .warnings
            .shown
            .iter()
            .map(|b| b.to_string())
            .collect(),
        stats: &c.stats,
        ranks: &c.ranks,
        verdict: &c.verdict,
        per_batch: StreamedRows(RefCell::new(rows)),
    }
}

pub(super) fn write_json(value: &impl Serialize) -> Result<()> {
    let mut stdout = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    serde_json::to_writer_pretty(&mut stdout, value)
        .map_err(anyhow::Error::from)
        .and_then(|()| Ok(writeln!(stdout)?))
        .and_then(|()| Ok(stdout.flush()?))
        .context("cannot write the statistics")
}

pub(super) fn stats(args: StatsArgs) -> Result<ExitCode> {
    let rule = OutlierRule::from(args.outliers);
    let configs = configurations(&args)?;
    let several = args.configs || configs.len() > 1;
    if several && args.op_times.is_some() {
        return Err(crate::usage::usage("--op-times takes one trace, not several configurations: run `lotus trace stats DIR --op-times FILE` for each"));
    }
    let mut computed = Vec::new();
    for (label, dir) in configs {
        computed.push(crate::traces::computed(label, dir, rule)?);
    }
    if let (Some(path), [one]) = (&args.op_times, computed.as_slice()) {
        write_op_times(path, &one.index)?;
    }
    if !several {
        let mut one = computed.pop().context("no trace")?;
        // A sampled trace: the verdict gets its CPU facts, and what ran
        // outside every op is said.
        let attribution = sampled_attribution(&one.dir, "lotus");
        let unseen: Vec<String> = attribution
            .iter()
            .flat_map(|a| a.unseen.iter().map(|u| u.message()))
            .collect();
        if let Some(a) = &attribution {
            one.with_samples(a);
        }
        if args.json {
            let rows = one.rows.take();
            write_json(&stats_json(&one, rows))?;
            for note in &unseen {
                crate::usage::say!("lotus: note: {note}");
            }
        } else if args.format == StatsFormat::Csv {
            print!("{}", stats_csv(&[&one])?);
            for note in &unseen {
                crate::usage::say!("lotus: note: {note}");
            }
        } else {
            let mode = mode_of(args.format);
            let mut text = verdict_text(&one.verdict);
            text += &render(&one.dir, &one.folder, &one.stats, mode);
            text += &printable(&render_ranks(&one.ranks, mode));
            for note in &unseen {
                text += &format!("{}\n", printable(&format!("note: {note}")));
            }
            print!("{}", fit_lines(&text, mode));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let comparison = ConfigComparison::of(
        &computed
            .iter()
            .map(|c| (c.label.as_str(), &c.stats.batches))
            .collect::<Vec<_>>(),
    );
    if args.json {
        let rows: Vec<Option<PerBatchRows>> = computed.iter_mut().map(|c| c.rows.take()).collect();
        let configurations = computed
            .iter()
            .zip(rows)
            .map(|(c, rows)| LabelledJson {
                label: &c.label,
                stats: stats_json(c, rows),
            })
            .collect();
        write_json(&ConfigsJson {
            schema: CONFIGS_SCHEMA,
            outliers: rule,
            configurations,
            comparison,
        })?;
    } else if args.format == StatsFormat::Csv {
        print!("{}", stats_csv(&computed.iter().collect::<Vec<_>>())?);
    } else {
        let mode = mode_of(args.format);
        let mut text = String::new();
        for c in &computed {
            text += &format!("=== Configuration {} ===\n", one_line(&c.label));
            text += &verdict_text(&c.verdict);
            text += &render(&c.dir, &c.folder, &c.stats, mode);
            text += &printable(&render_ranks(&c.ranks, mode));
            text.push('\n');
        }
        text += &printable(&render_comparison(&comparison, rule, mode));
        print!("{}", fit_lines(&text, mode));
    }
    Ok(ExitCode::SUCCESS)
}

/// `trace stats --format csv`: one row per op, span kind, and the batch
/// preprocessing, main-process wait and delay summaries, per
/// configuration; times in ms.
pub(super) fn stats_csv(computed: &[&TraceFigures]) -> Result<String> {
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
    ]))?;
    let ms = |v: f64| format!("{:.6}", v / 1e6);
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| ms(v as f64));
    for c in computed {
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
    Ok(String::from_utf8(w.into_inner().context("writing CSV")?)?)
}

/// Writes each op's total time as `op,seconds`.
pub(super) fn write_op_times(path: &Path, index: &TraceIndex) -> Result<()> {
    let mut text = String::from("op,seconds\n");
    let totals = op_totals(index);
    if totals.is_empty() {
        bail!(
            "--op-times {}: the trace has no op events (lines of kind op, such as SLoader or S<Transform>)",
            path.display()
        );
    }
    for (op, ns) in &totals {
        // Op names may hold commas or quotes (a transform's repr): quote
        // them as CSV does; one a spreadsheet would run as a formula gets
        // a leading `'`.
        let op = csv_cell(op);
        let name = if op.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", op.replace('"', "\"\""))
        } else {
            op.to_string()
        };
        text += &format!("{name},{:.9}\n", *ns as f64 / 1e9);
    }
    write_file(path, text.as_bytes())?;
    crate::usage::note!("lotus: wrote {} ({} op(s))", path.display(), totals.len());
    Ok(())
}
