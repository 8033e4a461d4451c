//! Starting the target held at a gate, so that profiling is attached before
//! it runs a single instruction of its own.
//!
//! The child is forked by `std::process::Command` with a `pre_exec` hook
//! that (after std has put it in its own process group) clears close-on-exec
//! on the descriptors the target must inherit, writes its pid to a "ready"
//! pipe and blocks reading a "go" pipe. The lotus side opens its events on
//! that pid, then writes the go byte and the child execs the program.
//!
//! `Command::spawn` returns only once the child has exec'd (it waits on an
//! internal pipe to report exec errors), so it runs on a helper thread while
//! the calling thread attaches.
//!
//! No side waits forever on the other. The child closes its inherited copy
//! of the go pipe's write end before it waits, so the gate reads end-of-file
//! as soon as lotus gives up (or dies: the kernel closes its descriptors);
//! it also asks for SIGKILL when the spawning thread dies
//! (`PR_SET_PDEATHSIG`, cleared again before exec). On the lotus side every
//! wait on the child or the spawning thread is bounded by [`GATE_WAIT`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// The byte that lets the child exec.
const GO: u8 = b'g';

/// The longest lotus waits for the forked child to reach the gate, or for
/// `Command::spawn` to return once the gate is opened or closed. Both take
/// microseconds; a child that takes this long is stuck (a working folder on
/// a dead network mount, a stopped process), and waiting longer would hang
/// lotus past its `--timeout` and Ctrl-C.
const GATE_WAIT: Duration = Duration::from_secs(30);

/// A forked child waiting at the gate.
#[derive(Debug)]
pub struct GatedChild {
    pid: u32,
    go: Option<OwnedFd>,
    /// What the spawning thread's `Command::spawn` returned.
    spawned: Option<Receiver<io::Result<Child>>>,
}

/// Forks `cmd` and waits until the child stands at the gate: in its own
/// process group, with `keep_fds` inherited (close-on-exec cleared), not
/// yet exec'd. [`GatedChild::release`] lets it run the program;
/// [`GatedChild::abort`] (or dropping it) ends it without running it.
pub fn spawn_gated(mut cmd: Command, keep_fds: Vec<RawFd>) -> io::Result<GatedChild> {
    let (ready_r, ready_w) = pipe().map_err(with_fd_hint)?;
    let (go_r, go_w) = pipe().map_err(with_fd_hint)?;
    // Its own group, so that a kill of the group reaches every worker it
    // starts.
    cmd.process_group(0);
    let keep = keep_fds;
    let ready_fd = ready_w.as_raw_fd();
    let go_fd = go_r.as_raw_fd();
    // The child's copies of lotus's own ends: closed in the child, so that
    // only lotus holds the go pipe's write end and its death or giving up
    // reads as end-of-file at the gate.
    let parent_ends = [go_w.as_raw_fd(), ready_r.as_raw_fd()];
    // SAFETY: getpid(2) cannot fail.
    let lotus_pid = unsafe { libc::getpid() };
    // SAFETY: the hook runs between fork and exec and calls only
    // async-signal-safe functions (close, prctl, getppid, fcntl, getpid,
    // write, read); it does not allocate (io::Error from an errno does not).
    unsafe {
        cmd.pre_exec(move || {
            for fd in parent_ends {
                libc::close(fd);
            }
            // Killed if the spawning thread dies while we wait (it lives
            // until exec). The check after it covers a death before it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != lotus_pid {
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
            for &fd in &keep {
                super::clear_cloexec(fd)?;
            }
            let pid = libc::getpid().to_ne_bytes();
            let mut sent = 0;
            while sent < pid.len() {
                let n = libc::write(ready_fd, pid[sent..].as_ptr().cast(), pid.len() - sent);
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                } else {
                    sent += n as usize;
                }
            }
            let mut byte = 0u8;
            loop {
                let n = libc::read(go_fd, (&mut byte as *mut u8).cast(), 1);
                if n == 1 && byte == GO {
                    // The program must not die with the spawning thread,
                    // which ends as soon as exec succeeded.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    return Ok(());
                }
                if n == 0 || n == 1 {
                    // The lotus side gave up (or died): do not run unprofiled.
                    return Err(io::Error::from_raw_os_error(libc::ECANCELED));
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        });
    }

    // The helper thread owns the child's pipe ends: they close once spawn
    // has returned, which is what makes a failed fork read as EOF here.
    let (sent, spawned) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("lotus-spawn-gated".into())
        .spawn(move || {
            let result = cmd.spawn();
            drop((ready_w, go_r));
            // The receiver may have given up waiting: the child is then
            // killed and reaped here, not left behind.
            if let Err(mpsc::SendError(Ok(mut child))) = sent.send(result) {
                let _ = child.kill();
                let _ = child.wait();
            }
        })
        .map_err(with_fd_hint)?;

    let mut buf = [0u8; 4];
    match read_full_within(&ready_r, &mut buf, GATE_WAIT) {
        Ok(true) => Ok(GatedChild {
            pid: u32::from_ne_bytes(buf),
            go: Some(go_w),
            spawned: Some(spawned),
        }),
        Ok(false) | Err(_) => {
            drop(go_w);
            let source = match spawned.recv_timeout(GATE_WAIT) {
                Ok(Err(e)) => e,
                Ok(Ok(mut child)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    io::Error::other("the child exited before reaching the profiling gate")
                }
                Err(RecvTimeoutError::Timeout) => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the forked child did not reach the profiling gate within {} s",
                        GATE_WAIT.as_secs()
                    ),
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    io::Error::other("the spawning thread panicked")
                }
            };
            Err(with_fd_hint(source))
        }
    }
}

impl GatedChild {
    /// The child's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec the program; returns it once exec succeeded.
    pub fn release(mut self) -> io::Result<Child> {
        let go = self.go.take();
        let written = match &go {
            Some(fd) => write_byte(fd, GO),
            None => Err(io::Error::other("gate already used")),
        };
        drop(go);
        let joined = self.join();
        match (written, joined) {
            (Ok(()), Ok(child)) => Ok(child),
            (_, Err(e)) | (Err(e), Ok(_)) => Err(e),
        }
    }

    /// Closes the gate without letting the child run: it exits without
    /// exec'ing and is reaped.
    pub fn abort(mut self) {
        self.go = None;
        if let Ok(mut child) = self.join() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What `Command::spawn` returned, waiting at most [`GATE_WAIT`].
    fn join(&mut self) -> io::Result<Child> {
        let Some(spawned) = self.spawned.take() else {
            return Err(io::Error::other("the child was already released"));
        };
        match spawned.recv_timeout(GATE_WAIT) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                // SAFETY: kill(2) of the forked child, not yet reaped (the
                // spawning thread reaps it only after we stop listening).
                unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the child neither started the program nor exited within {} s of \
                         leaving the profiling gate; killed it",
                        GATE_WAIT.as_secs()
                    ),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(io::Error::other("the spawning thread panicked"))
            }
        }
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        // Dropped without release: same as abort.
        self.go = None;
        if self.spawned.is_some() {
            if let Ok(mut child) = self.join() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `e`, saying what to do when it is the open-file limit (`EMFILE`,
/// `ENFILE`): raise `ulimit -n`.
pub fn with_fd_hint(e: io::Error) -> io::Error {
    if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) {
        return io::Error::new(
            e.kind(),
            format!("{e}: raise the open-file limit, e.g. `ulimit -n 4096` before running lotus"),
        );
    }
    e
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Fills `buf`; `Ok(false)` on EOF before it is full, a `TimedOut` error
/// when it is not full within `limit`.
fn read_full_within(fd: &OwnedFd, buf: &mut [u8], limit: Duration) -> io::Result<bool> {
    let deadline = std::time::Instant::now() + limit;
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pollfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut pollfd, 1, ms) } {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer from the forked child",
                ))
            }
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
                continue;
            }
            _ => {}
        }
        // SAFETY: the pointer and length describe the unfilled part of buf.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        match n {
            0 => return Ok(false),
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(true)
}

fn write_byte(fd: &OwnedFd, byte: u8) -> io::Result<()> {
    loop {
        // SAFETY: writes one byte from a valid local.
        let n = unsafe { libc::write(fd.as_raw_fd(), (&byte as *const u8).cast(), 1) };
        if n == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if n < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(if n < 0 {
            e
        } else {
            io::Error::other("short write to the gate pipe")
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touching(path: &std::path::Path) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!("echo ran > '{}'", path.display()));
        cmd
    }

    #[test]
    fn the_child_runs_only_once_released() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mark = dir.path().join("ran");
        let gated = spawn_gated(touching(&mark), Vec::new()).expect("spawn");
        assert!(gated.pid() > 0);
        // Held at the gate: it has not exec'd the program.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!mark.exists(), "the child ran before it was released");
        let mut child = gated.release().expect("release");
        assert!(child.wait().expect("wait").success());
        assert!(mark.exists(), "the released child did not run");
    }

    #[test]
    fn an_aborted_or_dropped_child_never_runs_the_program() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mark = dir.path().join("ran");
        spawn_gated(touching(&mark), Vec::new())
            .expect("spawn")
            .abort();
        drop(spawn_gated(touching(&mark), Vec::new()).expect("spawn"));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!mark.exists(), "an aborted child ran the program");
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error_at_release() {
        let gated = spawn_gated(Command::new("/nonexistent/lotus-test"), Vec::new())
            .expect("the fork reaches the gate");
        let e = gated.release().expect_err("no such program");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}
