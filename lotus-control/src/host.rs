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
//! use lotus_protocol::{Reply, Request};
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
//!         Request::Sampling { .. } => { /* stop or restart sampling outside windows */ }
//!         // Stamped edges: the process did not wait, so no reply.
//!         Request::OpenedAt { .. } | Request::ClosedAt { .. } => continue,
//!         _ => { /* a request of a newer version */ }
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

use lotus_protocol::{Reply, Request, ENV_CONTROL_FDS};

/// A request line longer than this is not a request. The control library
/// refuses to send one; a longer line from another writer is read to its
/// end, dropped, and answered with an error so that the writer, blocked on
/// its reply, sees it at once.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;

/// The request pipe's size asked for (the default unprivileged maximum,
/// `/proc/sys/fs/pipe-max-size`).
const REQUEST_PIPE_SIZE: libc::c_int = 1024 * 1024;

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
    /// Inside a line longer than [`MAX_REQUEST`]: bytes are dropped up to
    /// its newline.
    discarding: bool,
}

impl ControlHost {
    /// Opens the two pipes, all four ends close-on-exec (the child's ends
    /// are made inheritable in the child only).
    pub fn new() -> io::Result<Self> {
        let (request_read, request_write) = pipe()?;
        // Stamped window edges are written without waiting and read every
        // few milliseconds: room for many before a writer would block.
        // Best effort (the system may cap pipe sizes lower).
        // SAFETY: fcntl on a descriptor this function owns.
        unsafe {
            libc::fcntl(
                request_write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                REQUEST_PIPE_SIZE,
            )
        };
        let (reply_read, reply_write) = pipe()?;
        Ok(ControlHost {
            requests: File::from(request_read),
            replies: File::from(reply_write),
            child_read: Some(reply_read),
            child_write: Some(request_write),
            inbox: Vec::new(),
            discarding: false,
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
        // SAFETY: the hook only calls fcntl(2) (`clear_cloexec`), which is
        // async-signal-safe, on descriptors the parent keeps open until
        // after the spawn; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                fds.iter()
                    .try_for_each(|&fd| lotus_sys::process::clear_cloexec(fd))
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
    /// kind `TimedOut`. A line longer than 64 KiB is read to its end and
    /// dropped, then returned as an error of kind `InvalidData`: the writer
    /// waits for a reply, so answer it with [`Reply::Error`]; the channel
    /// stays usable.
    pub fn recv_line(&mut self, timeout: Option<Duration>) -> io::Result<Option<String>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(i) = self.inbox.iter().position(|b| *b == b'\n') {
                let rest = self.inbox.split_off(i + 1);
                let line = std::mem::replace(&mut self.inbox, rest);
                if std::mem::take(&mut self.discarding) {
                    // The end of an over-long line: the writer now waits
                    // for its reply, which the caller sends (an error).
                    return Err(too_long());
                }
                let text = String::from_utf8_lossy(&line[..i]).into_owned();
                return Ok(Some(text));
            }
            if self.inbox.len() > MAX_REQUEST || self.discarding {
                // Keep memory bounded and read on to the line's end: the
                // writer is still writing it and cannot read a reply yet.
                self.discarding = true;
                self.inbox.clear();
            }
            if let Some(deadline) = deadline {
                wait_readable(&self.requests, deadline)?;
            }
            let mut chunk = [0u8; 512];
            match self.requests.read(&mut chunk) {
                Ok(0) => {
                    if self.inbox.is_empty() && !self.discarding {
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

/// The error [`ControlHost::recv_line`] returns for a line longer than
/// [`MAX_REQUEST`] (once its end was read): answer it with an error reply.
fn too_long() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "control channel: a request line longer than {} KiB (an op name that long is not a name)",
            MAX_REQUEST / 1024
        ),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that is not the control library (which refuses to send
    /// such a line) sends an over-long request: the host reads it to its
    /// end, reports it once so the caller can reply, and reads the next
    /// request normally.
    #[test]
    fn an_over_long_request_is_reported_once_and_the_next_one_is_read() {
        let mut host = ControlHost::new().expect("pipes");
        let writer = host.child_write.take().expect("request write end");
        let sender = std::thread::spawn(move || {
            let mut w = File::from(writer);
            let mut line = b"resume ".to_vec();
            line.extend(std::iter::repeat_n(b'x', 3 * MAX_REQUEST));
            line.extend_from_slice(b"\npause\n");
            w.write_all(&line).expect("write");
        });
        let wait = Some(Duration::from_secs(30));
        let err = host.recv_line(wait).expect_err("too long");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("64 KiB"), "{err}");
        assert_eq!(host.recv_line(wait).expect("next"), Some("pause".into()));
        sender.join().expect("sender");
        assert!(
            host.inbox.capacity() < 4 * MAX_REQUEST,
            "memory stays bounded"
        );
        assert_eq!(host.recv_line(wait).expect("closed"), None);
    }
}
