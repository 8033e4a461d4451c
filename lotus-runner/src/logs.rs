//! The trace folder and its logs: the folder checked (no other user may
//! write it), the logs of a prefix and of this run found.

use std::io;
use std::path::{Path, PathBuf};

use lotus_sys::trust;

use crate::error::{Context, Result, RunnerError};
use crate::progress::{MessageKind, Progress};

/// Whether `name` is a trace log of `prefix`: `<prefix>_main_pid_<pid>` or
/// `<prefix>_worker_pid_<pid>`, or `<prefix>.<n>_...` (the tracer's name
/// when the first was taken).
pub(crate) fn is_log_of(name: &str, prefix: &str) -> bool {
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
pub(crate) fn is_itt_log_of(name: &str, prefix: &str) -> bool {
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
pub(crate) const ITT_LOG_TAG: &str = ".itt";

/// Whether the log at `path` belongs to the run `run_id`: its header
/// (first line) carries `run=<run_id>`.
pub(crate) fn is_log_of_run(path: &Path, run_id: &str) -> bool {
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
pub(crate) fn check_out_folder(out: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(out)
        .context_with(|| format!("cannot resolve the trace folder {}", out.display()))?;
    // The folders above must be safe before anything is created under them.
    if let Some(existing) = absolute.ancestors().skip(1).find(|a| a.exists()) {
        trust::check_path(existing, false).map_err(|u| untrusted_out(out, &u))?;
    }
    lotus_sys::create_dir_all(&absolute, 0o755).map_err(|e| match e {
        lotus_sys::Error::Untrusted { .. } => RunnerError::Refused(format!(
            "the trace folder {} is not safe to write: {e}",
            out.display()
        )),
        e => RunnerError::Context {
            context: format!("cannot create the trace folder {}", out.display()),
            source: Box::new(e),
        },
    })?;
    let canonical = std::fs::canonicalize(&absolute)
        .context_with(|| format!("cannot resolve {}", out.display()))?;
    trust::check_path(&absolute, true).map_err(|u| untrusted_out(out, &u))?;
    Ok(canonical)
}

pub(crate) fn untrusted_out(out: &Path, why: &trust::Untrusted) -> RunnerError {
    RunnerError::Refused(format!(
        "the trace folder {} is not safe to write: {why}; another user could plant files or links where the job writes its logs. Use a folder that only you (and root) can write, e.g. `mkdir -m 755 ~/trace` (or `chmod go-w` the folder)",
        out.display()
    ))
}

/// An id for this run, unique on this machine: lotus's pid and the time.
pub(crate) fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

/// The trace logs of `prefix` directly in `dir` (the tracer's, or with
/// `itt`, those of ITT tasks).
pub(crate) fn logs_in(dir: &Path, prefix: &str, itt: bool) -> io::Result<Vec<PathBuf>> {
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

/// A log of this run whose process did not close it (killed outright: its
/// file ends in the NUL bytes the tracer grows it by), cut to its lines.
struct CutLog {
    path: PathBuf,
    pid: u32,
    /// `worker` or `main`, as its name says.
    worker: bool,
    /// Its process's parent, from the header (`ppid=`; none in the
    /// original format).
    ppid: Option<u32>,
    /// The event lines it keeps.
    events: u64,
    /// The latest end of its events (wall clock, ns).
    last_ns: Option<u64>,
    /// Where its lines end now.
    end: u64,
    /// The file, open to add lotus's note.
    file: std::fs::File,
}

/// The most of a line kept to read its fields (name, start, duration).
const LINE_HEAD: usize = 256;

/// The log at `path`, when it ends in a NUL byte and its process is gone:
/// cut at the end of its last whole line before its first NUL byte (what
/// every reader reads of it), with what it keeps.
fn cut_log(path: &Path) -> io::Result<Option<CutLog>> {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let Some(name) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(lotus_trace::parse_file_name)
    else {
        return Ok(None);
    };
    if lotus_sys::process::is_running(name.pid) {
        return Ok(None);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(None);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, meta.len() - 1)?;
    if last[0] != 0 {
        return Ok(None);
    }
    let mut cut = CutLog {
        path: path.to_path_buf(),
        pid: name.pid,
        worker: name.role == lotus_trace::Role::Worker,
        ppid: None,
        events: 0,
        last_ns: None,
        end: 0,
        file: file.try_clone()?,
    };
    let mut reader = BufReader::with_capacity(64 << 10, &file);
    // `pos`: bytes consumed; `end`: the end of the last whole line.
    let (mut pos, mut end, mut first) = (0u64, 0u64, true);
    let mut head: Vec<u8> = Vec::with_capacity(LINE_HEAD);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let nul = buf.iter().position(|&b| b == 0);
        let usable = &buf[..nul.unwrap_or(buf.len())];
        let mut start = 0;
        while let Some(i) = usable[start..].iter().position(|&b| b == b'\n') {
            let line = &usable[start..start + i];
            let room = LINE_HEAD.saturating_sub(head.len());
            head.extend_from_slice(&line[..line.len().min(room)]);
            cut.line(&head, first);
            first = false;
            head.clear();
            start += i + 1;
            end = pos + start as u64;
        }
        let rest = &usable[start..];
        let room = LINE_HEAD.saturating_sub(head.len());
        head.extend_from_slice(&rest[..rest.len().min(room)]);
        let used = usable.len();
        reader.consume(used);
        pos += used as u64;
        if nul.is_some() {
            break;
        }
    }
    file.set_len(end)?;
    cut.end = end;
    Ok(Some(cut))
}

impl CutLog {
    /// Reads what it needs of one whole line (its first [`LINE_HEAD`]
    /// bytes): the header's `ppid=`, an event's end.
    fn line(&mut self, head: &[u8], first: bool) {
        let Ok(text) = std::str::from_utf8(head) else {
            return;
        };
        if first && text.starts_with(lotus_trace::HEADER_TAG) {
            self.ppid = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("ppid=")?.parse().ok());
        }
        if !text.starts_with('S') {
            return;
        }
        self.events += 1;
        let mut fields = text.split(',').skip(1);
        let number = |f: Option<&str>| f.and_then(|f| f.parse::<u64>().ok());
        if let (Some(start), Some(dur)) = (number(fields.next()), number(fields.next())) {
            let end = start.saturating_add(dur);
            self.last_ns = Some(self.last_ns.map_or(end, |l| l.max(end)));
        }
    }
}

/// `SIGKILL` for 9, and the other signals that end a process.
fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// The note a parent's tracer leaves of a child that ended by a signal:
/// `# lotus-trace: child pid=<pid> ended by signal=<n> (<name>)`.
const CHILD_NOTE: &str = "# lotus-trace: child pid=";

/// The children that the logs' processes found ended by a signal (their
/// notes), pid -> signal.
fn children_ended(logs: &[PathBuf]) -> std::collections::HashMap<u32, i32> {
    use std::io::{BufRead, BufReader, Read};
    let mut ended = std::collections::HashMap::new();
    for log in logs {
        let Ok(file) = lotus_sys::input::open_regular(log) else {
            continue;
        };
        let mut reader = BufReader::with_capacity(64 << 10, file);
        let mut line = Vec::new();
        // Lines read whole up to 4 KiB (a note is under 100 bytes).
        while (&mut reader)
            .take(4096)
            .read_until(b'\n', &mut line)
            .is_ok_and(|n| n > 0)
        {
            if line.first() == Some(&0) {
                break;
            }
            if line.ends_with(b"\n") || line.len() < 4096 {
                if let Some(rest) = line.strip_prefix(CHILD_NOTE.as_bytes()) {
                    let text = String::from_utf8_lossy(rest);
                    let mut words = text.split_whitespace();
                    let pid = words.next().and_then(|p| p.parse::<u32>().ok());
                    let signal = words
                        .find_map(|w| w.strip_prefix("signal="))
                        .and_then(|s| s.parse::<i32>().ok());
                    if let (Some(pid), Some(signal)) = (pid, signal) {
                        ended.insert(pid, signal);
                    }
                }
                line.clear();
            } else {
                // The rest of a long line: not a note.
                line.clear();
                let _ = reader.skip_until(b'\n');
            }
        }
    }
    ended
}

/// Finds this run's logs (`logs`) that their processes did not close
/// (killed outright: SIGKILL, the OOM killer), cuts each to its whole
/// lines (so that every reader, the study's pandas scripts too, reads
/// them), and says which process died and how: its parent's note of it
/// (a DataLoader worker: `child pid=... ended by signal=...`), the main
/// process's status (`main`, where it was lotus's own child), or, with no
/// known cause, that it ended without closing its log. Each line goes to
/// stderr and, in the lotus format, as a note at the end of that log.
/// Logs of processes still running are left alone.
pub(crate) fn say_cut_logs(
    logs: &[PathBuf],
    lotus_format: bool,
    started: std::time::SystemTime,
    main: std::process::ExitStatus,
    progress: &mut dyn Progress,
) {
    use std::os::unix::process::ExitStatusExt;
    let mut cut = Vec::new();
    for log in logs {
        match cut_log(log) {
            Ok(Some(c)) => cut.push(c),
            Ok(None) => {}
            Err(e) => progress.message(
                MessageKind::Warning,
                &format!("warning: cannot read {} to its end: {e}", log.display()),
            ),
        }
    }
    if cut.is_empty() {
        return;
    }
    let me = std::process::id();
    let need_notes = cut.iter().any(|c| c.ppid != Some(me));
    let ended = if need_notes {
        children_ended(logs)
    } else {
        Default::default()
    };
    let started_ns = started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    for c in &cut {
        let who = match (c.ppid == Some(me), c.worker) {
            (true, _) => "the main process",
            (false, true) => "worker",
            (false, false) => "process",
        };
        let signal = if c.ppid == Some(me) {
            main.signal()
        } else {
            ended.get(&c.pid).copied()
        };
        let how = match signal {
            Some(s) => format!("was killed by {} (signal {s})", signal_name(s)),
            None => "ended without closing its log (killed?)".to_string(),
        };
        let at = match c.last_ns {
            Some(ns) => format!(
                "cut short at {:.3} s into the run",
                ns.saturating_sub(started_ns) as f64 / 1e9
            ),
            None => "cut short before its first event".to_string(),
        };
        let message = format!(
            "{who} pid {} {how}: its log was {at}, {} events kept ({})",
            c.pid,
            c.events,
            c.path.display()
        );
        progress.message(MessageKind::Warning, &message);
        if lotus_format {
            use std::os::unix::fs::FileExt;
            let note = format!("# lotus-trace: lotus trace run: {message}\n");
            if let Err(e) = c.file.write_all_at(note.as_bytes(), c.end) {
                progress.message(
                    MessageKind::Warning,
                    &format!("warning: cannot add a note to {}: {e}", c.path.display()),
                );
            }
        }
    }
}

#[cfg(test)]
mod cut_tests {
    use super::*;

    #[test]
    fn a_log_with_a_nul_tail_is_cut_after_its_last_whole_line() {
        let tmp = tempfile::tempdir().expect("tmp");
        // No process has this pid (above the kernel's largest).
        let path = tmp.path().join("lotus_worker_pid_999999999");
        let whole = "#lotus-trace v1 role=worker pid=999999999 ppid=7 wall_ns=1 monotonic_ns=1\n\
                     SOp,100,5,kind=op\n# lotus-trace: clock wall_ns=2 monotonic_ns=2\nSOp,200,50,kind=op\n";
        let mut bytes = whole.as_bytes().to_vec();
        bytes.extend_from_slice(b"SOp,3");
        bytes.extend(std::iter::repeat_n(0u8, 70_000));
        std::fs::write(&path, &bytes).expect("log");
        let cut = cut_log(&path).expect("read").expect("cut short");
        assert_eq!((cut.events, cut.last_ns, cut.ppid), (2, Some(250), Some(7)));
        assert_eq!(std::fs::read(&path).expect("log"), whole.as_bytes());
        // A log that ends clean is left alone.
        assert!(cut_log(&path).expect("read").is_none());
    }
}
