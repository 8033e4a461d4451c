//! A program run with tracing on and no change to its code.
//!
//! The `lotus_trace` Python package (from `lotus-tracer`) is written to a
//! private temp folder; the folder and the package's start-up hook
//! (`lotus_trace/_boot/sitecustomize.py`) go first on `PYTHONPATH`, and
//! `LOTUS_TRACE_DIR` names the trace folder. Every Python process the
//! program starts (DataLoader workers, forked or spawned, and launched
//! ranks) inherits the environment, so each writes its own log,
//! `DIR/<prefix>_main_pid_<pid>` or `DIR/<prefix>_worker_pid_<pid>`. An
//! existing `sitecustomize` on the path still runs (the hook chains to it).
//!
//! The trace folder must be one no other user can write: the job, often
//! run as root, creates files there by predictable names. Each run has an
//! id (`LOTUS_TRACE_RUN`, written in each log's header), so that only this
//! run's logs are counted; a process that cannot write its log says so
//! through a file in the runner's private status folder
//! (`LOTUS_TRACE_STATUS`), or, where it dropped its privileges, through an
//! inherited pipe (`LOTUS_TRACE_REPORT_FD`): [`TraceRun::failures`]. The
//! runner is the job's subreaper: when the main process ends, every
//! process it left (workers, daemons) is ended too.
//!
//! Signals and faults: SIGTERM, SIGHUP and SIGINT sent to the process are
//! passed on to the job (a terminal's Ctrl-C reaches a plain job directly
//! and is not passed on twice); the tracer writes its buffered events on
//! each of them before the program's own action. Should the process be
//! killed outright (`kill -9`, the OOM killer), the job does not run on
//! unwatched: its main process gets a parent-death signal (plain runs),
//! and the tracer in every process watches the runner's process
//! (`LOTUS_TRACE_LOTUS`, `<pid>:<start time>`) and ends its process once
//! it is gone.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use lotus_sys::process as reaper;
use lotus_tracer::{
    ENV_PY_FRAMES, ENV_TRACE_DIR, ENV_TRACE_ITT, ENV_TRACE_LOTUS, ENV_TRACE_OPS, ENV_TRACE_PREFIX,
    ENV_TRACE_REPORT, ENV_TRACE_RUN, ENV_TRACE_STATUS, ENV_TRACE_TORCH,
};

use crate::error::{Context, Result, RunnerError};
use crate::logs::{check_out_folder, is_log_of_run, logs_in, new_run_id};
use crate::progress::{MessageKind, Progress};
use crate::reports::{trace_failures, Reports};
use crate::run_record::RunRecord;
use crate::sampled::Sampling;
use crate::tracer::{write_tracer, TracerFiles};

/// How long the processes a job leaves have, after SIGTERM, before SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// The variable that names an ITT collector library (VTune's, or lotus's
/// control library).
const ENV_ITT_COLLECTOR: &str = "INTEL_LIBITTNOTIFY64";

/// The log lines the tracer writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// A header line and `key=value` fields (what `lotus_trace` reads).
    #[default]
    Lotus,
    /// `S<Name>,<start_ns>,<duration_ns>` only: the original fork's three
    /// columns, which the study's scripts read (no header, so no samples).
    Original,
}

/// Where the control library (`liblotus_control.so`, lotus's ITT
/// collector) comes from for a run: given the run's private folder, its
/// path, or why there is none.
pub type ControlLibrary = Box<dyn Fn(&Path) -> std::result::Result<PathBuf, String>>;

/// What to run and how to trace it ([`run_traced`]).
pub struct TraceOptions {
    command: Vec<String>,
    out: PathBuf,
    prefix: String,
    clean: bool,
    torch: bool,
    itt_tasks: bool,
    format: LogFormat,
    sampling: Option<Sampling>,
    ops: Vec<String>,
    control_library: Option<ControlLibrary>,
}

impl std::fmt::Debug for TraceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceOptions")
            .field("command", &self.command)
            .field("out", &self.out)
            .field("prefix", &self.prefix)
            .field("clean", &self.clean)
            .field("torch", &self.torch)
            .field("itt_tasks", &self.itt_tasks)
            .field("format", &self.format)
            .field("sampling", &self.sampling)
            .field("ops", &self.ops)
            .field("control_library", &self.control_library.is_some())
            .finish()
    }
}

impl TraceOptions {
    /// `command` (the program, found on `PATH` or as a path, and its
    /// arguments) traced into the folder `out` (created if missing), logs
    /// named with the prefix `lotus`, torch patched, the lotus format, no
    /// samples.
    pub fn new(out: impl Into<PathBuf>, command: Vec<String>) -> TraceOptions {
        TraceOptions {
            command,
            out: out.into(),
            prefix: "lotus".into(),
            clean: false,
            torch: true,
            itt_tasks: false,
            format: LogFormat::Lotus,
            sampling: None,
            ops: Vec::new(),
            control_library: None,
        }
    }

    /// Log file names `<prefix>_main_pid_<pid>`, `<prefix>_worker_pid_<pid>`
    /// (letters, digits, `-`, `_`, `.`: [`check_prefix`]).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> TraceOptions {
        self.prefix = prefix.into();
        self
    }

    /// Removes the logs (and samples) of the prefix already in the folder
    /// first (else they stay, with a warning; samples of an earlier run
    /// are refused).
    pub fn with_clean(mut self, clean: bool) -> TraceOptions {
        self.clean = clean;
        self
    }

    /// Whether torch and torchvision are patched (else only what the
    /// program marks itself is traced).
    pub fn with_torch(mut self, torch: bool) -> TraceOptions {
        self.torch = torch;
        self
    }

    /// Also traces the ITT tasks the job's libraries begin and end,
    /// through the control library [`with_control_library`] names.
    ///
    /// [`with_control_library`]: TraceOptions::with_control_library
    pub fn with_itt_tasks(mut self, itt_tasks: bool) -> TraceOptions {
        self.itt_tasks = itt_tasks;
        self
    }

    /// The log lines' format.
    pub fn with_format(mut self, format: LogFormat) -> TraceOptions {
        self.format = format;
        self
    }

    /// Also samples every process and thread of the job through the
    /// registry's streaming backend, into the folder beside the logs
    /// (refused with [`LogFormat::Original`]).
    pub fn with_sampling(mut self, sampling: Sampling) -> TraceOptions {
        self.sampling = Some(sampling);
        self
    }

    /// Functions and methods of the job's own code traced as ops,
    /// `MODULE:QUALNAME` each (`LOTUS_TRACE_OPS`).
    pub fn with_ops(mut self, ops: Vec<String>) -> TraceOptions {
        self.ops = ops;
        self
    }

    /// Where the control library comes from, for [`with_itt_tasks`].
    ///
    /// [`with_itt_tasks`]: TraceOptions::with_itt_tasks
    pub fn with_control_library(mut self, library: ControlLibrary) -> TraceOptions {
        self.control_library = Some(library);
        self
    }

    /// The program and its arguments.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The log files' prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How the job is sampled, if it is.
    pub fn sampling(&self) -> Option<&Sampling> {
        self.sampling.as_ref()
    }
}

/// What a traced run left ([`run_traced`]).
#[derive(Debug)]
pub struct TraceRun {
    /// The program's exit status.
    pub status: ExitStatus,
    /// The trace folder, resolved.
    pub out: PathBuf,
    /// This run's logs (sorted).
    pub logs: Vec<PathBuf>,
    /// How many of them are workers'.
    pub workers: usize,
    /// Their bytes.
    pub bytes: u64,
    /// How many logs of ITT tasks the run wrote.
    pub itt_logs: usize,
    /// What each process that could not write its log said, one per
    /// process: the trace is incomplete where there are some.
    pub failures: Vec<String>,
    /// The warnings of the `--op`s that matched nothing (also said, and
    /// kept in the run's record).
    pub op_warnings: Vec<String>,
}

impl TraceRun {
    /// The exit code that passes the program's status through, as a shell
    /// gives it: its code, or 128 + the signal that ended it.
    pub fn exit_code(&self) -> u8 {
        use std::os::unix::process::ExitStatusExt;
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => code.clamp(0, 255) as u8,
            (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
            _ => 1,
        }
    }

    /// What the run wrote, in a line: its logs (main, workers), bytes and
    /// logs of ITT tasks, as a [`MessageKind::Note`]; or that it wrote
    /// none (the program was not Python, or ran nothing traced), as a
    /// [`MessageKind::Warning`].
    pub fn written(&self) -> (crate::MessageKind, String) {
        let n = self.logs.len();
        if n == 0 && self.itt_logs == 0 && self.failures.is_empty() {
            let line = format!(
                "no trace written to {}: was the program Python, and did it run a DataLoader or traced code? (lotus_trace needs Python 3.8+)",
                self.out.display()
            );
            return (crate::MessageKind::Warning, line);
        }
        let itt = match self.itt_logs {
            0 => String::new(),
            k => format!(", and {k} log(s) of ITT tasks"),
        };
        let (out, workers, bytes) = (self.out.display(), self.workers, self.bytes);
        let line = format!(
            "trace in {out}: {n} log(s) ({} main, {workers} worker), {bytes} bytes{itt}",
            n - workers
        );
        (crate::MessageKind::Note, line)
    }

    /// What to say of the logs lost ([`TraceRun::failures`]), once each
    /// is said: the trace incomplete, and what to do. Where the run was
    /// sampled (`sampled`, logs of `prefix`), its `.sampling` is marked
    /// failed too ([`crate::mark_failed`]); an error doing so is said as
    /// the first line. Empty where no log was lost.
    pub fn lost_logs(&self, sampled: bool, prefix: &str) -> Vec<String> {
        let Some(first) = self.failures.first() else {
            return Vec::new();
        };
        let n = self.failures.len();
        let mut lines = Vec::new();
        if sampled {
            let reason =
                format!("{n} process(es) could not write their trace logs; the first: {first}");
            if let Err(e) = crate::mark_failed(&self.out, prefix, &reason) {
                lines.push(format!("{e}"));
            }
        }
        let denied = self
            .failures
            .iter()
            .filter(|f| f.contains("Permission denied") || f.contains("Errno 13"))
            .count();
        let fix = if denied > 0 {
            format!(
                "{denied} of them were refused the folder (a process that dropped its privileges, e.g. os.setuid, runs as a user that may not write there, nor into lotus's private folder): run lotus itself as that user (e.g. `setpriv --reuid=USER --regid=GROUP --init-groups lotus trace run ...`) rather than dropping privileges inside the job"
            )
        } else {
            "free space there (or choose another --out) and run again".into()
        };
        lines.push(format!(
            "error: the trace in {} is incomplete: {n} process(es) could not write their logs (above); {fix}",
            self.out.display()
        ));
        lines
    }
}

/// Checks a log prefix: letters, digits, `-`, `_` or `.` (it starts each
/// log file's name).
pub fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty()
        || !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(RunnerError::Refused(format!("--prefix {prefix:?}: use letters, digits, '-', '_' or '.' (it starts each log file's name)")));
    }
    Ok(())
}

/// The refusal of samples in the original format.
const SAMPLES_NEED_LOTUS_FORMAT: &str = "--sample cannot be used with --format original: the original format's lines carry no sample ids, batch fields or clock pairs, so `lotus attribute` could never credit the samples to ops. Drop --format original (the lotus format is read by `lotus trace view` and `lotus attribute`), or drop --sample";

/// Refuses, before anything is created, what cannot run: a bad prefix,
/// too few file descriptors, samples in the original format. Called by
/// [`run_traced`]; a caller may call it first to say so as it likes.
pub fn check_options(options: &TraceOptions) -> Result<()> {
    check_prefix(&options.prefix)?;
    crate::limits::check_descriptor_limit()?;
    if options.sampling.is_some() && options.format == LogFormat::Original {
        // Refused before anything runs: the samples could never be
        // attributed, and the job would have run for nothing.
        return Err(RunnerError::Refused(SAMPLES_NEED_LOTUS_FORMAT.into()));
    }
    Ok(())
}

/// Runs the job of `options` to its end, traced (and sampled where asked),
/// the processes it left ended, its logs found and cut where their
/// processes were killed, its record (`<prefix>.run`) written. What it
/// has to say goes to `progress`, as it happens.
///
/// Process-wide: while it runs, the process is the job's subreaper and
/// SIGTERM, SIGHUP and SIGINT are passed on to the job (their handlers
/// stay installed).
pub fn run_traced(options: &TraceOptions, progress: &mut dyn Progress) -> Result<TraceRun> {
    check_options(options)?;
    let (program, rest) = options
        .command
        .split_first()
        .ok_or_else(|| RunnerError::Refused("give the program to trace after --".into()))?;
    let program_path = which::which(program)
        .context_with(|| format!("{program}: no such program (on PATH or as a path)"))?;
    let out = check_out_folder(&options.out)?;
    if options.sampling.is_some() && !options.clean {
        crate::status::set_aside_earlier_run(&out, &options.prefix, progress)?;
    }
    let before = prepare_folder(options, &out, progress)?;

    // What `lotus report` shows at the top of its page: the command, host,
    // CPU, date and lotus version (`<prefix>.run`), taken now and written
    // once the job has written logs.
    let record = RunRecord::now(&options.command);
    let files =
        write_tracer().context_with(|| "cannot write the lotus_trace Python package".into())?;
    // Out of memory, lotus exits at once: the tracer's folder goes too.
    crate::oom::remove_on_oom(files.dir.path());
    let status_dir = files
        .dir
        .create_dir(Path::new("status"))
        .context_with(|| "cannot create the tracer's status folder".into())?;
    let run_id = new_run_id();
    let (mut cmd, mut reports) = job_command(
        options,
        &program_path,
        rest,
        &out,
        &files,
        &status_dir,
        &run_id,
        progress,
    )?;

    let started = std::time::SystemTime::now();
    let status = run_job(
        options,
        &mut cmd,
        &out,
        &program_path,
        reports.as_mut(),
        progress,
    )?;
    // The samples are named: the perf maps the tracer made can go.
    for left in crate::perf_maps::remove_made_maps(&status_dir).left {
        progress.message(
            MessageKind::Warning,
            &format!("warning: a perf map of the job stays in /tmp: {left}"),
        );
    }

    let (new, itt_logs) = this_runs_logs(options, &out, &before, &run_id);
    // The `--op` warnings, said now and kept in the record for the
    // commands that read the folder later.
    let op_warnings = ops_report(&options.ops, &status_dir, progress);
    let record = record.with_notes(op_warnings.clone());
    let lotus_format = options.format == LogFormat::Lotus;
    // Logs of processes killed outright, cut to their lines; who died, how.
    crate::logs::say_cut_logs(&new, lotus_format, started, status, progress);
    // Not beside the original format's logs: the study's scripts read
    // every file of the folder as a log.
    if (!new.is_empty() || itt_logs > 0) && lotus_format {
        // Without it the trace is still whole: a warning.
        if let Err(e) = record.write(&out, &options.prefix) {
            progress.message(
                MessageKind::Warning,
                &format!(
                    "warning: {}; the report will not show the run's command",
                    crate::error::with_causes(&e)
                ),
            );
        }
    }
    let (workers, bytes) = sizes(&new);
    let piped = reports
        .map(|r| r.messages(Duration::from_secs(2)))
        .unwrap_or_default();
    let failures = trace_failures(&status_dir, piped);
    Ok(TraceRun {
        status,
        out,
        logs: new,
        workers,
        bytes,
        itt_logs,
        failures,
        op_warnings,
    })
}

/// Runs the job to its end (sampled where asked), the runner its
/// subreaper and the termination signals it receives passed on, then ends
/// the processes it left.
fn run_job(
    options: &TraceOptions,
    cmd: &mut Command,
    out: &Path,
    program_path: &Path,
    reports: Option<&mut Reports>,
    progress: &mut dyn Progress,
) -> Result<ExitStatus> {
    // The job's processes that outlive its main process (workers of a
    // killed job, daemons) come to the runner, to be ended below.
    if let Err(e) = reaper::become_subreaper() {
        progress.message(
            MessageKind::Warning,
            &format!("warning: processes the program leaves may outlive it: {e}"),
        );
    }
    // Ctrl-C reaches the program (same process group), kill -INT of lotus
    // is passed on; the runner waits for it to finish and gives its exit
    // status.
    crate::job::forward_termination_signals();
    let keep: Vec<std::os::fd::RawFd> = reports
        .as_deref()
        .and_then(Reports::fd)
        .into_iter()
        .collect();
    let status = match &options.sampling {
        Some(sampling) => {
            crate::status::prepare(out, &options.prefix, options.clean, progress)?;
            crate::sampled::run(cmd, out, &options.prefix, sampling, &keep, progress)?
        }
        None => crate::job::run_plain(cmd, program_path, progress)?,
    };
    if let Some(r) = reports {
        r.started();
    }
    let ended = reaper::end_descendants(LEFTOVER_GRACE, LEFTOVER_GRACE + Duration::from_secs(5));
    if ended > 0 {
        progress.message(
            MessageKind::Note,
            &format!(
                "ended {ended} process(es) the program left running when its main process exited"
            ),
        );
    }
    Ok(status)
}

/// The logs of the prefix already in the trace folder `out`: removed
/// with `clean` (those of ITT tasks too), else kept and warned about.
fn prepare_folder(
    options: &TraceOptions,
    out: &Path,
    progress: &mut dyn Progress,
) -> Result<Vec<PathBuf>> {
    let prefix = &options.prefix;
    let before = logs_in(out, prefix, false)
        .context_with(|| format!("cannot list the trace folder {}", out.display()))?;
    if options.clean {
        let itt_before = logs_in(out, prefix, true)
            .context_with(|| format!("cannot list the trace folder {}", out.display()))?;
        for log in before.iter().chain(&itt_before) {
            std::fs::remove_file(log)
                .context_with(|| format!("--clean: cannot remove {}", log.display()))?;
        }
    } else if !before.is_empty() {
        progress.message(
            MessageKind::Warning,
            &format!(
                "warning: {} already holds {} trace log(s) with prefix '{}'; they stay and will be read with this run's (--clean removes them)",
                out.display(),
                before.len(),
                prefix
            ),
        );
    }
    Ok(before)
}

/// The job's command: the program with its arguments, the tracer's
/// environment (trace folder, prefix, run id, status folder, report pipe,
/// the runner's process, ITT, ops), and the report pipe it inherits.
#[allow(clippy::too_many_arguments)]
fn job_command(
    options: &TraceOptions,
    program_path: &Path,
    rest: &[String],
    out: &Path,
    files: &TracerFiles,
    status_dir: &Path,
    run_id: &str,
    progress: &mut dyn Progress,
) -> Result<(Command, Option<Reports>)> {
    let pythonpath = files.pythonpath(std::env::var_os("PYTHONPATH").as_deref());
    let dwarf = options
        .sampling
        .as_ref()
        .is_some_and(|s| s.stacks == lotus_core::CallStacks::Dwarf);
    let mut cmd = Command::new(program_path);
    cmd.args(rest)
        .env(ENV_TRACE_DIR, out)
        .env(ENV_TRACE_PREFIX, &options.prefix)
        .env(ENV_TRACE_TORCH, if options.torch { "1" } else { "0" })
        .env(
            "LOTUS_TRACE_FORMAT",
            match options.format {
                LogFormat::Lotus => "lotus",
                LogFormat::Original => "original",
            },
        )
        .env(ENV_PY_FRAMES, if dwarf { "1" } else { "0" })
        .env(ENV_TRACE_RUN, run_id)
        .env(
            lotus_tracer::ENV_TRACE_CLOCK,
            crate::run_record::clock_state(),
        )
        .env(ENV_TRACE_STATUS, status_dir)
        // Set by the tracer for the job's children; one leaked from the
        // caller's environment would make the job's first process take
        // itself for a child.
        .env_remove("LOTUS_TRACE_PARENT")
        .env("PYTHONPATH", pythonpath);
    let reports = Some(Reports::new().context_with(|| {
        "cannot make the pipe through which the job's processes report a lost trace".into()
    })?);
    if let Some(r) = &reports {
        cmd.env(ENV_TRACE_REPORT, &r.env);
        if let Some(fd) = r.fd() {
            // SAFETY: the hook only calls fcntl (async-signal-safe).
            unsafe {
                cmd.pre_exec(move || lotus_sys::process::clear_cloexec(fd));
            }
        }
    }
    let me = std::process::id();
    match reaper::start_time(me) {
        Some(started) => {
            cmd.env(ENV_TRACE_LOTUS, format!("{me}:{started}"));
        }
        None => {
            cmd.env_remove(ENV_TRACE_LOTUS);
            progress.message(
                MessageKind::Error,
                &format!("warning: /proc/{me}/stat cannot be read: should lotus be killed, the job's workers would run on"),
            );
        }
    }
    itt_tasks_env(&mut cmd, options, files.dir.path(), progress);
    if !options.ops.is_empty() {
        cmd.env(ENV_TRACE_OPS, options.ops.join("\n"));
    } else {
        cmd.env_remove(ENV_TRACE_OPS);
    }
    Ok((cmd, reports))
}

/// Sets up ITT for the job: a collector the user set (VTune's, by oneAPI's
/// environment or by `vtune` itself) stays, and the tracer marks the ops
/// as tasks for it; otherwise the control library (written into the
/// tracer's private folder `private_dir` where the caller's
/// [`ControlLibrary`] does so) becomes the collector and writes the tasks
/// the job's libraries begin and end into the trace. The original format
/// has no place for them (its readers take no header); the collector is
/// loaded only with [`TraceOptions::with_itt_tasks`].
fn itt_tasks_env(
    cmd: &mut Command,
    options: &TraceOptions,
    private_dir: &Path,
    progress: &mut dyn Progress,
) {
    cmd.env_remove(ENV_TRACE_ITT);
    if let Some(other) = std::env::var_os(ENV_ITT_COLLECTOR).filter(|v| !v.is_empty()) {
        progress.message(
            MessageKind::Note,
            &format!(
                "note: {ENV_ITT_COLLECTOR}={} is set (VTune's collector?): lotus leaves it in place; the tracer marks each op as an ITT task (domain lotus) for it, and the ITT tasks of the job's libraries go to it, not into this trace",
                other.to_string_lossy()
            ),
        );
        cmd.env(ENV_TRACE_ITT, "tasks");
        return;
    }
    if options.format == LogFormat::Original || !options.itt_tasks {
        return;
    }
    let found = match &options.control_library {
        Some(library) => library(private_dir),
        None => Err("no control library was given".to_string()),
    };
    match found {
        Ok(lib) => {
            cmd.env(ENV_ITT_COLLECTOR, lib)
                .env(ENV_TRACE_ITT, "collect");
        }
        Err(e) => progress.message(
            MessageKind::Note,
            &format!("note: {e}: the ITT tasks of the job's libraries are not traced"),
        ),
    }
}

/// After the run: warns (and returns the warnings, kept in the run's
/// record) of each op spec (`ops`) no process matched (the tracer leaves
/// `op_matched_<n>` in the private status folder for the n-th) and of each
/// that matched but whose functions no process ran as ops (`op_ran_<n>`:
/// the first traced call of one), and, where the tracer asked for it
/// (`note_finer_spans`: a dataset's own code ran as one span, with
/// `LOTUS_TRACE_FINER=0` or on a Python that is not CPython, and no op
/// given), says once how to get spans finer than a dataset's.
fn ops_report(ops: &[String], status: &Path, progress: &mut dyn Progress) -> Vec<String> {
    let mut warnings = Vec::new();
    for (n, spec) in ops.iter().enumerate() {
        if !status.join(format!("op_matched_{n}")).exists() {
            warnings.push(format!(
                "--op {spec} matched nothing: no traced process imported that module with a function or method of that name (check the spelling; it may live in a process that did not start)"
            ));
        } else if !status.join(format!("op_ran_{n}")).exists() {
            warnings.push(format!(
                "--op {spec} matched nothing that ran: what it wrapped was never called through its name in any traced process (the trace has no span of it; code that kept a reference taken before the wrap, e.g. a DataLoader's collate_fn=, calls the original)"
            ));
        }
    }
    for w in &warnings {
        progress.message(MessageKind::Error, &format!("warning: {w}"));
    }
    if ops.is_empty() && status.join("note_finer_spans").exists() {
        progress.message(
            MessageKind::Note,
            "note: spans stop at each dataset's __getitem__ here (LOTUS_TRACE_FINER=0, or a Python that is not CPython: elsewhere the calls in it are spans of their own with no flag); name the functions it calls with --op MODULE:QUALNAME (or mark them with lotus_trace.span / lotus_trace.wrap) to see them as ops",
        );
    }
    warnings
}

/// This run's logs in `out` (those of the run id; in the original
/// format, which has none, those not there `before`), and how many logs of
/// ITT tasks it wrote.
fn this_runs_logs(
    options: &TraceOptions,
    out: &Path,
    before: &[PathBuf],
    run_id: &str,
) -> (Vec<PathBuf>, usize) {
    let logs = logs_in(out, &options.prefix, false).unwrap_or_default();
    let itt_logs = logs_in(out, &options.prefix, true)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| is_log_of_run(p, run_id))
        .count();
    // Original-format logs carry no header (no run id): this run's are
    // those that were not there before it.
    let new: Vec<PathBuf> = match options.format {
        LogFormat::Lotus => logs
            .iter()
            .filter(|p| is_log_of_run(p, run_id))
            .cloned()
            .collect(),
        LogFormat::Original => logs
            .iter()
            .filter(|p| options.clean || !before.contains(p))
            .cloned()
            .collect(),
    };
    (new, itt_logs)
}

/// How many of `logs` are workers', and their bytes.
fn sizes(logs: &[PathBuf]) -> (usize, u64) {
    let workers = logs
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.contains("_worker_pid_"))
        })
        .count();
    let bytes: u64 = logs
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    (workers, bytes)
}
