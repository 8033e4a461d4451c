//! `<prefix>.sampling` while a sampled run goes on: written whole at the
//! start, its last word (done, failed and why) written in place at the
//! end, even on a full disk; and the trace folder made ready for samples.

use std::path::Path;

use lotus_samples::{write_sampling, SampleFiles};

use crate::error::{Context, Result, RunnerError};
use crate::progress::{MessageKind, Progress};

/// Bytes reserved at the end of `<prefix>.sampling` while the run goes on
/// (a `#` line, which readers skip): the last word (`status=failed`,
/// `reason=disk full ...`) can then be written in place over blocks the
/// file already holds, on a file system with no space left for a new file.
const STATUS_RESERVE: usize = 4096;

/// `<prefix>.sampling` as the run goes on: the description written whole
/// at the start, kept open so that its end can be written even when no
/// new file can be made (a full disk) or no allocation is possible (out
/// of memory: [`crate::oom::on_oom_write`]).
pub(crate) struct StatusFile {
    path: std::path::PathBuf,
    /// The file as written at the start (`status=running`, padded by
    /// [`STATUS_RESERVE`]).
    reserved: Option<std::fs::File>,
}

/// The text of a `.sampling` file for `pairs` (as `write_sampling` writes
/// it).
pub(crate) fn sampling_text(pairs: &[(&str, String)]) -> String {
    let mut text = format!("{}\n", lotus_samples::SAMPLING_TAG);
    for (k, v) in pairs {
        text += &format!("{k}={}\n", v.replace(['\n', '\r'], " "));
    }
    text
}

impl StatusFile {
    /// Writes the `running` description (with lotus's pid and start time,
    /// so that a reader can tell a lotus killed outright from one still
    /// running) and reserves room for the last word.
    pub(crate) fn start(path: &Path, pairs: &[(&str, String)]) -> Result<StatusFile> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        write_sampling(path, pairs).context_with(|| format!("cannot write {}", path.display()))?;
        let reserved = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .and_then(|mut f| {
                let mut pad = vec![b' '; STATUS_RESERVE];
                pad[0] = b'#';
                pad[STATUS_RESERVE - 1] = b'\n';
                std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0))?;
                f.write_all(&pad)?;
                Ok(f)
            })
            .ok();
        Ok(StatusFile {
            path: path.to_path_buf(),
            reserved,
        })
    }

    /// Writes the description `pairs` whole (a new file renamed over the
    /// old); where that fails (no space for a new file), over the reserved
    /// file in place.
    pub(crate) fn finish(&self, pairs: &[(&str, String)]) -> Result<()> {
        let whole = match write_sampling(&self.path, pairs) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let in_place = || -> std::io::Result<()> {
            use std::os::unix::fs::FileExt;
            let file = self.reserved.as_ref().ok_or(std::io::ErrorKind::NotFound)?;
            let text = sampling_text(pairs);
            file.write_all_at(text.as_bytes(), 0)?;
            file.set_len(text.len() as u64)?;
            Ok(())
        };
        in_place().map_err(|_| RunnerError::Context {
            context: format!("cannot write {}", self.path.display()),
            source: Box::new(whole),
        })
    }
}

/// Marks the sampling of `prefix` in `out` failed for `reason` (a trace
/// that could not be written, found once the job ended): `status=failed`
/// and `reason=` replace the status the run wrote.
pub fn mark_failed(out: &Path, prefix: &str, reason: &str) -> Result<()> {
    let files = SampleFiles::of(out, prefix);
    let pairs = files
        .read_sampling()
        .context_with(|| format!("cannot read {}", files.sampling.display()))?;
    if pairs
        .iter()
        .any(|(k, v)| k == "status" && v == "unavailable")
        || pairs.is_empty()
    {
        return Ok(());
    }
    let mut new: Vec<(&str, String)> = pairs
        .iter()
        .filter(|(k, _)| k != "status" && k != "reason")
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let [st, reason] = failed_pairs(reason);
    new.insert(0, st);
    new.insert(1, reason);
    let status = StatusFile {
        path: files.sampling.clone(),
        reserved: {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&files.sampling)
                .ok()
        },
    };
    status.finish(&new)
}

/// The `status=` and `reason=` of a run that went wrong: disk full where
/// `error` says so (ENOSPC), else `error` itself.
pub(crate) fn failed_pairs(error: &str) -> [(&'static str, String); 2] {
    let reason = if error.contains("No space left on device") || error.contains("os error 28") {
        format!("disk full: {error}")
    } else {
        error.to_string()
    };
    [("status", "failed".into()), ("reason", reason)]
}

/// Whether `path` is an empty regular file of this user's: what a run
/// killed (or failed) before its first write leaves, removed rather than
/// blocking the next run.
fn empty_and_ours(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    path.symlink_metadata()
        .is_ok_and(|m| m.is_file() && m.len() == 0 && m.uid() == me)
}

/// Removes the sample files of `prefix` in `out` (`--clean`), or fails
/// when there are some: samples of two runs cannot be told apart. Empty
/// files of this user's (a run killed before it sampled anything) hold no
/// samples: they are removed, with a note.
pub(crate) fn prepare(
    out: &Path,
    prefix: &str,
    clean: bool,
    progress: &mut dyn Progress,
) -> Result<()> {
    let files = SampleFiles::of(out, prefix);
    let existing = files.existing();
    if existing.is_empty() {
        return Ok(());
    }
    if !clean && existing.iter().all(|p| empty_and_ours(p)) {
        for path in &existing {
            std::fs::remove_file(path)
                .context_with(|| format!("cannot remove the empty {}", path.display()))?;
        }
        progress.message(
            MessageKind::Note,
            &format!(
                "note: removed the empty sample file(s) an earlier run left in {} ({})",
                out.display(),
                existing
                    .iter()
                    .map(|p| p.file_name().unwrap_or_default().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        return Ok(());
    }
    if !clean {
        return Err(RunnerError::Refused(format!(
            "{} already holds the samples of an earlier run ({}): use --clean to remove them, or another --out",
            out.display(),
            existing[0].display()
        )));
    }
    for path in existing {
        std::fs::remove_file(path)
            .context_with(|| format!("--clean: cannot remove {}", path.display()))?;
    }
    Ok(())
}

/// Whether `name` is one of the files a run of `prefix` leaves in its
/// trace folder `dir`: its logs (ITT tasks' too), its record
/// ([`crate::run_record::run_file`]) and its samples ([`SampleFiles`]).
fn is_runs_file(dir: &Path, name: &str, prefix: &str) -> bool {
    let f = SampleFiles::of(dir, prefix);
    crate::logs::is_log_of(name, prefix)
        || crate::logs::is_itt_log_of(name, prefix)
        || name == crate::run_record::run_file(prefix)
        || [&f.samples, &f.symbols, &f.sampling, &f.stacks]
            .iter()
            .any(|p| p.file_name() == Some(name.as_ref()))
}

/// Whether the folder `dir` is this user's and holds nothing but a run of
/// `prefix`'s files (regular files, no links, no folders).
fn holds_only_a_run(dir: &Path, prefix: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let meta = dir.symlink_metadata()?;
    if !meta.is_dir() || meta.uid() != me {
        return Ok(false);
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| is_runs_file(dir, n, prefix));
        if !ours || !entry.file_type()?.is_file() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Before a sampled run without `--clean`: where `out` holds the samples
/// of an earlier run and nothing but that run's files, the folder moves
/// to `<out>.old` (an earlier `.old` of the same kind is removed first),
/// as perf keeps `perf.data.old`, and `out` is made again, empty. Refused
/// where `out` holds other files too, or `<out>.old` is something else:
/// nothing of the user's is moved or removed.
pub(crate) fn set_aside_earlier_run(
    out: &Path,
    prefix: &str,
    progress: &mut dyn Progress,
) -> Result<()> {
    let files = SampleFiles::of(out, prefix);
    let existing = files.existing();
    if existing.iter().all(|p| empty_and_ours(p)) {
        // None, or empty ones that `prepare` removes.
        return Ok(());
    }
    let refuse = |why: String| {
        RunnerError::Refused(format!(
            "{} already holds the samples of an earlier run ({}){why}: use --clean to remove them, or another --out",
            out.display(),
            existing[0].display()
        ))
    };
    if !holds_only_a_run(out, prefix).context_with(|| format!("cannot list {}", out.display()))? {
        return Err(refuse(", and other files, so it is not moved aside".into()));
    }
    let mut old = out.as_os_str().to_owned();
    old.push(".old");
    let old = std::path::PathBuf::from(old);
    match old.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        _ => {
            if !holds_only_a_run(&old, prefix).unwrap_or(false) {
                return Err(refuse(format!(
                    ", and {} is not an earlier run's folder to replace",
                    old.display()
                )));
            }
            for entry in
                std::fs::read_dir(&old).context_with(|| format!("cannot list {}", old.display()))?
            {
                let path = entry
                    .context_with(|| format!("cannot list {}", old.display()))?
                    .path();
                std::fs::remove_file(&path)
                    .context_with(|| format!("cannot remove {}", path.display()))?;
            }
            std::fs::remove_dir(&old)
                .context_with(|| format!("cannot remove {}", old.display()))?;
        }
    }
    std::fs::rename(out, &old)
        .context_with(|| format!("cannot move {} to {}", out.display(), old.display()))?;
    lotus_sys::create_dir_all(out, 0o755).map_err(|e| RunnerError::Context {
        context: format!("cannot create the trace folder {} again", out.display()),
        source: Box::new(e),
    })?;
    progress.message(
        MessageKind::Note,
        &format!(
            "note: moved the earlier run in {} to {} (as perf keeps perf.data.old; --clean removes it instead)",
            out.display(),
            old.display()
        ),
    );
    Ok(())
}
