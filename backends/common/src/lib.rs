//! Process plumbing shared by the lotus backends.
//!
//! Every backend starts a process for the user's target (perf directly,
//! VTune and uProf through their command-line tools) the same way: in a
//! process group of its own (so stopping it reaches every worker it forks),
//! with the target's environment and working folder, and with the control
//! channel's descriptors inherited by that child only. The vendor drivers
//! also log their tools' output to files and quote the end of those logs in
//! errors. This crate holds those pieces once ([`vendor::VendorRun`] is a
//! vendor tool's whole collect-then-report run); lotus-core stays free of
//! FFI.
#![deny(missing_docs)]

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use lotus_core::Target;

pub mod reaper;
/// Whether a path is under the control of this user alone (moved to
/// `lotus-sys`; kept here so that callers compile unchanged).
pub use lotus_sys::trust;
pub mod vendor;

/// `clock`'s time in nanoseconds (`clock_gettime`): the monotonic clock
/// that windows and samples are stamped on, and the CPU-time clocks.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec; the clocks lotus reads always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `program args...` as a shell would show it.
pub fn command_line(program: &Path, args: &[OsString]) -> String {
    let mut target = Target::new(program);
    target.args = args.to_vec();
    target.command_line()
}

/// Clears `fd`'s close-on-exec flag. Async-signal-safe (fcntl only), so it
/// may run in a `pre_exec` hook.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(2) on a descriptor number; an invalid one is an error.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A command for `program args` that runs with `target`'s environment and
/// working folder, in a process group of its own, and inherits
/// `target.keep_fds` (in the child only); its output goes where
/// `target.output_fd` or `target.stdout_to_stderr` say.
pub(crate) fn command_for(program: &Path, args: &[OsString], target: &Target) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in &target.env {
        cmd.env(k, v);
    }
    if let Some(cwd) = &target.cwd {
        cmd.current_dir(cwd);
    }
    // Its own group: stopping it reaches the target and its workers, and a
    // Ctrl-C at the terminal goes to lotus, which stops the run itself.
    cmd.process_group(0);
    if let Some(fd) = target.output_fd {
        // SAFETY: the caller keeps `fd` open until the command is spawned.
        let output = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let (Ok(out), Ok(err)) = (output.try_clone_to_owned(), output.try_clone_to_owned()) {
            cmd.stdout(out).stderr(err);
        }
    } else if target.stdout_to_stderr {
        if let Ok(stderr) = io::stderr().as_fd().try_clone_to_owned() {
            cmd.stdout(stderr);
        }
    }
    let keep: Vec<RawFd> = target.keep_fds.clone();
    if !keep.is_empty() {
        // SAFETY: the hook runs between fork and exec and only calls
        // fcntl (async-signal-safe); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || keep.iter().try_for_each(|&fd| clear_cloexec(fd)));
        }
    }
    cmd
}

/// Sends `signal` to the process group `pgid` leads. A group that is
/// already gone is not an error.
pub(crate) fn signal_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
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

/// Stops the process group `child` leads: SIGINT first (vendor tools end
/// their collection on it), up to `grace` for the leader to exit, then
/// SIGKILL for whatever is left in the group (the target may outlive the
/// tool); reaps the leader and returns its status.
pub(crate) fn stop_group(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    signal_group(child.id(), libc::SIGINT)?;
    wait_for(child, grace)?;
    signal_group(child.id(), libc::SIGKILL)?;
    child.wait()
}

/// Waits up to `limit` for `child` to exit, polling every 20 ms: its
/// status, or `None` when it is still running at the limit.
pub(crate) fn wait_for(child: &mut Child, limit: Duration) -> io::Result<Option<ExitStatus>> {
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

/// Opens (truncating) a log file and a second handle to it, for a child's
/// stdout and stderr. `path` is in lotus's private folder for the run
/// (`lotus_sys::PrivateDir`, mode 0700): never through a link all the same.
pub(crate) fn log_pair(path: &Path) -> io::Result<(File, File)> {
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
    fn kept_descriptors_reach_the_child_and_the_group_can_be_signalled() {
        let (r, w) = std::io::pipe().expect("pipe");
        use std::os::fd::AsRawFd;
        let fd = w.as_raw_fd();
        let mut target = Target::default();
        target.keep_fds = vec![fd];
        let script = format!("echo hi >&{fd}; sleep 30");
        let mut child = command_for(Path::new("/bin/sh"), &["-c".into(), script.into()], &target)
            .spawn()
            .expect("spawn");
        drop(w);
        let mut got = String::new();
        let mut r = r;
        let mut buf = [0u8; 3];
        r.read_exact(&mut buf)
            .expect("the child wrote through the kept fd");
        got.push_str(&String::from_utf8_lossy(&buf));
        assert_eq!(got, "hi\n");
        signal_group(child.id(), libc::SIGKILL).expect("signal");
        let status = child.wait().expect("wait");
        assert!(!status.success());
        // Signalling a group that is gone is fine.
        let mut sleeper = command_for(Path::new("/bin/sleep"), &["30".into()], &Target::default())
            .spawn()
            .expect("spawn");
        let status = stop_group(&mut sleeper, Duration::from_secs(2)).expect("stop");
        assert!(!status.success(), "sleep was stopped, not finished");
        signal_group(child.id(), libc::SIGKILL).expect("gone group");
    }
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals that are not API: each block must fail to compile (E0603:
/// private).
///
/// ```compile_fail,E0603
/// use lotus_backend_common::command_for;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_backend_common::log_pair;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;
