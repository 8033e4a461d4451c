//! The lotus process's end of the control channel.
//!
//! The lotus process makes a [`ControlHost`], passes its child ends to the
//! profiled process (the environment from [`ControlHost::child_env`] and
//! the descriptors from [`ControlHost::child_fds`], which the child must
//! inherit: `Target::keep_fds`, or [`ControlHost::configure`] for a plain
//! `Command`), closes its copies of the child ends after the spawn
//! ([`ControlHost::close_child_ends`]), then serves requests: read one with
//! [`ControlHost::recv`], switch the window, answer with
//! [`ControlHost::reply`]. The profiled process is blocked until the reply,
//! so a window is open before `lotus_resume` returns.
//!
//! ```no_run
//! use lotus_control::host::ControlHost;
//! use lotus_core::control::{Reply, Request};
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let mut host = ControlHost::new()?;
//! let mut cmd = Command::new("python3");
//! cmd.arg("op.py");
//! host.configure(&mut cmd);
//! let mut child = cmd.spawn()?;
//! host.close_child_ends();
//! while let Some(request) = host.recv(Some(Duration::from_secs(60)))? {
//!     match request {
//!         Request::Resume { .. } => { /* enable counters */ }
//!         Request::Pause | Request::Detach => { /* disable counters */ }
//!     }
//!     host.reply(&Reply::Ok)?;
//! }
//! child.wait()?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use lotus_core::control::{Reply, Request, ENV_CONTROL_FDS};

/// A request line longer than this is not a request.
const MAX_REQUEST: usize = 64 * 1024;

/// The lotus side of one control channel (two pipes).
#[derive(Debug)]
pub struct ControlHost {
    /// Where the profiled process's requests arrive.
    requests: File,
    /// Where replies go.
    replies: File,
    /// The profiled process's ends, until [`ControlHost::close_child_ends`].
    child_read: Option<OwnedFd>,
    child_write: Option<OwnedFd>,
    inbox: Vec<u8>,
}

impl ControlHost {
    /// Opens the two pipes, all four ends close-on-exec (the child's ends
    /// are made inheritable in the child only).
    pub fn new() -> io::Result<Self> {
        let (request_read, request_write) = pipe()?;
        let (reply_read, reply_write) = pipe()?;
        Ok(ControlHost {
            requests: File::from(request_read),
            replies: File::from(reply_write),
            child_read: Some(reply_read),
            child_write: Some(request_write),
            inbox: Vec::new(),
        })
    }

    /// The child's ends, `[read_fd, write_fd]`, for `Target::keep_fds`.
    /// Empty after [`ControlHost::close_child_ends`].
    pub fn child_fds(&self) -> Vec<RawFd> {
        match (&self.child_read, &self.child_write) {
            (Some(r), Some(w)) => vec![r.as_raw_fd(), w.as_raw_fd()],
            _ => Vec::new(),
        }
    }

    /// The variable that tells the control library where the channel is:
    /// `LOTUS_CONTROL_FDS=<read_fd>,<write_fd>`.
    pub fn child_env(&self) -> (OsString, OsString) {
        let fds = self.child_fds();
        let value = match fds.as_slice() {
            [r, w] => format!("{r},{w}"),
            _ => String::new(),
        };
        (ENV_CONTROL_FDS.into(), value.into())
    }

    /// Sets the variable on `cmd` and makes the child's ends inheritable in
    /// the child only (a `pre_exec` hook clearing their close-on-exec flag).
    pub fn configure(&self, cmd: &mut Command) {
        let (key, value) = self.child_env();
        cmd.env(key, value);
        let fds = self.child_fds();
        // SAFETY: the hook only calls fcntl(2), which is async-signal-safe,
        // on descriptors the parent keeps open until after the spawn.
        unsafe {
            cmd.pre_exec(move || {
                for fd in &fds {
                    let flags = libc::fcntl(*fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(*fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Closes this process's copies of the child's ends. Call it after the
    /// spawn: until then the request pipe never reaches end-of-file when
    /// the child exits.
    pub fn close_child_ends(&mut self) {
        self.child_read = None;
        self.child_write = None;
    }

    /// Waits for the next request line and returns it without its newline;
    /// `None` when the profiled process closed the channel (it exited, or
    /// detached and closed its ends). A `timeout` that passes is an error of
    /// kind `TimedOut`.
    pub fn recv_line(&mut self, timeout: Option<Duration>) -> io::Result<Option<String>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(i) = self.inbox.iter().position(|b| *b == b'\n') {
                let rest = self.inbox.split_off(i + 1);
                let line = std::mem::replace(&mut self.inbox, rest);
                let text = String::from_utf8_lossy(&line[..i]).into_owned();
                return Ok(Some(text));
            }
            if self.inbox.len() > MAX_REQUEST {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "control channel: a request line longer than 64 KiB",
                ));
            }
            if let Some(deadline) = deadline {
                wait_readable(&self.requests, deadline)?;
            }
            let mut chunk = [0u8; 512];
            match self.requests.read(&mut chunk) {
                Ok(0) => {
                    if self.inbox.is_empty() {
                        return Ok(None);
                    }
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "control channel: closed in the middle of a request",
                    ));
                }
                Ok(n) => self.inbox.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for the next request; `None` when the channel was closed. A
    /// line that is not a request is an `InvalidData` error.
    pub fn recv(&mut self, timeout: Option<Duration>) -> io::Result<Option<Request>> {
        match self.recv_line(timeout)? {
            None => Ok(None),
            Some(line) => Request::decode(&line)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Answers the request just received.
    pub fn reply(&mut self, reply: &Reply) -> io::Result<()> {
        self.send_raw(reply.encode().as_bytes())
    }

    /// Writes raw bytes to the reply pipe (tests use it to send garbage).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.replies.write_all(bytes)
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn wait_readable(file: &File, deadline: Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        let mut pfd = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "control channel: no request from the profiled process in time",
            ));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
