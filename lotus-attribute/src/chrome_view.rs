//! A trace folder as a Chrome trace event view (Perfetto,
//! `chrome://tracing`), streamed: one track per process, every op, sample,
//! batch, fetch and wait as a span, arrows from a batch's preprocessing to
//! its consumption, each op span's samples where the folder holds some,
//! and any PyTorch profiler trace in the folder merged in, its events
//! moved onto the view's time base. A folder of samples alone (no tracer
//! logs: `lotus trace attach`) gets spans estimated from its samples'
//! Python frames instead ([`ChromeView::of_samples_alone`], written by
//! `chrome_frames`).
//!
//! Two passes over the logs: the first ([`TraceIndex`], read by the
//! caller) finds the time base, the processes and which batch each
//! consumption takes; [`ChromeView::prepare`] then plans the arrows and
//! reads the samples, and [`ChromeView::write`] writes every event as it
//! is read.

use lotus_sys::input::Dir;
use std::io::{self, Write};
use std::path::PathBuf;

use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_trace::{process_ranks, Alignment, ChromeWriter, Entry, Flows, Item, Kind, Role};
use lotus_trace::{TorchScan, TraceFolder, TraceIndex};

use crate::error::with_causes;
use crate::{Error, FrameSpans, SpanSamples, TOP_FUNCTIONS};

/// This module's results.
type Result<T> = std::result::Result<T, Error>;

/// What writing a view says as it goes, without a `lotus: ` prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewMessage {
    /// To show even when asked for quiet (a warning, a file left out).
    Warning(String),
    /// A detail a quiet caller may drop.
    Note(String),
}

/// What [`ChromeView`] writes.
#[derive(Debug, Clone)]
pub struct ChromeViewOptions {
    /// The trace folder (or one log), as given.
    pub dir: PathBuf,
    /// The samples' prefix in it.
    pub prefix: String,
    /// Whether the samples in it are put on the spans (not for several
    /// hosts' folders merged: each holds its own).
    pub samples: bool,
    /// Batches, waits and consumptions only (no ops, samples, fetches).
    pub coarse: bool,
    /// Whether PyTorch profiler traces in the folder are merged.
    pub torch: bool,
    /// The view's own file, where it is in the folder (left out of the
    /// profiler traces merged).
    pub out_path: Option<PathBuf>,
    /// The view's destination as errors name it.
    pub out_shown: String,
}

/// A view planned: its profiler traces scanned, its time base, its arrows
/// and its samples ([`ChromeView::prepare`]), or the spans a folder of
/// samples alone shows ([`ChromeView::of_samples_alone`]), to be written
/// ([`ChromeView::write`]).
pub struct ChromeView<'a> {
    options: &'a ChromeViewOptions,
    of: Of<'a>,
}

/// What a view is made of.
enum Of<'a> {
    /// The tracer's spans.
    Spans(Box<Spans<'a>>),
    /// A folder of samples alone: spans estimated from its samples'
    /// frames.
    Frames(FrameSpans),
}

/// A view of the tracer's spans, planned.
struct Spans<'a> {
    folder: &'a TraceFolder,
    index: &'a mut TraceIndex,
    torch_traces: Vec<(PathBuf, TorchScan)>,
    lotus_start: Option<u64>,
    base: u64,
    flows: Flows,
    span_samples: Option<SpanSamples>,
}

/// What [`ChromeView::write`] wrote, for the closing note.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChromeWritten {
    /// Spans written.
    pub spans: u64,
    /// Flow arrows written.
    pub flows: u64,
    /// Processes (tracks).
    pub processes: usize,
    /// The samples on op spans as the closing note says them (`; N of M
    /// sample(s) on op spans`), empty without samples.
    pub samples_note: String,
    /// Profiler traces merged, and their events.
    pub torch_traces: usize,
    /// Events of the profiler traces written.
    pub torch_events: u64,
}

impl ChromeWritten {
    /// The closing note: `wrote OUT (N span(s), ...)`, `out` the view's
    /// destination as shown.
    pub fn summary(&self, out: &str) -> String {
        let torch = if self.torch_traces == 0 {
            String::new()
        } else {
            format!(
                "; {} PyTorch profiler trace(s) merged, {} event(s)",
                self.torch_traces, self.torch_events
            )
        };
        format!(
            "wrote {out} ({} span(s), {} flow(s), {} process(es){}{torch})",
            self.spans, self.flows, self.processes, self.samples_note
        )
    }
}

impl<'a> ChromeView<'a> {
    /// Scans the folder's profiler traces for their time base (views
    /// already made of a trace are said and left out), plans the arrows
    /// and reads the samples of op spans (none with `coarse`).
    pub fn prepare(
        options: &'a ChromeViewOptions,
        folder: &'a TraceFolder,
        index: &'a mut TraceIndex,
        say: &mut dyn FnMut(ViewMessage),
    ) -> Result<ChromeView<'a>> {
        let torch_traces = torch_scans(options, folder, say)?;
        let lotus_start = index.min_start_ns;
        let base = time_base(lotus_start, &torch_traces);
        // Flow arrows: one per batch matched with its consumption, found by
        // the places of their two events in reading order.
        let flows = Flows::plan(index)?;
        // A sampled trace: each op span's samples (credited by `lotus
        // attribute DIR`'s rule) and top functions, found by the span's
        // place in reading order as the arrows are. Coarse keeps no op
        // spans.
        let span_samples = if options.coarse || !options.samples {
            None
        } else {
            sampled_spans(&options.dir, &options.prefix, say)?
        };
        let spans = Spans {
            folder,
            index,
            torch_traces,
            lotus_start,
            base,
            flows,
            span_samples,
        };
        Ok(ChromeView {
            options,
            of: Of::Spans(Box::new(spans)),
        })
    }

    /// The view of a folder of samples alone (no tracer logs: `lotus
    /// trace attach`): spans estimated from its samples' Python frames
    /// ([`crate::frame_spans`]; with `coarse`, the top-level ones alone).
    /// `None` where the folder (or file) holds tracer logs, or no
    /// samples: [`ChromeView::prepare`] makes its view, or the logs'
    /// reading says what it lacks. An error where its samples carry no
    /// call stacks or cannot be read.
    pub fn of_samples_alone(
        options: &'a ChromeViewOptions,
        say: &mut dyn FnMut(ViewMessage),
    ) -> Result<Option<ChromeView<'a>>> {
        let dir = Dir::from(&options.dir);
        let sampled = dir.path().is_dir()
            && SampleFiles::of(dir, &options.prefix)
                .samples
                .symlink_metadata()
                .is_ok();
        if !sampled || crate::in_pipeline::has_logs(dir)? {
            return Ok(None);
        }
        let spans = match crate::frame_spans(dir, &options.prefix) {
            Ok(s) => s,
            Err(Error::NoStacks { path }) => {
                return Err(Error::Io(format!(
                    "{}: no trace logs (lotus_main_pid_*, lotus_worker_pid_*), and its samples carry no call stacks to tell their ops from ({path}): give the folder `lotus trace run` wrote, or sample with call stacks (`--stacks fp` or `--stacks dwarf`)",
                    dir.path().display()
                )))
            }
            Err(e) => return Err(e),
        };
        for note in &spans.notes {
            say(ViewMessage::Note(format!("note: samples: {note}")));
        }
        say(ViewMessage::Note(format!(
            "note: {}: no trace logs (a job sampled without the tracer, as `lotus trace attach` does): its spans are estimated from the samples' Python frames, not measured",
            dir.path().display()
        )));
        let spans = if options.coarse {
            spans.top_level()
        } else {
            spans
        };
        Ok(Some(ChromeView {
            options,
            of: Of::Frames(spans),
        }))
    }

    /// Writes the view to `out`, every event streamed.
    pub fn write(
        self,
        out: Box<dyn Write>,
        say: &mut dyn FnMut(ViewMessage),
    ) -> Result<ChromeWritten> {
        match self.of {
            Of::Spans(spans) => spans.write(self.options, out, say),
            Of::Frames(spans) => crate::chrome_frames::write(self.options, &spans, out),
        }
    }
}

impl Spans<'_> {
    /// Writes the view of the tracer's spans to `out`.
    fn write(
        mut self,
        options: &ChromeViewOptions,
        out: Box<dyn Write>,
        say: &mut dyn FnMut(ViewMessage),
    ) -> Result<ChromeWritten> {
        let shown = options.out_shown.clone();
        let write_err = |e: io::Error| Error::Io(format!("cannot write {shown}: {e}"));
        let other = header(options, self.span_samples.as_ref());
        let mut w = ChromeWriter::begin(out, self.base, &other).map_err(write_err)?;
        tracks(&mut w, self.index).map_err(write_err)?;
        write_events(
            options,
            self.folder,
            self.index,
            &mut self.flows,
            &mut self.span_samples,
            &mut w,
        )?;
        if self.flows.mismatched > 0 {
            say(ViewMessage::Warning(format!(
                "warning: {} flow arrow end(s) left out: the logs changed between the two passes over them",
                self.flows.mismatched
            )));
        }
        let samples_note = samples_note(&mut self.span_samples, say)?;
        let torch_events = merge_torch(
            self.folder,
            &self.torch_traces,
            self.index,
            self.lotus_start,
            self.base,
            &mut w,
            say,
        )?;
        let (spans, flows) = (w.spans, w.flows);
        let out = w.finish().map_err(write_err)?;
        drop(out);
        Ok(ChromeWritten {
            spans,
            flows,
            processes: self.index.processes.len(),
            samples_note,
            torch_traces: self.torch_traces.len(),
            torch_events,
        })
    }
}

/// The PyTorch profiler traces in the folder (unless left out; the view
/// being written left out), each scanned for its time base. Views already
/// made of a trace are said and left out: merged, they would show
/// everything twice.
fn torch_scans(
    options: &ChromeViewOptions,
    folder: &TraceFolder,
    say: &mut dyn FnMut(ViewMessage),
) -> Result<Vec<(PathBuf, TorchScan)>> {
    for v in &folder.views {
        say(ViewMessage::Warning(format!(
            "note: {}: a view of a trace (lotus's or the study's), not a profiler trace: left out",
            v.display()
        )));
    }
    // Profiler traces: a first pass for their time base.
    let mut torch_traces: Vec<(PathBuf, TorchScan)> = Vec::new();
    if options.torch {
        for path in &folder.torch {
            if options.out_path.is_some() && path.canonicalize().ok() == options.out_path {
                continue;
            }
            let shown = path.display().to_string();
            let f = folder
                .open_file(path)
                .map_err(|e| Error::Io(with_causes(format!("cannot open {shown}"), &e)))?;
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
fn header(options: &ChromeViewOptions, span_samples: Option<&SpanSamples>) -> serde_json::Value {
    let mut other = serde_json::json!({
        "source": options.dir.display().to_string(),
        "coarse": options.coarse,
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
    options: &ChromeViewOptions,
    folder: &TraceFolder,
    index: &mut TraceIndex,
    flows: &mut Flows,
    span_samples: &mut Option<SpanSamples>,
    w: &mut ChromeWriter<Box<dyn Write>>,
) -> Result<()> {
    let write_err = |e: io::Error| Error::Io(format!("cannot write {}: {e}", options.out_shown));
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
        if options.coarse && !e.kind.is_coarse() {
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
fn samples_note(
    span_samples: &mut Option<SpanSamples>,
    say: &mut dyn FnMut(ViewMessage),
) -> Result<String> {
    Ok(match span_samples {
        Some(s) => {
            s.finish()?;
            if s.mismatched > 0 {
                say(ViewMessage::Warning(format!(
                    "warning: {} sample(s) of op spans left out: the logs changed between the two passes over them",
                    s.mismatched
                )));
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
    say: &mut dyn FnMut(ViewMessage),
) -> Result<u64> {
    let ours: std::collections::HashSet<u64> = index.processes.iter().map(|p| p.out_pid).collect();
    let mut torch_events = 0u64;
    for (path, scan) in torch_traces {
        let shown = path.display().to_string();
        let a = Alignment::of(scan, lotus_start);
        if let Some(note) = a.note() {
            say(ViewMessage::Note(format!("note: {shown} {note}")));
        }
        let f = folder
            .open_file(path)
            .map_err(|e| Error::Io(with_causes(format!("cannot open {shown}"), &e)))?;
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
fn sampled_spans<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    say: &mut dyn FnMut(ViewMessage),
) -> Result<Option<SpanSamples>> {
    let dir: Dir<'_> = dir.into();
    // A samples file of any kind (a fifo or a link out of the folder
    // included: reading it says why it is left out).
    if !dir.path().is_dir()
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
                say(ViewMessage::Note(format!("note: samples: {note}")));
            }
            Ok(Some(s))
        }
        Err(e) => {
            say(ViewMessage::Warning(format!(
                "warning: the samples in {} are left out of the view: {e}",
                dir.path().display()
            )));
            Ok(None)
        }
    }
}
