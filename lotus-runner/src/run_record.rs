//! The record a traced run leaves in the trace folder (`<prefix>.run`,
//! schema `lotus.run/1`), which `lotus report` shows at the top of its
//! page.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{with_causes, Context, Result, RunnerError};

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
    /// What `lotus trace run` warned of when the run ended (an `--op`
    /// that matched nothing, or nothing that ran), kept for `lotus
    /// attribute` and `lotus report`, which read the folder later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
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

/// The most notes kept (one per `--op` at most; more are cut, said).
const NOTES_MAX: usize = 100;

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
            notes: Vec::new(),
        }
    }

    /// Writes it into the trace folder `dir` (through lotus-sys's one
    /// writer).
    pub fn write(&self, dir: &Path, prefix: &str) -> Result<()> {
        let path = dir.join(run_file(prefix));
        let text = serde_json::to_string_pretty(self)
            .context_with(|| format!("cannot write {}", path.display()))?;
        lotus_sys::write_file(&path, text.as_bytes())
            .context_with(|| format!("cannot write {}", path.display()))
    }

    /// Reads `dir`'s record: `Ok(None)` when it has none; an error naming
    /// the file when it is there but not a record (too big, not JSON,
    /// another schema). Opened inside the folder (no link out of it, a
    /// regular file), read no further than 64 KiB.
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
            Err(e) => return Err(RunnerError::Refused(format!("{}: {e}", path.display()))),
        };
        if f.size() > RUN_MAX_BYTES {
            return Err(RunnerError::Refused(format!(
                "{}: {} bytes, more than a run record's {RUN_MAX_BYTES}: not written by lotus trace run; remove it or copy the folder without it",
                path.display(),
                f.size()
            )));
        }
        let mut bytes = Vec::new();
        f.take(RUN_MAX_BYTES)
            .read_to_end(&mut bytes)
            .context_with(|| format!("cannot read {}", path.display()))?;
        let r: RunRecord = serde_json::from_slice(&bytes).context_with(|| {
            format!(
                "{}: not a run record of lotus trace run (JSON of schema {RUN_SCHEMA})",
                path.display()
            )
        })?;
        if r.schema != RUN_SCHEMA {
            return Err(RunnerError::Refused(format!(
                "{}: schema {:?}, this lotus reads {RUN_SCHEMA}",
                path.display(),
                r.schema
            )));
        }
        if r.command.len() > COMMAND_MAX_WORDS {
            return Err(RunnerError::Refused(format!(
                "{}: a command of {} words, more than the {COMMAND_MAX_WORDS} lotus writes",
                path.display(),
                r.command.len()
            )));
        }
        if r.notes.len() > NOTES_MAX {
            return Err(RunnerError::Refused(format!(
                "{}: {} notes, more than the {NOTES_MAX} lotus writes",
                path.display(),
                r.notes.len()
            )));
        }
        Ok(Some(r))
    }

    /// Keeps `notes` (the run's warnings), at most 100, the last
    /// one saying how many more there were.
    pub fn with_notes(mut self, mut notes: Vec<String>) -> RunRecord {
        if notes.len() > NOTES_MAX {
            let more = notes.len() - (NOTES_MAX - 1);
            notes.truncate(NOTES_MAX - 1);
            notes.push(format!(
                "{more} more warnings, said on standard error when the run ended"
            ));
        }
        self.notes = notes;
        self
    }

    /// The notes of `dir`'s record, for a command that reads the folder
    /// later: none where it has no record; a note saying why where the
    /// record cannot be read (the rest of the folder still can).
    pub fn notes_of(dir: &Path, prefix: &str) -> Vec<String> {
        match RunRecord::read(dir, prefix) {
            Ok(Some(r)) => r
                .notes
                .into_iter()
                .map(|n| format!("when traced: {n}"))
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => vec![format!(
                "{}: the run's own warnings are not shown",
                with_causes(&e)
            )],
        }
    }
}

/// A run as `lotus report`'s page shows it at its top: from its
/// `lotus.run` where it has one, else what its logs say.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunShown {
    /// The configuration's label.
    pub label: String,
    /// The trace folder.
    pub dir: String,
    /// The command, or why it is not known.
    pub command: String,
    /// Whether `command` is the command (else a note).
    pub command_known: bool,
    /// The host(s).
    pub host: String,
    /// The CPU model.
    pub cpu: String,
    /// When it ran (UTC).
    pub date: String,
    /// The lotus that traced it.
    pub lotus_version: String,
    /// What `lotus trace run` warned of when the run ended.
    pub notes: Vec<String>,
}

/// The last second RFC 3339 can write (9999-12-31 23:59:59 UTC).
const LAST_RFC3339_S: u64 = 253_402_300_799;

/// `YYYY-MM-DD hh:mm:ss UTC` of a Unix time read from a received folder,
/// or, past the year 9999 (a damaged or hostile `lotus.run`, a clock far
/// off), what it was and that it is out of range: never a panic.
pub fn date_of_unix_s(s: u64) -> String {
    let at = (s <= LAST_RFC3339_S)
        .then(|| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(s)))
        .flatten();
    match at {
        Some(at) => humantime::format_rfc3339_seconds(at)
            .to_string()
            .replace('T', " ")
            .replace('Z', " UTC"),
        None => format!("out of range ({s} s after 1970: past the year 9999)"),
    }
}

impl RunShown {
    /// From the folder's record where it has one, else from its logs:
    /// `hosts` (from the logs' headers) and `first_ns` (the earliest event,
    /// wall clock).
    pub fn of(
        label: &str,
        dir: &Path,
        record: Option<&RunRecord>,
        hosts: &[String],
        first_ns: Option<u64>,
    ) -> RunShown {
        let unknown = "not recorded (traced by a lotus that did not write lotus.run)";
        let date_of = date_of_unix_s;
        match record {
            Some(r) => RunShown {
                label: label.to_string(),
                dir: dir.display().to_string(),
                command: shell_words(&r.command),
                command_known: true,
                host: or_dash(&r.host),
                cpu: or_dash(&r.cpu),
                date: date_of(r.started_unix_s),
                lotus_version: or_dash(&r.lotus_version),
                notes: r.notes.clone(),
            },
            None => RunShown {
                label: label.to_string(),
                dir: dir.display().to_string(),
                command: unknown.to_string(),
                command_known: false,
                host: if hosts.is_empty() {
                    "-".to_string()
                } else {
                    hosts.join(", ")
                },
                cpu: "not recorded".to_string(),
                date: first_ns.map_or("-".to_string(), |ns| {
                    format!("{} (first event)", date_of(ns / 1_000_000_000))
                }),
                lotus_version: "not recorded".to_string(),
                notes: Vec::new(),
            },
        }
    }
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

/// A command as one would type it: words with spaces or quotes quoted
/// ([`lotus_core::shell_quote`]).
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| lotus_core::shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The host's wall clock as the kernel's NTP discipline keeps it
/// (`adjtimex`, read only): `synced:<estimated error us>:<maximum error
/// us>`, `unsynced:-:<maximum error us>` where no time service steers it,
/// `unknown` where the call fails. What the folders of one job's hosts
/// say of how far their clocks may disagree.
pub fn clock_state() -> String {
    // SAFETY: a zeroed timex with modes 0 only reads the kernel's state.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut t) };
    if state < 0 {
        return "unknown".to_string();
    }
    if state == libc::TIME_ERROR || t.status & libc::STA_UNSYNC != 0 {
        return format!("unsynced:-:{}", t.maxerror);
    }
    format!("synced:{}:{}", t.esterror, t.maxerror)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_past_the_year_9999_are_said_not_panicked_on() {
        assert_eq!(
            super::date_of_unix_s(1_700_000_000),
            "2023-11-14 22:13:20 UTC"
        );
        assert_eq!(
            super::date_of_unix_s(super::LAST_RFC3339_S),
            "9999-12-31 23:59:59 UTC"
        );
        for s in [super::LAST_RFC3339_S + 1, 1 << 63, u64::MAX] {
            let said = super::date_of_unix_s(s);
            assert!(
                said.contains("out of range") && said.contains(&s.to_string()),
                "{said}"
            );
        }
    }

    use super::*;

    /// The run's warnings are kept past the run (at most [`NOTES_MAX`],
    /// the rest counted), given back to the commands that read the folder
    /// later, and a damaged record costs them only its notes, said.
    #[test]
    fn the_runs_warnings_are_kept_bounded_and_read_back() {
        let dir = tempfile::tempdir().expect("tmp");
        let many: Vec<String> = (0..NOTES_MAX + 5).map(|i| format!("warning {i}")).collect();
        RunRecord::now(&["python".into()])
            .with_notes(many)
            .write(dir.path(), "lotus")
            .expect("written");
        let notes = RunRecord::notes_of(dir.path(), "lotus");
        assert_eq!(notes.len(), NOTES_MAX);
        assert_eq!(notes[0], "when traced: warning 0");
        assert!(
            notes[NOTES_MAX - 1].contains("6 more warnings"),
            "{notes:?}"
        );
        std::fs::write(dir.path().join("lotus.run"), b"{not json").expect("damage");
        let notes = RunRecord::notes_of(dir.path(), "lotus");
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("lotus.run") && notes[0].contains("not shown"),
            "{notes:?}"
        );
        assert!(RunRecord::notes_of(&dir.path().join("none"), "lotus").is_empty());
    }
}
