//! `lotus trace view`: Chrome trace event JSON of a trace (see the
//! [module above](super) for what it holds), or with `--format firefox` a
//! Firefox Profiler profile ([`crate::render::firefox`]).

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use lotus_attribute::SpanSamples;
use lotus_attribute::TOP_FUNCTIONS;
use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_trace::Item;
use lotus_trace::{process_ranks, Entry, Kind, Role};
use lotus_trace::{Alignment, TorchScan};
use lotus_trace::{ChromeWriter, Flows};
use lotus_trace::{TraceFolder, TraceIndex};

use lotus_sys::OutputFile;

use crate::traces::load;

/// `lotus trace view`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ViewArgs {
    /// The trace: a folder of logs (searched recursively: several
    /// processes, ranks or machines make one timeline) or one log file.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Keep batches, waits and consumptions only (no ops, samples,
    /// fetches; `--format json` only).
    #[arg(long)]
    pub coarse: bool,
    /// Leave out PyTorch profiler traces found in DIR (`--format json`
    /// only: the Firefox profile never merges them).
    #[arg(long)]
    pub no_torch: bool,
    /// Where to write the JSON or profile (`-`: standard output).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Output format: Chrome trace event JSON (Perfetto and chrome://tracing
    /// read it), or a Firefox Profiler profile (profiler.firefox.com, "Load
    /// a profile from file"): a track per process and thread, every sample
    /// with its call stack, the op spans as markers.
    #[arg(long, value_enum, default_value = "json")]
    pub format: ViewFormat,
    /// The samples' prefix in DIR (as `trace run --prefix`): where DIR
    /// holds samples (`trace run --sample`), each op span gets its
    /// samples, CPU ms and top functions as arguments (`--format firefox`:
    /// the samples of the profile).
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
}

/// `lotus trace view --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewFormat {
    /// Chrome trace event JSON.
    Json,
    /// The Firefox Profiler's processed profile JSON.
    Firefox,
}

pub(super) fn view(args: ViewArgs) -> Result<ExitCode> {
    if args.format == ViewFormat::Firefox {
        return firefox(&args);
    }
    let (folder, mut index) = load(&args.dir, false)?;
    let to_stdout = args.out.as_os_str() == "-";

    let torch_traces = torch_scans(&args, &folder)?;
    let lotus_start = index.min_start_ns;
    let base = time_base(lotus_start, &torch_traces);

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
        Some(OutputFile::create(&args.out)?)
    };
    let writer: Box<dyn Write> = match &sink {
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            p.file().try_clone().context("cannot write the view")?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 20, io::stdout().lock())),
    };
    let other = header(&args, span_samples.as_ref());
    let write_err = |e: io::Error| anyhow::anyhow!("cannot write {}: {e}", args.out.display());
    let mut w = ChromeWriter::begin(writer, base, &other).map_err(write_err)?;
    tracks(&mut w, &index).map_err(write_err)?;

    write_events(
        &args,
        &folder,
        &mut index,
        &mut flows,
        &mut span_samples,
        &mut w,
    )?;
    if flows.mismatched > 0 {
        crate::usage::say!(
            "lotus: warning: {} flow arrow end(s) left out: the logs changed between the two passes over them",
            flows.mismatched
        );
    }
    let samples_note = samples_note(&mut span_samples)?;

    let torch_events = merge_torch(&folder, &torch_traces, &index, lotus_start, base, &mut w)?;
    let (spans, flows) = (w.spans, w.flows);
    let out = w.finish().map_err(write_err)?;
    drop(out);
    if let Some(p) = sink {
        p.commit()?;
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

/// The PyTorch profiler traces in the folder (unless `--no-torch`; the
/// view being written left out), each scanned for its time base. Views
/// already made of a trace are said and left out: merged, they would show
/// everything twice.
fn torch_scans(args: &ViewArgs, folder: &TraceFolder) -> Result<Vec<(PathBuf, TorchScan)>> {
    let to_stdout = args.out.as_os_str() == "-";
    let out_path = (!to_stdout).then(|| args.out.canonicalize().ok()).flatten();

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
    Ok(torch_traces)
}

/// The view's time base: the earliest event of the logs and of the
/// profiler traces (0 when there is none).
fn time_base(lotus_start: Option<u64>, torch_traces: &[(PathBuf, TorchScan)]) -> u64 {
    let mut base = lotus_start.unwrap_or(u64::MAX);
    for (_, scan) in torch_traces {
        if let Some(min) = scan.min_ts_us {
            let at = Alignment::of(scan, lotus_start).ns_of(min);
            base = base.min(at.clamp(0, i128::from(u64::MAX)) as u64);
        }
    }
    if base == u64::MAX {
        base = 0;
    }
    base
}

/// The view's `otherData`: its source, whether coarse, lotus's version,
/// and the samples' counts where it has them.
fn header(args: &ViewArgs, span_samples: Option<&SpanSamples>) -> serde_json::Value {
    let mut other = serde_json::json!({
        "source": args.dir.display().to_string(),
        "coarse": args.coarse,
        "producer": concat!("lotus ", env!("CARGO_PKG_VERSION")),
    });
    if let Some(s) = span_samples {
        other["samples"] = serde_json::json!({
            "total": s.total_samples,
            "on_op_spans": s.credited_samples,
            "partial": s.partial,
        });
    }
    other
}

/// A track per process: a distributed job's tracks by rank, each rank's
/// main process, then its workers.
fn tracks(w: &mut ChromeWriter<Box<dyn Write>>, index: &TraceIndex) -> io::Result<()> {
    for (p, rank) in index.processes.iter().zip(process_ranks(index)) {
        // A distributed job's tracks by rank: each rank's main process,
        // then its workers.
        let role = match p.process.role {
            Role::Main => 0,
            Role::Worker => 1,
        };
        let sort = rank.map_or(0, |r| 2 * i64::from(r)) + role;
        w.process(p.out_pid, &p.process.label(), sort)?;
    }
    Ok(())
}

/// The second pass: every event, streamed, with its arrows and (op spans)
/// its samples.
fn write_events(
    args: &ViewArgs,
    folder: &TraceFolder,
    index: &mut TraceIndex,
    flows: &mut Flows,
    span_samples: &mut Option<SpanSamples>,
    w: &mut ChromeWriter<Box<dyn Write>>,
) -> Result<()> {
    let write_err = |e: io::Error| anyhow::anyhow!("cannot write {}: {e}", args.out.display());
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
        if let (Kind::Config, Some(config)) = (e.kind, &e.config) {
            // The DataLoader's settings at an `iter(loader)`: an instant
            // event, its settings as arguments.
            let instant = serde_json::json!({
                "name": "DataLoader settings",
                "cat": e.kind.as_str(),
                "ph": "i",
                "s": "t",
                "ts": w.ts_us(e.start_ns),
                "pid": pid,
                "tid": e.tid.map_or(pid, u64::from),
                "args": config,
            });
            w.raw(&instant).map_err(write_err)?;
            return Ok(());
        }
        let samples = match (&mut *span_samples, e.kind) {
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
    Ok(())
}

/// The samples on op spans, as the closing note says them (a warning
/// where the logs changed between the passes).
fn samples_note(span_samples: &mut Option<SpanSamples>) -> Result<String> {
    Ok(match span_samples {
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
    })
}

/// Merges each profiler trace, its events moved onto the view's time
/// base; lotus names its own processes' tracks. How many events it wrote.
fn merge_torch(
    folder: &TraceFolder,
    torch_traces: &[(PathBuf, TorchScan)],
    index: &TraceIndex,
    lotus_start: Option<u64>,
    base: u64,
    w: &mut ChromeWriter<Box<dyn Write>>,
) -> Result<u64> {
    let ours: std::collections::HashSet<u64> = index.processes.iter().map(|p| p.out_pid).collect();
    let mut torch_events = 0u64;
    for (path, scan) in torch_traces {
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
    Ok(torch_events)
}

/// The per-span samples of `dir` when it holds samples of `prefix`
/// (`None` when it holds none, or when they cannot be credited: a warning
/// says why, and the view is written without them).
pub(super) fn sampled_spans(dir: &Path, prefix: &str) -> Result<Option<SpanSamples>> {
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

/// `--format firefox`: the folder as a Firefox Profiler profile, written
/// whole or not at all (an unnamed file until complete).
fn firefox(args: &ViewArgs) -> Result<ExitCode> {
    let to_stdout = args.out.as_os_str() == "-";
    let sink = if to_stdout {
        None
    } else {
        Some(OutputFile::create(&args.out)?)
    };
    let mut writer: Box<dyn Write> = match &sink {
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            p.file().try_clone().context("cannot write the profile")?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 20, io::stdout().lock())),
    };
    let w = crate::render::firefox::write_profile(&args.dir, &args.prefix, &mut writer)?;
    drop(writer);
    if let Some(p) = sink {
        p.commit()?;
    }
    for note in &w.notes {
        crate::usage::note!("lotus: note: {note}");
    }
    if let Some(why) = &w.samples_left_out {
        crate::usage::say!(
            "lotus: warning: the samples in {} are left out of the profile: {why}; it has the spans as markers only",
            args.dir.display()
        );
    } else if !w.sampled {
        crate::usage::say!(
            "lotus: note: {} holds no samples of prefix `{}` (traced without `--sample`?): the profile has the spans as markers only",
            args.dir.display(),
            args.prefix
        );
    } else if !w.with_stacks && w.samples > 0 {
        crate::usage::say!(
            "lotus: note: the samples carry no call stacks (traced with `--stacks none`?): each sample's stack is its own function alone"
        );
    }
    crate::usage::note!(
        "lotus: wrote {} ({} process(es), {} thread(s), {} sample(s), {} marker(s)); open it at https://profiler.firefox.com (Load a profile from file)",
        if to_stdout {
            "the profile".to_string()
        } else {
            args.out.display().to_string()
        },
        w.processes,
        w.threads,
        w.samples,
        w.markers
    );
    Ok(ExitCode::SUCCESS)
}
