//! Thin, safe wrappers of the `*at` system calls the walk and the folders
//! use, over `libc`: a dozen one-line calls, written when the crate
//! depended on libc alone. The crate now also uses `rustix` (for
//! `openat2` with `RESOLVE_BENEATH` in [`crate::input`]), which offers
//! these calls too; moving them onto it is possible, not needed.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// `s` as a C string (a NUL in it is an error, not a panic).
pub(crate) fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Retries `f` while it fails with EINTR.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`; `dir` `None` is the
/// working folder.
pub(crate) fn openat(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let fd = retry(|| {
        // SAFETY: `name` is NUL-terminated and lives across the call; the
        // mode is passed as the variadic argument open(2) reads.
        check(unsafe {
            libc::openat(
                dirfd,
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        })
    })?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat(fd)`.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// The file-type bits of a mode.
pub(crate) fn kind(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// The text of the link `fd` was opened on (`O_PATH|O_NOFOLLOW`).
pub(crate) fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<OsString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: the empty path reads the link `fd` itself (Linux 2.6.39+);
    // `buf` is writable for its whole length.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// `mkdirat(dir, name, mode)`.
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and lives across the call.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `unlinkat(dir, name, flags)`.
pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and lives across the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat(dir, from, dir, to)`.
pub(crate) fn renameat(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> io::Result<()> {
    // SAFETY: both names are NUL-terminated and live across the call.
    check(unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) })
        .map(drop)
}

/// Gives the unnamed (`O_TMPFILE`) file `fd` the name `name` in `dir`
/// (through `/proc/self/fd`, which needs no privilege).
pub(crate) fn link_unnamed(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let from = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both names are NUL-terminated and live across the call.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// `fchmod(fd, mode)`.
pub(crate) fn fchmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: plain call on a live descriptor.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// Clears `O_NONBLOCK` on `fd`.
pub(crate) fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a live descriptor.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })
        .map(drop)
}

/// Whether `fd` is on a proc file system (its links are the kernel's, not
/// text: `/proc/self/fd/1` may name a pipe).
pub(crate) fn on_procfs(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: an all-zero statfs is a valid value of the plain C struct.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is live and writable.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut s) };
    // The field's type differs between targets (i64, u32): compare wide.
    #[allow(clippy::unnecessary_cast)]
    let same = s.f_type as i64 == libc::PROC_SUPER_MAGIC as i64;
    rc == 0 && same
}

/// The names in the folder `dir` (not `.` and `..`).
pub(crate) fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    // A descriptor that can be read (`dir` may be `O_PATH`).
    let fd = openat(Some(dir), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw: RawFd = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: `raw` is an open folder descriptor that fdopendir takes over.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: `stream` is a live DIR*; errno is cleared first so that
        // the end of the folder can be told from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: as above.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: `stream` is live and closed once.
            unsafe { libc::closedir(stream) };
            return match e.raw_os_error() {
                Some(0) | None => Ok(names),
                Some(_) => Err(e),
            };
        }
        // SAFETY: d_name is NUL-terminated inside the entry readdir gave.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
}

/// `n` random bytes as lowercase letters and digits, for names others
/// cannot guess (getrandom(2); the clock and pid where it fails).
pub(crate) fn random_name(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; n];
    // SAFETY: `bytes` is writable for its whole length. The system call,
    // not glibc's wrapper (2.25): the wheel's binary needs glibc 2.17.
    let got = unsafe { libc::syscall(libc::SYS_getrandom, bytes.as_mut_ptr(), n, 0) };
    if got < 0 || got as usize != n {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ u128::from(std::process::id());
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (seed >> ((i * 5) % 120)) as u8;
        }
    }
    bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
