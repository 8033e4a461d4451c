//! The profiled process's end of the control channel: two pipe descriptors
//! named by `LOTUS_CONTROL_FDS`, one request line out, one reply line back.
//!
//! Raw `read(2)` / `write(2)` on the descriptors, no buffering layer: a
//! round trip is one write and (almost always) one read, and the buffers
//! are reused so a call does not allocate beyond encoding the request.

use std::io;
use std::os::fd::RawFd;

use lotus_protocol::{Reply, Request};

use crate::error::ControlError;
use crate::host::MAX_REQUEST;

/// A reply longer than this without a newline is garbage, not a reply.
const MAX_REPLY: usize = 64 * 1024;

/// The client end of the control channel.
#[derive(Debug)]
pub(crate) struct Channel {
    read_fd: RawFd,
    write_fd: RawFd,
    /// Bytes read from `read_fd` that do not yet make a full line.
    inbox: Vec<u8>,
}

impl Channel {
    /// Parses `"<read_fd>,<write_fd>"` and checks that both descriptors
    /// are open pipes (or sockets) usable in the right direction. They are
    /// left inheritable: a program this process executes (a native op the
    /// script starts) reaches lotus through them too. The error is a
    /// sentence naming the variable.
    pub(crate) fn from_env_value(var: &str, value: &str) -> Result<Channel, String> {
        let (r, w) = value
            .split_once(',')
            .ok_or_else(|| format!("{var}={value:?} is not \"<read_fd>,<write_fd>\""))?;
        let parse = |s: &str| -> Result<RawFd, String> {
            s.trim()
                .parse::<RawFd>()
                .ok()
                .filter(|fd| *fd >= 0)
                .ok_or_else(|| format!("{var}={value:?}: {s:?} is not a file descriptor number"))
        };
        let (read_fd, write_fd) = (parse(r)?, parse(w)?);
        if read_fd == write_fd {
            return Err(format!(
                "{var}={value:?}: the read and write descriptors are the same"
            ));
        }
        check_fd(var, read_fd, Direction::Read)?;
        check_fd(var, write_fd, Direction::Write)?;
        Ok(Channel {
            read_fd,
            write_fd,
            inbox: Vec::with_capacity(128),
        })
    }

    /// Sends `request` and waits for the reply.
    pub(crate) fn call(&mut self, request: &Request) -> Result<Reply, ControlError> {
        let line = request.encode();
        if line.len() > MAX_REQUEST {
            // The lotus side would drop it; refusing here says why at once
            // and leaves the channel usable.
            return Ok(Reply::Error(format!(
                "the request is {} bytes, over the control channel's {} KiB limit (is the op name really a name?)",
                line.len(),
                MAX_REQUEST / 1024
            )));
        }
        self.send(line.as_bytes())?;
        let line = self.read_line()?;
        let reply = match std::str::from_utf8(line) {
            Ok(text) => {
                Reply::decode(text).map_err(|_| ControlError::BadReply(text.to_string()))?
            }
            Err(_) => {
                return Err(ControlError::BadReply(
                    String::from_utf8_lossy(line).into_owned(),
                ))
            }
        };
        if self.inbox.len() > line_len(&self.inbox) {
            // One reply per request: anything after it was sent unasked,
            // and the next call would take it for its own reply.
            let extra = String::from_utf8_lossy(&self.inbox[line_len(&self.inbox)..]).into_owned();
            self.inbox.clear();
            return Err(ControlError::BadReply(format!(
                "unexpected data after the reply: {extra}"
            )));
        }
        self.inbox.clear();
        Ok(reply)
    }

    /// Sends `request` and goes on: for stamped window edges, which get no
    /// reply. The write blocks only while the pipe is full (lotus reads it
    /// continuously).
    pub(crate) fn send_only(&mut self, request: &Request) -> Result<(), ControlError> {
        let line = request.encode();
        if line.len() > MAX_REQUEST {
            return Err(ControlError::Refused {
                call: "lotus_resume",
                reason: format!(
                    "the request is {} bytes, over the control channel's {} KiB limit (is the op name really a name?)",
                    line.len(),
                    MAX_REQUEST / 1024
                ),
            });
        }
        self.send(line.as_bytes())
    }

    /// Closes both descriptors (after `detach`).
    pub(crate) fn close(self) {
        // SAFETY: the descriptors were handed to this process for the
        // channel and nothing else in it uses them; `self` is consumed so
        // they are not closed twice.
        unsafe {
            libc::close(self.read_fd);
            libc::close(self.write_fd);
        }
    }

    fn send(&mut self, mut bytes: &[u8]) -> Result<(), ControlError> {
        while !bytes.is_empty() {
            // SAFETY: `bytes` is a live slice; write(2) reads at most its length.
            let n = unsafe { libc::write(self.write_fd, bytes.as_ptr().cast(), bytes.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if err.raw_os_error() == Some(libc::EPIPE) {
                    return Err(ControlError::Closed);
                }
                return Err(ControlError::Channel {
                    what: "sending the request",
                    source: err,
                });
            }
            bytes = &bytes[n as usize..];
        }
        Ok(())
    }

    /// Reads until `inbox` holds a full line; returns it without its newline.
    fn read_line(&mut self) -> Result<&[u8], ControlError> {
        let mut chunk = [0u8; 256];
        while !self.inbox.contains(&b'\n') {
            if self.inbox.len() > MAX_REPLY {
                let start = String::from_utf8_lossy(&self.inbox[..80]).into_owned();
                self.inbox.clear();
                return Err(ControlError::BadReply(format!("{start}... (no newline)")));
            }
            spin_until_readable(self.read_fd, REPLY_SPIN);
            // SAFETY: `chunk` is a live buffer; read(2) writes at most its length.
            let n = unsafe { libc::read(self.read_fd, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ControlError::Channel {
                    what: "reading the reply",
                    source: err,
                });
            }
            if n == 0 {
                return Err(ControlError::Closed);
            }
            self.inbox.extend_from_slice(&chunk[..n as usize]);
        }
        let end = line_len(&self.inbox) - 1;
        let mut line = &self.inbox[..end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        Ok(line)
    }
}

/// How long a call polls for its reply before it blocks. The lotus side
/// answers within microseconds; blocking at once lets this CPU go idle, and
/// waking an idle virtual CPU costs 50-150 us on VMs, several times the
/// round trip itself.
const REPLY_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// Polls `fd` without blocking until it is readable or `limit` has passed.
fn spin_until_readable(fd: RawFd, limit: std::time::Duration) {
    let start = std::time::Instant::now();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n != 0 || start.elapsed() >= limit {
            return;
        }
        std::hint::spin_loop();
    }
}

/// The length of the first line in `buf`, newline included (the whole
/// buffer when it has none).
fn line_len(buf: &[u8]) -> usize {
    buf.iter()
        .position(|b| *b == b'\n')
        .map_or(buf.len(), |i| i + 1)
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Read,
    Write,
}

fn check_fd(var: &str, fd: RawFd, direction: Direction) -> Result<(), String> {
    let side = match direction {
        Direction::Read => "read",
        Direction::Write => "write",
    };
    // SAFETY: F_GETFL only queries the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(format!(
            "{var} names {side} descriptor {fd}, which is not open in this process \
             (was the variable inherited by a program lotus did not start?)"
        ));
    }
    let mode = flags & libc::O_ACCMODE;
    let usable = match direction {
        Direction::Read => mode == libc::O_RDONLY || mode == libc::O_RDWR,
        Direction::Write => mode == libc::O_WRONLY || mode == libc::O_RDWR,
    };
    // SAFETY: an all-zero `stat` is a valid value for fstat(2) to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat buffer.
    let is_pipe = unsafe { libc::fstat(fd, &mut st) } == 0
        && matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK);
    if !usable || !is_pipe {
        return Err(format!(
            "{var} names {side} descriptor {fd}, which is not a pipe open for {side}ing \
             (was the variable inherited by a program lotus did not start?)"
        ));
    }
    Ok(())
}
