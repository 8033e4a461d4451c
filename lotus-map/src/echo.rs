//! The profiled process's output, passed on to lotus's stderr through a
//! pipe, so that lotus knows whether it printed anything (a failure can
//! then say "see its output above" only when there is output above).
//!
//! A thread copies the pipe to stderr; it ends when every holder of the
//! write end is gone (the run's processes, which the reaper ends). Before
//! lotus prints a message of its own, [`Echo::settle`] lets the copy catch
//! up, so the process's last lines come before lotus's words about them.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the copying thread and lotus share.
struct Shared {
    read: OwnedFd,
    copied: AtomicU64,
    /// Set while a chunk read from the pipe is being written out.
    copying: AtomicBool,
}

/// A pipe for a child's stdout and stderr, echoed to lotus's stderr.
pub(crate) struct Echo {
    shared: Arc<Shared>,
    write: Option<OwnedFd>,
}

impl Echo {
    /// Opens the pipe and starts the copying thread.
    pub(crate) fn start() -> io::Result<Echo> {
        let (read, write) = io::pipe()?;
        let shared = Arc::new(Shared {
            read: read.into(),
            copied: AtomicU64::new(0),
            copying: AtomicBool::new(false),
        });
        let copier = shared.clone();
        std::thread::Builder::new()
            .name("lotus-echo".into())
            .spawn(move || copy(&copier))?;
        Ok(Echo {
            shared,
            write: Some(write.into()),
        })
    }

    /// The descriptor to give the child as its stdout and stderr
    /// ([`lotus_core::Target::output_fd`]).
    pub(crate) fn child_fd(&self) -> Option<RawFd> {
        self.write.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Drops lotus's copy of the write end (once the child has its own):
    /// the pipe then ends when the child and what it started are gone.
    pub(crate) fn close_write_end(&mut self) {
        self.write = None;
    }

    /// Waits (at most `limit`) until what is in the pipe has been echoed.
    pub(crate) fn settle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while (pending(self.shared.read.as_raw_fd()) > 0
            || self.shared.copying.load(Ordering::SeqCst))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the child has printed anything so far (echoed, or still in
    /// the pipe).
    pub(crate) fn printed(&self) -> bool {
        self.shared.copied.load(Ordering::SeqCst) > 0 || pending(self.shared.read.as_raw_fd()) > 0
    }
}

/// Bytes waiting in the pipe.
fn pending(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } < 0 {
        return 0;
    }
    usize::try_from(n).unwrap_or(0)
}

fn copy(shared: &Shared) {
    let mut file = std::fs::File::from(match shared.read.try_clone() {
        Ok(fd) => fd,
        Err(_) => return,
    });
    let mut buf = [0u8; 8192];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // (A reader of these flags may look between the read and here: it
        // then waits a moment less; nothing is lost.)
        shared.copying.store(true, Ordering::SeqCst);
        shared.copied.fetch_add(n as u64, Ordering::SeqCst);
        // lotus's stderr gone (a closed terminal) is no reason to stop
        // draining: the child would block on a full pipe.
        let _ = io::stderr().lock().write_all(&buf[..n]);
        shared.copying.store(false, Ordering::SeqCst);
    }
    shared.copying.store(false, Ordering::SeqCst);
}
