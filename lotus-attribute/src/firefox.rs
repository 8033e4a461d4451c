//! A sampled trace folder as a
//! Firefox Profiler profile (profiler.firefox.com, "Load a profile from
//! file"), written with samply's `fxprof-processed-profile`.
//!
//! One process per traced process (its pid, named by its role), one
//! thread per thread that has samples or spans (its tid, named where the
//! tracer named it with a `kind=thread` event), every sample with its call
//! stack (frames named as `lotus attribute DIR --format folded` names
//! them, a kernel frame ending in `_[k]` and in the `Kernel` category,
//! the others in `User` with their module as subcategory), and the op
//! spans (with the batches, and the main processes' waits) as interval markers
//! on their thread. Times are on the samples' clock (`CLOCK_MONOTONIC`):
//! the spans are moved there with each log's clock pairs by the code the
//! in-pipeline join uses ([`lotus_attribute::for_each_clocked_event`]), so
//! a sample falls in the marker of the span the join credits it to.
//!
//! Memory: the samples are streamed once from the file; the profile the
//! crate builds holds, per sample, its time, stack index, CPU delta and
//! weight (about 24 bytes), and per thread its distinct stacks and
//! frames, per marker its times, name and fields: it grows with samples
//! and spans (it is serialized whole at the end), never twice over.

use lotus_sys::input::Dir;
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::Path;
use std::time::Duration;

use crate::{folded_frame, for_each_clocked_event, ClockedItem, Error};
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    MarkerFieldFlags, MarkerFieldFormat, MarkerTiming, ProcessHandle, Profile, ReferenceTimestamp,
    SamplingInterval, StackHandle, StaticSchemaMarker, StaticSchemaMarkerField, StringHandle,
    ThreadHandle, Timestamp,
};
use lotus_samples::{SampleFiles, SampleReader, StackTable, SymbolTable};
use lotus_sys::input::SizedFile;
use lotus_trace::{Kind, Role};

/// The results of this module: errors carry their causes in their text.
type Result<T> = std::result::Result<T, Error>;

/// `context` and the error `e` with its causes, as an [`Error::Io`].
fn failed(context: String, e: &(dyn std::error::Error + 'static)) -> Error {
    Error::Io(crate::error::with_causes(context, e))
}

/// What [`write_firefox_profile`] wrote, for the closing note.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirefoxWritten {
    /// Processes in the profile.
    pub processes: usize,
    /// Threads in the profile.
    pub threads: usize,
    /// Samples added.
    pub samples: u64,
    /// Markers added.
    pub markers: u64,
    /// Whether the folder held samples.
    pub sampled: bool,
    /// Why its samples are left out (a samples or symbols file that cannot
    /// be opened: a link out of the folder, a fifo, damaged): the profile
    /// then has the markers alone.
    pub samples_left_out: Option<String>,
    /// Whether any sample carried a call stack.
    pub with_stacks: bool,
    /// What is worth telling (logs skipped, samples without a log...).
    pub notes: Vec<String>,
}

impl FirefoxWritten {
    /// What to say once the profile of `dir` (samples of `prefix`) is
    /// written to `out` (as shown), in order, the closing note last: (said
    /// even when notes are not, the text).
    pub fn messages(&self, dir: &std::path::Path, prefix: &str, out: &str) -> Vec<(bool, String)> {
        let mut m: Vec<(bool, String)> = self
            .notes
            .iter()
            .map(|n| (false, format!("note: {n}")))
            .collect();
        if let Some(why) = &self.samples_left_out {
            m.push((true, format!("warning: the samples in {} are left out of the profile: {why}; it has the spans as markers only", dir.display())));
        } else if !self.sampled {
            m.push((true, format!("note: {} holds no samples of prefix `{prefix}` (traced without `--sample`?): the profile has the spans as markers only", dir.display())));
        } else if !self.with_stacks && self.samples > 0 {
            m.push((true, "note: the samples carry no call stacks (traced with `--stacks none`?): each sample's stack is its own function alone".to_string()));
        }
        m.push((false, format!(
            "wrote {out} ({} process(es), {} thread(s), {} sample(s), {} marker(s)); open it at https://profiler.firefox.com (Load a profile from file)",
            self.processes, self.threads, self.samples, self.markers
        )));
        m
    }
}

/// A span as a marker: its op (or `batch`, `wait`) name, its kind, and
/// its batch and sample index where it has them.
#[derive(Debug, Clone)]
struct SpanMarker {
    name: StringHandle,
    category: CategoryHandle,
    kind: StringHandle,
    batch: StringHandle,
    index: StringHandle,
}

impl StaticSchemaMarker for SpanMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "LotusSpan";
    const DESCRIPTION: Option<&'static str> = Some("A span of the lotus trace (op, batch, wait)");
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    // The batch and sample index are fields (shown in the tooltip and
    // the table's details; empty where the span has none).
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name} ({marker.data.kind})");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name} ({marker.data.kind})");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "kind",
            label: "Kind",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "batch",
            label: "Batch",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "index",
            label: "Sample index",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
    ];

    fn name(&self, _profile: &mut Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _profile: &mut Profile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, field_index: u32) -> StringHandle {
        match field_index {
            0 => self.kind,
            1 => self.batch,
            _ => self.index,
        }
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        // The schema has no number field: the profile never asks.
        0.0
    }
}

/// The profile being built: its processes and threads by id, its
/// categories, and the frames and stacks already interned.
struct Builder {
    profile: Profile,
    processes: HashMap<u32, ProcessHandle>,
    threads: HashMap<(u32, u32), ThreadHandle>,
    /// Each thread's first time (its start in the profile) and process.
    first: HashMap<ThreadHandle, (u64, ProcessHandle)>,
    /// Workers numbered in the order their logs are read.
    workers: u32,
    user: CategoryHandle,
    kernel: CategoryHandle,
    ops: CategoryHandle,
    loader: CategoryHandle,
    modules: HashMap<String, CategoryPairHandle>,
    /// Per symbol id: its frame name and category.
    frames: HashMap<u32, (StringHandle, CategoryPairHandle)>,
    /// Per thread and stack id (or leaf symbol, `u64` above `u32::MAX`).
    stacks: HashMap<(ThreadHandle, u64), Option<StackHandle>>,
    markers: u64,
}

impl Builder {
    fn new(interval_ns: u64) -> Builder {
        // Dated once the logs are read (the samples' clock's zero in
        // wall-clock time, from their clock pairs).
        let mut profile = Profile::new(
            "lotus trace",
            ReferenceTimestamp::from_duration_since_unix_epoch(Duration::ZERO),
            SamplingInterval::from_nanos(interval_ns.max(1)),
        );
        profile.set_product(concat!("lotus ", env!("CARGO_PKG_VERSION")));
        profile.set_os_name("Linux");
        profile.set_symbolicated(true);
        let user = profile.add_category("User", CategoryColor::Yellow);
        let kernel = profile.add_category("Kernel", CategoryColor::Orange);
        let ops = profile.add_category("Op", CategoryColor::Blue);
        let loader = profile.add_category("DataLoader", CategoryColor::Green);
        Builder {
            profile,
            processes: HashMap::new(),
            threads: HashMap::new(),
            workers: 0,
            user,
            kernel,
            ops,
            loader,
            modules: HashMap::new(),
            frames: HashMap::new(),
            stacks: HashMap::new(),
            markers: 0,
            first: HashMap::new(),
        }
    }

    /// The process `pid`, added under `name` when first met.
    fn process(&mut self, pid: u32, name: impl FnOnce() -> String) -> ProcessHandle {
        if let Some(&p) = self.processes.get(&pid) {
            return p;
        }
        let p = self
            .profile
            .add_process(&name(), pid, Timestamp::from_nanos_since_reference(0));
        self.processes.insert(pid, p);
        p
    }

    /// The thread `tid` of process `pid` (the process named by its pid
    /// alone where no log named it).
    fn thread(&mut self, pid: u32, tid: u32) -> ThreadHandle {
        if let Some(&t) = self.threads.get(&(pid, tid)) {
            return t;
        }
        let p = self.process(pid, || format!("untraced process {pid}"));
        let t =
            self.profile
                .add_thread(p, tid, Timestamp::from_nanos_since_reference(0), tid == pid);
        if tid == pid {
            self.profile.set_thread_name(t, "main thread");
        }
        self.threads.insert((pid, tid), t);
        self.first.insert(t, (u64::MAX, p));
        t
    }

    /// A symbol's frame: named as folded lines name it, in the Kernel
    /// category or in User with its module as subcategory.
    fn frame(&mut self, symbols: &SymbolTable, id: u32) -> FrameInfo {
        let (name, category_pair) = match self.frames.get(&id) {
            Some(&f) => f,
            None => {
                let s = symbols.get(id);
                let name = self.profile.intern_string(&folded_frame(s));
                let category = if s.module == "[kernel]" {
                    self.kernel.into()
                } else {
                    let module = Path::new(&s.module)
                        .file_name()
                        .map_or(s.module.clone(), |n| n.to_string_lossy().into_owned());
                    let (profile, user) = (&mut self.profile, self.user);
                    *self
                        .modules
                        .entry(module)
                        .or_insert_with_key(|m| profile.add_subcategory(user, m))
                };
                self.frames.insert(id, (name, category));
                (name, category)
            }
        };
        FrameInfo {
            frame: Frame::Label(name),
            category_pair,
            flags: FrameFlags::empty(),
        }
    }

    /// The stack of a sample: stack `stack` of the table, or where it has
    /// none (`--stacks none`, an id the file lacks) its own function alone,
    /// as the folded output shows it.
    fn stack(
        &mut self,
        thread: ThreadHandle,
        stack: u32,
        leaf: u32,
        tables: &(SymbolTable, StackTable),
        ids: &mut Vec<u32>,
    ) -> Option<StackHandle> {
        let key = if stack == 0 {
            u64::from(leaf) | 1 << 32
        } else {
            u64::from(stack)
        };
        if let Some(&s) = self.stacks.get(&(thread, key)) {
            return s;
        }
        if stack == 0 || !tables.1.frames(stack, ids) {
            ids.clear();
            ids.push(leaf);
        }
        let frames: Vec<FrameInfo> = ids.iter().map(|&i| self.frame(&tables.0, i)).collect();
        let s = self.profile.intern_stack_frames(thread, frames.into_iter());
        self.stacks.insert((thread, key), s);
        s
    }

    /// Notes that `thread` was alive at `t`.
    fn seen(&mut self, thread: ThreadHandle, t: u64) {
        if let Some(f) = self.first.get_mut(&thread) {
            f.0 = f.0.min(t);
        }
    }

    /// Starts each thread and process at its first sample or span (the
    /// profiler shows a thread as not yet alive before its start).
    fn set_starts(&mut self) {
        let mut processes: HashMap<ProcessHandle, u64> = HashMap::new();
        for (&t, &(at, p)) in &self.first {
            if at == u64::MAX {
                continue;
            }
            let ts = Timestamp::from_nanos_since_reference(at);
            self.profile.set_thread_start_time(t, ts);
            let first = processes.entry(p).or_insert(at);
            *first = (*first).min(at);
        }
        for (&p, &at) in &processes {
            self.profile
                .set_process_start_time(p, Timestamp::from_nanos_since_reference(at));
        }
        // A thread only named (no sample, no span): its process's start.
        for (&t, &(at, p)) in &self.first {
            if let (u64::MAX, Some(&start)) = (at, processes.get(&p)) {
                let ts = Timestamp::from_nanos_since_reference(start);
                self.profile.set_thread_start_time(t, ts);
            }
        }
    }

    /// A span as an interval marker on its thread.
    fn marker(&mut self, pid: u32, tid: u32, e: &lotus_trace::Event, start: u64, end: u64) {
        let thread = self.thread(pid, tid);
        let p = &mut self.profile;
        let number = |p: &mut Profile, n: Option<u64>| {
            p.intern_string(&n.map_or(String::new(), |n| n.to_string()))
        };
        let marker = SpanMarker {
            name: p.intern_string(&e.name),
            category: if e.kind == Kind::Op {
                self.ops
            } else {
                self.loader
            },
            kind: p.intern_string(e.kind.as_str()),
            batch: number(p, e.batch),
            index: number(p, e.sample),
        };
        p.add_marker(
            thread,
            MarkerTiming::Interval(
                Timestamp::from_nanos_since_reference(start),
                Timestamp::from_nanos_since_reference(end.max(start)),
            ),
            marker,
        );
        self.markers += 1;
        self.seen(thread, start);
    }
}

/// Reads the trace folder `dir` (samples of `prefix` where it has them)
/// and writes its profile to `out`.
pub fn write_firefox_profile<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    out: &mut dyn Write,
) -> Result<FirefoxWritten> {
    let dir: Dir<'_> = dir.into();
    let files = SampleFiles::of(dir, prefix);
    let sampled = files.samples.symlink_metadata().is_ok();
    let sampling: HashMap<String, String> = if sampled {
        files
            .read_sampling()
            .unwrap_or_default()
            .into_iter()
            .collect()
    } else {
        HashMap::new()
    };
    // As the join reads them: the interval, else one over the frequency.
    let num = |k: &str| sampling.get(k).and_then(|v| v.parse::<u64>().ok());
    let frequency_hz = num("frequency_hz").unwrap_or(1000).max(1);
    let interval_ns = num("interval_ns").unwrap_or(1_000_000_000 / frequency_hz);
    // A `task-clock` counter read with each sample: its thread's CPU ns
    // since its previous sample, the sample's CPU delta where it has one.
    let task_clock = sampling
        .get("counters")
        .and_then(|names| names.split(',').position(|n| n == "task-clock"));
    let mut written = FirefoxWritten {
        sampled,
        ..FirefoxWritten::default()
    };

    // Pass 1: the logs' processes, thread names and spans. The builder is
    // made at the first log, whose first clock pair dates the profile.
    let mut b: Option<Builder> = None;
    let summary = for_each_clocked_event(dir, |item| {
        match item {
            ClockedItem::Log(log) => {
                let b = b.get_or_insert_with(|| Builder::new(interval_ns));
                let (pid, role) = (log.name.pid, log.name.role);
                if !b.processes.contains_key(&pid) {
                    let name = match role {
                        Role::Main => format!("main ({pid})"),
                        _ => {
                            b.workers += 1;
                            format!("worker {} ({pid})", b.workers - 1)
                        }
                    };
                    b.process(pid, || name);
                }
            }
            ClockedItem::Event {
                event: e,
                start_ns: Some(start_ns),
                end_ns: Some(end_ns),
                ..
            } => {
                let b = b.get_or_insert_with(|| Builder::new(interval_ns));
                let tid = e.tid.unwrap_or(e.pid);
                match e.kind {
                    Kind::Thread => {
                        let t = b.thread(e.pid, tid);
                        b.profile.set_thread_name(t, &e.name);
                    }
                    // Ops and batches wherever they ran, the main
                    // processes' waits for a batch.
                    Kind::Op | Kind::Batch => b.marker(e.pid, tid, e, start_ns, end_ns),
                    Kind::Wait if e.role == Role::Main => b.marker(e.pid, tid, e, start_ns, end_ns),
                    _ => {}
                }
            }
            _ => {}
        }
        Ok(())
    });
    // A folder of samples alone (`lotus trace attach`): its threads and
    // samples, no op marker.
    let summary = match summary {
        Err(Error::Trace(lotus_trace::TraceError::NoLogs { .. })) if sampled => {
            written.notes.push(
                "no trace logs (a job sampled without the tracer, as `lotus trace attach` does): the samples alone, no markers of ops or batches".into(),
            );
            b = Some(Builder::new(interval_ns));
            Default::default()
        }
        other => other?,
    };
    written.notes.extend(summary.skipped_logs.iter().cloned());
    if summary.unplaced > 0 {
        written.notes.push(format!(
            "{} event(s) outside their log's clock pairs left out",
            summary.unplaced
        ));
    }
    let mut b = match b {
        Some(b) => b,
        None => {
            return Err(Error::Io(format!(
                "{}: no trace logs (lotus_main_pid_*, lotus_worker_pid_*): give the folder `lotus trace run` wrote",
                dir.path().display()
            )))
        }
    };
    if let Some(o) = summary.wall_offset_ns.and_then(|o| u64::try_from(o).ok()) {
        b.profile
            .set_reference_timestamp(ReferenceTimestamp::from_duration_since_unix_epoch(
                Duration::from_nanos(o),
            ));
    }

    // Pass 2: the samples, streamed.
    if sampled {
        match open_samples(&files, &mut written) {
            Ok(opened) => add_samples(
                &mut b,
                &files,
                opened,
                (interval_ns, task_clock),
                &mut written,
            )?,
            Err(e) => written.samples_left_out = Some(e.to_string()),
        }
    }
    b.set_starts();
    written.processes = b.processes.len();
    written.threads = b.threads.len();
    written.markers = b.markers;
    serde_json::to_writer(&mut *out, &b.profile)
        .map_err(|e| failed("cannot write the profile".into(), &e))?;
    out.flush()
        .map_err(|e| failed("cannot write the profile".into(), &e))?;
    Ok(written)
}

/// A folder's symbols and stacks, and its samples' reader.
type Opened = (
    (SymbolTable, StackTable),
    SampleReader<BufReader<SizedFile>>,
);

/// Opens the folder's symbols, stacks and samples (a stacks file that
/// cannot be read is said, and each sample shown with its own function).
fn open_samples(files: &SampleFiles, written: &mut FirefoxWritten) -> Result<Opened> {
    let symbols = files
        .read_symbols()
        .map_err(|e| failed(format!("cannot read {}", shown(&files.symbols)), &e))?;
    written.notes.extend(symbols.skipped_note(&files.symbols));
    let stacks = files.read_stacks().unwrap_or_else(|e| {
        written.notes.push(format!(
            "{}: {e}: each sample is shown with its own function alone",
            shown(&files.stacks)
        ));
        StackTable::default()
    });
    written.notes.extend(stacks.skipped_note(&files.stacks));
    let reader = files
        .samples()
        .map_err(|e| failed(format!("cannot read {}", shown(&files.samples)), &e))?;
    Ok(((symbols, stacks), reader))
}

/// A path as messages show it.
fn shown(p: &Path) -> String {
    lotus_sys::input::escaped(&p.display().to_string())
}

/// Adds every sample of the folder to its thread, with its stack, weight
/// 1 and the CPU time it stands for: the `task-clock` counter it carries
/// (`cpu.1`: its index among the counters), else the sampling interval
/// (`cpu.0`: samples are taken every interval of a thread's CPU time).
fn add_samples(
    b: &mut Builder,
    files: &SampleFiles,
    (tables, mut reader): Opened,
    cpu: (u64, Option<usize>),
    written: &mut FirefoxWritten,
) -> Result<()> {
    let mut ids = Vec::new();
    while let Some(r) = reader.next_with_stack() {
        let (s, stack) =
            r.map_err(|e| failed(format!("cannot read {}", shown(&files.samples)), &e))?;
        written.with_stacks |= stack != 0;
        let thread = b.thread(s.pid, s.tid);
        let st = b.stack(thread, stack, s.symbol, &tables, &mut ids);
        let cpu_ns = cpu
            .1
            .and_then(|i| s.counters.as_slice().get(i).copied())
            .unwrap_or(cpu.0);
        b.profile.add_sample(
            thread,
            Timestamp::from_nanos_since_reference(s.time_ns),
            st,
            CpuDelta::from_nanos(cpu_ns),
            1,
        );
        written.samples += 1;
        b.seen(thread, s.time_ns);
    }
    if reader.cut_bytes() > 0 {
        written.notes.push(format!(
            "{}: the last {} byte(s) are a cut record: left out",
            shown(&files.samples),
            reader.cut_bytes()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
