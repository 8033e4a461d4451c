//! A job that is already running, sampled where it runs (`lotus trace
//! attach PID`): long training jobs are not restarted to be profiled.
//!
//! The process and every thread of it and of its descendants (the
//! DataLoader workers running now and those started later) are sampled
//! through the registry's streaming backend
//! ([`lotus_core::Streaming::attach_streaming`]) into a trace folder, with
//! call stacks and the Python frames of every Python the reader knows
//! (3.8 and later: a job started without lotus has no perf trampolines on,
//! so 3.12+ is read from the interpreter too), until the job ends, the
//! duration passes, or Ctrl-C (SIGTERM, SIGHUP): none of which the job is
//! sent. The folder is the one `trace run --sample` writes, without the
//! tracer's logs (the job did not import it): `lotus attribute DIR
//! --format folded`, `lotus stacks` and the views read it as they read a
//! traced run's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lotus_samples::{SampleFiles, SamplesWriter};

use crate::error::{Context, Result, RunnerError};
use crate::progress::{MessageKind, Progress};
use crate::sampled::{sample_to_end, Ending, Sampling, Started};

/// What `lotus trace attach` samples, and how.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    pid: u32,
    out: PathBuf,
    prefix: String,
    duration: Option<Duration>,
    sampling: Sampling,
    clean: bool,
}

impl AttachOptions {
    /// The running process `pid` and its descendants, sampled into the
    /// trace folder `out` (prefix `lotus`) with `sampling`, until it ends.
    pub fn new(pid: u32, out: impl Into<PathBuf>, sampling: Sampling) -> AttachOptions {
        AttachOptions {
            pid,
            out: out.into(),
            prefix: "lotus".into(),
            duration: None,
            sampling,
            clean: false,
        }
    }

    /// Stops sampling after `duration` (the job runs on).
    pub fn with_duration(mut self, duration: Option<Duration>) -> AttachOptions {
        self.duration = duration;
        self
    }

    /// The sample files' prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> AttachOptions {
        self.prefix = prefix.into();
        self
    }

    /// Removes an earlier run's samples in the folder first (else it moves
    /// to `<out>.old`, as `trace run` does).
    pub fn with_clean(mut self, clean: bool) -> AttachOptions {
        self.clean = clean;
        self
    }
}

/// What an attach left.
#[derive(Debug)]
#[non_exhaustive]
pub struct AttachRun {
    /// The trace folder, resolved.
    pub out: PathBuf,
    /// Whether the job ended while sampled (else sampling stopped at the
    /// duration or a signal, and the job runs on).
    pub job_ended: bool,
}

/// Samples the running process of `options` and its descendants into its
/// trace folder (see the module documentation); what it has to say goes
/// to `progress`. Process-wide while it runs: SIGTERM, SIGHUP and SIGINT
/// stop the sampling (the job is not sent them).
pub fn attach(options: &AttachOptions, progress: &mut dyn Progress) -> Result<AttachRun> {
    crate::run::check_prefix(&options.prefix)?;
    let pid = options.pid;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if pid == 0 || !proc_dir.exists() {
        return Err(RunnerError::Refused(format!(
            "no process {pid} is running: give the pid of the job's main process (e.g. from `pgrep -f train.py`)"
        )));
    }
    if pid == std::process::id() {
        return Err(RunnerError::Refused(format!(
            "{pid} is this lotus: give the pid of the job's main process"
        )));
    }
    let out = crate::logs::check_out_folder(&options.out)?;
    if !options.clean {
        crate::status::set_aside_earlier_run(&out, &options.prefix, progress)?;
    }
    crate::status::prepare(&out, &options.prefix, options.clean, progress)?;
    let record = crate::run_record::RunRecord::now(&command_of(pid));
    let backend = crate::sampled::sampling_backend()?;
    let name = backend.name();
    let probe = backend.probe();
    if !probe.available {
        return Err(RunnerError::Refused(format!(
            "the {name} backend cannot run here: {}",
            probe.reason.unwrap_or_default()
        )));
    }
    let streaming = backend.streaming().ok_or_else(|| {
        RunnerError::Refused(format!(
            "attaching needs a backend that streams samples; {name} does not"
        ))
    })?;
    let sampling = &options.sampling;
    let (collect, stream) = crate::sampled::backend_options(sampling);
    let files = SampleFiles::of(&out, &options.prefix);
    let writer = SamplesWriter::create(&out, &options.prefix)
        .context_with(|| format!("cannot create the sample files in {}", out.display()))?;
    // Every Python's frames: the job has no trampolines on.
    let (pyframes, sink) = crate::sampled::with_python_frames(writer, sampling, true);
    crate::job::forward_termination_signals();
    let collection = match streaming.attach_streaming(pid, &collect, &stream, sink) {
        Ok(c) => c,
        Err(e) => {
            crate::sampled::remove_sample_files(&files);
            return Err(RunnerError::Refused(format!(
                "cannot attach to process {pid}: {e}"
            )));
        }
    };
    progress.message(
        MessageKind::Note,
        &format!(
            "attached to process {pid} ({}): sampling it and its descendants until it ends{}; Ctrl-C stops sampling, the job runs on",
            record.command.join(" "),
            match options.duration {
                Some(d) => format!(" or for {:.1} s", d.as_secs_f64()),
                None => String::new(),
            }
        ),
    );
    let started = Started {
        collection,
        pyframes,
        name,
        counters_asked: sampling.counters_asked,
        stacks: sampling.stacks,
        attached: Some(pid),
    };
    let deadline = options.duration.map(|d| Instant::now() + d);
    let ended = sample_to_end(started, &files, Ending::Attached(deadline), progress)?;
    let note = format!(
        "attached to process {pid}: sampled {}",
        if ended.is_some() {
            "until it ended"
        } else {
            "part of its run (it runs on)"
        }
    );
    if let Err(e) = record.with_notes(vec![note]).write(&out, &options.prefix) {
        progress.message(
            MessageKind::Warning,
            &format!("warning: {}", crate::error::with_causes(&e)),
        );
    }
    Ok(AttachRun {
        out,
        job_ended: ended.is_some(),
    })
}

/// The command line of process `pid` (`/proc/PID/cmdline`), for the run's
/// record; its program name where that cannot be read.
fn command_of(pid: u32) -> Vec<String> {
    let path = Path::new("/proc").join(pid.to_string());
    let words: Vec<String> = std::fs::read(path.join("cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|w| !w.is_empty())
                .take(64)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect()
        })
        .unwrap_or_default();
    if words.is_empty() {
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        return vec![format!("[{}]", comm.trim())];
    }
    words
}
