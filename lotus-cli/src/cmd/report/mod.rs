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
//! from the samples, or `--against`): [`crate::cmd::report::samples`]; where
//! its samples carry call stacks, each op's flame graph, collapsed
//! ([`flames`]). Each
//! figure shown carries `data-key` with what it is, so that a test (or a
//! script) can check the page against `lotus trace stats --json` and
//! `lotus attribute --format json`. With `--plot-dir`, each plot is also
//! written there as an SVG file.

mod attribution;
mod flames;
mod runs;
pub mod samples;
mod traces;

use attribution::{attribution, Attributed};
use runs::{glance, runs_compared};
use traces::traces;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_attribute::{FunctionMapping, MatchMode, OpsFrom, Options};
use lotus_sort::Budget;
use lotus_trace::{Dir, OutlierRule};

use crate::attribution_inputs::{load_mapping, load_op_times, load_profile, name_profiles};
use crate::cmd::report::samples::{
    attribute, compare, comparison_section, in_pipeline_section, op_names, samples_alone, Compared,
};
use crate::render::html::timeline::{self, OpCpu, Timeline};
use crate::render::html::{heading, para, Block, Cell, PageContext, Part, RunInfo, VerdictView};
use crate::render::svg::Colours;
use crate::traces::{computed, configurations_of, OutliersArg};
use lotus_attribute::{SampledFolder, TraceFigures};
use lotus_runner::RunRecord;
use lotus_sys::write_file;

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
pub(super) fn ms_cell(key: &str, ns: f64) -> Cell {
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
    let dirs = configurations_of(&args.traces, args.configs)?;
    // Folders of samples alone (`trace attach`): their samples are all
    // the page has of them.
    let alone = lotus_attribute::samples_alone(&dirs, &args.prefix)?;
    let mut configs = Vec::new();
    for (label, dir) in dirs.iter().filter(|_| !alone) {
        configs.push(computed(label.clone(), dir.clone(), rule, true)?);
    }
    let budget = Budget::from_env()?;
    // Each run's samples attributed, and folded for its flame graphs in
    // the same pass.
    let (mut sampled, mut folds) = (Vec::new(), Vec::new());
    let sources = configs.iter().map(|c| (&c.label, c.source()));
    // A folder of samples alone is read by the attribution and the
    // timeline: its files held for both.
    let shared = (dirs.iter().filter(|_| alone))
        .map(|(_, d)| crate::traces::shared_folder(d))
        .collect::<Result<Vec<_>>>()?;
    for (label, source) in sources.chain(alone_sources(&dirs, &shared)) {
        let (s, f) = attribute(source, &args.prefix, budget)?;
        sampled.push((label.clone(), s));
        folds.push(f);
    }
    // Each run's verdict, with its samples' CPU facts where it has them.
    for (c, (_, s)) in configs.iter_mut().zip(&sampled) {
        if let SampledFolder::With(a) = s {
            c.with_samples(a);
        }
    }
    let several = dirs.len() > 1;
    let mut verdicts: Vec<VerdictView> = configs
        .iter()
        .map(|c| VerdictView::of(&c.verdict, several.then(|| c.label.clone())))
        .collect();
    // Attribution: per op and per function of each profile.
    let (attributed, compared) = match &args.mapping {
        Some(mpath) => attribute_profiles(&args, mpath, &configs, &sampled, budget)?,
        None => (Vec::new(), Vec::new()),
    };

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
    let (mut runs, mut timelines, cpus) = runs_and_timelines(&mut configs, &args.prefix, &colours)?;
    timelines.extend(frame_timelines(&dirs, &shared, &args.prefix, &colours));

    let mut page = Page {
        blocks: Vec::new(),
        plots: Vec::new(),
    };
    let summary = glance(&configs, &cpus);
    // One job's hosts: each its own run below. A rank is in one host's
    // folder only (the merge refuses it in two), so each run's ranks
    // together are the job's, and its straggler theirs: no second reading.
    if let (false, Some((_, job))) = (args.configs, crate::traces::one_job(&args.traces, false)?) {
        let ranks: Vec<lotus_trace::RankStats> = configs
            .iter()
            .flat_map(|c| c.ranks.iter().cloned())
            .collect();
        let line =
            lotus_trace::straggler(&ranks).map(|s| s.sentence(|ns| format!("{:.1} ms", ns / 1e6)));
        let said = std::iter::once(job.summary()).chain(line);
        page.h(2, "One job's hosts");
        page.p(vec![crate::render::html::text(
            said.collect::<Vec<_>>().join(". "),
        )]);
    }
    if configs.len() > 1 {
        runs_compared(&mut page, &configs, &cpus, &sampled);
    }
    if !configs.is_empty() {
        traces(&mut page, &mut configs, &cpus, &sampled, &colours, rule)?;
    }
    let note = samples_alone(
        alone,
        &dirs,
        &sampled,
        &args.prefix,
        &mut runs,
        &mut verdicts,
    )?;
    if sampled
        .iter()
        .any(|(_, s)| !matches!(s, SampledFolder::Not))
    {
        let from = [OpsFrom::Spans, OpsFrom::Frames][usize::from(alone)];
        in_pipeline_section(&mut page, &sampled, &colours, from)?;
        let dirs: Vec<&Path> = dirs.iter().map(|(_, d)| d.as_path()).collect();
        flames::flames_section(&mut page, &sampled, (&dirs, from), folds)?;
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
        note,
        blocks: std::mem::take(&mut page.blocks),
    };
    let svgs: Vec<String> = page
        .plots
        .iter()
        .map(|(_, svg)| crate::render::svg::for_page(svg))
        .collect();
    let html = crate::render::html::render(&ctx, &svgs)?;
    let ReportFormat::Html = args.format;
    write_page(&args, &html, &page.plots, dirs.len(), attributed.len())?;
    Ok(ExitCode::SUCCESS)
}

/// With `--mapping`: the profiles attributed to its ops and functions,
/// and the mapping compared with the in-pipeline one of each sampled
/// configuration (or `--against`).
fn attribute_profiles(
    args: &ReportArgs,
    mpath: &Path,
    configs: &[TraceFigures],
    sampled: &[(String, SampledFolder)],
    budget: Budget,
) -> Result<(Vec<Attributed>, Vec<Compared>)> {
    let mapping = load_mapping(mpath)?;
    let with_samples: Vec<(String, PathBuf)> = configs
        .iter()
        .zip(sampled)
        .filter(|(_, (_, s))| matches!(s, SampledFolder::With(_)))
        .map(|(c, _)| (c.label.clone(), c.dir.clone()))
        .collect();
    let compared = compare(
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
    let attributed = profiles
        .into_iter()
        .zip(rest)
        .map(|(p, (a, f))| (p, a, f))
        .collect();
    Ok((attributed, compared))
}

/// Each folder of samples alone, read through its files held in `shared`.
fn alone_sources<'a>(
    dirs: &'a [(String, PathBuf)],
    shared: &'a [Option<lotus_trace::SharedFolder>],
) -> impl Iterator<Item = (&'a String, Dir<'a>)> {
    (dirs.iter().zip(shared)).map(|((l, d), f)| (l, Dir::of(d, f.as_ref())))
}

/// The timelines of the folders of samples alone (`shared` holds their
/// files; none where the page has no such folder), on one time axis:
/// their slices estimated from the samples' Python frames. One that
/// cannot be drawn (samples without stacks) is left out, said.
fn frame_timelines(
    dirs: &[(String, PathBuf)],
    shared: &[Option<lotus_trace::SharedFolder>],
    prefix: &str,
    colours: &Colours,
) -> Vec<Timeline> {
    let mut frames = Vec::new();
    for ((label, source), (_, dir)) in alone_sources(dirs, shared).zip(dirs) {
        match lotus_attribute::frame_spans(source, prefix) {
            Ok(f) => frames.push((label, dir, f.timeline(timeline::MAX_SPANS))),
            Err(e) => crate::usage::say!("lotus: warning: no timeline of {}: {e}", dir.display()),
        }
    }
    let scale_ms = frames.iter().map(|(_, _, f)| f.span_ms).fold(0.0, f64::max);
    (frames.into_iter())
        .map(|(label, dir, f)| timeline::drawn(label, dir, f, colours, scale_ms))
        .collect()
}

/// Each run's command, host, CPU and date, its timeline, and its ops' CPU
/// time (summed in the timeline's pass).
fn runs_and_timelines(
    configs: &mut [TraceFigures],
    prefix: &str,
    colours: &Colours,
) -> Result<(Vec<RunInfo>, Vec<Timeline>, Vec<OpCpu>)> {
    let mut runs = Vec::new();
    let mut timelines = Vec::new();
    let mut cpus = Vec::new();
    // One time axis for every run's timeline: the longest run's.
    let scale_ms = configs
        .iter()
        .map(TraceFigures::span_ms)
        .fold(0.0, f64::max);
    for c in configs.iter_mut() {
        let record = match RunRecord::read(&c.dir, prefix) {
            Ok(r) => r,
            Err(e) => {
                let e = anyhow::Error::from(e);
                crate::usage::say!("lotus: warning: {e:#}; the page says the run is not recorded");
                None
            }
        };
        let hosts = c.hosts();
        let (tl, cpu) = crate::render::html::timeline::of(c, colours, scale_ms)?;
        let first = c.index.min_start_ns;
        let run = RunInfo::of(&c.label, &c.dir, record.as_ref(), &hosts, first);
        runs.push(run);
        timelines.push(tl);
        cpus.push(cpu);
    }
    Ok((runs, timelines, cpus))
}

/// Writes the page (to `--out`, or standard output) and its plots (to
/// `--plot-dir`), and says what was written.
fn write_page(
    args: &ReportArgs,
    html: &str,
    plots: &[(String, String)],
    configs: usize,
    profiles: usize,
) -> Result<()> {
    let to_stdout = crate::usage::is_stdout(&args.out);
    if to_stdout {
        print!("{html}");
    } else {
        write_file(&args.out, html.as_bytes())?;
    }
    if let Some(dir) = &args.plot_dir {
        lotus_sys::create_dir_all(dir, 0o777)
            .map_err(|e| anyhow::anyhow!("--plot-dir {}: {e}", dir.display()))?;
        for (name, svg) in plots {
            write_file(&dir.join(name), svg.as_bytes())?;
        }
    }
    crate::usage::note!(
        "lotus: wrote {} ({} configuration(s), {} profile(s), {} plot(s){})",
        if to_stdout {
            "the page".to_string()
        } else {
            args.out.display().to_string()
        },
        configs,
        profiles,
        plots.len(),
        args.plot_dir
            .as_ref()
            .map_or(String::new(), |d| format!("; SVG files in {}", d.display()))
    );
    Ok(())
}
