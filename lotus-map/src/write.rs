//! Writing output files: every one through `lotus_sys`'s one writer
//! (atomically: a half-written file never replaces a good one, and nothing
//! half-written is left at the path however lotus dies; through links only
//! of this user or root; folders on the way checked as for `trace run
//! --out`; into devices and FIFOs in place, a FIFO no one reads an error at
//! once). These are thin wrappers that give its errors as [`MapError`]s.

use std::path::Path;

use crate::error::{MapError, Result};

fn output_error(e: lotus_sys::Error) -> MapError {
    MapError::Output(e.to_string())
}

/// Checks, before a long run, that `path` can be written: the path passes
/// the writer's checks, a file can be made in its folder, and `path` is not
/// a folder. Finding out after minutes of profiling would lose the results.
pub fn check_writable(path: &Path) -> Result<()> {
    lotus_sys::check_writable(path).map_err(output_error)
}

/// Writes `text` to `path` through a temporary file in the same folder and
/// a rename (see [`Pending`]), so a half-written file never replaces a good
/// one. The new file has the mode the umask allows (never the mode of the
/// file it replaces); a link of this user or root is written through; a
/// device or FIFO (`/dev/stdout`) is written in place.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    lotus_sys::write_file(path, text.as_bytes()).map_err(output_error)
}

/// A large output written in full before it appears at its path (`lotus
/// trace view`'s JSON: gigabytes, minutes): an unnamed file in the target's
/// folder (`O_TMPFILE`), which vanishes with the process however it dies,
/// even by SIGKILL, until [`Pending::finish`] names it and renames it over
/// the target. A device or FIFO is written in place.
#[derive(Debug)]
pub struct Pending(lotus_sys::OutputFile);

impl Pending {
    /// Starts writing `path`. Errors name it and what to do.
    pub fn create(path: &Path) -> Result<Pending> {
        lotus_sys::OutputFile::create(path)
            .map(Pending)
            .map_err(output_error)
    }

    /// The file to write.
    pub fn file(&self) -> &std::fs::File {
        self.0.file()
    }

    /// Flushes the file to disk and puts it at its path, replacing what was
    /// there.
    pub fn finish(self) -> Result<()> {
        self.0.commit().map_err(output_error)
    }
}
