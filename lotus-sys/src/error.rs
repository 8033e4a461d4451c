//! The one error type of the crate.

use std::io;
use std::path::PathBuf;

/// Why a file or folder could not be written or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A folder, link or special file on the way is not under the control
    /// of this user alone.
    #[error(
        "cannot {action} {}: {} {}; another user could swap it and send what lotus writes (as this user) elsewhere. Use a path whose folders and links only you and root can change (e.g. under your home folder), or remove what another user put there",
        path.display(),
        component,
        why
    )]
    Untrusted {
        /// What was being done ("write", "create the folder").
        action: &'static str,
        /// The path the caller gave.
        path: PathBuf,
        /// The component that failed the check, named with its kind ("the
        /// symbolic link /tmp/x").
        component: String,
        /// What is wrong with it ("is owned by user 65534, ...").
        why: String,
    },
    /// `TMPDIR` (or `/tmp`) fails the trust check: what lotus puts there
    /// (code the job runs) could be replaced by another user.
    #[error(
        "the temporary folder {} (TMPDIR) is not safe: {} {}; another user could replace what lotus puts there (code the profiled job runs). Set TMPDIR to a folder only you and root can write, e.g. `mkdir -m 700 ~/tmp && export TMPDIR=~/tmp`",
        tmpdir.display(),
        component,
        why
    )]
    UnsafeTmpDir {
        /// The temporary folder (`TMPDIR`, else `/tmp`).
        tmpdir: PathBuf,
        /// The component that failed the check, named with its kind.
        component: String,
        /// What is wrong with it.
        why: String,
    },
    /// The output path is a folder.
    #[error("cannot write {}: it is a folder; give the name of a file (in it or elsewhere)", path.display())]
    IsFolder {
        /// The path the caller gave.
        path: PathBuf,
    },
    /// The output path is a FIFO that no process reads: writing would wait
    /// forever.
    #[error("cannot write {}: it is a FIFO (named pipe) that no process is reading; start the reader first, or write to a regular file", path.display())]
    NoReader {
        /// The path the caller gave.
        path: PathBuf,
    },
    /// A system call failed. Its reason is part of the message and not
    /// also given as the error's `source()`: a caller that prints the
    /// chain (`anyhow`'s `{:#}`) says it once.
    #[error("cannot {action} {}: {reason}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path the caller gave (or the folder being made).
        path: PathBuf,
        /// What failed.
        reason: io::Error,
    },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for io::Error {
    /// For callers whose errors are `io::Error`s: the kind of the system
    /// call's error where there is one, the message whole.
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Io { reason, .. } => reason.kind(),
            Error::IsFolder { .. } => io::ErrorKind::IsADirectory,
            Error::NoReader { .. } => io::ErrorKind::BrokenPipe,
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, e.to_string())
    }
}
