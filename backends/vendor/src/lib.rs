//! The collection the vendor backends share: VTune and uProf both run
//! their tool's collect command around the user's target, then its report
//! command, and read what it wrote. [`VendorRun`] is that
//! collect-then-report run and [`VendorCollection`] the
//! [`lotus_core::Collection`] both return; each backend supplies only its
//! [`VendorReport`] step.
//!
//! The collect command starts like every process lotus starts for a
//! target: in a process group of its own (so stopping it reaches every
//! worker it forks), with the target's environment and working folder,
//! and with the control channel's descriptors inherited by that child
//! only. The generic pieces (inherited descriptors, logs, bounded waits,
//! group signals, the reaper) are `lotus_sys::process`'s; this crate holds
//! what needs lotus-core's [`Target`] and [`lotus_core::Error`].
#![deny(missing_docs)]

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use lotus_core::Target;
use lotus_sys::process;

mod vendor;

pub use vendor::{
    io_error, report_limit, Tool, VendorCollection, VendorReport, VendorRun, REPORT_LIMIT,
    REPORT_LIMIT_VAR,
};

/// `program args...` as a shell would show it.
pub fn command_line(program: &Path, args: &[OsString]) -> String {
    let mut target = Target::new(program);
    target.args = args.to_vec();
    target.command_line()
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
            cmd.pre_exec(move || keep.iter().try_for_each(|&fd| process::clear_cloexec(fd)));
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

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
        process::signal_group(child.id(), libc::SIGKILL).expect("signal");
        let status = child.wait().expect("wait");
        assert!(!status.success());
        // Signalling a group that is gone is fine.
        let mut sleeper = command_for(Path::new("/bin/sleep"), &["30".into()], &Target::default())
            .spawn()
            .expect("spawn");
        let status = process::stop_group(&mut sleeper, Duration::from_secs(2)).expect("stop");
        assert!(!status.success(), "sleep was stopped, not finished");
        process::signal_group(child.id(), libc::SIGKILL).expect("gone group");
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
/// use lotus_vendor::command_for;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;
