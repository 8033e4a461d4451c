//! How the job's processes report a trace they could not write: the
//! report pipe, and the status folder.

use std::io;
use std::path::Path;
use std::time::Duration;

/// The report pipe: the job inherits its write end (non-blocking: a full
/// pipe never stalls the job; the tracer then falls back to the status
/// folder); a thread of lotus reads it to its end, when every process of
/// the job is gone.
pub(crate) struct Reports {
    pub(crate) write: Option<std::os::fd::OwnedFd>,
    /// `<fd>:<inode>` for [`ENV_TRACE_REPORT`](lotus_tracer::ENV_TRACE_REPORT).
    pub(crate) env: String,
    pub(crate) read: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Reports {
    pub(crate) fn new() -> io::Result<Reports> {
        use std::os::fd::{AsFd, AsRawFd};
        let (read, write) = std::io::pipe()?;
        let write: std::os::fd::OwnedFd = write.into();
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fd = write.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let inode = {
            use std::os::unix::fs::MetadataExt;
            let dup = write.as_fd().try_clone_to_owned()?;
            std::fs::File::from(dup).metadata()?.ino()
        };
        let env = format!("{}:{inode}", write.as_raw_fd());
        let (send, recv) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("lotus-reports".into())
            .spawn(move || {
                use std::io::Read;
                let mut read = read;
                let mut all = Vec::new();
                // At most 1 MiB: a message is one line of a few hundred bytes.
                let _ = (&mut read).take(1 << 20).read_to_end(&mut all);
                let _ = send.send(all);
            })?;
        Ok(Reports {
            write: Some(write),
            env,
            read: recv,
        })
    }

    /// The write end's number, for the job to inherit.
    pub(crate) fn fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.write.as_ref().map(|w| w.as_raw_fd())
    }

    /// Closes lotus's copy of the write end (once the job is started).
    pub(crate) fn started(&mut self) {
        self.write = None;
    }

    /// The messages the job's processes wrote: waits up to `limit` for
    /// the pipe's end (every process of the job ended: lotus ended those it
    /// left), then takes what came.
    pub(crate) fn messages(mut self, limit: Duration) -> Vec<(String, String)> {
        self.write = None;
        let bytes = self.read.recv_timeout(limit).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| {
                let (pid, message) = l.split_once('\t')?;
                pid.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| (pid.to_string(), message.trim().to_string()))
            })
            .collect()
    }
}

/// What the processes that could not write their trace reported, through
/// the report pipe (`piped`) or in the status folder: one message per
/// process.
pub(crate) fn trace_failures(status: &Path, piped: Vec<(String, String)>) -> Vec<String> {
    let mut failures: Vec<(String, String)> = std::fs::read_dir(status)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("failed_pid_")?.to_string();
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let text = text.trim();
            Some((
                pid.clone(),
                if text.is_empty() {
                    format!("pid {pid} could not write its trace (no space left to say why?)")
                } else {
                    text.to_string()
                },
            ))
        })
        .collect();
    for (pid, message) in piped {
        if !failures.iter().any(|(p, _)| *p == pid) {
            failures.push((pid, message));
        }
    }
    failures.sort();
    failures.into_iter().map(|(_, m)| m).collect()
}
