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

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{anyhow, bail, Context, Result};

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
    /// Also sample every process and thread of the job through perf, into
    /// DIR beside the logs, for `lotus attribute DIR`.
    #[arg(long)]
    pub sample: bool,
    /// Sampling frequency in Hz (with --sample).
    #[arg(long, requires = "sample", default_value_t = crate::sampled_trace::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// The program and its arguments, e.g. `python train.py --epochs 1`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The tracer written to a temp folder; removed on drop.
#[derive(Debug)]
pub struct TracerFiles {
    /// The temp folder; `lotus_trace/` is in it.
    pub dir: tempfile::TempDir,
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
/// temp folder.
pub fn write_tracer() -> io::Result<TracerFiles> {
    let dir = tempfile::Builder::new().prefix("lotus-trace-").tempdir()?;
    for (rel, text) in TRACER_FILES {
        let path = dir.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
    }
    let boot = dir.path().join("lotus_trace").join("_boot");
    Ok(TracerFiles { dir, boot })
}

/// Whether `name` is a trace log of `prefix`: `<prefix>_main_pid_<pid>` or
/// `<prefix>_worker_pid_<pid>`.
fn is_log_of(name: &str, prefix: &str) -> bool {
    ["_main_pid_", "_worker_pid_"].iter().any(|tag| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix(tag))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The trace logs of `prefix` directly in `dir`.
fn logs_in(dir: &Path, prefix: &str) -> io::Result<Vec<PathBuf>> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(name) = name.to_str() {
            if is_log_of(name, prefix) && entry.file_type()?.is_file() {
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
        bail!("--prefix {prefix:?}: use letters, digits, '-', '_' or '.' (it starts each log file's name)");
    }
    Ok(())
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
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create the trace folder {}", args.out.display()))?;
    let out = std::fs::canonicalize(&args.out)
        .with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let before = logs_in(&out, &args.prefix)
        .with_context(|| format!("cannot list the trace folder {}", out.display()))?;
    if args.clean {
        for log in &before {
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
    let before: HashSet<PathBuf> = if args.clean {
        HashSet::new()
    } else {
        before.into_iter().collect()
    };

    let files = write_tracer().context("cannot write the lotus_trace Python package")?;
    let pythonpath = files.pythonpath(std::env::var_os("PYTHONPATH").as_deref());
    let mut cmd = Command::new(&program_path);
    cmd.args(rest)
        .env(ENV_TRACE_DIR, &out)
        .env(ENV_TRACE_PREFIX, &args.prefix)
        .env(ENV_TRACE_TORCH, if args.no_torch { "0" } else { "1" })
        .env("PYTHONPATH", pythonpath);

    // Ctrl-C reaches the program (same process group); lotus waits for it
    // to finish and passes its exit status through.
    let _ = ctrlc::set_handler(|| {
        crate::sampled_trace::INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst)
    });
    let status = if args.sample {
        crate::sampled_trace::prepare(&out, &args.prefix, args.clean)?;
        crate::sampled_trace::run(&mut cmd, &out, &args.prefix, args.frequency)?
    } else {
        cmd.status()
            .with_context(|| format!("cannot start {}", program_path.display()))?
    };

    let logs = logs_in(&out, &args.prefix).unwrap_or_default();
    let new: Vec<&PathBuf> = logs.iter().filter(|p| !before.contains(*p)).collect();
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
    if new.is_empty() {
        eprintln!(
            "lotus: no trace written to {}: was the program Python, and did it run a DataLoader or traced code? (lotus_trace needs Python 3.8+)",
            out.display()
        );
    } else {
        eprintln!(
            "lotus: trace in {}: {} log(s) ({} main, {} worker), {} bytes",
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
