//! The tables of `lotus trace stats` (terminal, fitted to the width, or
//! Markdown).

use std::path::Path;

use lotus_attribute::TraceFigures;
use lotus_sys::text::{one_line, printable};
use lotus_trace::{ConfigComparison, OutlierRule, Summary, TraceFolder, TraceStats, WaitBucket};

use super::stats::StatsFormat;

/// How a table is written: for the terminal, fitted to a width, or as
/// Markdown.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    Terminal(usize),
    Markdown,
}

/// `header` and `rows` as a table: its first `left` columns aligned
/// left, the others (numbers) right; ends with a newline.
pub(super) fn emit(mode: Mode, header: &[&str], left: usize, rows: Vec<Vec<String>>) -> String {
    match mode {
        Mode::Terminal(width) => {
            let columns = header
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    if i < left {
                        crate::render::table::Column::left(h)
                    } else {
                        crate::render::table::Column::right(h)
                    }
                })
                .collect();
            crate::render::table::Grid::new(columns, rows).render(Some(width))
        }
        Mode::Markdown => {
            let cell = |c: &str| one_line(c).replace('|', "\\|");
            let mut out = format!(
                "\n| {} |\n|{}\n",
                header
                    .iter()
                    .map(|h| cell(h))
                    .collect::<Vec<_>>()
                    .join(" | "),
                (0..header.len())
                    .map(|i| if i < left { "---|" } else { "---:|" })
                    .collect::<String>()
            );
            for r in rows {
                out += &format!(
                    "| {} |\n",
                    r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                );
            }
            out.push('\n');
            out
        }
    }
}

/// The table mode of `format` (tables and Markdown).
pub(super) fn mode_of(format: StatsFormat) -> Mode {
    match format {
        StatsFormat::Md => Mode::Markdown,
        _ => Mode::Terminal(crate::render::table::width()),
    }
}

/// The text's lines wrapped to the width on a terminal (the tables fit
/// it already); Markdown as it is.
pub(super) fn fit_lines(text: &str, mode: Mode) -> String {
    match mode {
        Mode::Terminal(width) => crate::render::table::wrap_lines(text, width),
        Mode::Markdown => text.to_string(),
    }
}

/// The study's comparison of configurations, as a table.
pub(super) fn render_comparison(c: &ConfigComparison, rule: OutlierRule, mode: Mode) -> String {
    let mut out = format!(
        "Configurations compared (batch preprocessing time; outliers: {})\n",
        rule.describe()
    );
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), ms);
    let ratio = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
    let rows = c
        .configurations
        .iter()
        .map(|r| {
            vec![
                one_line(&r.label).into_owned(),
                r.batches.to_string(),
                opt(r.p50_ns),
                opt(r.iqr_ns),
                opt(r.std_ns),
                ratio(r.iqr_normalized),
                ratio(r.std_normalized),
            ]
        })
        .collect();
    out += &emit(
        mode,
        &[
            "configuration",
            "batches",
            "p50 ms",
            "IQR ms",
            "std ms",
            "IQR / smallest",
            "std / smallest",
        ],
        1,
        rows,
    );
    out += &format!(
        "\nMaximum normalized IQR across configurations: {}\nMaximum normalized standard deviation across configurations: {}\n",
        c.max_normalized_iqr.map_or("-".to_string(), |r| format!("{r:.2}x")),
        c.max_normalized_std.map_or("-".to_string(), |r| format!("{r:.2}x")),
    );
    if c.max_normalized_iqr.is_none() || c.max_normalized_std.is_none() {
        out += "  (-: the smallest figure is 0, or no configuration has batches: no ratio; the study's script would divide by 0)\n";
    }
    out
}

pub(super) fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

pub(super) fn summary_cells(s: &Summary) -> Vec<String> {
    vec![
        s.count.to_string(),
        ms(s.total_ns as f64),
        ms(s.mean_ns),
        ms(s.p50_ns),
        ms(s.p95_ns),
        ms(s.p99_ns),
        ms(s.std_ns),
    ]
}

pub(super) const SUMMARY_HEADER: [&str; 7] = ["count", "total", "mean", "p50", "p95", "p99", "std"];

/// The terminal report: names from the trace (ops, the folder) on one
/// line each, control characters escaped.
pub(super) fn render(dir: &Path, folder: &TraceFolder, s: &TraceStats, mode: Mode) -> String {
    printable(&render_raw(dir, folder, s, mode)).into_owned()
}

pub(super) fn render_raw(dir: &Path, folder: &TraceFolder, s: &TraceStats, mode: Mode) -> String {
    let mains = s.processes.iter().filter(|p| p.role == "main").count();
    let mut out = format!(
        "lotus trace stats: {}\n{} event(s) from {} process(es) ({mains} main, {} worker) in {} file(s)",
        dir.display(),
        s.events,
        s.processes.len(),
        s.processes.len() - mains,
        folder.logs.len()
    );
    if s.bad_lines > 0 {
        out += &format!("; {} bad line(s) skipped", s.bad_lines);
    }
    out += "\nTimes in ms; percentiles by linear interpolation (numpy's default), std over the population.\n";

    out += &span_tables(s, mode);
    out += &batches(s);
    out += &waits(s, mode);
    out += &delays(s);
    out
}

/// The per-op table (with the spans' own CPU where the trace has it)
/// and the other spans' per kind.
fn span_tables(s: &TraceStats, mode: Mode) -> String {
    let mut out = String::new();
    if !s.ops.is_empty() {
        out += "\nOps\n";
        let mut h = vec!["op"];
        h.extend(SUMMARY_HEADER);
        // The spans' own-thread CPU (`cpu=`), where the tracer wrote it.
        let with_cpu = s.ops.iter().any(|o| o.cpu_ns.is_some());
        if with_cpu {
            h.extend(["cpu", "cpu mean"]);
        }
        let rows = s
            .ops
            .iter()
            .map(|o| {
                let mut row = vec![one_line(&o.name).into_owned()];
                row.extend(summary_cells(&o.summary));
                if with_cpu {
                    let cell = |v: Option<u64>| v.map_or(String::new(), |v| ms(v as f64));
                    row.extend([cell(o.cpu_ns), cell(o.cpu_per_call_ns)]);
                }
                row
            })
            .collect();
        out += &emit(mode, &h, 1, rows);
        if with_cpu {
            out += "cpu: the spans' own thread's CPU time (an op's includes the ops run inside it); empty where a span of the op does not say it\n";
        }
    }
    if !s.kinds.is_empty() {
        out += "\nOther spans, per kind\n";
        let mut h = vec!["kind"];
        h.extend(SUMMARY_HEADER);
        let rows = s
            .kinds
            .iter()
            .map(|k| {
                let mut row = vec![k.kind.to_string()];
                row.extend(summary_cells(&k.summary));
                row
            })
            .collect();
        out += &emit(mode, &h, 1, rows);
    }
    out
}

/// Batch preprocessing: its figures, outlier rule and outliers.
fn batches(s: &TraceStats) -> String {
    let mut out = String::new();
    let b = &s.batches;
    match &b.summary {
        Some(sum) => {
            out += &format!(
                "\nBatch preprocessing: {} batch(es), mean {} ms, p50 {}, p95 {}, p99 {}, std {}, min {}, max {}\n",
                sum.count,
                ms(sum.mean_ns),
                ms(sum.p50_ns),
                ms(sum.p95_ns),
                ms(sum.p99_ns),
                ms(sum.std_ns),
                ms(sum.min_ns as f64),
                ms(sum.max_ns as f64)
            );
            out += &format!("  Outliers: {}\n", b.outlier_rule.describe());
            if let (Some(q1), Some(q3), Some(lo), Some(hi)) =
                (b.q1_ns, b.q3_ns, b.low_fence_ns, b.high_fence_ns)
            {
                out += &format!(
                    "  IQR rule: Q1 {} ms, Q3 {} ms; outliers below {} ms or above {} ms: {}\n",
                    ms(q1),
                    ms(q3),
                    ms(lo),
                    ms(hi),
                    b.outliers.len()
                );
            }
            if let (Some(before), Some(lo)) = (&b.before_removal, b.low_fence_ns) {
                out += &format!(
                    "  Before removal: {} batch(es), Q1 {} ms, Q3 {} ms, mean {} ms, std {} ms; removed below {} ms: {}\n  Q1 {} ms, Q3 {} ms, IQR {} ms of the batches kept\n",
                    before.summary.count,
                    ms(before.q1_ns),
                    ms(before.q3_ns),
                    ms(before.summary.mean_ns),
                    ms(before.summary.std_ns),
                    ms(lo),
                    b.outliers.len(),
                    b.q1_ns.map_or("-".to_string(), ms),
                    b.q3_ns.map_or("-".to_string(), ms),
                    b.iqr_ns.map_or("-".to_string(), ms),
                );
            }
            for o in &b.outliers {
                let id = o.batch.map_or("?".to_string(), |b| b.to_string());
                out += &format!(
                    "    batch {id} (worker {}): {} ms ({}{})\n",
                    o.pid,
                    ms(o.dur_ns as f64),
                    o.side,
                    if o.removed { ", removed" } else { "" }
                );
            }
        }
        None if !b.outliers.is_empty() => {
            out += &format!(
                "\nBatch preprocessing: all {} batch(es) removed as outliers ({})\n",
                b.outliers.len(),
                b.outlier_rule.describe()
            )
        }
        None => out += "\nBatch preprocessing: no batch events\n",
    }
    out
}

/// The main process's waits per batch, by bucket.
fn waits(s: &TraceStats, mode: Mode) -> String {
    let mut out = String::new();
    match &s.wait.summary {
        Some(sum) => {
            out += &format!(
                "\nMain-process wait per batch: {} wait(s), total {} ms, mean {}, p50 {}, p95 {}, p99 {}\n",
                sum.count,
                ms(sum.total_ns as f64),
                ms(sum.mean_ns),
                ms(sum.p50_ns),
                ms(sum.p95_ns),
                ms(sum.p99_ns)
            );
            let rows = s
                .wait
                .buckets
                .iter()
                .map(|row| {
                    vec![
                        WaitBucket::label(row.bucket).to_string(),
                        row.count.to_string(),
                        format!("{:.1}%", 100.0 * row.share),
                        ms(row.total_ns as f64),
                    ]
                })
                .collect();
            out += &emit(mode, &["wait", "batches", "share", "total ms"], 1, rows);
        }
        None => out += "\nMain-process wait: no wait events\n",
    }
    out
}

/// The delay from preprocessing to consumption.
fn delays(s: &TraceStats) -> String {
    let mut out = String::new();
    let d = &s.delay;
    match &d.summary {
        Some(sum) => {
            out += &format!(
                "\nDelay from end of preprocessing to consumption: {} batch(es), mean {} ms, p50 {}, p95 {}, p99 {}, min {}, max {}\n",
                sum.count,
                ms(sum.mean_ns),
                ms(sum.p50_ns),
                ms(sum.p95_ns),
                ms(sum.p99_ns),
                ms(sum.min_ns as f64),
                ms(sum.max_ns as f64)
            );
            let pct = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.2}%", 100.0 * s));
            out += &format!(
                "  {} under 250 ms ({}), {} over 500 ms ({})\n",
                pct(d.under_250ms_share),
                d.under_250ms,
                pct(d.over_500ms_share),
                d.over_500ms
            );
        }
        None => out += "\nDelay to consumption: no batch matched a consumption\n",
    }
    if d.unconsumed > 0 || d.consumed_without_batch > 0 {
        out += &format!(
            "  {} batch(es) never consumed; {} consumption(s) without a preprocessed batch\n",
            d.unconsumed, d.consumed_without_batch
        );
    }
    out
}

/// The per-rank table: one row per rank of a distributed job (nothing
/// when no log names a rank).
/// Each rank's figures, the straggler where there is one, and with
/// `--by rank` each op on each rank.
pub(super) fn render_ranks(figures: &TraceFigures, mode: Mode) -> String {
    let ranks = &figures.ranks;
    if ranks.is_empty() {
        return render_nodes(figures, mode);
    }
    let mut out = format!(
        "\nPer rank ({} rank(s); `--format json` gives each rank's full statistics under \"ranks\")\n",
        ranks.len()
    );
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), ms);
    let rows = ranks
        .iter()
        .map(|r| {
            let s = &r.stats;
            let mains = s.processes.iter().filter(|p| p.role == "main").count();
            let b = s.batches.summary.as_ref();
            let w = s.wait.summary.as_ref();
            vec![
                r.rank.to_string(),
                if r.hosts.is_empty() {
                    "-".to_string()
                } else {
                    one_line(&r.hosts.join(" ")).into_owned()
                },
                format!("{mains} main, {} worker", s.processes.len() - mains),
                s.events.to_string(),
                b.map_or(0, |b| b.count).to_string(),
                opt(b.map(|b| b.mean_ns)),
                opt(b.map(|b| b.p50_ns)),
                opt(b.map(|b| b.p95_ns)),
                w.map_or(0, |w| w.count).to_string(),
                opt(w.map(|w| w.total_ns as f64)),
                opt(w.map(|w| w.p95_ns)),
                opt(s.delay.summary.as_ref().map(|d| d.p50_ns)),
            ]
        })
        .collect();
    out += &emit(
        mode,
        &[
            "rank",
            "host",
            "processes",
            "events",
            "batches",
            "batch mean",
            "batch p50",
            "batch p95",
            "waits",
            "wait total",
            "wait p95",
            "delay p50",
        ],
        2,
        rows,
    );
    if let Some(s) = &figures.straggler {
        out += &format!("\n{}\n", s.sentence(ms));
    } else if ranks.len() > 1 {
        out += &format!(
            "\nNo input straggler: no rank's median batch takes {}x the others' or more.\n",
            lotus_trace::STRAGGLER_RATIO
        );
    }
    if figures.by_rank {
        out += &ops_table("rank", lotus_trace::ops_by_rank(ranks), mode);
    }
    out + &render_nodes(figures, mode)
}

/// The nodes' count, and with `--by node` each op on each node.
fn render_nodes(figures: &TraceFigures, mode: Mode) -> String {
    match (figures.nodes.len(), figures.by_node) {
        (0, _) => String::new(),
        (n, false) => format!("\n{n} nodes (`--by node`: each op on each node)\n"),
        (_, true) => ops_table("node", lotus_trace::ops_by_node(&figures.nodes), mode),
    }
}

/// Each op in each group (`rank` or `node`).
fn ops_table(group: &str, ops: Vec<lotus_trace::OpOnRank>, mode: Mode) -> String {
    let rows = ops.into_iter().map(|o| {
        let per = o.per_batch_ns.map_or_else(|| "-".to_string(), ms);
        let cpu = o.cpu_ns.map_or_else(|| "-".to_string(), |c| ms(c as f64));
        let key = o.rank.map(|r| r.to_string()).or(o.node).unwrap_or_default();
        let total = ms(o.total_ns as f64);
        vec![
            o.op,
            key,
            o.hosts.join(" "),
            o.calls.to_string(),
            total,
            per,
            cpu,
        ]
    });
    let header = ["op", group, "host", "calls", "total", "per batch", "cpu"];
    format!("\nEach op on each {group}\n") + &emit(mode, &header, 3, rows.collect())
}
