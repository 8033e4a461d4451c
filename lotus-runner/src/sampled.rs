//! A traced job sampled: the trace as without samples, and every process
//! and thread of the job sampled from start to end through the registry's
//! streaming backend ([`lotus_core::streaming_backend`]), each sample
//! (time, pid, tid, function) written into the trace folder as it comes
//! (`<prefix>.samples`, `<prefix>.symbols`, `<prefix>.sampling`: see
//! [`lotus_samples`]). The backend is asked for its capabilities
//! ([`lotus_core::Profiler::streaming`], `calibration`): a backend that
//! does not stream samples is named in the reason the trace runs without
//! them.
//!
//! At the end `<prefix>.sampling` also says what the samples cover:
//! `cpu_ns=` (the CPU time the job ran while sampled, as the kernel counted
//! it) and `samples_added=` (samples, among `samples=`, that stand for the
//! unsampled last period of exited threads; see the perf backend's
//! `SampleCoverage`); where samples are known to be missing, a `note=`
//! line and a message say so with the figures.
//!
//! Where the backend cannot run (no `perf_event_open`, not permitted), the
//! job is traced without samples and the runner says why, in a message and
//! in `<prefix>.sampling` (`status=unavailable`), so that `lotus attribute
//! DIR` can say it too.
//!
//! The counters asked for (`lotus trace run --counters`, default
//! `cycles,instructions`) are read with each sample: `counters=` in
//! `<prefix>.sampling` names them in record order. Where the kernel
//! refuses them (no PMU, as in most virtual machines), the samples carry
//! none, `counters_unsupported=` and `counters_reason=` say which and
//! why (`counters_kind=`: hardware or software), and a message says it
//! once.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lotus_core::{
    CallStacks, CollectOptions, CountersRead, SampleCost, SampleCounter, StreamOptions,
    StreamReport, Target,
};
use lotus_samples::{write_sampling, SampleFiles, SamplesWriter};

use crate::error::{with_causes, Context, Result, RunnerError};
use crate::progress::{MessageKind, Progress};
use crate::status::{failed_pairs, sampling_text, StatusFile};

/// Set by Ctrl-C while a sampled job runs: the job is in its own process
/// group (the backend puts it there), so the runner passes the interrupt
/// on.
pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The sampling frequency a [`Sampling`] starts with (Hz).
pub const DEFAULT_FREQUENCY_HZ: u64 = 1000;

/// How a traced job is sampled ([`crate::TraceOptions::with_sampling`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampling {
    /// Samples per second of CPU time, per thread.
    pub frequency_hz: u64,
    /// The counters read with each sample, in order (none: empty).
    pub counters: Vec<SampleCounter>,
    /// Whether the user asked for `counters` (else they are the defaults):
    /// recorded (`counters_asked=`), so that the commands that read the
    /// folder repeat the note of counters refused only where asked for.
    pub counters_asked: bool,
    /// The call stacks taken with each sample.
    pub stacks: CallStacks,
}

impl Default for Sampling {
    /// [`DEFAULT_FREQUENCY_HZ`], no counters, no call stacks.
    fn default() -> Sampling {
        Sampling {
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            counters: Vec::new(),
            counters_asked: false,
            stacks: CallStacks::None,
        }
    }
}

/// The counters read with each sample where none are asked for.
pub const DEFAULT_COUNTERS: &str = "cycles,instructions";

/// The counters `text` names: comma-separated perf event names the
/// streaming backend can read with each sample, each at most once, or
/// `none` (empty); an error naming the counter and the choices.
pub fn sample_counters(text: &str) -> std::result::Result<Vec<SampleCounter>, String> {
    if text.trim() == "none" {
        return Ok(Vec::new());
    }
    let all = lotus_core::streaming_backend()
        .and_then(|b| b.streaming().map(|s| s.sample_counters()))
        .unwrap_or_default();
    let known = || all.iter().map(|k| k.name).collect::<Vec<_>>().join(", ");
    let mut kinds = Vec::new();
    for name in text.split(',').map(str::trim) {
        let kind = all
            .iter()
            .copied()
            .find(|k| k.name == name)
            .ok_or_else(|| {
                format!(
                    "unknown counter {name:?}: give comma-separated names among {}, or `none`",
                    known()
                )
            })?;
        if kinds.contains(&kind) {
            return Err(format!("counter {name:?} is named twice"));
        }
        kinds.push(kind);
    }
    Ok(kinds)
}

/// The name `<prefix>.sampling` gives call stacks (`stacks=`).
pub(crate) fn stacks_name(stacks: CallStacks) -> &'static str {
    match stacks {
        CallStacks::FramePointers => "fp",
        CallStacks::Dwarf => "dwarf",
        _ => "none",
    }
}

/// The backend the samples come from: the registry's that streams its
/// samples ([`lotus_core::streaming_backend`]).
pub(crate) fn sampling_backend() -> Result<Box<dyn lotus_core::Profiler>> {
    lotus_core::streaming_backend().ok_or_else(|| {
        RunnerError::Refused("no linked profiler backend streams its samples (this lotus was built without the perf backend)".into())
    })
}

/// The `.sampling` lines that say which counters the samples carry, or
/// which were refused and why.
fn counter_pairs(counters: &CountersRead, asked: bool) -> Vec<(&'static str, String)> {
    let names =
        |kinds: &[SampleCounter]| kinds.iter().map(|k| k.name).collect::<Vec<_>>().join(",");
    let mut pairs = Vec::new();
    if !counters.read.is_empty() {
        pairs.push(("counters", names(&counters.read)));
    }
    if let Some(u) = &counters.refused {
        pairs.push(("counters_unsupported", names(&u.asked)));
        let hardware = u.asked.iter().any(|k| k.hardware);
        pairs.push((
            "counters_kind",
            if hardware { "hardware" } else { "software" }.into(),
        ));
        pairs.push(("counters_reason", u.reason.clone()));
        pairs.push((
            "counters_asked",
            if asked { "yes" } else { "default" }.into(),
        ));
    }
    pairs
}

/// How often the runner looks whether the job has ended.
const POLL: Duration = Duration::from_millis(20);

/// Runs `cmd` (the traced job, its environment set) under the streaming
/// backend, the samples written into `out`; without samples when it
/// cannot run here (or does not stream samples). The job's exit status.
pub(crate) fn run(
    cmd: &mut Command,
    out: &Path,
    prefix: &str,
    sampling: &Sampling,
    keep_fds: &[std::os::fd::RawFd],
    progress: &mut dyn Progress,
) -> Result<ExitStatus> {
    let files = SampleFiles::of(out, prefix);
    let mut target = Target::new(cmd.get_program());
    target.keep_fds = keep_fds.to_vec();
    target.args = cmd.get_args().map(Into::into).collect();
    target.env = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let backend = sampling_backend()?;
    let name = backend.name();
    let probe = backend.probe();
    if !probe.available {
        return unavailable(
            cmd,
            &files,
            name,
            format!(
                "the {name} backend cannot run here: {}",
                probe.reason.unwrap_or_default()
            ),
            progress,
        );
    }
    let Some(streaming) = backend.streaming() else {
        return unavailable(
            cmd,
            &files,
            name,
            format!("`--sample` needs a backend that streams samples; {name} does not"),
            progress,
        );
    };
    let (options, stream) = backend_options(sampling);
    let writer = match SamplesWriter::create(out, prefix) {
        Ok(w) => w,
        Err(e) => {
            // `prepare` left none: what is there now is this run's, cut
            // short (one created, the next refused). Leave nothing that
            // would block the next run.
            for path in [&files.samples, &files.symbols, &files.stacks] {
                if path
                    .symlink_metadata()
                    .is_ok_and(|m| m.is_file() && m.len() <= 64)
                {
                    let _ = std::fs::remove_file(path);
                }
            }
            return Err(e)
                .context_with(|| format!("cannot create the sample files in {}", out.display()));
        }
    };
    // Python frames for the Pythons without trampolines, where the samples
    // carry stacks.
    let (pyframes, sink) = with_python_frames(writer, sampling, false);
    let collection = match streaming.start_streaming(&target, &options, &stream, sink) {
        Ok(c) => c,
        Err(e) => {
            // Nothing was sampled: leave no empty sample files behind.
            remove_sample_files(&files);
            return unavailable(
                cmd,
                &files,
                name,
                format!("{name} sampling could not start: {e}"),
                progress,
            );
        }
    };
    let started = Started {
        collection,
        pyframes,
        name,
        counters_asked: sampling.counters_asked,
        stacks: sampling.stacks,
        attached: None,
    };
    let exit = sample_to_end(started, &files, Ending::Job, progress)?;
    // A job lotus started always leaves its status.
    Ok(exit.unwrap_or_else(|| std::os::unix::process::ExitStatusExt::from_raw(0)))
}

/// What the backend is asked for: the whole run one window, at
/// `sampling`'s frequency, with its counters and call stacks.
pub(crate) fn backend_options(sampling: &Sampling) -> (CollectOptions, StreamOptions) {
    let mut options = CollectOptions::default();
    options.frequency_hz = Some(sampling.frequency_hz);
    options.whole_program = true;
    let stream = StreamOptions::default()
        .with_counters(
            sampling
                .counters
                .iter()
                .map(|c| c.name.to_string())
                .collect(),
        )
        .with_stacks(sampling.stacks);
    (options, stream)
}

/// The sink the samples go to: `writer`, behind the reader of the Python
/// frames where the samples carry stacks (of every Python with
/// `every_version`, else of those without perf trampolines).
pub(crate) fn with_python_frames(
    writer: SamplesWriter,
    sampling: &Sampling,
    every_version: bool,
) -> (
    Option<lotus_pyframes::PyFrames>,
    Box<dyn lotus_samples::SampleSink>,
) {
    let pyframes = match sampling.stacks {
        CallStacks::None => None,
        _ => lotus_pyframes::PyFrames::start(sampling.frequency_hz, every_version).ok(),
    };
    let sink: Box<dyn lotus_samples::SampleSink> = match &pyframes {
        Some(p) => Box::new(p.sink(writer)),
        None => Box::new(writer),
    };
    (pyframes, sink)
}

/// The sample files of `files`, removed (a run that sampled nothing).
pub(crate) fn remove_sample_files(files: &SampleFiles) {
    let _ = std::fs::remove_file(&files.samples);
    let _ = std::fs::remove_file(&files.symbols);
    let _ = std::fs::remove_file(&files.stacks);
}

/// A sampled collection under way, with what its description needs.
pub(crate) struct Started {
    /// The collection, its one window not opened yet.
    pub collection: Box<dyn lotus_core::SampleStream>,
    /// The Python frames' reader, where the samples carry stacks.
    pub pyframes: Option<lotus_pyframes::PyFrames>,
    /// The backend's name.
    pub name: &'static str,
    /// Whether the counters were asked for (`counters_asked=`).
    pub counters_asked: bool,
    /// The call stacks asked for.
    pub stacks: CallStacks,
    /// The process attached to (`lotus trace attach`); `None` for a job
    /// lotus started.
    pub attached: Option<u32>,
}

/// When sampling ends.
pub(crate) enum Ending {
    /// A job lotus started: at its end; Ctrl-C, SIGTERM and SIGHUP are
    /// passed on to it.
    Job,
    /// A process lotus attached to: at its end, at the deadline, or at
    /// Ctrl-C, SIGTERM or SIGHUP, none of which the job is sent.
    Attached(Option<std::time::Instant>),
}

/// Samples `started` in one window until `ending`, `<prefix>.sampling`
/// (`files.sampling`) saying how it goes and, at the end, what the samples
/// hold. The job's exit status where it ended (`None`: an attached job
/// still running).
pub(crate) fn sample_to_end(
    started: Started,
    files: &SampleFiles,
    ending: Ending,
    progress: &mut dyn Progress,
) -> Result<Option<ExitStatus>> {
    let Started {
        mut collection,
        pyframes,
        name,
        counters_asked,
        stacks,
        attached,
    } = started;
    if let Some(p) = &pyframes {
        p.watch(collection.pid());
    }
    let hz = collection.frequency_hz();
    let kernel = collection.kernel_samples();
    // What the samples carry: `fp` asked for and refused is said here,
    // and the kernel's reason in a note of the sampling description.
    let asked = stacks;
    let stacks = match collection.call_stacks() {
        CallStacks::Dwarf => CallStacks::Dwarf,
        CallStacks::FramePointers => CallStacks::FramePointers,
        _ => CallStacks::None,
    };
    if stacks_name(asked) != stacks_name(stacks) {
        let carried = match stacks {
            CallStacks::FramePointers => "frame-pointer stacks instead",
            _ => "none",
        };
        progress.message(
            MessageKind::Warning,
            &format!(
                "the kernel refused {} call stacks here: the samples carry {carried} (why: a note in {})",
                stacks_name(asked),
                files.sampling.display()
            ),
        );
    }
    let read = collection.counters_read();
    let counters = counter_pairs(&read, counters_asked);
    if let Some(refused) = &read.refused {
        progress.message(
            MessageKind::Warning,
            &format!("{}; the samples carry no counters", refused.note),
        );
    }
    let described = |status: &str, cost: Option<SampleCost>, extra: Vec<(&'static str, String)>| {
        let mut pairs = vec![
            ("backend", name.to_string()),
            ("status", status.to_string()),
            ("frequency_hz", hz.to_string()),
            ("interval_ns", (1_000_000_000 / hz.max(1)).to_string()),
            ("clock", "monotonic".to_string()),
            ("kernel", u8::from(kernel).to_string()),
            ("stacks", stacks_name(stacks).to_string()),
        ];
        if let Some(pid) = attached {
            pairs.push(("attached_pid", pid.to_string()));
        }
        if let Some(c) = cost {
            pairs.push((
                "sampling_cost_us",
                format!("{:.2}", c.per_sample.as_secs_f64() * 1e6),
            ));
            pairs.push((
                "sampling_slowdown_pct",
                format!("{:.1}", c.slowdown_at(hz) * 100.0),
            ));
        }
        pairs.extend(counters.iter().cloned());
        pairs.extend(extra);
        pairs
    };
    let me = std::process::id();
    let lotus = vec![
        ("lotus_pid", me.to_string()),
        (
            "lotus_start",
            lotus_sys::process::start_time(me).map_or_else(|| "-".into(), |t| t.to_string()),
        ),
    ];
    let status =
        match StatusFile::start(&files.sampling, &described("running", None, lotus.clone())) {
            Ok(status) => status,
            Err(e) => {
                // The job never ran (dropping the collection ends it; an
                // attached one is left running): leave no empty sample
                // files to block the next run.
                drop(collection);
                remove_sample_files(files);
                return Err(e);
            }
        };
    // Out of memory from here on: the status says so, and the job's group
    // is ended (see crate::oom); a job lotus attached to is left alone.
    {
        let mut oom = described("failed", None, lotus.clone());
        oom.insert(
            2,
            (
                "reason",
                "out of memory: lotus could not allocate; the job was ended".into(),
            ),
        );
        crate::oom::on_oom_write(&files.sampling, sampling_text(&oom).into_bytes());
        if matches!(ending, Ending::Job) {
            crate::oom::on_oom_signal_group(collection.pid());
        }
    }
    // Every way out below writes the last word: failed with why, or
    // complete.
    let fail = |e: RunnerError, progress: &mut dyn Progress| -> RunnerError {
        crate::oom::on_oom_write_cancel();
        let mut pairs = described("failed", None, lotus.clone());
        let [st, reason] = failed_pairs(&with_causes(&e));
        pairs[1] = st;
        pairs.insert(2, reason);
        if let Err(w) = status.finish(&pairs) {
            progress.message(MessageKind::Error, &with_causes(&w));
        }
        e
    };
    // The whole run is one window, open from now on.
    collection
        .resume()
        .map_err(|e| fail(e.into(), &mut *progress))?;
    let mut interrupted = false;
    let exit = loop {
        if let Some(exit) = collection
            .try_wait()
            .map_err(|e| fail(e.into(), &mut *progress))?
        {
            break Some(exit);
        }
        let group = -(collection.pid() as libc::pid_t);
        match ending {
            Ending::Job => {
                if INTERRUPTED.swap(false, Ordering::SeqCst) && !interrupted {
                    interrupted = true;
                    // SAFETY: kill with a process group id and a signal number.
                    unsafe { libc::kill(group, libc::SIGINT) };
                }
                if let Some(signal) = crate::job::signal_to_forward().filter(|&s| s != libc::SIGINT)
                {
                    // SIGTERM or SIGHUP sent to lotus: the job's group gets it too
                    // (SIGINT, above, once).
                    // SAFETY: kill with a process group id and a signal number.
                    unsafe { libc::kill(group, signal) };
                }
                if crate::job::insisted(&mut *progress) {
                    // SAFETY: kill with a process group id and a signal number.
                    unsafe { libc::kill(group, libc::SIGKILL) };
                }
            }
            Ending::Attached(deadline) => {
                let signalled = INTERRUPTED.swap(false, Ordering::SeqCst)
                    || crate::job::signal_to_forward().is_some();
                if signalled || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    break None;
                }
            }
        }
        std::thread::sleep(POLL);
    };
    // What each sample costs the job's threads here: measured (about
    // 0.1 s of one CPU) once the job has ended, beside the stream's last
    // work, so that neither the job's wall time nor the CPUs it shares pay
    // for it (it ran while the job started until 2026-11-28: 7% of lotus's
    // CPU while a 5 s job ran); recorded at the end.
    let calibration = std::thread::Builder::new()
        .name("lotus-cost".into())
        .spawn(|| {
            // The registry's backend again: the thread outlives this borrow.
            let backend = lotus_core::streaming_backend()?;
            backend.calibration()?.sampling_cost().ok()
        })
        .ok();
    // The per-window counters mean nothing in a trace that is one window
    // (the stream's report leaves their notes out); the counters read with
    // the samples are reported on their own, once.
    let report = collection
        .finish_stream()
        .map_err(|e| fail(e.into(), &mut *progress))?;
    let mut extra = summary(&report, progress);
    if let Some(p) = pyframes {
        extra.extend(python_frames_pairs(p.finish(), progress));
    }
    let cost = calibration.and_then(|t| t.join().ok()).flatten();
    let mut pairs = described("complete", cost, extra);
    if let Some(e) = &report.write_error {
        let [st, reason] = failed_pairs(&format!("writing the samples failed: {e}"));
        pairs[1] = st;
        pairs.insert(2, reason);
    }
    pairs.extend(lotus);
    // The last word is written below: an allocation failing while it is
    // written must not put the older one back.
    crate::oom::on_oom_write_cancel();
    status.finish(&pairs)?;
    Ok(exit)
}

/// Runs `cmd` without samples, saying why (on stderr and in
/// `<prefix>.sampling`, with the `backend` that could not sample).
fn unavailable(
    cmd: &mut Command,
    files: &SampleFiles,
    backend: &str,
    reason: String,
    progress: &mut dyn Progress,
) -> Result<ExitStatus> {
    progress.message(
        MessageKind::Warning,
        &format!("no samples: {reason}; the trace runs without them"),
    );
    write_sampling(
        &files.sampling,
        &[
            ("backend", backend.into()),
            ("status", "unavailable".into()),
            ("reason", reason),
        ],
    )
    .context_with(|| format!("cannot write {}", files.sampling.display()))?;
    // As without --sample: signals passed on, a parent-death signal.
    let program = std::path::PathBuf::from(cmd.get_program());
    crate::job::run_plain(cmd, &program, progress)
}

/// What the Python frames read from the interpreters gave, for
/// `<prefix>.sampling` (`python_frames=interpreter`, the samples given
/// them), and the processes that could not be read, said.
fn python_frames_pairs(
    report: lotus_pyframes::PyFramesReport,
    progress: &mut dyn Progress,
) -> Vec<(&'static str, String)> {
    for note in report.notes() {
        progress.message(MessageKind::Note, &format!("note: {note}"));
    }
    if report.given == 0 {
        return Vec::new();
    }
    vec![
        ("python_frames", "interpreter".into()),
        ("python_frames_samples", report.given.to_string()),
        // Samples that ran Python and got no frames.
        ("python_frames_missed", report.missed.to_string()),
        ("python_frames_processes", report.processes.to_string()),
        // What reading them cost: the snapshots, and the reading thread's
        // CPU time for them (what a user weighs against the job's).
        ("python_frames_reads", report.reads.to_string()),
        ("python_frames_failed", report.failed.to_string()),
        (
            "python_frames_cpu_ms",
            format!("{:.1}", report.read_cpu_ns as f64 / 1e6),
        ),
    ]
}

/// The end figures for `<prefix>.sampling`, and what the user is told.
fn summary(report: &StreamReport, progress: &mut dyn Progress) -> Vec<(&'static str, String)> {
    let mut pairs = vec![
        ("samples", report.samples.to_string()),
        ("symbols", report.symbols.to_string()),
        ("stack_count", report.stacks.to_string()),
        ("deep_samples", report.deep_samples.to_string()),
        ("lost", report.lost.to_string()),
    ];
    match &report.write_error {
        Some(e) => {
            progress.message(
                MessageKind::Warning,
                &format!(
                    "writing the samples failed after {} of them: {e}",
                    report.samples
                ),
            );
            pairs.push(("write_error", e.clone()));
        }
        None => progress.message(
            MessageKind::Warning,
            &format!(
                "{} samples at {} Hz ({} functions{}){}",
                report.samples,
                report.frequency_hz,
                report.symbols,
                if report.stacks > 0 {
                    format!(
                        ", {} call stacks, {:.0}% of the samples with a caller",
                        report.stacks,
                        report.deep_samples as f64 * 100.0 / report.samples.max(1) as f64
                    )
                } else {
                    String::new()
                },
                if report.lost > 0 {
                    format!(", {} lost", report.lost)
                } else {
                    String::new()
                }
            ),
        ),
    }
    // What the samples cover of the CPU time the job ran: the samplers'
    // count, and the samples added for exited threads' last periods (in
    // `samples`); where samples are missing, a note says so with the
    // figures, here and on stderr.
    if let Some(cpu_ns) = report.cpu_ns {
        pairs.push(("cpu_ns", cpu_ns.to_string()));
    }
    pairs.push(("samples_added", report.samples_added.to_string()));
    for note in &report.coverage_notes {
        progress.message(MessageKind::Warning, &format!("note: {note}"));
    }
    for note in &report.notes {
        // Frames that could not be named for this run's own reason (a
        // perf map refused): said now too, as the run's settings are.
        if note.starts_with("JIT frames") {
            progress.message(MessageKind::Warning, &format!("note: {note}"));
        }
        pairs.push(("note", note.clone()));
    }
    pairs
}
