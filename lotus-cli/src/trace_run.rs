//! `lotus trace run --out DIR -- python train.py ...`: the program runs
//! with tracing on and no change to its code.
//!
//! The `lotus_trace` Python package (compiled into the binary from
//! `harness/lotus_trace/`) is written to a temp folder with
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
//! non-zero. lotus is the job's subreaper: when the main process ends,
//! every process it left (workers, daemons) is ended too.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use lotus_backend_common::{reaper, trust};

use anyhow::{anyhow, Context, Result};

/// The tracer's files, relative to the folder they are written to.
const TRACER_FILES: &[(&str, &str)] = &[
    (
        "lotus_trace/__init__.py",
        include_str!("../harness/lotus_trace/__init__.py"),
    ),
    (
        "lotus_trace/_core.py",
        include_str!("../harness/lotus_trace/_core.py"),
    ),
    (
        "lotus_trace/_itt.py",
        include_str!("../harness/lotus_trace/_itt.py"),
    ),
    (
        "lotus_trace/_torch.py",
        include_str!("../harness/lotus_trace/_torch.py"),
    ),
    (
        "lotus_trace/_boot/sitecustomize.py",
        include_str!("../harness/lotus_trace/_boot/sitecustomize.py"),
    ),
];

/// The variable that names the trace folder (read by the start-up hook).
pub const ENV_TRACE_DIR: &str = "LOTUS_TRACE_DIR";
/// The variable that names the log files' prefix.
pub const ENV_TRACE_PREFIX: &str = "LOTUS_TRACE_PREFIX";
/// `0` turns the torch / torchvision hooks off.
pub const ENV_TRACE_TORCH: &str = "LOTUS_TRACE_TORCH";
/// The variable naming this run's id (each log's header carries it).
pub const ENV_TRACE_RUN: &str = "LOTUS_TRACE_RUN";
/// The variable naming lotus's private folder where a process that could
/// not write its trace leaves `failed_pid_<pid>`.
pub const ENV_TRACE_STATUS: &str = "LOTUS_TRACE_STATUS";
/// How long the processes a job leaves have, after SIGTERM, before SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// How often lotus looks whether the job ended or a signal must be passed
/// on.
const POLL: Duration = Duration::from_millis(20);

/// The last SIGTERM or SIGHUP lotus received, still to be passed on to the
/// job (0: none).
static FORWARD: AtomicI32 = AtomicI32::new(0);

extern "C" fn remember_signal(signal: libc::c_int) {
    FORWARD.store(signal, Ordering::SeqCst);
}

/// SIGTERM and SIGHUP sent to lotus alone (a batch system ending the job,
/// `kill PID`) are passed on to the job, which would otherwise run on while
/// lotus waits for it. (SIGINT from a terminal reaches the job directly: it
/// is in lotus's process group.) Replaces the handlers `ctrlc` installed
/// for these two.
fn forward_termination_signals() {
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an
        // atomic (async-signal-safe); the old action is not needed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = remember_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The signal to pass on to the job, once.
pub(crate) fn signal_to_forward() -> Option<libc::c_int> {
    match FORWARD.swap(0, Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Runs `cmd` (in lotus's process group) to its end, passing SIGTERM and
/// SIGHUP on to it; should lotus be killed outright, the job gets SIGTERM
/// (a parent-death signal) instead of running on unwatched.
fn run_plain(cmd: &mut Command, program: &Path) -> Result<std::process::ExitStatus> {
    // SAFETY: prctl is async-signal-safe; it only asks the kernel for a
    // signal when lotus dies.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(signal) = signal_to_forward() {
            // SAFETY: kill(2) of our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
        std::thread::sleep(POLL);
    }
}

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
    /// The log lines: `lotus` (a header, `key=value` fields) or `original`
    /// (the original fork's three columns only, which the study's scripts
    /// read: no header, no fields; batch ids in the names).
    #[arg(long, value_enum, default_value = "lotus")]
    pub format: LogFormat,
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

/// The tracer written to a private folder; removed on drop.
#[derive(Debug)]
pub struct TracerFiles {
    /// The private folder (0700); `lotus_trace/` is in it.
    pub dir: lotus_sys::PrivateDir,
    /// The folder of the start-up hook (`lotus_trace/_boot`).
    pub boot: PathBuf,
}

impl TracerFiles {
    /// `PYTHONPATH` with the start-up hook and the package first, then
    /// `existing` (the caller's `PYTHONPATH`).
    pub fn pythonpath(&self, existing: Option<&OsStr>) -> OsString {
        let mut parts = vec![self.boot.clone(), self.dir.path().to_path_buf()];
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            parts.extend(std::env::split_paths(existing));
        }
        std::env::join_paths(parts).unwrap_or_else(|_| {
            // A path with ':' in it cannot be joined; put ours first anyway.
            let mut v = self.boot.as_os_str().to_owned();
            v.push(":");
            v.push(self.dir.path());
            if let Some(e) = existing {
                v.push(":");
                v.push(e);
            }
            v
        })
    }
}

/// Writes the `lotus_trace` package (and its start-up hook) into a fresh
/// private folder (mode 0700, in a `TMPDIR` that passes the trust check,
/// refused otherwise: the job runs the `sitecustomize` there). Folders
/// left by a `trace run` that was killed are removed first.
pub fn write_tracer() -> io::Result<TracerFiles> {
    let dir = lotus_sys::PrivateDir::new("lotus-trace-")?;
    let mut made = std::collections::BTreeSet::new();
    for (rel, text) in TRACER_FILES {
        let rel = Path::new(rel);
        // The package's folders, outermost first, each made once.
        let mut parents: Vec<&Path> = rel.ancestors().skip(1).collect();
        parents.reverse();
        for parent in parents.into_iter().filter(|p| !p.as_os_str().is_empty()) {
            if made.insert(parent.to_path_buf()) {
                dir.create_dir(parent)?;
            }
        }
        dir.write(rel, text.as_bytes())?;
    }
    let boot = dir.path().join("lotus_trace").join("_boot");
    Ok(TracerFiles { dir, boot })
}

/// Whether `name` is a trace log of `prefix`: `<prefix>_main_pid_<pid>` or
/// `<prefix>_worker_pid_<pid>`, or `<prefix>.<n>_...` (the tracer's name
/// when the first was taken).
fn is_log_of(name: &str, prefix: &str) -> bool {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let rest = match rest.strip_prefix('.') {
        Some(numbered) => {
            let digits = numbered.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return false;
            }
            &numbered[digits..]
        }
        None => rest,
    };
    ["_main_pid_", "_worker_pid_"]
        .iter()
        .any(|tag| rest.strip_prefix(tag).is_some_and(all_digits))
}

/// Whether `name` is a log of ITT tasks that lotus's collector wrote for
/// `prefix`: `<prefix>.itt_<role>_pid_<pid>` or `<prefix>.itt<n>_...`.
fn is_itt_log_of(name: &str, prefix: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(ITT_LOG_TAG))
    else {
        return false;
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    ["_main_pid_", "_worker_pid_"].iter().any(|tag| {
        rest.strip_prefix(tag)
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// What follows the prefix in the name of a log of ITT tasks.
const ITT_LOG_TAG: &str = ".itt";

/// Whether the log at `path` belongs to the run `run_id`: its header
/// (first line) carries `run=<run_id>`.
fn is_log_of_run(path: &Path, run_id: &str) -> bool {
    use std::io::Read;
    let mut head = [0u8; 512];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&head[..n]);
    let first = text.lines().next().unwrap_or("");
    first.starts_with("#lotus-trace")
        && first
            .split_whitespace()
            .any(|w| w.strip_prefix("run=") == Some(run_id))
}

/// Creates the trace folder (0755 less the umask) if missing, and checks
/// that no other user can write it or swap a folder above it: the job
/// creates its logs there by predictable names, and when lotus runs as
/// root another user's link or file in that folder would be written
/// through (or read back by `trace view`). Refused rather than warned
/// about: a warning scrolls away while root's job writes into a folder
/// another user controls; the fix (a folder of one's own) is one command.
fn check_out_folder(out: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(out)
        .with_context(|| format!("cannot resolve the trace folder {}", out.display()))?;
    // The folders above must be safe before anything is created under them.
    if let Some(existing) = absolute.ancestors().skip(1).find(|a| a.exists()) {
        trust::check_path(existing, false).map_err(|u| untrusted_out(out, &u))?;
    }
    lotus_sys::create_dir_all(&absolute, 0o755).map_err(|e| match e {
        lotus_sys::Error::Untrusted { .. } => {
            anyhow!(
                "the trace folder {} is not safe to write: {e}",
                out.display()
            )
        }
        e => anyhow!(e).context(format!("cannot create the trace folder {}", out.display())),
    })?;
    let canonical = std::fs::canonicalize(&absolute)
        .with_context(|| format!("cannot resolve {}", out.display()))?;
    trust::check_path(&absolute, true).map_err(|u| untrusted_out(out, &u))?;
    Ok(canonical)
}

fn untrusted_out(out: &Path, why: &trust::Untrusted) -> anyhow::Error {
    anyhow!(
        "the trace folder {} is not safe to write: {why}; another user could plant files or links where the job writes its logs. Use a folder that only you (and root) can write, e.g. `mkdir -m 755 ~/trace` (or `chmod go-w` the folder)",
        out.display()
    )
}

/// What the processes that could not write their trace left in the status
/// folder: one message per process.
fn trace_failures(status: &Path) -> Vec<String> {
    let mut failures: Vec<(String, String)> = std::fs::read_dir(status)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("failed_pid_")?.to_string();
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let text = text.trim();
            Some((
                pid.clone(),
                if text.is_empty() {
                    format!("pid {pid} could not write its trace (no space left to say why?)")
                } else {
                    text.to_string()
                },
            ))
        })
        .collect();
    failures.sort();
    failures.into_iter().map(|(_, m)| m).collect()
}

/// An id for this run, unique on this machine: lotus's pid and the time.
fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

/// The trace logs of `prefix` directly in `dir` (the tracer's, or with
/// `itt`, those of ITT tasks).
fn logs_in(dir: &Path, prefix: &str, itt: bool) -> io::Result<Vec<PathBuf>> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(name) = name.to_str() {
            let ours = if itt {
                is_itt_log_of(name, prefix)
            } else {
                is_log_of(name, prefix)
            };
            if ours && entry.file_type()?.is_file() {
                logs.push(entry.path());
            }
        }
    }
    logs.sort();
    Ok(logs)
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

/// The variable that tells the tracer and lotus's ITT collector what to do
/// with ITT tasks: `tasks` (a collector other than lotus's is loaded, e.g.
/// VTune's: the tracer marks each op as an ITT task for it) or `collect`
/// (lotus's collector is loaded: it writes the tasks it receives into the
/// trace folder).
pub const ENV_TRACE_ITT: &str = "LOTUS_TRACE_ITT";

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
    check_prefix(&args.prefix)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow!("give the program to trace after --"))?;
    let program_path = which::which(program)
        .with_context(|| format!("{program}: no such program (on PATH or as a path)"))?;
    let out = check_out_folder(&args.out)?;
    let before = logs_in(&out, &args.prefix, false)
        .with_context(|| format!("cannot list the trace folder {}", out.display()))?;
    if args.clean {
        let itt_before = logs_in(&out, &args.prefix, true)
            .with_context(|| format!("cannot list the trace folder {}", out.display()))?;
        for log in before.iter().chain(&itt_before) {
            std::fs::remove_file(log)
                .with_context(|| format!("--clean: cannot remove {}", log.display()))?;
        }
    } else if !before.is_empty() {
        eprintln!(
            "lotus: warning: {} already holds {} trace log(s) with prefix '{}'; they stay and will be read with this run's (--clean removes them)",
            out.display(),
            before.len(),
            args.prefix
        );
    }

    let files = write_tracer().context("cannot write the lotus_trace Python package")?;
    let status_dir = files
        .dir
        .create_dir(Path::new("status"))
        .context("cannot create the tracer's status folder")?;
    let run_id = new_run_id();
    let pythonpath = files.pythonpath(std::env::var_os("PYTHONPATH").as_deref());
    let mut cmd = Command::new(&program_path);
    cmd.args(rest)
        .env(ENV_TRACE_DIR, &out)
        .env(ENV_TRACE_PREFIX, &args.prefix)
        .env(ENV_TRACE_TORCH, if args.no_torch { "0" } else { "1" })
        .env(
            "LOTUS_TRACE_FORMAT",
            match args.format {
                LogFormat::Lotus => "lotus",
                LogFormat::Original => "original",
            },
        )
        .env(ENV_TRACE_RUN, &run_id)
        .env(ENV_TRACE_STATUS, &status_dir)
        .env("PYTHONPATH", pythonpath);
    itt_tasks_env(&mut cmd, args.format, args.itt_tasks, files.dir.path());

    // The job's processes that outlive its main process (workers of a
    // killed job, daemons) come to lotus, to be ended below.
    if let Err(e) = reaper::become_subreaper() {
        eprintln!("lotus: warning: processes the program leaves may outlive it: {e}");
    }
    // Ctrl-C reaches the program (same process group); lotus waits for it
    // to finish and passes its exit status through.
    let _ = ctrlc::set_handler(|| {
        crate::sampled_trace::INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst)
    });
    forward_termination_signals();
    let status = if args.sample {
        crate::sampled_trace::prepare(&out, &args.prefix, args.clean)?;
        crate::sampled_trace::run(&mut cmd, &out, &args.prefix, args.frequency, &args.counters)?
    } else {
        run_plain(&mut cmd, &program_path)?
    };
    let ended = reaper::end_descendants(LEFTOVER_GRACE, LEFTOVER_GRACE + Duration::from_secs(5));
    if ended > 0 {
        crate::usage::note!(
            "lotus: ended {ended} process(es) the program left running when its main process exited"
        );
    }

    let logs = logs_in(&out, &args.prefix, false).unwrap_or_default();
    let itt_logs = logs_in(&out, &args.prefix, true)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| is_log_of_run(p, &run_id))
        .count();
    // Original-format logs carry no header (no run id): this run's are
    // those that were not there before it.
    let new: Vec<&PathBuf> = match args.format {
        LogFormat::Lotus => logs.iter().filter(|p| is_log_of_run(p, &run_id)).collect(),
        LogFormat::Original => logs
            .iter()
            .filter(|p| args.clean || !before.contains(p))
            .collect(),
    };
    let workers = new
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.contains("_worker_pid_"))
        })
        .count();
    let bytes: u64 = new
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let failures = trace_failures(&status_dir);
    if new.is_empty() && itt_logs == 0 && failures.is_empty() {
        eprintln!(
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
    if !status.success() {
        eprintln!("lotus: the program exited with {status}");
    }
    if !failures.is_empty() {
        for failure in &failures {
            eprintln!("lotus: {failure}");
        }
        eprintln!(
            "lotus: error: the trace in {} is incomplete: {} process(es) could not write their logs (above); free space there (or choose another --out) and run again",
            out.display(),
            failures.len()
        );
        if status.success() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(pass_through(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_names() {
        assert!(is_log_of("lotus_main_pid_12", "lotus"));
        assert!(is_log_of("lotus_worker_pid_7", "lotus"));
        assert!(!is_log_of("lotus_worker_pid_", "lotus"));
        assert!(!is_log_of("lotus_worker_pid_7.json", "lotus"));
        assert!(!is_log_of("other_main_pid_12", "lotus"));
        assert!(!is_log_of("lotusx_main_pid_12", "lotus"));
        assert!(is_log_of("lotus.3_main_pid_12", "lotus"));
        assert!(is_log_of("lotus.10_worker_pid_12", "lotus"));
        assert!(!is_log_of("lotus._main_pid_12", "lotus"));
        assert!(!is_log_of("lotus.x_main_pid_12", "lotus"));
    }

    #[test]
    fn itt_log_names() {
        assert!(is_itt_log_of("lotus.itt_main_pid_12", "lotus"));
        assert!(is_itt_log_of("lotus.itt3_worker_pid_12", "lotus"));
        assert!(!is_itt_log_of("lotus.itt_main_pid_", "lotus"));
        assert!(!is_itt_log_of("lotus_main_pid_12", "lotus"));
        assert!(!is_itt_log_of("lotus.ittx_main_pid_12", "lotus"));
        assert!(!is_itt_log_of("other.itt_main_pid_12", "lotus"));
        assert!(!is_log_of("lotus.itt_main_pid_12", "lotus"));
    }

    #[test]
    fn prefixes() {
        assert!(check_prefix("lotus").is_ok());
        assert!(check_prefix("run-1.a_b").is_ok());
        for bad in ["", "a/b", "a b", "..\u{0}"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_tracer_is_written_and_put_first() {
        let files = write_tracer().expect("write");
        for (rel, text) in TRACER_FILES {
            let got = std::fs::read_to_string(files.dir.path().join(rel)).expect("read");
            assert_eq!(&got, text);
        }
        assert!(files.boot.join("sitecustomize.py").is_file());
        let pp = files.pythonpath(Some(OsStr::new("/a:/b")));
        let parts: Vec<PathBuf> = std::env::split_paths(&pp).collect();
        assert_eq!(
            parts,
            [
                files.boot.clone(),
                files.dir.path().to_path_buf(),
                "/a".into(),
                "/b".into()
            ]
        );
        let alone: Vec<PathBuf> = std::env::split_paths(&files.pythonpath(None)).collect();
        assert_eq!(alone.len(), 2);
    }
}
