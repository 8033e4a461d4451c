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
//! The page needs no network: its CSS and its one script (the timeline's
//! zoom and pan) are inline, its plots are inline SVG (drawn with
//! plotters, [`crate::render::svg`]), sized to the page. It is rendered from
//! `templates/report.html` by a template engine that escapes every text
//! ([`crate::render::html`]). From the top: each run's command, host, CPU,
//! date and lotus version (`lotus.run`, written by `lotus trace run`); the
//! verdict; a few figures at a glance; a timeline of each trace
//! ([`crate::render::html::timeline`]); with two runs or more, each against the
//! first per op (wall and CPU time a call); per configuration, the per-op
//! table (wall and CPU a call side by side) and the op-time plot, the batch
//! preprocessing time box plots, the wait buckets and delay shares, box
//! plots of every wait and delay; per profile, each op's time and hardware
//! metrics (CPI, top-down) and each op's native functions (names shortened,
//! whole in their tooltip, with their module); and the `lotus trace view`
//! command that makes the Perfetto timeline. For a sampled trace folder
//! (`trace run --sample`), the in-pipeline attribution of its samples, and,
//! with `--mapping`, the mapping compared with the in-pipeline one (built
//! from the samples, or `--against`): [`crate::cmd::report::samples`]. Each
//! figure shown carries `data-key` with what it is, so that a test (or a
//! script) can check the page against `lotus trace stats --json` and
//! `lotus attribute --format json`. With `--plot-dir`, each plot is also
//! written there as an SVG file.

pub mod samples;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_attribute::{Attribution, FunctionAttribution, FunctionMapping, MatchMode, Options};
use lotus_sort::Budget;
use lotus_trace::{ConfigComparison, OutlierRule};

use crate::attribution_inputs::{
    load_mapping, load_op_times, load_profile, name_profiles, LoadedProfile,
};
use crate::cmd::report::samples::{
    attribute, compare, comparison_section, in_pipeline_section, op_names, Sampled,
};
use crate::render::html::timeline::OpCpu;
use crate::render::html::{
    heading, keyed, module_cell, para, short_name, text, Block, Cell, PageContext, Part, RunInfo,
    VerdictView,
};
use crate::render::svg::{box_plot, grouped_bars, Colours};
use crate::run_record::RunRecord;
use crate::traces::{configurations_of, Computed, OutliersArg};
use lotus_attribute::RowKind;
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

/// A number cell: ms with 3 decimals (`ns` given), keyed.
fn ms_cell(key: &str, ns: f64) -> Cell {
    Cell::num(key, format!("{:.3}", ns / 1e6))
}

/// A number cell as given, keyed.
pub(crate) fn cell(key: &str, text: String) -> Cell {
    Cell::num(key, text)
}

/// The page being built: its blocks and its plots in order: (file name,
/// SVG).
pub(crate) struct Page {
    /// The blocks so far.
    pub(crate) blocks: Vec<Block>,
    plots: Vec<(String, String)>,
}

impl Page {
    /// Adds a block.
    pub(crate) fn push(&mut self, b: Block) {
        self.blocks.push(b);
    }

    /// Adds a heading.
    pub(crate) fn h(&mut self, level: u8, t: impl Into<String>) {
        self.blocks.push(heading(level, t));
    }

    /// Adds a paragraph.
    pub(crate) fn p(&mut self, parts: Vec<Part>) {
        self.blocks.push(para(parts));
    }

    /// Adds a table.
    pub(crate) fn table(&mut self, headers: &[&str], rows: Vec<Vec<Cell>>) {
        self.blocks.push(Block::Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows,
        });
    }

    /// Adds a plot (`name`: its `data-plot` and file name) with its caption.
    pub(crate) fn plot(&mut self, name: &str, caption: &str, svg: String) {
        self.blocks.push(Block::Plot {
            name: name.to_string(),
            caption: caption.to_string(),
            index: self.plots.len(),
        });
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
    // Each run's verdict, with its samples' CPU facts where it has them.
    for (c, (_, s)) in configs.iter_mut().zip(&sampled) {
        if let Sampled::With(a) = s {
            c.with_samples(a);
        }
    }
    let several = configs.len() > 1;
    let verdicts: Vec<VerdictView> = configs
        .iter()
        .map(|c| VerdictView::of(&c.verdict, several.then(|| c.label.clone())))
        .collect();
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

    // The top: each run's command, host, CPU, date; then the timelines
    // (their pass also sums each op's CPU time).
    let mut runs = Vec::new();
    let mut timelines = Vec::new();
    let mut cpus = Vec::new();
    for c in configs.iter_mut() {
        let record = match RunRecord::read(&c.dir, &args.prefix) {
            Ok(r) => r,
            Err(e) => {
                crate::usage::say!("lotus: warning: {e:#}; the page says the run is not recorded");
                None
            }
        };
        let hosts: Vec<String> = {
            let mut h: Vec<String> = c
                .stats
                .processes
                .iter()
                .filter_map(|p| p.host.clone())
                .collect();
            h.sort();
            h.dedup();
            h
        };
        let (tl, cpu) = crate::render::html::timeline::of(c, &colours)?;
        let first = c.folder_and_index().1.min_start_ns;
        runs.push(RunInfo::of(
            &c.label,
            &c.dir,
            record.as_ref(),
            &hosts,
            first,
        ));
        timelines.push(tl);
        cpus.push(cpu);
    }

    let mut page = Page {
        blocks: Vec::new(),
        plots: Vec::new(),
    };
    let summary = glance(&configs, &cpus);
    if configs.len() > 1 {
        runs_compared(&mut page, &configs, &cpus, &sampled);
    }
    if !configs.is_empty() {
        traces(&mut page, &mut configs, &cpus, &sampled, &colours, rule)?;
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
    let ctx = PageContext {
        version: env!("CARGO_PKG_VERSION"),
        outliers: rule.describe().to_string(),
        runs,
        verdicts,
        summary,
        timelines,
        blocks: std::mem::take(&mut page.blocks),
    };
    let svgs: Vec<String> = page
        .plots
        .iter()
        .map(|(_, svg)| crate::render::svg::for_page(svg))
        .collect();
    let html = crate::render::html::render(&ctx, &svgs)?;
    let ReportFormat::Html = args.format;
    let to_stdout = crate::usage::is_stdout(&args.out);
    if to_stdout {
        print!("{html}");
    } else {
        write_atomic(&args.out, &html)?;
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

/// CPU ms per call of `op` in a configuration: from its spans' thread CPU
/// clock where they carry it, else from its samples (`lotus attribute
/// DIR`'s row of the op).
fn cpu_per_call_ms(cpu: &OpCpu, sampled: Option<&Sampled>, op: &str) -> Option<f64> {
    if let Some(&(ns, with, _)) = cpu.get(op) {
        if with > 0 {
            return Some(ns as f64 / with as f64 / 1e6);
        }
    }
    match sampled {
        Some(Sampled::With(a)) => a
            .rows
            .iter()
            .find(|r| r.kind == RowKind::Op && r.path == op)
            .and_then(|r| r.cpu_per_call_ns)
            .map(|ns| ns as f64 / 1e6),
        _ => None,
    }
}

/// A few figures of each run at a glance.
fn glance(configs: &[Computed], cpus: &[OpCpu]) -> Vec<Vec<Part>> {
    let mut out = Vec::new();
    for (c, cpu) in configs.iter().zip(cpus) {
        let s = &c.stats;
        let workers = s.processes.iter().filter(|p| p.role == "worker").count();
        let batches = s.batches.summary.as_ref().map_or(0, |b| b.count);
        let mut parts = vec![text(format!(
            "{}: {workers} worker(s), {batches} batch(es)",
            c.label
        ))];
        if let Some(w) = &s.wait.summary {
            parts.push(text("; the main process waited for data "));
            parts.push(keyed(
                format!("glance/{}/wait_ms", c.label),
                format!("{:.1}", w.total_ns as f64 / 1e6),
            ));
            parts.push(text(format!(" ms in all ({} wait(s))", w.count)));
        }
        if let Some(top) = s.ops.first() {
            parts.push(text("; the op that takes longest: "));
            parts.push(keyed(
                format!("glance/{}/top_op", c.label),
                short_name(&top.name, 48),
            ));
            parts.push(text(format!(
                " ({:.1} ms in all, {:.3} ms a call{})",
                top.summary.total_ns as f64 / 1e6,
                top.summary.mean_ns / 1e6,
                cpu_per_call_ms(cpu, None, &top.name)
                    .map_or(String::new(), |c| format!(", {c:.3} ms CPU a call"))
            )));
        }
        parts.push(text("."));
        out.push(parts);
    }
    out
}

/// `new` against `old`: the difference and its share of `old`.
fn delta_cells(key: &str, old: Option<f64>, new: Option<f64>) -> [Cell; 4] {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let (d, pct) = match (old, new) {
        (Some(a), Some(b)) => (
            format!("{:+.3}", b - a),
            if a > 0.0 {
                format!("{:+.1}", 100.0 * (b - a) / a)
            } else {
                "-".to_string()
            },
        ),
        _ => ("-".to_string(), "-".to_string()),
    };
    [
        Cell::plain_num(f(old)),
        Cell::plain_num(f(new)),
        Cell::num(format!("{key}_delta_ms"), d),
        Cell::num(format!("{key}_delta_pct"), pct),
    ]
}

/// Two runs or more: each against the first, per op: time and CPU per
/// call, and how much they changed.
fn runs_compared(
    page: &mut Page,
    configs: &[Computed],
    cpus: &[OpCpu],
    sampled: &[(String, Sampled)],
) {
    let base = &configs[0];
    page.h(2, "Runs compared");
    page.p(vec![text(format!(
        "Each run against {} (the first given), per op: wall time a call (the mean of its spans) and CPU time a call (its spans' own thread CPU clock, or its samples), in ms; Δ: the change, in ms and as a share of {}'s (negative: faster).",
        base.label, base.label
    ))]);
    for (i, c) in configs.iter().enumerate().skip(1) {
        page.h(3, format!("{} against {}", c.label, base.label));
        let mut ops: Vec<&str> = base
            .stats
            .ops
            .iter()
            .chain(&c.stats.ops)
            .map(|o| o.name.as_str())
            .collect();
        ops.sort_unstable();
        ops.dedup();
        let mean = |cc: &Computed, op: &str| {
            cc.stats
                .ops
                .iter()
                .find(|o| o.name == op)
                .map(|o| o.summary.mean_ns / 1e6)
        };
        let rows = ops
            .iter()
            .map(|op| {
                let k = |f: &str| format!("compare/{}/{op}/{f}", c.label);
                let mut row = vec![Cell::name(op)];
                row.extend(delta_cells(
                    &k("time_per_call"),
                    mean(base, op),
                    mean(c, op),
                ));
                row.extend(delta_cells(
                    &k("cpu_per_call"),
                    cpu_per_call_ms(&cpus[0], sampled.first().map(|s| &s.1), op),
                    cpu_per_call_ms(&cpus[i], sampled.get(i).map(|s| &s.1), op),
                ));
                row
            })
            .collect();
        let a = &base.label;
        let b = &c.label;
        let headers = [
            "op".to_string(),
            format!("wall/call {a}"),
            format!("wall/call {b}"),
            "Δ".to_string(),
            "Δ %".to_string(),
            format!("CPU/call {a}"),
            format!("CPU/call {b}"),
            "Δ".to_string(),
            "Δ %".to_string(),
        ];
        page.push(Block::Table {
            headers: headers.to_vec(),
            rows,
        });
    }
}

/// The trace sections: ops, batches, waits, delays, per configuration.
fn traces(
    page: &mut Page,
    configs: &mut [Computed],
    cpus: &[OpCpu],
    sampled: &[(String, Sampled)],
    colours: &Colours,
    rule: OutlierRule,
) -> Result<()> {
    let labels: Vec<String> = configs.iter().map(|c| c.label.clone()).collect();
    page.h(2, "Ops");
    page.p(vec![text("Each op's spans in all processes: wall time (total, mean a call, percentiles) and CPU time a call (the spans' own thread CPU clock where the trace has it, else the op's samples; - where it has neither). Hover a shortened name for the whole of it.")]);
    for (i, (c, cpu)) in configs.iter().zip(cpus).enumerate() {
        page.h(3, c.label.clone());
        let samples = sampled.get(i).map(|s| &s.1);
        let rows = c
            .stats
            .ops
            .iter()
            .map(|o| {
                let k = |f: &str| format!("trace/{}/ops/{}/{f}", c.label, o.name);
                let s = &o.summary;
                vec![
                    Cell::name(&o.name)
                        .swatch(crate::render::html::timeline::hex(colours, &o.name)),
                    cell(&k("count"), s.count.to_string()),
                    ms_cell(&k("total_ns"), s.total_ns as f64),
                    ms_cell(&k("mean_ns"), s.mean_ns),
                    cell(
                        &k("cpu_per_call_ms"),
                        cpu_per_call_ms(cpu, samples, &o.name)
                            .map_or("-".to_string(), |v| format!("{v:.3}")),
                    ),
                    ms_cell(&k("p50_ns"), s.p50_ns),
                    ms_cell(&k("p95_ns"), s.p95_ns),
                    ms_cell(&k("std_ns"), s.std_ns),
                ]
            })
            .collect();
        page.table(
            &[
                "op",
                "calls",
                "total",
                "wall/call",
                "CPU/call",
                "p50",
                "p95",
                "std",
            ],
            rows,
        );
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

    page.h(2, "Batch preprocessing time");
    let mut boxes = Vec::new();
    let mut rows = Vec::new();
    for c in configs.iter() {
        let b = &c.stats.batches;
        let k = |f: &str| format!("trace/{}/batches/{f}", c.label);
        if let (Some(s), Some(q1), Some(q3)) = (&b.summary, b.q1_ns, b.q3_ns) {
            rows.push(vec![
                Cell::text(c.label.clone()),
                cell(&k("count"), s.count.to_string()),
                ms_cell(&k("mean_ns"), s.mean_ns),
                ms_cell(&k("p50_ns"), s.p50_ns),
                ms_cell(&k("q1_ns"), q1),
                ms_cell(&k("q3_ns"), q3),
                ms_cell(&k("std_ns"), s.std_ns),
                ms_cell(&k("min_ns"), s.min_ns as f64),
                ms_cell(&k("max_ns"), s.max_ns as f64),
                cell(&k("outliers"), b.outliers.len().to_string()),
            ]);
            boxes.push((
                c.label.clone(),
                [s.min_ns as f64, q1, s.p50_ns, q3, s.max_ns as f64].map(|v| v / 1e6),
            ));
        }
    }
    page.table(
        &[
            "configuration",
            "batches",
            "mean",
            "p50",
            "Q1",
            "Q3",
            "std",
            "min",
            "max",
            "outliers",
        ],
        rows,
    );
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
        page.p(vec![
            text("Across configurations (the study's comparison): maximum normalized IQR "),
            keyed(
                "trace/comparison/max_normalized_iqr",
                ratio(cmp.max_normalized_iqr),
            ),
            text(", maximum normalized standard deviation "),
            keyed(
                "trace/comparison/max_normalized_std",
                ratio(cmp.max_normalized_std),
            ),
            text("."),
        ]);
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

    page.h(2, "Waits and delays");
    let bucket_names: Vec<String> = lotus_trace::WaitBucket::ALL
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
    let mut rows = Vec::new();
    for c in configs.iter() {
        let s = &c.stats;
        let k = |f: &str| format!("trace/{}/{f}", c.label);
        let waits = s.wait.summary.as_ref().map_or(0, |w| w.count);
        let mut row = vec![
            Cell::text(c.label.clone()),
            cell(&k("wait/count"), waits.to_string()),
        ];
        for (i, b) in s.wait.buckets.iter().enumerate() {
            row.push(cell(
                &format!("trace/{}/wait/{}", c.label, b.bucket.as_str()),
                b.count.to_string(),
            ));
            wait_series[i].1.push(b.count as f64);
        }
        let d = &s.delay;
        let n = d.summary.as_ref().map_or(0, |x| x.count);
        row.push(cell(&k("delay/count"), n.to_string()));
        match &d.summary {
            Some(x) => {
                row.push(ms_cell(&k("delay/p50_ns"), x.p50_ns));
                row.push(ms_cell(&k("delay/p95_ns"), x.p95_ns));
            }
            None => {
                row.push(Cell::plain_num("-"));
                row.push(Cell::plain_num("-"));
            }
        }
        row.push(cell(&k("delay/under_250ms"), d.under_250ms.to_string()));
        row.push(cell(&k("delay/over_500ms"), d.over_500ms.to_string()));
        rows.push(row);
        let mid = n.saturating_sub(d.under_250ms + d.over_500ms);
        for (i, v) in [d.under_250ms, mid, d.over_500ms].iter().enumerate() {
            delay_series[i].1.push(if n > 0 {
                100.0 * *v as f64 / n as f64
            } else {
                0.0
            });
        }
    }
    page.table(
        &[
            "configuration",
            "waits",
            "none",
            "< 1 ms",
            "1 ms - 500 ms",
            "> 500 ms",
            "delays",
            "delay p50",
            "delay p95",
            "< 250 ms",
            "> 500 ms",
        ],
        rows,
    );
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
            let q = |p| lotus_trace::percentile(values, p);
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
    page.h(2, "Profiles attributed to ops");
    let metrics = crate::render::TOP_DOWN_METRICS;
    for (p, a, _) in attributed {
        let present: Vec<&str> = metrics
            .iter()
            .copied()
            .filter(|m| a.ops.iter().any(|o| o.metrics.contains_key(*m)))
            .collect();
        page.h(3, format!("{} ({})", p.name, p.format));
        let mut headers = vec!["op", "CPU time (s)", "share", "CPI"];
        headers.extend(present.iter().copied());
        let k_s = p.seconds_per_unit();
        let rows = a
            .ops
            .iter()
            .map(|o| {
                let k = |f: &str| format!("attribution/{}/{}/{f}", p.name, o.op);
                let mut row = vec![
                    Cell::name(&o.op).swatch(crate::render::html::timeline::hex(colours, &o.op)),
                    cell(
                        &k("cpu_time_s"),
                        k_s.map_or("-".to_string(), |s| format!("{:.3}", o.value * s)),
                    ),
                    cell(&k("share"), format!("{:.4}", o.share)),
                    cell(
                        &k("cpi"),
                        o.cpi.map_or("-".to_string(), |c| format!("{c:.3}")),
                    ),
                ];
                for m in &present {
                    row.push(cell(
                        &k(&format!("topdown/{m}")),
                        o.metrics
                            .get(*m)
                            .map_or("-".to_string(), |v| format!("{v:.2}")),
                    ));
                }
                row
            })
            .collect();
        page.table(&headers, rows);
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

    page.h(2, "Native functions of each op");
    for (p, _, f) in attributed {
        page.h(3, p.name.clone());
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
            page.h(4, op.clone());
            let rows = mine
                .into_iter()
                .map(|x| {
                    let part = x.ops.iter().find(|c| &c.op == op).map_or(0.0, |c| c.part);
                    let k = |fld: &str| {
                        format!(
                            "functions/{}/{}/{}/{}/{fld}",
                            p.name, op, x.function, x.module
                        )
                    };
                    vec![
                        Cell::name(&x.function),
                        module_cell(&x.module),
                        cell(&k("part"), format!("{part:.3}")),
                        cell(
                            &k("cpu_time_s"),
                            k_s.map_or("-".to_string(), |s| format!("{:.3}", x.figures.value * s)),
                        ),
                        cell(
                            &k("cpi"),
                            x.figures.cpi.map_or("-".to_string(), |c| format!("{c:.3}")),
                        ),
                        cell(
                            &k("retiring"),
                            x.figures
                                .metrics
                                .get("Retiring")
                                .map_or("-".to_string(), |v| format!("{v:.2}")),
                        ),
                    ]
                })
                .collect();
            page.table(
                &[
                    "function",
                    "module",
                    "part",
                    "CPU time (s)",
                    "CPI",
                    "Retiring",
                ],
                rows,
            );
        }
    }
    Ok(())
}
