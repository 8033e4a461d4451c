//! The `lotus_trace` package written for the job: a private folder first
//! on its `PYTHONPATH`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

/// The tracer's files, relative to the folder they are written to (the
/// `lotus_tracer` crate owns them, shared with the wheel).
pub(crate) const TRACER_FILES: &[(&str, &str)] = lotus_tracer::TRACER_FILES;

/// The tracer written to a private folder; removed on drop.
#[derive(Debug)]
pub(crate) struct TracerFiles {
    /// The private folder (0700); `lotus_trace/` is in it.
    pub(crate) dir: lotus_sys::PrivateDir,
    /// The folder of the start-up hook (`lotus_trace/_boot`).
    pub(crate) boot: PathBuf,
}

impl TracerFiles {
    /// `PYTHONPATH` with the start-up hook and the package first, then
    /// `existing` (the caller's `PYTHONPATH`).
    pub(crate) fn pythonpath(&self, existing: Option<&OsStr>) -> OsString {
        let mut parts = vec![self.boot.clone(), self.dir.path().to_path_buf()];
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            parts.extend(std::env::split_paths(existing));
        }
        std::env::join_paths(parts).unwrap_or_else(|_| {
            // A path with ':' in it cannot be joined; put ours first anyway.
            let mut v = self.boot.as_os_str().to_owned();
            v.push(":");
            v.push(self.dir.path());
            if let Some(e) = existing {
                v.push(":");
                v.push(e);
            }
            v
        })
    }
}

/// Writes the `lotus_trace` package (and its start-up hook) into a fresh
/// private folder (mode 0700, in a `TMPDIR` that passes the trust check,
/// refused otherwise: the job runs the `sitecustomize` there). Folders
/// left by a `trace run` that was killed are removed first.
pub(crate) fn write_tracer() -> io::Result<TracerFiles> {
    let dir = lotus_sys::PrivateDir::new("lotus-trace-")?;
    let mut made = std::collections::BTreeSet::new();
    for (rel, text) in TRACER_FILES {
        let rel = Path::new(rel);
        // The package's folders, outermost first, each made once.
        let mut parents: Vec<&Path> = rel.ancestors().skip(1).collect();
        parents.reverse();
        for parent in parents.into_iter().filter(|p| !p.as_os_str().is_empty()) {
            if made.insert(parent.to_path_buf()) {
                dir.create_dir(parent)?;
            }
        }
        dir.write(rel, text.as_bytes())?;
    }
    // Job processes that run as another user import the tracer too (see
    // `readable_by_all`); the status folder made later stays 0700.
    let mut shared: Vec<&Path> = made.iter().map(PathBuf::as_path).collect();
    shared.extend(TRACER_FILES.iter().map(|(rel, _)| Path::new(*rel)));
    dir.readable_by_all(&shared)?;
    let boot = dir.path().join("lotus_trace").join("_boot");
    Ok(TracerFiles { dir, boot })
}
