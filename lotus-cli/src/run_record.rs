//! The record `lotus trace run` leaves of a run in the trace folder
//! (`<prefix>.run`), which `lotus report` shows at the top of its page.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// What `lotus trace run` recorded of a run (`lotus.run` in the trace
/// folder, [`run_file`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// The record's schema: [`RUN_SCHEMA`].
    pub schema: String,
    /// The traced command, as given after `--`.
    pub command: Vec<String>,
    /// The machine's name.
    pub host: String,
    /// The CPU model (`/proc/cpuinfo`'s `model name`).
    pub cpu: String,
    /// When it started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// The lotus that traced it.
    pub lotus_version: String,
}

/// `lotus.run`'s schema.
pub const RUN_SCHEMA: &str = "lotus.run/1";

/// The record's name in a trace folder: `<prefix>.run` (`lotus.run`),
/// beside `<prefix>.sampling`.
pub fn run_file(prefix: &str) -> String {
    format!("{prefix}.run")
}

/// The most of `lotus.run` read (it is a few hundred bytes).
const RUN_MAX_BYTES: u64 = 64 * 1024;

/// The most words of a command kept (a command line longer is cut, said).
const COMMAND_MAX_WORDS: usize = 200;

impl RunRecord {
    /// This run's record: `command`, this machine, now.
    pub fn now(command: &[String]) -> RunRecord {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        let started_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        RunRecord {
            schema: RUN_SCHEMA.to_string(),
            command: command.iter().take(COMMAND_MAX_WORDS).cloned().collect(),
            host,
            cpu,
            started_unix_s,
            lotus_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// Writes it into the trace folder `dir` (through lotus-sys's one
    /// writer).
    pub fn write(&self, dir: &Path, prefix: &str) -> Result<()> {
        let path = dir.join(run_file(prefix));
        let text = serde_json::to_string_pretty(self)?;
        lotus_sys::write_file(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads `dir`'s record: `Ok(None)` when it has none; an error naming
    /// the file when it is there but not a record (too big, not JSON,
    /// another schema). Opened inside the folder (no link out of it, a
    /// regular file), read no further than [`RUN_MAX_BYTES`].
    pub fn read(dir: &Path, prefix: &str) -> Result<Option<RunRecord>> {
        use std::io::Read as _;
        let name = run_file(prefix);
        let path = dir.join(&name);
        let folder = match lotus_sys::input::Folder::open(dir) {
            Ok(f) => f,
            // A single log file given as the trace: no record beside it.
            Err(_) => return Ok(None),
        };
        let f = match folder.open_file(Path::new(&name)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", path.display())),
        };
        if f.size() > RUN_MAX_BYTES {
            anyhow::bail!(
                "{}: {} bytes, more than a run record's {RUN_MAX_BYTES}: not written by lotus trace run; remove it or copy the folder without it",
                path.display(),
                f.size()
            );
        }
        let mut bytes = Vec::new();
        f.take(RUN_MAX_BYTES)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let r: RunRecord = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{}: not a run record of lotus trace run (JSON of schema {RUN_SCHEMA})",
                path.display()
            )
        })?;
        if r.schema != RUN_SCHEMA {
            anyhow::bail!(
                "{}: schema {:?}, this lotus reads {RUN_SCHEMA}",
                path.display(),
                r.schema
            );
        }
        if r.command.len() > COMMAND_MAX_WORDS {
            anyhow::bail!(
                "{}: a command of {} words, more than the {COMMAND_MAX_WORDS} lotus writes",
                path.display(),
                r.command.len()
            );
        }
        Ok(Some(r))
    }
}
