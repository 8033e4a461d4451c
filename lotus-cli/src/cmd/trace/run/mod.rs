//! `lotus trace run --out DIR -- python train.py ...`: the program runs
//! with tracing on and no change to its code.
//!
//! The `lotus_trace` Python package (compiled into the binary from
//! `lotus-tracer/python/lotus_trace/`) is written to a temp folder with
//! [`write_tracer`]; the folder and the package's start-up hook
//! (`lotus_trace/_boot/sitecustomize.py`) go first on `PYTHONPATH`, and
//! `LOTUS_TRACE_DIR` names the trace folder. Every Python process the
//! program starts (DataLoader workers, forked or spawned, and launched
//! ranks) inherits the environment, so each writes its own log,
//! `DIR/<prefix>_main_pid_<pid>` or `DIR/<prefix>_worker_pid_<pid>`. An
//! existing `sitecustomize` on the path still runs (the hook chains to it).
//!
//! The trace folder must be one no other user can write (see
//! [`check_out_folder`]): the job, often run as root, creates files there by
//! predictable names. Each run has an id (`LOTUS_TRACE_RUN`, written in each
//! log's header), so that only this run's logs are counted; a process that
//! cannot write its log says so through a file in lotus's private status
//! folder (`LOTUS_TRACE_STATUS`), and lotus reports the loss and exits
//! non-zero. A process that dropped its privileges (and can no longer
//! create that file) reports through an inherited pipe instead
//! (`LOTUS_TRACE_REPORT_FD`). lotus is the job's subreaper: when the main
//! process ends, every process it left (workers, daemons) is ended too.
//!
//! Signals and faults: SIGTERM, SIGHUP and SIGINT sent to lotus are passed
//! on to the job (a terminal's Ctrl-C reaches a plain job directly and is
//! not passed on twice); the tracer writes its buffered events on each of
//! them before the program's own action. Should lotus be killed outright
//! (`kill -9`, the OOM killer), the job does not run on unwatched: its main
//! process gets a parent-death signal (plain runs), and the tracer in every
//! process watches lotus (`LOTUS_TRACE_LOTUS`, `<pid>:<start time>`) and
//! ends its process once lotus is gone. Below 10 file descriptors lotus
//! refuses at once, before it creates anything.

mod limits;
mod logs;
mod perf_maps;
mod reports;
mod tracer;

pub use lotus_tracer::{
    ENV_PY_FRAMES, ENV_TRACE_DIR, ENV_TRACE_ITT, ENV_TRACE_LOTUS, ENV_TRACE_PREFIX,
    ENV_TRACE_REPORT, ENV_TRACE_RUN, ENV_TRACE_STATUS, ENV_TRACE_TORCH,
};
use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use lotus_sys::process as reaper;

use anyhow::{anyhow, Context, Result};

use limits::{check_descriptor_limit, with_descriptor_hint};
use logs::{check_out_folder, is_log_of_run, logs_in, new_run_id};
use reports::{trace_failures, Reports};
use tracer::{write_tracer, TracerFiles};

/// How long the processes a job leaves have, after SIGTERM, before SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// `lotus trace run` arguments.
#[derive(Debug, clap::Args)]
pub struct TraceRunArgs {
    /// The trace folder (created if missing): one log per traced process.
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Log file names: <PREFIX>_main_pid_<pid> and <PREFIX>_worker_pid_<pid>.
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
    /// First remove the logs with this prefix already in DIR (default: keep them, and warn).
    #[arg(long)]
    pub clean: bool,
    /// Leave torch and torchvision unpatched: only what the program marks
    /// itself (lotus_trace.wrap, TracedDataset, worker_batch, main_wait) is traced.
    #[arg(long)]
    pub no_torch: bool,
    /// Also trace the ITT tasks the job's libraries begin and end (oneDNN's
    /// primitives, an instrumented library's own): lotus's ITT collector is
    /// loaded (when no other collector is set) and each task becomes an op
    /// span, the innermost where it runs inside an op. Off by default:
    /// library tasks would take their samples from the Python ops they run
    /// in, and fill the op tables with library primitives.
    #[arg(long)]
    pub itt_tasks: bool,
    /// Also sample every process and thread of the job through perf, into
    /// DIR beside the logs, for `lotus attribute DIR`.
    #[arg(long)]
    pub sample: bool,
    /// Sampling frequency in Hz (with --sample).
    #[arg(long, short = 'F', requires = "sample", default_value_t = crate::sampled_trace::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// Counters read with each sample and summed per op by `lotus
    /// attribute DIR` (with --sample): comma-separated perf event names
    /// (cycles, instructions, task-clock, context-switches, page-faults),
    /// or `none`. Where the kernel refuses them (no PMU) the run goes on
    /// without them and says why.
    #[arg(long, requires = "sample", value_name = "LIST", default_value = "cycles,instructions",
          value_parser = crate::sampled_trace::parse_counters)]
    pub counters: crate::sampled_trace::CounterList,
    /// Call stacks with every sample (with --sample), into
    /// <PREFIX>.stacks for `lotus attribute DIR --format folded`: `dwarf`
    /// (the default) takes the kernel's frames from its call chain and
    /// copies up to 64 KiB of the user stack with each sample, unwound through
    /// the libraries' unwind tables (complete through code without frame
    /// pointers: CPython, libtorch); `fp` takes the kernel's frame-pointer
    /// chain (at most 127 frames; it stops at code without frame
    /// pointers); `none` keeps the sampled function alone.
    #[arg(long, value_enum, requires = "sample", default_value = "dwarf")]
    pub stacks: crate::sampled_trace::StackMode,
    /// The log lines: `lotus` (a header, `key=value` fields) or `original`
    /// (the original fork's three columns only, which the study's scripts
    /// read: no header, no fields; batch ids in the names).
    #[arg(long, value_enum, default_value = "lotus")]
    pub format: LogFormat,
    #[command(flatten)]
    pub ops: super::OpArgs,
    /// The program and its arguments, e.g. `python train.py --epochs 1`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--format`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Header line and `key=value` fields.
    Lotus,
    /// `S<Name>,<start_ns>,<duration_ns>` only.
    Original,
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty()
        || !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(crate::usage::usage(format!("--prefix {prefix:?}: use letters, digits, '-', '_' or '.' (it starts each log file's name)")));
    }
    Ok(())
}

/// Sets up ITT for the job: a collector the user set (VTune's, by oneAPI's
/// environment or by `vtune` itself) stays, and the tracer marks the ops
/// as tasks for it; otherwise lotus's control library (the binary's copy,
/// written into the tracer's private folder `private_dir`:
/// [`crate::control_lib::path_for_run`]), becomes the collector and
/// writes the tasks the job's libraries begin and end into the trace.
/// The original format has no place for them (its readers take no header);
/// lotus's collector is loaded only with `--itt-tasks`.
fn itt_tasks_env(cmd: &mut Command, format: LogFormat, itt_tasks: bool, private_dir: &Path) {
    const COLLECTOR: &str = lotus_map::live::ENV_ITT_COLLECTOR;
    cmd.env_remove(ENV_TRACE_ITT);
    if let Some(other) = std::env::var_os(COLLECTOR).filter(|v| !v.is_empty()) {
        crate::usage::note!(
            "lotus: note: {COLLECTOR}={} is set (VTune's collector?): lotus leaves it in place; the tracer marks each op as an ITT task (domain lotus) for it, and the ITT tasks of the job's libraries go to it, not into this trace",
            other.to_string_lossy()
        );
        cmd.env(ENV_TRACE_ITT, "tasks");
        return;
    }
    if format == LogFormat::Original || !itt_tasks {
        return;
    }
    match crate::control_lib::path_for_run(private_dir) {
        Ok(lib) => {
            cmd.env(COLLECTOR, lib).env(ENV_TRACE_ITT, "collect");
        }
        Err(e) => crate::usage::note!(
            "lotus: note: {e}: the ITT tasks of the job's libraries are not traced"
        ),
    }
}

/// The exit code that passes the program's status through: its code, or
/// 128 + the signal that ended it.
fn pass_through(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExitCode::from((128 + sig).clamp(0, 255) as u8);
        }
    }
    ExitCode::FAILURE
}

/// Runs `lotus trace run`.
pub fn run(args: TraceRunArgs) -> Result<ExitCode> {
    run_traced(args).map_err(with_descriptor_hint)
}

fn run_traced(args: TraceRunArgs) -> Result<ExitCode> {
    check_args(&args)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow!("give the program to trace after --"))?;
    let program_path = which::which(program)
        .with_context(|| format!("{program}: no such program (on PATH or as a path)"))?;
    let out = check_out_folder(&args.out)?;
    let before = prepare_folder(&args, &out)?;

    // What `lotus report` shows at the top of its page: the command, host,
    // CPU, date and lotus version (`<prefix>.run`), taken now and written
    // once the job has written logs.
    let record = crate::run_record::RunRecord::now(&args.command);
    let files = write_tracer().context("cannot write the lotus_trace Python package")?;
    // Out of memory, lotus exits at once: the tracer's folder goes too.
    crate::oom::remove_on_oom(files.dir.path());
    let status_dir = files
        .dir
        .create_dir(Path::new("status"))
        .context("cannot create the tracer's status folder")?;
    let run_id = new_run_id();
    let (mut cmd, mut reports) = job_command(
        &args,
        &program_path,
        rest,
        &out,
        &files,
        &status_dir,
        &run_id,
    )?;

    let started = std::time::SystemTime::now();
    let status = run_job(&args, &mut cmd, &out, &program_path, reports.as_mut())?;
    // The samples are named: the perf maps the tracer made can go.
    for left in perf_maps::remove_made_maps(&status_dir).left {
        crate::usage::say!("lotus: warning: a perf map of the job stays in /tmp: {left}");
    }

    let (new, itt_logs) = this_runs_logs(&args, &out, &before, &run_id);
    // The `--op` warnings, said now and kept in the record for the
    // commands that read the folder later.
    let record = record.with_notes(args.ops.report(&status_dir));
    // Logs of processes killed outright, cut to their lines; who died, how.
    logs::say_cut_logs(&new, args.format == LogFormat::Lotus, started, status);
    // Not beside the original format's logs: the study's scripts read
    // every file of the folder as a log.
    if (!new.is_empty() || itt_logs > 0) && args.format == LogFormat::Lotus {
        // Without it the trace is still whole: a warning.
        if let Err(e) = record.write(&out, &args.prefix) {
            crate::usage::say!("lotus: warning: {e:#}; the report will not show the run's command");
        }
    }
    let (workers, bytes) = sizes(&new);
    let piped = reports
        .map(|r| r.messages(Duration::from_secs(2)))
        .unwrap_or_default();
    let failures = trace_failures(&status_dir, piped);
    say_written(&out, &new, itt_logs, failures.is_empty(), workers, bytes);
    if let Some(note) = super::hints::python_frames_note(&new) {
        crate::usage::say!("lotus: note: {note}");
    }
    // What the workers ran outside every op, said now rather than only by
    // a later `attribute` (issue 24: say what was not seen).
    if args.sample && !new.is_empty() {
        for note in super::hints::unseen_notes(&out, &args.prefix) {
            crate::usage::say!("lotus: note: {note}");
        }
    }
    if !status.success() {
        crate::usage::say!("lotus: the program exited with {status}");
    }
    if failures.is_empty() && !new.is_empty() {
        crate::usage::note!(
            "{}",
            super::hints::next_hint(&out, &args.prefix, args.sample)
        );
    }
    if !failures.is_empty() {
        say_failures(&args, &out, &failures);
        if status.success() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(pass_through(status))
}

/// Runs the job to its end (sampled with `--sample`), lotus its
/// subreaper and the termination signals it receives passed on, then ends
/// the processes it left.
fn run_job(
    args: &TraceRunArgs,
    cmd: &mut Command,
    out: &Path,
    program_path: &Path,
    reports: Option<&mut Reports>,
) -> Result<std::process::ExitStatus> {
    // The job's processes that outlive its main process (workers of a
    // killed job, daemons) come to lotus, to be ended below.
    if let Err(e) = reaper::become_subreaper() {
        crate::usage::say!("lotus: warning: processes the program leaves may outlive it: {e}");
    }
    // Ctrl-C reaches the program (same process group), kill -INT of lotus
    // is passed on; lotus waits for it to finish and passes its exit status
    // through.
    crate::job::forward_termination_signals();
    let keep: Vec<std::os::fd::RawFd> = reports
        .as_deref()
        .and_then(Reports::fd)
        .into_iter()
        .collect();
    let status = if args.sample {
        crate::sampled_trace::prepare(out, &args.prefix, args.clean)?;
        crate::sampled_trace::run(
            cmd,
            out,
            &args.prefix,
            args.frequency,
            &args.counters,
            args.stacks,
            &keep,
        )?
    } else {
        crate::job::run_plain(cmd, program_path)?
    };
    if let Some(r) = reports {
        r.started();
    }
    let ended = reaper::end_descendants(LEFTOVER_GRACE, LEFTOVER_GRACE + Duration::from_secs(5));
    if ended > 0 {
        crate::usage::note!(
            "lotus: ended {ended} process(es) the program left running when its main process exited"
        );
    }
    Ok(status)
}

/// Refuses, before anything is created, what cannot run: a bad prefix,
/// too few file descriptors, samples in the original format.
fn check_args(args: &TraceRunArgs) -> Result<()> {
    check_prefix(&args.prefix)?;
    check_descriptor_limit()?;
    if args.sample && args.format == LogFormat::Original {
        // Refused before anything runs: the samples could never be
        // attributed, and the job would have run for nothing.
        return Err(crate::usage::usage(
            "--sample cannot be used with --format original: the original format's lines carry no sample ids, batch fields or clock pairs, so `lotus attribute` could never credit the samples to ops. Drop --format original (the lotus format is read by `lotus trace view` and `lotus attribute`), or drop --sample",
        ));
    }
    Ok(())
}

/// The logs of `args.prefix` already in the trace folder `out`: removed
/// with `--clean` (those of ITT tasks too), else kept and warned about.
fn prepare_folder(args: &TraceRunArgs, out: &Path) -> Result<Vec<PathBuf>> {
    let before = logs_in(out, &args.prefix, false)
        .with_context(|| format!("cannot list the trace folder {}", out.display()))?;
    if args.clean {
        let itt_before = logs_in(out, &args.prefix, true)
            .with_context(|| format!("cannot list the trace folder {}", out.display()))?;
        for log in before.iter().chain(&itt_before) {
            std::fs::remove_file(log)
                .with_context(|| format!("--clean: cannot remove {}", log.display()))?;
        }
    } else if !before.is_empty() {
        crate::usage::say!(
            "lotus: warning: {} already holds {} trace log(s) with prefix '{}'; they stay and will be read with this run's (--clean removes them)",
            out.display(),
            before.len(),
            args.prefix
        );
    }
    Ok(before)
}

/// The job's command: the program with its arguments, the tracer's
/// environment (trace folder, prefix, run id, status folder, report pipe,
/// lotus itself, ITT, `--op`), and the report pipe it inherits.
fn job_command(
    args: &TraceRunArgs,
    program_path: &Path,
    rest: &[String],
    out: &Path,
    files: &TracerFiles,
    status_dir: &Path,
    run_id: &str,
) -> Result<(Command, Option<Reports>)> {
    let pythonpath = files.pythonpath(std::env::var_os("PYTHONPATH").as_deref());
    let mut cmd = Command::new(program_path);
    cmd.args(rest)
        .env(ENV_TRACE_DIR, out)
        .env(ENV_TRACE_PREFIX, &args.prefix)
        .env(ENV_TRACE_TORCH, if args.no_torch { "0" } else { "1" })
        .env(
            "LOTUS_TRACE_FORMAT",
            match args.format {
                LogFormat::Lotus => "lotus",
                LogFormat::Original => "original",
            },
        )
        .env(
            ENV_PY_FRAMES,
            if args.sample && args.stacks == crate::sampled_trace::StackMode::Dwarf {
                "1"
            } else {
                "0"
            },
        )
        .env(ENV_TRACE_RUN, run_id)
        .env(ENV_TRACE_STATUS, status_dir)
        // Set by the tracer for the job's children; one leaked from the
        // caller's environment would make the job's first process take
        // itself for a child.
        .env_remove("LOTUS_TRACE_PARENT")
        .env("PYTHONPATH", pythonpath);
    let reports =
        Some(Reports::new().context(
            "cannot make the pipe through which the job's processes report a lost trace",
        )?);
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
            eprintln!(
                "lotus: warning: /proc/{me}/stat cannot be read: should lotus be killed, the job's workers would run on"
            );
        }
    }
    itt_tasks_env(&mut cmd, args.format, args.itt_tasks, files.dir.path());
    args.ops.apply(&mut cmd);
    Ok((cmd, reports))
}

/// This run's logs in `out` (those of the run id; in the original
/// format, which has none, those not there `before`), and how many logs of
/// ITT tasks it wrote.
fn this_runs_logs(
    args: &TraceRunArgs,
    out: &Path,
    before: &[PathBuf],
    run_id: &str,
) -> (Vec<PathBuf>, usize) {
    let logs = logs_in(out, &args.prefix, false).unwrap_or_default();
    let itt_logs = logs_in(out, &args.prefix, true)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| is_log_of_run(p, run_id))
        .count();
    // Original-format logs carry no header (no run id): this run's are
    // those that were not there before it.
    let new: Vec<PathBuf> = match args.format {
        LogFormat::Lotus => logs
            .iter()
            .filter(|p| is_log_of_run(p, run_id))
            .cloned()
            .collect(),
        LogFormat::Original => logs
            .iter()
            .filter(|p| args.clean || !before.contains(p))
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

/// Says what the run wrote: its logs, workers', bytes and logs of ITT
/// tasks, or that it wrote none.
fn say_written(
    out: &Path,
    new: &[PathBuf],
    itt_logs: usize,
    no_failures: bool,
    workers: usize,
    bytes: u64,
) {
    if new.is_empty() && itt_logs == 0 && no_failures {
        crate::usage::say!(
            "lotus: no trace written to {}: was the program Python, and did it run a DataLoader or traced code? (lotus_trace needs Python 3.8+)",
            out.display()
        );
    } else {
        let itt = if itt_logs > 0 {
            format!(", and {itt_logs} log(s) of ITT tasks")
        } else {
            String::new()
        };
        crate::usage::note!(
            "lotus: trace in {}: {} log(s) ({} main, {} worker), {} bytes{itt}",
            out.display(),
            new.len(),
            new.len() - workers,
            workers,
            bytes
        );
    }
}

/// Says which processes could not write their logs, and what to do; a
/// sampled trace's status says the run failed.
fn say_failures(args: &TraceRunArgs, out: &Path, failures: &[String]) {
    for failure in failures {
        crate::usage::say!("lotus: {failure}");
    }
    if args.sample {
        let reason = format!(
            "{} process(es) could not write their trace logs; the first: {}",
            failures.len(),
            failures[0]
        );
        if let Err(e) = crate::sampled_trace::mark_failed(out, &args.prefix, &reason) {
            eprintln!("lotus: {e:#}");
        }
    }
    let denied = failures
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
    crate::usage::say!(
        "lotus: error: the trace in {} is incomplete: {} process(es) could not write their logs (above); {fix}",
        out.display(),
        failures.len()
    );
}

#[cfg(test)]
mod tests;
