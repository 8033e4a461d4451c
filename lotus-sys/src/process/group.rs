//! A child's descriptors, logs, bounded wait and process group.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::RawFd;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Clears `fd`'s close-on-exec flag. Async-signal-safe (fcntl only), so it
/// may run in a `pre_exec` hook: the child started there inherits `fd`,
/// no other does.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor number; an invalid one is an error.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `signal` to the process group `pgid` leads. A group that is
/// already gone is not an error.
pub fn signal_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pid {pgid} is out of range"),
        )
    })?;
    // SAFETY: kill(2) with a negative pid signals that process group.
    if unsafe { libc::kill(-pgid, signal) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// Stops the process group `child` leads (it was started with
/// `process_group(0)`): SIGINT first (vendor tools end their collection
/// on it), up to `grace` for the leader to exit, then SIGKILL for whatever
/// is left in the group (the target may outlive the tool); reaps the
/// leader and returns its status.
pub fn stop_group(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    signal_group(child.id(), libc::SIGINT)?;
    wait_for(child, grace)?;
    signal_group(child.id(), libc::SIGKILL)?;
    child.wait()
}

/// Waits up to `limit` for `child` to exit, polling every 20 ms: its
/// status, or `None` when it is still running at the limit.
pub fn wait_for(child: &mut Child, limit: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens (truncating, mode 0600) a log file and a second handle to it, for
/// a child's stdout and stderr. `path` belongs in lotus's private folder
/// for the run ([`crate::PrivateDir`], mode 0700); it is never opened
/// through a link all the same (`O_NOFOLLOW`).
pub fn log_pair(path: &Path) -> io::Result<(File, File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let again = log.try_clone()?;
    Ok((log, again))
}

/// The last `lines` lines of a log (at most its last 8 KiB), indented, for
/// an error message.
pub fn tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 8192;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) if text.trim().is_empty() => "    (it printed nothing)".to_string(),
        Ok(text) => {
            let all: Vec<&str> = text.trim_end().lines().collect();
            all[all.len().saturating_sub(lines)..]
                .iter()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Err(e) => format!("    (its output {} cannot be read: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_indented() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("log");
        std::fs::write(&p, "a\nb\nc\nd\n").expect("write");
        assert_eq!(tail(&p, 2), "    c\n    d");
        std::fs::write(&p, "  \n").expect("write");
        assert_eq!(tail(&p, 2), "    (it printed nothing)");
        assert!(tail(&dir.path().join("none"), 2).contains("cannot be read"));
    }

    #[test]
    fn a_log_is_never_opened_through_a_link() {
        let dir = tempfile::tempdir().expect("tmp");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep").expect("write");
        let log = dir.path().join("collect.log");
        std::os::unix::fs::symlink(&elsewhere, &log).expect("link");
        assert!(log_pair(&log).is_err(), "followed the link");
        assert_eq!(std::fs::read_to_string(&elsewhere).expect("read"), "keep");
    }
}
