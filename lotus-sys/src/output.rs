//! The output writer: every file lotus writes goes through
//! [`OutputFile`].

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys;
use crate::trust;
use crate::walk::{Folder, Walk};

/// Where the text goes once the path is walked.
enum Resolved {
    /// A regular file (new, or replaced by a rename) named `name` in `dir`.
    Replace { dir: Folder, name: CString },
    /// A FIFO, character device or the kernel's `/proc/self/fd/N`, written
    /// in place (opened when asked for).
    InPlace(Option<File>),
}

/// Walks `shown` to its last name and decides how it is written (see the
/// crate doc). `open` opens a special file (a check before a long run
/// must not: closing a FIFO would end its reader's input).
fn resolve(shown: &Path, open: bool) -> Result<Resolved> {
    let mut walk = Walk::start(shown, "write")?;
    loop {
        let Some(last) = walk.pop_back() else {
            return Err(Error::IsFolder {
                path: shown.to_path_buf(),
            });
        };
        walk.descend(None)?;
        if last == "." || last == ".." {
            return Err(Error::IsFolder {
                path: shown.to_path_buf(),
            });
        }
        let at = walk.here().path.join(&last);
        let name = sys::cstr(&last).map_err(|e| walk.fail(e))?;
        let dir = walk.here().fd.as_fd();
        let fd = match sys::openat(Some(dir), &name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(Resolved::Replace {
                    dir: walk.into_folder()?,
                    name,
                })
            }
            Err(e) => return Err(walk.fail(e)),
        };
        let st = sys::fstat(fd.as_fd()).map_err(|e| walk.fail(e))?;
        match sys::kind(&st) {
            libc::S_IFREG => {
                return Ok(Resolved::Replace {
                    dir: walk.into_folder()?,
                    name,
                })
            }
            libc::S_IFDIR => {
                return Err(Error::IsFolder {
                    path: shown.to_path_buf(),
                })
            }
            libc::S_IFLNK if sys::on_procfs(dir) => {
                // `/dev/stdout` -> `/proc/self/fd/1`: the kernel's link to
                // an open file (a pipe, a terminal, the file the shell
                // redirected to), owned by this process's user. Its text
                // ("pipe:[123]") is no path: the kernel follows it.
                walk.check(&at, &st, true)?;
                if !open {
                    return Ok(Resolved::InPlace(None));
                }
                let file = open_in_place(
                    &walk,
                    &name,
                    libc::O_APPEND, // a file the shell opened: after what is there
                    shown,
                )?;
                return Ok(Resolved::InPlace(Some(file)));
            }
            libc::S_IFLNK => {
                walk.follow(fd.as_fd(), &at, &st)?;
            }
            libc::S_IFIFO | libc::S_IFCHR => {
                if !trust::trusted_owner(st.st_uid) {
                    return Err(walk.refuse(
                        st.st_mode,
                        &at,
                        format!(
                            "is owned by user {}, not by this user ({}) or root",
                            st.st_uid,
                            sys::euid()
                        ),
                    ));
                }
                if !open {
                    return Ok(Resolved::InPlace(None));
                }
                let file = open_in_place(&walk, &name, libc::O_NOFOLLOW, shown)?;
                // The name may have been swapped between the look and the
                // open (only by this user or root: the folder passed).
                let now = sys::fstat(file.as_fd()).map_err(|e| walk.fail(e))?;
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(walk.fail(io::Error::other(
                        "it changed while lotus opened it; try again",
                    )));
                }
                return Ok(Resolved::InPlace(Some(file)));
            }
            _ => {
                return Err(walk.refuse(
                    st.st_mode,
                    &at,
                    "is not a file, FIFO or character device lotus can write".to_string(),
                ))
            }
        }
    }
}

/// Opens the special file `name` of the walk's folder for writing without
/// waiting: a FIFO nobody reads is an error at once, not a hang.
fn open_in_place(
    walk: &Walk<'_>,
    name: &CString,
    extra: libc::c_int,
    shown: &Path,
) -> Result<File> {
    let fd = sys::openat(
        Some(walk.here().fd.as_fd()),
        name,
        libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY | extra,
        0,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENXIO) => Error::NoReader {
            path: shown.to_path_buf(),
        },
        Some(libc::EISDIR) => Error::IsFolder {
            path: shown.to_path_buf(),
        },
        _ => walk.fail(e),
    })?;
    sys::set_blocking(fd.as_fd()).map_err(|e| walk.fail(e))?;
    Ok(File::from(fd))
}

/// The temporary file a replacing write goes to.
enum Temp {
    /// `O_TMPFILE`: no name until committed, gone however lotus dies.
    Unnamed,
    /// A `.lotus-*.tmp` name in the folder, removed on drop.
    Named(CString),
    /// Renamed over the target.
    Done,
}

enum How {
    Replace {
        dir: OwnedFd,
        folder: PathBuf,
        name: CString,
        temp: Temp,
    },
    InPlace,
}

/// Whether `/proc/self/fd` can name an unnamed file (for `linkat`).
fn proc_fd_works() -> bool {
    Path::new("/proc/self/fd").is_dir()
}

fn temp_name() -> Result<CString, io::Error> {
    CString::new(format!(".lotus-{}.tmp", sys::random_name(12)))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Makes the temporary file in the folder `dir`, with mode 0666 less the
/// umask (never the mode of the file it will replace).
fn new_temp(dir: &Folder, shown: &Path) -> Result<(File, Temp)> {
    let fail = |e: io::Error| Error::Io {
        action: "write",
        path: shown.to_path_buf(),
        reason: io::Error::new(
            e.kind(),
            format!("cannot create a file in {}: {e}", dir.path.display()),
        ),
    };
    if proc_fd_works() {
        match sys::openat(
            Some(dir.fd.as_fd()),
            c".",
            libc::O_TMPFILE | libc::O_WRONLY,
            0o666,
        ) {
            Ok(fd) => return Ok((File::from(fd), Temp::Unnamed)),
            // No unnamed files on this file system: a named one.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) => {}
            Err(e) => return Err(fail(e)),
        }
    }
    loop {
        let name = temp_name().map_err(fail)?;
        match sys::openat(
            Some(dir.fd.as_fd()),
            &name,
            libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY,
            0o666,
        ) {
            Ok(fd) => return Ok((File::from(fd), Temp::Named(name))),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(fail(e)),
        }
    }
}

/// An output file being written. Nothing appears at the path until
/// [`OutputFile::commit`]: the text goes to a temporary file in the
/// target's folder (unnamed where the file system allows, so nothing is
/// left however lotus dies), which is then renamed over the name within
/// the folder already opened. Dropped without a commit, the temporary
/// file is removed and the path keeps what it had.
///
/// A FIFO or character device at the path (`/dev/stdout`, `/dev/null`, a
/// pipe), owned by this user or root, is written in place.
pub struct OutputFile {
    file: File,
    how: How,
    shown: PathBuf,
}

impl std::fmt::Debug for OutputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFile")
            .field("path", &self.shown)
            .finish_non_exhaustive()
    }
}

impl OutputFile {
    /// Starts writing `path` (relative to the working folder). Refused,
    /// with an error naming `path`, the component at fault and what to do:
    /// a folder or link on the way that another user owns or can write
    /// (a sticky folder may be on the way); a link, FIFO or device at the
    /// name that another user owns; a folder at the name; a FIFO that no
    /// process reads.
    pub fn create(path: &Path) -> Result<OutputFile> {
        let (file, how) = match resolve(path, true)? {
            Resolved::InPlace(Some(file)) => (file, How::InPlace),
            Resolved::InPlace(None) => {
                return Err(Error::Io {
                    action: "write",
                    path: path.to_path_buf(),
                    reason: io::Error::other("it was not opened"),
                })
            }
            Resolved::Replace { dir, name } => {
                let (file, temp) = new_temp(&dir, path)?;
                (
                    file,
                    How::Replace {
                        dir: dir.fd,
                        folder: dir.path,
                        name,
                        temp,
                    },
                )
            }
        };
        Ok(OutputFile {
            file,
            how,
            shown: path.to_path_buf(),
        })
    }

    /// The file to write.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The path given to [`OutputFile::create`].
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Flushes the text to disk and puts it at the path, replacing what
    /// was there.
    pub fn commit(mut self) -> Result<()> {
        let shown = self.shown.clone();
        let fail = |source: io::Error| Error::Io {
            action: "write",
            path: shown.clone(),
            reason: source,
        };
        let How::Replace {
            dir,
            folder,
            name,
            temp,
        } = &mut self.how
        else {
            return self.file.flush().map_err(fail);
        };
        self.file.sync_all().map_err(fail)?;
        if matches!(temp, Temp::Unnamed) {
            loop {
                let tmp = temp_name().map_err(fail)?;
                match sys::link_unnamed(self.file.as_fd(), dir.as_fd(), &tmp) {
                    Ok(()) => {
                        *temp = Temp::Named(tmp);
                        break;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(e) => {
                        return Err(fail(io::Error::new(
                            e.kind(),
                            format!("cannot name the new file in {}: {e}", folder.display()),
                        )))
                    }
                }
            }
        }
        if let Temp::Named(tmp) = temp {
            sys::renameat(dir.as_fd(), tmp, name).map_err(fail)?;
        }
        *temp = Temp::Done;
        Ok(())
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let How::Replace {
            dir,
            temp: Temp::Named(tmp),
            ..
        } = &self.how
        {
            // Best effort: a failed write already reported its error.
            let _ = sys::unlinkat(dir.as_fd(), tmp, 0);
        }
    }
}

/// Writes `bytes` to `path` through an [`OutputFile`].
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = OutputFile::create(path)?;
    out.write_all(bytes).map_err(|source| Error::Io {
        action: "write",
        path: path.to_path_buf(),
        reason: source,
    })?;
    out.commit()
}

/// Checks, before a long run, that `path` can be written: the same walk
/// as [`OutputFile::create`], and a temporary file made (and removed) in
/// its folder. A FIFO is not opened (closing it would end its reader's
/// input).
pub fn check_writable(path: &Path) -> Result<()> {
    match resolve(path, false)? {
        Resolved::InPlace(_) => Ok(()),
        // Dropped at once: a named probe is removed.
        Resolved::Replace { dir, .. } => new_temp(&dir, path).map(|(_file, temp)| {
            if let Temp::Named(name) = temp {
                let _ = sys::unlinkat(dir.fd.as_fd(), &name, 0);
            }
        }),
    }
}

/// Makes the folder `path` and any missing folder above it (mode `mode`
/// less the umask), walking from `/` as [`OutputFile::create`] does: a
/// folder or link on the way that another user owns or can write is
/// refused, and so is one at `path` itself (a sticky folder may be on the
/// way, and may be `path`).
pub fn create_dir_all(path: &Path, mode: u32) -> Result<()> {
    crate::walk::open_folder(path, "create the folder", Some(mode)).map(drop)
}
