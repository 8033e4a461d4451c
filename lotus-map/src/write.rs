//! Writing output files: atomically (a half-written file never replaces a
//! good one, and nothing half-written is left at the path however lotus
//! dies), through links only of this user, into devices and fifos in
//! place.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Context, MapError, Result};

/// The folder `path` is written in.
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Where writing a path lands.
enum Destination {
    /// A regular file (new or replaced), written through a temporary file
    /// beside it and a rename. Symbolic links are followed: the link stays,
    /// its target gets the text.
    File(PathBuf),
    /// A device, fifo or socket (`--out /dev/stdout`): written in place,
    /// there is nothing to rename over (and renaming over it would replace
    /// the device node).
    Special,
}

/// Refuses a symbolic link (at `path`, or one it leads to) owned by
/// another user: in a shared folder such a link would send lotus's output,
/// written as root, over any file. The kernel's `protected_symlinks` guard
/// does not apply here: the link is read with readlink(2), and the text
/// lands through a rename, not an open.
fn check_links(path: &Path) -> Result<()> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                lotus_backend_common::trust::check_entry(&p, true).map_err(|why| {
                    MapError::Output(format!(
                        "cannot write {}: the symbolic link {why}: another user's link could send the output over any file; remove it or write elsewhere",
                        path.display()
                    ))
                })?;
                let next = std::fs::read_link(&p)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                p = folder_of(&p).join(next);
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

fn destination(path: &Path) -> Result<Destination> {
    check_links(path)?;
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(MapError::Output(format!(
            "cannot write {}: it is a folder",
            path.display()
        ))),
        Ok(m) if m.is_file() => Ok(Destination::File(
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        )),
        Ok(_) => Ok(Destination::Special),
        Err(_) => {
            // Not there yet, or a link to nothing: a new file where the
            // link points.
            let mut p = path.to_path_buf();
            for _ in 0..40 {
                match std::fs::read_link(&p) {
                    Ok(next) => p = folder_of(&p).join(next),
                    Err(_) => break,
                }
            }
            Ok(Destination::File(p))
        }
    }
}

/// A new temporary file beside `target` (`.lotus-*.tmp`), created like any
/// file (0666 less the umask; tempfile's default is owner-only). Errors
/// name `shown`, the path the user gave.
fn temp_beside(target: &Path, shown: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = folder_of(target);
    tempfile::Builder::new()
        .prefix(".lotus-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "cannot write {}: cannot create a file in {}",
                shown.display(),
                dir.display()
            )
        })
}

/// Checks, before a long run, that `path` can be written: a file can be
/// made in its folder, and `path` is not a folder. Finding out after
/// minutes of profiling would lose the results.
pub fn check_writable(path: &Path) -> Result<()> {
    match destination(path)? {
        Destination::Special => Ok(()),
        // Dropped at once: the probe file is removed.
        Destination::File(target) => temp_beside(&target, path).map(drop),
    }
}

/// Writes `text` to `path` through an unnamed file in the same folder (see
/// [`Pending`]) and a rename, so a half-written file never replaces a good
/// one. A file that is replaced keeps its permissions; a symbolic link is
/// written through; a device or fifo (`/dev/stdout`) is written in place.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let pending = Pending::create(path)?;
    pending
        .file()
        .write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    pending.finish()
}

/// A large output written in full before it appears at its path (`lotus
/// trace view`'s JSON: gigabytes, minutes). It is written into an unnamed
/// file in the target's folder (`O_TMPFILE`), which vanishes with the
/// process however it dies, even by SIGKILL; [`Pending::finish`] links it
/// under a temporary name and renames it over the target. Where the file
/// system has no unnamed files, a `.lotus-*.tmp` file is used instead (left
/// behind only by SIGKILL). A device or fifo is written in place.
pub struct Pending {
    file: std::fs::File,
    how: How,
    shown: PathBuf,
}

enum How {
    Unnamed {
        target: PathBuf,
    },
    Named {
        tmp: tempfile::NamedTempFile,
        target: PathBuf,
    },
    Special,
}

impl Pending {
    /// Starts writing `path`. Errors name it and what to do.
    pub fn create(path: &Path) -> Result<Pending> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = || format!("cannot write {}", path.display());
        let (file, how) = match destination(path)? {
            Destination::Special => (
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(err)?,
                How::Special,
            ),
            Destination::File(target) => {
                let unnamed = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_TMPFILE)
                    .mode(0o666)
                    .open(folder_of(&target));
                let (file, how) = match unnamed {
                    Ok(f) => (
                        f,
                        How::Unnamed {
                            target: target.clone(),
                        },
                    ),
                    Err(_) => {
                        let tmp = temp_beside(&target, path)?;
                        let file = tmp.as_file().try_clone().with_context(err)?;
                        (
                            file,
                            How::Named {
                                tmp,
                                target: target.clone(),
                            },
                        )
                    }
                };
                if let Ok(meta) = std::fs::metadata(&target) {
                    // A replaced file keeps its permissions (best effort: a
                    // file we may not chmod still gets written).
                    let _ = file.set_permissions(meta.permissions());
                }
                (file, how)
            }
        };
        Ok(Pending {
            file,
            how,
            shown: path.to_path_buf(),
        })
    }

    /// The file to write.
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// Makes the new file readable by all (0644), whatever the umask; a
    /// device or fifo is left as it is.
    pub fn readable_by_all(&self) {
        if !matches!(self.how, How::Special) {
            // Best effort: the file is written either way.
            let _ = self
                .file
                .set_permissions(std::fs::Permissions::from_mode(0o644));
        }
    }

    /// Flushes the file to disk and puts it at its path, replacing what was
    /// there.
    pub fn finish(self) -> Result<()> {
        let err = || format!("cannot write {}", self.shown.display());
        match self.how {
            How::Special => Ok(()),
            How::Named { tmp, target } => {
                tmp.as_file().sync_all().with_context(err)?;
                tmp.persist(&target)
                    .map_err(|e| e.error)
                    .with_context(err)?;
                Ok(())
            }
            How::Unnamed { target } => {
                use std::os::fd::AsRawFd;
                use std::os::unix::ffi::OsStrExt;
                self.file.sync_all().with_context(err)?;
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let link =
                    folder_of(&target).join(format!(".lotus-{}-{stamp}.tmp", std::process::id()));
                let from =
                    std::ffi::CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
                        .with_context(err)?;
                let to = std::ffi::CString::new(link.as_os_str().as_bytes()).with_context(err)?;
                // SAFETY: linkat(2) with two NUL-terminated paths that live
                // across the call.
                let rc = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        from.as_ptr(),
                        libc::AT_FDCWD,
                        to.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error()).with_context(err);
                }
                std::fs::rename(&link, &target).map_err(|e| {
                    let _ = std::fs::remove_file(&link);
                    MapError::context(err(), e)
                })
            }
        }
    }
}
