//! The trace folder and its logs: the folder checked (no other user may
//! write it), the logs of a prefix and of this run found.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use lotus_sys::trust;

/// Whether `name` is a trace log of `prefix`: `<prefix>_main_pid_<pid>` or
/// `<prefix>_worker_pid_<pid>`, or `<prefix>.<n>_...` (the tracer's name
/// when the first was taken).
pub(super) fn is_log_of(name: &str, prefix: &str) -> bool {
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
pub(super) fn is_itt_log_of(name: &str, prefix: &str) -> bool {
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
pub(super) const ITT_LOG_TAG: &str = ".itt";

/// Whether the log at `path` belongs to the run `run_id`: its header
/// (first line) carries `run=<run_id>`.
pub(super) fn is_log_of_run(path: &Path, run_id: &str) -> bool {
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
pub(super) fn check_out_folder(out: &Path) -> Result<PathBuf> {
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

pub(super) fn untrusted_out(out: &Path, why: &trust::Untrusted) -> anyhow::Error {
    anyhow!(
        "the trace folder {} is not safe to write: {why}; another user could plant files or links where the job writes its logs. Use a folder that only you (and root) can write, e.g. `mkdir -m 755 ~/trace` (or `chmod go-w` the folder)",
        out.display()
    )
}

/// An id for this run, unique on this machine: lotus's pid and the time.
pub(super) fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

/// The trace logs of `prefix` directly in `dir` (the tracer's, or with
/// `itt`, those of ITT tasks).
pub(super) fn logs_in(dir: &Path, prefix: &str, itt: bool) -> io::Result<Vec<PathBuf>> {
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
