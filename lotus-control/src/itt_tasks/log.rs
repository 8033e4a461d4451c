//! The process's log of ITT tasks: created at its first block,
//! O_EXCL|O_NOFOLLOW, with the tracer's header and clock lines; blocks
//! written whole; a forked child forgets its parent's.

use std::io::Write;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use super::names::clean;
use super::{recording, Recording, MAX_NAMES, OPEN_WAIT_NS};
use lotus_sys::clock_ns;

/// The log: [`NOT_OPEN`], [`OPENING`], [`FAILED`] or its descriptor.
static LOG_FD: AtomicI32 = AtomicI32::new(NOT_OPEN);
const NOT_OPEN: i32 = -1;
const OPENING: i32 = -2;
const FAILED: i32 = -3;
/// Bumped in a forked child (see the module docs).
pub(super) static GENERATION: AtomicU64 = AtomicU64::new(0);

pub(super) fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// (wall, monotonic) read back to back: the tightest of a few reads, the
/// monotonic time midway (the tracer's `clock_pair`).
fn clock_pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let m0 = clock_ns(libc::CLOCK_MONOTONIC);
        let w = wall_ns();
        let m1 = clock_ns(libc::CLOCK_MONOTONIC);
        let spread = m1.saturating_sub(m0);
        if spread < best.0 {
            best = (spread, w, m0 + spread / 2);
        }
    }
    (best.1, best.2)
}

fn clock_line() -> String {
    let (wall, mono) = clock_pair();
    format!("# lotus-trace: clock wall_ns={wall} monotonic_ns={mono}\n")
}

/// The tracer's header line, for this process.
fn header(rec: &Recording, role: &str, pid: i32) -> String {
    let number = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| "-".into())
    };
    let mut host = [0u8; 256];
    // SAFETY: the buffer's length is passed.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|b| *b == 0).unwrap_or(host.len());
        clean(&String::from_utf8_lossy(&host[..end]), "-")
    } else {
        "-".into()
    };
    let (wall, mono) = clock_pair();
    format!(
        "#lotus-trace v1 role={role} pid={pid} host={host} rank={} local_rank={} world_size={} run={} wall_ns={wall} monotonic_ns={mono}\n# lotus-trace: ITT tasks received by lotus's collector\n",
        number("RANK"),
        number("LOCAL_RANK"),
        number("WORLD_SIZE"),
        rec.run
    )
}

/// Writes all of `data` to the O_APPEND log `fd`, or none of it: a write
/// cut short (a full file system, a file size limit) is taken back, so the
/// log only ever holds whole lines, which the reader then reads to the end.
fn write_whole(fd: i32, data: &[u8]) -> std::io::Result<()> {
    let mut written = 0;
    while written < data.len() {
        let rest = &data[written..];
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n >= 0 {
            written += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if written > 0 {
            // The offset is at the end of what this call wrote (O_APPEND);
            // once writes fail, no other thread's block can follow it.
            // SAFETY: plain system calls on our descriptor.
            unsafe {
                let end = libc::lseek(fd, 0, libc::SEEK_CUR);
                if end >= written as libc::off_t {
                    libc::ftruncate(fd, end - written as libc::off_t);
                }
            }
        }
        return Err(e);
    }
    Ok(())
}

/// Creates the log (O_EXCL|O_NOFOLLOW: never through a link, never onto a
/// file already there) and writes its header; returns its descriptor.
fn create_log(rec: &Recording) -> Result<i32, String> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: a plain system call.
    let pid = unsafe { libc::getpid() };
    let role = match std::env::var("LOTUS_TRACE_ROLE").as_deref() {
        Ok("worker") => "worker",
        _ => "main",
    };
    for n in 0..MAX_NAMES {
        let tag = if n == 0 {
            "itt".to_string()
        } else {
            format!("itt{n}")
        };
        let path = rec
            .dir
            .join(format!("{}.{tag}_{role}_pid_{pid}", rec.prefix));
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return Err(format!("{}: a NUL in the path", path.display()));
        };
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_APPEND
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EEXIST) | Some(libc::ELOOP) => continue,
                _ => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        if let Err(e) = write_whole(fd, header(rec, role, pid).as_bytes()) {
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        return Ok(fd);
    }
    Err(format!(
        "{MAX_NAMES} names for the ITT task log of pid {pid} in {} are all taken",
        rec.dir.display()
    ))
}

/// Tells `lotus trace run` that this process's ITT tasks are incomplete
/// (the tracer's way: a file in its private status folder).
fn report_failure(rec: &Recording, message: &str) {
    let _ = writeln!(std::io::stderr(), "lotus ITT collector: {message}");
    let Some(status) = &rec.status else { return };
    // SAFETY: a plain system call.
    let pid = unsafe { libc::getpid() };
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(status.join(format!("failed_pid_{pid}.itt")))
        .and_then(|mut f| f.write_all(message.as_bytes()));
}

/// The log's descriptor, created at the first block; `None` once writing
/// failed in this process.
fn log_fd(rec: &Recording) -> Option<i32> {
    let started = wall_ns();
    loop {
        match LOG_FD.load(Ordering::Acquire) {
            FAILED => return None,
            NOT_OPEN => {
                if LOG_FD
                    .compare_exchange(NOT_OPEN, OPENING, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                return match create_log(rec) {
                    Ok(fd) => {
                        LOG_FD.store(fd, Ordering::Release);
                        Some(fd)
                    }
                    Err(message) => {
                        LOG_FD.store(FAILED, Ordering::Release);
                        report_failure(rec, &format!("{message}; ITT tasks are not traced"));
                        None
                    }
                };
            }
            OPENING => {
                if wall_ns().saturating_sub(started) > OPEN_WAIT_NS {
                    return None;
                }
                std::thread::yield_now();
            }
            fd => return Some(fd),
        }
    }
}

/// Writes one thread's block of lines, and a clock line after it.
pub(super) fn write_block(lines: &[u8]) {
    let Some(rec) = recording() else { return };
    let Some(fd) = log_fd(rec) else { return };
    let mut block = Vec::with_capacity(lines.len() + 96);
    block.extend_from_slice(lines);
    block.extend_from_slice(clock_line().as_bytes());
    if let Err(e) = write_whole(fd, &block) {
        // The log's name, for the message: the descriptor's own link.
        let path =
            std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_else(|_| rec.dir.clone());
        if LOG_FD
            .compare_exchange(fd, FAILED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            report_failure(
                rec,
                &format!(
                    "cannot write the ITT task log {}: {e}; ITT tasks are traced no further in this process",
                    path.display()
                ),
            );
        }
    }
}

pub(super) extern "C" fn forget_parent_log() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let fd = LOG_FD.swap(NOT_OPEN, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the parent's descriptor, copied into this child.
        unsafe { libc::close(fd) };
    }
}
