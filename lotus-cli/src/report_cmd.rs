//! `lotus report`: one self-contained HTML page of what a run produced:
//! trace folders (one configuration each, or `--configs PARENT`), and a
//! mapping with profiles attributed to its ops and functions.
//!
//! ```text
//! lotus report --out report.html [--trace DIR ...] [--configs] [--outliers flag|study]
//!              [--mapping M [--profile P ... [--op-times T]] [--against OTHER]]
//!              [--prefix lotus] [--plot-dir DIR]
//! ```
//!
//! The page needs no network: its CSS is inline, its plots are inline SVG
//! (drawn with plotters, [`crate::plots`]), and it has no script. It
//! holds, per configuration, the per-op table and the op-time plot, the
//! batch preprocessing time box plots, the wait buckets and delay shares,
//! box plots of every wait and delay;
//! per profile, each op's time and hardware metrics (CPI, top-down) and
//! each op's native functions; and the `lotus trace view` command that
//! makes the Perfetto timeline. For a sampled trace folder (`trace run
//! --sample`), the in-pipeline attribution of its samples, and, with
//! `--mapping`, the mapping compared with the in-pipeline one (built from
//! the samples, or `--against`): [`crate::report_samples`]. Each figure shown carries `data-key` with
//! what it is, so that a test (or a script) can check the page against
//! `lotus trace stats --json` and `lotus attribute --format json`. With
//! `--plot-dir`, each plot is also written there as an SVG file.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_core::attribute::{
    Attribution, FunctionAttribution, FunctionMapping, MatchMode, Options,
};
use lotus_core::spill::Budget;
use lotus_core::trace::stats::{ConfigComparison, OutlierRule};

use crate::attribute_cmd::{
    load_mapping, load_op_times, load_profile, name_profiles, LoadedProfile,
};
use crate::plots::{box_plot, grouped_bars, Colours};
use crate::report_samples::{
    attribute, compare, comparison_section, in_pipeline_section, op_names, Sampled,
};
use crate::trace_cmd::{configurations_of, Computed, OutliersArg};
use lotus_map::write::write_atomic;

/// `lotus report --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A self-contained HTML page.
    Html,
}

/// `lotus report`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Where to write the page (`-`: standard output).
    #[arg(long, short, value_name = "FILE.html")]
    pub out: PathBuf,
    /// Output format: one self-contained HTML page (its one format, named
    /// so scripts can ask for it as for every other command's data).
    #[arg(long, value_enum, default_value = "html")]
    pub format: ReportFormat,
    /// A trace folder: one configuration (repeat for several).
    #[arg(long = "trace", value_name = "DIR")]
    pub traces: Vec<PathBuf>,
    /// Each --trace is a parent folder of configurations (sub-folders).
    #[arg(long)]
    pub configs: bool,
    /// The outlier rule of batch preprocessing time (as `trace stats`).
    #[arg(long, value_enum, default_value = "flag")]
    pub outliers: OutliersArg,
    /// A mapping, to attribute --profile to its ops and functions.
    #[arg(long, short, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// A whole-pipeline profile (needs --mapping; repeat for several).
    #[arg(long = "profile", short, value_name = "FILE")]
    pub profiles: Vec<PathBuf>,
    /// The ops' own times for shared functions (as `attribute`).
    #[arg(long, value_name = "CSV|DIR")]
    pub op_times: Option<PathBuf>,
    /// The in-pipeline mapping to compare --mapping with (as `lotus show
    /// MAPPING --against OTHER`); without it, each sampled trace's own,
    /// built from its samples (as `lotus map --from-trace DIR`).
    #[arg(long, value_name = "OTHER", requires = "mapping")]
    pub against: Option<PathBuf>,
    /// The samples' prefix in each trace folder (as `trace run --prefix`).
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
    /// Also write each plot as an SVG file into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot_dir: Option<PathBuf>,
}

/// HTML-escaped text; control characters but line breaks and tabs (which
/// HTML cannot show, and which would reach a terminal the page is printed
/// to) shown escaped as `\x1b` ([`lotus_core::text::printable`]).
pub(crate) fn esc(s: &str) -> String {
    lotus_core::text::printable(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number cell: ms with 3 decimals (`ns` given), keyed.
fn ms_cell(key: &str, ns: f64) -> String {
    format!("<td data-key=\"{}\">{:.3}</td>", esc(key), ns / 1e6)
}

/// A number cell as given, keyed.
pub(crate) fn cell(key: &str, text: String) -> String {
    format!("<td data-key=\"{}\">{}</td>", esc(key), esc(&text))
}

const CSS: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
td:first-child,th:first-child,td.names{text-align:left}td:first-child{max-width:520px;overflow-wrap:anywhere}th{background:#f0f0f0}figure{margin:12px 0;overflow-x:auto}\
figcaption{font-size:13px;color:#555}code{background:#f4f4f4;padding:1px 4px}h2{border-bottom:2px solid #ddd}";

/// The page being written, and its plots in order: (file name, SVG).
pub(crate) struct Page {
    /// The page so far.
    pub(crate) html: String,
    plots: Vec<(String, String)>,
}

impl Page {
    /// Adds a plot (`name`: its `data-plot` and file name) with its caption.
    pub(crate) fn plot(&mut self, name: &str, caption: &str, svg: String) {
        let _ = writeln!(
            self.html,
            "<figure data-plot=\"{name}\">{svg}<figcaption>{}</figcaption></figure>",
            esc(caption)
        );
        self.plots.push((format!("{name}.svg"), svg));
    }
}

/// Runs `lotus report`.
pub fn run(args: ReportArgs) -> Result<ExitCode> {
    if args.traces.is_empty() && args.profiles.is_empty() && args.against.is_none() {
        bail!(
            "nothing to report: give --trace DIR (a trace folder) and/or --mapping M --profile P (or --against OTHER)"
        );
    }
    if !args.profiles.is_empty() && args.mapping.is_none() {
        bail!("--profile needs --mapping (the ops and functions to attribute it to)");
    }
    let rule = OutlierRule::from(args.outliers);
    let mut configs = Vec::new();
    if !args.traces.is_empty() {
        for (label, dir) in configurations_of(&args.traces, args.configs)? {
            configs.push(Computed::of(label, dir, rule)?);
        }
    }
    let budget = Budget::from_env()?;
    let mut sampled = Vec::new();
    for c in &configs {
        sampled.push((c.label.clone(), attribute(&c.dir, &args.prefix, budget)?));
    }
    // Attribution: per op and per function of each profile.
    let mut attributed: Vec<(LoadedProfile, Attribution, FunctionAttribution)> = Vec::new();
    let mut compared = Vec::new();
    if let Some(mpath) = &args.mapping {
        let mapping = load_mapping(mpath)?;
        let with_samples: Vec<(String, PathBuf)> = configs
            .iter()
            .zip(&sampled)
            .filter(|(_, (_, s))| matches!(s, Sampled::With(_)))
            .map(|(c, _)| (c.label.clone(), c.dir.clone()))
            .collect();
        compared = compare(
            &mapping,
            args.against.as_deref(),
            &with_samples,
            &args.prefix,
            budget,
        )?;
        let op_times = args.op_times.as_deref().map(load_op_times).transpose()?;
        let options = Options::new(MatchMode::Auto, op_times);
        let functions = FunctionMapping::of(&mapping, &options);
        let name = mpath.display().to_string();
        let mut profiles = Vec::new();
        let mut rest = Vec::new();
        for p in &args.profiles {
            let (lp, a, f) = load_profile(p, &mapping, &options, &name, Some(&functions))?;
            profiles.push(lp);
            let f = f.context("the per-function attribution was not made")?;
            rest.push((a, f));
        }
        name_profiles(&mut profiles);
        attributed = profiles
            .into_iter()
            .zip(rest)
            .map(|(p, (a, f))| (p, a, f))
            .collect();
    }

    // Every op name, for colours that stay the same from plot to plot.
    let mut names: Vec<String> = Vec::new();
    for c in &configs {
        names.extend(c.stats.ops.iter().map(|o| o.name.clone()));
    }
    for (_, a, _) in &attributed {
        names.extend(a.ops.iter().map(|o| o.op.clone()));
    }
    names.extend(op_names(&sampled, &compared).map(str::to_string));
    let colours = Colours::new(names.iter().map(String::as_str));

    let mut page = Page {
        html: String::new(),
        plots: Vec::new(),
    };
    let _ = write!(
        page.html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lotus report</title><style>{CSS}</style></head><body>\n<h1>lotus report</h1>\n<p>Made by lotus {}. Times in ms unless said; percentiles by linear interpolation (numpy's default), std over the population. Outliers: {}.</p>\n",
        env!("CARGO_PKG_VERSION"),
        esc(rule.describe())
    );
    if !configs.is_empty() {
        traces(&mut page, &mut configs, &colours, rule)?;
    }
    if sampled.iter().any(|(_, s)| !matches!(s, Sampled::Not)) {
        in_pipeline_section(&mut page, &sampled, &colours)?;
    }
    if let (Some(mpath), false) = (&args.mapping, compared.is_empty()) {
        comparison_section(&mut page, &mpath.display().to_string(), &compared, &colours)?;
    }
    if !attributed.is_empty() {
        attribution(&mut page, &attributed, &colours)?;
    }
    page.html += "</body></html>\n";
    let ReportFormat::Html = args.format;
    let to_stdout = crate::usage::is_stdout(&args.out);
    if to_stdout {
        print!("{}", page.html);
    } else {
        write_atomic(&args.out, &page.html)?;
    }
    if let Some(dir) = &args.plot_dir {
        lotus_sys::create_dir_all(dir, 0o777)
            .map_err(|e| anyhow::anyhow!("--plot-dir {}: {e}", dir.display()))?;
        for (name, svg) in &page.plots {
            write_atomic(&dir.join(name), svg)?;
        }
    }
    crate::usage::note!(
        "lotus: wrote {} ({} configuration(s), {} profile(s), {} plot(s){})",
        if to_stdout {
            "the page".to_string()
        } else {
            args.out.display().to_string()
        },
        configs.len(),
        attributed.len(),
        page.plots.len(),
        args.plot_dir
            .as_ref()
            .map_or(String::new(), |d| format!("; SVG files in {}", d.display()))
    );
    Ok(ExitCode::SUCCESS)
}

/// The trace sections: ops, batches, waits, delays, per configuration.
fn traces(
    page: &mut Page,
    configs: &mut [Computed],
    colours: &Colours,
    rule: OutlierRule,
) -> Result<()> {
    let labels: Vec<String> = configs.iter().map(|c| c.label.clone()).collect();
    page.html += "<h2>Traces</h2>\n<p>The timeline of each: <code>lotus trace view DIR --out trace.json</code>, then open trace.json in the Perfetto UI (ui.perfetto.dev) or chrome://tracing:</p><ul>\n";
    for c in configs.iter() {
        let _ = writeln!(
            page.html,
            "<li>{}: <code>lotus trace view {} --out {}_trace.json</code></li>",
            esc(&c.label),
            esc(&c.dir.display().to_string()),
            esc(&c.label)
        );
    }
    page.html += "</ul>\n<h3>Ops</h3>\n";
    for c in configs.iter() {
        let _ = writeln!(
            page.html,
            "<h4>{}</h4><table><tr><th>op</th><th>count</th><th>total</th><th>mean</th><th>p50</th><th>p95</th><th>std</th></tr>",
            esc(&c.label)
        );
        for o in &c.stats.ops {
            let k = |f: &str| format!("trace/{}/ops/{}/{f}", c.label, o.name);
            let s = &o.summary;
            let _ = writeln!(
                page.html,
                "<tr><td>{}</td>{}{}{}{}{}{}</tr>",
                esc(&o.name),
                cell(&k("count"), s.count.to_string()),
                ms_cell(&k("total_ns"), s.total_ns as f64),
                ms_cell(&k("mean_ns"), s.mean_ns),
                ms_cell(&k("p50_ns"), s.p50_ns),
                ms_cell(&k("p95_ns"), s.p95_ns),
                ms_cell(&k("std_ns"), s.std_ns),
            );
        }
        page.html += "</table>\n";
    }
    let mut ops: Vec<String> = configs
        .iter()
        .flat_map(|c| c.stats.ops.iter().map(|o| o.name.clone()))
        .collect();
    ops.sort();
    ops.dedup();
    let series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = configs
                .iter()
                .map(|c| {
                    c.stats
                        .ops
                        .iter()
                        .find(|o| &o.name == op)
                        .map_or(0.0, |o| o.summary.total_ns as f64 / 1e6)
                })
                .collect();
            (op.clone(), v)
        })
        .collect();
    if !series.is_empty() {
        let svg = grouped_bars(
            "Elapsed time per op, per configuration",
            "total time (ms)",
            &labels,
            &series,
            colours,
        )?;
        page.plot(
            "op_time",
            "Total time of each op (all processes) per configuration.",
            svg,
        );
    }

    page.html += "<h3>Batch preprocessing time</h3>\n<table><tr><th>configuration</th><th>batches</th><th>mean</th><th>p50</th><th>Q1</th><th>Q3</th><th>std</th><th>min</th><th>max</th><th>outliers</th></tr>\n";
    let mut boxes = Vec::new();
    for c in configs.iter() {
        let b = &c.stats.batches;
        let k = |f: &str| format!("trace/{}/batches/{f}", c.label);
        if let (Some(s), Some(q1), Some(q3)) = (&b.summary, b.q1_ns, b.q3_ns) {
            let _ = writeln!(
                page.html,
                "<tr><td>{}</td>{}{}{}{}{}{}{}{}{}</tr>",
                esc(&c.label),
                cell(&k("count"), s.count.to_string()),
                ms_cell(&k("mean_ns"), s.mean_ns),
                ms_cell(&k("p50_ns"), s.p50_ns),
                ms_cell(&k("q1_ns"), q1),
                ms_cell(&k("q3_ns"), q3),
                ms_cell(&k("std_ns"), s.std_ns),
                ms_cell(&k("min_ns"), s.min_ns as f64),
                ms_cell(&k("max_ns"), s.max_ns as f64),
                cell(&k("outliers"), b.outliers.len().to_string()),
            );
            boxes.push((
                c.label.clone(),
                [s.min_ns as f64, q1, s.p50_ns, q3, s.max_ns as f64].map(|v| v / 1e6),
            ));
        }
    }
    page.html += "</table>\n";
    if configs.len() > 1 {
        let cmp = ConfigComparison::of(
            &configs
                .iter()
                .map(|c| (c.label.as_str(), &c.stats.batches))
                .collect::<Vec<_>>(),
        );
        let ratio = |v: Option<f64>| {
            v.map_or("- (the smallest is 0: no ratio)".to_string(), |r| {
                format!("{r:.2}x")
            })
        };
        let _ = writeln!(
            page.html,
            "<p>Across configurations (the study's comparison): maximum normalized IQR <span data-key=\"trace/comparison/max_normalized_iqr\">{}</span>, maximum normalized standard deviation <span data-key=\"trace/comparison/max_normalized_std\">{}</span>.</p>",
            ratio(cmp.max_normalized_iqr),
            ratio(cmp.max_normalized_std)
        );
    }
    if !boxes.is_empty() {
        let svg = box_plot(
            &format!("Batch preprocessing time (outliers: {})", rule.as_str()),
            "preprocessing time per batch (ms)",
            &boxes,
        )?;
        page.plot(
            "batch_time",
            "Box: Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }

    page.html += "<h3>Waits and delays</h3>\n<table><tr><th>configuration</th><th>waits</th><th>none</th><th>&lt; 1 ms</th><th>1 ms - 500 ms</th><th>&gt; 500 ms</th><th>delays</th><th>delay p50</th><th>delay p95</th><th>&lt; 250 ms</th><th>&gt; 500 ms</th></tr>\n";
    let bucket_names: Vec<String> = lotus_core::trace::stats::WaitBucket::ALL
        .iter()
        .map(|b| b.label().to_string())
        .collect();
    let mut wait_series: Vec<(String, Vec<f64>)> = bucket_names
        .iter()
        .map(|n| (n.clone(), Vec::new()))
        .collect();
    let delay_names = ["delay < 250 ms", "delay 250 - 500 ms", "delay > 500 ms"];
    let mut delay_series: Vec<(String, Vec<f64>)> = delay_names
        .iter()
        .map(|n| (n.to_string(), Vec::new()))
        .collect();
    for c in configs.iter() {
        let s = &c.stats;
        let k = |f: &str| format!("trace/{}/{f}", c.label);
        let waits = s.wait.summary.as_ref().map_or(0, |w| w.count);
        let mut row = format!(
            "<tr><td>{}</td>{}",
            esc(&c.label),
            cell(&k("wait/count"), waits.to_string())
        );
        for (i, b) in s.wait.buckets.iter().enumerate() {
            row += &cell(
                &format!("trace/{}/wait/{}", c.label, b.bucket.as_str()),
                b.count.to_string(),
            );
            wait_series[i].1.push(b.count as f64);
        }
        let d = &s.delay;
        let n = d.summary.as_ref().map_or(0, |x| x.count);
        row += &cell(&k("delay/count"), n.to_string());
        row += &d
            .summary
            .as_ref()
            .map_or("<td>-</td><td>-</td>".to_string(), |x| {
                ms_cell(&k("delay/p50_ns"), x.p50_ns) + &ms_cell(&k("delay/p95_ns"), x.p95_ns)
            });
        row += &cell(&k("delay/under_250ms"), d.under_250ms.to_string());
        row += &cell(&k("delay/over_500ms"), d.over_500ms.to_string());
        page.html += &(row + "</tr>\n");
        let mid = n.saturating_sub(d.under_250ms + d.over_500ms);
        for (i, v) in [d.under_250ms, mid, d.over_500ms].iter().enumerate() {
            delay_series[i].1.push(if n > 0 {
                100.0 * *v as f64 / n as f64
            } else {
                0.0
            });
        }
    }
    page.html += "</table>\n";
    let fixed = Colours::new(bucket_names.iter().map(String::as_str).chain(delay_names));
    let svg = grouped_bars(
        "Main-process waits per batch, by bucket",
        "batches",
        &labels,
        &wait_series,
        &fixed,
    )?;
    page.plot(
        "waits",
        "How long the main process waited for each batch.",
        svg,
    );
    let svg = grouped_bars(
        "Delay from end of preprocessing to consumption",
        "share of the batches (%)",
        &labels,
        &delay_series,
        &fixed,
    )?;
    page.plot(
        "delays",
        "The study's delay shares: under 250 ms, between, over 500 ms.",
        svg,
    );
    // The distributions themselves, from every batch.
    let (mut delay_boxes, mut wait_boxes) = (Vec::new(), Vec::new());
    for c in configs.iter_mut() {
        let (mut delays, mut waits) = c.delays_and_waits_ms()?;
        for (values, boxes) in [
            (&mut delays, &mut delay_boxes),
            (&mut waits, &mut wait_boxes),
        ] {
            if values.is_empty() {
                continue;
            }
            values.sort_by(f64::total_cmp);
            let q = |p| lotus_core::trace::stats::percentile(values, p);
            boxes.push((
                c.label.clone(),
                [q(0.0), q(25.0), q(50.0), q(75.0), q(100.0)],
            ));
        }
    }
    if !wait_boxes.is_empty() {
        let svg = box_plot("Main-process wait per batch", "wait (ms)", &wait_boxes)?;
        page.plot(
            "wait_box",
            "Every wait: box Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }
    if !delay_boxes.is_empty() {
        let svg = box_plot(
            "Delay from end of preprocessing to consumption",
            "delay (ms)",
            &delay_boxes,
        )?;
        page.plot(
            "delay_box",
            "Every consumed batch: box Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }
    Ok(())
}

/// The attribution sections: per-op time and hardware metrics, and each
/// op's functions.
fn attribution(
    page: &mut Page,
    attributed: &[(LoadedProfile, Attribution, FunctionAttribution)],
    colours: &Colours,
) -> Result<()> {
    page.html += "<h2>Profiles attributed to ops</h2>\n";
    let metrics = crate::attribute_cmd::TOP_DOWN_METRICS;
    for (p, a, _) in attributed {
        let present: Vec<&str> = metrics
            .iter()
            .copied()
            .filter(|m| a.ops.iter().any(|o| o.metrics.contains_key(*m)))
            .collect();
        let _ = write!(
            page.html,
            "<h3>{} ({})</h3><table><tr><th>op</th><th>CPU time (s)</th><th>share</th><th>CPI</th>",
            esc(&p.name),
            esc(p.format)
        );
        for m in &present {
            let _ = write!(page.html, "<th>{}</th>", esc(m));
        }
        page.html += "</tr>\n";
        let k_s = p.seconds_per_unit();
        for o in &a.ops {
            let k = |f: &str| format!("attribution/{}/{}/{f}", p.name, o.op);
            let mut row = format!(
                "<tr><td>{}</td>{}{}{}",
                esc(&o.op),
                cell(
                    &k("cpu_time_s"),
                    k_s.map_or("-".to_string(), |s| format!("{:.3}", o.value * s))
                ),
                cell(&k("share"), format!("{:.4}", o.share)),
                cell(
                    &k("cpi"),
                    o.cpi.map_or("-".to_string(), |c| format!("{c:.3}"))
                ),
            );
            for m in &present {
                row += &cell(
                    &k(&format!("topdown/{m}")),
                    o.metrics
                        .get(*m)
                        .map_or("-".to_string(), |v| format!("{v:.2}")),
                );
            }
            page.html += &(row + "</tr>\n");
        }
        page.html += "</table>\n";
    }
    let groups: Vec<String> = attributed.iter().map(|(p, _, _)| p.name.clone()).collect();
    let ops: Vec<String> = attributed[0].1.ops.iter().map(|o| o.op.clone()).collect();
    let time_series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = attributed
                .iter()
                .map(|(p, a, _)| {
                    let k = p.seconds_per_unit().unwrap_or(1.0);
                    a.op(op).map_or(0.0, |o| o.value * k)
                })
                .collect();
            (op.clone(), v)
        })
        .collect();
    let svg = grouped_bars(
        "CPU time per op, per profile",
        "CPU time (s)",
        &groups,
        &time_series,
        colours,
    )?;
    page.plot(
        "op_cpu_time",
        "Each op's part of each profile (the same colours as the trace's ops).",
        svg,
    );
    let cpi_series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = attributed
                .iter()
                .map(|(_, a, _)| a.op(op).and_then(|o| o.cpi).unwrap_or(f64::NAN))
                .collect();
            (op.clone(), v)
        })
        .filter(|(_, v): &(String, Vec<f64>)| v.iter().any(|x| x.is_finite()))
        .collect();
    if !cpi_series.is_empty() {
        let svg = grouped_bars(
            "Cycles per instruction per op, per profile",
            "CPI",
            &groups,
            &cpi_series,
            colours,
        )?;
        page.plot(
            "op_cpi",
            "Clockticks over instructions of each op's functions.",
            svg,
        );
    }

    page.html += "<h2>Native functions of each op</h2>\n";
    for (p, _, f) in attributed {
        let _ = writeln!(page.html, "<h3>{}</h3>", esc(&p.name));
        let k_s = p.seconds_per_unit();
        for op in &ops {
            let mine: Vec<_> = f
                .functions
                .iter()
                .filter(|x| x.ops.iter().any(|c| &c.op == op))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let _ = writeln!(
                page.html,
                "<h4>{}</h4><table><tr><th>function</th><th>module</th><th>part</th><th>CPU time (s)</th><th>CPI</th><th>Retiring</th></tr>",
                esc(op)
            );
            for x in mine {
                let part = x.ops.iter().find(|c| &c.op == op).map_or(0.0, |c| c.part);
                let k = |fld: &str| {
                    format!(
                        "functions/{}/{}/{}/{}/{fld}",
                        p.name, op, x.function, x.module
                    )
                };
                let _ = writeln!(
                    page.html,
                    "<tr><td>{}</td><td>{}</td>{}{}{}{}</tr>",
                    esc(&x.function),
                    esc(&x.module),
                    cell(&k("part"), format!("{part:.3}")),
                    cell(
                        &k("cpu_time_s"),
                        k_s.map_or("-".to_string(), |s| format!("{:.3}", x.figures.value * s))
                    ),
                    cell(
                        &k("cpi"),
                        x.figures.cpi.map_or("-".to_string(), |c| format!("{c:.3}"))
                    ),
                    cell(
                        &k("retiring"),
                        x.figures
                            .metrics
                            .get("Retiring")
                            .map_or("-".to_string(), |v| format!("{v:.2}"))
                    ),
                );
            }
            page.html += "</table>\n";
        }
    }
    Ok(())
}
