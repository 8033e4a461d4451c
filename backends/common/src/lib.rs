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
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use lotus_core::Target;

pub mod reaper;
pub mod vendor;

/// `program args...` as a shell would show it.
pub fn command_line(program: &Path, args: &[OsString]) -> String {
    Target {
        program: program.to_path_buf(),
        args: args.to_vec(),
        ..Target::default()
    }
    .command_line()
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
pub fn command_for(program: &Path, args: &[OsString], target: &Target) -> Command {
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

/// Stops the process group `child` leads: SIGINT first (vendor tools end
/// their collection on it), up to `grace` for the leader to exit, then
/// SIGKILL for whatever is left in the group (the target may outlive the
/// tool); reaps the leader and returns its status.
pub fn stop_group(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    signal_group(child.id(), libc::SIGINT)?;
    let deadline = Instant::now() + grace;
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(child.id(), libc::SIGKILL)?;
    child.wait()
}

/// Runs `cmd` in a process group of its own with stdin closed and its
/// output captured, for at most `limit`: past it the group is killed and
/// `Ok(None)` returned. For short commands that lotus only asks something
/// (`python --version`): `Command::output` would wait forever on one that
/// hangs, or whose leftover process keeps the output pipes open.
pub fn output_within(cmd: &mut Command, limit: Duration) -> io::Result<Option<Output>> {
    use std::sync::mpsc;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    // Each pipe is read on a thread of its own, so a chatty command cannot
    // block on a full pipe; the threads end when the pipes close.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                let _ = tx.send(bytes);
            });
        }
        rx
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            signal_group(child.id(), libc::SIGKILL)?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // What it started is not waited for (it would hold the pipes open).
    signal_group(child.id(), libc::SIGKILL)?;
    let left = || deadline.saturating_duration_since(Instant::now());
    let stdout = stdout.recv_timeout(left()).unwrap_or_default();
    let stderr = stderr.recv_timeout(left()).unwrap_or_default();
    Ok(Some(Output {
        status,
        stdout,
        stderr,
    }))
}

/// Opens (truncating) a log file and a second handle to it, for a child's
/// stdout and stderr.
pub fn log_pair(path: &Path) -> io::Result<(File, File)> {
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
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
    fn output_within_returns_the_output_or_gives_up_in_time() {
        let sh = |script: &str| {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", script]);
            cmd
        };
        let out = output_within(
            &mut sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .expect("runs")
        .expect("in time");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let start = Instant::now();
        let hung = output_within(&mut sh("sleep 30"), Duration::from_millis(300)).expect("runs");
        assert!(hung.is_none());
        assert!(start.elapsed() < Duration::from_secs(5));
        // A leftover process holding the pipes does not hold the caller.
        let start = Instant::now();
        let out = output_within(&mut sh("sleep 30 & echo done"), Duration::from_secs(10))
            .expect("runs")
            .expect("in time");
        assert_eq!(out.stdout, b"done\n");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn kept_descriptors_reach_the_child_and_the_group_can_be_signalled() {
        let (r, w) = std::io::pipe().expect("pipe");
        use std::os::fd::AsRawFd;
        let fd = w.as_raw_fd();
        let target = Target {
            keep_fds: vec![fd],
            ..Target::default()
        };
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
