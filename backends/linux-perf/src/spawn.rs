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

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::thread::JoinHandle;

use lotus_core::{ProfilerError, Target};

/// The byte that lets the child exec.
const GO: u8 = b'g';

/// A forked child waiting at the gate.
pub(crate) struct GatedChild {
    pid: u32,
    go: Option<OwnedFd>,
    spawner: Option<JoinHandle<io::Result<Child>>>,
    program: String,
}

/// Forks the target and waits until it stands at the gate.
pub(crate) fn spawn_gated(target: &Target) -> Result<GatedChild, ProfilerError> {
    let program = target.program.display().to_string();
    let spawn_err = |source: io::Error| ProfilerError::Spawn {
        program: program.clone(),
        source,
    };
    let (ready_r, ready_w) = pipe().map_err(spawn_err)?;
    let (go_r, go_w) = pipe().map_err(spawn_err)?;

    let mut cmd = Command::new(&target.program);
    cmd.args(&target.args);
    for (k, v) in &target.env {
        cmd.env(k, v);
    }
    if let Some(cwd) = &target.cwd {
        cmd.current_dir(cwd);
    }
    // Its own group, so kill() reaches every worker it starts.
    cmd.process_group(0);
    let keep: Vec<RawFd> = target.keep_fds.clone();
    let ready_fd = ready_w.as_raw_fd();
    let go_fd = go_r.as_raw_fd();
    // SAFETY: the hook runs between fork and exec and calls only
    // async-signal-safe functions (fcntl, getpid, write, read); it does not
    // allocate (io::Error from an errno does not).
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &keep {
                lotus_backend_common::clear_cloexec(fd)?;
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
    let spawner = std::thread::Builder::new()
        .name("lotus-perf-spawn".into())
        .spawn(move || {
            let result = cmd.spawn();
            drop((ready_w, go_r));
            result
        })
        .map_err(spawn_err)?;

    let mut buf = [0u8; 4];
    match read_full(&ready_r, &mut buf) {
        Ok(true) => Ok(GatedChild {
            pid: u32::from_ne_bytes(buf),
            go: Some(go_w),
            spawner: Some(spawner),
            program,
        }),
        Ok(false) | Err(_) => {
            drop(go_w);
            let source = match spawner.join() {
                Ok(Err(e)) => e,
                Ok(Ok(mut child)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    io::Error::other("the child exited before reaching the profiling gate")
                }
                Err(_) => io::Error::other("the spawning thread panicked"),
            };
            Err(ProfilerError::Spawn { program, source })
        }
    }
}

impl GatedChild {
    /// The child's pid (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec the program; returns it once exec succeeded.
    pub(crate) fn release(mut self) -> Result<Child, ProfilerError> {
        let go = self.go.take();
        let written = match &go {
            Some(fd) => write_byte(fd, GO),
            None => Err(io::Error::other("gate already used")),
        };
        drop(go);
        let joined = self.join();
        match (written, joined) {
            (Ok(()), Ok(child)) => Ok(child),
            (_, Err(source)) | (Err(source), Ok(_)) => Err(ProfilerError::Spawn {
                program: self.program.clone(),
                source,
            }),
        }
    }

    /// Closes the gate without letting the child run: it exits without
    /// exec'ing and is reaped.
    pub(crate) fn abort(mut self) {
        self.go = None;
        if let Ok(mut child) = self.join() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn join(&mut self) -> io::Result<Child> {
        match self.spawner.take() {
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked"))),
            None => Err(io::Error::other("the child was already released")),
        }
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        // Dropped without release: same as abort.
        self.go = None;
        if self.spawner.is_some() {
            if let Ok(mut child) = self.join() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
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

/// Fills `buf`; `Ok(false)` on EOF before it is full.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
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
