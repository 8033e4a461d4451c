//! `lotus trace`: the timeline and statistics of a pipeline trace (the
//! per-process logs `lotus trace run` or the original LotusTrace fork
//! writes; [`lotus_trace`] reads them).
//!
//! ```text
//! lotus trace view DIR [--coarse] [--no-torch] --out trace.json|-
//! lotus trace stats DIR... [--configs] [--outliers flag|study] [--format table|json] [--op-times FILE]
//! ```
//!
//! `view` writes Chrome trace event JSON (open it in Perfetto or
//! `chrome://tracing`): one track per process, every op, sample, batch,
//! fetch and wait as a span, arrows from a batch's preprocessing to its
//! consumption, and any PyTorch profiler trace in DIR merged in (see
//! [`lotus_trace`] and [`lotus_trace`]): its
//! events keep their pids and tids, their `ts` moved onto the view's time
//! base; its `process_name` for a pid lotus also traced gives way to
//! lotus's (main or worker, host, rank). The view is streamed: two passes
//! over the logs (the first finds the time base, the processes and which
//! batch each consumption takes), then every event is written as it is
//! read.
//!
//! `stats` prints per-op figures, per-batch preprocessing time with IQR
//! outliers, the main process's waits in buckets and the delay from
//! preprocessing to consumption ([`lotus_trace`] defines
//! them), then, for a distributed job, a row per rank; `--format json` prints
//! `lotus.trace-stats/2`, with each rank's full figures under `ranks`
//! (empty when no log names a rank; [`lotus_trace`]).
//! `--outliers study` applies the original study's `--remove_outliers`
//! (batches below Q1 - 2 IQR removed, batch figures recomputed;
//! `batches.outlier_rule` names the rule, `batches.before_removal` keeps
//! every batch's figures). Schema 2 renamed the wait bucket `over_1ms` to
//! `1ms_to_500ms` (what it holds) and added the delay shares.
//!
//! Several DIRs, or `--configs PARENT` (each sub-folder of logs one
//! configuration, as the study lays them out), give one block per
//! configuration, each equal to that folder's statistics alone, then the
//! study's comparison (IQR and std of batch preprocessing time over the
//! smallest configuration's, and their maxima); `--format json` prints
//! `lotus.trace-stats-configs/1`: `{"schema", "outliers", "configurations":
//! [{"label", ...one trace-stats/2 object...}], "comparison":
//! {"configurations": [...], "max_normalized_iqr", "max_normalized_std"}}`.
//!
//! ```json
//! {"schema": "lotus.trace-stats/2", "trace": "DIR",
//!  "percentiles": "...", "std": "population (ddof=0)",
//!  "events": 1200, "bad_lines": 0, "warnings": [],
//!  "processes": [{"pid": 41, "role": "main", "host": null, "rank": null, "folder": "", "events": 40}],
//!  "ops": [{"name": "Loader", "count": 512, "total_ns": 1, "mean_ns": 1.0, "p50_ns": 1.0,
//!           "p95_ns": 1.0, "p99_ns": 1.0, "std_ns": 0.0, "min_ns": 1, "max_ns": 1}],
//!  "kinds": [{"kind": "batch", "count": 16, ...}],
//!  "batches": {"outlier_rule": "flag-1.5iqr", "summary": {...}, "q1_ns": 1.0, "q3_ns": 1.0,
//!              "iqr_ns": 0.0, "low_fence_ns": 1.0, "high_fence_ns": 1.0, "before_removal": null,
//!              "outliers": [{"batch": 3, "pid": 42, "start_ns": 1, "dur_ns": 9, "side": "high", "removed": false}]},
//!  "wait": {"summary": {...}, "buckets": [{"bucket": "none", "count": 4, "share": 0.25, "total_ns": 0}, ...]},
//!  "delay": {"summary": {...}, "unconsumed": 0, "consumed_without_batch": 0,
//!            "under_250ms": 12, "under_250ms_share": 0.75, "over_500ms": 1, "over_500ms_share": 0.0625},
//!  "ranks": [{"rank": 0, "hosts": ["node1"], "files": ["DIR/lotus_main_pid_41"],
//!             "events": 600, "processes": [...], "ops": [...], ...}],
//!  "per_batch": [{"batch": 0, "pid": 42, "start_ns": 1, "dur_ns": 9, "end_ns": 10,
//!                 "consumed_ns": 12, "main_pid": 41, "delay_ns": 2, "wait_ns": 3, "wait_bucket": "under_1ms"}]}
//! ```
//!
//! `--op-times FILE` writes `op,seconds` (each op's total time), which
//! `lotus attribute --op-times` reads; it also reads a trace folder
//! directly.

pub mod run;

use std::cell::RefCell;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use lotus_attribute::SpanSamples;
use lotus_attribute::Verdict;
use lotus_attribute::TOP_FUNCTIONS;
use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_sys::text::{csv_cell, one_line, printable};
use lotus_trace::Item;
use lotus_trace::{
    op_totals, ConfigComparison, OutlierRule, PerBatchRows, Summary, TraceStats, WaitBucket,
};
use lotus_trace::{process_ranks, RankStats};
use lotus_trace::{Alignment, TorchScan};
use lotus_trace::{ChromeWriter, Flows};
use lotus_trace::{Entry, Kind, Role, TraceFolder, TraceIndex};
use serde::Serialize;

use lotus_map::write::{write_atomic, Pending};

use crate::traces::{configurations_of, load, sampled_attribution, Computed, OutliersArg};

/// The schema tag of `lotus trace stats --json`.
pub const STATS_SCHEMA: &str = "lotus.trace-stats/2";
/// The schema tag of `lotus trace stats --json` over several
/// configurations.
pub const CONFIGS_SCHEMA: &str = "lotus.trace-stats-configs/1";

/// How percentiles are computed, as the JSON says it.
const PERCENTILE_METHOD: &str = "linear interpolation between closest ranks (numpy.percentile's default): rank h = (n-1)*p/100 over the values sorted ascending, x[floor(h)] + (h-floor(h))*(x[floor(h)+1]-x[floor(h)])";

/// `lotus trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Run a program with tracing on, no change to its code:
    /// `lotus trace run --out DIR -- python train.py ...`.
    #[command(after_help = crate::usage::env_help::trace_run())]
    Run(crate::cmd::trace::run::TraceRunArgs),
    /// Write a Chrome trace / Perfetto JSON of a trace: one track per
    /// process, every op, sample and batch as a span, arrows from each
    /// batch's preprocessing to its consumption.
    #[command(after_help = crate::usage::env_help::trace_read())]
    View(ViewArgs),
    /// Per-op times, per-batch preprocessing time (IQR outliers), the main
    /// process's waits and the delay from preprocessing to consumption.
    #[command(after_help = crate::usage::env_help::trace_stats())]
    Stats(StatsArgs),
}

/// `lotus trace view`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ViewArgs {
    /// The trace: a folder of logs (searched recursively: several
    /// processes, ranks or machines make one timeline) or one log file.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Keep batches, waits and consumptions only (no ops, samples, fetches).
    #[arg(long)]
    pub coarse: bool,
    /// Leave out PyTorch profiler traces found in DIR.
    #[arg(long)]
    pub no_torch: bool,
    /// Where to write the JSON (`-`: standard output).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Output format: Chrome trace event JSON (Perfetto and chrome://tracing read it).
    #[arg(long, value_enum, default_value = "json")]
    pub format: ViewFormat,
    /// The samples' prefix in DIR (as `trace run --prefix`): where DIR
    /// holds samples (`trace run --sample`), each op span gets its
    /// samples, CPU ms and top functions as arguments.
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
}

/// `lotus trace view --format`: one format today, named so scripts can
/// ask for it as for every other command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewFormat {
    /// Chrome trace event JSON.
    Json,
}

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

/// How a table is written: for the terminal, fitted to a width, or as
/// Markdown.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Terminal(usize),
    Markdown,
}

/// `header` and `rows` as a table: its first `left` columns aligned
/// left, the others (numbers) right; ends with a newline.
fn emit(mode: Mode, header: &[&str], left: usize, rows: Vec<Vec<String>>) -> String {
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

/// Runs a `lotus trace` subcommand.
pub fn run(command: TraceCommand) -> Result<ExitCode> {
    match command {
        TraceCommand::Run(args) => {
            if crate::usage::is_stdout(&args.out) {
                return Err(crate::usage::usage(
                    "trace run --out names the trace folder (one log per process); standard output (`-`) cannot hold it",
                ));
            }
            crate::cmd::trace::run::run(args)
        }
        TraceCommand::View(args) => view(args),
        TraceCommand::Stats(mut args) => {
            args.json |= args.format == StatsFormat::Json;
            if args
                .op_times
                .as_deref()
                .is_some_and(crate::usage::is_stdout)
            {
                return Err(crate::usage::usage(
                    "--op-times -: standard output carries the statistics; give --op-times a file name",
                ));
            }
            stats(args)
        }
    }
}

fn view(args: ViewArgs) -> Result<ExitCode> {
    let ViewFormat::Json = args.format;
    let (folder, mut index) = load(&args.dir, false)?;
    let to_stdout = args.out.as_os_str() == "-";
    let out_path = (!to_stdout).then(|| args.out.canonicalize().ok()).flatten();

    // Views already made of a trace (lotus's, the study's *_coarse.json):
    // merged, they would show everything twice.
    for v in &folder.views {
        crate::usage::say!(
            "lotus: note: {}: a view of a trace (lotus's or the study's), not a profiler trace: left out",
            v.display()
        );
    }
    // Profiler traces: a first pass for their time base.
    let mut torch_traces: Vec<(PathBuf, TorchScan)> = Vec::new();
    if !args.no_torch {
        for path in &folder.torch {
            if out_path.is_some() && path.canonicalize().ok() == out_path {
                continue;
            }
            let shown = path.display().to_string();
            let f = folder
                .open_file(path)
                .with_context(|| format!("cannot open {shown}"))?;
            torch_traces.push((path.clone(), lotus_trace::scan_torch_trace(f, &shown)?));
        }
    }
    let lotus_start = index.min_start_ns;
    let mut base = lotus_start.unwrap_or(u64::MAX);
    for (_, scan) in &torch_traces {
        if let Some(min) = scan.min_ts_us {
            let at = Alignment::of(scan, lotus_start).ns_of(min);
            base = base.min(at.clamp(0, i128::from(u64::MAX)) as u64);
        }
    }
    if base == u64::MAX {
        base = 0;
    }

    // Flow arrows: one per batch matched with its consumption, found by
    // the places of their two events in reading order.
    let mut flows = Flows::plan(&mut index)?;
    // A sampled trace: each op span's samples (credited by `lotus
    // attribute DIR`'s rule) and top functions, found by the span's place
    // in reading order as the arrows are. --coarse keeps no op spans.
    let mut span_samples = if args.coarse {
        None
    } else {
        sampled_spans(&args.dir, &args.prefix)?
    };

    // The view appears at its path only when complete (an unnamed file
    // until then: nothing is left behind if lotus is killed).
    let sink = if to_stdout {
        None
    } else {
        Some(Pending::create(&args.out)?)
    };
    let writer: Box<dyn Write> = match &sink {
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            p.file().try_clone().context("cannot write the view")?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 20, io::stdout().lock())),
    };
    let mut other = serde_json::json!({
        "source": args.dir.display().to_string(),
        "coarse": args.coarse,
        "producer": concat!("lotus ", env!("CARGO_PKG_VERSION")),
    });
    if let Some(s) = &span_samples {
        other["samples"] = serde_json::json!({
            "total": s.total_samples,
            "on_op_spans": s.credited_samples,
            "partial": s.partial,
        });
    }
    let write_err = |e: io::Error| anyhow::anyhow!("cannot write {}: {e}", args.out.display());
    let mut w = ChromeWriter::begin(writer, base, &other).map_err(write_err)?;
    for (p, rank) in index.processes.iter().zip(process_ranks(&index)) {
        // A distributed job's tracks by rank: each rank's main process,
        // then its workers.
        let role = match p.process.role {
            Role::Main => 0,
            Role::Worker => 1,
        };
        let sort = rank.map_or(0, |r| 2 * i64::from(r)) + role;
        w.process(p.out_pid, &p.process.label(), sort)
            .map_err(write_err)?;
    }

    // The second pass: every event, streamed.
    let mut ordinal = 0u64;
    folder.read_all(|item| -> Result<()> {
        let e = match item {
            Item::File(log) => {
                index.begin_file(log);
                return Ok(());
            }
            Item::Entry(Entry::Event(e)) => e,
            Item::Entry(Entry::Bad(_)) => return Ok(()),
        };
        let at = ordinal;
        ordinal += 1;
        if args.coarse && !e.kind.is_coarse() {
            return Ok(());
        }
        // Arrows end only on batches and consumptions (kept by --coarse
        // too).
        let flow = match e.kind {
            Kind::Batch | Kind::Consume => flows.at(at, &e)?,
            _ => None,
        };
        let p = index.resolve(&e);
        let pid = index.processes[p].out_pid;
        if e.kind == Kind::Thread {
            // A thread's name, for its track; not a span.
            if let Some(tid) = e.tid {
                w.thread(pid, u64::from(tid), &e.name).map_err(write_err)?;
            }
            return Ok(());
        }
        let samples = match (&mut span_samples, e.kind) {
            (Some(s), Kind::Op) => Some(s.at(at)?),
            _ => None,
        };
        w.span_with(pid, &e, samples.as_ref()).map_err(write_err)?;
        match flow {
            Some(f) if f.start => w.flow_start(f.id, pid, &e).map_err(write_err)?,
            Some(f) => w.flow_end(f.id, pid, &e).map_err(write_err)?,
            None => {}
        }
        Ok(())
    })?;
    if flows.mismatched > 0 {
        crate::usage::say!(
            "lotus: warning: {} flow arrow end(s) left out: the logs changed between the two passes over them",
            flows.mismatched
        );
    }
    let samples_note = match &mut span_samples {
        Some(s) => {
            s.finish()?;
            if s.mismatched > 0 {
                crate::usage::say!(
                    "lotus: warning: {} sample(s) of op spans left out: the logs changed between the two passes over them",
                    s.mismatched
                );
            }
            format!(
                "; {} of {} sample(s) on op spans",
                s.credited_samples - s.mismatched,
                s.total_samples
            )
        }
        None => String::new(),
    };

    let ours: std::collections::HashSet<u64> = index.processes.iter().map(|p| p.out_pid).collect();
    let mut torch_events = 0u64;
    for (path, scan) in &torch_traces {
        let shown = path.display().to_string();
        let a = Alignment::of(scan, lotus_start);
        if let Some(note) = a.note() {
            crate::usage::note!("lotus: note: {shown} {note}");
        }
        let f = folder
            .open_file(path)
            .with_context(|| format!("cannot open {shown}"))?;
        let before = w.others;
        lotus_trace::for_each_torch_event_shifted(f, &shown, a.offset_us(base), &mut |ev| {
            // Lotus names its own processes' tracks (main or worker, host,
            // rank); the profiler's names for the same pids are dropped.
            let is_name = ev.get("ph").and_then(|p| p.as_str()) == Some("M")
                && matches!(
                    ev.get("name").and_then(|n| n.as_str()),
                    Some("process_name" | "process_sort_index")
                );
            if is_name
                && ev
                    .get("pid")
                    .and_then(|p| p.as_u64())
                    .is_some_and(|p| ours.contains(&p))
            {
                return Ok(());
            }
            w.raw(ev)
        })?;
        torch_events += w.others - before;
    }
    let (spans, flows) = (w.spans, w.flows);
    let out = w.finish().map_err(write_err)?;
    drop(out);
    if let Some(p) = sink {
        p.finish()?;
    }
    let torch_note = if torch_traces.is_empty() {
        String::new()
    } else {
        format!(
            "; {} PyTorch profiler trace(s) merged, {torch_events} event(s)",
            torch_traces.len()
        )
    };
    crate::usage::note!(
        "lotus: wrote {} ({spans} span(s), {flows} flow(s), {} process(es){samples_note}{torch_note})",
        if to_stdout {
            "the view".to_string()
        } else {
            args.out.display().to_string()
        },
        index.processes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the folder holds samples of `prefix` (`lotus trace run
/// --sample`): what the workers ran outside every op, past 5% of their CPU
/// ([`lotus_attribute::unseen_work`]), as notes.
/// Nothing when it holds none; a warning (and nothing) when they cannot be
/// read: the statistics (or the trace) stand without them.
pub(crate) fn unseen_notes(dir: &Path, prefix: &str) -> Vec<String> {
    sampled_attribution(dir, prefix)
        .map(|a| a.unseen.iter().map(|u| u.message()).collect())
        .unwrap_or_default()
}

/// The verdict's lines, wrapped to the terminal's width.
fn verdict_text(v: &Verdict) -> String {
    printable(&crate::render::verdict::text(
        v,
        Some(crate::render::table::width()),
    ))
    .into_owned()
}

/// The per-span samples of `dir` when it holds samples of `prefix`
/// (`None` when it holds none, or when they cannot be credited: a warning
/// says why, and the view is written without them).
fn sampled_spans(dir: &Path, prefix: &str) -> Result<Option<SpanSamples>> {
    // A samples file of any kind (a fifo or a link out of the folder
    // included: reading it says why it is left out).
    if !dir.is_dir()
        || SampleFiles::of(dir, prefix)
            .samples
            .symlink_metadata()
            .is_err()
    {
        return Ok(None);
    }
    let budget = Budget::from_env()?;
    match SpanSamples::of_folder(dir, prefix, budget, TOP_FUNCTIONS) {
        Ok(s) => {
            for note in &s.notes {
                crate::usage::note!("lotus: note: samples: {note}");
            }
            Ok(Some(s))
        }
        Err(e) => {
            crate::usage::say!(
                "lotus: warning: the samples in {} are left out of the view: {e}",
                dir.display()
            );
            Ok(None)
        }
    }
}

#[derive(Serialize)]
struct StatsJson<'a> {
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
struct ConfigsJson<'a> {
    schema: &'static str,
    outliers: OutlierRule,
    configurations: Vec<LabelledJson<'a>>,
    comparison: ConfigComparison,
}

#[derive(Serialize)]
struct LabelledJson<'a> {
    label: &'a str,
    #[serde(flatten)]
    stats: StatsJson<'a>,
}

/// Every batch, written to the JSON as it is read back from its sort.
struct StreamedRows(RefCell<Option<PerBatchRows>>);

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
fn configurations(args: &StatsArgs) -> Result<Vec<(String, PathBuf)>> {
    configurations_of(&args.dirs, args.configs)
}

/// The JSON of one configuration, its batches read from `rows`.
fn stats_json(c: &Computed, rows: Option<PerBatchRows>) -> StatsJson<'_> {
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

fn write_json(value: &impl Serialize) -> Result<()> {
    let mut stdout = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    serde_json::to_writer_pretty(&mut stdout, value)
        .map_err(anyhow::Error::from)
        .and_then(|()| Ok(writeln!(stdout)?))
        .and_then(|()| Ok(stdout.flush()?))
        .context("cannot write the statistics")
}

fn stats(args: StatsArgs) -> Result<ExitCode> {
    let rule = OutlierRule::from(args.outliers);
    let configs = configurations(&args)?;
    let several = args.configs || configs.len() > 1;
    if several && args.op_times.is_some() {
        return Err(crate::usage::usage("--op-times takes one trace, not several configurations: run `lotus trace stats DIR --op-times FILE` for each"));
    }
    let mut computed = Vec::new();
    for (label, dir) in configs {
        computed.push(Computed::of(label, dir, rule)?);
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

/// The table mode of `format` (tables and Markdown).
fn mode_of(format: StatsFormat) -> Mode {
    match format {
        StatsFormat::Md => Mode::Markdown,
        _ => Mode::Terminal(crate::render::table::width()),
    }
}

/// The text's lines wrapped to the width on a terminal (the tables fit
/// it already); Markdown as it is.
fn fit_lines(text: &str, mode: Mode) -> String {
    match mode {
        Mode::Terminal(width) => crate::render::table::wrap_lines(text, width),
        Mode::Markdown => text.to_string(),
    }
}

/// `trace stats --format csv`: one row per op, span kind, and the batch
/// preprocessing, main-process wait and delay summaries, per
/// configuration; times in ms.
fn stats_csv(computed: &[&Computed]) -> Result<String> {
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
fn write_op_times(path: &Path, index: &TraceIndex) -> Result<()> {
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
    write_atomic(path, &text)?;
    crate::usage::note!("lotus: wrote {} ({} op(s))", path.display(), totals.len());
    Ok(())
}

/// The study's comparison of configurations, as a table.
fn render_comparison(c: &ConfigComparison, rule: OutlierRule, mode: Mode) -> String {
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

fn ms(ns: f64) -> String {
    format!("{:.3}", ns / 1e6)
}

fn summary_cells(s: &Summary) -> Vec<String> {
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

const SUMMARY_HEADER: [&str; 7] = ["count", "total", "mean", "p50", "p95", "p99", "std"];

/// The terminal report: names from the trace (ops, the folder) on one
/// line each, control characters escaped.
fn render(dir: &Path, folder: &TraceFolder, s: &TraceStats, mode: Mode) -> String {
    printable(&render_raw(dir, folder, s, mode)).into_owned()
}

fn render_raw(dir: &Path, folder: &TraceFolder, s: &TraceStats, mode: Mode) -> String {
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
fn render_ranks(ranks: &[RankStats], mode: Mode) -> String {
    if ranks.is_empty() {
        return String::new();
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
    out
}

/// The variable that passes `lotus trace run --op` to the tracer: one
/// `MODULE:QUALNAME` a line.
pub const ENV_TRACE_OPS: &str = "LOTUS_TRACE_OPS";

/// `lotus trace run --op`: the user's own functions and methods traced as
/// ops, with no change to their code.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OpArgs {
    /// Trace a function or method of the job's own code as an op, one span
    /// per call, named after its qualified name: MODULE:QUALNAME, e.g.
    /// `mypkg.data:decode` or `mypkg.data:MyDataset.load_*` (QUALNAME is a
    /// glob; `__main__` is the script). Repeatable. Wrapped in every
    /// process of the job as its module is imported; one that never
    /// matches is a warning at the end.
    #[arg(long = "op", value_name = "MODULE:QUALNAME", value_parser = parse_op_spec)]
    pub ops: Vec<String>,
}

/// Checks one `--op` value: `MODULE:QUALNAME`, MODULE a dotted Python
/// name, QUALNAME a dotted Python name in which `*`, `?` and `[...]`
/// globs may stand for parts of names.
pub fn parse_op_spec(value: &str) -> std::result::Result<String, String> {
    let hint = "expected MODULE:QUALNAME, e.g. mypkg.data:decode or mypkg.data:MyDataset.*";
    let (module, qual) = value
        .split_once(':')
        .ok_or_else(|| format!("'{value}' has no ':' ({hint})"))?;
    let ident = |s: &str, glob: bool| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| {
                c == '_'
                    || c.is_alphanumeric()
                    || (glob && matches!(c, '*' | '?' | '[' | ']' | '!'))
            })
    };
    if !module.split('.').all(|p| ident(p, false)) {
        return Err(format!(
            "'{value}': '{module}' is not a module name ({hint})"
        ));
    }
    if !qual.split('.').all(|p| ident(p, true)) {
        return Err(format!(
            "'{value}': '{qual}' is not a qualified name or glob ({hint})"
        ));
    }
    Ok(value.to_string())
}

impl OpArgs {
    /// Passes the specs to the job (`LOTUS_TRACE_OPS`).
    pub fn apply(&self, cmd: &mut std::process::Command) {
        if !self.ops.is_empty() {
            cmd.env(ENV_TRACE_OPS, self.ops.join("\n"));
        } else {
            cmd.env_remove(ENV_TRACE_OPS);
        }
    }

    /// After the run: warns of each `--op` no process matched (the tracer
    /// leaves `op_matched_<n>` in the private status folder for the n-th),
    /// and, where the tracer asked for it (`note_finer_spans`: a dataset's
    /// own code ran as one span, on Python before 3.12 or with
    /// `LOTUS_TRACE_FINER=0`, and no `--op`), says once how to get spans
    /// finer than a dataset's.
    pub fn report(&self, status: &Path) {
        for (n, spec) in self.ops.iter().enumerate() {
            if !status.join(format!("op_matched_{n}")).exists() {
                eprintln!(
                    "lotus: warning: --op {spec} matched nothing: no traced process imported that module with a function or method of that name (check the spelling; it may live in a process that did not start)"
                );
            }
        }
        if self.ops.is_empty() && status.join("note_finer_spans").exists() {
            crate::usage::note!(
                "lotus: note: spans stop at each dataset's __getitem__ here (the calls in it are spans of their own with no flag on Python 3.12+); name the functions it calls with --op MODULE:QUALNAME (or mark them with lotus_trace.span / lotus_trace.wrap) to see them as ops"
            );
        }
    }
}

/// The one line `trace run` ends with (on stderr, not with `-q`): what to
/// run next on the folder it wrote: `attribute` where it was sampled,
/// `trace stats` where not, then the report.
pub(crate) fn next_hint(out: &Path, prefix: &str, sampled: bool) -> String {
    let dir = shell_word(&out.display().to_string());
    let prefix = if prefix == "lotus" {
        String::new()
    } else {
        format!(" --prefix {}", shell_word(prefix))
    };
    let first = if sampled {
        format!("lotus attribute {dir}{prefix}")
    } else {
        format!("lotus trace stats {dir}")
    };
    format!("next: {first}    (then lotus report --trace {dir} --out report.html)")
}

/// `s` as one shell word: as it is where it holds only safe characters,
/// else in single quotes.
fn shell_word(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod hint_tests {
    use super::next_hint;
    use std::path::Path;

    #[test]
    fn the_hint_names_the_folder_as_one_shell_word() {
        assert_eq!(
            next_hint(Path::new("/tmp/run 1"), "lotus", true),
            "next: lotus attribute '/tmp/run 1'    (then lotus report --trace '/tmp/run 1' --out report.html)"
        );
        assert_eq!(
            next_hint(Path::new("out"), "mine", false),
            "next: lotus trace stats out    (then lotus report --trace out --out report.html)"
        );
        assert_eq!(
            next_hint(Path::new("out"), "mine", true),
            "next: lotus attribute out --prefix mine    (then lotus report --trace out --out report.html)"
        );
        assert!(next_hint(Path::new("it's"), "lotus", true).contains(r"'it'\''s'"));
    }
}
